"""Anchors and humans in the league (seedleague.league: types, state, service, matchmaking, server): fixed
members that never train, rated on the learners' scale; stored, replayed after a restart, carried over gRPC;
drawn in `anchor_share` of a learner's episodes as rate-only matches; refused where they have no part."""

from __future__ import annotations

import os
import uuid

import pytest

from seedleague.league.client import LeagueClient
from seedleague.league.config import LeagueConfig, anchor_member
from seedleague.league.server import LeagueServer, add_anchors
from seedleague.league.service import League
from seedleague.league.types import MatchResult, Mode, Role
from seedleague.protocol.errors import FAILED_PRECONDITION, INVALID_ARGUMENT, ProtocolError

CONFIG = LeagueConfig(mode=Mode.PFSP, payoff_decay=1.0, min_games=0, anchor_share=0.25)


def result(player: str, opponent: str, outcome: float) -> MatchResult:
    return MatchResult(uuid.uuid4().hex, player, opponent, outcome, learner_step=1)


def league_with_anchor(path: str, config: LeagueConfig = CONFIG) -> League:
    league = League(config, path)
    league.register_player("main", Role.MAIN)
    league.check_in("main", 0)
    league.add_snapshot("main", 0, "/pool/main")
    league.add_anchor("uniform", "uniform")
    return league


def test_an_anchor_is_rated_on_the_learners_scale_and_a_human_reports_like_a_learner(tmp_path):
    league = league_with_anchor(str(tmp_path / "league.sqlite"))
    league.register_player("human", Role.HUMAN)
    league.report_results([result("main", "uniform", 1.0) for _ in range(3)] + [result("human", "uniform", 0.0),
                                                                  result("human", "main:000000", 0.5)])
    rows = {row.key: row for row in league.standings()}
    assert rows["uniform"].role == Role.ANCHOR and rows["human"].role == Role.HUMAN
    assert rows["main"].elo > 1200 > rows["uniform"].elo  # three wins for main, one for the anchor
    assert rows["uniform"].games == 4 and rows["human"].games == 2 and league.results_counted() == 5
    assert "uniform" in league.payoff().keys and "uniform" in league.elo_history()
    # an anchor is no snapshot of a learner: reports and Nash solves over snapshots never see it
    assert [s.key for s in league.snapshots()] == ["main:000000"]
    assert [(a.key, a.path, a.role) for a in league.anchors()] == [("uniform", "uniform", Role.ANCHOR)]
    assert league.snapshots("uniform") == league.anchors()
    league.close()


def test_anchors_and_their_ratings_survive_a_restart_and_a_second_add_is_the_same_anchor(tmp_path):
    path = str(tmp_path / "league.sqlite")
    league = league_with_anchor(path)
    league.report_results([result("main", "uniform", o) for o in (1.0, 1.0, 0.0, 0.5)])
    before = (league.standings(), league.payoff(), league.elo_history(), league.anchors())
    league.close()
    again = League(CONFIG, path)
    assert (again.standings(), again.payoff(), again.elo_history(), again.anchors()) == before
    assert again.add_anchor("uniform", "uniform") == before[3][0]  # a restart re-adds its configured anchors
    with pytest.raises(ProtocolError) as refused:
        again.add_anchor("uniform", "/elsewhere")
    assert refused.value.code == FAILED_PRECONDITION and "another name" in refused.value.message
    assert again.standings() == before[0]
    again.close()


def test_a_share_of_draws_meets_an_anchor_as_a_rate_only_match_and_without_anchors_the_draws_are_unchanged(tmp_path):
    league = league_with_anchor(str(tmp_path / "a.sqlite"))
    matches = league.get_opponents("main", 2000)
    anchored = [m for m in matches if m.opponent == "uniform"]
    assert all(m.rates_only and not m.self_play for m in anchored)
    assert not any(m.rates_only for m in matches if m.opponent != "uniform")
    assert 0.2 < len(anchored) / len(matches) < 0.3  # anchor_share 0.25
    # a league with no anchor draws exactly as before anchors existed (same RNG stream)
    plain, shared = (League(c, str(tmp_path / f"{n}.sqlite")) for n, c in (("b", CONFIG), ("c", CONFIG)))
    for each in (plain, shared):
        each.register_player("main", Role.MAIN)
        each.check_in("main", 0)
        each.add_snapshot("main", 0, "/pool/main")
    zero = League(LeagueConfig(mode=Mode.PFSP, anchor_share=0.0), str(tmp_path / "d.sqlite"))
    assert plain.get_opponents("main", 50) == shared.get_opponents("main", 50)
    for each in (league, plain, shared, zero):
        each.close()


@pytest.mark.parametrize("call, says", [
    (lambda lg: lg.check_in("uniform", 5), "never checks in"),
    (lambda lg: lg.get_opponents("uniform", 5), "draws no opponents"),
    (lambda lg: lg.draw_preview("human", 5), "draws no opponents"),
    (lambda lg: lg.add_snapshot("human", 5, "/x"), "has no snapshots"),
    (lambda lg: lg.report_results([result("uniform", "main:000000", 1.0)]), "reports no results"),
    (lambda lg: lg.add_snapshot("uniform", 3, "/x"), "already plays"),
])
def test_fixed_members_are_refused_what_only_learners_do_and_nothing_changes(tmp_path, call, says):
    league = league_with_anchor(str(tmp_path / "league.sqlite"))
    league.register_player("human", Role.HUMAN)
    before = (league.standings(), league.players(), league.snapshots(), league.anchors())
    with pytest.raises(ProtocolError) as refused:
        call(league)
    assert refused.value.code in (FAILED_PRECONDITION, INVALID_ARGUMENT) and says in refused.value.message
    assert (league.standings(), league.players(), league.snapshots(), league.anchors()) == before
    league.close()


def test_anchors_and_humans_over_grpc(tmp_path):
    league = League(LeagueConfig(mode=Mode.SELF_PLAY, anchor_share=1.0), str(tmp_path / "league.sqlite"))
    with LeagueServer(league, "127.0.0.1:0") as server:
        client = LeagueClient(server.address)
        try:
            client.register_player("main", Role.MAIN)
            client.register_player("old", Role.ANCHOR)  # what `seedleague play` does for the output it plays
            anchor = client.add_snapshot("old", 0, "/runs/old")
            assert (anchor.key, anchor.role) == ("old", Role.ANCHOR)
            assert client.snapshots("old") == [anchor] and client.snapshots() == []
            matches = client.get_opponents("main", 4)
            assert all(m.opponent == "old" and m.rates_only for m in matches)  # anchor_share 1
            client.register_player("human", Role.HUMAN)
            assert client.report_results([result("human", "old", 1.0)]) == 1
            roles = {row.key: row.role for row in client.standings()}
            assert roles == {"main": Role.MAIN, "old": Role.ANCHOR, "human": Role.HUMAN}
        finally:
            client.close()
    league.close()


def test_anchor_entries_parse_and_bad_ones_are_refused_in_one_line(tmp_path):
    assert anchor_member("uniform") == ("uniform", "uniform")
    assert anchor_member("last=runs/kuhn") == ("last", "runs/kuhn")
    assert anchor_member("runs/kuhn/") == ("kuhn", "runs/kuhn/")
    assert LeagueConfig(anchors=["uniform", "a=/x"]).anchors == ("uniform", "a=/x")  # read back from JSON
    for bad, says in (("a:b=/x", "NAME=PATH"), ("=/x", "NAME=PATH")):
        with pytest.raises(ValueError, match=says):
            LeagueConfig(anchors=(bad,))
    with pytest.raises(ValueError, match="unique"):
        LeagueConfig(anchors=("a=/x", "a=/y"))
    league = League(CONFIG, str(tmp_path / "league.sqlite"))
    with pytest.raises(ValueError, match="is not a directory"):
        add_anchors(league, ("gone=" + str(tmp_path / "nothing"),))
    add_anchors(league, ("uniform", f"here={tmp_path}"))
    assert [(a.key, a.path) for a in league.anchors()] == [("uniform", "uniform"), ("here", str(tmp_path))]
    league.close()
