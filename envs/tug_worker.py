"""Tug: a 2v2 team game on protocol v2 (seat_team), the example of team play in the league.

    python -m envs.tug_worker --address 127.0.0.1:50051 --num-envs 64
    seedleague train --worker-cmd 'python -m envs.tug_worker --address {address} --seed {seed}' --max-seconds 300

Two teams of two pull a rope whose knot starts at 0. Every step each seat sees a
cue, one of 3, and pulls (moves the knot one step towards its side) only when its
action matches its cue. The first team to bring the knot `WIN_DISTANCE` steps to
its side wins (+1 for both its seats, -1 for both of the other team's); after
`MAX_STEPS` steps the game is a draw (0). A seat observes float32[4]: the knot's
position from its team's side (positive: winning), divided by `WIN_DISTANCE`, and
its cue one-hot. Seats 0 and 1 are team 0, seats 2 and 3 team 1. Uniformly random
seats pull on a third of the steps, a trained team on all of them.

`TugGame` is a `worker_loop.VectorGame`; the module is also a worker process.
Never imports jax.
"""

from __future__ import annotations

import logging
import sys
from typing import Optional, Sequence

import numpy as np

from envs.worker_loop import GameStep, fixed_game_main
from seedleague.protocol.named import ActionSpec, DiscreteHead, ObservationSpec, NamedEnvSpec, TensorSpec

log = logging.getLogger("envs.tug_worker")

WIN_DISTANCE = 3
MAX_STEPS = 20
CUES = 3
SEAT_TEAM = (0, 0, 1, 1)
_SIDE = np.array([1.0, 1.0, -1.0, -1.0], np.float32)  # +knot is team 0's side


def tug_spec(num_envs: int) -> NamedEnvSpec:
    return NamedEnvSpec("tug-2v2", ObservationSpec((TensorSpec("observation", (1 + CUES,), np.float32),)),
                        ActionSpec((DiscreteHead("action", CUES),)), num_envs=num_envs, num_seats=4,
                        seat_team=SEAT_TEAM)


class TugGame:
    """`num_envs` Tug games stepped together (module docstring); same-step autoreset."""

    protocol = 2  # spoken on the wire (v1 cannot carry the spec)

    def __init__(self, num_envs: int, seed: int = 0):
        self.spec = tug_spec(num_envs)
        self._rng = np.random.default_rng(seed)
        self._knot = np.zeros(num_envs, np.int64)
        self._t = np.zeros(num_envs, np.int64)
        self._cue = np.zeros((num_envs, 4), np.int64)
        self.episodes = 0

    def reset(self, seed: Optional[int] = None) -> GameStep:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._knot[:], self._t[:] = 0, 0
        self._cue[:] = self._rng.integers(CUES, size=self._cue.shape)
        zeros = np.zeros(self.spec.num_envs, bool)
        return self._game_step(np.zeros((self.spec.num_envs, 4), np.float32), zeros, zeros)

    def step(self, actions: dict) -> GameStep:
        action = np.asarray(actions["action"])  # [E, 4]
        pulls = (action == self._cue).astype(np.int64)
        self._knot += pulls[:, :2].sum(1) - pulls[:, 2:].sum(1)
        self._t += 1
        won = np.abs(self._knot) >= WIN_DISTANCE
        ended = won | (self._t >= MAX_STEPS)
        reward = np.where(won[:, None], np.sign(self._knot)[:, None] * _SIDE, 0.0).astype(np.float32)
        self.episodes += int(ended.sum())
        self._knot[ended], self._t[ended] = 0, 0
        self._cue = self._rng.integers(CUES, size=self._cue.shape)
        return self._game_step(reward, ended, np.zeros(self.spec.num_envs, bool))

    def summary(self) -> str:
        return f"{self.episodes} games played"

    def close(self) -> None:
        pass

    def _game_step(self, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> GameStep:
        observation = np.zeros((self.spec.num_envs, 4, 1 + CUES), np.float32)
        observation[:, :, 0] = self._knot[:, None] * _SIDE / WIN_DISTANCE
        observation[:, :, 1:] = np.eye(CUES, dtype=np.float32)[self._cue]
        return GameStep(observation={"observation": observation}, reward=reward, terminated=terminated,
                        truncated=truncated)


def play_against_random(act, games: int, seed: int = 0) -> tuple[int, int, int]:
    """(wins, draws, losses) of the team `act` plays (observation [N, 4] -> actions [N]) against uniformly random
    seats, `games` games with the trained team on each side half of the time."""
    game, rng = TugGame(games, seed), np.random.default_rng(seed + 1)
    trained = np.zeros((games, 4), bool)
    trained[: games // 2, :2] = True
    trained[games // 2:, 2:] = True
    step, result = game.reset(seed), np.zeros(games)
    done = np.zeros(games, bool)
    while not done.all():
        observation = step.observation["observation"]
        action = rng.integers(CUES, size=(games, 4))
        action[trained] = act(observation[trained])
        step = game.step({"action": action})
        team_return = np.where(trained, step.reward, 0.0).sum(1) / 2  # the trained team's seats share it
        new = step.terminated & ~done
        result[new], done = team_return[new], done | step.terminated
    return int((result > 0).sum()), int((result == 0).sum()), int((result < 0).sum())


def main(argv: Optional[Sequence[str]] = None) -> int:
    """CLI entry point; 0 stopped, 2 bad flags or refused by the host."""
    return fixed_game_main("envs.tug_worker", __doc__, argv, TugGame, log)


if __name__ == "__main__":
    sys.exit(main())
