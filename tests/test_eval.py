"""seedleague.eval: exact exploitability (single policies and league mixtures), matches, `seedleague eval`."""

import dataclasses
import json

import numpy as np
import pytest
from open_spiel.python import policy as openspiel_policy
from open_spiel.python.algorithms import exploitability as openspiel_exploitability
from open_spiel.python.algorithms import policy_aggregator

from seedleague.games.openspiel import encode, legal_mask, load_game, observation_shape
from seedleague import cli
from seedleague.api import PolicySpec, load_average_policy, load_policy
from seedleague.eval import board, openspiel_eval
from seedleague.eval import cli as eval_cli
from seedleague.eval.eval_config import QUICK, EvalConfig
from seedleague.eval.tree_size import tree_too_large
from seedleague.rl.learner_config import LearnerConfig
from test_api import head_params, save_checkpoint

KUHN = load_game("kuhn_poker")


def env_of(game):
    return (f"openspiel:{game.get_type().short_name}", observation_shape(game), game.num_distinct_actions())


class PurePolicy:
    """A deterministic Kuhn policy by how many actions were taken so far (the infostate's last 6 bits):
    `first` when nobody has acted, else `then`."""

    spec = PolicySpec("openspiel:kuhn_poker", (11,), np.float32, 2)
    source = "pure"

    def __init__(self, first: int, then: int):
        self.first, self.then = first, then

    def action_probabilities(self, observation, legal_mask=None):
        acted = np.asarray(observation)[:, 5:].sum(axis=-1)
        action = np.where(acted == 0, self.first, self.then)
        return np.eye(2, dtype=np.float32)[action]


class CountingPolicy:
    """Wraps a policy and counts its forward passes."""

    def __init__(self, policy):
        self.policy, self.spec, self.calls = policy, policy.spec, 0

    def action_probabilities(self, observation, legal_mask=None):
        self.calls += 1
        return self.policy.action_probabilities(observation, legal_mask)


@pytest.fixture(scope="module")
def uniform_kuhn(tmp_path_factory):
    directory = tmp_path_factory.mktemp("kuhn")
    save_checkpoint(directory, env_of(KUHN), step=3, uniform=True)
    return load_policy(str(directory))


@pytest.mark.parametrize("name, anchor", [("kuhn_poker", 0.458), ("leduc_poker", 2.374)])
def test_uniform_policies_have_the_reference_exploitability(tmp_path, name, anchor):
    game = load_game(name)
    save_checkpoint(tmp_path, env_of(game), uniform=True)  # zero policy head: logits exactly 0
    value = openspiel_eval.exploitability(game, load_policy(str(tmp_path)))
    assert value == pytest.approx(openspiel_exploitability.exploitability(game, openspiel_policy.UniformRandomPolicy(game)), abs=1e-9)
    assert value == pytest.approx(anchor, abs=5e-4)


def test_tabular_policy_is_one_forward_pass_over_every_infostate(tmp_path):
    save_checkpoint(tmp_path, env_of(KUHN), seed=5, bias=[0.3, -0.4])
    policy = CountingPolicy(load_policy(str(tmp_path)))
    tabular = openspiel_eval.tabular_policy(KUHN, policy)
    assert policy.calls == 1 and len(tabular.states) == 12  # Kuhn: 6 infostates per player
    table = tabular.action_probability_array
    np.testing.assert_allclose(table.sum(axis=-1), 1.0)
    for state in tabular.states[::3]:
        player = state.current_player()
        expected = policy.policy.action_probabilities(encode(state, player), legal_mask(state, player, 2))
        np.testing.assert_allclose(table[tabular.state_index(state)], expected, rtol=1e-6)


def test_the_mixture_is_reach_weighted_not_the_average_of_action_probabilities():
    """A = pass first, then bet; B = bet first, then pass. Player 0's infostates after pass-bet are
    reached only by A, so the 50/50 mixture calls there with probability 1 (the naive average: 0.5)."""
    a, b = PurePolicy(first=0, then=1), PurePolicy(first=1, then=0)
    mixed = openspiel_eval.mixture_policy(KUHN, [a, b], [0.5, 0.5])
    after_pass_bet = [k for k in mixed.state_lookup if k.endswith("pb")]
    assert len(after_pass_bet) == 3
    for key in after_pass_bet:
        np.testing.assert_allclose(mixed.policy_for_key(key), [0.0, 1.0])
    for key in [k for k in mixed.state_lookup if len(k) == 1]:  # player 0's first move: truly 50/50
        np.testing.assert_allclose(mixed.policy_for_key(key), [0.5, 0.5])

    naive = openspiel_policy.TabularPolicy(KUHN)
    naive.action_probability_array[:] = 0.5 * (openspiel_eval.tabular_policy(KUHN, a).action_probability_array
                                               + openspiel_eval.tabular_policy(KUHN, b).action_probability_array)
    exact = openspiel_eval.mixture_exploitability(KUHN, [a, b], [0.5, 0.5])
    assert exact != pytest.approx(openspiel_exploitability.exploitability(KUHN, naive), abs=1e-3)
    tables = [openspiel_eval.tabular_policy(KUHN, p) for p in (a, b)]
    aggregated = policy_aggregator.PolicyAggregator(KUHN).aggregate([0, 1], [tables, tables], [[0.5, 0.5]] * 2)
    assert exact == pytest.approx(openspiel_exploitability.exploitability(KUHN, aggregated), abs=1e-9)
    # a mixture with all weight on one policy is that policy
    assert openspiel_eval.mixture_exploitability(KUHN, [a, b], [0, 3]) == pytest.approx(openspiel_eval.exploitability(KUHN, b))


def test_policy_tables_score_any_subset_as_its_own_mixture_would():
    """PolicyTables computes the tables once; a mixture of a subset of members equals the mixture
    built from those policies alone, and scoring does not modify the tables."""
    pure = [PurePolicy(0, 1), PurePolicy(1, 0), PurePolicy(1, 1)]
    tables = openspiel_eval.PolicyTables(KUHN, pure)
    before = tables.probs.copy()
    assert tables.exploitability([1.0, 3.0], [0, 2]) == pytest.approx(
        openspiel_eval.mixture_exploitability(KUHN, [pure[0], pure[2]], [1.0, 3.0]), abs=1e-12)
    assert tables.exploitability([1.0], [1]) == pytest.approx(openspiel_eval.exploitability(KUHN, pure[1]), abs=1e-12)
    assert tables.exploitability([1.0, 1.0, 1.0]) == pytest.approx(
        openspiel_eval.mixture_exploitability(KUHN, pure, [1, 1, 1]), abs=1e-12)
    np.testing.assert_array_equal(tables.probs, before)
    with pytest.raises(ValueError, match="one weight per policy"):
        tables.exploitability([1.0], [0, 1])
    with pytest.raises(ValueError, match="at least one policy"):
        openspiel_eval.PolicyTables(KUHN, [])


def test_mix_behaviour_by_hand():
    probs = np.array([[[1.0, 0.0], [0.2, 0.8]], [[0.0, 1.0], [0.6, 0.4]]])  # [K=2, S=2, A=2]
    reach = np.array([[1.0, 0.5], [1.0, 0.0]])  # policy 1 never reaches state 1
    mixed = openspiel_eval.mix_behaviour(probs, reach, np.array([0.25, 0.75]))
    np.testing.assert_allclose(mixed, [[0.25, 0.75], [0.2, 0.8]])
    unreached = openspiel_eval.mix_behaviour(probs, np.zeros((2, 2)), np.array([0.25, 0.75]))
    np.testing.assert_allclose(unreached[1], [0.5, 0.5])  # the plain weighted average
    with pytest.raises(ValueError, match="needs reach"):
        openspiel_eval.mix_behaviour(probs, reach[:, :1], np.array([0.5, 0.5]))


def test_bad_mixtures_and_mismatched_games_are_refused(uniform_kuhn):
    with pytest.raises(ValueError, match="one weight per policy"):
        openspiel_eval.mixture_exploitability(KUHN, [uniform_kuhn], [0.5, 0.5])
    with pytest.raises(ValueError, match="not all 0"):
        openspiel_eval.mixture_exploitability(KUHN, [uniform_kuhn, uniform_kuhn], [-1, 1])
    with pytest.raises(ValueError, match="does not fit leduc_poker"):
        openspiel_eval.exploitability(load_game("leduc_poker"), uniform_kuhn)
    with pytest.raises(ValueError, match="does not fit tic_tac_toe"):
        board.vs_random("tic_tac_toe", uniform_kuhn, 2)


@pytest.fixture(scope="module")
def first_legal_ttt(tmp_path_factory):
    """A tic_tac_toe policy that greedily plays the lowest-numbered empty cell."""
    directory = tmp_path_factory.mktemp("ttt")
    save_checkpoint(directory, env_of(load_game("tic_tac_toe")), bias=-np.arange(9.0))
    return load_policy(str(directory))


def _check_counts(stats, games):
    assert stats.wins + stats.draws + stats.losses == stats.games == games
    assert [s.games for s in stats.per_seat] == [(games + 1) // 2, games // 2]
    for field in ("wins", "draws", "losses"):
        assert sum(getattr(s, field) for s in stats.per_seat) == getattr(stats, field)
    assert stats.win_rate + stats.draw_rate + stats.loss_rate == pytest.approx(1.0)


def test_a_fixed_policy_against_random_on_tic_tac_toe(first_legal_ttt):
    stats = board.vs_random("tic_tac_toe", first_legal_ttt, games=40, greedy=True, seed=3)
    _check_counts(stats, 40)
    # taking cells 0, 1, 2 in order wins the top row against random play most of the time as first mover
    assert stats.per_seat[0].wins > stats.per_seat[0].losses
    assert stats.to_dict()["per_seat"][0]["games"] == 20 and stats.opponent == "random"
    again = board.vs_random("tic_tac_toe", first_legal_ttt, games=40, greedy=True, seed=3)
    assert dataclasses.replace(again, seconds=0.0) == dataclasses.replace(stats, seconds=0.0)  # same seed, same games


def test_mcts_at_a_tiny_simulation_count_runs(first_legal_ttt):
    stats = board.vs_mcts("tic_tac_toe", first_legal_ttt, games=4, simulations=5, seed=1)
    _check_counts(stats, 4)
    assert stats.opponent == "mcts5" and stats.games_per_s > 0
    with pytest.raises(ValueError, match="simulations >= 1"):
        board.vs_mcts("tic_tac_toe", first_legal_ttt, games=2, simulations=0)


def test_a_match_with_a_time_bound_plays_waves_of_one_game_per_seat_until_its_seconds_pass(first_legal_ttt):
    """The end of a run on chess or hive spent minutes against MCTS; a bounded match begins no wave once its seconds
    have passed, and always plays the first."""
    first = board.vs_mcts("tic_tac_toe", first_legal_ttt, games=10, simulations=5, seed=1, max_seconds=1e-9)
    _check_counts(first, board.WAVE)  # compiling alone outlasts a nanosecond: one game from each seat
    _check_counts(board.vs_random("tic_tac_toe", first_legal_ttt, games=5, seed=1, max_seconds=1e6), 5)
    with pytest.raises(ValueError, match="--match-seconds must be > 0"):
        EvalConfig(match_seconds=0.0)


def test_eval_match_seconds_bounds_each_match_from_the_command_line(tmp_path, capsys):
    run = tmp_path / "ttt"
    save_checkpoint(run / "checkpoints", env_of(load_game("tic_tac_toe")))
    assert cli.main(["eval", "--run-dir", str(run), "--match-seconds", "0"]) == 2
    assert "--match-seconds must be > 0" in capsys.readouterr().err
    out = tmp_path / "eval.json"
    assert cli.main(["eval", "--run-dir", str(run), "--games", "40", "--mcts-sims", "5", "--match-seconds", "1e-9",
                     "--json", str(out)]) == 0
    results = json.loads(out.read_text())["results"]  # its first wave only: a game from each seat
    assert results["vs_random"]["games"] == results["vs_mcts"]["5"]["games"] == board.WAVE, results


def test_head_to_head_in_poker_counts_every_game(uniform_kuhn, tmp_path):
    save_checkpoint(tmp_path, env_of(KUHN), seed=9, bias=[2.0, -2.0])
    other = load_policy(str(tmp_path))
    stats = board.head_to_head(KUHN, uniform_kuhn, other, games=31, seed=2)
    _check_counts(stats, 31)
    assert stats.draws == 0  # someone wins every Kuhn hand
    assert stats.opponent == other.source


def _kuhn_run(tmp_path):
    run = tmp_path / "run"
    save_checkpoint(run / "checkpoints", env_of(KUHN), step=8, uniform=True)
    save_checkpoint(run / "pool" / "main", env_of(KUHN), step=1, seed=1, bias=[3.0, -3.0])
    save_checkpoint(run / "pool" / "main", env_of(KUHN), step=2, seed=2, bias=[-3.0, 3.0])
    return run


def test_eval_cli_on_poker_reports_exploitability_mixture_and_head_to_head(tmp_path, capsys):
    run = _kuhn_run(tmp_path)
    out = tmp_path / "out" / "eval.json"
    code = cli.main(["eval", "--run-dir", str(run), "--mixture", "main:000001=0.5,main:000002=0.5",
                     "--vs", "main:000001", "--games", "20", "--json", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "exploitability          0.458333" in printed and "mixture exploitability" in printed
    history = [json.loads(line) for line in open(run / "eval" / "history.jsonl")]
    assert len(history) == 1 and history[0] == json.load(open(out))
    entry = history[0]
    assert entry["step"] == 8 and entry["env_steps"] == 800 and entry["wall_s"] == 12.0
    results = entry["results"]
    assert results["exploitability"] == pytest.approx(0.4583333, abs=1e-6)
    assert results["mixture"] == {"main:000001": 0.5, "main:000002": 0.5} and results["mixture_exploitability"] > 0
    assert results["head_to_head"]["games"] == 20 and results["head_to_head"]["opponent"] == "main:000001"
    # a snapshot evaluated alone appends a second line
    assert cli.main(["eval", "--run-dir", str(run), "--snapshot", "main:000002"]) == 0
    assert len(open(run / "eval" / "history.jsonl").readlines()) == 2


def test_eval_cli_average_is_the_uniform_mixture_of_the_newest_snapshots(tmp_path, capsys):
    run = _kuhn_run(tmp_path)
    assert cli.main(["eval", "--run-dir", str(run), "--average", "1", "--mixture", "main:000001=1,main:000002=1"]) == 0
    assert cli.main(["eval", "--run-dir", str(run), "--average", "0.5", "--snapshot", "main:000002"]) == 0
    assert "average policy" in capsys.readouterr().out
    both, newest = (json.loads(line)["results"] for line in open(run / "eval" / "history.jsonl"))
    assert both["average_snapshots"] == ["main:000001", "main:000002", 2]
    assert both["average_exploitability"] == pytest.approx(both["mixture_exploitability"], abs=1e-12)
    assert newest["average_snapshots"] == ["main:000002", "main:000002", 1]
    assert newest["average_exploitability"] == pytest.approx(newest["exploitability"], abs=1e-12)
    assert both["average_exploitability"] != pytest.approx(newest["average_exploitability"], abs=1e-3)
    for bad in ("0", "1.5", "-0.2"):
        assert cli.main(["eval", "--run-dir", str(run), "--average", bad]) == 2
        assert f"--average must be a fraction of the snapshots in (0, 1], got {float(bad)}" in capsys.readouterr().err
    assert len(open(run / "eval" / "history.jsonl").readlines()) == 2


def test_eval_cli_on_a_board_game_plays_random_and_each_mcts(tmp_path, capsys):
    run = tmp_path / "run"
    save_checkpoint(run / "checkpoints", env_of(load_game("tic_tac_toe")), step=4, bias=-np.arange(9.0))
    code = cli.main(["eval", "--run-dir", str(run), "--games", "6", "--mcts-sims", "2,3", "--mcts-games", "2",
                     "--greedy", "--vs", str(run)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "vs random" in printed and "vs mcts 3 sims" in printed
    results = json.loads(open(run / "eval" / "history.jsonl").readline())["results"]
    assert results["information"] == "perfect" and "exploitability" not in results
    assert results["vs_random"]["games"] == 6 and sorted(results["vs_mcts"]) == ["2", "3"]
    assert results["vs_mcts"]["2"]["games"] == 2 and results["head_to_head"]["games"] == 6


def test_eval_cli_refuses_what_it_cannot_evaluate(tmp_path, capsys):
    save_checkpoint(tmp_path / "cartpole" / "checkpoints", ("CartPole-v1", (4,), 2))
    assert cli.main(["eval", "--run-dir", str(tmp_path / "cartpole")]) == 2
    assert "'CartPole-v1' is not an OpenSpiel game" in capsys.readouterr().err
    assert cli.main(["eval", "--run-dir", str(tmp_path / "missing")]) == 2
    assert "no such directory" in capsys.readouterr().err
    assert cli.main(["eval", "--run-dir", str(tmp_path / "cartpole"), "--mixture", "main:1"]) == 2
    assert "KEY=WEIGHT" in capsys.readouterr().err
    assert not (tmp_path / "cartpole" / "eval").exists()


def test_a_checkpoint_with_a_param_average_has_it_scored_beside_the_policy(tmp_path, capsys):
    run = tmp_path / "run"
    averaging = LearnerConfig(average_from=2)
    state = save_checkpoint(run / "checkpoints", env_of(KUHN), step=8, uniform=True, learner=averaging)
    save_checkpoint(run / "checkpoints", env_of(KUHN), step=9, uniform=True, learner=averaging,
                    average=(head_params(state.params, 0.0, [3.0, -3.0]), 7))
    entry = eval_cli.evaluate_run(str(run), quick=True)
    results = entry["results"]
    assert results["param_average"] == {"from": 2, "count": 7}
    assert results["param_average_exploitability"] == pytest.approx(
        openspiel_eval.exploitability(KUHN, load_policy(str(run), average=True)), abs=1e-12)
    assert results["param_average_exploitability"] != pytest.approx(results["exploitability"], abs=1e-3)
    assert "param average" in capsys.readouterr().out
    assert cli.main(["eval", "--run-dir", str(run), "--step", "8"]) == 0  # nothing averaged at step 8: no row
    assert "param average" not in capsys.readouterr().out


def test_the_end_of_run_mixes_the_average_policy_with_the_param_average_half_and_half(tmp_path, capsys):
    """Snapshots that bet (1) and check (2), a param average that checks: the window is the newest
    third's uniform mixture (`--average`), and the even mixture gives the param average half the games."""
    run = _kuhn_run(tmp_path)
    for step, bias in ((3, [0.5, -0.5]), (4, [-1.0, 2.0]), (5, [2.0, 1.0])):
        save_checkpoint(run / "pool" / "main", env_of(KUHN), step=step, seed=step, bias=bias)
    averaging = LearnerConfig(average_from=2)
    state = save_checkpoint(run / "checkpoints", env_of(KUHN), step=9, uniform=True, learner=averaging)
    save_checkpoint(run / "checkpoints", env_of(KUHN), step=10, uniform=True, learner=averaging,
                    average=(head_params(state.params, 0.0, [-2.0, 2.0]), 7))
    results = eval_cli.evaluate_run(str(run), quick=True)["results"]
    assert "average + param average" in capsys.readouterr().out
    window = [load_policy(str(run / "pool" / "main"), step) for step in (4, 5)]  # the newest third of five
    params = load_policy(str(run), average=True)
    assert results["average_snapshots"] == ["main:000004", "main:000005", 2]
    combined = results["average_and_params_exploitability"]
    assert combined == pytest.approx(openspiel_eval.mixture_exploitability(KUHN, window + [params], [0.25, 0.25, 0.5]),
                                     abs=1e-12)
    parts = (results["average_exploitability"], results["param_average_exploitability"])
    assert all(abs(combined - part) > 1e-4 for part in parts)  # a real mixture, not one of its parts
    assert combined <= sum(parts) / 2 + 1e-9  # exploitability is convex in a mixture
    played = load_average_policy(str(run))  # the same strategy, from the API, to play one member per game
    assert openspiel_eval.mixture_exploitability(KUHN, played.members, played.weights) == pytest.approx(combined, abs=1e-12)
    # without a param average in the checkpoint there is nothing to mix: no such row
    assert "average_and_params_exploitability" not in eval_cli.evaluate_run(str(_kuhn_run(tmp_path / "b")))["results"]


def test_the_snapshot_curve_scores_each_snapshot_its_window_and_its_param_average(tmp_path):
    from seedleague.eval.curve import as_eval_history, snapshot_curve

    run = _kuhn_run(tmp_path)  # snapshots 1 and 2: no param average
    averaging = LearnerConfig(average_from=2)
    save_checkpoint(run / "pool" / "main", env_of(KUHN), step=3, seed=3, learner=averaging,
                            average=(head_params(save_checkpoint(tmp_path / "x", env_of(KUHN)).params, 0.0, [1.0, -1.0]), 2))
    rows = snapshot_curve(str(run), "main", window=2)
    assert [r["key"] for r in rows] == ["main:000001", "main:000002", "main:000003"]
    assert [r["param_average"] is None for r in rows] == [True, True, False]
    pool_main = str(run / "pool" / "main")
    assert rows[2]["param_average"] == pytest.approx(
        openspiel_eval.exploitability(KUHN, load_policy(pool_main, 3, average=True)), abs=1e-12)
    assert rows[2]["exploitability"] == pytest.approx(openspiel_eval.exploitability(KUHN, load_policy(pool_main, 3)))
    assert rows[0]["window_mixture"] == pytest.approx(rows[0]["exploitability"], abs=1e-12)  # a window of one
    history = as_eval_history(rows)
    assert history[2]["results"]["param_average_exploitability"] == rows[2]["param_average"]


def test_evaluate_run_after_training_prints_and_never_fails(tmp_path, capsys):
    run = _kuhn_run(tmp_path)
    entry = eval_cli.evaluate_run(str(run), quick=True)
    assert entry["results"]["exploitability"] == pytest.approx(0.4583333, abs=1e-6)
    assert entry["results"]["average_snapshots"] == ["main:000002", "main:000002", 1]  # the newest third of 2
    assert "exploitability" in capsys.readouterr().out
    save_checkpoint(tmp_path / "cartpole" / "checkpoints", ("CartPole-v1", (4,), 2))
    assert eval_cli.evaluate_run(str(tmp_path / "cartpole"), quick=True) is None
    assert "no evaluation: 'CartPole-v1' is not an OpenSpiel game" in capsys.readouterr().out


def test_the_end_of_a_run_does_not_walk_a_tree_too_large_for_memory_and_plays_random_instead(tmp_path, capsys):
    """phantom_ttt's tree (over 1e8 histories by Knuth's estimate) took all 24 GB of a machine's memory and the run
    was killed with nothing printed; the end of a run says why it is not measured exactly and what measures it, and
    scores the network against uniform random (not against MCTS, which would search the state its players cannot
    see)."""
    phantom = load_game("phantom_ttt")
    save_checkpoint(tmp_path / "phantom" / "checkpoints", env_of(phantom), uniform=True)
    entry = eval_cli.evaluate_run(str(tmp_path / "phantom"), quick=True)
    out = capsys.readouterr().out
    assert "exploitability: openspiel:phantom_ttt's exploitability is not computed exactly: its game tree has" in out
    assert f"seedleague exploit --run-dir {tmp_path / 'phantom'}" in out
    results = entry["results"]
    assert results["vs_random"]["games"] == QUICK.games and "vs random" in out
    assert not {"exploitability", "vs_mcts", "average_exploitability", "nash_mixture_exploitability"} & set(results)
    assert tree_too_large("openspiel:kuhn_poker") == "" and tree_too_large("CartPole-v1") == ""
