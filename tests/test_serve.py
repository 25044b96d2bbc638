"""Serving a checkpoint's param average. (`seedleague serve` answering an unchanged worker from a trained run's
checkpoint is in test_e2e.py, on the run its resume test trains.)"""

import dataclasses

import numpy as np
import pytest

from seedleague.checkpoint_config import CheckpointConfig
from seedleague.host.host import Host, HostConfig
from seedleague.metrics import Metrics
from seedleague.rl.learner_config import LearnerConfig
from test_api import SMALL, head_params, save_checkpoint


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
