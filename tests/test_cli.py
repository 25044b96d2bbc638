"""seedleague.cli: what the command line hands on."""

import argparse
import subprocess
import sys

import pytest

from seedleague import cli, presets
from seedleague.rl.learner_config import LearnerConfig


def test_extra_players_get_the_host_flags_but_never_the_token():
    # Tokens travel to the extra players' hosts in the environment (seedleague.launch.league), not on a command line.
    argv = ["--env", "openspiel:kuhn_poker", "--token", "s3cret", "--batch_size", "16", "--token=s3cret",
            "--learner.learning_rate", "1e-3"]
    assert cli._forwarded_flags(argv) == ["--batch_size", "16", "--learner.learning_rate", "1e-3"]


def test_league_and_per_player_flags_are_kept_back_in_either_spelling():
    argv = ["--league-config.mode", "psro", "--league_config.seed", "3", "--league.pool-dir", "/p",
            "--league.pool_dir=/q", "--unroll-length", "4"]
    assert cli._forwarded_flags(argv) == ["--unroll-length", "4"]


# Run in a fresh interpreter: the modules a command line loads, from `seedleague.cli`'s import on.
_LOADED = """
import sys
from seedleague import cli
try:
    code = cli.main(sys.argv[1:])  # a refused value: main prints it and returns 2
except SystemExit as stop:  # argparse's refusals and --help
    code = stop.code
heavy = sorted(name for name in sys.modules if name.partition(".")[0] in ("jax", "flax", "optax", "orbax", "scipy"))
print("exit", code, "heavy", heavy[:3], file=sys.stderr)
"""


@pytest.mark.parametrize("argv, code, said", [
    (["train", "--bad-flag"], 2, "unrecognized arguments: --bad-flag"),
    (["host", "--batch-size", "many"], 2, "invalid"),
    (["--log-level", "INFO", "train", "--env"], 2, "expected one argument"),
    (["league", "--help"], 0, "usage: seedleague league"),
    (["train", "--help"], 0, "usage: seedleague train"),  # the default env's preset: an OpenSpiel game's
    # Refused values, in one line: the run's config (seedleague.launch.run_config) and the preset that fills it load
    # no jax; the host, its launcher and the compile cache are imported once the command line is accepted.
    (["train", "--max-seconds", "-1"], 2, "seedleague: --max-seconds must be >= 0 (0: no limit), got -1\n"),
    (["train", "--env", "openspiel:nope_game"], 2, "seedleague: --env openspiel:nope_game is refused: "),
    (["train", "--workers", "-1"], 2, "seedleague: --workers must be >= 0 and --envs-per-worker >= 1, got -1 and "),
    (["train", "--env", "openspiel:kuhn_poker", "--pbt", "1"], 2, "seedleague: --pbt 1: population-based training "),
    # A host that would wait for its first worker's spec refuses its budget first (a timeout here means it waited).
    (["host", "--max-steps", "-3"], 2, "seedleague: --max-steps must be >= 0 (0: no limit), got -3\n"),
    # The commands whose runs load jax add their flags from jax-free modules (seedleague.cli._parser_module): their
    # help and argparse's refusals, and a typo (which lists every command), load none of it.
    (["eval", "--help"], 0, "usage: seedleague eval"),
    (["report", "--help"], 0, "usage: seedleague report"),
    (["exploit", "--help"], 0, "usage: seedleague exploit"),
    (["export", "--help"], 0, "usage: seedleague export"),
    (["fake-host", "--help"], 0, "usage: seedleague fake-host"),
    (["check-worker", "--help"], 0, "usage: seedleague check-worker"),
    (["eval"], 2, "seedleague eval: error: the following arguments are required: --run-dir"),
    (["eval", "--run-dir", "r", "--mcts-sims", "a"], 2, "--mcts-sims must be comma-separated integers like 100,1000"),
    (["exploit", "--run-dir", "r", "--output", "nope"], 2, "argument --output: invalid choice: 'nope'"),
    (["export", "--run-dir", "r"], 2, "seedleague export: error: the following arguments are required: --out"),
    (["nope"], 2, "invalid choice: 'nope'"),
])
def test_a_refused_command_line_and_a_jax_free_commands_help_load_no_jax(argv, code, said):
    # The config classes that build train's and host's flags live in modules without jax (seedleague.rl.learner_config,
    # seedleague.rl.network_config, ...), and the commands in modules of their own are imported only when given.
    # No scipy either: league.sequential, which every league command imports, loads it only to compute PBT's bounds.
    done = subprocess.run([sys.executable, "-c", _LOADED, *argv], capture_output=True, text=True, timeout=120)
    assert said in done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"exit {code} heavy []" in done.stderr, done.stderr[-2000:]


def test_a_stand_alone_host_and_serve_listen_where_workers_can_find_them(monkeypatch, capsys):
    # Without --address they take 127.0.0.1:50051 (a flag not given reads as config_flags.NOT_GIVEN, never None),
    # and their --help says so; train's own host takes any free port.
    for argv, shown in ((["host", "--help"], "127.0.0.1:50051"), (["serve", "--help"], "127.0.0.1:50051"),
                        (["train", "--env", "CartPole-v1", "--help"], "127.0.0.1:0")):
        with pytest.raises(SystemExit):
            cli.main(argv)
        text = " ".join(capsys.readouterr().out.split())
        assert text.split("--address STR ", 1)[1].split("(default: ", 1)[1].startswith(shown + ")"), argv
    seen = []
    monkeypatch.setattr(cli, "_train", lambda args, with_workers=True, argv=None: seen.append(args.address) or 0)
    monkeypatch.setattr(cli, "_serve", lambda args: seen.append(args.address) or 0)
    monkeypatch.setattr(cli.compile_cache, "enable", lambda: None)  # serve's: not this test's concern
    assert cli.main(["host", "--env", "CartPole-v1"]) == 0
    assert cli.main(["serve", "--checkpoint", "runs/x"]) == 0
    assert cli.main(["host", "--address", "0.0.0.0:6000"]) == 0
    assert cli.main(["train", "--env", "CartPole-v1"]) == 0
    assert seen == ["127.0.0.1:50051", "127.0.0.1:50051", "0.0.0.0:6000", cli.config_flags.NOT_GIVEN]


def test_each_command_in_a_module_of_its_own_still_parses_when_given_alone(capsys):
    for command in ("report", "eval", "exploit", "export", "fake-host", "check-worker", "play"):
        with pytest.raises(SystemExit) as stop:
            cli.main([command, "--help"])
        assert stop.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: seedleague {command} ")


def test_the_top_level_help_lists_every_command(capsys):
    # argparse %-formats each command's help line: a bare percent sign in one of them crashed `seedleague --help`.
    with pytest.raises(SystemExit) as stop:
        cli.main(["--help"])
    assert stop.value.code == 0
    listed = capsys.readouterr().out
    named = listed.split("{", 1)[1].split("}", 1)[0].split(",")  # the usage line's list of commands
    for command in ("train", "host", "league", "eval", "report", "exploit", "export", "play"):
        assert f"    {command} " in listed
        assert command in named, (command, named)


def test_train_help_still_shows_the_defaults_of_the_preset_that_applies(capsys):
    # The preset is built only for --help now (it writes help text only); the defaults shown must still be its own.
    for argv, preset in ((["train", "--env", "CartPole-v1", "--help"], presets.preset_for("CartPole-v1")),
                         (["train", "--help"], presets.preset_for(presets.DEFAULT_ENV))):
        with pytest.raises(SystemExit) as stop:
            cli.main(argv)
        assert stop.value.code == 0
        text = " ".join(capsys.readouterr().out.split())
        shown = text.split("--learner.epochs INT ", 1)[1].split("(default: ", 1)[1].split(")", 1)[0]
        assert shown == str(preset.host.learner.epochs), (argv, shown)
    assert presets.preset_for("CartPole-v1").host.learner.epochs != LearnerConfig().epochs  # else this shows nothing


def test_a_choice_that_stops_after_training_says_why_and_keeps_the_recorded_output(tmp_path, monkeypatch, capsys):
    # the choice runs after the budget's training: a refusal there leaves the run's output as it was recorded (the
    # evaluation that follows reads it) and reaches the console, instead of failing the finished run
    from seedleague.artifacts import output_config
    from seedleague.eval import exploit_args
    from seedleague.launch.run_config import RunConfig

    def refuse(args):
        raise ValueError("the sampled meta-game cannot estimate it")

    monkeypatch.setattr(exploit_args, "run", refuse)
    run_dir = str(tmp_path / "run")
    output_config.record(run_dir, output_config.OutputConfig("param_average"))
    config = RunConfig(run_dir=run_dir, choose_output_s=30.0)
    cli._choose_output(config, argparse.Namespace(worker_cmd=None, workers=None))
    assert ("seedleague train: the output choice stopped: the sampled meta-game cannot estimate it; the output stays "
            "param_average") in capsys.readouterr().err
