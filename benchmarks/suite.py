"""The benchmark suite (`make bench`): every table in benchmarks/README.md, one command.

    python -m benchmarks.suite                       # everything (about 30 minutes on 2 busy cores)
    python -m benchmarks.suite --quick               # shorter windows, fewer rows
    python -m benchmarks.suite --only latency,wire --out /tmp/bench.md

Each section is its own module, run in a fresh process (so JAX state, XLA flags
and worker processes never leak between sections); its table streams to the
console and the whole report, in markdown, goes to --out when given:

    throughput   env steps/s end to end (gRPC) and scaling with workers, beside the in-process limit
    latency      inference latency p50/p99 against batch size (jitted InferencePolicy.act)
    learner      learner updates/s and samples/s on synthetic batches (CartPole, Kuhn, Atari shapes)
    wire         bytes on the wire per env step (CartPole, Kuhn, Atari)
    devices      the sharded learner under N simulated devices (benchmarks/learner_scaling.py)
    gpu          Atari Pong frames/s on a GPU (benchmarks/gpu_pong.py; a note where there is no GPU)
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED_RL_ENV_STEPS_PER_S = 67_000 // 4  # SEED RL's 67K Atari frames/s, in env steps at frame skip 4


@dataclasses.dataclass(frozen=True)
class Section:
    """One table: a title, the module that prints it, its arguments in full and in --quick runs."""

    key: str
    title: str
    module: str
    full: tuple[str, ...] = ()
    quick: tuple[str, ...] = ()


SECTIONS = (
    Section("throughput", "Env steps/s end to end, scaling with workers, in-process limit", "benchmarks.throughput",
            (), ("--workers", "1,4", "--envs", "64", "--seconds", "4", "--warmup", "2")),
    Section("latency", "Inference latency against batch size", "benchmarks.inference_latency",
            (), ("--batches", "8,64,512,4096", "--seconds", "0.5")),
    Section("learner", "Learner updates/s and samples/s", "benchmarks.learner_rate",
            ("--seconds", "5"), ("--seconds", "2")),
    Section("wire", "Bytes on the wire per env step", "benchmarks.wire_bytes",
            ("--rate", str(SEED_RL_ENV_STEPS_PER_S)), ("--rate", str(SEED_RL_ENV_STEPS_PER_S))),
    Section("devices", "Scaling with simulated devices (sharded learner)", "benchmarks.device_scaling",
            ("--devices", "1,2,4"), ("--devices", "1,2", "--workloads", "cartpole", "--seconds", "2")),
    Section("gpu", "Atari Pong on a GPU", "benchmarks.gpu_pong", (), ("--seconds", "10", "--warmup", "10")),
)


def run_section(section: Section, quick: bool) -> str:
    """Run one section's module, echoing its output as it comes; returns it as markdown."""
    args = section.quick if quick else section.full
    print(f"\n## {section.title}\n\n$ python -m {section.module} {' '.join(args)}\n", flush=True)
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", section.module, *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines = []
    for line in proc.stdout:
        print(line, end="", flush=True)
        lines.append(line)
    status = proc.wait()
    output = "".join(lines).strip()
    took = f"_{time.perf_counter() - start:.0f} s_"
    if status and section.key == "gpu":  # no GPU: gpu_pong says so and exits 2
        return f"## {section.title}\n\n_skipped: {output.splitlines()[-1] if output else 'no GPU'}_"
    if status:
        return f"## {section.title}\n\n_failed with status {status}:_\n\n```\n{output[-3000:]}\n```"
    return f"## {section.title}\n\n`python -m {section.module} {' '.join(args)}`, {took}\n\n{output}"


def header() -> str:
    import jax

    return (f"# seedleague benchmarks, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC\n\n"
            f"{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}, JAX {jax.__version__} "
            f"({jax.devices()[0].platform})")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter windows and fewer rows")
    parser.add_argument("--only", default="", help=f"comma-separated sections, of {','.join(s.key for s in SECTIONS)}")
    parser.add_argument("--out", default="", help="also write the report here (markdown)")
    args = parser.parse_args(argv)
    wanted = set(args.only.split(",")) if args.only else {s.key for s in SECTIONS}
    unknown = wanted - {s.key for s in SECTIONS}
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; choose from {[s.key for s in SECTIONS]}")
    report = [header()]
    print(report[0], flush=True)
    for section in SECTIONS:
        if section.key in wanted:
            report.append(run_section(section, args.quick))
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n\n".join(report) + "\n")
        print(f"\nreport written to {args.out}")
    return 0 if not any("_failed with status" in part for part in report) else 1


if __name__ == "__main__":
    sys.exit(main())
