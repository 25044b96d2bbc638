"""SQLite persistence of the league: players, snapshots and results, in commit order.

    store = LeagueStore("runs/x/league.sqlite")
    for event in store.events():          # PlayerRow | SnapshotRow | MatchResult, oldest first
        ...                               # replay into a LeagueState
    store.add_results(results)            # returns the new ones; ids already stored are ignored

Every player, snapshot and result row carries `seq`, one counter shared by the
three tables, so `events()` returns them in exactly the order they were
committed and the in-memory payoff, Elo and TrueSkill (which depend on that
order) are rebuilt identically on restart. A write returns only after its
transaction commits: a caller may acknowledge it then. Results are keyed by
`result_id` and inserted with INSERT OR IGNORE, so a retried report is stored
once. Callers serialise access (the service holds one lock).

A write SQLite refuses (a full disk, an I/O error, a read-only file) raises `StoreWriteError`
naming the file and the fix, after the transaction is rolled back: by us, or by SQLite itself,
which rolls back on its own after some errors (then a ROLLBACK would fail with "cannot rollback
- no transaction is active" and hide the real error). Nothing of the call is stored then.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import json
import os
import shutil
import sqlite3
from typing import Iterator, Optional, Sequence, Union

from seedleague.league.pbt import PbtRow, row_settings
from seedleague.league.types import MatchResult, Role, SnapshotInfo

SCHEMA_VERSION = 1

_SCHEMA = (
    "CREATE TABLE schema_version (version INTEGER NOT NULL)",
    """CREATE TABLE players (
    name TEXT PRIMARY KEY,
    role TEXT NOT NULL,
    learner_step INTEGER NOT NULL DEFAULT 0,   -- last check-in
    pending INTEGER,                           -- NULL: no snapshot decided, else the reset flag of one decided
    seq INTEGER NOT NULL UNIQUE
)""",
    """CREATE TABLE snapshots (
    key TEXT PRIMARY KEY,                      -- "player:step"
    player TEXT NOT NULL REFERENCES players(name),
    step INTEGER NOT NULL,
    path TEXT NOT NULL,
    role TEXT NOT NULL,
    reset INTEGER NOT NULL,                    -- 1: the player was reset to its initial params after it
    seq INTEGER NOT NULL UNIQUE
)""",
    """CREATE TABLE results (
    result_id TEXT PRIMARY KEY,
    player TEXT NOT NULL,
    opponent TEXT NOT NULL,
    outcome REAL NOT NULL,
    learner_step INTEGER NOT NULL,
    seq INTEGER NOT NULL UNIQUE,
    value REAL                                 -- the learner's return in the game's units; NULL: not reported
)""",
)

# Added to the results table of a database of schema version 1 that lacks it (a league from before returns were
# kept resumes as it was: its results have no value).
_RESULT_VALUE = "ALTER TABLE results ADD COLUMN value REAL"

# Population-based training's events (seedleague.league.pbt): created in a database of schema version 1 that
# lacks it, so a league from before PBT resumes as it was.
_PBT_TABLE = """CREATE TABLE IF NOT EXISTS pbt (
    seq INTEGER PRIMARY KEY,                   -- shared with players, snapshots and results: commit order
    round INTEGER NOT NULL,                    -- 0 for a member's INIT row
    member TEXT NOT NULL REFERENCES players(name),
    kind TEXT NOT NULL,                        -- init | look | exploit | kept
    old TEXT NOT NULL,                         -- JSON [entropy_cost, learning_rate, kl_cost] multipliers before
    new TEXT NOT NULL,                         -- ... and after
    source TEXT NOT NULL,                      -- exploit: the member copied
    source_key TEXT NOT NULL,                  -- exploit: the snapshot copied
    evidence TEXT NOT NULL,                    -- JSON: scores, games and the confidence bound that decided
    delivered INTEGER NOT NULL DEFAULT 0       -- exploit: handed to the member's host at a check-in
)"""


_IDS_PER_QUERY = 500  # host parameters per SELECT ... IN (...); SQLite allows 32766


def _unseen(results: Sequence[MatchResult], seen: set[str]) -> list[MatchResult]:
    """`results` whose ids are not in `seen` and not earlier in `results`, in order."""
    seen, new = set(seen), []
    for result in results:
        if result.result_id not in seen:
            seen.add(result.result_id)
            new.append(result)
    return new


def _write_fix(path: str, error: sqlite3.OperationalError) -> str:
    """What to change after SQLite refused a write to `path`."""
    text = str(error).lower()
    if "full" in text:
        try:
            free = f" ({shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free / 2**20:.1f} MiB free)"
        except OSError:
            free = ""
        return f"the disk holding it is full{free}: free space there, then --resume the run"
    if "readonly" in text or "read-only" in text:
        return "the file or its directory is read-only: make it writable, or give a new --run-dir"
    return "check the disk holding it"


class StoreError(Exception):
    """The database file cannot be used as a league store (other schema version, not a league DB)."""


class StoreWriteError(StoreError):
    """A write was refused by SQLite or the disk and rolled back: nothing of it is stored."""


@dataclasses.dataclass(frozen=True)
class PlayerRow:
    """A player as stored; snapshot and reset counts are derived from its snapshot rows."""

    name: str
    role: Role
    learner_step: int = 0
    pending: Optional[bool] = None  # reset flag of a snapshot decided at a check-in and not yet added


@dataclasses.dataclass(frozen=True)
class SnapshotRow:
    info: SnapshotInfo
    reset: bool


Event = Union[PlayerRow, SnapshotRow, MatchResult, PbtRow]


class LeagueStore:
    """The league's SQLite file (WAL); see the module docstring."""

    def __init__(self, path: str):
        self.path = path
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._next_seq = 1
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            # FULL: every COMMIT fsyncs the WAL before returning. NORMAL would already survive kill -9 of this
            # process (the WAL frames are written to the OS before COMMIT returns), but could lose the last
            # acknowledged commits on power loss or a kernel crash; results arrive in batches, so one fsync
            # per batch is cheap.
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._open_schema()
        except (sqlite3.DatabaseError, StoreError) as error:
            self._db.close()
            if isinstance(error, StoreError):
                raise
            raise StoreError(f"{path!r} is not a usable league database ({error}): rename it (and any -wal and "
                             "-shm file beside it) to start the league afresh, then --resume continues from the "
                             "run's newest checkpoint; or give a new --run-dir") from None
        self._next_seq = 1 + max(
            self._db.execute(f"SELECT COALESCE(MAX(seq), 0) FROM {table}").fetchone()[0]
            for table in ("players", "snapshots", "results", "pbt")
        )

    def close(self) -> None:
        self._db.close()

    # --- reads ------------------------------------------------------------------------------------

    def events(self) -> Iterator[Event]:
        """Every player, snapshot, result and PBT row, in commit order."""
        players = (
            (seq, PlayerRow(name, Role(role), step, None if pending is None else bool(pending)))
            for name, role, step, pending, seq in self._db.execute(
                "SELECT name, role, learner_step, pending, seq FROM players ORDER BY seq"
            )
        )
        snapshots = (
            (seq, SnapshotRow(SnapshotInfo(key, player, step, path, Role(role)), bool(reset)))
            for key, player, step, path, role, reset, seq in self._db.execute(
                "SELECT key, player, step, path, role, reset, seq FROM snapshots ORDER BY seq"
            )
        )
        results = (
            (seq, MatchResult(result_id, player, opponent, outcome, step, value))
            for result_id, player, opponent, outcome, step, seq, value in self._db.execute(
                "SELECT result_id, player, opponent, outcome, learner_step, seq, value FROM results ORDER BY seq"
            )
        )
        pbt = (
            (seq, PbtRow(round_, member, kind, row_settings(json.loads(old)), row_settings(json.loads(new)), source,
                         source_key, json.loads(evidence), bool(delivered)))
            for seq, round_, member, kind, old, new, source, source_key, evidence, delivered in self._db.execute(
                "SELECT seq, round, member, kind, old, new, source, source_key, evidence, delivered FROM pbt "
                "ORDER BY seq")
        )
        for _, event in heapq.merge(players, snapshots, results, pbt, key=lambda pair: pair[0]):
            yield event

    # --- writes (each one transaction) ------------------------------------------------------------

    def add_player(self, name: str, role: Role) -> None:
        with self._transaction() as db:
            db.execute("INSERT INTO players (name, role, seq) VALUES (?, ?, ?)", (name, Role(role).value, self._seq()))

    def check_in(self, name: str, learner_step: int, pending: Optional[bool]) -> None:
        with self._transaction() as db:
            db.execute(
                "UPDATE players SET learner_step = ?, pending = ? WHERE name = ?",
                (learner_step, None if pending is None else int(pending), name),
            )

    def add_snapshot(self, info: SnapshotInfo, reset: bool) -> None:
        """Store the snapshot and clear its player's pending decision, in one transaction."""
        with self._transaction() as db:
            db.execute(
                "INSERT INTO snapshots (key, player, step, path, role, reset, seq) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (info.key, info.player, info.step, info.path, Role(info.role).value, int(reset), self._seq()),
            )
            db.execute("UPDATE players SET pending = NULL WHERE name = ?", (info.player,))

    def add_results(self, results: Sequence[MatchResult]) -> list[MatchResult]:
        """Store every result whose id is new; returns those, in commit order."""
        with self._transaction() as db:
            new = _unseen(results, self._stored_ids(db, [r.result_id for r in results]))
            first = self._next_seq
            db.executemany(
                "INSERT INTO results (result_id, player, opponent, outcome, learner_step, seq, value) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(r.result_id, r.player, r.opponent, float(r.outcome), int(r.learner_step), first + n,
                  None if r.value is None else float(r.value)) for n, r in enumerate(new)],
            )
            self._next_seq += len(new)
        return new

    def add_pbt_rows(self, rows: Sequence[PbtRow]) -> None:
        """Store a member's INIT row or a whole round's rows, in one transaction."""
        with self._transaction() as db:
            db.executemany(
                "INSERT INTO pbt (seq, round, member, kind, old, new, source, source_key, evidence, delivered) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(self._seq(), r.round, r.member, r.kind, json.dumps(_multipliers(r.old)),
                  json.dumps(_multipliers(r.new)), r.source, r.source_key, r.evidence_json(), int(r.delivered))
                 for r in rows],
            )

    def pbt_delivered(self, member: str, round_: int) -> None:
        """Mark `member`'s EXPLOIT row of round `round_` as handed to its host."""
        with self._transaction() as db:
            db.execute("UPDATE pbt SET delivered = 1 WHERE member = ? AND round = ? AND kind = 'exploit'",
                       (member, round_))

    @staticmethod
    def _stored_ids(db: sqlite3.Connection, ids: list[str]) -> set[str]:
        """Which of `ids` the results table holds (one query per chunk: a row-by-row INSERT OR IGNORE cost
        15 us a result, most of the league's time once ratings were cheap)."""
        stored: set[str] = set()
        for start in range(0, len(ids), _IDS_PER_QUERY):
            chunk = ids[start:start + _IDS_PER_QUERY]
            query = f"SELECT result_id FROM results WHERE result_id IN ({','.join('?' * len(chunk))})"
            stored.update(result_id for (result_id,) in db.execute(query, chunk))
        return stored

    # --- helpers ----------------------------------------------------------------------------------

    def _seq(self) -> int:
        seq, self._next_seq = self._next_seq, self._next_seq + 1
        return seq

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT; on any error ROLLBACK (unless SQLite already did) and give back the
        sequence numbers taken. SQLite's own errors become StoreWriteError."""
        first_seq = self._next_seq
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                self._next_seq = first_seq
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
        except sqlite3.OperationalError as error:  # full disk, I/O error, read-only or locked file
            raise StoreWriteError(f"the league could not write {self.path} ({error}); nothing of this call was "
                                  f"stored: {_write_fix(self.path, error)}") from None

    def _open_schema(self) -> None:
        tables = {name for (name,) in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            with self._transaction() as db:  # not executescript: it would COMMIT on its own
                for statement in _SCHEMA + (_PBT_TABLE,):
                    db.execute(statement)
                db.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
            return
        if "schema_version" not in tables:
            raise StoreError(f"{self.path!r} is an SQLite file but not a league database: give a new --run-dir")
        versions = [v for (v,) in self._db.execute("SELECT version FROM schema_version")]
        if versions != [SCHEMA_VERSION]:
            raise StoreError(
                f"league database {self.path!r} has schema version {versions[0] if versions else 'none'}, "
                f"this seedleague reads version {SCHEMA_VERSION}: use the seedleague version that wrote it "
                "or start a new --run-dir"
            )
        if "pbt" not in tables:
            with self._transaction() as db:
                db.execute(_PBT_TABLE)
        if "value" not in {column for _, column, *_ in self._db.execute("PRAGMA table_info(results)")}:
            with self._transaction() as db:
                db.execute(_RESULT_VALUE)


def _multipliers(settings) -> list[float]:
    return [settings.entropy_cost, settings.learning_rate, settings.kl_cost]
