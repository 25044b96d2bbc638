"""Population-based training: the selection maths by hand (bottom and top, the opponents every member met, the worst
case and its Wilson bounds, the perturbation, a round's plan on a rock-paper-scissors-like table where the average
and the worst case rank the members differently), the league service over a real SQLite file (rounds at check-ins,
the copy handed out once, the standings, everything back after a restart), the answer over gRPC, and two real hosts
where one copies the other."""

import dataclasses
import threading
import uuid

import jax
import numpy as np
import pytest

from seedleague import output
from seedleague.api import load_trained
from seedleague.host.host import Host
from seedleague.host.league_link_config import LeagueLinkConfig
from seedleague.host.pbt_member import PbtMember
from seedleague.league import codec, pbt, sequential
from seedleague.league.config import LeagueConfig
from seedleague.league.pbt import EXPLOIT, INIT, KEPT, LOOK, PbtSettings, RoundInput, Tally
from seedleague.eval import run_league, sampled_metagame
from seedleague.league.server import load_config, save_config
from seedleague.league.service import League
from seedleague.league.types import MatchResult, Mode, PbtAnswer, Role, SnapshotDecision
from seedleague.metrics import Metrics
from seedleague.output import OutputConfig, record
from seedleague.rl.learner import Scales
from seedleague.rl.learner_config import LearnerConfig
from seedleague.testing.server_thread import ServerThread
from tests.conftest import SMALL_HOST, RawWorker, wait_for
from tests.test_api import SMALL, save_checkpoint
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


def test_worst_case_is_the_lowest_score():
    mine = {"p:1": Tally(90, 0, 100), "r:1": Tally(90, 0, 100), "s:1": Tally(20, 0, 100)}
    assert pbt.worst_case(mine, ["p:1", "r:1", "s:1"]) == pbt.WorstCase(pytest.approx(0.2), "s:1")
    assert pbt.worst_case(mine, ["p:1", "r:1"]).opponent == "p:1"  # a tie: the first opponent given
    with pytest.raises(ValueError, match="at least one opponent"):
        pbt.worst_case(mine, [])


def test_separation_takes_the_bottoms_best_choice_and_the_tops_weakest_opponent():
    # top: r 0.6, s 0.7; bottom: r 0.4, s 0.8 (each after Agresti-Caffo, 100 games).
    #   b = r: z(top r 0.6 vs 0.4) = 2.886751, z(top s 0.7 vs 0.4) = 0.3 / sqrt(0.0021 + 0.0024) = 4.472136 -> 2.886751
    #   b = s: z(top r 0.6 vs 0.8) = -0.2 / sqrt(0.0024 + 0.0016) = -3.162278 -> -3.162278
    top = {"r": Tally(59, 0, 98), "s": Tally(69, 0, 98)}
    bottom = {"r": Tally(39, 0, 98), "s": Tally(79, 0, 98)}
    gap = pbt.separation(top, bottom, ["r", "s"])
    assert (gap.statistic, gap.top_opponent, gap.bottom_opponent) == (pytest.approx(2.886751, abs=1e-6), "r", "r")
    half = {"r": Tally(48, 2, 98), "s": Tally(79, 0, 98)}  # a draw counts half: 49 of 98, as 49 wins
    assert pbt.separation(top, half, ["r"]).statistic == pytest.approx(sequential.two_proportion_z(59, 98, 49, 98))


def test_critical_z_splits_the_level_over_opponents_and_looks():
    assert pbt.critical_z(0.05, 1, 1) == pytest.approx(1.644854, abs=1e-6)  # one-sided 5%
    assert pbt.critical_z(0.05, 2, 5) == pytest.approx(2.575829, abs=1e-6)  # 0.05 / 10 = 0.5%
    assert pbt.critical_z(0.05, 2, 20) == pytest.approx(3.023341, abs=1e-6)  # 0.05 / 40


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


TEST = pbt.Test(alpha=0.05, looks=5, min_games=100)


def _rps_round(look: int = 1) -> RoundInput:
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
        latest={"a": "a:000010", "b": "b:000010", "c": "c:000010", "d": "d:000010"}, look=look)


def test_a_round_ranks_by_the_worst_case_not_the_average():
    view = _rps_round()
    averages = [sum(t.wins for t in view.tallies[m].values()) / sum(t.games for t in view.tallies[m].values())
                for m in view.members]
    assert pbt.split(view.members, averages, 0.25) == (["d"], ["a"])  # the average would copy the sharp a into d
    assert pbt.rank(view, 100)[0] == ["b", "d", "c", "a"]
    rows = pbt.plan_round(view, TEST, 0.25, (0.8, 1.2), Coins(0, 0, 1, 0))  # top b; x0.8 x1.2 x0.8
    assert [(r.member, r.kind) for r in rows] == [("a", EXPLOIT), ("b", KEPT), ("c", KEPT), ("d", KEPT)]
    exploit = rows[0]
    assert (exploit.source, exploit.source_key) == ("b", "b:000010")
    assert dataclasses.astuple(exploit.new) == pytest.approx((0.8, 1.2, 1.6)) and exploit.old == PbtSettings()
    e = exploit.evidence
    # b (.6 against each) against a's s:1 (.2), after Agresti-Caffo 61/102 and 21/102: 0.392157 / 0.062926 = 6.232066;
    # a's other choices (.9) give negative z. Critical: Phi^-1(1 - 0.05 / (3 opponents x 5 looks)) = 2.713052
    assert (e["score"], e["opponent"], e["source_score"], e["source_opponent"], e["rank"]) == (
        pytest.approx(0.2), "s:1", pytest.approx(0.6), "p:1", 4)
    assert e["statistic"] == pytest.approx(6.232066, abs=1e-6) and e["critical"] == pytest.approx(2.713052, abs=1e-6)
    assert (e["at"], e["look"], e["looks"], e["alpha"]) == (["p:1", "s:1"], 1, 5, 0.05)
    assert (e["games"], e["mean"], e["opponents"]) == (350, pytest.approx(225 / 350), 3)  # x:1 is not common
    assert rows[1].evidence["why"] == "not in the bottom share" and rows[1].evidence["rank"] == 1
    assert "worst case 0.200 (against s:1) under b's 0.600 (against p:1), z 6.23 > 2.71 at look 1 of 5" in exploit.text()


def _close_round(look: int) -> RoundInput:
    """a (.5 against each) the bottom, b (.6) the top: z 1.413936 (61/102 against 51/102), under 2.71."""
    view = _rps_round(look)
    return dataclasses.replace(view, tallies=dict(view.tallies, a=dict(view.tallies["d"]), c=dict(view.tallies["d"])))


def test_a_round_stays_open_until_the_evidence_separates_or_its_last_look():
    rows = pbt.plan_round(_close_round(1), TEST, 0.25, (0.8, 1.2), Coins(0))  # d (.5, last in join order) vs b
    assert [(r.kind, r.member, r.source) for r in rows] == [(LOOK, "d", "b")]
    e = rows[0].evidence
    assert e["statistic"] == pytest.approx(1.413936, abs=1e-6) and e["look"] == 1
    assert e["why"] == "b not better with confidence (z 1.41 <= 2.71)" and "round 1 look 1: open" in rows[0].text()
    last = pbt.plan_round(_close_round(5), TEST, 0.25, (0.8, 1.2), Coins(0))  # the cap: closes, nobody copies
    assert [r.kind for r in last] == [KEPT] * 4 and last[3].evidence["look"] == 5
    assert "b not better with confidence" in last[3].evidence["why"]
    # the same games pass at 5 looks and not at 20: 6.23 against Phi^-1(1 - 0.05 / 60) = 3.14
    assert pbt.plan_round(_rps_round(), pbt.Test(0.05, 20, 100), 0.25, (0.8, 1.2), Coins(0, 0, 0, 0))[0].kind == EXPLOIT
    # one opponent, x 59 of 98 (bottom) against y 39 of 98: z 2.886751 passes Phi^-1(1 - 0.05 / 5) = 2.326348 at
    # 5 looks and not Phi^-1(1 - 0.05 / 40) = 3.023341 at 40: waiting for evidence costs confidence per look
    pair = RoundInput(2, ["x", "y"], {"x": {"o": Tally(39, 0, 98)}, "y": {"o": Tally(59, 0, 98)}},
                      {"x": PbtSettings(), "y": PbtSettings()}, {"x": "x:1", "y": "y:1"})
    assert pbt.plan_round(pair, pbt.Test(0.05, 5, 50), 0.25, (0.8, 1.2), Coins(0, 0, 0, 0))[0].kind == EXPLOIT
    assert pbt.plan_round(pair, pbt.Test(0.05, 40, 50), 0.25, (0.8, 1.2), Coins(0))[0].kind == LOOK
    unsaved = dataclasses.replace(_rps_round(), latest=dict(_rps_round().latest, b=""))
    assert pbt.plan_round(unsaved, TEST, 0.25, (0.8, 1.2), Coins(0))[0].evidence["why"] == "b has no snapshot to copy yet"
    rare = pbt.plan_round(_rps_round(5), pbt.Test(0.05, 5, 101), 0.25, (0.8, 1.2), Coins())  # nobody met anyone 101 times
    assert all(r.kind == KEPT and r.evidence["why"] == "no opponent every member met 101 times this round" for r in rare)


def test_the_leader_is_the_best_member_by_the_same_evidence():
    view = _rps_round()
    assert pbt.leader(view, [], 100)[0] == "b" and "0.600 against p:1 over 3 opponents" in pbt.leader(view, [], 100)[1]
    empty = dataclasses.replace(view, tallies={}, round=3)
    rows = pbt.plan_round(view, TEST, 0.25, (0.8, 1.2), Coins(0, 0, 1, 0))
    assert pbt.leader(empty, rows, 100) == (
        "b", "best worst case at round 1: 0.600 against p:1 over 3 opponents every member met 100 times")
    assert pbt.leader(empty, [], 100)[0] == "a"  # nothing ranked yet: the first member


def test_league_config_refuses_bad_pbt_settings():
    for field, value in (("pbt_interval", -1), ("pbt_share", 0.6), ("pbt_alpha", 0.0), ("pbt_alpha", 1.0),
                         ("pbt_looks", 0), ("pbt_perturb", 1.0), ("pbt_min_games", 0), ("pbt_spending", "x")):
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
    e = exploit.evidence
    assert e["score"] == 0.3 and e["source_score"] == 0.8 and e["statistic"] > e["critical"] and e["look"] == 1
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


def test_a_round_stays_open_across_looks_and_a_restart_then_closes_at_its_cap(tmp_path):
    path = str(tmp_path / "league.sqlite")
    league = _two_members(path, pbt_looks=2)
    league.report_results(_against_both("main-1", 52, 48) + _against_both("main", 48, 52))  # not apart: z 0.57
    league.check_in("main", 10)
    league.check_in("main-1", 10)  # look 1 of round 1: open
    look = league.pbt_history()[-1]
    assert (look.kind, look.round, look.member, look.source) == (LOOK, 1, "main", "main-1")
    # O'Brien-Fleming (the default) spends 2 (1 - Phi(1.959964 / sqrt(1/2))) at look 1 of 2, half of it for each of
    # the 2 opponents: Phi^-1(1 - (1 - Phi(1.959964 sqrt(2)))) = 1.959964 sqrt(2) = 2.771808
    assert look.evidence["statistic"] < look.evidence["critical"] == pytest.approx(2.771808, abs=1e-6)
    assert look.evidence["spending"] == "obrien_fleming" and look.evidence["scored"] == pbt.WINS
    assert look.evidence["common"] == ["main-1:000000", "main:000000"]
    assert league.pbt_output("main") == ("main-1", "best worst case in the open round 1: 0.520 against main-1:000000 "
                                                   "over 2 opponents every member met 50 times")
    assert league.pbt_output("exploiter") is None
    league.close()

    again = League(league.config, path)  # the look and the round's games are back: the next look is at 20 updates
    assert again.check_in("main", 19).pbt.copy_from == "" and again.pbt_history()[-1] == look
    again.check_in("main-1", 20)
    assert again.pbt_history()[-1] == look  # main at 19: not due
    again.check_in("main", 20)  # look 2 = the cap: the round closes with the games of both looks, nobody copies
    closing = again.pbt_history()[-2:]
    assert [(r.kind, r.round) for r in closing] == [(KEPT, 1), (KEPT, 1)] and closing[0].evidence["games"] == 200
    assert closing[1].evidence["rank"] == 1 and closing[0].evidence["look"] == 2
    # both opponents common since look 1 (replayed from the stored look): the group-sequential value 1.979311, not
    # the 2.010055 of an opponent new at look 2, Phi^-1(1 - alpha_2 / 2) with alpha_2 = 0.05 - 0.005575
    assert closing[0].evidence["critical"] == pytest.approx(1.979311, abs=1e-5)
    assert again.pbt_output("main")[0] == "main-1"  # the newest ranked round, once the open one has no games
    assert [s.key for s in again.standings() if s.pbt.endswith("; the run's output")] == ["main-1"]  # and its row says so
    again.close()


def _pbt_run_where_main_1_leads(tmp_path):
    """A --pbt run's directory with its league (database and saved config in league/) of members main and main-1,
    main-1 leading the open round."""
    run = tmp_path / "run"
    (run / "league").mkdir(parents=True)
    league = _two_members(str(run / "league" / "league.sqlite"))
    save_config(league.config, str(run / "league"))
    league.report_results(_against_both("main-1", 80, 20) + _against_both("main", 30, 70))
    league.close()
    return run


def test_the_runs_output_is_the_best_members(tmp_path):
    """A --pbt run's layout (seedleague.launch.league): main's checkpoints in the run, main-1's in players/main-1, the
    league's database and saved config in league/. main-1 leads the open round, so the output is its checkpoint."""
    run = _pbt_run_where_main_1_leads(tmp_path)
    save_checkpoint(run / "checkpoints", step=3, network=SMALL, seed=0)
    best = save_checkpoint(run / "players" / "main-1" / "checkpoints", step=7, network=SMALL, seed=1)
    record(str(run), OutputConfig("final"))
    found = output.resolve(str(run))
    assert [(m.path, m.step) for m in found.members] == [(str(run / "players" / "main-1"), 7)]
    assert found.note.startswith("population-based training: the output is member main-1's, the best (best worst case "
                                 "in the open round 1: 0.800 against main-1:000000")
    trained = load_trained(str(run))
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, trained.params),
                 jax.tree.map(np.asarray, best.params))
    assert output.resolve(str(run), OutputConfig("final", player="exploiter")).members[0].path == str(run)  # no member


def test_the_output_choice_of_a_pbt_run_measures_every_members_networks_and_keeps_its_own_for_the_best(tmp_path):
    """What `seedleague exploit --choose` reads of a --pbt run: the evaluation games' population is every member's
    (each one's newest snapshots and its own param average, keyed by member), so its Nash mixture mixes networks of
    several members, each read from its own directory; the average policy and the distilled network's home are the
    best member's (main-1: its snapshots in the pool, its param average in players/main-1), never main's param
    average beside main-1's snapshots."""
    run = _pbt_run_where_main_1_leads(tmp_path)
    params = [save_checkpoint(run / "pool" / player, step=step, network=SMALL).params
              for player, step in (("main", 2), ("main-1", 5), ("main-1", 8))][0]
    averaging = LearnerConfig(average_from=1)
    save_checkpoint(run / "checkpoints", step=4, network=SMALL, learner=averaging, average=(params, 2))
    save_checkpoint(run / "players" / "main-1" / "checkpoints", step=9, network=SMALL, learner=averaging,
                    average=(params, 5))
    record(str(run), OutputConfig("param_average"))
    member = str(run / "players" / "main-1")
    assert output.output_member(str(run), "main")[:2] == ("main-1", member)
    population = output.population(str(run), "main", 4)  # 4 snapshots over 2 members: the newest 2 of each
    assert [(m.key, m.path, m.average) for m in population.members] == [
        ("main:000002", str(run / "pool" / "main"), False), ("param_average:main:000004", str(run), True),
        ("main-1:000005", str(run / "pool" / "main-1"), False), ("main-1:000008", str(run / "pool" / "main-1"), False),
        ("param_average:main-1:000009", member, True)]
    assert output.population(str(run), "main", 1).members[0].key == "main:000002"  # at least one snapshot each
    keys = tuple(m.key for m in population.members)
    sampled_metagame.write(str(run), sampled_metagame.PopulationNash(
        keys, ((0.5, 0.0, 0.5, 0.0, 0.0), (0.0, 0.25, 0.0, 0.0, 0.75)), 0.0, 100, 0.1))
    nash = output.resolve(str(run), OutputConfig("population_nash"))
    assert [(m.key, m.path, m.step, m.average, m.seat_weights) for m in nash.members] == [
        ("main:000002", str(run / "pool" / "main"), 2, False, (0.5, 0.0)),
        ("param_average:main:000004", str(run), 4, True, (0.0, 0.25)),
        ("main-1:000005", str(run / "pool" / "main-1"), 5, False, (0.5, 0.0)),
        ("param_average:main-1:000009", member, 9, True, (0.0, 0.75))]
    assert len(nash.load(0).members) == 4  # each loads from its own directory
    average = output.resolve(str(run), OutputConfig("average_policy")).members
    assert [m.key for m in average] == ["main-1:000008", "param_average:000009"] and average[-1].path == member
    assert output.output_member(str(run), "exploiter") == ("exploiter", str(run), "")  # no member: the run's own


def test_a_pbt_run_without_snapshots_has_no_population_yet_and_says_so(tmp_path):
    run = _pbt_run_where_main_1_leads(tmp_path)
    record(str(run), OutputConfig("param_average"))
    with pytest.raises(FileNotFoundError, match=r"no league snapshots of 'main''s population \(main, main-1\) yet"):
        output.population(str(run), "main", 4)


def test_a_param_averages_key_names_its_player_where_a_population_mixes_several():
    assert output.average_key(10) == "param_average:000010"
    assert output.average_key(10, "main-1") == "param_average:main-1:000010"
    assert output.parse_average_key("param_average:000010") == ("", 10)
    assert output.parse_average_key("param_average:main-1:000010") == ("main-1", 10)


def test_the_best_member_is_read_once_while_the_league_is_unchanged_and_again_once_it_changes(tmp_path, monkeypatch):
    run = _pbt_run_where_main_1_leads(tmp_path)
    opened = []
    monkeypatch.setattr(run_league, "league_of", lambda run_dir: opened.append(run_dir) or League(
        load_config(str(run / "league")), str(run / "league" / "league.sqlite")))
    assert [run_league.pbt_output(str(run), "main")[0] for _ in range(3)] == ["main-1"] * 3 and len(opened) == 1
    with League(load_config(str(run / "league")), str(run / "league" / "league.sqlite")) as league:
        league.report_results(_against_both("main", 95, 5) + _against_both("main-1", 5, 95))  # main leads now
    assert run_league.pbt_output(str(run), "main")[0] == "main" and len(opened) == 2


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
