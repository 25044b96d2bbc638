"""PettingZoo classic AEC games: the turn, acting, legal-mask and reward bookkeeping against hand-played
tic-tac-toe games, truncation, `check-worker` on the real worker process, refusals of names it cannot
play, and a short league run through the host over a real socket."""

from __future__ import annotations

import logging
import os
import sys

import numpy as np
import pytest

from envs.pettingzoo_classic import ClassicVectorGame, available_games
from envs.pettingzoo_worker import UnsupportedGame, make_vector_game
from seedleague.protocol.named import random_named_actions, v1_of_named
from seedleague.tools import check_worker as cw
from conftest import seedleague_here
from test_e2e import run_cli, summary

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
X_WINS = [0, 3, 1, 4, 2]  # seat 0 takes the top row
DRAW = [0, 1, 2, 4, 3, 5, 7, 6, 8]  # X O X / X O O / O X X: no line


def play(game: ClassicVectorGame, moves_by_env: list[list[int]], junk: int = 8):
    """Play the moves turn by turn in every env; the seat not to move is sent `junk`. The GameSteps, copied."""
    steps = []
    for turn in range(max(map(len, moves_by_env))):
        actions = np.full((game.spec.num_envs, 2), junk)
        for env, moves in enumerate(moves_by_env):
            actions[env, turn % 2] = moves[turn] if turn < len(moves) else 0
        step = game.step({"action": actions})
        steps.append({"observation": np.copy(step.observation["observation"]),
                      "legal_mask": np.copy(step.legal_mask["action"]),
                      **{name: np.copy(getattr(step, name))
                         for name in ("reward", "terminated", "truncated", "acting")}})
    return steps


def test_spec_of_tictactoe():
    game = ClassicVectorGame("tictactoe_v3", num_envs=3)
    spec = v1_of_named(game.spec)  # named, and of v1's form: v1 carries it on the wire
    assert (spec.env_name, spec.observation_shape, spec.observation_dtype) == ("pettingzoo:classic/tictactoe_v3",
                                                                               (2, 3, 3), np.float32)
    assert (spec.num_actions, spec.num_envs, spec.num_seats, spec.has_legal_mask) == (9, 3, 2, True)


def test_a_hand_played_game_alternates_turns_masks_and_credits_both_seats():
    game = ClassicVectorGame("tictactoe_v3", num_envs=2)
    first = game.reset(seed=0)
    assert first.acting.tolist() == [[True, False]] * 2 and first.legal_mask["action"][:, 0].all()
    assert not first.legal_mask["action"][:, 1].any() and not first.observation["observation"].any()
    steps = play(game, [X_WINS, DRAW])
    for turn, step in enumerate(steps[:4]):  # env 0 before its last move: seat (turn + 1) % 2 is to move
        mover = (turn + 1) % 2
        assert step["acting"][0].tolist() == [mover == 0, mover == 1]
        assert not step["legal_mask"][0, 1 - mover].any()
        played = X_WINS[:turn + 1]
        assert np.flatnonzero(~step["legal_mask"][0, mover]).tolist() == sorted(played)
        assert step["reward"][0].tolist() == [0.0, 0.0] and not step["terminated"][0]
    # Each seat sees its own marks in plane 0: after turn 3 (0, 3, 1, 4) seat 0 has cells 0 and 1, seat 1 cells 3, 4.
    board = steps[3]["observation"][0]
    assert np.flatnonzero(board[0, 0]).tolist() == [0, 1] and np.flatnonzero(board[0, 1]).tolist() == [3, 4]
    assert np.flatnonzero(board[1, 0]).tolist() == [3, 4] and np.flatnonzero(board[1, 1]).tolist() == [0, 1]
    # Move 5 wins for seat 0: both seats credited at once, the game restarts in the same step.
    won = steps[4]
    assert won["terminated"].tolist() == [True, False] and won["reward"][0].tolist() == [1.0, -1.0]
    assert not won["observation"][0].any() and won["acting"][0].tolist() == [True, False]
    assert won["legal_mask"][0, 0].all()
    # Env 1 (the draw) went on meanwhile and ends at its ninth move with nothing for either seat.
    assert [bool(s["terminated"][1]) for s in steps] == [False] * 8 + [True]
    assert sum(s["reward"][1] for s in steps).tolist() == [0.0, 0.0]
    assert sum(s["reward"][0] for s in steps[5:]).tolist() == [0.0, 0.0]  # env 0's next game: nothing yet
    assert game.episodes == 2 and not any(s["truncated"].any() for s in steps)


def test_an_illegal_action_is_replaced_by_the_first_legal_one():
    game = ClassicVectorGame("tictactoe_v3", num_envs=1)
    game.reset()
    game.step({"action": np.array([[4, 0]])})
    step = game.step({"action": np.array([[0, 4]])})  # seat 1 picks the taken centre: it plays cell 0 instead
    assert game.illegal_actions == 1 and not step.terminated[0]
    assert np.flatnonzero(step.observation["observation"][0, 1, 0]).tolist() == [0]
    assert np.flatnonzero(step.observation["observation"][0, 0, 0]).tolist() == [4]


def test_max_cycles_truncates_and_restarts():
    game = ClassicVectorGame("tictactoe_v3", num_envs=1, max_cycles=3)
    game.reset()
    steps = play(game, [[0, 1, 2, 4, 3, 5]])
    assert [(bool(s["terminated"][0]), bool(s["truncated"][0])) for s in steps] == [(False, False), (False, False),
                                                                                  (False, True)] * 2
    assert not steps[2]["observation"].any() and steps[2]["acting"][0].tolist() == [True, False]


def test_connect_four_shows_planes_channels_first():
    game = make_vector_game("classic/connect_four_v3", num_envs=1)
    spec = v1_of_named(game.spec)
    assert (spec.observation_shape, spec.num_actions) == ((2, 6, 7), 7)
    step = game.reset()
    step = game.step({"action": np.array([[3, 0]])})
    assert np.flatnonzero(step.observation["observation"][0, 0, 0]).tolist() == [5 * 7 + 3]  # seat 0's disc, bottom row
    assert np.flatnonzero(step.observation["observation"][0, 1, 1]).tolist() == [5 * 7 + 3]  # the opponent's plane
    assert {"connect_four_v3", "tictactoe_v3"} <= set(available_games())


def test_tictactoe_worker_passes_every_check():
    command = [sys.executable, "-m", "envs.pettingzoo_worker", "--address", "{address}", "--game",
               "classic/tictactoe_v3", "--num-envs", "4", "--backoff-initial", "0.05", "--backoff-max", "0.3"]
    report = cw.check_worker(command, cw.CheckConfig(steps=40, timeout_s=30.0, shutdown_timeout_s=5.0))
    assert report.passed, report.format()
    assert "protocol v1," in report.format()  # named inside the worker, v1 on the wire as it always was
    spec = v1_of_named(report.spec)  # the fake host keeps the named spec; these games are v1's
    assert (spec.env_name, spec.observation_shape, spec.num_actions, spec.num_seats, spec.has_legal_mask) == (
        "pettingzoo:classic/tictactoe_v3", (2, 3, 3), 9, 2, True)


def test_train_refuses_an_unknown_classic_game_before_starting_anything(tmp_path, capsys):
    done = seedleague_here(capsys, "train", "--env", "pettingzoo:classic/nope_v1", "--run-dir", str(tmp_path / "run"))
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "--env pettingzoo:classic/nope_v1 is refused: unsupported PettingZoo game 'classic/nope_v1'" in done.stderr
    assert not os.path.exists(tmp_path / "run" / "logs")


def test_unsupported_names_raise_unsupported_game():
    with pytest.raises(UnsupportedGame, match="classic/tictactoe_v9"):
        make_vector_game("classic/tictactoe_v9", num_envs=1)


def test_tictactoe_trains_in_a_league_by_name(tmp_path):
    run_dir = str(tmp_path / "tictactoe")
    out = run_cli(["train", "--env", "pettingzoo:classic/tictactoe_v3", "--run-dir", run_dir, "--workers", "1",
                   "--envs-per-worker", "8", "--unroll_length", "4", "--batch_size", "4", "--replay.capacity", "16",
                   "--network.torso", "mlp", "--network.hidden_sizes", "16", "--max-learner-steps", "3",
                   "--max-seconds", "150", "--no-eval"], timeout=240)
    result = summary(run_dir)
    assert result["learner_step"] >= 3 and result["episodes"] > 0, out.stdout[-2000:]
    assert os.listdir(os.path.join(run_dir, "pool", "main"))  # a league run: its first snapshot reached the pool


def _random_legal_play(name: str, turns: int = 300):
    """The game after `turns` random legal moves in 4 envs, and each finished game's returns, seat by seat; every turn
    has exactly one mover, who alone has legal actions."""
    game = ClassicVectorGame(name, num_envs=4, seed=1)
    step, rng = game.reset(), np.random.default_rng(0)
    returns, outcomes = np.zeros((4, 2)), []
    for _ in range(turns):
        assert (step.acting.sum(axis=1) == 1).all()
        assert (step.legal_mask["action"].any(axis=2) == step.acting).all()  # the mover has a legal action only
        step = game.step(random_named_actions(rng, game.spec, step.legal_mask))
        returns += step.reward
        for env in np.flatnonzero(step.terminated):
            outcomes.append(tuple(returns[env]))
            returns[env] = 0.0
    return game, outcomes


@pytest.mark.parametrize("name", ["tictactoe_v3", "connect_four_v3"])
def test_random_legal_play_keeps_one_mover_and_zero_sum_outcomes(name):
    game, outcomes = _random_legal_play(name)
    assert outcomes and set(outcomes) <= {(1.0, -1.0), (-1.0, 1.0), (0.0, 0.0)}
    assert len(outcomes) == game.episodes and game.illegal_actions == 0


@pytest.mark.parametrize("name", ["texas_holdem_v4", "leduc_holdem_v4"])
def test_rlcard_poker_plays_by_name_with_one_mover_and_zero_sum_chips(name):
    # PettingZoo's poker games run on rlcard (a dependency)
    game, outcomes = _random_legal_play(name)
    assert len(outcomes) >= 20 and all(abs(a + b) < 1e-6 for a, b in outcomes)
    assert any(a != 0 for a, _ in outcomes) and game.illegal_actions == 0


def test_illegal_actions_are_logged_once_then_one_in_n(caplog):
    game = ClassicVectorGame("tictactoe_v3", num_envs=3)
    game.reset()
    game.step({"action": np.full((3, 2), 4)})
    with caplog.at_level(logging.WARNING, logger="envs.pettingzoo_classic"):
        game.step({"action": np.full((3, 2), 4)})
    warnings = [r.getMessage() for r in caplog.records if "illegal" in r.getMessage()]
    assert game.illegal_actions == 3 and len(warnings) == 1 and "action 4 for env 0 seat 1" in warnings[0]
