"""Inference latency against batch size: the host's jitted `InferencePolicy.act`, numpy in and out.

    python -m benchmarks.inference_latency                          # CartPole MLP and Atari CNN, batch 8..4096
    python -m benchmarks.inference_latency --workloads cartpole --batches 64,1024

Each call is what the batcher pays for one forward pass: copy the padded batch
to the device, run the network, sample legal actions, copy actions, logits and
core state back. Batch sizes are the batcher's power-of-two buckets. After two
warm-up calls (the compile), calls repeat for at least `--seconds` and 20 calls
(at most 2,000, and at most 60 s once there are 5); p50 and p99 are over those
calls, so read the p99 of a row with few calls as its maximum.
"""

from __future__ import annotations

import argparse
import sys
import time

import jax
import numpy as np

from benchmarks.workloads import WORKLOADS, Workload
from seedleague.host.policy import InferencePolicy

DEFAULT_BATCHES = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


def act_times(workload: Workload, batch: int, seconds: float, min_calls: int = 20, max_calls: int = 2000,
              max_seconds: float = 60.0) -> np.ndarray:
    """Seconds per `act` call over a batch of `batch` agents, after the compile.

    At least `seconds` and `min_calls` calls, except that a row stops after
    `max_seconds` once it has 5 calls (the CNN at batch 4096 on a CPU).
    """
    network = workload.network()
    policy = InferencePolicy(network, network.init(jax.random.key(0)), 0, seed=0)
    rng = np.random.default_rng(0)
    shape = (batch,) + workload.observation_shape
    if workload.observation_dtype == "uint8":
        observation = rng.integers(0, 256, shape, np.uint8)
    else:
        observation = rng.standard_normal(shape).astype(workload.observation_dtype)
    first = np.zeros(batch, bool)
    legal = np.ones((batch, workload.num_actions), bool)
    core = network.initial_state(batch)
    for _ in range(2):
        policy.act(observation, first, core, legal)
    times = []
    begin = time.perf_counter()
    while len(times) < max_calls and (len(times) < min_calls or time.perf_counter() < begin + seconds):
        if len(times) >= 5 and time.perf_counter() > begin + max_seconds:
            break
        start = time.perf_counter()
        policy.act(observation, first, core, legal)
        times.append(time.perf_counter() - start)
    return np.asarray(times)


def measure(workload: Workload, batches, seconds: float) -> list[dict]:
    rows = []
    for batch in batches:
        times = act_times(workload, batch, seconds)
        p50, p99 = np.percentile(times, [50, 99])
        rows.append(dict(workload=workload.name, batch=batch, calls=len(times), p50_ms=1e3 * p50, p99_ms=1e3 * p99,
                         agents_per_s=batch / p50))
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| workload | batch | p50 ms | p99 ms | agent steps/s at p50 | calls |", "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['workload']} | {r['batch']} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} | {r['agents_per_s']:,.0f} "
              f"| {r['calls']} |" for r in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="cartpole,atari", help=f"comma-separated, of {','.join(WORKLOADS)}")
    parser.add_argument("--batches", default=",".join(map(str, DEFAULT_BATCHES)))
    parser.add_argument("--seconds", type=float, default=1.0, help="minimum timing window per row")
    args = parser.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    print(f"inference latency, {jax.devices()[0].platform} JAX\n")
    rows = []
    for name in args.workloads.split(","):
        rows += measure(WORKLOADS[name], batches, args.seconds)
    print(table(rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
