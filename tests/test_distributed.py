"""A learner spread over two processes with jax.distributed (CPU, gloo collectives), on this machine.

Each process sees 2 simulated CPU devices, so the learner mesh has 4 devices
over 2 processes. The processes must end every update with the same params,
and those must be the single-device update on the global batch.
"""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from seedleague.rl.learner import init_train_state, make_update
from seedleague.rl.learner_config import LearnerConfig
from tests.distributed_checks import STEPS, global_batches
from tests.test_learner import NETWORKS
from tests.conftest import free_port, xla_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TWO_DEVICES = dict(os.environ, XLA_FLAGS=xla_flags("--xla_force_host_platform_device_count=2"), JAX_PLATFORMS="cpu")
SEEDLEAGUE = [sys.executable, "-m", "seedleague.cli"]
TINY = ["--unroll_length", "8", "--batch_size", "4", "--network.hidden_sizes", "16", "--replay.capacity", "64"]


def run_pair(commands, logs, timeout):
    """Start both processes, wait for both; kill the other if one fails (it would wait for its peer)."""
    procs = [subprocess.Popen(c, cwd=ROOT, env=TWO_DEVICES, stdout=open(log, "w"), stderr=subprocess.STDOUT)
             for c, log in zip(commands, logs)]
    try:
        for proc in procs:
            proc.wait(timeout=timeout)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    outputs = [open(log).read() for log in logs]
    for proc, out in zip(procs, outputs):
        assert proc.returncode == 0, "\n".join(line for line in out.splitlines() if "Gloo" not in line)[-4000:]
    return outputs


LOSSES = ("vtrace", "ppo")


@pytest.fixture(scope="module")
def two_process_updates(tmp_path_factory):
    """Both processes' saved updates, {loss/step{k}_leaf{i}: array}, from one pair that makes every loss's updates
    in turn (starting and joining a pair costs more than the updates)."""
    tmp_path = tmp_path_factory.mktemp("distributed")
    address = f"127.0.0.1:{free_port()}"
    outs = [tmp_path / f"p{i}.npz" for i in range(2)]
    # Different init seeds: process 0's params are broadcast, so both start from seed 0's.
    commands = [[sys.executable, "tests/distributed_checks.py", "--coordinator", address, "--process-id", str(i),
                 "--losses", ",".join(LOSSES), "--seed", str(7 * i), "--out", str(outs[i])] for i in range(2)]
    run_pair(commands, [tmp_path / f"p{i}.log" for i in range(2)], timeout=240)
    return [dict(np.load(out)) for out in outs]


@pytest.mark.parametrize("loss", LOSSES)
def test_two_processes_make_the_single_device_update_on_the_global_batch(two_process_updates, loss):
    first, second = ({key[len(loss) + 1:]: value for key, value in saved.items() if key.startswith(f"{loss}/")}
                     for saved in two_process_updates)
    assert first and first.keys() == second.keys() and int(first["step"]) == STEPS
    for key in first:  # identical on both processes after every update
        np.testing.assert_array_equal(first[key], second[key], err_msg=key)

    network, config = NETWORKS[8], LearnerConfig(loss=loss)
    state, update = init_train_state(config, network, jax.random.key(0)), make_update(config, network)
    for step, batch in enumerate(global_batches(network)):
        state, metrics = update(state, batch)
        for i, leaf in enumerate(jax.tree.leaves(state.params)):
            np.testing.assert_allclose(first[f"step{step}_leaf{i}"], np.asarray(leaf), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(first[f"step{step}_loss"], float(metrics["total_loss"]), rtol=1e-5)


@pytest.mark.slow
def test_two_host_processes_train_as_one_learner(tmp_path):
    """`seedleague train` twice, each with its own worker; one learner, one shared checkpoint directory."""
    address = f"127.0.0.1:{free_port()}"
    checkpoints = str(tmp_path / "checkpoints")
    commands = [SEEDLEAGUE + [
        "train", "--env", "CartPole-v1", "--workers", "1", "--envs-per-worker", "4",
        "--run-dir", str(tmp_path / f"run{i}"), "--checkpoint.directory", checkpoints,
        "--distributed.coordinator", address, "--distributed.num_processes", "2", "--distributed.process_id", str(i),
        "--max-learner-steps", "5", "--max-seconds", "150"] + TINY for i in range(2)]
    run_pair(commands, [tmp_path / f"host{i}.log" for i in range(2)], timeout=300)
    summaries = []
    for i in range(2):
        with open(tmp_path / f"run{i}" / "summary.json") as f:
            summaries.append(json.load(f))
    for summary in summaries:
        assert summary["reason"] == "reached 5 learner steps" and summary["env_steps"] > 0, summary
    # lockstep: both stopped at the same update, and saved it together
    step = summaries[0]["learner_step"]
    assert step == summaries[1]["learner_step"] and str(step) in os.listdir(checkpoints)
    # the saved state is one global array per leaf, replicated over both processes' 2 devices
    with open(os.path.join(checkpoints, str(step), "state", "_sharding")) as f:
        meshes = {tuple(d["id"] for d in json.loads(v)["device_mesh"]["mesh"]) for v in json.load(f).values()}
    assert len(meshes) == 1 and len(meshes.pop()) == 4, meshes
