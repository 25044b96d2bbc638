"""Device configuration, the data-parallel learner and the Sebulba split (seedleague.rl.sharding).

This process has one device. Checks that need several run in subprocesses with
XLA_FLAGS=--xla_force_host_platform_device_count=4 (JAX reads it once, at start):
tests/sharding_checks.py under pytest, and `seedleague train` end to end.
"""

import ast
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from types import SimpleNamespace

import jax
import numpy as np
import pytest

from seedleague.api import load_policy
from seedleague.host.host import Host, HostConfig
from seedleague.host.league_link_config import LeagueLinkConfig
from seedleague.metrics import Metrics
from seedleague.rl import sharding
from seedleague.rl.device_config import DeviceConfig, DistributedConfig
from tests.conftest import seedleague_here, xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKS = os.path.join(ROOT, "tests", "sharding_checks.py")
FOUR_DEVICES = dict(os.environ, XLA_FLAGS=xla_flags("--xla_force_host_platform_device_count=4"), JAX_PLATFORMS="cpu")
SEEDLEAGUE = [sys.executable, "-m", "seedleague.cli"]
TINY = ["--unroll_length", "8", "--batch_size", "4", "--network.hidden_sizes", "16", "--replay.capacity", "64"]


def _fake_devices(count):
    return [SimpleNamespace(id=i, platform="cpu") for i in range(count)]


# --- configuration: errors say what to change ----------------------------------------


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(learner_devices=-1), "learner_devices must be >= 0"),
        (dict(inference_device="gpu"), "must be 'shared', 'separate' or a local device index"),
        (dict(inference_device="-1"), "must be 'shared', 'separate' or a local device index"),
    ],
)
def test_device_config_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DeviceConfig(**kwargs)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_processes=0), "num_processes must be >= 1"),
        (dict(num_processes=2, process_id=2), r"process_id must be in 0..1"),
        (dict(num_processes=2), "--distributed.coordinator HOST:PORT"),
        (dict(num_processes=2, coordinator="localhost"), "--distributed.coordinator HOST:PORT"),
        (dict(coordinator="127.0.0.1:1234"), "num_processes is 1"),
    ],
)
def test_distributed_config_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DistributedConfig(**kwargs)


@pytest.mark.parametrize(
    "config, count, match",
    [
        (DeviceConfig(inference_device="separate"), 1, "needs 2 or more local devices.*--devices.inference-device shared"),
        (DeviceConfig(inference_device="4"), 4, r"local devices are 0..3"),
        (DeviceConfig(learner_devices=3), 2, r"learner_devices=3 but only 2 local devices are free"),
        (DeviceConfig(learner_devices=4, inference_device="separate"), 4, r"only 3 .* 1 kept for inference"),
    ],
)
def test_device_choices_that_do_not_fit_the_machine(config, count, match):
    with pytest.raises(ValueError, match=match):
        sharding.split_devices(config, _fake_devices(count))


def test_device_split_follows_the_config():
    d = _fake_devices(4)
    assert sharding.split_devices(DeviceConfig(), d) == (tuple(d), d[0])
    assert sharding.split_devices(DeviceConfig(learner_devices=2), d) == ((d[0], d[1]), d[0])
    assert sharding.split_devices(DeviceConfig(inference_device="separate"), d) == ((d[1], d[2], d[3]), d[0])
    assert sharding.split_devices(DeviceConfig(learner_devices=2, inference_device="1"), d) == ((d[0], d[2]), d[1])


def test_host_config_checks_batch_split_and_distributed_use():
    with pytest.raises(ValueError, match=r"batch_size 30 does not split evenly over devices.learner_devices=4"):
        HostConfig(batch_size=30, devices=DeviceConfig(learner_devices=4))
    multi = DistributedConfig(coordinator="127.0.0.1:1234", num_processes=2)
    with pytest.raises(ValueError, match="--learn is false"):
        HostConfig(learn=False, distributed=multi)
    with pytest.raises(ValueError, match="league play with a multi-process learner is not supported"):
        HostConfig(distributed=multi, league=LeagueLinkConfig(address="x:1", pool_dir="/tmp/pool"))


def test_one_device_layout_is_the_plain_single_device_path():
    layout = sharding.make_layout(DeviceConfig(), batch_size=3)
    assert layout.trivial and not layout.multi_process
    assert layout.inference_device == jax.devices()[0] and layout.num_learner_devices == 1
    with pytest.raises(ValueError, match="needs 2 or more local devices"):
        Host(HostConfig(devices=DeviceConfig(inference_device="separate")), Metrics())


# --- several devices: tests/sharding_checks.py in a 4-device subprocess ----------------


def _check_names():
    with open(CHECKS) as f:
        tree = ast.parse(f.read())
    return [node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]


@pytest.fixture(scope="module")
def four_device_results(tmp_path_factory):
    """{test id: (outcome, message)} of tests/sharding_checks.py run once with 4 simulated CPU devices."""
    report = tmp_path_factory.mktemp("four") / "junit.xml"
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", CHECKS, f"--junitxml={report}"],
                         cwd=ROOT, env=FOUR_DEVICES, capture_output=True, text=True, timeout=600)
    if not report.exists():
        pytest.fail(f"the 4-device checks did not run:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    results = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        problem = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
        text = "" if problem is None else problem.get("message", "") + (problem.text or "")
        results[case.get("name")] = ("passed" if problem is None else problem.tag, text)
    return results


@pytest.mark.parametrize("check", _check_names())
def test_on_four_simulated_devices(four_device_results, check):
    cases = {name: result for name, result in four_device_results.items() if name.split("[")[0] == check}
    assert cases, f"{check} did not run in the 4-device subprocess"
    failed = {name: result for name, result in cases.items() if result[0] != "passed"}
    assert not failed, "\n\n".join(f"{name}: {outcome}\n{text[-3000:]}" for name, (outcome, text) in failed.items())


# --- end to end: `seedleague train` with the Sebulba split ----------------------------


@pytest.mark.slow
def test_train_learns_on_two_devices_and_acts_on_a_separate_one(tmp_path):
    run_dir = str(tmp_path / "run")
    args = ["--log-level", "INFO", "train", "--env", "CartPole-v1", "--workers", "1", "--envs-per-worker", "8",
            "--run-dir", run_dir, "--devices.learner_devices", "2", "--devices.inference_device", "separate",
            "--max-learner-steps", "5", "--max-seconds", "150"] + TINY
    result = subprocess.run(SEEDLEAGUE + args, cwd=ROOT, env=FOUR_DEVICES, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    assert summary["reason"] == "reached 5 learner steps" and summary["env_steps"] > 0, summary
    assert str(summary["learner_step"]) in os.listdir(os.path.join(run_dir, "checkpoints"))
    # saved from one device, so it loads in this one-device process (devices 1 and 2 do not exist here)
    policy = load_policy(run_dir)
    assert policy.act(np.zeros((2, 4), np.float32)).shape == (2,)


def test_train_refuses_device_configs_that_do_not_fit(tmp_path, capsys):
    base = ["train", "--env", "CartPole-v1", "--workers", "0", "--run-dir", str(tmp_path / "run"), "--max-seconds", "5"]
    # in this process (one device, as the process it replaced): the batch's split is refused before devices count
    uneven = seedleague_here(capsys, *base, "--batch_size", "6", "--devices.learner_devices", "4")
    assert uneven.returncode == 2 and "batch_size 6 does not split evenly" in uneven.stderr, uneven.stderr[-2000:]
    too_many = subprocess.run(SEEDLEAGUE + base + ["--batch_size", "8", "--devices.learner_devices", "4",
                                                   "--devices.inference_device", "separate"],
                              cwd=ROOT, env=FOUR_DEVICES, capture_output=True, text=True, timeout=120)
    assert too_many.returncode == 2 and "only 3 local devices are free" in too_many.stderr, too_many.stderr[-2000:]
