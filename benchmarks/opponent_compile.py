"""Compile and run time of the host's opponent pass against the number K of snapshots it seats.

    python -m benchmarks.opponent_compile 1 2 4 8 16 32

For each K: the fused learner-plus-opponents call as the host makes it (`seedleague.host.policy
._sample_slots`, vmapped over the K snapshots) and the same call with the loop over K unrolled
(what the host did until 2026-11-26), beside the learner's rows alone (self-play, K=0). The first call's
time includes the compile; the run time is the median of 200 calls. Learner rows 256, 16 rows per opponent, MLP 128x128, 30 inputs, 3 actions.
"""

import argparse
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from seedleague.host import policy
from seedleague.rl.networks import make_network
from seedleague.rl.network_config import NetworkConfig

LEARNER_ROWS, OPPONENT_ROWS, INPUTS, ACTIONS = 256, 16, 30, 3


def unrolled(network, table, slots, observation, first, core_state, legal_mask, rng, greedy):
    """The pass over K snapshots as K separate forward passes, unrolled when traced."""
    keys = jax.random.split(rng, slots.shape[0])
    outs = [policy._sample(network, jax.tree.map(lambda stacked: stacked[slots[k]], table), observation[k],
                           first[k], jax.tree.map(lambda x: x[k], core_state), legal_mask[k], keys[k], greedy)
            for k in range(slots.shape[0])]
    return jax.tree.map(lambda *xs: jnp.stack(xs), *outs)


def fused(opponent_pass):
    @functools.partial(jax.jit, static_argnames=("network",))
    def call(network, params, table, slots, learner_inputs, table_inputs, rng):
        rng, learner_rng, table_rng = jax.random.split(rng, 3)
        learner = policy._sample(network, params, *learner_inputs, learner_rng, False, 0.0)
        return learner, opponent_pass(network, table, slots, *table_inputs, table_rng, False), rng
    return call


def measure(call, *args, calls: int = 200) -> tuple[float, float]:
    start = time.perf_counter()
    jax.block_until_ready(call(*args))
    first = time.perf_counter() - start
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        jax.block_until_ready(call(*args))
        times.append(time.perf_counter() - start)
    return first, float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("counts", type=int, nargs="+", help="K, the snapshots seated in one batch")
    args = parser.parse_args()
    network = make_network(NetworkConfig(torso="mlp", hidden_sizes=(128, 128)), (INPUTS,), np.float32, ACTIONS)
    params = network.init(jax.random.key(0))
    learner_inputs = (jnp.zeros((LEARNER_ROWS, INPUTS)), jnp.zeros((LEARNER_ROWS,), bool), (),
                      jnp.ones((LEARNER_ROWS, ACTIONS), bool))
    alone = jax.jit(lambda params, inputs, rng: policy._sample(network, params, *inputs, rng, False, 0.0))
    first, run = measure(alone, params, learner_inputs, jax.random.key(1))
    print(f"K=  0  self-play (no table) first call {first * 1000:7.0f} ms  run median {run * 1000:.3f} ms", flush=True)
    for count in args.counts:
        table = jax.tree.map(lambda leaf: jnp.stack([leaf] * max(count, 8)), params)
        slots = jnp.arange(count, dtype=jnp.int32)
        table_inputs = (jnp.zeros((count, OPPONENT_ROWS, INPUTS)), jnp.zeros((count, OPPONENT_ROWS), bool), (),
                        jnp.ones((count, OPPONENT_ROWS, ACTIONS), bool))
        for name, opponent_pass in (("vmapped (the host)", policy._sample_slots), ("unrolled", unrolled)):
            first, run = measure(fused(opponent_pass), network, params, table, slots, learner_inputs, table_inputs,
                                 jax.random.key(1))
            print(f"K={count:3d}  {name:19s} first call {first * 1000:7.0f} ms  run median {run * 1000:.3f} ms",
                  flush=True)


if __name__ == "__main__":
    main()
