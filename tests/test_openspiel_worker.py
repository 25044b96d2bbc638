"""The OpenSpiel worker: its vector game stepped in process (rewards, masks, chance,
autoreset, illegal actions), `check-worker` on the real process, and bad game names."""

from __future__ import annotations

import logging
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from seedleague.games.openspiel import encode, load_game, observation_shape, shows_the_clock
from envs.openspiel_worker import OpenSpielVectorGame
from envs.worker_loop import ILLEGAL_LOG_EVERY
from seedleague.protocol.named import random_named_actions, v1_of_named
from seedleague.tools import check_worker as cw

ROOT = pathlib.Path(__file__).resolve().parents[1]
FAST = cw.CheckConfig(steps=30, timeout_s=20.0, shutdown_timeout_s=5.0)


def _random(rng: np.random.Generator, game: OpenSpielVectorGame, step) -> dict:
    """Random legal actions for the game's one head, "action"."""
    return random_named_actions(rng, game.spec, step.legal_mask)


def _play(game: OpenSpielVectorGame, steps: int, seed: int = 0):
    """Random legal actions for `steps` steps; yields (states before, step) with the step's arrays copied (the
    spec's one tensor "observation" and head "action" as plain arrays)."""
    rng = np.random.default_rng(seed)
    step = game.reset(seed)
    for _ in range(steps):
        actions = _random(rng, game, step)
        before = game.states  # the same objects: a finished one keeps its terminal state
        step = game.step(actions)
        yield before, {"observation": np.copy(step.observation["observation"]),
                       "legal_mask": np.copy(step.legal_mask["action"]),
                       **{name: np.copy(getattr(step, name)) for name in ("reward", "terminated", "acting")}}


def test_spec_of_kuhn_poker():
    spec = v1_of_named(OpenSpielVectorGame("kuhn_poker", num_envs=3).spec)  # named, and of v1's form: v1 carries it
    assert (spec.env_name, spec.observation_shape, spec.observation_dtype) == ("openspiel:kuhn_poker", (11,), np.float32)
    assert (spec.num_actions, spec.num_envs, spec.num_seats, spec.has_legal_mask) == (2, 3, 2, True)
    assert spec.return_bound == 2.0  # bet and call: one chip ante, one bet
    assert OpenSpielVectorGame("leduc_poker", num_envs=1).spec.return_bound == 13.0


@pytest.mark.parametrize("name, steps", [("kuhn_poker", 100), ("leduc_poker", 100), ("connect_four", 150)])
def test_episode_rewards_sum_to_openspiel_returns_and_are_zero_sum(name, steps):
    game = OpenSpielVectorGame(name, num_envs=8, seed=1)
    totals = np.zeros((8, 2))
    finished = 0
    for before, step in _play(game, steps):
        assert step["reward"].dtype == np.float32
        np.testing.assert_allclose(step["reward"].sum(axis=1), 0.0, atol=1e-6)
        totals += step["reward"]
        for env in np.flatnonzero(step["terminated"]):
            assert before[env].is_terminal()
            np.testing.assert_allclose(totals[env], before[env].returns(), atol=1e-5)
            totals[env] = 0.0
            finished += 1
    assert finished >= 8 and game.episodes == finished


@pytest.mark.parametrize("name", ["kuhn_poker", "connect_four"])
def test_observations_acting_and_legal_masks_follow_the_state(name):
    game = OpenSpielVectorGame(name, num_envs=4, seed=2)
    for _, step in _play(game, 40):
        for env, state in enumerate(game.states):
            player = state.current_player()
            assert step["acting"][env].tolist() == [player == 0, player == 1]
            assert np.flatnonzero(step["legal_mask"][env, player]).tolist() == state.legal_actions()
            assert not step["legal_mask"][env, 1 - player].any()
            for seat in (0, 1):
                np.testing.assert_array_equal(step["observation"][env, seat], encode(state, seat))


def _deals(seed: int, num_envs: int = 4, steps: int = 60) -> list[tuple[int, ...]]:
    """The cards dealt to each new Kuhn game, in order, over `steps` random steps."""
    game = OpenSpielVectorGame("kuhn_poker", num_envs, seed=0)
    rng = np.random.default_rng(0)
    step = game.reset(seed=seed)
    deals = [tuple(state.history()[:2]) for state in game.states]
    for _ in range(steps):
        step = game.step(_random(rng, game, step))
        deals += [tuple(game.states[env].history()[:2]) for env in np.flatnonzero(step.terminated)]
    return deals


@pytest.mark.parametrize("name", ["tic_tac_toe", "connect_four"])
def test_board_observations_say_whose_view_they_are(name):
    # OpenSpiel's board tensors are absolute (the same for both players); the
    # encoding appends one constant plane per seat so a policy knows its colour.
    game = OpenSpielVectorGame(name, num_envs=1)
    state = game.game.new_initial_state()
    state.apply_action(state.legal_actions()[0])
    views = [encode(state, player) for player in (0, 1)]
    raw = np.asarray(state.observation_tensor(0), np.float32).reshape(game.game.observation_tensor_shape())
    for player, view in enumerate(views):
        np.testing.assert_array_equal(view[:-2], raw)
        np.testing.assert_array_equal(view[-2:].reshape(2, -1).min(axis=1), np.eye(2)[player])
        np.testing.assert_array_equal(view[-2:].reshape(2, -1).max(axis=1), np.eye(2)[player])
    assert not np.array_equal(views[0], views[1])


OSHI = "turn_based_simultaneous_game(game=oshi_zumo(coins=6,size=2,horizon=6))"


def test_an_imperfect_information_game_without_an_information_state_shows_the_move_number():
    # The turn-based oshi_zumo has only an observation tensor (25 floats: coins and the wrestler's square),
    # which looks the same with 1 and with 5 rounds left; the encoding appends the seat planes and a one-hot
    # of the move number, 0..max_game_length (12 here).
    game = load_game(OSHI)
    assert shows_the_clock(game) and not shows_the_clock(load_game("connect_four"))
    assert observation_shape(game) == (25 + 2 + 13,)
    state = game.new_initial_state()
    for action in (0, 0, 0):  # round 1 (both bid 0), then seat 0's bid of round 2
        state.apply_action(action)
    view = encode(state, 1)
    np.testing.assert_array_equal(view[:25], state.observation_tensor(1))
    np.testing.assert_array_equal(view[25:27], [0, 1])
    np.testing.assert_array_equal(view[27:], np.eye(13)[3])
    again = game.new_initial_state()
    again.apply_action(0)
    assert np.array_equal(encode(again, 1)[:27], view[:27]) and not np.array_equal(encode(again, 1), view)


def test_chance_is_sampled_with_the_seeded_generator():
    """Kuhn deals two of three cards: all 6 deals show up, and the seed fixes which come when."""
    deals = _deals(seed=7)
    assert len(deals) > 50
    assert set(deals) == {(a, b) for a in range(3) for b in range(3) if a != b}
    assert _deals(seed=7) == deals
    assert _deals(seed=8) != deals


def test_a_finished_game_restarts_in_the_same_step():
    game = OpenSpielVectorGame("kuhn_poker", num_envs=1, seed=0)
    step = game.reset(seed=0)
    first = game.states[0]
    step = game.step({"action": np.zeros((1, 2), np.int32)})  # player 0 passes
    assert not step.terminated[0] and step.reward.tolist() == [[0.0, 0.0]] and step.acting.tolist() == [[False, True]]
    step = game.step({"action": np.zeros((1, 2), np.int32)})  # player 1 passes: showdown, the higher card wins 1
    assert first.is_terminal() and step.terminated[0]
    assert step.reward[0].tolist() == first.returns() and abs(step.reward[0, 0]) == 1.0
    fresh = game.states[0]
    assert fresh is not first and len(fresh.history()) == 2 and not fresh.is_terminal()  # dealt, nobody moved
    assert step.acting.tolist() == [[True, False]]
    assert step.legal_mask["action"].tolist() == [[[True, True], [False, False]]]
    np.testing.assert_array_equal(step.observation["observation"][0, 1], encode(fresh, 1))
    step = game.step({"action": np.zeros((1, 2), np.int32)})
    assert not step.terminated[0] and game.states[0] is fresh


def test_illegal_actions_are_counted_logged_and_replaced_by_the_first_legal_one(caplog):
    game = OpenSpielVectorGame("tic_tac_toe", num_envs=3, seed=0)
    game.reset()
    centre = {"action": np.full((3, 2), 4, np.int32)}
    game.step(centre)  # seat 0 takes the centre in every env
    assert game.illegal_actions == 0
    with caplog.at_level(logging.WARNING, logger="envs.openspiel_worker"):
        step = game.step(centre)  # seat 1 asks for the taken centre
    assert game.illegal_actions == 3
    assert [state.history() for state in game.states] == [[4, 0]] * 3
    assert step.acting[:, 0].all()
    warnings = [r.getMessage() for r in caplog.records if "illegal" in r.getMessage()]
    assert len(warnings) == 1 and "action 4 for env 0 seat 1" in warnings[0] and "first legal action 0" in warnings[0]
    assert ILLEGAL_LOG_EVERY > 1


def test_out_of_range_actions_are_replaced_and_non_acting_seats_ignored():
    game = OpenSpielVectorGame("kuhn_poker", num_envs=2, seed=0)
    game.reset()
    game.step({"action": np.array([[1, -5], [9, 99]], np.int32)})  # seat 0 acts: env 0 bets, env 1 is out of range
    assert game.illegal_actions == 1
    assert [state.history()[2:] for state in game.states] == [[1], [0]]
    with pytest.raises(ValueError, match=r"actions must be \{'action': \[E, S\] int\}, got ndarray"):
        game.step(np.zeros((2, 2), np.int32))  # the named head's dict, not v1's bare array
    with pytest.raises(ValueError, match=r"actions\['action'\] have shape \(2,\), expected \(2, 2\)"):
        game.step({"action": np.zeros(2, np.int32)})


def _worker(game: str, num_envs: int) -> list[str]:
    return [
        sys.executable, "-m", "envs.openspiel_worker", "--address", "{address}", "--game", game,
        "--num-envs", str(num_envs), "--backoff-initial", "0.05", "--backoff-max", "0.3",
    ]


@pytest.mark.parametrize("game, shape, actions", [("kuhn_poker", (11,), 2), ("connect_four", (5, 6, 7), 7)])
def test_worker_passes_every_check(game, shape, actions):
    report = cw.check_worker(_worker(game, 4), FAST)
    assert report.passed, report.format()
    assert "protocol v1," in report.format()  # named inside the worker, v1 on the wire as it always was
    spec = v1_of_named(report.spec)  # the fake host keeps the named spec; these games are v1's
    assert (spec.env_name, spec.observation_shape, spec.num_actions) == (f"openspiel:{game}", shape, actions)
    assert (spec.num_envs, spec.num_seats, spec.has_legal_mask) == (4, 2, True)


@pytest.mark.parametrize(
    "game, message",
    [("no_such_game", "OpenSpiel has no game 'no_such_game'"), ("matrix_rps", "matrix_rps is not sequential"),
     ("nfg_game", "OpenSpiel has no game 'nfg_game' (map::at)")],  # its loader raises IndexError, not SpielError
)
def test_an_unusable_game_exits_2_naming_it_before_connecting(game, message):
    command = [sys.executable, "-m", "envs.openspiel_worker", "--address", "127.0.0.1:1", "--game", game]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    error = [line for line in done.stderr.splitlines() if "ERROR envs.openspiel_worker" in line]
    assert len(error) == 1 and message in error[0], done.stderr
    assert "connected" not in done.stderr and "reconnecting" not in done.stderr


@pytest.mark.parametrize("name, unknown, nearest", [("kuhn_pokr", "kuhn_pokr", "kuhn_poker"),
                                                     ("turn_based_simultaneous_game(game=blottto())", "blottto", "blotto")])
def test_an_unknown_game_is_refused_with_the_nearest_names_and_without_openspiels_list(capfd, name, unknown, nearest):
    from seedleague.games.openspiel import UnsupportedGame, load_game

    with pytest.raises(UnsupportedGame, match=f"OpenSpiel has no game.*'{unknown}' is not one of.*did you mean "
                                              f"{nearest}"):
        load_game(name)
    assert "Available games" not in capfd.readouterr().err


def test_a_game_parameter_written_without_parentheses_gets_the_fix_in_the_error():
    from seedleague.games.openspiel import UnsupportedGame, load_game

    with pytest.raises(UnsupportedGame, match=r"takes parentheses.*turn_based_simultaneous_game\(game=blotto\(\)\)"):
        load_game("turn_based_simultaneous_game(game=blotto)")
    assert load_game("turn_based_simultaneous_game(game=blotto())").num_players() == 2


@pytest.mark.parametrize("game", ["matrix_rps", "goofspiel(num_cards=3)"])
def test_a_simultaneous_game_is_refused_with_the_turn_based_name_that_loads(game):
    from seedleague.games.openspiel import UnsupportedGame, load_game

    with pytest.raises(UnsupportedGame, match="not sequential") as refused:
        load_game(game)
    suggestion = str(refused.value).rsplit(": ", 1)[1]
    assert suggestion.startswith("turn_based_simultaneous_game(game=")
    assert load_game(suggestion).num_players() == 2



@pytest.mark.parametrize("game, fix", [
    ("go_fish(players=3)", "ask for its two-player form, go_fish(players=2)"),
    ("2048", "it has no two-player form; pick a two-player game (a one-player game trains as a single-agent env"),
    ("euchre", "it has no two-player form; pick a two-player game (a team game trains through a worker of your own"),
    ("hearts", "it has no two-player form; pick a two-player game"),
])
def test_a_game_of_another_player_count_is_refused_with_its_two_player_form_only_where_it_has_one(game, fix):
    from seedleague.games.openspiel import UnsupportedGame, load_game

    with pytest.raises(UnsupportedGame, match="-player game; seedleague's OpenSpiel worker plays two-player") as no:
        load_game(game)
    assert str(no.value).split("two-player games: ", 1)[1].startswith(fix)
    if "(players=2)" in fix:
        assert load_game(fix.rsplit(", ", 1)[1]).num_players() == 2  # the form it names loads
