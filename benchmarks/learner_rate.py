"""Learner updates/s and samples/s: `make_update` on a synthetic batch of each preset's shape.

    python -m benchmarks.learner_rate                         # CartPole, Kuhn poker, connect_four and Atari presets
    python -m benchmarks.learner_rate --workloads atari --seconds 20

The batch lives on the device before timing, as the host's replay keeps it, so
this is the learner alone: forward and backward over B unrolls of T+1 rows, one
Adam step. samples/s counts the B x T rows an update trains on (env steps).
"""

from __future__ import annotations

import argparse
import sys
import time

import jax
import numpy as np

from benchmarks.workloads import WORKLOADS, Workload
from seedleague.rl.learner import init_train_state, make_update
from seedleague.rl.types import Unroll


def synthetic_batch(workload: Workload, batch: int, unroll_length: int, seed: int = 0) -> Unroll:
    """B unrolls of T+1 rows with random observations, actions and rewards, episodes starting now and then."""
    rng = np.random.default_rng(seed)
    rows = (batch, unroll_length + 1)
    shape = rows + workload.observation_shape
    if workload.observation_dtype == "uint8":
        observation = rng.integers(0, 256, shape, np.uint8)
    else:
        observation = rng.standard_normal(shape).astype(workload.observation_dtype)
    return Unroll(
        observation=observation,
        first=rng.random(rows) < 0.02,
        action=rng.integers(0, workload.num_actions, rows).astype(np.int32),
        behaviour_logits=rng.standard_normal(rows + (workload.num_actions,)).astype(np.float32),
        legal_mask=np.ones(rows + (workload.num_actions,), bool),
        reward=rng.standard_normal(rows).astype(np.float32),
        terminated=rng.random(rows) < 0.01,
        truncated=np.zeros(rows, bool),
        policy_version=np.zeros(rows, np.int32),
        core_state=workload.network().initial_state(batch),
    )


def update_times(workload: Workload, seconds: float, min_updates: int = 5) -> tuple[np.ndarray, float, int, int]:
    """(seconds per update after the compile, seconds of the first call (the compile), batch size, unroll length)
    with the preset's learner."""
    host = workload.host()
    network = workload.network()
    state = init_train_state(host.learner, network, jax.random.key(0))
    update = make_update(host.learner, network)
    batch = jax.device_put(synthetic_batch(workload, host.batch_size, host.unroll_length))
    start = time.perf_counter()
    state, metrics = update(state, batch)
    jax.block_until_ready(metrics)
    first_call = time.perf_counter() - start
    state, metrics = update(state, batch)
    jax.block_until_ready(metrics)
    times = []
    end = time.perf_counter() + seconds
    while len(times) < min_updates or time.perf_counter() < end:
        start = time.perf_counter()
        state, metrics = update(state, batch)
        jax.block_until_ready(metrics)
        times.append(time.perf_counter() - start)
    return np.asarray(times), first_call, host.batch_size, host.unroll_length


def measure(workload: Workload, seconds: float) -> dict:
    times, first_call, batch, unroll = update_times(workload, seconds)
    median = float(np.median(times))
    return dict(workload=workload.name, batch=batch, unroll=unroll, network=_describe(workload),
                steps=workload.host().learner.steps_per_update, updates_per_s=1 / median,
                samples_per_s=batch * unroll / median, updates=len(times), first_call_s=first_call)


def _describe(workload: Workload) -> str:
    network = workload.host().network
    return f"{network.torso} {'x'.join(map(str, network.hidden_sizes))}"


def table(rows: list[dict]) -> str:
    lines = ["| workload | network | batch x unroll | gradient steps per update | updates/s | samples/s "
             "| updates timed | first call (compile) |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['workload']} | {r['network']} | {r['batch']} x {r['unroll']} | {r['steps']} "
              f"| {r['updates_per_s']:,.1f} | {r['samples_per_s']:,.0f} | {r['updates']} | {r['first_call_s']:.1f} s |"
              for r in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="cartpole,kuhn,connect_four,atari", help=f"comma-separated, of {','.join(WORKLOADS)}")
    parser.add_argument("--seconds", type=float, default=5.0, help="timing window per workload (at least 5 updates)")
    args = parser.parse_args(argv)
    print(f"learner update rate, {jax.devices()[0].platform} JAX, median over the window\n")
    print(table([measure(WORKLOADS[name], args.seconds) for name in args.workloads.split(",")]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
