"""The in-process League over SQLite: persistence across restarts, idempotent results,
snapshot inheritance and resets, refusals that change nothing, reports."""

from __future__ import annotations

import sqlite3
import threading
import uuid

import pytest

from seedleague.league.config import LeagueConfig
from seedleague.league.service import League
from seedleague.league.store import LeagueStore, StoreError
from seedleague.league.types import Match, MatchResult, Mode, Role, SnapshotInfo
from seedleague.protocol.errors import ProtocolError

NO_DECAY = LeagueConfig(payoff_decay=1.0, min_games=0, elo_history_every=2)


def result(player, opponent, outcome=1.0, rid=None, value=None) -> MatchResult:
    return MatchResult(uuid.uuid4().hex if rid is None else rid, player, opponent, outcome, value=value)


def state(league: League):
    """Everything observable about a league, for before/after comparisons."""
    return league.players(), league.snapshots(), league.payoff(), league.standings(), league.elo_history()


@pytest.fixture
def db(tmp_path):
    return str(tmp_path / "league.sqlite")


@pytest.fixture
def league(db):
    with League(NO_DECAY, db) as league:
        yield league


def seeded(league: League) -> League:
    """main (with snapshots at 0 and 500) and exploiter x (snapshot at 0), and a few results."""
    league.register_player("main", Role.MAIN)
    league.register_player("x", Role.MAIN_EXPLOITER)
    for name in ("main", "x"):
        assert league.check_in(name, 0).snapshot
        league.add_snapshot(name, 0, f"/pool/{name}/0")
    league.report_results([result("main", "x:000000", 1.0), result("x", "main:000000", 0.5)])
    league.add_snapshot("main", 500, "/pool/main/500")
    league.report_results([result("main", "main:000500", 0.0), result("x", "main:000500", 1.0)])
    return league


def test_state_survives_a_restart(db):
    with League(NO_DECAY, db) as league:
        seeded(league)
        assert league.check_in("x", 2000).snapshot  # main exploiter timeout: pending decision with reset
        before = state(league)
    with League(NO_DECAY, db) as league:
        assert state(league) == before
        assert league.players()[1].learner_step == 2000
        repeated = league.check_in("x", 2001)  # the pending decision survived the restart
        assert repeated.snapshot and repeated.reset
        league.add_snapshot("x", 2000, "/pool/x/2000")
        after = state(league)
    with League(NO_DECAY, db) as league:
        assert state(league) == after
        assert league.players()[1].resets == 1


def test_same_result_id_counts_once(league, db):
    seeded(league)
    games = lambda: league.payoff().games[0][league.payoff().keys.index("x:000000")]  # noqa: E731
    before = games()
    twice = result("main", "x:000000", 1.0, rid="r-1")
    assert league.report_results([twice, twice]) == 1
    assert league.report_results([result("main", "x:000000", 0.0), twice]) == 1  # retried in another batch
    assert games() == before + 2
    league.close()
    with League(NO_DECAY, db) as reopened:
        assert reopened.report_results([twice]) == 0


def test_snapshot_inherits_the_live_row_and_the_live_row_restarts(league):
    league.register_player("a", Role.MAIN)
    league.add_snapshot("a", 0, "/a/0")
    league.report_results([result("a", "a:000000", 1.0) for _ in range(3)])
    elo = {s.key: s.elo for s in league.standings()}
    league.add_snapshot("a", 100, "/a/100")
    matrix = league.payoff()
    assert matrix.keys == ["a", "a:000000", "a:000100"]
    assert matrix.games == [[0, 0, 0], [0, 0, 3], [0, 3, 0]]
    assert matrix.win_rate[2][1] == 1.0 and matrix.win_rate[1][2] == 0.0
    assert {s.key: s.elo for s in league.standings()}["a:000100"] == elo["a"]


def test_reset_takes_the_ratings_of_the_first_snapshot(tmp_path):
    config = LeagueConfig(mode=Mode.ALPHASTAR, main_exploiter_timeout_steps=100, min_games=0)
    with League(config, str(tmp_path / "db")) as league:
        league.register_player("m", Role.MAIN)
        league.register_player("x", Role.MAIN_EXPLOITER)
        for name in ("m", "x"):
            league.check_in(name, 0)
            league.add_snapshot(name, 0, f"/{name}/0")
        league.report_results([result("x", "m:000000", 1.0) for _ in range(5)])
        decision = league.check_in("x", 100)
        assert decision.snapshot and decision.reset
        repeated = league.check_in("x", 150)  # repeated until the snapshot arrives
        assert (repeated.snapshot, repeated.reset) == (True, True)
        league.add_snapshot("x", 100, "/x/100")
        rows = {s.key: s for s in league.standings()}
        assert rows["x"].elo == rows["x:000000"].elo and rows["x:000100"].elo > rows["x"].elo
        assert league.players()[1].resets == 1 and not league.check_in("x", 150).snapshot


def test_self_play_results_are_stored_but_not_rated(league):
    seeded(league)
    before = state(league)
    assert league.report_results([result("main", "main", 1.0)]) == 1
    assert state(league) == before


def test_a_leaderboard_of_self_play_alone_says_why_it_has_no_ratings(league):
    league.register_player("main", Role.MAIN)
    league.check_in("main", 0)
    league.add_snapshot("main", 0, "/pool/main/0")
    league.report_results([result("main", "main", 1.0)])
    assert "no rated games yet" in league.leaderboard_text()
    league.report_results([result("main", "main:000000", 1.0)])
    assert "no rated games yet" not in league.leaderboard_text()


def test_get_opponents_returns_count_matches(league):
    seeded(league)
    matches = league.get_opponents("main", 7)
    assert len(matches) == 7 and all(isinstance(m, Match) for m in matches)
    keys = {s.key for s in league.snapshots()} | {"main"}
    assert {m.opponent for m in matches} <= keys


INVALID, MISSING, CONFLICT = "INVALID_ARGUMENT", "NOT_FOUND", "FAILED_PRECONDITION"
GOOD = result("main", "x:000000")  # a batch with one bad result records none
BAD_CALLS = {
    "empty name": (INVALID, lambda lg: lg.register_player("", Role.MAIN)),
    "name with colon": (INVALID, lambda lg: lg.register_player("a:b", Role.MAIN)),
    "name with space": (INVALID, lambda lg: lg.register_player("a b", Role.MAIN)),
    "unknown role": (INVALID, lambda lg: lg.register_player("new", "captain")),
    "role mismatch": (CONFLICT, lambda lg: lg.register_player("main", Role.LEAGUE_EXPLOITER)),
    "opponents of nobody": (MISSING, lambda lg: lg.get_opponents("nobody", 1)),
    "zero opponents": (INVALID, lambda lg: lg.get_opponents("main", 0)),
    "huge count": (INVALID, lambda lg: lg.get_opponents("main", 10**9)),
    "check-in of nobody": (MISSING, lambda lg: lg.check_in("nobody", 1)),
    "negative check-in": (INVALID, lambda lg: lg.check_in("main", -1)),
    "empty path": (INVALID, lambda lg: lg.add_snapshot("main", 600, "")),
    "negative step": (INVALID, lambda lg: lg.add_snapshot("main", -5, "/p")),
    "same key other path": (CONFLICT, lambda lg: lg.add_snapshot("main", 500, "/elsewhere")),
    "step before last": (CONFLICT, lambda lg: lg.add_snapshot("main", 400, "/p")),
    "snapshot of nobody": (MISSING, lambda lg: lg.add_snapshot("nobody", 1, "/p")),
    "snapshots of nobody": (MISSING, lambda lg: lg.snapshots("nobody")),
    "outcome 0.3": (INVALID, lambda lg: lg.report_results([GOOD, result("main", "x:000000", 0.3)])),
    "outcome True": (INVALID, lambda lg: lg.report_results([GOOD, result("main", "x:000000", True)])),
    "unknown snapshot": (MISSING, lambda lg: lg.report_results([GOOD, result("main", "x:999999")])),
    "unknown player": (MISSING, lambda lg: lg.report_results([GOOD, result("ghost", "x:000000")])),
    "live opponent": (INVALID, lambda lg: lg.report_results([GOOD, result("main", "x")])),
    "empty result id": (INVALID, lambda lg: lg.report_results([GOOD, result("main", "x:000000", rid="")])),
    "value of the other sign": (INVALID, lambda lg: lg.report_results([GOOD, result("main", "x:000000", 1.0, value=-2)])),
    "value 0 for a win": (INVALID, lambda lg: lg.report_results([GOOD, result("main", "x:000000", 1.0, value=0.0)])),
    "value nan": (INVALID, lambda lg: lg.report_results([GOOD, result("main", "x:000000", 0.5, value=float("nan"))])),
}


@pytest.mark.parametrize("code, call", BAD_CALLS.values(), ids=BAD_CALLS.keys())
def test_bad_input_is_refused_and_changes_nothing(league, code, call):
    seeded(league)
    before = state(league)
    with pytest.raises(ProtocolError) as error:
        call(league)
    assert error.value.code == code, error.value.message
    assert state(league) == before


def test_repeated_register_and_add_snapshot_return_the_stored_records(league):
    seeded(league)
    assert league.register_player("main", "main").snapshots == 2
    assert league.add_snapshot("main", 500, "/pool/main/500") == SnapshotInfo(
        "main:000500", "main", 500, "/pool/main/500", Role.MAIN
    )
    assert len(league.snapshots("main")) == 2


def test_concurrent_reports_are_all_counted(league):
    league.register_player("a", Role.MAIN)
    league.add_snapshot("a", 0, "/a/0")

    def report():
        for _ in range(10):
            league.report_results([result("a", "a:000000") for _ in range(5)])

    threads = [threading.Thread(target=report) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert league.payoff().games[0][1] == 200


def test_elo_history_and_leaderboard(league):
    seeded(league)
    history = league.elo_history()
    assert history["main"][0] == (0, 1200.0)
    assert set(history) == {"main", "x", "main:000000", "x:000000", "main:000500"}
    assert all(n % 2 == 0 for points in history.values() for n, _ in points)  # every 2 results
    text = league.leaderboard_text(top=2)
    assert text.splitlines()[0].split()[:4] == ["#", "key", "role", "elo"]
    assert "... 3 more" in text and "±" in text


def test_closed_league_refuses_with_unavailable(league):
    league.close()
    league.close()
    with pytest.raises(ProtocolError, match="shut down") as error:
        league.register_player("a", Role.MAIN)
    assert error.value.code == "UNAVAILABLE"


def test_unknown_schema_version_or_foreign_file_is_a_clear_error(tmp_path):
    path = str(tmp_path / "league.sqlite")
    LeagueStore(path).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE schema_version SET version = 99")
    with pytest.raises(StoreError, match="schema version 99, this seedleague reads version 1"):
        League(LeagueConfig(), path)
    other = str(tmp_path / "other.sqlite")
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE t (x)")
    with pytest.raises(StoreError, match="not a league database"):
        League(LeagueConfig(), other)
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"not sqlite at all" * 100)
    with pytest.raises(StoreError, match="not a usable league database"):
        League(LeagueConfig(), str(garbage))


def test_returns_are_stored_and_an_old_database_without_them_still_loads(db):
    with League(NO_DECAY, db) as league:
        seeded(league)
        league.report_results([result("main", "x:000000", 1.0, value=2.0), result("x", "main:000000", 0.0, value=-1.5)])
        before = state(league)
    store = LeagueStore(db)
    assert [r.value for r in store.events() if isinstance(r, MatchResult)] == [None] * 4 + [2.0, -1.5]
    store.close()
    old = db + ".old"  # the same league as a database written before results had a value column
    with sqlite3.connect(db) as source, sqlite3.connect(old) as copy:
        source.backup(copy)
    with sqlite3.connect(old) as copy:
        copy.execute("ALTER TABLE results DROP COLUMN value")
    with League(NO_DECAY, old) as league:
        assert state(league) == before  # the ratings never read the value
        league.report_results([result("main", "x:000000", 0.0, value=-1.0)])
    store = LeagueStore(old)
    assert [r.value for r in store.events() if isinstance(r, MatchResult)] == [None] * 6 + [-1.0]
    store.close()


def test_numpy_integers_are_accepted(league):
    import numpy as np

    seeded(league)
    assert league.add_snapshot("main", np.int64(600), "/pool/main/600").step == 600
    assert league.check_in("main", np.int32(700)).snapshot is False
    assert league.report_results([MatchResult("np-1", "main", "x:000000", np.float64(1.0), np.int64(5))]) == 1


def test_psro_solves_its_nash_once_per_snapshot_set_and_draws_what_a_fresh_solve_gives(db, monkeypatch):
    """The meta-game covers snapshots only, and results move only a live player's row: so the mixture
    is solved when a snapshot joins, never per request, and a fresh solve after any results agrees."""
    from seedleague.league import matchmaking

    solves, solve = [], matchmaking.psro_mixture

    def counted(view, epsilon):
        solves.append(len(view.snapshots))
        return solve(view, epsilon)

    monkeypatch.setattr(matchmaking, "psro_mixture", counted)
    config = LeagueConfig(mode=Mode.PSRO, psro_epsilon=0.0, payoff_decay=1.0, min_games=0)
    with League(config, db) as league:
        league.register_player("a", Role.MAIN)
        league.add_snapshot("a", 0, "/a/0")
        league.report_results([result("a", "a:000000", 1.0) for _ in range(3)])
        league.add_snapshot("a", 100, "/a/100")  # inherits a's row: a:000100 beat a:000000 3 of 3
        for _ in range(3):
            assert {m.opponent for m in league.get_opponents("a", 20)} == {"a:000100"}
            # a beats both snapshots from now on: its own row moves, the snapshots' meta-game does not
            league.report_results([result("a", key, 1.0) for key in ("a:000000", "a:000100") for _ in range(5)])
        assert solves == [2]
    with League(config, db) as league:  # replayed from the file, solved afresh: the same mixture
        assert {m.opponent for m in league.get_opponents("a", 20)} == {"a:000100"}
        assert solves == [2, 2]
        # a:000200 inherits a's row, which beat both older snapshots 15 times in 15: the mixture moves to it
        league.add_snapshot("a", 200, "/a/200")
        assert {m.opponent for m in league.get_opponents("a", 20)} == {"a:000200"}
        assert {m.opponent for m in league.get_opponents("a", 20)} == {"a:000200"}
        assert solves == [2, 2, 3]
