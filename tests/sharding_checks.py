"""Checks that need 4 devices; tests/test_sharding.py runs this file in a subprocess under

    XLA_FLAGS=--xla_force_host_platform_device_count=4

(JAX fixes its device count when it starts, and the rest of the suite runs with
one device). Not collected on its own: the name does not start with test_.
"""

import dataclasses
import time

import jax
import numpy as np
import pytest

from tests.conftest import SMALL_HOST, RawWorker, vector_spec
from tests.test_learner import NETWORKS, _synthetic_batch
from seedleague.host.host import Host
from seedleague.host.policy import InferencePolicy
from seedleague.host.replay import Replay
from seedleague.host.replay_config import ReplayConfig
from seedleague.metrics import Metrics
from seedleague.protocol import codec
from seedleague.rl import sharding
from seedleague.rl.learner import init_train_state, make_sharded_update, make_update
from seedleague.rl.learner_config import LearnerConfig
from seedleague.rl.device_config import DeviceConfig
from seedleague.testing.server_thread import ServerThread

pytestmark = pytest.mark.skipif(jax.device_count() < 4, reason="needs 4 devices: run through tests/test_sharding.py")

TIGHT = dict(rtol=1e-5, atol=1e-6)


def _assert_trees_close(a, b):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), **TIGHT), a, b)


@pytest.mark.parametrize("loss, lstm_size", [("vtrace", 8), ("ppo", 0)], ids=["vtrace-lstm", "ppo-mlp"])
def test_sharded_update_equals_the_single_device_update(loss, lstm_size):
    network, config = NETWORKS[lstm_size], LearnerConfig(loss=loss)
    layout = sharding.make_layout(DeviceConfig(learner_devices=4), batch_size=8)
    assert layout.num_learner_devices == 4
    batches = [_synthetic_batch(network, batch=8, seed=seed) for seed in range(4)]
    single = init_train_state(config, network, jax.random.key(0))
    sharded = sharding.place_state(init_train_state(config, network, jax.random.key(0)), layout)
    update_one, update_four = make_update(config, network), make_sharded_update(config, network, layout.mesh)
    for step, batch in enumerate(batches):
        single, metrics_one = update_one(single, batch)
        sharded, metrics_four = update_four(sharded, sharding.shard_batch(batch, layout.batch_sharding))
        _assert_trees_close(single.params, sharded.params)  # after one step, and after each further one
        _assert_trees_close(metrics_one, metrics_four)
    _assert_trees_close(single.opt_state, sharded.opt_state)
    assert int(sharded.step) == len(batches)
    leaf = jax.tree.leaves(sharded.params)[0]
    assert leaf.sharding.is_fully_replicated and len(leaf.sharding.device_set) == 4


def test_layouts_split_devices_as_configured():
    devices = jax.local_devices()
    shared = sharding.make_layout(DeviceConfig())
    assert shared.local_learner_devices == tuple(devices) and shared.inference_device == devices[0]
    separate = sharding.make_layout(DeviceConfig(learner_devices=2, inference_device="separate"), batch_size=4)
    assert separate.local_learner_devices == (devices[1], devices[2]) and separate.inference_device == devices[0]
    explicit = sharding.make_layout(DeviceConfig(inference_device="3"), batch_size=6)
    assert explicit.local_learner_devices == tuple(devices[:3]) and explicit.inference_device == devices[3]
    with pytest.raises(ValueError, match="batch_size 6 does not split evenly over this process's 4 learner devices"):
        sharding.make_layout(DeviceConfig(), batch_size=6)
    with pytest.raises(ValueError, match="only 3 local devices are free"):
        sharding.make_layout(DeviceConfig(learner_devices=4, inference_device="separate"))


def test_replay_batches_come_back_split_over_the_learner_devices():
    network = NETWORKS[8]
    layout = sharding.make_layout(DeviceConfig(learner_devices=2, inference_device="separate"), batch_size=4)
    rows = _synthetic_batch(network, batch=4)
    example = jax.tree.map(lambda x: np.asarray(x)[:1], rows)
    for in_host_memory in (False, True):
        replay = Replay(ReplayConfig(capacity=16), example, batch_size=4, batch_sharding=layout.batch_sharding,
                        in_host_memory=in_host_memory)
        if not in_host_memory:
            assert jax.tree.leaves(replay._buffer)[0].devices() == {layout.local_learner_devices[0]}
        assert replay.insert(rows, timeout=5) == 4
        batch = replay.sample(timeout=5)
        for leaf in jax.tree.leaves(batch):
            assert leaf.sharding == layout.batch_sharding and leaf.shape[0] == 4
            assert {s.data.shape[0] for s in leaf.addressable_shards} == {2}
        np.testing.assert_array_equal(np.asarray(batch.observation), rows.observation)  # fifo: the rows as inserted
    with pytest.raises(ValueError, match="batch_size 3 does not split evenly"):
        Replay(ReplayConfig(capacity=16), example, batch_size=3, batch_sharding=layout.batch_sharding)


def test_inference_copy_survives_donation_and_acts_on_its_device():
    network, config = NETWORKS[0], LearnerConfig()
    layout = sharding.make_layout(DeviceConfig(learner_devices=2, inference_device="separate"), batch_size=4)
    state = sharding.place_state(init_train_state(config, network, jax.random.key(0)), layout)
    params = sharding.copy_to_device(state.params, layout.inference_device)
    expected = jax.tree.map(np.asarray, params)
    update = make_sharded_update(config, network, layout.mesh)
    state, _ = update(state, sharding.shard_batch(_synthetic_batch(network, batch=4), layout.batch_sharding))
    _assert_trees_close(params, expected)  # the update donated the old state; the copy is untouched
    assert all(leaf.devices() == {layout.inference_device} for leaf in jax.tree.leaves(params))
    policy = InferencePolicy(network, params, 0, seed=0, device=layout.inference_device)
    out = policy.act(np.zeros((4, 3), np.float32), np.ones(4, bool), (), np.ones((4, 3), bool))
    assert out.action.shape == (4,) and set(out.action) <= {0, 1, 2}
    assert policy._rng.devices() == {layout.inference_device}


def test_host_learns_on_two_devices_and_acts_on_a_third():
    config = dataclasses.replace(SMALL_HOST, batch_size=4, devices=DeviceConfig(learner_devices=2, inference_device="3"))
    host = Host(config, Metrics())
    server = ServerThread(host).start()
    worker = RawWorker(server.address, vector_spec(num_envs=4))
    try:
        deadline = time.monotonic() + 60
        while (host.pipeline is None or host.pipeline.learner.step < 3) and time.monotonic() < deadline:
            codec.decode_actions(worker.step())
        assert host.pipeline.learner.step >= 3, "the learner made no updates"
        layout = host.layout
        assert layout.inference_device == jax.local_devices()[3]
        params, version = host.pipeline.policy.current()
        assert version >= 1 and all(leaf.devices() == {layout.inference_device} for leaf in jax.tree.leaves(params))
        state_leaf = jax.tree.leaves(host.pipeline.learner.state.params)[0]
        assert state_leaf.sharding.device_set == set(jax.local_devices()[:2])
        assert host.pipeline.learner.error is None
    finally:
        worker.close()
        server.stop()
        host.stop()
