"""Microseconds per env step of each vector env kind the gym worker can build (no host, no policy).

    python -m benchmarks.vector_step                                   # CartPole-v1 and ALE/Pong-v5
    python -m benchmarks.vector_step --env Acrobot-v1 --envs 2,8 --seconds 3

For each env and env count: the probe's single-env step time (what "auto" measures),
then native (where the env has one), sync and async vector envs stepped with
random actions for `--seconds`, reported as the median over one-second windows
of wall-clock per env step. Async minus sync divided by the single step time is
what a subprocess costs; `envs.gym_vector.ASYNC_OVERHEAD_S` comes from this table
(benchmarks/README.md).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from envs.gym_vector import has_native_vector_env, make_one_fn, make_vector_env, probe_step_seconds, usable_cores


def step_microseconds(env_id: str, num_envs: int, mode: str, seconds: float) -> float:
    """Median wall-clock us per env step of `mode`'s vector env over one-second windows."""
    envs, _ = make_vector_env(env_id, num_envs, mode)
    try:
        rng = np.random.default_rng(0)
        space = envs.single_action_space
        envs.reset(seed=0)
        for _ in range(20):
            envs.step(rng.integers(space.start, space.start + space.n, num_envs))
        windows = []
        for _ in range(max(1, int(seconds))):
            start, steps = time.perf_counter(), 0
            while time.perf_counter() - start < 1.0:
                envs.step(rng.integers(space.start, space.start + space.n, num_envs))
                steps += num_envs
            windows.append(1e6 * (time.perf_counter() - start) / steps)
        return statistics.median(windows)
    finally:
        envs.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1,ALE/Pong-v5", help="comma-separated env ids")
    parser.add_argument("--envs", default="2,8,64", help="comma-separated env counts")
    parser.add_argument("--seconds", type=float, default=3.0, help="measurement per cell")
    args = parser.parse_args(argv)
    print(f"{usable_cores()} usable cores; us per env step, median of one-second windows\n")
    print("| env | envs | probe (one env) | native | sync | async |")
    print("|---|---:|---:|---:|---:|---:|")
    for env_id in args.env.split(","):
        probe_us = 1e6 * probe_step_seconds(make_one_fn(env_id), seconds=1.0)
        for num_envs in (int(n) for n in args.envs.split(",")):
            cells = []
            for mode in ("native", "sync", "async"):
                skip = mode == "native" and not has_native_vector_env(env_id)
                cells.append("none" if skip else f"{step_microseconds(env_id, num_envs, mode, args.seconds):.1f}")
            print(f"| {env_id} | {num_envs} | {probe_us:.1f} | {' | '.join(cells)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
