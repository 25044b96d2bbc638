"""Population-based training: the selection maths by hand (bottom and top, the confidence bound, the perturbation,
a round's plan), the league service over a real SQLite file (rounds at check-ins, the copy handed out once, the
standings, everything back after a restart), the answer over gRPC, and two real hosts where one copies the other."""

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


def test_difference_bound_is_the_gap_less_z_standard_errors():
    # 0.7 over 100 against 0.4 over 100: sqrt(0.21/100 + 0.24/100) = 0.067082; 0.3 - 1.96 x 0.067082 = 0.168519
    assert pbt.difference_bound(Tally(70, 0, 100), Tally(40, 0, 100), 1.96) == pytest.approx(0.168519, abs=1e-6)
    # 0.55 against 0.45 over 100 each: sqrt(2 x 0.2475 / 100) = 0.070356; 0.1 - 0.137898 < 0: not significant
    assert pbt.difference_bound(Tally(55, 0, 100), Tally(45, 0, 100), 1.96) == pytest.approx(-0.037898, abs=1e-6)
    # draws count half: (10 + 20/2) / 40 = 0.5; z = 0 leaves the plain difference
    assert Tally(10, 20, 40).score == 0.5
    assert pbt.difference_bound(Tally(30, 0, 40), Tally(10, 20, 40), 0.0) == pytest.approx(0.25)
    assert pbt.difference_bound(Tally(), Tally(40, 0, 100), 1.96) == -math.inf  # no games: never significant


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


def test_a_round_copies_only_a_significantly_better_member_with_a_snapshot():
    same = PbtSettings()
    view = RoundInput(
        round=1, members=["a", "b", "c", "d"],
        tallies={"a": Tally(40, 0, 100), "b": Tally(60, 0, 100), "c": Tally(50, 0, 100), "d": Tally(70, 0, 100)},
        settings={"a": same, "b": same, "c": same, "d": PbtSettings(1.0, 1.0, 2.0)},
        latest={"a": "a:000010", "b": "b:000010", "c": "c:000010", "d": "d:000010"})
    rows = pbt.plan_round(view, 0.25, 1.96, (0.8, 1.2), Coins(0, 0, 1, 0))  # top member d, then x0.8 x1.2 x0.8
    assert [(r.member, r.kind) for r in rows] == [("a", EXPLOIT), ("b", KEPT), ("c", KEPT), ("d", KEPT)]
    exploit = rows[0]
    assert (exploit.source, exploit.source_key) == ("d", "d:000010")
    assert dataclasses.astuple(exploit.new) == pytest.approx((0.8, 1.2, 1.6)) and exploit.old == same
    assert exploit.evidence["bound"] == pytest.approx(0.168519, abs=1e-6)
    assert rows[1].evidence["why"] == "not in the bottom share"

    close = dataclasses.replace(view, tallies=dict(view.tallies, a=Tally(55, 0, 100), d=Tally(65, 0, 100),
                                                   b=Tally(60, 0, 100), c=Tally(60, 0, 100)))
    assert "not better with confidence" in pbt.plan_round(close, 0.25, 1.96, (0.8, 1.2), Coins(0))[0].evidence["why"]
    unsaved = dataclasses.replace(view, latest=dict(view.latest, d=""))
    assert "no snapshot to copy" in pbt.plan_round(unsaved, 0.25, 1.96, (0.8, 1.2), Coins(0))[0].evidence["why"]


def test_league_config_refuses_bad_pbt_settings():
    for field, value in (("pbt_interval", -1), ("pbt_share", 0.6), ("pbt_z", -1.0), ("pbt_perturb", 1.0)):
        with pytest.raises(ValueError, match=field):
            LeagueConfig(**{field: value})


# --- the league service over SQLite -----------------------------------------------------------------------------


def _results(player: str, opponent: str, wins: int, losses: int) -> list[MatchResult]:
    outcomes = [1.0] * wins + [0.0] * losses
    return [MatchResult(str(uuid.uuid4()), player, opponent, o, 1) for o in outcomes]


def _two_members(path, **config) -> League:
    league = League(LeagueConfig(mode=Mode.SELF_PLAY, snapshot_interval_steps=5, pbt_interval=10, **config), path)
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
    league.report_results(_results("main-1", "main:000000", 80, 20) + _results("main", "main-1:000000", 30, 70))
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
    league.report_results(_results("main-1", "main:000000", 90, 10) + _results("main", "main-1:000000", 10, 90))
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
        league.report_results(_results("b", first["a"], 200, 0) + _results("a", first["b"], 0, 200))
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
