"""seedleague.cli: what the command line hands on."""

from seedleague import cli


def test_extra_players_get_the_host_flags_but_never_the_token():
    # Tokens travel to the extra players' hosts in the environment (seedleague.launch.league), not on a command line.
    argv = ["--env", "openspiel:kuhn_poker", "--token", "s3cret", "--batch_size", "16", "--token=s3cret",
            "--learner.learning_rate", "1e-3"]
    assert cli._forwarded_flags(argv) == ["--batch_size", "16", "--learner.learning_rate", "1e-3"]


def test_league_and_per_player_flags_are_kept_back_in_either_spelling():
    argv = ["--league-config.mode", "psro", "--league_config.seed", "3", "--league.pool-dir", "/p",
            "--league.pool_dir=/q", "--unroll-length", "4"]
    assert cli._forwarded_flags(argv) == ["--unroll-length", "4"]
