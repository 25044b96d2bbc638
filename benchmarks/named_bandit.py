"""A two-head contextual bandit for the named learner: does it learn a discrete and a continuous head at once?

One observation of two named tensors (a vector and a masked entity list), one action of two heads ("move", 3
choices; "aim", a Box [-2, 2]). Reward: 1 for move 2, minus |aim - tanh(vector[0])|, so the best aim depends on
the observation; the best mean reward is 1. Every step is a one-step episode acted on by the current params
(seedleague.rl.named_network.act) and learned from by the learner's update, with no host in between:

    .venv/bin/python -m benchmarks.named_bandit --continuous squashed --loss ppo

Prints the mean reward, P(move = 2) and the mean |aim - target| of the acting batch every 50 updates.
"""

from __future__ import annotations

import argparse

import jax
import numpy as np

from seedleague.rl.learner import init_train_state, make_update
from seedleague.rl.learner_config import LearnerConfig
from seedleague.rl.network_config import NetworkConfig
from seedleague.rl.named_network import NamedNetworkConfig, act, make_named_network
from seedleague.rl.named_spec import ActionSpec, ContinuousHead, DiscreteHead, ObservationSpec, TensorSpec
from seedleague.rl.types import NamedUnroll

BATCH = 64


def _two_rows(x) -> np.ndarray:
    """[B, ...] -> [B, 2, ...]: the acting row and a bootstrap row (unused after a terminal step)."""
    x = np.asarray(x)
    return np.stack([x, x], axis=1)


def _unroll(observation, action, behaviour, legal, reward, version) -> NamedUnroll:
    return NamedUnroll(
        observation={k: _two_rows(v) for k, v in observation.items()}, first=np.ones((BATCH, 2), bool),
        action={k: _two_rows(v) for k, v in action.items()},
        behaviour_params={k: _two_rows(v) for k, v in behaviour.items()},
        legal_mask={k: _two_rows(v) for k, v in legal.items()}, reward=_two_rows(reward.astype(np.float32)),
        terminated=np.tile([True, False], (BATCH, 1)), truncated=np.zeros((BATCH, 2), bool),
        policy_version=np.full((BATCH, 2), version, np.int32), core_state=())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--continuous", choices=("squashed", "clipped"), default="squashed")
    parser.add_argument("--loss", choices=("vtrace", "ppo", "mmd"), default="ppo")
    parser.add_argument("--updates", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    network = make_named_network(
        NamedNetworkConfig(NetworkConfig(hidden_sizes=(32,)), continuous=args.continuous),
        ObservationSpec((TensorSpec("vector", (2,), np.float32), TensorSpec("units", (3, 2), np.float32, masked=True))),
        ActionSpec((DiscreteHead("move", 3, has_legal_mask=True), ContinuousHead("aim", (-2.0,), (2.0,)))))
    config = LearnerConfig(loss=args.loss, kl_cost=0.1 if args.loss == "mmd" else 0.0, learning_rate=3e-3,
                           entropy_cost=0.001)
    state = init_train_state(config, network, jax.random.key(args.seed))
    update = make_update(config, network)
    act_jit = jax.jit(act, static_argnums=(0, 7))
    rng, key = np.random.default_rng(args.seed), jax.random.key(args.seed + 1)
    for step in range(args.updates + 1):
        observation = network.observation_spec.zeros((BATCH,))
        observation["vector"] = rng.normal(size=(BATCH, 2)).astype(np.float32)
        legal = {"move": np.ones((BATCH, 3), bool)}
        key, act_key = jax.random.split(key)
        action, behaviour, _ = act_jit(network, state.params, observation, np.ones(BATCH, bool), (), legal, act_key)
        move, aim = np.asarray(action["move"]), np.asarray(action["aim"])[:, 0]
        miss = np.abs(aim - np.tanh(observation["vector"][:, 0]))
        reward = (move == 2) - miss
        if step % 50 == 0:
            print(f"update {step}: mean reward {reward.mean():.3f}  P(move=2) {np.mean(move == 2):.2f}  "
                  f"|aim - target| {miss.mean():.3f}", flush=True)
        state, _ = update(state, _unroll(observation, action, behaviour, legal, reward, step))


if __name__ == "__main__":
    main()
