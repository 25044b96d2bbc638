"""Shootout: a two-seat game on protocol v2 with a Dict observation and a hybrid action, the example of
league play with several named tensors and action heads (trained in the league).

    python -m envs.shootout_worker --address 127.0.0.1:50051 --num-envs 64
    seedleague train --worker-cmd 'python -m envs.shootout_worker --address {address} --seed {seed}' --max-seconds 300

Two seats shoot at once, every step. Each seat has a target of its own, drawn anew every
step: one of 3 lanes, shown as a lit column of a 3 x 3 image `lanes` (uint8 [3, 3, 1]), at a
height in [-1, 1], given in the vector `state` (float32 [3]: the seat's score lead divided by
`WIN_SCORE`, the game's elapsed share of `MAX_STEPS`, the target's height). A seat hits when
its discrete `lane` (one of 3) is the target's lane and its continuous `aim` (float32 [1] in
[-1, 1]) is within `HIT_DISTANCE` of the height: it needs both heads to score. The first seat to
`WIN_SCORE` hits wins (+1; the other seat -1); a game that reaches `MAX_STEPS` ends with the
sign of the score difference (0 for a tie). Uniformly random seats hit on about a seventh of
the steps, a seat that reads both cues on every step. With `--aim-levels N` the aim is a discrete head
instead, one of N heights evenly spaced over [-1, 1]: the same game with every head discrete.

`ShootoutGame` is a `worker_loop.VectorGame`; the module is also a worker process.
Never imports jax.
"""

from __future__ import annotations

import logging
import sys
from typing import Callable, Optional, Sequence

import numpy as np

from envs.worker_loop import GameStep, fixed_game_main
from seedleague.protocol.named import (ActionSpec, ContinuousHead, DiscreteHead, ObservationSpec,
                                       NamedEnvSpec, TensorSpec)

log = logging.getLogger("envs.shootout_worker")

LANES = 3
WIN_SCORE = 3
MAX_STEPS = 12
HIT_DISTANCE = 0.5


def shootout_spec(num_envs: int, aim_levels: int = 0) -> NamedEnvSpec:
    """The game's spec; `aim_levels` > 0: the aim is a discrete head of that many heights (see `aim_heights`)."""
    observation = ObservationSpec((TensorSpec("state", (3,), np.float32), TensorSpec("lanes", (3, LANES, 1), np.uint8)))
    aim = DiscreteHead("aim", aim_levels) if aim_levels else ContinuousHead("aim", (-1.0,), (1.0,))
    action = ActionSpec((DiscreteHead("lane", LANES), aim))
    return NamedEnvSpec("shootout", observation, action, num_envs=num_envs, num_seats=2)


def aim_heights(aim_levels: int) -> np.ndarray:
    """The heights a discrete aim's actions 0..N-1 shoot at: evenly spaced over [-1, 1] (0 for one level)."""
    return np.linspace(-1.0, 1.0, aim_levels) if aim_levels > 1 else np.zeros(1)


class ShootoutGame:
    """`num_envs` Shootout games stepped together (module docstring); same-step autoreset."""

    protocol = 2  # spoken on the wire (v1 cannot carry the spec)

    def __init__(self, num_envs: int, seed: int = 0, aim_levels: int = 0):
        if aim_levels < 0:
            raise ValueError(f"--aim-levels must be >= 0 (0: a continuous aim), got {aim_levels}")
        self.spec = shootout_spec(num_envs, aim_levels)
        self._heights = aim_heights(aim_levels) if aim_levels else None
        self._rng = np.random.default_rng(seed)
        self._score = np.zeros((num_envs, 2), np.int64)
        self._t = np.zeros(num_envs, np.int64)
        self._lane = np.zeros((num_envs, 2), np.int64)
        self._height = np.zeros((num_envs, 2), np.float32)
        self.episodes = 0

    def reset(self, seed: Optional[int] = None) -> GameStep:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._score[:], self._t[:] = 0, 0
        self._draw_targets()
        zeros = np.zeros(self.spec.num_envs, bool)
        return self._game_step(np.zeros((self.spec.num_envs, 2), np.float32), zeros, zeros)

    def step(self, actions: dict) -> GameStep:
        lane, aim = np.asarray(actions["lane"]), np.asarray(actions["aim"])  # [E, 2]; aim [E, 2, 1] or levels [E, 2]
        aim = aim[..., 0] if self._heights is None else self._heights[aim]
        self._score += (lane == self._lane) & (np.abs(aim - self._height) < HIT_DISTANCE)
        self._t += 1
        lead = self._score[:, 0] - self._score[:, 1]
        ended = (self._score.max(1) >= WIN_SCORE) | (self._t >= MAX_STEPS)
        reward = np.where(ended[:, None], np.sign(lead)[:, None] * np.array([1.0, -1.0]), 0.0).astype(np.float32)
        self.episodes += int(ended.sum())
        self._score[ended], self._t[ended] = 0, 0
        self._draw_targets()
        return self._game_step(reward, ended, np.zeros(self.spec.num_envs, bool))

    def summary(self) -> str:
        return f"{self.episodes} games played"

    def close(self) -> None:
        """Nothing to release: the games are numpy arrays in this process."""

    def _draw_targets(self) -> None:
        self._lane = self._rng.integers(LANES, size=self._lane.shape)
        self._height = self._rng.uniform(-1.0, 1.0, size=self._height.shape).astype(np.float32)

    def _game_step(self, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> GameStep:
        num_envs = self.spec.num_envs
        state = np.zeros((num_envs, 2, 3), np.float32)
        lead = (self._score - self._score[:, ::-1]).astype(np.float32)  # each seat's own lead
        state[:, :, 0] = lead / WIN_SCORE
        state[:, :, 1] = (self._t / MAX_STEPS)[:, None]
        state[:, :, 2] = self._height
        lanes = np.zeros((num_envs, 2, 3, LANES, 1), np.uint8)
        lanes[np.arange(num_envs)[:, None], np.arange(2), :, self._lane, 0] = 255
        return GameStep(observation={"state": state, "lanes": lanes}, reward=reward, terminated=terminated,
                        truncated=truncated)


def play_against_random(act: Callable[[dict], dict], games: int, seed: int = 0,
                        aim_levels: int = 0) -> tuple[int, int, int]:
    """(wins, draws, losses) of `act` ({"state": [N, 3], "lanes": [N, 3, 3, 1]} -> {"lane": [N], "aim": [N, 1],
    or [N] levels with `aim_levels`}) against a uniformly random seat, `games` games, half of them from each seat."""
    game, rng = ShootoutGame(games, seed, aim_levels), np.random.default_rng(seed + 1)
    seat = (np.arange(games) >= games // 2).astype(np.int64)  # the seat `act` plays in each game
    rows = np.arange(games)
    step, result, done = game.reset(seed), np.zeros(games), np.zeros(games, bool)
    while not done.all():
        mine = act({name: x[rows, seat] for name, x in step.observation.items()})
        lane = rng.integers(LANES, size=(games, 2))
        if aim_levels:
            aim = rng.integers(aim_levels, size=(games, 2))
            aim[rows, seat] = np.asarray(mine["aim"])
        else:
            aim = rng.uniform(-1.0, 1.0, size=(games, 2, 1)).astype(np.float32)
            aim[rows, seat] = np.asarray(mine["aim"]).reshape(games, 1)
        lane[rows, seat] = np.asarray(mine["lane"])
        step = game.step({"lane": lane, "aim": aim})
        new = step.terminated & ~done
        result[new], done = step.reward[rows, seat][new], done | step.terminated
    return int((result > 0).sum()), int((result == 0).sum()), int((result < 0).sum())


def main(argv: Optional[Sequence[str]] = None) -> int:
    """CLI entry point; 0 stopped, 2 bad flags or refused by the host."""
    aim = dict(type=int, default=0,
               help="make the aim a discrete head of this many heights over [-1, 1] (default 0: continuous)")
    return fixed_game_main("envs.shootout_worker", __doc__, argv, ShootoutGame, log, {"--aim-levels": aim})


if __name__ == "__main__":
    sys.exit(main())
