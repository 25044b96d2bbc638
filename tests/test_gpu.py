"""Checks that only mean something on an accelerator: run where JAX sees a GPU, skipped elsewhere."""

import jax
import numpy as np
import pytest

from seedleague.host.replay import Replay
from seedleague.host.replay_config import ReplayConfig
from test_replay import rows
from test_transfers import named_host_server  # noqa: F401 (a fixture)


@pytest.mark.gpu
def test_replay_and_sampled_batches_live_on_the_gpu():
    replay = Replay(ReplayConfig(capacity=8), rows([0]), batch_size=2)
    replay.insert(rows([1, 2]), timeout=1)
    batch = replay.sample(timeout=1)
    for leaf in jax.tree.leaves(batch):
        assert {d.platform for d in leaf.devices()} == {"gpu"}
    assert sorted(np.asarray(batch.reward)[:, 0].tolist()) == [1.0, 2.0]


@pytest.mark.gpu
def test_host_inference_runs_on_the_gpu(host_server):
    from conftest import RawWorker, vector_spec

    host, server = host_server
    worker = RawWorker(server.address, vector_spec())
    worker.step()
    params, _ = host.pipeline.policy.current()
    assert {d.platform for leaf in jax.tree.leaves(params) for d in leaf.devices()} == {"gpu"}
    worker.close()


@pytest.mark.gpu
def test_a_learning_host_on_the_gpu_copies_only_explicitly_both_ways(host_server):
    """Every host-device copy the batcher, replay and learner make is an explicit, counted one
    (seedleague.host.transfers): on a GPU, JAX's guard catches implicit copies back to the host too."""
    from test_transfers import trains_without_an_implicit_copy

    trains_without_an_implicit_copy(*host_server, "jax_transfer_guard")


@pytest.mark.gpu
def test_a_named_learning_host_on_the_gpu_copies_only_explicitly_both_ways(named_host_server):
    """The protocol v2 path (dict observations, a discrete and a continuous head) likewise."""
    from test_transfers import trains_without_an_implicit_copy

    trains_without_an_implicit_copy(*named_host_server, "jax_transfer_guard")
