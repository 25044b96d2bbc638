"""The league's in-memory state: players, snapshots, payoff counts, Elo and TrueSkill, Elo history.

`LeagueState` changes only by applying events, in the order they were committed
to the store: a player registered, a check-in, a snapshot added, a result
counted. The service applies each event after its transaction commits, and on
start replays the store's events through the same methods, so the state after a
restart is exactly the state before it. The arithmetic lives in `payoff`, `elo`
and `trueskill`; this class only keeps the arrays and calls them. No lock, no SQL.

Keys are live player names and snapshot keys, indexed in the order they appear.
Results are always live player (row) against snapshot (column); the reverse pair
gets the mirrored result. When a snapshot is added it takes over the live
player's payoff row and ratings (`payoff.inherit`), and the live player starts a
fresh row: its params move on, and old games say little about them. A player
reset to its initial params after the snapshot takes the ratings of its first
snapshot, which holds those params.

Anchors (role ANCHOR) and humans (role HUMAN) are members that never train. An anchor gets no
live row: its one snapshot event (key = its name) adds its key, at the initial ratings, and
records its path in `anchors`. A human's key is its name, added when it registers, as a live
player's is.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Optional

import numpy as np

from seedleague.league import payoff
from seedleague.league.config import LeagueConfig
from seedleague.league.elo import elo_update
from seedleague.league.matchmaking import LeagueView
from seedleague.league.pbt import PbtState
from seedleague.league.trueskill import INITIAL_MU, INITIAL_SIGMA, rate_1v1
from seedleague.league.types import MatchResult, PayoffMatrix, PlayerInfo, Role, SnapshotInfo, Standing, learns


class LeagueState:
    """Everything the league knows, rebuilt from its events; see the module docstring."""

    def __init__(self, config: LeagueConfig):
        self.config = config
        self.players: dict[str, PlayerInfo] = {}  # registration order
        self.pending: dict[str, Optional[bool]] = {}  # player -> reset flag of a snapshot decided, not yet added
        self.snapshots: dict[str, SnapshotInfo] = {}  # key -> info, oldest first (learning players' only)
        self.anchors: dict[str, SnapshotInfo] = {}  # anchor key (its name) -> what it plays (path), oldest first
        self.results = 0  # results counted into the payoff and ratings (self-play results are not)
        self._keys: list[str] = []
        self._index: dict[str, int] = {}
        self._counts = np.zeros((0, 0, payoff.ROW))
        self._elo: list[float] = []
        self._trueskill: list[tuple[float, float]] = []
        self._history: dict[str, list[tuple[int, float]]] = {}
        self._moved: set[int] = set()  # keys whose Elo changed since the last history point
        self.pbt = PbtState(config.pbt_interval)  # population-based training's members, tallies and history

    # --- events -----------------------------------------------------------------------------------

    def add_player(self, name: str, role: Role, learner_step: int = 0, pending: Optional[bool] = None) -> PlayerInfo:
        info = PlayerInfo(name=name, role=Role(role), learner_step=learner_step)
        self.players[name] = info
        self.pending[name] = pending
        if info.role != Role.ANCHOR:  # an anchor's key arrives with its snapshot (`add_snapshot`)
            self._add_key(name, self.config.initial_elo, (INITIAL_MU, INITIAL_SIGMA))
        return info

    def check_in(self, name: str, learner_step: int, pending: Optional[bool]) -> None:
        """The player's learner reached `learner_step`; `pending` is the reset flag of a decided snapshot."""
        self.players[name] = dataclasses.replace(self.players[name], learner_step=learner_step)
        self.pending[name] = pending

    def add_snapshot(self, info: SnapshotInfo, reset: bool) -> None:
        """Freeze `info.player`'s live row and ratings as snapshot `info.key`; `reset`: the player restarts.
        An anchor's snapshot is the anchor itself: its key joins at the initial ratings."""
        if self.players[info.player].role == Role.ANCHOR:
            self._add_key(info.key, self.config.initial_elo, (INITIAL_MU, INITIAL_SIGMA))
            self.anchors[info.key] = info
            self.players[info.player] = dataclasses.replace(self.players[info.player], snapshots=1,
                                                            last_snapshot_step=info.step)
            return
        live = self._index[info.player]
        first = next((s for s in self.snapshots.values() if s.player == info.player), None)
        child = self._add_key(info.key, self._elo[live], self._trueskill[live])
        self._counts = payoff.inherit(self._counts, live, child)
        self.snapshots[info.key] = info
        player = self.players[info.player]
        self.players[info.player] = dataclasses.replace(
            player, snapshots=player.snapshots + 1, resets=player.resets + int(reset), last_snapshot_step=info.step
        )
        self.pending[info.player] = None
        if reset and first is not None:
            origin = self._index[first.key]
            self._elo[live], self._trueskill[live] = self._elo[origin], self._trueskill[origin]
            self._history[info.player].append((self.results, self._elo[live]))

    def add_result(self, result: MatchResult) -> None:
        """Count one result into the payoff and ratings; self-play results (opponent = player) change nothing."""
        if result.opponent == result.player:
            return
        i, j, outcome, config = self._index[result.player], self._index[result.opponent], result.outcome, self.config
        self._counts[i, j] = payoff.decayed_update(self._counts[i, j], outcome, config.payoff_decay)
        self._counts[j, i] = payoff.decayed_update(self._counts[j, i], 1.0 - outcome, config.payoff_decay)
        elo_i, elo_j = elo_update(self._elo[i], self._elo[j], outcome, config.elo_k, config.elo_scale)
        self._elo[i], self._elo[j] = float(elo_i), float(elo_j)
        self._trueskill[i], self._trueskill[j] = rate_1v1(self._trueskill[i], self._trueskill[j], outcome)
        self.pbt.count(result.player, result.opponent, outcome, result.value)
        self.results += 1
        self._moved.update((i, j))
        if self.results % config.elo_history_every == 0:
            for index in sorted(self._moved):
                self._history[self._keys[index]].append((self.results, self._elo[index]))
            self._moved.clear()

    # --- reads ------------------------------------------------------------------------------------

    def view(self) -> LeagueView:
        """A read-only view for matchmaking; valid until the next event."""
        k = len(self._keys)
        counts = self._counts[:k, :k].view()
        counts.flags.writeable = False
        return LeagueView(
            players=types.MappingProxyType({n: p for n, p in self.players.items() if learns(p.role)}),
            snapshots=tuple(self.snapshots.values()),
            anchors=tuple(self.anchors),
            index=types.MappingProxyType(self._index),
            counts=counts,
            min_games=self.config.min_games,
        )

    def role_of(self, key: str) -> Role:
        return self.players[key].role if key in self.players else self.snapshots[key].role

    def standings(self) -> list[Standing]:
        """Every key, best Elo first; games and win rate are decayed, over all its games."""
        k = len(self._keys)
        totals = self._counts[:k, :k].sum(axis=1)
        rates = payoff.win_rate(totals[:, payoff.WINS], totals[:, payoff.DRAWS], totals[:, payoff.GAMES], 0.0)
        output = self.pbt.leader({}, self.config.pbt_min_games)[0] if len(self.pbt.settings) > 1 else None
        rows = [
            Standing(key, self.role_of(key), self._elo[i], float(totals[i, payoff.GAMES]), float(rates[i]),
                     *self._trueskill[i], pbt=self.pbt.note(key, key == output))
            for i, key in enumerate(self._keys)
        ]
        return sorted(rows, key=lambda row: -row.elo)

    def payoff_matrix(self) -> PayoffMatrix:
        k = len(self._keys)
        counts = self._counts[:k, :k]
        games = counts[..., payoff.GAMES]
        rates = payoff.win_rate(counts[..., payoff.WINS], counts[..., payoff.DRAWS], games, self.config.min_games)
        return PayoffMatrix(keys=list(self._keys), win_rate=rates.tolist(), games=games.tolist())

    def elo_history(self) -> dict[str, list[tuple[int, float]]]:
        """key -> [(results counted so far, Elo)]: a point when the key appears, then every
        elo_history_every results for keys whose Elo moved (and when a player resets)."""
        return {key: list(points) for key, points in self._history.items()}

    # --- helpers ----------------------------------------------------------------------------------

    def _add_key(self, key: str, elo: float, trueskill: tuple[float, float]) -> int:
        index = len(self._keys)
        if index == self._counts.shape[0]:
            grown = np.zeros((max(16, 2 * index),) * 2 + (payoff.ROW,))
            grown[:index, :index] = self._counts
            self._counts = grown
        self._keys.append(key)
        self._index[key] = index
        self._elo.append(float(elo))
        self._trueskill.append(trueskill)
        self._history[key] = [(self.results, float(elo))]
        return index
