"""Population-based training: the selection maths by hand (bottom and top, the opponents every member met, the worst
case and its Wilson bounds, the perturbation, a round's plan on a rock-paper-scissors-like table where the average
and the worst case rank the members differently), the league service over a real SQLite file (rounds at check-ins,
the copy handed out once, the standings, everything back after a restart), the answer over gRPC, and two real hosts
where one copies the other."""

import dataclasses
import math
import threading
import uuid

import jax
import numpy as np
import pytest

from seedleague.host.host import Host
from seedleague.host.league_link import LeagueLinkConfig
from seedleague.host.pbt_member import PbtMember
from seedleague.league import codec, pbt
from seedleague.league.config import LeagueConfig
from seedleague.league.pbt import EXPLOIT, INIT, KEPT, PbtSettings, RoundInput, Tally
from seedleague.league.service import League
from seedleague.league.types import MatchResult, Mode, PbtAnswer, Role, SnapshotDecision
from seedleague.metrics import Metrics
from seedleague.rl.learner import Scales
from seedleague.testing.server_thread import ServerThread
from tests.conftest import SMALL_HOST, RawWorker, wait_for
from tests.test_host_league import SPEC, duel_steps, play


class Coins:
    """A stand-in for the Generator's `integers(n)`: hands out the given draws in order."""

    def __init__(self, *draws):
        self.draws = list(draws)

    def integers(self, n):
        value = self.draws.pop(0)
        assert 0 <= value < n
        return value


# --- the maths, by hand ---------------------------------------------------------------------------------------


def test_split_takes_the_lowest_and_highest_share():
    members, scores = ["a", "b", "c", "d"], [0.4, 0.6, 0.5, 0.7]
    assert pbt.split(members, scores, 0.25) == (["a"], ["d"])  # floor(0.25 x 4) = 1 each
    assert pbt.split(members, scores, 0.5) == (["c", "a"], ["d", "b"])
    assert pbt.split(["a", "b", "c"], [0.5, 0.2, 0.9], 0.25) == (["b"], ["c"])  # at least one
    assert pbt.split(["x", "y"], [0.5, 0.5], 0.25) == (["y"], ["x"])  # a tie: the earlier member ranks higher
    assert pbt.split(["solo"], [0.9], 0.25) == ([], [])


def test_common_opponents_are_those_every_member_met_often_enough():
    tallies = {"a": {"r:1": Tally(50, 0, 100), "x:1": Tally(25, 0, 50)},
               "b": {"r:1": Tally(60, 0, 120), "x:1": Tally(50, 0, 100), "y:1": Tally(9, 0, 200)}}
    assert pbt.common_opponents(tallies, min_games=100) == ["r:1"]  # x: a met it 50 times; y: a never
    assert pbt.common_opponents(tallies, min_games=50) == ["r:1", "x:1"]
    assert pbt.common_opponents({}, min_games=1) == []


def test_worst_case_is_the_lowest_score_with_wilson_bounds():
    # Wilson at z = 1.96, n = 100: denominator 1 + 3.8416/100 = 1.038416.
    #   p = 0.2: centre (0.2 + 0.019208) / 1.038416 = 0.211098, half 1.96 sqrt(0.0016 + 0.00009604) / 1.038416
    #   = 0.077733: [0.133366, 0.288831]. p = 0.9: [0.825633, 0.944771].
    mine = {"p:1": Tally(90, 0, 100), "r:1": Tally(90, 0, 100), "s:1": Tally(20, 0, 100)}
    worst = pbt.worst_case(mine, ["p:1", "r:1", "s:1"], 1.96)
    assert (worst.score, worst.opponent) == (pytest.approx(0.2), "s:1")
    assert (worst.low, worst.high) == (pytest.approx(0.133366, abs=1e-6), pytest.approx(0.288831, abs=1e-6))
    assert pbt.worst_case(mine, ["p:1", "r:1"], 1.96).opponent == "p:1"  # a tie: the first opponent given
    with pytest.raises(ValueError, match="at least one opponent"):
        pbt.worst_case(mine, [], 1.96)


def test_perturb_multiplies_each_setting_by_one_factor():
    settings = PbtSettings(1.0, 2.0, 0.5)
    assert dataclasses.astuple(pbt.perturb(settings, (0.8, 1.2), Coins(0, 1, 1))) == pytest.approx((0.8, 2.4, 0.6))
    rng = np.random.default_rng(0)
    for _ in range(20):
        new = pbt.perturb(settings, (0.8, 1.2), rng)
        for name, factor in zip(pbt.SETTINGS, (getattr(new, n) / getattr(settings, n) for n in pbt.SETTINGS)):
            assert factor == pytest.approx(0.8) or factor == pytest.approx(1.2), name


def test_initial_settings_member_zero_keeps_the_recipe():
    assert pbt.initial_settings(0, np.random.default_rng(0)) == PbtSettings()
    drawn = pbt.initial_settings(3, np.random.default_rng(0))
    assert all(0.5 <= getattr(drawn, n) <= 2.0 for n in pbt.SETTINGS) and drawn != PbtSettings()


def _rps_round() -> RoundInput:
    """Four members against rock-, paper- and scissors-like snapshots, 100 games each (a also met x:1 50 times).

    member  r:1  p:1  s:1  x:1 | average (all games)  worst case (r, p, s)
    a       .9   .9   .2   .5  | 225/350 = .643       .2 (s:1)     sharp: beats two, loses to the third
    b       .6   .6   .6       | .6                   .6 (p:1)     steady
    c       .7   .5   .4       | .533                 .4 (s:1)
    d       .5   .5   .5       | .5                   .5 (p:1)
    By the average a is the best and d the worst; by the worst case b is the best and a the worst."""
    def met(r, p, s):
        return {"r:1": Tally(r, 0, 100), "p:1": Tally(p, 0, 100), "s:1": Tally(s, 0, 100)}
    return RoundInput(
        round=1, members=["a", "b", "c", "d"],
        tallies={"a": dict(met(90, 90, 20), **{"x:1": Tally(25, 0, 50)}), "b": met(60, 60, 60), "c": met(70, 50, 40),
                 "d": met(50, 50, 50)},
        settings={"a": PbtSettings(), "b": PbtSettings(1.0, 1.0, 2.0), "c": PbtSettings(), "d": PbtSettings()},
        latest={"a": "a:000010", "b": "b:000010", "c": "c:000010", "d": "d:000010"})


def test_a_round_ranks_by_the_worst_case_not_the_average():
    view = _rps_round()
    averages = [sum(t.wins for t in view.tallies[m].values()) / sum(t.games for t in view.tallies[m].values())
                for m in view.members]
    assert pbt.split(view.members, averages, 0.25) == (["d"], ["a"])  # the average would copy the sharp a into d
    rows = pbt.plan_round(view, 0.25, 1.96, (0.8, 1.2), Coins(0, 0, 1, 0), min_games=100)  # top b; x0.8 x1.2 x0.8
    assert [(r.member, r.kind) for r in rows] == [("a", EXPLOIT), ("b", KEPT), ("c", KEPT), ("d", KEPT)]
    exploit = rows[0]
    assert (exploit.source, exploit.source_key) == ("b", "b:000010")
    assert dataclasses.astuple(exploit.new) == pytest.approx((0.8, 1.2, 1.6)) and exploit.old == PbtSettings()
    e = exploit.evidence
    # b's lower bound: min over r, p, s of Wilson's low at .6 over 100 = (0.619208 - 0.094300) / ... = 0.502001;
    # a's upper bound: min(0.944771, 0.944771, 0.288831); the gap's bound 0.502001 - 0.288831 = 0.213170
    assert (e["score"], e["opponent"], e["source_score"], e["source_opponent"]) == (
        pytest.approx(0.2), "s:1", pytest.approx(0.6), "p:1")
    assert e["source_low"] == pytest.approx(0.502001, abs=1e-6) and e["high"] == pytest.approx(0.288831, abs=1e-6)
    assert e["bound"] == pytest.approx(0.213170, abs=1e-6)
    assert (e["games"], e["mean"], e["opponents"]) == (350, pytest.approx(225 / 350), 3)  # x:1 is not common
    assert rows[1].evidence["why"] == "not in the bottom share" and rows[1].evidence["score"] == pytest.approx(0.6)
    assert "worst case 0.200 (against s:1, at most 0.289) under b's 0.600 (at least 0.502)" in exploit.text()


def test_a_round_keeps_members_the_games_cannot_tell_apart():
    view = _rps_round()
    close = dataclasses.replace(view, tallies=dict(view.tallies, a=dict(view.tallies["b"]), c=dict(view.tallies["d"])))
    rows = pbt.plan_round(close, 0.25, 1.96, (0.8, 1.2), Coins(0), min_games=100)  # d (.5, after c) bottom, a (.6) top
    assert [r.kind for r in rows] == [KEPT] * 4 and "a not better with confidence" in rows[3].evidence["why"]
    assert rows[3].evidence["bound"] == pytest.approx(0.502001 - 0.596170, abs=1e-6)  # Wilson's low at .6, high at .5
    unsaved = dataclasses.replace(view, latest=dict(view.latest, b=""))
    assert "no snapshot to copy" in pbt.plan_round(unsaved, 0.25, 1.96, (0.8, 1.2), Coins(0), min_games=100)[0].evidence["why"]
    rare = pbt.plan_round(view, 0.25, 1.96, (0.8, 1.2), Coins(), min_games=101)  # nobody met anyone 101 times
    assert all(r.kind == KEPT and r.evidence["why"] == "no opponent every member met 101 times this round" for r in rare)


def test_league_config_refuses_bad_pbt_settings():
    for field, value in (("pbt_interval", -1), ("pbt_share", 0.6), ("pbt_z", -1.0), ("pbt_perturb", 1.0),
                         ("pbt_min_games", 0)):
        with pytest.raises(ValueError, match=field):
            LeagueConfig(**{field: value})


# --- the league service over SQLite -----------------------------------------------------------------------------


def _results(player: str, opponent: str, wins: int, losses: int) -> list[MatchResult]:
    outcomes = [1.0] * wins + [0.0] * losses
    return [MatchResult(str(uuid.uuid4()), player, opponent, o, 1) for o in outcomes]


def _against_both(player: str, wins: int, losses: int) -> list[MatchResult]:
    """`player`'s live params against each member's first snapshot, with these wins and losses each."""
    return _results(player, "main:000000", wins, losses) + _results(player, "main-1:000000", wins, losses)


def _two_members(path, **config) -> League:
    league = League(LeagueConfig(mode=Mode.SELF_PLAY, snapshot_interval_steps=5, pbt_interval=10, pbt_min_games=50,
                                 **config), path)
    for name in ("main", "main-1"):
        league.register_player(name, Role.MAIN)
        assert league.check_in(name, 0).snapshot
        league.add_snapshot(name, 0, f"/pool/{name}")
    return league


def test_league_holds_a_round_hands_the_copy_out_once_and_replays_it(tmp_path):
    path = str(tmp_path / "league.sqlite")
    league = _two_members(path)
    assert [(r.member, r.kind, r.new) for r in league.pbt_history()] == [
        ("main", INIT, PbtSettings()), ("main-1", INIT, pbt.initial_settings(1, np.random.default_rng([0, 1])))]
    league.report_results(_against_both("main-1", 80, 20) + _against_both("main", 30, 70))
    first = league.check_in("main", 10)  # main-1 is still at 0 updates: no round yet
    assert first.pbt == PbtAnswer(1.0, 1.0, 1.0) and len(league.pbt_history()) == 2
    assert league.check_in("main-1", 10).pbt.copy_from == ""  # the round: main-1 is the top member
    exploit = league.pbt_history()[2]
    assert (exploit.kind, exploit.member, exploit.source, exploit.source_key) == (EXPLOIT, "main", "main-1", "main-1:000000")
    assert exploit.evidence["score"] == 0.3 and exploit.evidence["source_score"] == 0.8 and exploit.evidence["bound"] > 0
    answer = league.check_in("main", 11).pbt
    assert answer.copy_from == "main-1:000000" and "copied main-1:000000" in answer.note
    assert (answer.entropy_cost, answer.learning_rate, answer.kl_cost) == dataclasses.astuple(exploit.new)
    assert league.check_in("main", 12).pbt.copy_from == ""  # handed out once; the settings stay
    row = next(s for s in league.standings() if s.key == "main")
    assert "copied main-1:000000 at round 1" in row.pbt and exploit.new.text() in row.pbt
    assert f"main{' ' * 24} {row.pbt}" in league.leaderboard_text()  # the console's standings list each member
    history, standings = league.pbt_history(), league.standings()
    league.close()

    again = League(league.config, path)  # --resume: the same rows, settings, and nothing left to hand out
    assert again.pbt_history() == history and again.standings() == standings
    assert again.check_in("main", 13).pbt.copy_from == ""
    assert again.check_in("main", 20).pbt == dataclasses.replace(answer, copy_from="", note="")  # main-1 at 10: no round
    again.close()


def test_an_undelivered_copy_survives_a_restart(tmp_path):
    path = str(tmp_path / "league.sqlite")
    league = _two_members(path)
    league.report_results(_against_both("main-1", 90, 10) + _against_both("main", 10, 90))
    league.check_in("main", 10)
    league.check_in("main-1", 10)  # the round, decided while main's host is away
    league.close()
    with League(league.config, path) as again:
        assert again.check_in("main", 10).pbt.copy_from == "main-1:000000"


def test_the_pbt_answer_crosses_the_wire():
    decision = SnapshotDecision(True, False, "interval", PbtAnswer(0.8, 1.2, 0.96, "main-1:000100", "round 1: ..."))
    assert codec.decode_decision(codec.encode_decision(decision)) == decision
    assert codec.decode_decision(codec.encode_decision(SnapshotDecision(False))).pbt is None


# --- two real hosts -----------------------------------------------------------------------------------------------


class SpyLearner:
    """The host's LearnerLoop, recording the params each `call` installs."""

    def __init__(self, inner):
        self.inner, self.installed = inner, []

    @property
    def scales(self):
        return self.inner.scales

    def set_scales(self, scales):
        self.inner.set_scales(scales)

    def call(self, fn):
        def spied(state):
            new = fn(state)
            self.installed.append((int(state.step), int(new.step), jax.tree.map(np.asarray, new.params)))
            return new
        return self.inner.call(spied)


def test_two_hosts_one_copies_the_others_snapshot(tmp_path):
    league = League(LeagueConfig(mode=Mode.SELF_PLAY, snapshot_interval_steps=2, pbt_interval=30),
                    str(tmp_path / "league.sqlite"))
    hosts, stop = {}, threading.Event()
    for name in ("a", "b"):
        link = LeagueLinkConfig(address="in-process", player=name, pool_dir=str(tmp_path / "pool"), retry_s=0.05,
                                report_interval_s=0.05, check_in_interval_s=0.05)
        host = Host(dataclasses.replace(SMALL_HOST, league=link, seed=len(hosts)), Metrics(), league=league)
        server = ServerThread(host).start()
        worker = RawWorker(server.address, SPEC)
        hosts[name] = (host, server, worker)
    spy = SpyLearner(hosts["a"][0].pipeline.learner)
    hosts["a"][0].pipeline.league.pbt_handler = PbtMember(spy, hosts["a"][0].pool, hosts["a"][0].pipeline.initial_state)

    def feed(worker):
        steps = duel_steps(worker.session_id)
        while not stop.is_set():
            play(worker, steps, 3)

    threads = [threading.Thread(target=feed, args=(w,), daemon=True) for _, _, w in hosts.values()]
    for thread in threads:
        thread.start()
    try:
        wait_for(lambda: all(league.snapshots(n) for n in hosts), what="a snapshot of each host")
        # the evidence: b beats the population, a loses to it (self-play rates nothing here)
        first = {n: league.snapshots(n)[0].key for n in hosts}
        league.report_results([r for key in first.values() for r in _results("b", key, 100, 0) + _results("a", key, 0, 100)])
        wait_for(lambda: spy.installed, timeout=60, what="a's copy of b's snapshot")
        exploit = next(r for r in league.pbt_history() if r.kind == EXPLOIT)
        assert (exploit.member, exploit.source) == ("a", "b") and exploit.round == 1
        before, after, params = spy.installed[0]
        assert after == before  # the copier's step goes on
        source, _ = hosts["a"][0].pool.restore(exploit.source_key, hosts["a"][0].pipeline.initial_state)
        jax.tree.map(np.testing.assert_array_equal, params, jax.tree.map(np.asarray, source.params))
        wait_for(lambda: hosts["a"][0].pipeline.learner.scales == Scales(*dataclasses.astuple(exploit.new)),
                 what="a's new settings")
        assert hosts["a"][0].pipeline.league.stats.pbt_copies == 1
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
        for host, server, worker in hosts.values():
            worker.close()
            server.stop()
            host.stop()
        league.close()
