"""seedleague.presets: the defaults `seedleague train --env X` starts from."""

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
