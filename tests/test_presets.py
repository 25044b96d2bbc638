"""seedleague.presets: the defaults `seedleague train --env X` starts from."""

import argparse

from seedleague import cli
from seedleague.rl.learner import LearnerConfig
from seedleague.presets import preset_for


def test_openspiel_board_games_get_the_board_torso_and_poker_an_mlp():
    assert preset_for("openspiel:connect_four").host.network.torso == "board"
    assert preset_for("openspiel:tic_tac_toe").host.network.torso == "board"
    assert preset_for("openspiel:leduc_poker").host.network.torso == "mlp"
    assert preset_for("openspiel:liars_dice").host.network.torso == "mlp"  # information-state vector
    assert preset_for("openspiel:no_such_game").host.network.torso == "mlp"  # the worker names the bad game


def test_leduc_runs_two_workers_and_the_other_games_one():
    # Leduc's 256-unroll batches need two workers to keep the learner fed (benchmarks/README.md).
    leduc = preset_for("openspiel:leduc_poker")
    assert (leduc.workers, leduc.host.batch_size) == (2, 256)
    assert leduc.league.snapshot_interval_steps == 125
    for game in ("kuhn_poker", "connect_four"):
        assert preset_for(f"openspiel:{game}").workers == 1


def test_leduc_takes_advantages_from_returns_alone_and_the_other_games_keep_the_default_lambda():
    assert preset_for("openspiel:leduc_poker").host.learner.lambda_ == 1.0
    for game in ("kuhn_poker", "connect_four"):
        assert preset_for(f"openspiel:{game}").host.learner.lambda_ == LearnerConfig().lambda_


def test_leduc_averages_its_params_over_the_last_quarter_of_its_anneal():
    learner = preset_for("openspiel:leduc_poker").host.learner
    assert (learner.average_from, learner.anneal_steps) == (13_125, 17_500)
    assert preset_for("openspiel:kuhn_poker").host.learner.average_from is None


def test_leduc_explores_and_the_other_games_do_not():
    # Leduc's averages came out 0.110-0.120 (param average) with 5% uniform actions, 0.106-0.167 without.
    assert preset_for("openspiel:leduc_poker").host.explore == 0.05
    for env in ("openspiel:kuhn_poker", "openspiel:connect_four", "CartPole-v1", "ALE/Pong-v5"):
        assert preset_for(env).host.explore == 0.0


def test_leduc_stops_when_its_anneal_ends_and_the_flag_overrides_it():
    # Trained on past its anneal at the final settings, Leduc's average policy drifted from 0.124 (update 17.5K,
    # 20 minutes on a 15 updates/s machine) to 0.30 at minute 30: its run's budget ends with the schedule.
    leduc = preset_for("openspiel:leduc_poker")
    assert leduc.max_learner_steps == leduc.host.learner.anneal_steps == 17_500
    assert leduc.max_seconds == 1800.0  # a slower machine still stops at 30 minutes
    for env in ("openspiel:kuhn_poker", "openspiel:connect_four", "CartPole-v1"):
        assert preset_for(env).max_learner_steps == 0

    def budget(*flags):
        parser = argparse.ArgumentParser()
        cli._add_run_flags(parser, with_workers=True)
        args = parser.parse_args(["--env", "openspiel:leduc_poker", "--run-dir", "unused", *flags])
        return cli._run_config(args, with_workers=True).budget

    assert budget().max_learner_steps == 17_500
    assert budget("--max-learner-steps", "0").max_learner_steps == 0  # 0: no limit, as the help says
    assert budget("--max-learner-steps", "40000", "--max-seconds", "3600").max_learner_steps == 40_000
