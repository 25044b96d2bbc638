"""What the learner's optimiser does to self-play, with the sampling taken away: simultaneous exact-gradient
play on a two-player OpenSpiel game's tabular softmax policies, stepped by `seedleague.rl.learner._optimizer`.

    python -m benchmarks.optimizer_dynamics kuhn_poker --alpha 0.05 --learning-rate 0.01 --steps 20000 \
        --optimizer adam=--adam-b1 0.9 --optimizer rmsprop=--adam-b1 0 \
        --optimizer optimistic=--adam-b1 0 --optimism 1

Each seat holds one logit per (information state, action) and ascends its entropy-regularised policy-gradient
objective, exactly:

    J_i(theta) = v_i(pi_theta) + alpha * sum_{s of seat i} reach(s) * H(pi_theta(. | s))

with v_i seat i's expected return and reach(s) the probability that play visits s (held fixed in the gradient,
as an on-policy learner's sampled states are). That is the expectation of what the game recipe's loss follows
(PPO's surrogate and an entropy bonus on the states play visits), with alpha as a temperature in the game's
reward units. Both seats step at once, as self-play's shared network does. The rest point is the agent
quantal-response equilibrium at temperature alpha (`benchmarks.qre_floor` solves it); whether the iterates get
there or circle it is the optimiser's doing. Prints the exploitability of the iterate at ten points of the run.
Measurements: benchmarks/README.md ("Adam's momentum and the last iterate").
"""

from __future__ import annotations

import argparse
import shlex

import jax
import jax.numpy as jnp
import numpy as np
import pyspiel

from seedleague.eval import game_tree
from seedleague.rl.learner import _optimizer
from seedleague.rl.learner_config import LearnerConfig

CHECKPOINTS = 10  # exploitability reported at this many evenly spaced points


def path_counts(tree: game_tree.GameTree) -> np.ndarray:
    """[N, S * A]: how often each (information state, action) is taken on the way to each history."""
    states, actions = tree.masks.shape
    counts = np.zeros((len(tree.parent), states * actions))
    for history, parent in enumerate(tree.parent):  # parents come before their children
        if parent >= 0:
            counts[history] = counts[parent]
            if tree.player[parent] >= 0:
                counts[history, tree.row[parent] * actions + tree.action[history]] += 1
    return counts


def gradient_field(tree: game_tree.GameTree, alpha: float):
    """theta -> minus each seat's gradient of its own J_i, each at its own information states' logits."""
    counts = path_counts(tree)
    terminal = np.flatnonzero(tree.player == game_tree.TERMINAL)
    decision = np.flatnonzero(tree.player >= 0)
    to_terminal = jnp.asarray(counts[terminal])
    weight = jnp.asarray(tree.chance[terminal] * tree.utility[terminal])
    to_decision, chance = jnp.asarray(counts[decision]), jnp.asarray(tree.chance[decision])
    row = jnp.asarray(tree.row[decision])
    mask, seat = jnp.asarray(tree.masks), jnp.asarray(tree.seat)
    states = len(tree.keys)

    def objective(theta, me):
        log_pi = jax.nn.log_softmax(jnp.where(mask, theta, -1e9), axis=-1)
        flat = jnp.where(mask, log_pi, 0.0).reshape(-1)
        value0 = jnp.sum(weight * jnp.exp(to_terminal @ flat))
        reach = jax.ops.segment_sum(chance * jnp.exp(jax.lax.stop_gradient(to_decision @ flat)), row, states)
        entropy = -jnp.sum(jnp.where(mask, jnp.exp(log_pi) * log_pi, 0.0), axis=-1)
        return (value0 if me == 0 else -value0) + alpha * jnp.sum(jnp.where(seat == me, reach * entropy, 0.0))

    seat0, seat1 = jax.grad(lambda t: objective(t, 0)), jax.grad(lambda t: objective(t, 1))
    return lambda theta: -jnp.where((seat == 0)[:, None], seat0(theta), seat1(theta))


def play(tree: game_tree.GameTree, config: LearnerConfig, alpha: float, learning_rate: float,
         steps: int) -> list[float]:
    """The iterate's exploitability at CHECKPOINTS points of `steps` simultaneous steps from uniform."""
    descent, optimizer = gradient_field(tree, alpha), _optimizer(config)
    mask = jnp.asarray(tree.masks)

    @jax.jit
    def run(theta, state):
        def step(carry, _):
            theta, state = carry
            update, state = optimizer.update(descent(theta), state, theta)
            return (theta + learning_rate * update, state), None
        return jax.lax.scan(step, (theta, state), None, length=steps // CHECKPOINTS)[0]

    theta = jnp.zeros(tree.masks.shape)
    state = optimizer.init(theta)
    scores = []
    for _ in range(CHECKPOINTS):
        theta, state = run(theta, state)
        probs = jax.nn.softmax(jnp.where(mask, theta, -1e9), axis=-1)
        scores.append(tree.exploitability(np.asarray(probs) * tree.masks))
    return scores


def learner_config(flags: str) -> LearnerConfig:
    """A LearnerConfig from `--adam-b1 B --optimism O --adam-eps E --max-grad-norm G` (the learner's own flags)."""
    parser = argparse.ArgumentParser(prog="--optimizer NAME=", add_help=False)
    defaults = LearnerConfig()
    for name in ("adam_b1", "optimism", "adam_eps", "max_grad_norm"):
        parser.add_argument("--" + name.replace("_", "-"), type=float, default=getattr(defaults, name))
    return LearnerConfig(**vars(parser.parse_args(shlex.split(flags))))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("game", help="a two-player OpenSpiel game whose tree can be walked, e.g. kuhn_poker")
    parser.add_argument("--alpha", type=float, default=0.05, help="entropy weight (a temperature, reward units)")
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--optimizer", action="append", default=[], metavar="NAME=FLAGS",
                        help="an optimiser to compare, e.g. 'rmsprop=--adam-b1 0' (repeatable)")
    args = parser.parse_args(argv)
    tree = game_tree.of(pyspiel.load_game(args.game))
    print(f"{args.game}: {len(tree.keys)} information states, alpha {args.alpha}, learning rate "
          f"{args.learning_rate}, {args.steps} steps; exploitability at every tenth of the run")
    for entry in args.optimizer or ["adam="]:
        name, _, flags = entry.partition("=")
        scores = play(tree, learner_config(flags), args.alpha, args.learning_rate, args.steps)
        print(f"{name:12s} " + " ".join(f"{score:.4f}" for score in scores), flush=True)


if __name__ == "__main__":
    main()
