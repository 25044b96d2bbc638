"""`seedleague serve`: a saved checkpoint answers an unchanged worker, with no learning and no new checkpoints."""

import os
import signal
import subprocess
import sys

import dataclasses

import numpy as np
import pytest

from conftest import RawWorker
from seedleague.checkpoint import CheckpointConfig
from seedleague.host.host import Host, HostConfig
from seedleague.metrics import Metrics
from seedleague.protocol.specs import EnvSpec
from seedleague.rl.learner import LearnerConfig
from test_api import SMALL, head_params, save_checkpoint
from test_e2e import SEEDLEAGUE, TINY, free_port, run_cli, summary, wait_for


def test_serve_answers_a_worker_from_a_saved_checkpoint(tmp_path):
    run_dir = str(tmp_path / "train")
    run_cli(["train", "--env", "CartPole-v1", "--workers", "1", "--envs-per-worker", "4", "--run-dir", run_dir,
             "--max-learner-steps", "3", "--max-seconds", "120"] + TINY)
    checkpoints = os.path.join(run_dir, "checkpoints")
    saved = sorted(os.listdir(checkpoints))
    newest = max(int(d) for d in saved if d.isdigit())

    port = free_port()
    log_path = tmp_path / "serve.log"
    serve = subprocess.Popen(
        SEEDLEAGUE + ["serve", "--checkpoint", run_dir, "--address", f"127.0.0.1:{port}", "--run-dir",
                      str(tmp_path / "serve"), "--greedy", "true"],
        stdout=open(log_path, "w"), stderr=subprocess.STDOUT,
    )
    try:
        wait_for(lambda: "listening" in log_path.read_text(), 60, "the serving host")
        # the unchanged gym worker plays against it
        worker = subprocess.run(
            [sys.executable, "-m", "envs.gym_worker", "--address", f"127.0.0.1:{port}", "--env", "CartPole-v1",
             "--num-envs", "4", "--max-steps", "400"],
            capture_output=True, text=True, timeout=60,
        )
        assert worker.returncode == 0, worker.stdout[-2000:] + worker.stderr[-2000:]
        # every answer carries the checkpoint's policy version: the params come from it and never change
        raw = RawWorker(f"127.0.0.1:{port}", EnvSpec("CartPole-v1", (4,), np.float32, 2, 1))
        assert {raw.step().policy_version for _ in range(3)} == {newest}
        raw.close()
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(60) == 0
    finally:
        if serve.poll() is None:
            serve.kill()
    served = summary(str(tmp_path / "serve"))
    assert 400 <= served["env_steps"] <= 420  # counts only what it served, not the training run's steps
    assert served["learner_steps"] == 0 and served["learner_step"] == 0
    assert sorted(os.listdir(checkpoints)) == saved  # serving wrote nothing


def test_serving_the_param_average_acts_with_it_and_a_checkpoint_without_one_is_refused(tmp_path):
    averaging = LearnerConfig(average_from=1)
    state = save_checkpoint(tmp_path / "avg", step=5, network=SMALL, learner=averaging,
                            average=(head_params(save_checkpoint(tmp_path / "other", seed=7).params, 0.0, [3.0, -3.0]), 4))
    config = HostConfig(learn=False, serve_param_average=True, network=SMALL,
                        checkpoint=CheckpointConfig(directory=str(tmp_path / "avg")))
    host = Host(config, Metrics(), resume=True)
    try:
        params, version = host.pipeline.policy.current()
        assert version == 5
        np.testing.assert_array_equal(np.asarray(params["params"]["policy_head"]["bias"]), [3.0, -3.0])
        assert not np.array_equal(np.asarray(state.params["params"]["policy_head"]["bias"]), [3.0, -3.0])
    finally:
        host.stop()
    save_checkpoint(tmp_path / "plain", step=2, network=SMALL)
    with pytest.raises(ValueError, match="holds no param average"):
        Host(dataclasses.replace(config, checkpoint=CheckpointConfig(directory=str(tmp_path / "plain"))), Metrics(),
             resume=True)
    with pytest.raises(ValueError, match="serve_param_average applies to serving"):
        HostConfig(serve_param_average=True)
