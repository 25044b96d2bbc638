"""seedleague.host.pipeline: building the network, policy, replay and learner a host learns and acts with."""

import jax
import numpy as np


def test_building_a_pipeline_initialises_the_train_state_once(monkeypatch):
    # The learner's state and the state a reset returns to come from one init (the second is a copy).
    from seedleague.host import host as host_module
    from seedleague.host import pipeline as pipeline_module
    from seedleague.metrics import Metrics
    from seedleague.protocol.named import named_of_v1
    from seedleague.protocol.specs import EnvSpec

    calls = []
    real = pipeline_module.init_train_state
    monkeypatch.setattr(pipeline_module, "init_train_state", lambda *a, **k: calls.append(1) or real(*a, **k))
    from seedleague.host.replay_config import ReplayConfig

    host = host_module.Host(host_module.HostConfig(batch_size=2, replay=ReplayConfig(capacity=4)), Metrics())
    try:
        pipeline = host._build_pipeline(named_of_v1(EnvSpec("t", (3,), np.float32, 2, 1)))
        assert len(calls) == 1
        live = jax.tree.leaves(pipeline.learner.state.params)[0]
        assert live is not jax.tree.leaves(pipeline.initial_state.params)[0]  # separate buffers: updates donate
    finally:
        host.stop()


def test_a_multi_process_learner_refuses_an_anneal_over_time():
    import pytest

    from seedleague.host.host import HostConfig
    from seedleague.rl.learner_config import LearnerConfig
    from seedleague.rl.device_config import DistributedConfig

    with pytest.raises(ValueError, match="different clock in each process"):
        HostConfig(learner=LearnerConfig(anneal_seconds=60.0),
                   distributed=DistributedConfig(coordinator="127.0.0.1:1234", num_processes=2, process_id=0))


def test_a_flat_model_fits_any_spec_of_its_shapes_and_a_named_network_only_its_own_tensors_and_heads():
    from seedleague.host.pipeline import spec_difference
    from seedleague.protocol.named import (ActionSpec, DiscreteHead, NamedEnvSpec, ObservationSpec, TensorSpec,
                                           named_of_v1)
    from seedleague.protocol.specs import EnvSpec

    def spec(tensors, heads):
        return NamedEnvSpec("g", ObservationSpec(tuple(tensors)), ActionSpec(tuple(heads)), num_envs=2)

    recorded = named_of_v1(EnvSpec("g", (3,), np.float32, 2, 1))  # a protocol-1 checkpoint's: no names, no masks
    worker = spec([TensorSpec("board", (3,), np.float32)], [DiscreteHead("move", 2, has_legal_mask=True)])
    assert spec_difference(worker, recorded) is None  # names and legal masks do not matter to the flat model
    wider = spec([TensorSpec("board", (4,), np.float32)], [DiscreteHead("move", 2)])
    assert spec_difference(wider, recorded) == "observation_shape is (4,) but the host's model was built for (3,)"
    more = spec([TensorSpec("board", (3,), np.float32)], [DiscreteHead("move", 3)])
    assert spec_difference(more, recorded) == "num_actions is 3 but the host's model was built for 2"
    two = spec([TensorSpec("board", (3,), np.float32), TensorSpec("flags", (2,), np.int32)], [DiscreteHead("move", 2)])
    assert spec_difference(two, recorded) == ("the worker's spec runs on the named network, the host's model is the "
                                              "flat model")
    renamed = spec([TensorSpec("cells", (3,), np.float32), TensorSpec("flags", (2,), np.int32)], [DiscreteHead("move", 2)])
    assert "observation is" in spec_difference(renamed, two)  # a named network's inputs are its tensors by name
    assert spec_difference(two, two) is None
