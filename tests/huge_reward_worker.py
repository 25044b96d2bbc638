"""A test-only env worker with a bug a real one can have: `envs.openspiel_worker`'s game, whose rewards are
multiplied by 1e30 while the file named by --huge-rewards-while exists. Such rewards are finite, so the protocol
takes them, and the learner's loss overflows: a NaN reaches a real run's learner the way a user's worker gives it.

    python tests/huge_reward_worker.py --game kuhn_poker --huge-rewards-while /tmp/x --address 127.0.0.1:50051
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run as a file from any directory

from envs import openspiel_worker  # noqa: E402
from envs.worker_loop import GameStep, game_worker_main  # noqa: E402

HUGE = 1e30  # finite in float32; its square is not


class HugeRewards(openspiel_worker.OpenSpielVectorGame):
    def __init__(self, trigger: str, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._trigger = trigger

    def step(self, actions) -> GameStep:
        out = super().step(actions)
        if os.path.exists(self._trigger):  # a copy: the game reuses its buffers
            return dataclasses.replace(out, reward=out.reward * HUGE)
        return out


def main() -> int:
    parser = argparse.ArgumentParser()
    openspiel_worker.add_arguments(parser)
    parser.add_argument("--huge-rewards-while", required=True, metavar="FILE")
    return game_worker_main(parser, None, lambda a: HugeRewards(a.huge_rewards_while, a.game, a.num_envs, a.seed),
                            ValueError, logging.getLogger("huge_reward_worker"))


if __name__ == "__main__":
    sys.exit(main())
