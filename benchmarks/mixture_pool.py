"""How the least exploitable mixture of a run's snapshots depends on the pool: its density and its span.

    python -m benchmarks.mixture_pool RUN_DIR [--player main]

Solves seedleague.eval.least_exploitable exactly (the output selection's strongest candidate)
over subsets of the player's snapshots: all of them, every second and every fourth (density), the
newest half and quarter and the oldest half (span). One row each: networks, exploitability, support.
OpenSpiel imperfect-information games whose tree the selection can measure.
"""

from __future__ import annotations

import argparse
import time

from seedleague.eval import least_exploitable, metagame
from seedleague.eval.curve import player_snapshots
from seedleague.eval.tree_size import game_of, unmeasurable


def subsets(count: int) -> dict[str, list[int]]:
    """Snapshot indices (oldest first) of each pool the table compares."""
    every = range(count)
    return {
        "every snapshot": list(every),
        "every second (even)": list(every[0::2]),
        "every second (odd)": list(every[1::2]),
        "every fourth": list(every[0::4]),
        "newest half": list(every[count // 2:]),
        "newest quarter": list(every[3 * count // 4:]),
        "oldest half": list(every[:count // 2]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--player", default="main")
    args = parser.parse_args()
    _, policies = player_snapshots(args.run_dir, args.player)
    if not policies:
        raise SystemExit(f"{args.run_dir!r} has no snapshots of player {args.player!r}")
    why = unmeasurable(policies[0].spec.env_name)
    if why:
        raise SystemExit(f"{args.run_dir!r} cannot be measured exactly: {why}")
    game = game_of(policies[0].spec.env_name)
    terminal = metagame.terminal_table(game)
    policies = policies[-metagame.largest_population(terminal):]  # the payoffs' memory cap, as the selection's
    print("| pool | networks | exploitability | support | seconds |\n|---|---:|---:|---:|---:|")
    for name, picked in subsets(len(policies)).items():
        if not picked:
            continue
        start = time.perf_counter()
        value, weights = least_exploitable.least_exploitable_mixture(game, [policies[i] for i in picked], terminal)
        support = int((weights.max(axis=0) > 1e-6).sum())
        print(f"| {name} | {len(picked)} | {value:.4f} | {support} | {time.perf_counter() - start:.1f} |", flush=True)


if __name__ == "__main__":
    main()
