"""How fast the OpenSpiel worker's vector game steps, with no host or network in the way.

    .venv/bin/python -m benchmarks.openspiel_step --game leduc_poker --num-envs 128

Steps `OpenSpielVectorGame` (the worker's game side: chance sampling, observation
and legal-mask encoding of both seats, autoreset) with uniformly random legal
actions; prints env steps/s of each repeat and their median. The host's answer
is replaced by numpy, so this is the worker's ceiling, not a pipeline's rate.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from envs.openspiel_worker import OpenSpielVectorGame


def random_legal_actions(rng: np.random.Generator, legal_mask: np.ndarray) -> np.ndarray:
    """[E, seats] a uniformly random legal action per seat (0 where a seat has none)."""
    return (rng.random(legal_mask.shape) + legal_mask).argmax(axis=-1)


def steps_per_second(game: OpenSpielVectorGame, steps: int, rng: np.random.Generator) -> float:
    step = game.reset()
    start = time.perf_counter()
    for _ in range(steps):
        step = game.step({"action": random_legal_actions(rng, step.legal_mask["action"])})
    return steps * game.spec.num_envs / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", default="leduc_poker")
    parser.add_argument("--num-envs", type=int, default=128)
    parser.add_argument("--steps", type=int, default=300, help="vector steps per repeat")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    game, rng = OpenSpielVectorGame(args.game, args.num_envs, seed=0), np.random.default_rng(0)
    rates = [steps_per_second(game, args.steps, rng) for _ in range(args.repeats)]
    print(f"{args.game}, {args.num_envs} envs: " + ", ".join(f"{r / 1e3:.1f}K" for r in rates)
          + f" env steps/s; median {statistics.median(rates) / 1e3:.1f}K")


if __name__ == "__main__":
    main()
