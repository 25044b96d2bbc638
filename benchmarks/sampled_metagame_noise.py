"""What the sampled meta-game's noise costs its Nash mixture, at a number of evaluation games, on a finished run.

    python -m benchmarks.sampled_metagame_noise --run-dir RUN --games 370000 800000 [--draws 10]

`population_nash` (seedleague.eval.sampled_metagame) solves a payoff table estimated from evaluation games in which
each seat's member is drawn uniformly and every game counts for every pair by importance weighting. For the
members of RUN/population_nash.json this draws such tables from the game tree instead of from played games: a game
ends in terminal history h with probability c_h mu_0(h) mu_1(h) (chance, and each seat's reach averaged over the
members, what a uniform draw plays), and the estimate is the same weighted sum the host's games add up. It prints
the exact exploitability (OpenSpiel's game, evaluation only) of the exact table's Nash mixture and, for each
number of games, of the Nash mixtures of `--draws` sampled tables: median, range and how many were <= `--bar`.
The choice's evaluation games played about 370K Kuhn games in 80 s before the members acted from their scoring
pass, and about twice that after (benchmarks/README.md).
"""

from __future__ import annotations

import argparse

import numpy as np


def sampled_table(chance: np.ndarray, utility: np.ndarray, reach0: np.ndarray, reach1: np.ndarray, games: int,
                  rng: np.random.Generator) -> np.ndarray:
    """[K, K] estimated payoff of member i in seat 0 against j in seat 1 from `games` games drawn as the host's
    evaluation games are: terminal histories with chance [H], seat-0 utility [H] and each seat's reach [H, K]."""
    mean0, mean1 = reach0.mean(axis=1), reach1.mean(axis=1)
    played = chance * mean0 * mean1  # a uniform draw per seat: the probability each history ends a game
    counts = rng.multinomial(games, played / played.sum()).astype(np.float64)
    weight0, weight1 = reach0 / mean0[:, None], reach1 / mean1[:, None]  # the balance heuristic's weights
    return np.einsum("h,hi,hj->ij", counts * utility, weight0, weight1) / games


def simulate(run_dir: str, games: list[int], draws: int, seed: int = 0) -> dict:
    from seedleague.artifacts.load import load_policies, load_policy
    from seedleague.eval import metagame, sampled_metagame
    from seedleague.eval.openspiel_eval import PolicyTables
    from seedleague.eval.tree_size import game_of
    from seedleague.league.nash import solve_zero_sum
    from seedleague.league.types import parse_key

    population = sampled_metagame.read(run_dir)
    members = []
    for key in population.keys:
        player, step = parse_key(key)
        average = player == "param_average"  # the run's param average at its final step
        members.append(load_policy(run_dir, step, average=True) if average else
                       load_policies(f"{run_dir}/pool/{player}", [step])[0])
    game = game_of(members[0].spec.env_name)
    if game is None:
        raise SystemExit(f"{members[0].spec.env_name} has no game tree to draw games from")
    tables = PolicyTables(game, members)
    terminal = tables.tree.terminal_table()
    reach0, reach1 = metagame.reaches(tables.probs, terminal)
    chance = tables.tree.chance[tables.tree.terminals]
    utility = terminal.weight / chance
    score = lambda table: tables.exploitability(np.stack(solve_zero_sum(table)[:2]))
    exact = reach0.T @ (terminal.weight[:, None] * reach1)
    rng = np.random.default_rng(seed)
    found = {"members": len(members), "exact_table_nash": score(exact), "recorded": tables.exploitability(
        np.array(population.seat_weights)), "recorded_games": population.games}
    for count in games:
        found[count] = [score(sampled_table(chance, utility, reach0, reach1, count, rng)) for _ in range(draws)]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", required=True, help="a finished run with population_nash.json")
    parser.add_argument("--games", type=int, nargs="+", default=[370_000, 800_000])
    parser.add_argument("--draws", type=int, default=10, help="sampled tables per number of games")
    parser.add_argument("--bar", type=float, default=0.005, help="count the draws at or under this exploitability")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    found = simulate(args.run_dir, args.games, args.draws, args.seed)
    print(f"{found['members']} members; the exact table's Nash {found['exact_table_nash']:.4f}; the run's recorded "
          f"population_nash {found['recorded']:.4f} ({found['recorded_games']:,} games)")
    for count in args.games:
        values = np.array(found[count])
        print(f"{count:>10,} games: median {np.median(values):.4f}, range {values.min():.4f}-{values.max():.4f}, "
              f"<= {args.bar:g} in {int((values <= args.bar).sum())} of {len(values)}")


if __name__ == "__main__":
    main()
