"""Model pool snapshots in object storage against a local directory: seconds per snapshot and bytes.

Starts moto's S3 server on loopback (a child process, as the tests do) and times `ModelPool.save` (orbax
save, read-back verification, and for the store the upload and its marker) and `ModelPool.restore` by a
second host with an empty cache (for the store: the download into its cache) and again from that cache,
for states of a few sizes; medians of --repeats snapshots each.

    python -m benchmarks.object_store --repeats 7
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, NamedTuple

import numpy as np


class State(NamedTuple):
    params: Any
    step: Any


def _state(params: int, step: int) -> State:
    """A train state holding `params` float32 values in layers of at most 1M."""
    rng = np.random.default_rng(step)
    sizes = [min(2**20, params - i) for i in range(0, params, 2**20)]
    return State({f"layer{i}": rng.normal(size=n).astype(np.float32) for i, n in enumerate(sizes)},
                 np.asarray(step, np.int32))


def _start_s3() -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("moto's S3 server did not start")


def _bytes(directory: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, names in os.walk(directory) for f in names)


def measure(root: str, params: int, repeats: int, tmp: str) -> dict:
    """Median seconds to save a snapshot, to read it on a host with an empty cache, and again from its cache."""
    from seedleague.league.model_pool import ModelPool

    save, cold, warm = [], [], []
    writer = ModelPool(root)
    template = _state(params, 0)
    for step in range(1, repeats + 1):
        state = _state(params, step)
        start = time.perf_counter()
        writer.save("main", state, {"env_steps": step})
        save.append(time.perf_counter() - start)
        os.environ["XDG_CACHE_HOME"] = os.path.join(tmp, f"reader-{params}-{step}")  # a host that never read it
        reader = ModelPool(root)
        start = time.perf_counter()
        reader.restore(f"main:{step:06d}", template)
        cold.append(time.perf_counter() - start)
        start = time.perf_counter()
        reader.restore(f"main:{step:06d}", template)
        warm.append(time.perf_counter() - start)
        reader.close()
    writer.close()
    return {"save_s": statistics.median(save), "read_s": statistics.median(cold),
            "cached_read_s": statistics.median(warm)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--params", default="4096,1048576,8388608", help="state sizes in float32 values")
    args = parser.parse_args()
    server, endpoint = _start_s3()
    os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_DEFAULT_REGION="us-east-1")
    try:
        import s3fs

        s3fs.S3FileSystem(skip_instance_cache=True).mkdir("bench")
        print("| state | bytes per snapshot | where | save (s) | read, empty cache (s) | read, cached (s) |")
        print("|---|---|---|---|---|---|")
        with tempfile.TemporaryDirectory() as tmp:
            for params in [int(p) for p in args.params.split(",")]:
                local = os.path.join(tmp, f"local-{params}")
                for where, root in (("local directory", local), ("S3 (moto, loopback)", f"s3://bench/p{params}/pool")):
                    os.environ["XDG_CACHE_HOME"] = os.path.join(tmp, f"writer-{params}")
                    result = measure(root, params, args.repeats, tmp)
                    size = _bytes(os.path.join(local, "main", "1"))
                    print(f"| {params * 4 / 2**20:.2f} MiB of float32 | {size / 2**20:.2f} MiB | {where} | "
                          f"{result['save_s']:.3f} | {result['read_s']:.3f} | {result['cached_read_s']:.3f} |",
                          flush=True)
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
