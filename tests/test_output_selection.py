"""The `selected` output (seedleague.eval.output_selection): the least exploitable of a run's final
params, param average, snapshots' meta-game Nash mixture, their time average and the least exploitable mixture
of all of them, each scored exactly, cached while the run is unchanged, and the param average where exploitability cannot be measured.

Policies here ignore their observation (the policy head's kernel is zero), so each is one Kuhn behaviour
strategy: "pass" (always check/fold, exploitability 1.0), "uniform" (0.458), "bet" (bet/call with
probability 0.88, 0.333) and "pass-ish" (bet with probability 0.12, 0.848)."""

import json
import os

import numpy as np
import pytest

from seedleague import output
from seedleague.api import Policy, PolicyMixture, load_policy, load_trained
from seedleague.eval import least_exploitable, metagame, openspiel_eval, output_selection, tree_size
from seedleague.rl.learner_config import LearnerConfig
from test_api import save_checkpoint

BIAS = {"pass": [9.0, -9.0], "uniform": [0.0, 0.0], "bet": [0.0, 2.0], "pass-ish": [2.0, 0.0]}
KEEPS_AVERAGE = LearnerConfig(average_from=1)


def make_run(tmp_path, final, average=None, snapshots=()):
    """A run directory as a recipe run leaves it: checkpoint 50 (final params, maybe a param average),
    snapshots main:000010, main:000020, ... in the pool, and `selected` recorded as its output."""
    run = tmp_path / "run"
    output.record(str(run), output.OutputConfig("selected"))
    for i, name in enumerate(snapshots):
        save_checkpoint(run / "pool" / "main", step=10 * (i + 1), bias=BIAS[name], uniform=True)
    kept = None
    if average is not None:
        averaged = save_checkpoint(run / "scratch", step=0, bias=BIAS[average], uniform=True, learner=KEEPS_AVERAGE)
        kept = (averaged.params, 7)
    save_checkpoint(run / "checkpoints", step=50, bias=BIAS[final], uniform=True, learner=KEEPS_AVERAGE, average=kept)
    return str(run)


def exploitability(policy_or_mixture):
    if isinstance(policy_or_mixture, PolicyMixture):
        weights = policy_or_mixture.weights if policy_or_mixture.seat_weights is None else policy_or_mixture.seat_weights
        return openspiel_eval.mixture_exploitability("kuhn_poker", policy_or_mixture.members, weights)
    return openspiel_eval.exploitability("kuhn_poker", policy_or_mixture)


def test_the_snapshots_nash_mixture_is_chosen_when_it_is_least_exploitable(tmp_path):
    run = make_run(tmp_path, final="pass", average="uniform", snapshots=("pass", "bet", "pass-ish"))
    resolved = output.resolve(run)
    with open(os.path.join(run, output_selection.FILE)) as f:
        scores = json.load(f)["scores"]
    pool = os.path.join(run, "pool", "main")
    snapshots = [load_policy(pool, step) for step in (10, 20, 30)]
    expected_nash, weights = metagame.nash_mixture_exploitability("kuhn_poker", snapshots)
    assert scores["final"] == pytest.approx(1.0, abs=1e-6)
    assert scores["param_average"] == pytest.approx(exploitability(load_policy(run, average=True)))
    assert scores["param_average"] == pytest.approx(0.4583333, abs=1e-6)
    assert scores["population_nash"] == pytest.approx(expected_nash)
    average = openspiel_eval.mixture_exploitability("kuhn_poker", snapshots + [load_policy(run, average=True)],
                                                    [1 / 6, 1 / 6, 1 / 6, 1 / 2])  # snapshots uniform, average half
    assert scores["population_average"] == pytest.approx(average)
    classic = {name: value for name, value in scores.items() if name != "least_exploitable_mixture"}
    assert min(classic, key=classic.get) == "population_nash"
    # The least exploitable mixture of every network is one LP over all of them; the Nash mixture is one of its
    # feasible mixtures, and here (constant strategies) it is already the best one: a tie goes to the Nash mixture.
    assert scores["least_exploitable_mixture"] == pytest.approx(scores["population_nash"], abs=1e-9)
    assert resolved.source == "selected" and resolved.note.startswith("population_nash, the least")
    trained = load_trained(run)
    kept = [i for i, w in enumerate(weights) if w > 1e-6]
    assert [m.key for m in resolved.members] == [f"main:{10 * (i + 1):06d}" for i in kept]
    assert exploitability(trained) == pytest.approx(expected_nash)  # what load_trained gives is what was scored


def test_the_least_exploitable_mixture_of_every_network_is_served_when_it_beats_the_rest(tmp_path):
    run = tmp_path / "run"
    output.record(str(run), output.OutputConfig("selected"))
    for i in range(5):  # near-pure strategies that depend on the card and the bets, unlike the ones above
        save_checkpoint(run / "pool" / "main", step=10 * (i + 1), seed=i, sharpen=300.0)
    save_checkpoint(run / "checkpoints", step=60, seed=5, sharpen=300.0)  # no param average
    resolved = output.resolve(str(run))
    with open(os.path.join(run, output_selection.FILE)) as f:
        scores = json.load(f)["scores"]
    assert set(scores) == {"final", "population_nash", "population_average", "least_exploitable_mixture"}
    assert scores["least_exploitable_mixture"] < min(v for n, v in scores.items() if n != "least_exploitable_mixture") - 1e-3
    assert resolved.note.startswith("least_exploitable_mixture, the least")
    pool = os.path.join(run, "pool", "main")
    networks = [load_policy(pool, step) for step in (10, 20, 30, 40, 50)] + [load_policy(str(run), 60)]
    value, weights = least_exploitable.least_exploitable_mixture("kuhn_poker", networks)  # [seats, networks]
    keys = ["main:000010", "main:000020", "main:000030", "main:000040", "main:000050", "checkpoint:000060"]
    expected = {k: (weights[0, i], weights[1, i]) for i, k in enumerate(keys) if weights[:, i].max() > 1e-6}
    assert {m.key for m in resolved.members} == set(expected)
    for m in resolved.members:
        assert m.seat_weights == pytest.approx(expected[m.key], abs=1e-6) and m.weight == pytest.approx(np.mean(m.seat_weights))
    trained = load_trained(str(run))
    assert isinstance(trained, PolicyMixture) and trained.seat_weights.shape == (2, len(expected))
    assert resolved.describe()["members"][0]["seat_weights"] == list(resolved.members[0].seat_weights)
    assert exploitability(trained) == pytest.approx(scores["least_exploitable_mixture"]) == pytest.approx(value)


def test_the_meta_game_grows_from_the_newest_snapshots_to_every_snapshot_kept(tmp_path, monkeypatch):
    assert output_selection._windows(3, 3) == [(3, "population_nash")]
    assert output_selection._windows(100, 100) == [(32, "population_nash"), (64, "population_nash_64"),
                                                   (100, "population_nash_all")]
    assert output_selection._windows(512, 900) == [(32, "population_nash"), (64, "population_nash_64"),
                                                   (128, "population_nash_128"), (256, "population_nash_256"),
                                                   (512, "population_nash_512")]  # the newest 512 of 900
    monkeypatch.setattr(output_selection, "POPULATION", 2)
    # The oldest snapshot (uniform) is the only one that is not a pure strategy of the last two.
    run = make_run(tmp_path, final="pass", snapshots=("uniform", "pass", "pass-ish"))
    resolved = output.resolve(run)
    with open(os.path.join(run, output_selection.FILE)) as f:
        scores = json.load(f)["scores"]
    pool = os.path.join(run, "pool", "main")
    snapshots = [load_policy(pool, step) for step in (10, 20, 30)]
    newest_two, _ = metagame.nash_mixture_exploitability("kuhn_poker", snapshots[1:])
    every, _ = metagame.nash_mixture_exploitability("kuhn_poker", snapshots)
    assert scores["population_nash"] == pytest.approx(newest_two)
    assert scores["population_nash_all"] == pytest.approx(every) and every < newest_two
    assert resolved.note.startswith("population_nash_all, the least exploitable")
    assert exploitability(load_trained(run)) == pytest.approx(every)


def test_the_meta_game_holds_no_more_snapshots_than_its_payoffs_fit_in_memory(tmp_path, monkeypatch):
    kuhn = metagame.terminal_table(tree_size.game_of("openspiel:kuhn_poker"))
    assert len(kuhn.weight) == 30 and metagame.largest_population(kuhn) == (1 << 30) // (32 * 30)
    monkeypatch.setattr(metagame, "PAYOFF_BYTES", 32 * 30 * 2)  # room for two policies' payoffs
    run = make_run(tmp_path, final="pass", snapshots=("uniform", "pass", "pass-ish"))
    output.resolve(run)
    with open(os.path.join(run, output_selection.FILE)) as f:
        scores = json.load(f)["scores"]
    pool = os.path.join(run, "pool", "main")
    newest_two, _ = metagame.nash_mixture_exploitability("kuhn_poker", [load_policy(pool, s) for s in (20, 30)])
    assert scores["population_nash"] == pytest.approx(newest_two)
    assert not [name for name in scores if name.startswith("population_nash_")]  # no window beyond the newest two


def test_the_param_average_is_chosen_when_the_snapshots_and_final_params_are_worse(tmp_path):
    run = make_run(tmp_path, final="pass", average="uniform", snapshots=("pass", "pass-ish"))
    resolved = output.resolve(run)
    assert resolved.kind == "policy" and resolved.members[0].average and resolved.members[0].step == 50
    assert resolved.note.startswith("param_average, the least exploitable")
    trained = load_trained(run)
    assert isinstance(trained, Policy) and exploitability(trained) == pytest.approx(0.4583333, abs=1e-6)


def test_without_snapshots_or_average_the_final_params_compete_alone(tmp_path):
    run = tmp_path / "run"
    output.record(str(run), output.OutputConfig("selected"))
    save_checkpoint(run / "checkpoints", step=5, bias=BIAS["bet"], uniform=True)
    resolved = output.resolve(str(run))
    assert resolved.members[0].key == "checkpoint:000005" and not resolved.members[0].average
    with open(run / output_selection.FILE) as f:
        assert set(json.load(f)["scores"]) == {"final"}


def test_the_choice_is_cached_until_a_new_checkpoint_or_snapshot_appears(tmp_path):
    run = make_run(tmp_path, final="pass", average="uniform", snapshots=("pass", "pass-ish"))
    output.resolve(run)
    path = os.path.join(run, output_selection.FILE)
    with open(path) as f:
        data = json.load(f)
    data["scores"]["marker"] = 9.0  # a cached choice is read back, not measured again
    with open(path, "w") as f:
        json.dump(data, f)
    assert "marker 9.0000" in output.resolve(run).note
    save_checkpoint(os.path.join(run, "pool", "main"), step=40, bias=BIAS["bet"], uniform=True)
    again = output.resolve(run)
    assert "marker" not in again.note and "population_nash" in again.note  # the new snapshot changed the choice
    with open(path, "w") as f:
        f.write("{not json")
    assert "population_nash" in output.resolve(run).note  # an unreadable cache is measured again, not an error


def test_a_game_whose_exploitability_cannot_be_measured_gets_the_param_average(tmp_path):
    run = tmp_path / "run"
    output.record(str(run), output.OutputConfig("selected"))
    state = save_checkpoint(run / "scratch", env=("CartPole-v1", (4,), 2), step=0, learner=KEEPS_AVERAGE)
    save_checkpoint(run / "checkpoints", env=("CartPole-v1", (4,), 2), step=3, learner=KEEPS_AVERAGE,
                    average=(state.params, 2))
    resolved = output.resolve(str(run))
    assert resolved.members[0].average and "cannot be measured" in resolved.note
    assert not (run / output_selection.FILE).exists()
    np.testing.assert_allclose(load_trained(str(run)).action_probabilities(np.zeros((1, 4), np.float32)).sum(), 1.0,
                               rtol=1e-6)


def test_a_game_too_large_to_measure_gets_the_param_average_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr(tree_size, "MAX_HISTORIES", 57)
    tree_size.unmeasurable.cache_clear()
    try:
        run = make_run(tmp_path, final="pass", average="uniform", snapshots=("pass", "bet"))
        resolved = output.resolve(run)
    finally:
        tree_size.unmeasurable.cache_clear()
    assert resolved.members[0].average and "more than 57 histories" in resolved.note, resolved.note
    assert not os.path.exists(os.path.join(run, output_selection.FILE))  # nothing was measured
