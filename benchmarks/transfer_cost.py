"""What one host-to-device copy of an inference batch costs, per way of making it, and what a forward pass
costs with its copies made one array at a time or packed into one buffer each way.

    python -m benchmarks.transfer_cost              # a league batch's 7 leaves, 256 learner rows
    python -m benchmarks.transfer_cost --rows 1024
    python -m benchmarks.transfer_cost --forward cartpole:256,atari:64   # InferencePolicy.act, both ways

The host copies each batch to the device in one explicit `jax.device_put` of the whole pytree
(seedleague/host/transfers.py), so that an accelerator sees one copy per batch. On the CPU backend
there is no copy to save, and the call's Python dispatch is what it costs; this prints that cost beside
the alternatives (device_put per leaf, `jnp.asarray`, and numpy handed straight to a jitted function,
which JAX's C++ dispatch takes), the median of 5 timings of `--calls` calls each. `--forward` times whole forward passes of a workload's preset
network (benchmarks/workloads.py) through `InferencePolicy.act`, inputs in and outputs back as numpy, with
`Transfers(packed=False)` (one copy per array) and `Transfers(packed=True)` (one buffer each way, unpacked and
packed inside the act's jitted call; seedleague.host.packing); on an accelerator the second is the host's
default.
"""

from __future__ import annotations

import argparse
import time
from typing import Any, Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np



def league_batch(rows: int, opponents: int = 4, observation_size: int = 11, actions: int = 2) -> tuple:
    """Slots, the learner's (observation, first, legal) and the opponents' [K, rows/K, ...] of the same."""
    rng = np.random.default_rng(0)
    per_opponent = max(1, rows // opponents)
    learner = (rng.random((rows, observation_size), np.float32), np.zeros(rows, bool), np.ones((rows, actions), bool))
    table = (rng.random((opponents, per_opponent, observation_size), np.float32),
             np.zeros((opponents, per_opponent), bool), np.ones((opponents, per_opponent, actions), bool))
    return np.arange(opponents, dtype=np.int32), learner, table


def median_us(call: Callable[[], Any], calls: int, repeats: int = 5) -> float:
    """Median over `repeats` timings of µs per call of `call` (after `calls // 10` warm-up calls)."""
    for _ in range(max(1, calls // 10)):
        jax.block_until_ready(call())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            jax.block_until_ready(call())
        times.append((time.perf_counter() - start) / calls * 1e6)
    return float(np.median(times))


def measure(rows: int, calls: int) -> dict[str, float]:
    """µs per call of each way of getting `league_batch(rows)` onto the default device."""
    tree = league_batch(rows)
    leaves = jax.tree.leaves(tree)
    device = jax.devices()[0]
    total = jax.jit(lambda *xs: sum(jnp.sum(x) for x in xs))
    return {
        "device_put(tree)": median_us(lambda: jax.device_put(tree, device), calls),
        "device_put per leaf": median_us(lambda: [jax.device_put(x, device) for x in leaves], calls),
        "jnp.asarray per leaf": median_us(lambda: [jnp.asarray(x) for x in leaves], calls),
        "device_put(tree), then a jitted sum": median_us(lambda: total(*jax.device_put(leaves, device)), calls),
        "numpy into the jitted sum": median_us(lambda: total(*leaves), calls),
    }


def measure_forward(workload_name: str, rows: int, calls: int) -> dict[str, float]:
    """µs per `InferencePolicy.act` of `rows` agents of a workload, with each way of copying."""
    from benchmarks.workloads import WORKLOADS
    from seedleague.host.policy import InferencePolicy
    from seedleague.host.transfers import Transfers

    workload = WORKLOADS[workload_name]
    network = workload.network()
    policy = InferencePolicy(network, network.init(jax.random.key(0)), version=0, seed=0, device=jax.devices()[0])
    rng = np.random.default_rng(0)
    shape, dtype = (rows, *workload.observation_shape), np.dtype(workload.observation_dtype)
    observation = (rng.random(shape) * 255).astype(dtype)
    first, legal, core = np.zeros(rows, bool), np.ones((rows, workload.num_actions), bool), network.initial_state(rows)
    results = {}
    for packed in (False, True):
        policy.transfers = Transfers(policy.device, packed=packed)
        results[f"act, {'packed' if packed else 'one copy per array'}"] = median_us(
            lambda: policy.act(observation.copy(), first.copy(), core, legal.copy()), calls)
    return results


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=256, help="learner rows in the batch")
    parser.add_argument("--calls", type=int, default=2000, help="calls per timing")
    parser.add_argument("--forward", help="comma-separated WORKLOAD:ROWS (benchmarks/workloads.py): time "
                                          "InferencePolicy.act with and without packing instead")
    args = parser.parse_args(argv)
    if args.forward:
        print(f"jax {jax.__version__}, {jax.devices()[0].platform}")
        for item in args.forward.split(","):
            name, rows = item.split(":")
            for label, us in measure_forward(name, int(rows), args.calls).items():
                print(f"{name:10s} {int(rows):5d} rows  {label:28s} {us:9.1f} µs")
        return
    print(f"jax {jax.__version__}, {jax.devices()[0].platform}, {len(jax.tree.leaves(league_batch(args.rows)))} leaves")
    for name, us in measure(args.rows, args.calls).items():
        print(f"{name:40s} {us:8.1f} µs")


if __name__ == "__main__":
    main()
