"""League: the league service in-process, implementing `types.LeagueAPI` over SQLite.

    league = League(LeagueConfig(mode=Mode.ALPHASTAR), "runs/x/league.sqlite")
    league.register_player("main", Role.MAIN)
    decision = league.check_in("main", learner_step=0)        # snapshot=True: the initial params
    league.add_snapshot("main", 0, "runs/x/pool/main/0")
    matches = league.get_opponents("main", count=8)
    league.report_results([MatchResult(uuid, "main", "main:000000", 1.0)])
    print(league.leaderboard_text())
    league.close()

This module owns input checking, the lock and the write-then-apply order: every
call checks its input first (a refused call raises ProtocolError and changes
nothing), then writes to the store, and only after the commit applies the event
to the in-memory `LeagueState`; on start it replays the store into that state. A write the
store could not commit is refused with INTERNAL and changes nothing (so results it could not
store are never acknowledged).
Population-based training (`seedleague.league.pbt`, LeagueConfig.pbt_interval > 0): each main player gets
settings when it registers; at a check-in that finds a round due the service plans it, stores its rows and
applies them; every check-in answer of a member carries its settings, and once its newest copy.
Anchors (fixed members: `add_anchor`) and humans (role HUMAN) never check in, snapshot or
draw opponents; a human reports results as a learner does. Who plays whom is `matchmaking`; the arithmetic is in `payoff`, `elo`,
`trueskill` and `nash`. Thread-safe: one lock around every call.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
from typing import Optional, Sequence

import numpy as np

from seedleague.league import matchmaking, pbt, tables
from seedleague.league.config import LeagueConfig
from seedleague.league.payoff import OUTCOMES
from seedleague.league.state import LeagueState
from seedleague.league.store import LeagueStore, PlayerRow, SnapshotRow, StoreWriteError
from seedleague.league.types import (
    Match,
    MatchResult,
    Mode,
    PayoffMatrix,
    PbtAnswer,
    PlayerInfo,
    Role,
    SnapshotDecision,
    SnapshotInfo,
    Standing,
    learns,
    outcome_of,
    snapshot_key,
)
from seedleague.protocol.errors import (FAILED_PRECONDITION, INTERNAL, INVALID_ARGUMENT, NOT_FOUND, UNAVAILABLE,
                                        ProtocolError)

MAX_NAME_CHARS = 64
MAX_RESULT_ID_CHARS = 128
MAX_PATH_CHARS = 4096
MAX_STEP = 1 << 62
MAX_OPPONENTS_PER_CALL = 10_000
MAX_RESULTS_PER_CALL = 100_000

log = logging.getLogger(__name__)


def _stored(write, *args):
    """`write(*args)` on the store; ProtocolError(INTERNAL) naming the file when SQLite refused it (rolled back:
    nothing of the call is stored, and the caller must not count it as acknowledged)."""
    try:
        return write(*args)
    except StoreWriteError as error:
        raise ProtocolError(INTERNAL, str(error)) from None


class League:
    """The league over the SQLite file `db_path` (created if missing, replayed if not)."""

    def __init__(self, config: LeagueConfig, db_path: str):
        self.config = config
        self._lock = threading.Lock()
        self._store: Optional[LeagueStore] = LeagueStore(db_path)
        self._state = LeagueState(config)
        self._rng = np.random.default_rng(config.seed)
        self._psro = _PsroMixture(config.psro_epsilon)
        _replay(self._state, self._store)

    # --- LeagueAPI --------------------------------------------------------------------------------

    def register_player(self, name: str, role: Role) -> PlayerInfo:
        """Create the player, or return it unchanged if it exists with the same role."""
        _check_name(name)
        role = _check_role(role)
        with self._lock:
            store = self._open_store()
            existing = self._state.players.get(name)
            if existing is not None:
                if existing.role != role:
                    raise ProtocolError(
                        FAILED_PRECONDITION,
                        f"player {name!r} is registered as {existing.role.value}, not {role.value}: "
                        "use another name for a player with another role",
                    )
                return existing
            _stored(store.add_player, name, role)
            info = self._state.add_player(name, role)
            if self._state.pbt.enabled and role == Role.MAIN:
                self._pbt_join(store, name)
            return info

    def get_opponents(self, player: str, count: int) -> list[Match]:
        count = _check_int(count, "count", 1, MAX_OPPONENTS_PER_CALL)
        with self._lock:
            self._open_store()
            self._learner(player, "draws no opponents")
            view = self._state.view()
            psro = self._psro.mixture(view) if self.config.mode == Mode.PSRO else None
            return matchmaking.choose_opponents(view, player, count, self.config, self._rng, psro)

    def report_results(self, results: Sequence[MatchResult]) -> int:
        """Record the results whose ids are new, in one transaction; returns how many were new."""
        if not isinstance(results, (list, tuple)) or len(results) > MAX_RESULTS_PER_CALL:
            raise ProtocolError(INVALID_ARGUMENT, f"results must be a list of at most {MAX_RESULTS_PER_CALL} MatchResult")
        with self._lock:
            store = self._open_store()
            for result in results:
                self._check_result(result)
            new = _stored(store.add_results, results)
            for result in new:
                self._state.add_result(result)
            return len(new)

    def check_in(self, player: str, learner_step: int) -> SnapshotDecision:
        """Whether to snapshot (and reset) now; a decision given stands until its snapshot is added."""
        learner_step = _check_int(learner_step, "learner_step", 0, MAX_STEP)
        with self._lock:
            store = self._open_store()
            info = self._learner(player, "never checks in")
            pending = self._state.pending[player]
            if info.snapshots and learner_step <= info.last_snapshot_step:
                # The learner went back to a checkpoint older than its newest snapshot (a --resume that passed
                # over a damaged checkpoint, or a host killed between a snapshot and its next checkpoint): its
                # next snapshot must come after that one, and a decision made for the learner it was is dropped.
                decision = SnapshotDecision(False, False, f"learner step {learner_step} is not past the last "
                                            f"snapshot, step {info.last_snapshot_step}: snapshots continue after it")
            elif pending is not None:
                decision = SnapshotDecision(True, pending, "repeating the earlier answer: add that snapshot first")
            else:
                view = self._state.view()
                decision = matchmaking.check_in_decision(view, info, learner_step, self.config, self._rng)
            pending = decision.reset if decision.snapshot else None
            _stored(store.check_in, player, learner_step, pending)
            self._state.check_in(player, learner_step, pending)
            if self._state.pbt.is_member(player):
                decision = dataclasses.replace(decision, pbt=self._pbt_check_in(store, player))
            return decision

    def add_snapshot(self, player: str, step: int, path: str) -> SnapshotInfo:
        """Register saved params as snapshot player:step; the same key and path again returns it unchanged."""
        step = _check_int(step, "step", 0, MAX_STEP)
        if not isinstance(path, str) or not path or len(path) > MAX_PATH_CHARS or not path.isprintable():
            raise ProtocolError(
                INVALID_ARGUMENT, f"path must be a non-empty string of at most {MAX_PATH_CHARS} printable chars"
            )
        with self._lock:
            store = self._open_store()
            info = self._player(player)
            if info.role == Role.ANCHOR:
                return self._add_anchor_snapshot(store, info, step, path)
            self._learner(player, "has no snapshots")
            key = snapshot_key(player, step)
            existing = self._state.snapshots.get(key)
            if existing is not None:
                if existing.path != path:
                    raise ProtocolError(
                        FAILED_PRECONDITION, f"snapshot {key} is already registered with path {existing.path!r}"
                    )
                return existing
            if info.snapshots and step <= info.last_snapshot_step:
                raise ProtocolError(
                    FAILED_PRECONDITION,
                    f"snapshot steps of {player!r} must increase: its last snapshot is at step {info.last_snapshot_step}",
                )
            snapshot = SnapshotInfo(key=key, player=player, step=step, path=path, role=info.role)
            reset = bool(self._state.pending[player])
            _stored(store.add_snapshot, snapshot, reset)
            self._state.add_snapshot(snapshot, reset)
            return snapshot

    def add_anchor(self, name: str, path: str) -> SnapshotInfo:
        """A fixed member `name` that plays what `path` names ("uniform", or a run directory): registered as a
        player of role ANCHOR with its one snapshot (key `name`, step 0). The same name and path again returns
        it unchanged; another path under a taken name is refused (FAILED_PRECONDITION)."""
        self.register_player(name, Role.ANCHOR)
        return self.add_snapshot(name, 0, path)

    def _add_anchor_snapshot(self, store: LeagueStore, info: PlayerInfo, step: int, path: str) -> SnapshotInfo:
        existing = self._state.anchors.get(info.name)
        if existing is not None:
            if existing.path != path:
                raise ProtocolError(FAILED_PRECONDITION, f"anchor {info.name!r} already plays {existing.path!r}, "
                                    f"not {path!r}: give the new one another name (NAME=PATH)")
            return existing
        if step != 0:
            raise ProtocolError(INVALID_ARGUMENT, f"an anchor has one snapshot, at step 0, got step {step}")
        anchor = SnapshotInfo(key=info.name, player=info.name, step=0, path=path, role=Role.ANCHOR)
        _stored(store.add_snapshot, anchor, False)
        self._state.add_snapshot(anchor, False)
        return anchor

    def snapshots(self, player: Optional[str] = None) -> list[SnapshotInfo]:
        """Every learning player's snapshot, oldest first; of `player` only, if given (an anchor's name gives
        the anchor's one snapshot: its key and what it plays)."""
        with self._lock:
            if player is not None:
                self._player(player)
                if player in self._state.anchors:
                    return [self._state.anchors[player]]
            return [s for s in self._state.snapshots.values() if player is None or s.player == player]

    def anchors(self) -> list[SnapshotInfo]:
        """Every anchor, in the order they joined: key (its name) and what it plays (path)."""
        with self._lock:
            return list(self._state.anchors.values())

    def players(self) -> list[PlayerInfo]:
        with self._lock:
            return list(self._state.players.values())

    def standings(self) -> list[Standing]:
        with self._lock:
            return self._state.standings()

    def payoff(self) -> PayoffMatrix:
        with self._lock:
            return self._state.payoff_matrix()

    # --- population-based training -----------------------------------------------------------------

    def _pbt_join(self, store: LeagueStore, name: str) -> None:
        """A new member's INIT row: member k's settings drawn from an RNG of its own (seed, k)."""
        index = len(self._state.pbt.settings)
        settings = pbt.initial_settings(index, np.random.default_rng([self.config.seed, index]))
        row = pbt.PbtRow(self._state.pbt.rounds, name, pbt.INIT, settings, settings)
        _stored(store.add_pbt_rows, [row])
        self._state.pbt.apply(row)

    def _pbt_check_in(self, store: LeagueStore, player: str) -> PbtAnswer:
        """Look at the open round if a look is due, then `player`'s settings and its newest copy if not yet handed out."""
        state = self._state.pbt
        if state.due({name: info.learner_step for name, info in self._state.players.items()}):
            view = state.round_input(self._latest_snapshots())
            config = self.config
            rows = pbt.plan_round(view, pbt.Test(config.pbt_alpha, config.pbt_looks, config.pbt_min_games,
                                                 config.pbt_spending),
                                  config.pbt_share, (1 - config.pbt_perturb, 1 + config.pbt_perturb),
                                  np.random.default_rng([config.seed, 1, view.round, view.look]))
            _stored(store.add_pbt_rows, rows)
            for row in rows:
                state.apply(row)
                if row.kind == pbt.EXPLOIT:
                    log.info("pbt %s", row.text())
        settings, copy = state.settings[player], state.undelivered.get(player)
        if copy is not None:
            _stored(store.pbt_delivered, player, copy.round)
            state.delivered(player)
        return PbtAnswer(settings.entropy_cost, settings.learning_rate, settings.kl_cost,
                         copy.source_key if copy is not None else "", copy.text() if copy is not None else "")

    def _latest_snapshots(self) -> dict[str, str]:
        latest = {}
        for snapshot in self._state.snapshots.values():
            latest[snapshot.player] = snapshot.key
        return latest

    def pbt_output(self, player: str) -> Optional[tuple[str, str]]:
        """(member, why): the PBT member whose output stands for `player`'s, the best by the league's evidence
        (`pbt.leader`); None when `player` is no member of population-based training."""
        with self._lock:
            state = self._state.pbt
            if not state.is_member(player):
                return None
            return state.leader(self._latest_snapshots(), self.config.pbt_min_games)

    def pbt_members(self, player: str) -> list[str]:
        """The members of the population-based training `player` belongs to, in join order; [] when it is no
        member."""
        with self._lock:
            state = self._state.pbt
            return list(state.settings) if state.is_member(player) else []

    def pbt_history(self) -> list[pbt.PbtRow]:
        """Every PBT event so far, oldest first: joins, and each round's copies and keeps with their evidence."""
        with self._lock:
            return list(self._state.pbt.history)

    # --- reports ----------------------------------------------------------------------------------

    def elo_history(self) -> dict[str, list[tuple[int, float]]]:
        """key -> [(results counted so far, Elo)], sampled every config.elo_history_every results."""
        with self._lock:
            return self._state.elo_history()

    def results_counted(self) -> int:
        """Results counted into the payoff and ratings so far (self-play results are not)."""
        with self._lock:
            return self._state.results

    def draw_preview(self, player: str, count: int, seed: int = 0) -> list[Match]:
        """`count` draws as `get_opponents` would make them now, from an RNG of their own (`seed`):
        the league's own RNG and state are untouched (the league page's "whom each player draws now")."""
        count = _check_int(count, "count", 1, MAX_OPPONENTS_PER_CALL)
        with self._lock:
            self._learner(player, "draws no opponents")
            view = self._state.view()
            psro = self._psro.mixture(view) if self.config.mode == Mode.PSRO else None
            return matchmaking.choose_opponents(view, player, count, self.config, np.random.default_rng(seed), psro)

    def leaderboard_text(self, top: int = 20) -> str:
        return tables.standings_table(self.standings(), top)

    def close(self) -> None:
        """Close the database; later calls that write raise ProtocolError(UNAVAILABLE). Idempotent."""
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None

    def __enter__(self) -> "League":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # --- checks -----------------------------------------------------------------------------------

    def _open_store(self) -> LeagueStore:
        if self._store is None:
            raise ProtocolError(UNAVAILABLE, "the league is shut down")
        return self._store

    def _player(self, name: str) -> PlayerInfo:
        info = self._state.players.get(name) if isinstance(name, str) else None
        if info is None:
            raise ProtocolError(NOT_FOUND, f"unknown player {name!r}: register it first")
        return info

    def _learner(self, name: str, what: str) -> PlayerInfo:
        """The learning player `name`; FAILED_PRECONDITION for an anchor or a human, which `what`."""
        info = self._player(name)
        if not learns(info.role):
            raise ProtocolError(FAILED_PRECONDITION, f"{name!r} is a league member of role {info.role.value}, "
                                f"which {what}: only learning players do")
        return info

    def _check_result(self, result: MatchResult) -> None:
        if not isinstance(result, MatchResult):
            raise ProtocolError(INVALID_ARGUMENT, f"expected a MatchResult, got {type(result).__name__}")
        rid = result.result_id
        if not isinstance(rid, str) or not rid or len(rid) > MAX_RESULT_ID_CHARS or not rid.isprintable():
            raise ProtocolError(
                INVALID_ARGUMENT, f"result_id must be 1 to {MAX_RESULT_ID_CHARS} printable chars (a uuid), got {rid!r}"
            )
        if self._player(result.player).role == Role.ANCHOR:
            raise ProtocolError(INVALID_ARGUMENT, f"result {rid}: {result.player!r} is an anchor, which reports no "
                                "results: report the learner's or the human's side, with the anchor as opponent")
        known = result.opponent in self._state.snapshots or result.opponent in self._state.anchors
        if result.opponent != result.player and not known:
            if result.opponent in self._state.players:
                raise ProtocolError(
                    INVALID_ARGUMENT,
                    f"result {rid}: opponent {result.opponent!r} is another player's live params, which no match "
                    "plays: report the snapshot key played, or the player's own name for self-play",
                )
            raise ProtocolError(NOT_FOUND, f"result {rid}: unknown snapshot key {result.opponent!r}")
        if isinstance(result.outcome, bool) or result.outcome not in OUTCOMES:
            raise ProtocolError(
                INVALID_ARGUMENT, f"result {rid}: outcome must be 1 (win), 0.5 (draw) or 0 (loss), got {result.outcome!r}"
            )
        _check_int(result.learner_step, f"result {rid}: learner_step", 0, MAX_STEP)
        value = result.value
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or outcome_of(value) != result.outcome):
            raise ProtocolError(
                INVALID_ARGUMENT, f"result {rid}: value (the learner's return) must be a finite number whose sign "
                f"gives the outcome {result.outcome!r} (positive: win, 0: draw, negative: loss), got {value!r}")


def _replay(state: LeagueState, store: LeagueStore) -> None:
    """Apply the stored events to `state` in commit order, as the live calls did after their commits.

    A player row holds its latest check-in, so that is applied last (replaying its
    snapshots clears any pending decision on the way).
    """
    players = []
    for event in store.events():
        if isinstance(event, PlayerRow):
            state.add_player(event.name, event.role)
            players.append(event)
        elif isinstance(event, SnapshotRow):
            state.add_snapshot(event.info, event.reset)
        elif isinstance(event, pbt.PbtRow):
            state.pbt.apply(event)
        else:
            state.add_result(event)
    for row in players:
        state.check_in(row.name, row.learner_step, row.pending)


def _check_name(name: str) -> None:
    if (
        not isinstance(name, str)
        or not 1 <= len(name) <= MAX_NAME_CHARS
        or not name.isprintable()
        or any(c == ":" or c.isspace() for c in name)
    ):
        raise ProtocolError(
            INVALID_ARGUMENT,
            f"player name must be 1 to {MAX_NAME_CHARS} printable chars without ':' or whitespace, got {name!r}",
        )


def _check_role(role) -> Role:
    try:
        return Role(role)
    except ValueError:
        raise ProtocolError(
            INVALID_ARGUMENT, f"unknown role {role!r}: use one of {', '.join(r.value for r in Role)}"
        ) from None


def _check_int(value, what: str, low: int, high: int) -> int:
    """`value` as a Python int (numpy integers accepted), or INVALID_ARGUMENT."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
        raise ProtocolError(INVALID_ARGUMENT, f"{what} must be an integer in [{low}, {high}], got {value!r}")
    return int(value)


class _PsroMixture:
    """Mode.PSRO's meta-strategy (`matchmaking.psro_mixture`), solved again only when a snapshot joins.

    Exact, not a staleness trade: the mixture reads only the win rates among snapshots, and those change
    only when a snapshot joins (`payoff.inherit`); every result is a live player's and moves only that
    player's row. Solving it at every request made the league process the host's rival for the CPU as
    snapshots piled up (benchmarks/README.md, "The league's Nash solve, once per snapshot")."""

    def __init__(self, epsilon: float):
        self._epsilon = epsilon
        self._keys: Optional[tuple[str, ...]] = None
        self._mixture = np.zeros(0)

    def mixture(self, view: matchmaking.LeagueView) -> np.ndarray:
        keys = tuple(s.key for s in view.snapshots)
        if keys != self._keys:
            self._mixture, self._keys = matchmaking.psro_mixture(view, self._epsilon), keys
        return self._mixture
