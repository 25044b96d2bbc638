"""Who sits where in each env of a multi-seat session, episode by episode.

Every episode of every env gets a `Match` from the league: either self-play
(every seat runs the learner's live params and every seat's steps go to replay)
or an opponent snapshot, which takes every seat but one learner seat drawn at
random per episode (so neither seat is favoured). With `every_seat` (a served
mixture, host.mixture) the match's network takes every seat and none learns.
Agent rows are env-major, seat-minor, like the session's tensors.

    seating = Seating(num_envs=64, num_seats=2, rng=np.random.default_rng(0))
    seating.start(envs, matches)      # at each episode start of `envs`
    seating.learning()                # [E*S] bool: rows the learner plays (and replay records)
    seating.opponents()               # [E*S] object: snapshot key per row, None for learner rows
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from seedleague.league.types import Match


class Seating:
    """The current match of each env and the learner's seat in it."""

    def __init__(self, num_envs: int, num_seats: int, rng: np.random.Generator, every_seat: bool = False):
        self.num_envs, self.num_seats = num_envs, num_seats
        self.every_seat = every_seat  # a non-self-play match takes every seat (no learner seat)
        self._rng = rng
        self.learner_seat = np.zeros(num_envs, np.int64)
        self.opponent: list[Optional[str]] = [None] * num_envs  # None: self-play
        self._learning = np.ones(num_envs * num_seats, bool)
        self._opponents = np.full(num_envs * num_seats, None, object)

    def start(self, envs: np.ndarray, matches: Sequence[Match]) -> None:
        """Seat new episodes of `envs` (env indices) with `matches` (one per env)."""
        if len(envs) != len(matches):
            raise ValueError(f"{len(envs)} new episodes but {len(matches)} matches")
        for env, match in zip(envs, matches):
            rows = slice(env * self.num_seats, (env + 1) * self.num_seats)
            if match.self_play:
                self.opponent[env] = None
                self.learner_seat[env] = 0
                self._learning[rows] = True
                self._opponents[rows] = None
            else:
                seat = int(self._rng.integers(self.num_seats))
                self.opponent[env] = match.opponent
                self.learner_seat[env] = seat
                self._learning[rows] = False
                self._learning[env * self.num_seats + seat] = not self.every_seat
                self._opponents[rows] = match.opponent
                if not self.every_seat:
                    self._opponents[env * self.num_seats + seat] = None

    def learning(self) -> np.ndarray:
        """[E*S] bool: agent rows the learner plays. A copy: later episode starts do not change it."""
        return self._learning.copy()

    def opponents(self) -> np.ndarray:
        """[E*S] object: the snapshot key playing each row, None where the learner plays."""
        return self._opponents.copy()

    def learner_rows(self, envs: np.ndarray) -> np.ndarray:
        """The agent row of the learner's seat in each of `envs`."""
        return envs * self.num_seats + self.learner_seat[envs]
