"""Mean episode return per team of a trained MPE run against uniformly random play, in the same games.

    python -m benchmarks.mpe_eval runs/spread 'mpe/simple_spread_v3' --episodes 200
    python -m benchmarks.mpe_eval runs/tag 'mpe/simple_tag_v3' --trained-team adversary

Plays `--episodes` episodes (64 envs at a time) of the game with every seat uniformly random, then with the
run's output (`seedleague.api.load_trained`, greedy and sampled) at every seat of `--trained-team` (default: every
seat) and random seats elsewhere, and prints each team's mean episode return (a team's return: the mean of its
seats'). Discrete action heads only (a v1-shaped spec).
"""

from __future__ import annotations

import argparse
from typing import Optional

import numpy as np

from envs.pettingzoo_worker import make_vector_game


def team_returns(game_name: str, episodes: int, act, trained: Optional[str], seed: int = 0) -> dict:
    """{team: mean episode return} over `episodes` episodes; `act(obs [N, D], mask [N, A] or None) -> [N]` plays the
    seats of team `trained` (every seat when None), random legal actions the others; `act` None: all random."""
    envs = min(64, episodes)
    game, rng = make_vector_game(game_name, envs, seed), np.random.default_rng(seed + 1)
    teams = np.asarray(game.spec.seat_team)
    mine = np.ones(len(teams), bool) if trained is None else teams == game.team_names.index(trained)
    step, totals, returns, done = game.reset(), [], np.zeros((envs, len(teams))), 0
    while done < episodes:
        observation = step.observation["observation"]
        mask = (step.legal_mask or {}).get("action")
        keys = rng.random(observation.shape[:2] + (game.spec.action.heads[0].num_actions,))
        action = (keys if mask is None else np.where(mask, keys, -1.0)).argmax(-1)
        if act is not None:
            action[:, mine] = act(observation[:, mine].reshape(-1, observation.shape[-1]),
                                  None if mask is None else mask[:, mine].reshape(-1, mask.shape[-1])
                                  ).reshape(envs, int(mine.sum()))
        step = game.step({"action": action.astype(np.int32)})
        returns += step.reward
        for env in np.flatnonzero(step.terminated | step.truncated):
            totals.append([returns[env, teams == t].mean() for t in range(len(game.team_names))])
            returns[env] = 0.0
            done += 1
    game.close()
    means = np.mean(totals[:episodes], axis=0)
    return {name: round(float(value), 2) for name, value in zip(game.team_names, means)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("game", help="the PettingZoo game name the run trained, e.g. mpe/simple_spread_v3")
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--trained-team", default=None, help="team the trained policy plays (default: every seat)")
    args = parser.parse_args(argv)
    from seedleague.api import load_trained

    policy = load_trained(args.run_dir)
    print("random everywhere:", team_returns(args.game, args.episodes, None, None))
    for greedy in (True, False):
        rng = np.random.default_rng(2)

        def act(obs, mask, greedy=greedy, rng=rng):
            return policy.act(obs, mask, greedy=greedy, rng=rng)

        print(f"trained ({'greedy' if greedy else 'sampled'}) at {args.trained_team or 'every'} seat(s):",
              team_returns(args.game, args.episodes, act, args.trained_team))


if __name__ == "__main__":
    main()
