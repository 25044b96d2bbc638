"""seedleague.host.pipeline: building the network, policy, replay and learner a host learns and acts with."""

import jax
import numpy as np


def test_building_a_pipeline_initialises_the_train_state_once(monkeypatch):
    # The learner's state and the state a reset returns to come from one init (the second is a copy).
    from seedleague.host import host as host_module
    from seedleague.host import pipeline as pipeline_module
    from seedleague.metrics import Metrics
    from seedleague.protocol.specs import EnvSpec

    calls = []
    real = pipeline_module.init_train_state
    monkeypatch.setattr(pipeline_module, "init_train_state", lambda *a, **k: calls.append(1) or real(*a, **k))
    from seedleague.host.replay import ReplayConfig

    host = host_module.Host(host_module.HostConfig(batch_size=2, replay=ReplayConfig(capacity=4)), Metrics())
    try:
        pipeline = host._build_pipeline(EnvSpec("t", (3,), np.float32, 2, 1))
        assert len(calls) == 1
        live = jax.tree.leaves(pipeline.learner.state.params)[0]
        assert live is not jax.tree.leaves(pipeline.initial_state.params)[0]  # separate buffers: updates donate
    finally:
        host.stop()


def test_a_multi_process_learner_refuses_an_anneal_over_time():
    import pytest

    from seedleague.host.host import HostConfig
    from seedleague.rl.learner import LearnerConfig
    from seedleague.rl.sharding import DistributedConfig

    with pytest.raises(ValueError, match="different clock in each process"):
        HostConfig(learner=LearnerConfig(anneal_seconds=60.0),
                   distributed=DistributedConfig(coordinator="127.0.0.1:1234", num_processes=2, process_id=0))
