"""Who sits where in each env of a multi-seat session, episode by episode.

Every episode of every env gets a `Match` from the league: either self-play
(every seat runs the learner's live params and every seat's steps go to replay)
or an opponent snapshot, which takes every seat but one learner seat drawn at
random per episode (so neither seat is favoured); with teams (protocol v2's seat_team) the learner
takes every seat of one team drawn at random and the snapshot every seat of the others. With `every_seat` (a served
mixture, host.mixture) the match's network takes every seat and none learns (a mixture with one mix per seat names the
network of each seat: `Match.seats`). With `train_on_matches` False the
learner still plays its seat of a snapshot match with its live params, but replay records none of the match: the
game only rates the two, and the learner trains on self-play alone; a match against an anchor
(`Match.rates_only`) is always played that way.
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

    def __init__(self, num_envs: int, num_seats: int, rng: np.random.Generator, every_seat: bool = False,
                 teams: Optional[Sequence[int]] = None, train_on_matches: bool = True):
        """`teams`: the team of each seat (protocol v2's seat_team); None: every seat its own team."""
        self.num_envs, self.num_seats = num_envs, num_seats
        self.every_seat = every_seat  # a non-self-play match takes every seat (no learner seat)
        self.train_on_matches = train_on_matches  # replay records the learner's seats of snapshot matches
        self._rng = rng
        self.teams = np.asarray(teams if teams else range(num_seats), np.int64)
        if self.teams.shape != (num_seats,):
            raise ValueError(f"teams must give one team per seat ({num_seats}), got {list(self.teams)}")
        self.num_teams = int(self.teams.max()) + 1
        self.learner_seat = np.zeros(num_envs, np.int64)  # the first seat of the learner's team
        self.learner_team = np.zeros(num_envs, np.int64)
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
                self.learner_team[env] = self.teams[0]
                self._learning[rows] = True
                self._opponents[rows] = None
            else:
                team = int(self._rng.integers(self.num_teams))  # one seat per team: the seat drawn as before
                seats = env * self.num_seats + np.flatnonzero(self.teams == team)
                self.opponent[env] = match.opponent
                self.learner_team[env] = team
                self.learner_seat[env] = seats[0] - env * self.num_seats
                self._learning[rows] = False
                self._learning[seats] = self.train_on_matches and not self.every_seat and not match.rates_only
                self._opponents[rows] = match.opponent
                if match.seats:  # a served mixture with one mix per seat (the host checked its seat count)
                    self._opponents[rows] = list(match.seats)
                if not self.every_seat:
                    self._opponents[seats] = None

    def learning(self) -> np.ndarray:
        """[E*S] bool: agent rows the learner plays and replay records (with `train_on_matches` False, its rows in
        snapshot matches are played but not recorded: `opponents()` is None there). A copy: later episode starts
        do not change it."""
        return self._learning.copy()

    def opponents(self) -> np.ndarray:
        """[E*S] object: the snapshot key playing each row, None where the learner plays."""
        return self._opponents.copy()

    def learner_rows(self, envs: np.ndarray) -> np.ndarray:
        """The agent row of the learner's seat (the first of its team's) in each of `envs`."""
        return envs * self.num_seats + self.learner_seat[envs]

    def team_returns(self, returns: np.ndarray) -> np.ndarray:
        """[E, T] each team's return, the mean over its seats' returns (`returns` [E*S], env-major)."""
        by_env = returns.reshape(self.num_envs, self.num_seats)
        if self.num_teams == self.num_seats and (self.teams == np.arange(self.num_seats)).all():
            return by_env  # every seat its own team
        return np.stack([by_env[:, self.teams == t].mean(axis=1) for t in range(self.num_teams)], axis=1)
