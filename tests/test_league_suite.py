"""benchmarks/league_suite.py on a synthetic run directory: commands, budget cutoffs, scores, rows and table.

Training is faked (the suite's `train_fn` writes checkpoints, snapshots and a summary.json
as a run would); a real 20-second run of each method is a smoke run by hand (benchmarks/README.md).
"""

import json
import os

import pytest

from benchmarks import league_suite
from seedleague import api
from seedleague.eval import board as board_lib
from seedleague.eval import curve, openspiel_eval, output_score
from test_api import save_checkpoint
from test_eval import KUHN, env_of

SECONDS = 8.0  # snapshots at steps 1, 2, 4 have wall_s 1.5, 3.0 and 6.0 (save_checkpoint: 1.5 s per step)


def fake_train(calls):
    def train(command, run_dir, seconds):
        calls.append(command)
        assert not os.path.exists(run_dir)
        save_checkpoint(os.path.join(run_dir, "checkpoints"), env_of(KUHN), step=8, uniform=True)
        for step, bias in ((1, [3.0, -3.0]), (2, [-3.0, 3.0]), (4, [0.5, 0.0])):
            save_checkpoint(os.path.join(run_dir, "pool", "main"), env_of(KUHN), step=step, seed=step, bias=bias)
        with open(os.path.join(run_dir, "summary.json"), "w") as f:
            json.dump(dict(reason="reached 8 s", env_steps=12345, learner_steps=67, wall_s=8.1), f)
        return 0

    return train


def test_the_snapshot_nearest_each_cutoff_is_chosen():
    times = [("main:000001", 1.5), ("main:000002", 3.0), ("main:000004", 6.0)]
    assert curve.nearest_snapshot(times, 2.0) == ("main:000001", 1.5)
    assert curve.nearest_snapshot(times, 4.0) == ("main:000002", 3.0)
    assert curve.nearest_snapshot(times, 4.5) == ("main:000002", 3.0)  # a tie goes to the earlier one
    assert curve.nearest_snapshot(times, 100.0) == ("main:000004", 6.0)
    assert curve.nearest_snapshot([], 1.0) is None


def test_the_suite_trains_each_method_in_turn_and_scores_the_cutoffs_and_the_output(tmp_path, capsys):
    calls = []
    out = str(tmp_path / "R")
    rows = league_suite.run_suite(["openspiel:kuhn_poker"], SECONDS, 1, out, [0.25, 0.5],
                                  output_score.BoardBudget(), fake_train(calls))
    assert [r["method"] for r in rows] == ["recipe", "exact-selection", "self-play"]
    league_cmd, exact_cmd, baseline_cmd = calls
    assert league_cmd[1:] == ["train", "--env", "openspiel:kuhn_poker", "--run-dir", rows[0]["run_dir"],
                              "--max-seconds", "8", "--no-eval", "--seed", "0"]
    assert exact_cmd[len(league_cmd):] == ["--output", "selected"]  # the game tree chooses only when asked to
    assert baseline_cmd[len(league_cmd):] == list(league_suite.SELF_PLAY_BASELINE_FLAGS)
    row = rows[0]
    assert [(p["fraction"], p["snapshot"]) for p in row["points"]] == [(0.25, "main:000001"), (0.5, "main:000002")]
    snapshot = api.load_snapshot(row["run_dir"], "main:000002")
    assert row["points"][1].get("error") is None, row["points"][1]
    assert row["points"][1]["score"]["exploitability"] == pytest.approx(openspiel_eval.exploitability(KUHN, snapshot))
    assert row["final"]["output"] == "load_trained"
    assert (row["env_steps"], row["learner_steps"]) == (12345, 67)
    table = open(os.path.join(out, league_suite.TABLE_FILE)).read()
    assert "| 25% (snapshot) | 50% (snapshot) | final output | env steps | learner updates | output choice s |" in table
    assert "| openspiel:kuhn_poker | recipe | 0 |" in table and "| openspiel:kuhn_poker | self-play | 0 |" in table
    assert "| 12,345 | 67 |" in table and "(at 2 s) | " in table  # 25% of 8 s: the snapshot at 1.5 s
    # every row was written as it finished; a rerun skips them and trains nothing
    assert len(league_suite.read_rows(out)) == 3
    again = league_suite.run_suite(["openspiel:kuhn_poker"], SECONDS, 1, out, [0.25, 0.5],
                                   output_score.BoardBudget(), fake_train(calls))
    assert len(again) == 3 and len(calls) == 3


def test_a_mixture_output_is_scored_as_the_mixture(tmp_path, monkeypatch):
    calls = []
    fake_train(calls)(["x"], str(tmp_path / "run"), SECONDS)
    run_dir = str(tmp_path / "run")
    members = [api.load_snapshot(run_dir, "main:000001"), api.load_snapshot(run_dir, "main:000002")]
    monkeypatch.setattr(api, "load_trained", lambda path, seed=0: api.PolicyMixture(members, [0.5, 0.5]), raising=False)
    row = league_suite.score_run(run_dir, "openspiel:kuhn_poker", SECONDS, [], output_score.BoardBudget())
    assert row["final"]["output"] == "load_trained"
    expected = openspiel_eval.mixture_exploitability(KUHN, members, [0.5, 0.5])
    assert row["final"]["score"]["exploitability"] == pytest.approx(expected)


def test_a_run_that_left_nothing_gets_a_row_of_n_a(tmp_path):
    out = str(tmp_path / "R")
    rows = league_suite.run_suite(["openspiel:kuhn_poker"], SECONDS, 1, out, [0.5], output_score.BoardBudget(),
                                  lambda command, run_dir, seconds: 1)
    assert [r["returncode"] for r in rows] == [1, 1, 1]
    assert rows[0]["points"][0]["score"] is None and rows[0]["final"]["score"] is None
    line = league_suite.markdown_table(rows, [0.5]).splitlines()[2]
    assert line == "| openspiel:kuhn_poker | recipe | 0 | n/a | n/a | n/a | n/a | - |"


def test_each_output_gets_a_best_response_and_each_game_one_for_the_uniform_policy(tmp_path):
    """The suite's best responses are faked here (`exploit_fn`); tests/test_exploit.py runs the real command."""
    calls, responses = [], []

    def fake_exploit(run_dir, seconds, source=None):
        responses.append((os.path.basename(run_dir), seconds, source))
        return dict(value=0.25 if source else 0.05, ci95=0.01, games=1000, still_rising=source is None, seconds=seconds)

    out = str(tmp_path / "R")
    rows = league_suite.run_suite(["openspiel:kuhn_poker"], SECONDS, 2, out, [0.5], output_score.BoardBudget(),
                                  fake_train(calls), methods={"recipe": ()}, exploit_seconds=30.0,
                                  exploit_uniform=True, exploit_fn=fake_exploit)
    # every run's output, then the game's uniform policy once, in the first run's directory
    assert responses == [("openspiel_kuhn_poker-recipe-0", 30.0, None), ("openspiel_kuhn_poker-recipe-0", 30.0, "uniform"),
                         ("openspiel_kuhn_poker-recipe-1", 30.0, None)]
    assert [(r["method"], r["run"]) for r in rows] == [("recipe", 0), ("uniform", 0), ("recipe", 1)]
    table = league_suite.markdown_table(rows, [0.5], 30.0).splitlines()
    assert "| final output | best response (30 s) |" in table[0]
    assert "| 0.0500 +- 0.0100 rising |" in table[2] and "| uniform | 0 | n/a | n/a | 0.2500 +- 0.0100 |" in table[3]
    # a rerun reads every row back and measures nothing again
    again = league_suite.run_suite(["openspiel:kuhn_poker"], SECONDS, 2, out, [0.5], output_score.BoardBudget(),
                                   fake_train(calls), methods={"recipe": ()}, exploit_seconds=30.0,
                                   exploit_uniform=True, exploit_fn=fake_exploit)
    assert len(again) == 3 and len(responses) == 3
    assert league_suite.exploit_cell(dict(error="no estimate")) == "error" and league_suite.exploit_cell(None) == "n/a"


def test_each_output_is_chosen_by_best_responses_before_its_own_response_and_the_choice_is_scored(tmp_path):
    """The suite's choice is faked here (`choose_fn`); the next test scores a real choice file."""
    calls, order = [], []

    def fake_choose(run_dir, game, seconds, budget):
        order.append(("choose", os.path.basename(run_dir), seconds))
        return dict(chosen="average_policy", previous="param_average", score={"exploitability": 0.0423})

    def fake_exploit(run_dir, seconds, source=None):
        order.append(("exploit", os.path.basename(run_dir), seconds))
        return dict(value=0.04, ci95=0.01, games=1000, still_rising=False, seconds=seconds)

    out = str(tmp_path / "R")
    rows = league_suite.run_suite(["openspiel:kuhn_poker"], SECONDS, 1, out, [0.5], output_score.BoardBudget(),
                                  fake_train(calls), methods={"recipe": ()}, exploit_seconds=30.0,
                                  exploit_fn=fake_exploit, choose_seconds=20.0, choose_fn=fake_choose)
    assert order == [("choose", "openspiel_kuhn_poker-recipe-0", 20.0), ("exploit", "openspiel_kuhn_poker-recipe-0", 30.0)]
    table = league_suite.markdown_table(rows, [0.5], 30.0, 20.0).splitlines()
    assert "| final output | chosen by best responses (20 s each) | best response (30 s) |" in table[0]
    assert "| 0.0423 (average_policy) | 0.0400 +- 0.0100 |" in table[2]
    assert league_suite.choice_cell(dict(error="no choice")) == "error" and league_suite.choice_cell(None) == "n/a"


def test_a_choice_the_command_recorded_is_read_back_and_the_chosen_output_scored_exactly(tmp_path, monkeypatch):
    from seedleague import output
    from seedleague.eval import exploit_choice

    run_dir = str(tmp_path / "run")
    fake_train([])(["train"], run_dir, SECONDS)
    output.record(run_dir, output.OutputConfig("param_average"))
    commands = []

    def fake_command(command, stdout, stderr):  # stands in for `seedleague exploit --choose` (tests/test_exploit.py)
        commands.append(command)
        measured = [exploit_choice.Measured("param_average", 0.3, 0.01, False, ""),
                    exploit_choice.Measured("average_policy", 0.1, 0.01, False, "")]
        exploit_choice.write(run_dir, measured, exploit_choice.choose(measured, "param_average"), 20.0)
        return 0

    monkeypatch.setattr(league_suite.subprocess, "call", fake_command)
    found = league_suite.choose_run(run_dir, "openspiel:kuhn_poker", 20.0, output_score.BoardBudget())
    command = commands[0]
    assert command[command.index("exploit"):] == ["exploit", "--run-dir", run_dir, "--choose", "--max-seconds", "20",
                                                  "--out", os.path.join(run_dir, "exploit", "suite-choice")]
    assert found["chosen"] == "average_policy" and found["previous"] == "param_average"
    mixture = api.load_trained(run_dir)
    expected = openspiel_eval.mixture_exploitability(KUHN, mixture.members, mixture.weights, reference=True)
    assert found["score"]["exploitability"] == pytest.approx(expected)
    monkeypatch.setattr(league_suite.subprocess, "call", lambda command, stdout, stderr: 1)
    os.remove(os.path.join(run_dir, exploit_choice.FILE))
    assert league_suite.choose_run(run_dir, "openspiel:kuhn_poker", 20.0, output_score.BoardBudget())["error"] \
        .startswith("no choice (exit 1)")


def test_a_game_too_large_for_an_exact_score_gets_cells_that_say_why(tmp_path):
    from seedleague.games.openspiel import load_game

    game = load_game("phantom_ttt")
    problem = league_suite.exact_score_problem(game, "openspiel:phantom_ttt")
    assert problem.startswith("no exact score: its game tree has")
    assert league_suite.exact_score_problem(load_game("kuhn_poker"), "openspiel:kuhn_poker") == ""
    assert league_suite.exact_score_problem(load_game("connect_four"), "openspiel:connect_four") == ""  # by games


def test_exploit_uniform_without_a_best_response_budget_is_refused(capsys):
    with pytest.raises(SystemExit):
        league_suite.main(["--games", "openspiel:kuhn_poker", "--out", "unused", "--exploit-uniform"])
    assert "--exploit-uniform needs --exploit-seconds > 0" in capsys.readouterr().err


def test_board_scores_split_a_mixtures_games_by_weight():
    assert output_score._shares([0.5, 0.3, 0.2], 10) == [5, 3, 2]
    assert sum(output_score._shares([1 / 3] * 3, 10)) == 10
    assert output_score.format_score(None) == "n/a"
    board = dict(vs_random=dict(games=4, wins=3, draws=0, losses=1), vs_mcts=dict(games=2, wins=0, draws=1, losses=1),
                 mcts_simulations=100)
    assert output_score.format_score(board) == "random 3/0/1, mcts100 0/1/1"
    board["vs_mcts_greedy"] = dict(games=2, wins=2, draws=0, losses=0)
    assert output_score.format_score(board) == "random 3/0/1, mcts100 0/1/1 (greedy 2/0/0)"


def test_a_game_without_an_information_state_tensor_is_scored_by_exact_exploitability(tmp_path):
    # its observation (tensor, seat planes and the move number) differs, the information states do not
    from open_spiel.python import policy as openspiel_policy
    from open_spiel.python.algorithms import exploitability

    from seedleague.games.openspiel import load_game

    oshi = load_game("turn_based_simultaneous_game(game=oshi_zumo(coins=3,size=1,horizon=3))")
    assert not oshi.get_type().provides_information_state_tensor
    assert output_score.game_kind(oshi) == output_score.EXPLOITABILITY
    save_checkpoint(tmp_path, env_of(oshi), step=1, uniform=True)
    scored = output_score.score(oshi, api.load_policy(str(tmp_path)))
    expected = exploitability.exploitability(oshi, openspiel_policy.UniformRandomPolicy(oshi))
    assert expected > 0.1
    assert scored[output_score.EXPLOITABILITY] == pytest.approx(expected, abs=1e-6)


def test_a_board_game_is_scored_against_random_and_mcts(tmp_path):
    from seedleague.games.openspiel import load_game

    ttt = load_game("tic_tac_toe")
    assert output_score.game_kind(ttt) == output_score.BOARD and output_score.game_kind(KUHN) == output_score.EXPLOITABILITY
    save_checkpoint(tmp_path, env_of(ttt), step=1, uniform=True)
    policy = api.load_policy(str(tmp_path))
    mixture = api.PolicyMixture([policy, policy], [0.75, 0.25])
    result = output_score.score(ttt, mixture, output_score.BoardBudget(games=4, mcts_games=2, mcts_simulations=2))
    assert result["vs_random"]["games"] == 4 and result["vs_mcts"]["games"] == 2
    assert sum(result["vs_random"][k] for k in ("wins", "draws", "losses")) == 4
    assert output_score.format_score(result).startswith("random ")
    # greedily too: the members' most probable legal moves, the games split by weight as when sampling
    greedy = board_lib.vs_mcts(ttt, policy, games=2, simulations=2, greedy=True, seed=0)
    wdl = lambda c: (c["games"], c["wins"], c["draws"], c["losses"])
    assert wdl(result["vs_mcts_greedy"]) == (greedy.games, greedy.wins, greedy.draws, greedy.losses)


def test_candidate_methods_are_parsed_and_bad_ones_refused():
    methods = league_suite.parse_methods(["recipe"], ["lowlr=--learner.learning_rate 1e-4"])
    assert methods == {"recipe": (), "lowlr": ("--learner.learning_rate", "1e-4")}
    assert league_suite.train_command("g", "/r/g-lowlr-2", 5, "lowlr", methods)[-4:] == [
        "--seed", "2", "--learner.learning_rate", "1e-4"]
    with pytest.raises(ValueError, match="unknown method"):
        league_suite.parse_methods(["nope"], [])
    with pytest.raises(ValueError, match="NAME="):
        league_suite.parse_methods(["recipe"], ["recipe=--x 1"])
    # A candidate alone (an empty --methods), but not nothing at all.
    assert league_suite.parse_methods([], ["lowlr=--x 1"]) == {"lowlr": ("--x", "1")}
    with pytest.raises(ValueError, match="nothing to run"):
        league_suite.parse_methods([], [])


def test_parallel_runs_train_at_once_and_their_rows_keep_the_job_order(tmp_path):
    """Two runs at once: the second starts before the first ends (each waits for the other to start),
    both get an environment that keeps JAX from preallocating a GPU, and the rows come in job order."""
    import threading

    started = threading.Barrier(2, timeout=60)
    calls, envs = [], []
    train = fake_train(calls)

    def train_together(command, run_dir, seconds, env=None):
        envs.append(env)
        started.wait()  # raises BrokenBarrierError if the other run never starts while this one trains
        return train(command, run_dir, seconds)

    out = str(tmp_path / "R")
    two = {name: league_suite.METHODS[name] for name in ("recipe", "self-play")}
    rows = league_suite.run_suite(["openspiel:kuhn_poker"], SECONDS, 1, out, [0.5], output_score.BoardBudget(),
                                  train_together, methods=two, parallel=2)
    assert [r["method"] for r in rows] == ["recipe", "self-play"] and len(calls) == 2
    assert all(env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false" for env in envs)
    assert [r["method"] for r in league_suite.read_rows(out)] == ["recipe", "self-play"]


def test_the_command_falls_back_to_the_module_where_no_entry_point_is_installed(tmp_path, monkeypatch):
    monkeypatch.setattr(league_suite.sys, "executable", str(tmp_path / "python3"))
    assert league_suite.seedleague_command() == [str(tmp_path / "python3"), "-m", "seedleague.cli"]
    (tmp_path / "seedleague").write_text("#!/bin/sh\n")
    assert league_suite.seedleague_command() == [str(tmp_path / "seedleague")]


def test_parallel_below_one_is_refused(capsys):
    with pytest.raises(SystemExit):
        league_suite.main(["--games", "openspiel:kuhn_poker", "--out", "R", "--parallel", "0"])
    assert "--parallel >= 1" in capsys.readouterr().err


def test_the_output_choice_time_is_read_from_the_run_and_shown(tmp_path):
    from seedleague.eval import output_selection

    run_dir = str(tmp_path)
    assert league_suite.read_choice_seconds(run_dir) is None  # no choice made (another output, unmeasurable game)
    with open(os.path.join(run_dir, output_selection.FILE), "w") as f:
        f.write('{"name": "final", "seconds": 18.34}')
    assert league_suite.read_choice_seconds(run_dir) == 18.34
    row = dict(game="g", method="recipe", run=0, points=[], final=dict(score=None), env_steps=1, learner_steps=2,
               choice_s=18.34)
    assert league_suite.markdown_table([row], []).splitlines()[2].endswith("| 1 | 2 | 18 |")
    with open(os.path.join(run_dir, output_selection.FILE), "w") as f:
        f.write("{truncated")
    assert league_suite.read_choice_seconds(run_dir) is None
