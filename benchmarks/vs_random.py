"""A trained policy of a worker game with a `play_against_random` (envs/tug_worker.py, the 2v2 protocol v2
example; envs/shootout_worker.py, two seats with a Dict observation and a discrete plus a continuous head)
against uniformly random seats.

    seedleague train --worker-cmd 'python -m envs.tug_worker --address {address} --seed {seed}' \\
        --max-seconds 240 --run-dir runs/tug
    python -m benchmarks.vs_random envs.tug_worker runs/tug            # wins / draws / losses of 1000 games
    python -m benchmarks.vs_random envs.shootout_worker runs/shootout

Plays the run's output (`seedleague.api.load_trained`, greedy) and its final params (greedy and
sampled) in the game's seats (one team, or one seat), on each side half of the time, against random ones.
"""

from __future__ import annotations

import argparse
import importlib

from seedleague.api import load_policy, load_trained


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("worker", help="the game's worker module, e.g. envs.tug_worker (it has play_against_random)")
    parser.add_argument("run_dir")
    parser.add_argument("--games", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    play_against_random = importlib.import_module(args.worker).play_against_random
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
