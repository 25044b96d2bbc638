"""seedleague.presets: the defaults `seedleague train --env X` starts from."""

import argparse
import dataclasses
import re
import sys

import numpy as np
import pytest

from seedleague.games.openspiel import load_game, observation_shape
from seedleague import cli, presets
from seedleague.artifacts import output_config
from seedleague.eval import tree_size
from seedleague.protocol.named import named_of_v1
from seedleague.protocol.specs import EnvSpec
from seedleague.presets import preset_for


def _run_config(env, *flags):
    parser = argparse.ArgumentParser()
    cli._add_run_flags(parser, with_workers=True)
    args = parser.parse_args(["--env", env, "--run-dir", "unused", *flags])
    return cli._run_config(args, with_workers=True)


def test_openspiel_board_games_get_the_board_torso_and_the_others_an_mlp():
    assert preset_for("openspiel:connect_four").host.network.torso == "board"
    assert preset_for("openspiel:tic_tac_toe").host.network.torso == "board"
    assert preset_for("openspiel:leduc_poker").host.network.torso == "mlp"
    assert preset_for("openspiel:liars_dice").host.network.torso == "mlp"  # information-state vector
    assert preset_for("openspiel:no_such_game").host.network.torso == "mlp"  # refused by name before it runs


def test_every_two_player_game_gets_the_same_recipe_and_an_output_no_game_tree_chooses(monkeypatch):
    # No table keyed by a game's name, and nothing that walks a game tree decides the default: a game whose tree
    # can be measured trains and outputs exactly as one whose tree cannot (a user's own worker binary).
    mixed = ["kuhn_poker", "leduc_poker", "liars_dice", "kuhn_poker(players=2)",
             "turn_based_simultaneous_game(game=oshi_zumo(coins=6,size=2,horizon=6))"]  # 1.4M histories
    single = ["connect_four", "tic_tac_toe"]
    for game in mixed + single:
        preset = preset_for(f"openspiel:{game}")
        assert preset.host.learner == presets.GAME_RECIPE and preset.output == presets.GAME_OUTPUT, game
        # Only an asked-for exact selection, where it can measure, gets the mixture's recipe.
        assert preset.exact_selection_learner == (presets.MIXTURE_RECIPE if game in mixed else None), game
        assert dataclasses_without_network(preset) == dataclasses_without_network(preset_for("openspiel:kuhn_poker"))
    assert presets.GAME_OUTPUT != "selected"
    # A tree too large to measure: an asked-for selection falls back to one network, so the single network's recipe.
    tree_size.unmeasurable.cache_clear()
    monkeypatch.setattr(tree_size, "MAX_HISTORIES", 9_000)  # Leduc has 9,457
    try:
        assert presets.for_output(preset_for("openspiel:leduc_poker"), "selected").host.learner == presets.GAME_RECIPE
    finally:
        tree_size.unmeasurable.cache_clear()


def test_only_an_asked_for_exact_selection_anneals_to_the_lower_temperature():
    # The two recipes differ in the anneal's end alone, the mixture's the lower.
    assert presets.MIXTURE_RECIPE == dataclasses.replace(presets.GAME_RECIPE, entropy_cost_final=0.02)
    assert presets.MIXTURE_RECIPE.entropy_cost_final < presets.GAME_RECIPE.entropy_cost_final
    default = _run_config("openspiel:leduc_poker")
    assert (default.host.learner.entropy_cost_final, default.output.source) == (0.05, presets.GAME_OUTPUT)
    selected = _run_config("openspiel:leduc_poker", "--output", "selected")
    assert (selected.host.learner.entropy_cost_final, selected.output.source) == (0.02, "selected")
    for source in ("final", "param_average", "average_policy"):
        config = _run_config("openspiel:leduc_poker", "--output", source)
        assert (config.host.learner.entropy_cost_final, config.output.source) == (0.05, source), source
    # A flag wins over either.
    assert _run_config("openspiel:leduc_poker", "--output", "selected", "--learner.entropy-cost-final", "0.03"
                       ).host.learner.entropy_cost_final == 0.03
    assert _run_config("openspiel:connect_four").host.learner.entropy_cost_final == 0.05


def test_a_worker_that_declares_a_measurable_game_trains_as_any_other_worker():
    # The name is asked only what an asked-for exact selection asks: can its candidates be measured exactly.
    leduc = preset_for("openspiel:leduc_poker")
    spec = named_of_v1(EnvSpec("openspiel:leduc_poker", leduc_shape(), np.float32, 3, 16, num_seats=2))
    assert presets.preset_for_spec(spec).host == leduc.host
    mine = presets.preset_for_spec(dataclasses.replace(spec, env_name="my game"))
    assert mine.host.learner == presets.GAME_RECIPE and mine.output == leduc.output
    assert presets.preset_for_spec(spec).exact_selection_learner == presets.MIXTURE_RECIPE
    assert mine.exact_selection_learner is None


def leduc_shape():
    return observation_shape(load_game("leduc_poker"))


def dataclasses_without_network(preset, learner=None):
    host = dataclasses.replace(preset.host, network=preset_for("CartPole-v1").host.network,
                               learner=learner or preset.host.learner)
    return dataclasses.replace(preset, host=host, exact_selection_learner=None)


def test_the_recipes_anneal_follows_the_time_budget():
    # training's share of it: the rest chooses the output (--choose-share)
    learner = _run_config("openspiel:leduc_poker").host.learner
    assert learner.anneal_seconds == pytest.approx(presets.ANNEALED_SHARE * 600.0 * (1 - output_config.CHOICE_SHARE))
    learner = _run_config("openspiel:leduc_poker", "--max-seconds", "1800", "--choose-share", "0").host.learner
    assert learner.anneal_seconds == presets.ANNEALED_SHARE * 1800.0
    # Explicit flags win: an anneal over updates, or one over given seconds; no budget, no anneal.
    learner = _run_config("openspiel:leduc_poker", "--learner.anneal_steps", "5000").host.learner
    assert (learner.anneal_steps, learner.anneal_seconds) == (5000, 0.0)
    assert _run_config("openspiel:kuhn_poker", "--learner.anneal_seconds", "30").host.learner.anneal_seconds == 30.0
    assert _run_config("openspiel:kuhn_poker", "--max-seconds", "0").host.learner.anneal_seconds == 0.0


def test_choosing_the_output_takes_its_share_of_a_league_runs_budget_in_seconds_and_nothing_else():
    config = _run_config("openspiel:kuhn_poker")
    assert config.choose_output_s == pytest.approx(output_config.CHOICE_SHARE * 600.0)
    assert config.budget.max_seconds == pytest.approx(600.0 - config.choose_output_s)
    config = _run_config("openspiel:kuhn_poker", "--choose-share", "0.25", "--max-seconds", "100")
    assert (config.choose_output_s, config.budget.max_seconds) == (25.0, 75.0)
    # a PBT population is one player's: its output is the best member's, chosen among that member's networks
    pbt = _run_config("openspiel:kuhn_poker", "--pbt", "3", "--max-seconds", "100")
    assert pbt.choose_output_s == pytest.approx(output_config.CHOICE_SHARE * 100.0)
    # ... and every member trains for the same share: the extra members' hosts (their own `seedleague train`, whose
    # flags parse as these do) anneal over it and keep their param average in it, as main does
    member = _run_config("openspiel:kuhn_poker", "--league.address", "127.0.0.1:1", "--league.pool-dir", "pool",
                         *pbt.league.player_args)
    assert member.budget.max_seconds == pbt.budget.max_seconds == pytest.approx(60.0)
    assert member.host.learner.anneal_seconds == pbt.host.learner.anneal_seconds
    assert _run_config("openspiel:kuhn_poker", "--pbt", "2", "--players", "main,exploiter:main_exploiter",
                       "--max-seconds", "100").choose_output_s == 0.0
    for flags in (("--max-learner-steps", "20"), ("--max-steps", "1000"), ("--output", "final"),
                  ("--players", "main,exploiter:main_exploiter"), ("--choose-share", "0")):
        config = _run_config("openspiel:kuhn_poker", *flags)
        assert (config.choose_output_s, config.budget.max_seconds) == (0.0, 600.0), flags
    assert _run_config("openspiel:kuhn_poker", "--max-seconds", "0").choose_output_s == 0.0  # no time budget
    assert _run_config("CartPole-v1").choose_output_s == 0.0  # no league: nothing to choose among


def test_a_two_seat_game_with_a_continuous_head_is_not_given_a_choice_its_evaluation_games_cannot_score(tmp_path):
    # the real worker is started to read its spec, as `seedleague train --worker-cmd` does
    def config(game_flags="", *flags):
        parser = argparse.ArgumentParser()
        cli._add_run_flags(parser, with_workers=True)
        command = f"{sys.executable} -m envs.shootout_worker --address {{address}} --seed {{seed}} {game_flags}"
        return cli._run_config(parser.parse_args(["--worker-cmd", command, "--run-dir", str(tmp_path / "run"),
                                                  "--max-seconds", "100", *flags]), with_workers=True)

    assert config().choose_output_s == 0.0  # a discrete lane and a continuous aim: the whole budget trains
    with pytest.raises(ValueError, match="does not apply to this run: the population's evaluation games score "
                                         "discrete actions, and this game has a continuous head"):
        config("", "--choose-share", "0.3")
    # every head discrete: the choice takes its share, and ends with one named network (`distilled`)
    assert config("--aim-levels 5").choose_output_s == pytest.approx(output_config.CHOICE_SHARE * 100.0)


@pytest.mark.parametrize("flags, message", [
    (("--choose-share", "1"), "--choose-share must be in [0, 1)"),
    (("--choose-share", "-0.1"), "--choose-share must be in [0, 1)"),
    (("--choose-share", "0.3", "--max-learner-steps", "5"), "a budget in seconds alone"),
    (("--choose-share", "0.3", "--output", "average_policy"), "--output is average_policy"),
    (("--choose-share", "0.3", "--players", "main,exploiter:main_exploiter"), "this run trains several"),
])
def test_a_choose_share_that_cannot_apply_is_refused_with_why(flags, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        _run_config("openspiel:kuhn_poker", *flags)
    with pytest.raises(ValueError, match="no league|league"):
        _run_config("CartPole-v1", "--choose-share", "0.3")


def test_single_agent_envs_keep_their_presets_and_do_not_anneal_over_the_budget():
    for env in ("CartPole-v1", "ALE/Pong-v5"):
        assert not preset_for(env).anneal_over_budget
    # Images: PPO epochs with fixed targets on every batch once (benchmarks/README.md, "Atari Pong on 2 CPU cores").
    pong = preset_for("ALE/Pong-v5").host
    assert (pong.learner.loss, pong.learner.fixed_targets, pong.learner.epochs) == ("ppo", True, 4)
    assert pong.replay.sampler == "fifo" and pong.replay.samples_per_insert == 1.0
    assert pong.batch_size % pong.learner.minibatches == 0
    # A batch the preset's minibatches cannot split is refused with the flags to change, before anything starts.
    with pytest.raises(ValueError, match="batch_size 2 does not split into --learner.minibatches 4 .* multiple of 4"):
        _run_config("ALE/Pong-v5", "--batch-size", "2")
    assert _run_config("ALE/Pong-v5", "--batch-size", "2", "--learner.minibatches", "2").host.batch_size == 2
    # Classic control: PPO epochs on every batch once (FIFO, one sample per insert), with fixed targets.
    cartpole = preset_for("CartPole-v1").host
    assert (cartpole.learner.loss, cartpole.learner.fixed_targets) == ("ppo", True) and cartpole.learner.epochs > 1
    assert cartpole.replay.sampler == "fifo" and cartpole.replay.samples_per_insert == 1.0
    assert _run_config("CartPole-v1").host.learner.anneal_seconds == 0.0



def test_a_game_with_payoffs_beyond_the_recipes_range_learns_them_scaled_into_unit_range():
    # universal_poker's default pays up to 1,200 chips; every game the recipe is measured on pays at most 13.
    assert presets.payoff_scale("openspiel:universal_poker") == pytest.approx(1 / 1200)
    for game in ("kuhn_poker", "leduc_poker", "connect_four", "no_such_game"):
        assert presets.payoff_scale(f"openspiel:{game}") == 1.0, game
    assert presets.payoff_scale("CartPole-v1") == 1.0  # declares no bound
    assert [presets.scale_for_bound(b) for b in (0.0, 1.0, 16.0, 32.0, 1200.0)] == [1.0, 1.0, 1.0, 1 / 32, 1 / 1200]
    poker = preset_for("openspiel:universal_poker")  # 1.22M histories: an asked-for selection can measure it
    assert poker.host.learner == dataclasses.replace(presets.GAME_RECIPE, reward_scale=1 / 1200)
    selected = presets.for_output(poker, "selected").host.learner  # the mixture's recipe keeps the scale
    assert selected == dataclasses.replace(presets.MIXTURE_RECIPE, reward_scale=1 / 1200)


def test_a_worker_binary_that_declares_a_return_bound_gets_its_rewards_scaled_whatever_its_name():
    chips = named_of_v1(EnvSpec("my poker", (20,), np.float32, 4, 16, num_seats=2, has_legal_mask=True,
                                return_bound=500.0))
    assert presets.preset_for_spec(chips).host.learner.reward_scale == pytest.approx(1 / 500)
    for bound in (0.0, 13.0):  # not declared, or within the recipe's range: learnt as sent
        assert presets.preset_for_spec(dataclasses.replace(chips, return_bound=bound)).host.learner.reward_scale == 1.0
    solo = named_of_v1(EnvSpec("my sim", (20,), np.float32, 4, 16, return_bound=500.0))  # one seat: no league
    assert presets.preset_for_spec(solo).host.learner.reward_scale == 1.0


def test_step_bytes_of_a_v1_workers_spec_by_hand():
    # 2 envs x 2 seats = 4 agents: observation 4 x 3 float32 = 48, reward 4 x 4 = 16, terminated and truncated
    # 2 x 2 = 4, legal mask 4 x 5 = 20, acting 4: 92. Without the mask: 72.
    for has_legal_mask, expected in ((True, 92), (False, 72)):
        spec = EnvSpec("x", (3,), np.float32, 5, 2, num_seats=2, has_legal_mask=has_legal_mask)
        assert presets.step_bytes(named_of_v1(spec)) == expected
