"""`seedleague export --format onnx`: real checkpoints exported through the CLI, run in onnxruntime and
matched against seedleague.api for the mlp, conv and board torsos; a mixture output writes one file per
member; recurrent policies, bad formats, missing run directories and unknown snapshots are refused by name."""

import dataclasses
import json
import os
import re

import numpy as np
import onnxruntime as ort
import pytest

from seedleague import output
from seedleague.api import load_snapshot, load_trained
from seedleague.cli import main
from seedleague.rl.network_config import NetworkConfig
from test_api import KUHN, ROOT, SMALL, save_checkpoint

# (env, network, observation dtype): one per torso; uint8 frames check the /255 scaling inside the graph.
TORSOS = {
    "mlp": (KUHN, SMALL, np.float32),
    "conv": (("frames", (12, 12, 2), 4), NetworkConfig(torso="conv", hidden_sizes=(16,)), np.uint8),
    "board": (("openspiel:connect_four", (4, 6, 7), 7), NetworkConfig(torso="board", hidden_sizes=(16,)), np.float32),
}


def observations(spec, batch, rng):
    shape = (batch, *spec.observation_shape)
    if spec.observation_dtype == np.uint8:
        return rng.integers(0, 256, shape).astype(np.uint8)
    return rng.normal(size=shape).astype(spec.observation_dtype)


def legal_masks(spec, batch, rng):
    mask = rng.random((batch, spec.num_actions)) < 0.5
    mask[np.arange(batch), rng.integers(0, spec.num_actions, batch)] = True  # every row has a legal action
    return mask


def export(*args):
    return main(["export", *map(str, args)])


def assert_matches_api(path, policy, seed=0):
    """The exported file answers what seedleague.api answers, at two batch sizes."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed)
    for batch in (1, 7):
        obs, mask = observations(policy.spec, batch, rng), legal_masks(policy.spec, batch, rng)
        logits, masked, probs, value = session.run(None, {"observation": obs, "legal_mask": mask})
        np.testing.assert_allclose(probs, policy.action_probabilities(obs, mask), atol=1e-5, rtol=0)
        assert (probs[~mask] == 0).all()
        np.testing.assert_allclose(logits, policy.logits(obs), atol=1e-5, rtol=0)
        np.testing.assert_array_equal(np.isneginf(masked), ~mask)
        np.testing.assert_allclose(masked[mask], logits[mask], atol=0, rtol=0)
        np.testing.assert_allclose(value, policy.value(obs), atol=1e-5, rtol=0)


@pytest.mark.parametrize("torso", sorted(TORSOS))
def test_each_torso_exports_and_matches_the_api_in_onnxruntime(tmp_path, torso, capsys):
    env, network, dtype = TORSOS[torso]
    run = tmp_path / "run"
    save_checkpoint(run / "checkpoints", env=env, step=4, network=network, seed=3, dtype=dtype)
    assert export("--run-dir", run, "--format", "onnx", "--out", tmp_path / "policy.onnx") == 0
    assert f"wrote {tmp_path / 'policy.onnx'}" in capsys.readouterr().out
    policy = load_trained(str(run))
    assert_matches_api(tmp_path / "policy.onnx", policy)
    sidecar = json.loads((tmp_path / "policy.onnx.json").read_text())
    name, shape, actions = env
    assert sidecar["inputs"] == [dict(name="observation", dtype=np.dtype(dtype).name, shape=["B", *shape]),
                                 dict(name="legal_mask", dtype="bool", shape=["B", actions])]
    assert [o["name"] for o in sidecar["outputs"]] == ["logits", "masked_logits", "probabilities", "value"]
    assert sidecar["outputs"][-1] == dict(name="value", dtype="float32", shape=["B"])
    assert sidecar["observation"]["env_name"] == name and sidecar["observation"]["shape"] == list(shape)
    assert sidecar["network"]["torso_resolved"] == torso and sidecar["recurrent"] is False
    assert "legal_mask is an input" in sidecar["legal_mask"] and sidecar["num_actions"] == actions
    assert sidecar["kind"] == "policy" and sidecar["output"]["source"] == "final"
    assert sidecar["policy"]["step"] == 4
    if dtype == np.uint8:
        assert "divided by 255 inside the graph" in sidecar["observation"]["scaling"]


def test_a_float64_env_gets_a_float32_input_and_the_sidecar_says_to_cast(tmp_path):
    save_checkpoint(tmp_path / "run" / "checkpoints", env=("CartPole-v1", (4,), 2), step=1, seed=1, dtype=np.float64)
    assert export("--run-dir", tmp_path / "run", "--out", tmp_path / "p.onnx") == 0
    observation = json.loads((tmp_path / "p.onnx.json").read_text())["observation"]
    assert observation["dtype"] == "float32" and observation["env_dtype"] == "float64"
    assert "cast it to the graph's float32" in observation["scaling"]
    obs = np.random.default_rng(0).normal(size=(3, 4))
    session = ort.InferenceSession(str(tmp_path / "p.onnx"), providers=["CPUExecutionProvider"])
    probs = session.run(["probabilities"], {"observation": obs.astype(np.float32), "legal_mask": np.ones((3, 2), bool)})
    np.testing.assert_allclose(probs[0], load_trained(str(tmp_path / "run")).action_probabilities(obs), atol=1e-5)


def test_a_mixture_output_writes_each_member_and_lists_their_weights(tmp_path):
    run = tmp_path / "run"
    for step in range(1, 7):
        save_checkpoint(run / "pool" / "main", step=step, seed=step)
    output.record(str(run), output.OutputConfig("average_policy"))  # the newest third: snapshots 5 and 6
    out = tmp_path / "exported" / "policy.onnx"
    assert export("--run-dir", run, "--out", out) == 0
    assert not out.exists()  # a mixture is its members, played one per episode
    index = json.loads((tmp_path / "exported" / "policy.onnx.json").read_text())
    assert index["kind"] == "mixture" and index["output"]["source"] == "average_policy"
    assert index["members"] == [dict(file="policy.member0.onnx", key="main:000005", weight=0.5, step=5),
                                dict(file="policy.member1.onnx", key="main:000006", weight=0.5, step=6)]
    assert [i["name"] for i in index["inputs"]] == ["observation", "legal_mask"]
    assert "draw one member" in index["how_to_play"]
    trained = load_trained(str(run))
    for i, member in enumerate(trained.members):
        path = tmp_path / "exported" / f"policy.member{i}.onnx"
        assert_matches_api(path, member, seed=i)
        assert json.loads(open(f"{path}.json").read())["member"]["key"] == index["members"][i]["key"]


def test_a_snapshot_exports_that_snapshot(tmp_path):
    run = tmp_path / "run"
    for step in (5, 6):
        save_checkpoint(run / "pool" / "main", step=step, seed=step)
    assert export("--run-dir", run, "--snapshot", "main:000005", "--out", tmp_path / "p.onnx") == 0
    assert_matches_api(tmp_path / "p.onnx", load_snapshot(str(run), "main:000005"))
    assert json.loads((tmp_path / "p.onnx.json").read_text())["policy"]["step"] == 5


def refused(capsys, *args) -> str:
    assert export(*args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


def test_recurrent_policies_are_refused_saying_what_is_supported(tmp_path, capsys):
    lstm = dataclasses.asdict(NetworkConfig(hidden_sizes=(8,), lstm_size=4))
    save_checkpoint(tmp_path / "run" / "checkpoints", step=2, extra_meta=dict(network=lstm))
    err = refused(capsys, "--run-dir", tmp_path / "run", "--out", tmp_path / "p.onnx")
    assert "has an LSTM core (network.lstm_size=4)" in err and "feed-forward policies only" in err
    assert "--network.lstm-size 0" in err and not (tmp_path / "p.onnx").exists()


def test_bad_formats_and_outputs_are_refused_by_name(tmp_path, capsys):
    save_checkpoint(tmp_path / "run" / "checkpoints", step=1)
    err = refused(capsys, "--run-dir", tmp_path / "run", "--format", "tflite", "--out", tmp_path / "p.onnx")
    assert "--format 'tflite' is not supported" in err and "--format onnx" in err
    err = refused(capsys, "--run-dir", tmp_path / "run", "--out", tmp_path / "policy.pt")
    assert "must name a .onnx file" in err and "policy.onnx" in err
    (tmp_path / "dir.onnx").mkdir()
    err = refused(capsys, "--run-dir", tmp_path / "run", "--out", tmp_path / "dir.onnx")
    assert "is a directory: name the file to write" in err
    assert not list(tmp_path.glob("p*"))


def test_a_missing_run_dir_is_refused_by_name(tmp_path, capsys):
    err = refused(capsys, "--run-dir", tmp_path / "nowhere", "--out", tmp_path / "p.onnx")
    assert "no such run directory" in err and "nowhere" in err and "--run-dir" in err
    assert not (tmp_path / "nowhere").exists()
    (tmp_path / "empty").mkdir()
    err = refused(capsys, "--run-dir", tmp_path / "empty", "--out", tmp_path / "p.onnx")
    assert "has no output yet" in err


def test_unknown_snapshots_are_refused_naming_those_that_exist(tmp_path, capsys):
    run = tmp_path / "run"
    save_checkpoint(run / "pool" / "main", step=5)
    err = refused(capsys, "--run-dir", run, "--snapshot", "main:000007", "--out", tmp_path / "p.onnx")
    assert "no such snapshot" in err and "main:000005" in err and "--snapshot" in err
    err = refused(capsys, "--run-dir", run, "--snapshot", "exploiter:000005", "--out", tmp_path / "p.onnx")
    assert "no league snapshots of player 'exploiter'" in err and "['main']" in err
    err = refused(capsys, "--run-dir", run, "--snapshot", "main", "--out", tmp_path / "p.onnx")
    assert "names a player, not a snapshot" in err and "main:000512" in err
    err = refused(capsys, "--run-dir", run, "--snapshot", "main:latest", "--out", tmp_path / "p.onnx")
    assert "bad snapshot key" in err
    assert not (tmp_path / "p.onnx").exists() and not (run / "pool" / "exploiter").exists()


def test_the_docs_python_example_runs(tmp_path, capsys, monkeypatch):
    text = open(os.path.join(ROOT, "docs", "export.md")).read()
    example = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    save_checkpoint(tmp_path / "runs" / "kuhn" / "checkpoints", step=12, seed=5)
    monkeypatch.chdir(tmp_path)  # the docs' "runs/kuhn" and "policy.onnx" are relative
    assert export("--run-dir", "runs/kuhn", "--format", "onnx", "--out", "policy.onnx") == 0
    namespace = {}
    exec(compile(example, "docs/export.md", "exec"), namespace)
    policy = load_trained("runs/kuhn")
    np.testing.assert_allclose(namespace["probabilities"], policy.action_probabilities(namespace["observation"],
                                                                                       namespace["mask"]), atol=1e-5)
    assert "P(pass, bet) =" in capsys.readouterr().out


def test_a_network_that_squashes_its_inputs_exports_the_squash_and_says_so(tmp_path):
    run = tmp_path / "run"
    save_checkpoint(run / "checkpoints", env=KUHN, step=2, network=dataclasses.replace(SMALL, squash_inputs=True),
                    seed=5, dtype=np.float32)
    assert export("--run-dir", run, "--format", "onnx", "--out", tmp_path / "policy.onnx") == 0
    policy = load_trained(str(run))
    session = ort.InferenceSession(str(tmp_path / "policy.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    obs = (rng.normal(size=(5, *policy.spec.observation_shape)) * 300.0).astype(np.float32)  # chip counts
    mask = legal_masks(policy.spec, 5, rng)
    logits, _, probs, value = session.run(None, {"observation": obs, "legal_mask": mask})
    np.testing.assert_allclose(logits, policy.logits(obs), atol=1e-5, rtol=0)
    np.testing.assert_allclose(value, policy.value(obs), atol=1e-4, rtol=1e-5)
    sidecar = json.loads((tmp_path / "policy.onnx.json").read_text())
    assert "squashed to sign(x) (1 + ln|x|) inside the graph" in sidecar["observation"]["scaling"]
