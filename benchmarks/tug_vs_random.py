"""A trained Tug team (envs/tug_worker.py, the 2v2 protocol v2 example) against uniformly random seats.

    seedleague train --worker-cmd 'python -m envs.tug_worker --address {address} --seed {seed}' \\
        --max-seconds 240 --run-dir runs/tug
    python -m benchmarks.tug_vs_random runs/tug            # wins / draws / losses of 1000 games

Plays the run's output (`seedleague.api.load_trained`, greedy) and its final params (greedy and
sampled) as one team, on each side half of the time, against two random seats.
"""

from __future__ import annotations

import argparse

from envs.tug_worker import play_against_random
from seedleague.api import load_policy, load_trained


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--games", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    final, output = load_policy(args.run_dir), load_trained(args.run_dir)
    rows = [("output (load_trained), greedy", output, True), ("final params, greedy", final, True),
            ("final params, sampled", final, False)]
    for name, policy, greedy in rows:
        if not hasattr(policy, "act"):  # a mixture: draw() per game is not what this loop does
            print(f"{name}: a mixture ({policy}); skipped")
            continue
        wins, draws, losses = play_against_random(lambda o: policy.act(o, greedy=greedy), args.games, args.seed)
        print(f"{name} ({policy.source}): {wins} wins / {draws} draws / {losses} losses of {args.games}")


if __name__ == "__main__":
    main()
