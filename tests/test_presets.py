"""seedleague.presets: the defaults `seedleague train --env X` starts from."""

import argparse

from seedleague import cli, presets
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


def test_every_two_player_game_gets_the_same_recipe():
    # No table keyed by a game's name: only what the spec shows (a board or not) differs.
    games = ["kuhn_poker", "leduc_poker", "liars_dice", "connect_four", "tic_tac_toe", "kuhn_poker(players=2)"]
    for game in games:
        preset = preset_for(f"openspiel:{game}")
        assert preset.host.learner == presets.GAME_RECIPE, game
        assert dataclasses_without_network(preset) == dataclasses_without_network(preset_for("openspiel:kuhn_poker"))


def dataclasses_without_network(preset):
    import dataclasses

    return dataclasses.replace(preset, host=dataclasses.replace(preset.host, network=preset_for("CartPole-v1").host.network))


def test_the_recipes_anneal_follows_the_time_budget():
    learner = _run_config("openspiel:leduc_poker").host.learner
    assert learner.anneal_seconds == presets.ANNEALED_SHARE * 600.0
    learner = _run_config("openspiel:leduc_poker", "--max-seconds", "1800").host.learner
    assert learner.anneal_seconds == presets.ANNEALED_SHARE * 1800.0
    # Explicit flags win: an anneal over updates, or one over given seconds; no budget, no anneal.
    learner = _run_config("openspiel:leduc_poker", "--learner.anneal_steps", "5000").host.learner
    assert (learner.anneal_steps, learner.anneal_seconds) == (5000, 0.0)
    assert _run_config("openspiel:kuhn_poker", "--learner.anneal_seconds", "30").host.learner.anneal_seconds == 30.0
    assert _run_config("openspiel:kuhn_poker", "--max-seconds", "0").host.learner.anneal_seconds == 0.0


def test_single_agent_envs_keep_their_presets_and_do_not_anneal_over_the_budget():
    for env in ("CartPole-v1", "ALE/Pong-v5"):
        assert not preset_for(env).anneal_over_budget
    assert preset_for("ALE/Pong-v5").host.learner.loss == "vtrace"
    # Classic control: PPO epochs on every batch once (FIFO, one sample per insert), with fixed targets.
    cartpole = preset_for("CartPole-v1").host
    assert (cartpole.learner.loss, cartpole.learner.fixed_targets) == ("ppo", True) and cartpole.learner.epochs > 1
    assert cartpole.replay.sampler == "fifo" and cartpole.replay.samples_per_insert == 1.0
    assert _run_config("CartPole-v1").host.learner.anneal_seconds == 0.0

