"""Matchmaking and check-in rules per mode and role, on hand-built league views.

Draws are forced with `ScriptedRng`: `random()` returns scripted uniforms (to pick
a branch) and `choice(n, p)` records the probabilities it was asked to draw from
and returns scripted indices, so each test checks the exact PFSP distribution.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from seedleague.league import matchmaking as mm
from seedleague.league.config import LeagueConfig
from seedleague.league.pfsp import pfsp_weights
from seedleague.league.types import Match, Mode, PlayerInfo, Role, SnapshotInfo, snapshot_key

ALPHASTAR = LeagueConfig(mode=Mode.ALPHASTAR, min_games=0)


class ScriptedRng:
    """A stand-in for np.random.Generator with scripted draws."""

    def __init__(self, uniforms=(), picks=()):
        self.uniforms, self.picks = list(uniforms), list(picks)
        self.choices: list[tuple[int, np.ndarray]] = []

    def random(self) -> float:
        return self.uniforms.pop(0)

    def choice(self, n, p=None):
        self.choices.append((n, None if p is None else np.asarray(p)))
        return self.picks.pop(0) if self.picks else 0


def make_view(players: dict[str, Role], snapshots: list[str], rates: dict[tuple[str, str], float], min_games=0):
    """A view whose pair (a, b) has 10 games won at rates[(a, b)] (mirrored for (b, a)); other pairs none."""
    infos = {}
    snaps = []
    for key in snapshots:
        player, step = key.split(":")
        snaps.append(SnapshotInfo(key, player, int(step), f"/pool/{key}", players[player]))
    for name, role in players.items():
        mine = [s for s in snaps if s.player == name]
        infos[name] = PlayerInfo(name, role, snapshots=len(mine), last_snapshot_step=mine[-1].step if mine else 0)
    keys = list(players) + snapshots
    index = {key: i for i, key in enumerate(keys)}
    counts = np.zeros((len(keys), len(keys), 4))
    for (a, b), rate in rates.items():
        counts[index[a], index[b]] = [10 * rate, 0, 10 * (1 - rate), 10]
        counts[index[b], index[a]] = [10 * (1 - rate), 0, 10 * rate, 10]
    return mm.LeagueView(infos, tuple(snaps), index, counts, min_games)


def key(player, step):
    return snapshot_key(player, step)


# --- main agent -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "u, branch",
    [(0.0, "pfsp"), (0.4999, "pfsp"), (0.5, "forgotten"), (0.6499, "forgotten"), (0.65, "self_play"), (0.999, "self_play")],
)
def test_main_agent_branch_follows_50_15_35(u, branch):
    assert mm.main_agent_branch(u, ALPHASTAR) == branch


def test_main_agent_pfsp_branch_is_hard_pfsp_over_every_snapshot():
    snaps = [key("main", 0), key("main", 500), key("x", 0)]
    view = make_view({"main": Role.MAIN, "x": Role.MAIN_EXPLOITER}, snaps,
                     {("main", snaps[0]): 0.9, ("main", snaps[1]): 0.5, ("main", snaps[2]): 0.2})
    rng = ScriptedRng(uniforms=[0.1], picks=[2])
    assert mm.main_agent_match(view, "main", ALPHASTAR, rng) == Match(snaps[2], False)
    (n, p), = rng.choices
    np.testing.assert_allclose(p, np.array([0.01, 0.25, 0.64]) / 0.90)  # (1-x)^2


def test_main_agent_self_play_with_one_main_agent_is_live_self_play():
    view = make_view({"main": Role.MAIN}, [key("main", 0)], {})
    rng = ScriptedRng(uniforms=[0.9], picks=[0])
    assert mm.main_agent_match(view, "main", ALPHASTAR, rng) == Match("main", True)


def test_main_agent_self_play_against_another_main_uses_its_latest_snapshot_or_a_curriculum():
    players = {"a": Role.MAIN, "b": Role.MAIN}
    b_snaps = [key("b", 0), key("b", 500), key("b", 1000)]
    beaten = make_view(players, b_snaps, {("a", b_snaps[0]): 0.9, ("a", b_snaps[1]): 0.6, ("a", b_snaps[2]): 0.3})
    rng = ScriptedRng(uniforms=[0.9], picks=[1])  # self-play branch, opponent main agent index 1 = "b"
    assert mm.main_agent_match(beaten, "a", ALPHASTAR, rng) == Match(b_snaps[2], False)  # 0.3 is not < 0.3

    too_strong = make_view(players, b_snaps, {("a", b_snaps[0]): 0.9, ("a", b_snaps[1]): 0.6, ("a", b_snaps[2]): 0.29})
    rng = ScriptedRng(uniforms=[0.9], picks=[1, 1])
    assert mm.main_agent_match(too_strong, "a", ALPHASTAR, rng) == Match(b_snaps[1], False)
    np.testing.assert_allclose(rng.choices[1][1], pfsp_weights(np.array([0.9, 0.6, 0.29]), "variance"))


def test_main_agent_forgotten_branch_prefers_past_exploiters_it_cannot_beat():
    snaps = [key("main", 0), key("main", 500), key("x", 0), key("x", 300)]
    players = {"main": Role.MAIN, "x": Role.MAIN_EXPLOITER}
    rates = {("main", snaps[0]): 0.5, ("main", snaps[1]): 0.5, ("main", snaps[2]): 0.8, ("main", snaps[3]): 0.2}
    rng = ScriptedRng(uniforms=[0.55], picks=[0, 1])
    assert mm.main_agent_match(make_view(players, snaps, rates), "main", ALPHASTAR, rng) == Match(snaps[3], False)
    np.testing.assert_allclose(rng.choices[1][1], np.array([0.04, 0.64]) / 0.68)


def test_main_agent_forgotten_branch_replays_forgotten_main_snapshots():
    snaps = [key("main", s) for s in (0, 500, 1000, 1500)]
    # Rates 0.6, 0.9, 0.8, 0.7 last rise at 0.9: the falling tail 0.8, 0.7 is dropped, 0.6 and 0.9 are kept.
    rates = {("main", k): r for k, r in zip(snaps, (0.6, 0.9, 0.8, 0.7))}
    rng = ScriptedRng(uniforms=[0.6], picks=[0, 0])
    view = make_view({"main": Role.MAIN}, snaps, rates)
    assert mm.main_agent_match(view, "main", ALPHASTAR, rng) == Match(snaps[0], False)
    np.testing.assert_allclose(rng.choices[1][1], np.array([0.16, 0.01]) / 0.17)


def test_main_agent_forgotten_branch_falls_back_to_self_play():
    snaps = [key("main", 0), key("main", 500)]
    view = make_view({"main": Role.MAIN}, snaps, {("main", snaps[0]): 0.9, ("main", snaps[1]): 0.8})  # never rises
    assert mm.main_agent_match(view, "main", ALPHASTAR, ScriptedRng(uniforms=[0.6])) == Match("main", True)


def test_remove_monotonic_suffix():
    rates, keys = mm.remove_monotonic_suffix(np.array([0.9, 0.5, 0.8, 0.6, 0.4]), list("abcde"))
    np.testing.assert_array_equal(rates, [0.9, 0.5, 0.8])
    assert keys == ["a", "b", "c"]
    assert mm.remove_monotonic_suffix(np.array([0.9, 0.8, 0.7]), list("abc"))[1] == []
    assert mm.remove_monotonic_suffix(np.array([0.1]), ["a"])[1] == []
    assert mm.remove_monotonic_suffix(np.zeros(0), [])[1] == []


def test_with_no_snapshots_every_role_plays_itself():
    view = make_view({"m": Role.MAIN, "x": Role.MAIN_EXPLOITER, "l": Role.LEAGUE_EXPLOITER}, [], {})
    for u in (0.1, 0.6, 0.9):
        assert mm.main_agent_match(view, "m", ALPHASTAR, ScriptedRng(uniforms=[u])) == Match("m", True)
    assert mm.main_exploiter_match(view, "x", ALPHASTAR, ScriptedRng()) == Match("x", True)
    assert mm.league_exploiter_match(view, "l", ALPHASTAR, ScriptedRng()) == Match("l", True)


# --- exploiters -----------------------------------------------------------------------------------


def test_main_exploiter_plays_the_latest_main_snapshot_unless_too_strong():
    snaps = [key("m", 0), key("m", 500)]
    players = {"m": Role.MAIN, "x": Role.MAIN_EXPLOITER}
    ok = make_view(players, snaps, {("x", snaps[0]): 0.9, ("x", snaps[1]): 0.2})  # 0.2 is not < 0.2
    assert mm.main_exploiter_match(ok, "x", ALPHASTAR, ScriptedRng()) == Match(snaps[1], False)
    strong = make_view(players, snaps, {("x", snaps[0]): 0.9, ("x", snaps[1]): 0.1})
    rng = ScriptedRng(picks=[0, 0])
    assert mm.main_exploiter_match(strong, "x", ALPHASTAR, rng) == Match(snaps[0], False)
    np.testing.assert_allclose(rng.choices[1][1], np.array([0.09, 0.09]) / 0.18)  # variance x(1-x)


def test_league_exploiter_is_linear_capped_pfsp_over_everyone():
    snaps = [key("m", 0), key("x", 0), key("l", 0)]
    view = make_view({"m": Role.MAIN, "x": Role.MAIN_EXPLOITER, "l": Role.LEAGUE_EXPLOITER}, snaps,
                     {("l", snaps[0]): 0.2, ("l", snaps[1]): 0.6, ("l", snaps[2]): 0.9})
    rng = ScriptedRng(picks=[1])
    assert mm.league_exploiter_match(view, "l", ALPHASTAR, rng) == Match(snaps[1], False)
    np.testing.assert_allclose(rng.choices[0][1], np.array([0.5, 0.4, 0.1]) / 1.0)


# --- modes ----------------------------------------------------------------------------------------


def test_self_play_mode_always_plays_itself():
    view = make_view({"a": Role.MAIN}, [key("a", 0)], {})
    config = LeagueConfig(mode=Mode.SELF_PLAY)
    assert mm.choose_opponents(view, "a", 3, config, np.random.default_rng(0)) == [Match("a", True)] * 3


def test_last_n_mode_is_uniform_over_the_players_own_last_n():
    snaps = [key("a", s) for s in (0, 100, 200, 300)] + [key("b", 0)]
    view = make_view({"a": Role.MAIN, "b": Role.MAIN}, snaps, {})
    config = LeagueConfig(mode=Mode.LAST_N, last_n=2)
    drawn = {m.opponent for m in mm.choose_opponents(view, "a", 200, config, np.random.default_rng(0))}
    assert drawn == {key("a", 200), key("a", 300)}
    assert mm.choose_opponents(view, "b", 1, config, np.random.default_rng(0)) == [Match(key("b", 0), False)]
    none = make_view({"a": Role.MAIN}, [], {})
    assert mm.choose_opponents(none, "a", 1, config, np.random.default_rng(0)) == [Match("a", True)]


def test_pfsp_mode_uses_the_configured_weighting_over_every_snapshot():
    snaps = [key("a", 0), key("b", 0)]
    view = make_view({"a": Role.MAIN, "b": Role.MAIN_EXPLOITER}, snaps, {("a", snaps[0]): 0.5, ("a", snaps[1]): 0.8})
    rng = ScriptedRng(picks=[1])
    config = LeagueConfig(mode=Mode.PFSP, pfsp_weighting="linear")
    assert mm.choose_opponents(view, "a", 1, config, rng) == [Match(snaps[1], False)]
    np.testing.assert_allclose(rng.choices[0][1], np.array([0.5, 0.2]) / 0.7)


def test_psro_mode_draws_from_the_nash_mixture_mixed_with_uniform():
    snaps = [key("a", 0), key("a", 100)]
    # a:000100 beats a:000000 80% of the time: the Nash mixture is all on it.
    view = make_view({"a": Role.MAIN}, snaps, {(snaps[1], snaps[0]): 0.8})
    np.testing.assert_allclose(mm.psro_mixture(view, epsilon=0.1), [0.05, 0.95], atol=1e-7)
    rng = ScriptedRng(picks=[1])
    config = LeagueConfig(mode=Mode.PSRO, psro_epsilon=0.1)
    assert mm.choose_opponents(view, "a", 1, config, rng) == [Match(snaps[1], False)]
    np.testing.assert_allclose(rng.choices[0][1], [0.05, 0.95], atol=1e-7)
    one = make_view({"a": Role.MAIN}, snaps[:1], {})
    assert mm.choose_opponents(one, "a", 2, config, np.random.default_rng(0)) == [Match(snaps[0], False)] * 2
    none = make_view({"a": Role.MAIN}, [], {})
    assert mm.choose_opponents(none, "a", 1, config, np.random.default_rng(0)) == [Match("a", True)]


@pytest.mark.parametrize("mode", [Mode.LAST_N, Mode.PFSP, Mode.PSRO])
def test_a_self_play_share_plays_itself_below_it_and_draws_a_snapshot_above(mode):
    snaps = [key("a", 0), key("a", 100)]
    view = make_view({"a": Role.MAIN}, snaps, {(snaps[1], snaps[0]): 0.8})
    config = LeagueConfig(mode=mode, self_play_share=0.75)
    rng = ScriptedRng(uniforms=[0.1, 0.7499, 0.75, 0.99], picks=[1, 1])
    matches = mm.choose_opponents(view, "a", 4, config, rng)
    assert matches[:2] == [Match("a", True)] * 2
    assert all(not m.self_play and m.opponent in snaps for m in matches[2:])
    with pytest.raises(ValueError, match="self_play_share is a probability"):
        LeagueConfig(self_play_share=1.5)


def test_psro_mixture_of_rock_paper_scissors_snapshots_is_uniform():
    r, p, s = key("a", 0), key("a", 1), key("a", 2)
    view = make_view({"a": Role.MAIN}, [r, p, s], {(p, r): 1.0, (s, p): 1.0, (r, s): 1.0})
    np.testing.assert_allclose(mm.psro_mixture(view, epsilon=0.0), [1 / 3] * 3, atol=1e-7)


def test_alphastar_mode_dispatches_by_role_with_a_seeded_rng():
    snaps = [key("m", 0), key("x", 0), key("l", 0)]
    view = make_view({"m": Role.MAIN, "x": Role.MAIN_EXPLOITER, "l": Role.LEAGUE_EXPLOITER}, snaps, {})
    config = LeagueConfig(mode=Mode.ALPHASTAR)
    exploiter = mm.choose_opponents(view, "x", 50, config, np.random.default_rng(1))
    assert {m.opponent for m in exploiter} == {key("m", 0)}  # the only main agent's latest snapshot
    main = mm.choose_opponents(view, "m", 400, config, np.random.default_rng(1))
    self_play = sum(m.self_play for m in main) / len(main)
    assert 0.3 < self_play < 0.6  # 35% self-play plus the forgotten branch's fallbacks
    assert {m.opponent for m in main if not m.self_play} == set(snaps)


# --- check-ins ------------------------------------------------------------------------------------


def decide(view, name, step, config=ALPHASTAR, rng=None):
    return mm.check_in_decision(view, view.players[name], step, config, rng or ScriptedRng())


def test_first_check_in_snapshots_at_once():
    view = make_view({"m": Role.MAIN, "x": Role.MAIN_EXPLOITER}, [], {})
    for name in ("m", "x"):
        decision = decide(view, name, 0)
        assert decision.snapshot and not decision.reset and "initial" in decision.reason


def test_main_agents_and_other_modes_snapshot_every_interval_and_never_reset():
    view = make_view({"m": Role.MAIN, "l": Role.LEAGUE_EXPLOITER}, [key("m", 1000), key("l", 1000)], {})
    assert not decide(view, "m", 1499).snapshot
    assert decide(view, "m", 1500).snapshot and not decide(view, "m", 1500).reset
    pfsp = LeagueConfig(mode=Mode.PFSP, snapshot_interval_steps=300)
    assert not decide(view, "l", 1299, pfsp).snapshot
    assert decide(view, "l", 1300, pfsp).snapshot and not decide(view, "l", 1300, pfsp).reset


def test_main_exploiter_snapshots_when_it_beats_every_main_agent_then_resets():
    snaps = [key("m", 0), key("m", 500), key("n", 0), key("x", 1000)]
    players = {"m": Role.MAIN, "n": Role.MAIN, "x": Role.MAIN_EXPLOITER}
    config = dataclasses.replace(ALPHASTAR, exploiter_min_steps=100, main_exploiter_timeout_steps=1000)
    beats = make_view(players, snaps, {("x", snaps[1]): 0.8, ("x", snaps[2]): 0.8})  # latest of m and of n
    assert not decide(beats, "x", 1099, config).snapshot  # before exploiter_min_steps
    decision = decide(beats, "x", 1100, config)
    assert decision.snapshot and decision.reset and "beats every main agent" in decision.reason
    at_threshold = make_view(players, snaps, {("x", snaps[1]): 0.8, ("x", snaps[2]): 0.7})  # 0.7 is not > 0.7
    assert not decide(at_threshold, "x", 1100, config).snapshot
    timeout = decide(at_threshold, "x", 2000, config)
    assert timeout.snapshot and timeout.reset and "timeout" in timeout.reason
    assert not decide(at_threshold, "x", 1999, config).snapshot


def test_exploiter_win_rates_need_min_games():
    snaps = [key("m", 0), key("x", 0)]
    players = {"m": Role.MAIN, "x": Role.MAIN_EXPLOITER}
    config = dataclasses.replace(ALPHASTAR, min_games=5, exploiter_min_steps=0)
    assert decide(make_view(players, snaps, {("x", snaps[0]): 1.0}, min_games=5), "x", 10, config).snapshot  # 10 games
    assert not decide(make_view(players, snaps, {("x", snaps[0]): 1.0}, min_games=11), "x", 10, config).snapshot


def test_league_exploiter_snapshots_when_it_beats_everyone_and_resets_with_probability_a_quarter():
    snaps = [key("m", 0), key("l", 200)]
    players = {"m": Role.MAIN, "l": Role.LEAGUE_EXPLOITER}
    config = dataclasses.replace(ALPHASTAR, exploiter_min_steps=0, league_exploiter_timeout_steps=500)
    beats = make_view(players, snaps, {("l", snaps[0]): 0.9, ("l", snaps[1]): 0.75})
    reset = decide(beats, "l", 300, config, ScriptedRng(uniforms=[0.2]))
    assert reset.snapshot and reset.reset and "every snapshot" in reset.reason
    assert not decide(beats, "l", 300, config, ScriptedRng(uniforms=[0.25])).reset  # 0.25 is not < 0.25
    misses_one = make_view(players, snaps, {("l", snaps[0]): 0.9})  # never played its own snapshot: 0.5
    assert not decide(misses_one, "l", 699, config).snapshot
    assert decide(misses_one, "l", 700, config, ScriptedRng(uniforms=[0.9])).snapshot  # timeout
