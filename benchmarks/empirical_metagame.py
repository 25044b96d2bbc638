"""How close the league's empirical meta-game comes to the exact one, on a finished run.

    python -m benchmarks.empirical_metagame --run-dir RUN [--population 32]

For the newest `population` snapshots of player `main`, prints the exact exploitability
(OpenSpiel) of three mixtures: the Nash mixture of the league's win-rate table (what PSRO
mode draws opponents from, seedleague.league.matchmaking.symmetric_nash), the Nash mixture
of the exact meta-game (seedleague.eval.metagame) and the uniform mixture; and how many
snapshot pairs the league saw play. The run must be an OpenSpiel imperfect-information game
with its league database (RUN/league/league.sqlite).
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np


def score(run_dir: str, population: int, player: str = "main") -> dict:
    from seedleague.api import load_policy
    from seedleague.eval import metagame, openspiel_eval
    from seedleague.eval.run_league import league_of
    from seedleague.eval.tree_size import game_of
    from seedleague.league.matchmaking import symmetric_nash
    from seedleague.league.types import parse_key

    league = league_of(run_dir)
    if league is None:
        raise SystemExit(f"{run_dir} has no league database (league/league.sqlite)")
    table = league.payoff()
    keys = sorted((k for k in table.keys if k.startswith(f"{player}:")), key=lambda k: parse_key(k)[1])[-population:]
    index = [table.keys.index(k) for k in keys]
    win_rate = np.array(table.win_rate)[np.ix_(index, index)]
    games = np.array(table.games)[np.ix_(index, index)]
    policies = [load_policy(os.path.join(run_dir, "pool", player), parse_key(k)[1]) for k in keys]
    game = game_of(policies[0].spec.env_name)
    if game is None:
        raise SystemExit(f"{policies[0].spec.env_name} is not an OpenSpiel imperfect-information game: "
                         "its exploitability cannot be computed exactly")
    empirical = symmetric_nash(win_rate)
    exact, exact_weights = metagame.nash_mixture_exploitability(game, policies)
    return dict(run=run_dir, snapshots=len(keys), pairs_played=int((games > 0).sum()), pairs=len(keys) ** 2,
                empirical_nash=openspiel_eval.mixture_exploitability(game, policies, empirical),
                exact_nash=exact,
                uniform=openspiel_eval.mixture_exploitability(game, policies, np.full(len(keys), 1.0 / len(keys))),
                empirical_support=int((empirical > 1e-3).sum()), exact_support=int((exact_weights > 1e-3).sum()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--population", type=int, default=32, help="newest snapshots in the meta-game")
    args = parser.parse_args()
    print(json.dumps(score(args.run_dir, args.population)))


if __name__ == "__main__":
    main()
