"""Load soak: many worker streams, some stalled, against one inference-only host on loopback.

    .venv/bin/python -m benchmarks.load_test                                   # the default table
    .venv/bin/python -m benchmarks.load_test --streams 400 --stalled 40 --seconds 60 --idle 10

The host (tests/test_load.py `load_host_config`: tiny MLP, learn=False) serves in this process;
the workers (`drive` from the same file: grpc.aio, one channel each) run in a child process, so
the RSS column is the host's alone. Stalled workers come in three kinds (silent after the
handshake, quiet after one step, never reading) and must be dropped after `--idle` seconds
(`SessionLimits.stream_idle_timeout_s`) while the fast ones keep stepping. One row per
(streams, stalled) pair: answers/s over all fast workers, p50/p99 step latency (and p99 while
stalled streams were still open), when the stalled ones were dropped, the batcher's largest
queue, sessions left after the run, and host RSS before and at its peak.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import math
import pathlib
import subprocess
import sys
import time

LOAD = pathlib.Path(__file__).resolve().parents[1] / "tests" / "test_load.py"


def load_module():
    spec = importlib.util.spec_from_file_location("load_driver", LOAD)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def child(args) -> None:
    """The worker side: run `drive` and print its result as one JSON line."""
    import asyncio

    driver = load_module()
    result = asyncio.run(driver.drive(args.drive, args.fast, args.stalled, args.seconds, args.idle))
    print(json.dumps(result.to_json()), flush=True)


def row(driver, streams: int, stalled: int, seconds: float, idle: float) -> dict:
    """One measured configuration: a fresh host, a warm-up, then the run."""
    from seedleague.host.host import Host
    from seedleague.metrics import Metrics
    from seedleague.testing.server_thread import ServerThread

    host = Host(driver.load_host_config(idle, max_workers=max(256, streams + stalled)), Metrics())
    with ServerThread(host) as server:
        _run_child(server.address, 8, 0, 2.0, idle)  # build the model and compile before measuring
        gc.collect()
        before = driver.rss_bytes()
        with driver.Watch(host, every_s=0.1) as watch:
            data = _run_child(server.address, streams, stalled, seconds, idle)
        time.sleep(0.5)
        attached = host.sessions.attached_count()
    host.stop()
    result = driver.LoadResult(**{k: v for k, v in data.items() if k in driver.LoadResult.__dataclass_fields__})
    drops = [quiet for kind, _, quiet, _ in result.stalled if not math.isnan(quiet)]
    return dict(
        streams=streams, stalled=stalled, answers_per_s=result.answers_per_s,
        p50_ms=result.percentile_ms(50), p99_ms=result.percentile_ms(99),
        p99_while_stalled_ms=result.percentile_ms(99, before=result.first_drop) if stalled else float("nan"),
        dropped_after_s=f"{min(drops):.2f}-{max(drops):.2f}" if drops else "-",
        statuses=sorted({code for _, code, _, _ in result.stalled}) or "-",
        max_queue=watch.max_queue, attached_after=attached, errors=len(result.errors),
        rss_mib=f"{before / 2**20:.0f} -> {watch.max_rss / 2**20:.0f}",
    )


def _run_child(address: str, fast: int, stalled: int, seconds: float, idle: float) -> dict:
    command = [sys.executable, "-m", "benchmarks.load_test", "--drive", address, "--fast", str(fast),
               "--stalled", str(stalled), "--seconds", str(seconds), "--idle", str(idle)]
    out = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 10 * idle + 120,
                         cwd=pathlib.Path(__file__).resolve().parents[1])
    if out.returncode != 0:
        raise RuntimeError(f"load driver failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


COLUMNS = ("streams", "stalled", "answers_per_s", "p50_ms", "p99_ms", "p99_while_stalled_ms", "dropped_after_s",
           "statuses", "max_queue", "attached_after", "errors", "rss_mib")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", default="50,200,200,400", help="fast streams per row (comma-separated)")
    parser.add_argument("--stalled", default="0,0,20,40", help="stalled streams per row (comma-separated)")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long fast workers step, per row")
    parser.add_argument("--idle", type=float, default=5.0, help="SessionLimits.stream_idle_timeout_s")
    parser.add_argument("--drive", help=argparse.SUPPRESS)  # child mode: the host's address
    parser.add_argument("--fast", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.drive:
        args.stalled = int(args.stalled)
        child(args)
        return 0
    driver = load_module()
    pairs = list(zip([int(s) for s in args.streams.split(",")], [int(s) for s in args.stalled.split(",")]))
    print("| " + " | ".join(COLUMNS) + " |\n|" + "---:|" * len(COLUMNS), flush=True)
    for streams, stalled in pairs:
        r = row(driver, streams, stalled, args.seconds, args.idle)
        print("| " + " | ".join(f"{r[c]:.0f}" if isinstance(r[c], float) else str(r[c]) for c in COLUMNS) + " |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
