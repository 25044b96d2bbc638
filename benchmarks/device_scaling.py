"""Scaling with simulated devices: `benchmarks/learner_scaling.py` (the sharded learner) under N fake CPU devices.

    python -m benchmarks.device_scaling --devices 1,2,4
    python -m benchmarks.device_scaling --devices 1,2 --workloads cartpole --seconds 2   # other flags go to it

Runs `python -m benchmarks.learner_scaling --devices D --simulated-devices N` in
a fresh process with XLA_FLAGS=--xla_force_host_platform_device_count=N (N = the
largest of D; learner_scaling starts one process per row with that flag itself)
and prints its table. The N devices share this machine's cores, so this shows
the sharding's overhead, not a speed-up; real scaling needs real devices. When
learner_scaling.py is not in the tree it says so and returns without measuring.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "learner_scaling.py")


def available() -> bool:
    return os.path.exists(SCRIPT)


def run(devices, extra_args=(), timeout_s: float = 1800.0) -> str:
    """learner_scaling's table for `devices` (mesh sizes), or a note that it is missing or failed."""
    if not available():
        return "_skipped: benchmarks/learner_scaling.py (the sharded learner's benchmark) is not in this tree._"
    simulated = max(devices)
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={simulated}".strip()
    env = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
    command = [sys.executable, "-m", "benchmarks.learner_scaling", "--devices", ",".join(map(str, devices)),
               "--simulated-devices", str(simulated), *extra_args]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout_s,
                            cwd=os.path.dirname(os.path.dirname(SCRIPT)))
    if result.returncode:
        return f"_learner_scaling failed with status {result.returncode}:_\n\n```\n{result.stderr.strip()[-2000:]}\n```"
    return result.stdout.strip()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="1,2,4", help="comma-separated mesh sizes (simulated devices)")
    args, extra = parser.parse_known_args(argv)
    text = run([int(d) for d in args.devices.split(",")], extra)
    print(text, flush=True)
    return 1 if text.startswith("_learner_scaling failed") else 0


if __name__ == "__main__":
    sys.exit(main())
