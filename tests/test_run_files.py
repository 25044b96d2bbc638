"""seedleague.artifacts.run_files: a run's file names answer only where they are conclusive, in the words the loading
path (orbax, seedleague.output, export, serve) uses; real checkpoints show where they are not."""

import argparse
import json
import os

import pytest
from test_api import save_checkpoint

from seedleague import cli, output
from seedleague.artifacts import run_files
from seedleague.artifacts.load import load_policy, load_snapshot
from seedleague.eval import cli_args as eval_args
from seedleague.export import cli as export_cli
from seedleague.export import cli_args as export_args


def test_only_a_folder_named_by_a_step_number_may_be_a_checkpoint(tmp_path):
    assert run_files.holds_no_step(str(tmp_path / "missing"))
    assert run_files.holds_no_step(str(tmp_path))
    for name in ("7.orbax-checkpoint-tmp-1700000000", "damaged-7", "notes.txt"):  # no step among them
        (tmp_path / name).mkdir()
    assert run_files.holds_no_step(str(tmp_path))
    (tmp_path / "7").mkdir()  # an empty step folder: orbax's to judge, not the names'
    assert not run_files.holds_no_step(str(tmp_path))
    assert not run_files.holds_no_step("s3://bucket/run/checkpoints")


def test_a_missing_or_empty_checkpoint_directory_is_refused_in_load_policys_words(tmp_path):
    (tmp_path / "empty" / "checkpoints").mkdir(parents=True)
    (tmp_path / "file").write_text("x")
    for path in (tmp_path / "none", tmp_path / "empty", tmp_path / "empty" / "checkpoints", tmp_path / "file"):
        problem = run_files.checkpoint_problem(str(path))
        with pytest.raises((FileNotFoundError, NotADirectoryError)) as loading:
            load_policy(str(path))
        assert problem == str(loading.value), path
    save_checkpoint(tmp_path / "run" / "checkpoints", step=3)
    assert run_files.checkpoint_problem(str(tmp_path / "run")) is None and load_policy(str(tmp_path / "run")).step == 3
    assert run_files.checkpoint_problem("s3://bucket/run") is None


def test_a_snapshot_key_is_found_or_refused_as_load_snapshot_refuses_it(tmp_path):
    save_checkpoint(tmp_path / "pool" / "main", step=512)
    assert run_files.snapshot_dir(str(tmp_path), "main:000512") == (str(tmp_path / "pool" / "main"), 512)
    assert load_snapshot(str(tmp_path), "main:000512").step == 512
    with pytest.raises(FileNotFoundError, match=r"no player directory .*pool/other'? \(the pool has players \['main'\]\)"):
        run_files.snapshot_dir(str(tmp_path), "other:000001")
    with pytest.raises(ValueError, match="names a live player, not a snapshot"):
        run_files.snapshot_dir(str(tmp_path), "main")


def test_no_output_yet_is_said_in_resolves_words_only_where_the_names_settle_it(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    for source in ("final", "param_average", "selected", None):
        if source:
            (run / "output.json").write_text(json.dumps({"source": source, "player": "main"}))
        problem = run_files.output_problem(str(run))
        with pytest.raises(FileNotFoundError) as resolving:
            output.resolve(str(run))
        assert problem == str(resolving.value) and "has no output yet" in problem, source
    (run / "output.json").unlink()  # a run that predates output.json: final
    assert run_files.output_problem(str(run)) == run_files.no_output_message(str(run), "final", str(run / "checkpoints"))
    assert run_files.output_problem(str(run), "average_policy") is None  # a mixture of snapshots: resolve's to say
    (run / "output.json").write_text("{not json")
    assert run_files.output_problem(str(run)) is None
    (run / "output.json").unlink()
    (run / "league").mkdir()
    (run / "league" / "league.sqlite").write_text("")  # a population's best member may stand in: resolve's to say
    assert run_files.output_problem(str(run)) is None
    (run / "league" / "league.sqlite").unlink()
    save_checkpoint(run / "checkpoints", step=5)
    assert run_files.output_problem(str(run)) is None and output.resolve(str(run)).members[0].step == 5


def _eval_args(**given):
    flags = dict(command="eval", games=1, mcts_sims=(1,), mcts_games=None, match_seconds=None, uct_c=2.0, greedy=False,
                 seed=0, mixture=None, average=None, snapshot=None, step=None, checkpoint=None)
    return argparse.Namespace(**{**flags, **given})


def test_each_commands_refusal_before_jax_says_what_its_loading_path_says(tmp_path, monkeypatch):
    # The words of a refusal made before jax loads are those the command printed when its loading path refused.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    (tmp_path / "waiting" / "checkpoints").mkdir(parents=True)
    (tmp_path / "pooled" / "pool" / "main").mkdir(parents=True)
    for given in (dict(run_dir="empty"), dict(run_dir="empty", checkpoint="waiting"),
                  dict(run_dir="empty", snapshot="main:000001"), dict(run_dir="empty", snapshot="main"),
                  dict(run_dir="pooled", snapshot="main:000001")):
        with pytest.raises((ValueError, FileNotFoundError)) as refused:
            if given.get("snapshot"):
                load_snapshot(given["run_dir"], given["snapshot"])
            else:
                load_policy(given.get("checkpoint") or given["run_dir"])
        assert eval_args.refusal(_eval_args(**given)) == str(refused.value), given
    for run_dir, snapshot in (("empty", None), ("waiting", None), ("empty", "main:000001"), ("pooled", "main:000001")):
        args = argparse.Namespace(run_dir=run_dir, out="policy.onnx", format="onnx", snapshot=snapshot)
        with pytest.raises(FileNotFoundError) as refused:
            export_cli.export(run_dir, "policy.onnx", "onnx", snapshot)
        assert export_args.refusal(args) == str(refused.value), (run_dir, snapshot)
    for checkpoint, snapshot in (("empty", None), ("waiting", None), ("none", None), ("empty", "main:000001"),
                                 ("pooled", "main"), ("pooled", "main:000001")):
        args = argparse.Namespace(checkpoint=checkpoint, snapshot=snapshot)
        with pytest.raises(SystemExit) as refused:
            cli._serve_target(args)
        assert cli._serve_refusal(args) == refused.value.code, (checkpoint, snapshot)
    assert not os.path.exists("policy.onnx")
