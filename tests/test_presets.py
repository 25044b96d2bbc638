"""seedleague.presets: the defaults `seedleague train --env X` starts from."""

from seedleague.presets import preset_for


def test_openspiel_board_games_get_the_board_torso_and_poker_an_mlp():
    assert preset_for("openspiel:connect_four").host.network.torso == "board"
    assert preset_for("openspiel:tic_tac_toe").host.network.torso == "board"
    assert preset_for("openspiel:leduc_poker").host.network.torso == "mlp"
    assert preset_for("openspiel:liars_dice").host.network.torso == "mlp"  # information-state vector
    assert preset_for("openspiel:no_such_game").host.network.torso == "mlp"  # the worker names the bad game
