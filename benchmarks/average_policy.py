"""Which average of a league run's snapshots is least exploitable, and when (OpenSpiel poker runs).

    python -m benchmarks.average_policy RUN_DIR [--player main] [--at STEP,STEP,...]

At each cutoff (a learner step; by default eight points spread over the run) it
scores the player's snapshots up to that step: the last one alone; the uniform
mixture of the newest fifth, third (what `seedleague train` reports at its end),
half and all of them; linear weights over all of them (newer weigh more); one
network whose params are the mean of the newest third's params (not a mixture of
policies but a single policy that can be served; where it scores like the mixture,
policy averaging can be done in parameter space); and, where the snapshot at the
cutoff keeps the learner's param average (LearnerConfig.average_from), the even
mixture of that network and the newest third, which the end of `seedleague train`
reports as "average + param average".
"""

from __future__ import annotations

import argparse
import os

import jax
import numpy as np

from seedleague.games.openspiel import load_game
from seedleague.api import Policy
from seedleague.eval.curve import load_param_average, player_snapshots
from seedleague.eval.openspiel_eval import PolicyTables, exploitability, mixture_exploitability

COLUMNS = ("last", "new1/5", "new1/3", "new1/2", "all", "linear", "params1/3", "1/3+avg")


def mean_params_policy(policies: list[Policy]) -> Policy:
    """One policy whose params are the element-wise mean of `policies`' params (same network)."""
    newest = policies[-1]
    params = jax.tree.map(lambda *leaves: sum(leaves) / len(leaves), *[p.params for p in policies])
    return Policy(newest.network_config, params, newest.spec, newest.step, newest.meta, "mean of params")


def scores(game, tables: PolicyTables, policies: list[Policy], count: int, average: Policy | None) -> list[float]:
    """The COLUMNS for the first `count` snapshots; `average` is the learner's param average at the
    last of them (NaN in the last column without one)."""
    members = np.arange(count)

    def newest(fraction: float) -> float:
        k = max(1, round(count * fraction))
        return tables.exploitability(np.ones(k), members[-k:])

    third = policies[count - max(1, round(count / 3)):count]
    with_average = (float("nan") if average is None else
                    mixture_exploitability(game, third + [average], [0.5 / len(third)] * len(third) + [0.5]))
    return [tables.exploitability([1.0], [count - 1]), newest(1 / 5), newest(1 / 3), newest(1 / 2), newest(1.0),
            tables.exploitability(members + 1.0, members), exploitability(game, mean_params_policy(third)),
            with_average]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--player", default="main")
    parser.add_argument("--at", default="", help="learner steps to cut at, comma-separated (default: 8 points)")
    args = parser.parse_args()
    keys, policies = player_snapshots(args.run_dir, args.player)
    if len(keys) < 2:
        raise SystemExit(f"{args.run_dir}: player {args.player!r} has {len(keys)} snapshots; need at least 2")
    steps = np.array([p.step for p in policies])
    game = load_game(policies[0].spec.env_name.partition(":")[2])
    tables = PolicyTables(game, policies)
    cutoffs = [int(s) for s in args.at.split(",")] if args.at else list(np.linspace(steps[-1] / 8, steps[-1], 8))
    print(f"{'step':>7} {'wall s':>7} " + " ".join(f"{c:>9}" for c in COLUMNS))
    for cutoff in cutoffs:
        count = int((steps <= cutoff).sum())
        if count == 0:
            print(f"{int(cutoff):>7}: no snapshot yet")
            continue
        wall = policies[count - 1].meta.get("wall_s") or 0.0
        average = load_param_average(os.path.join(args.run_dir, "pool", args.player), int(steps[count - 1]))
        row = scores(game, tables, policies, count, average)
        print(f"{steps[count - 1]:>7} {wall:>7.0f} " + " ".join(f"{v:>9.4f}" for v in row), flush=True)


if __name__ == "__main__":
    main()
