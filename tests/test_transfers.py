"""seedleague.host.transfers: the host copies each batch to the accelerator once and its outputs back once.

JAX raises on any implicit host-to-device copy under `jax.transfer_guard_host_to_device("disallow")`, on a
CPU as on a GPU, so these tests prove there are none on the paths they drive; the counts prove one explicit
copy per batch each way. (The device-to-host guard only bites on a GPU: tests/test_gpu.py checks that side.)
"""

import contextlib

import jax
import numpy as np
import pytest

from conftest import RawWorker, serve_host, vector_spec
from seedleague.host.policy import InferencePolicy, stack_params
from seedleague.host.replay import Replay
from seedleague.host.replay_config import ReplayConfig
from seedleague.host.transfers import TransferCounts, Transfers
from seedleague.protocol.client import ClientConfig
from seedleague.protocol.client_v2 import NamedWorkerClient
from seedleague.protocol.named import zero_named_step
from seedleague.rl.networks import make_network
from seedleague.rl.network_config import NetworkConfig
from seedleague.rl.named_network import NamedNetwork
from test_replay import rows


@contextlib.contextmanager
def no_implicit_copies_to_the_device(option: str = "jax_transfer_guard_host_to_device"):
    """The guard for every thread (the host's batcher and learner too), not only this one. `option`
    "jax_transfer_guard_device_to_host" or "jax_transfer_guard" guards the way back too (bites on a GPU only)."""
    before = getattr(jax.config, option)
    jax.config.update(option, "disallow")
    try:
        yield
    finally:
        jax.config.update(option, before)


def test_the_guard_catches_an_implicit_copy():  # so that the tests below can fail
    with no_implicit_copies_to_the_device(), pytest.raises(Exception, match="Disallowed host-to-device transfer"):
        jax.jit(lambda x: x + 1)(np.ones(3, np.float32))


def test_one_call_each_way_carries_the_whole_tree():
    transfers = Transfers()
    tree = (np.zeros((4, 3), np.float32), {"first": np.ones(4, bool), "none": ()}, np.arange(4, dtype=np.int32))
    with no_implicit_copies_to_the_device():
        on_device = transfers.to_device(tree)
    back = transfers.to_host(jax.tree.map(lambda x: x + x, on_device))
    assert all(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(on_device))
    assert all(isinstance(leaf, np.ndarray) for leaf in jax.tree.leaves(back))
    np.testing.assert_array_equal(back[2], [0, 2, 4, 6])
    assert back[1]["first"].dtype == bool
    buffers = 3  # one per array: only `Transfers.call` packs (tests/test_packing.py)
    assert transfers.counts() == TransferCounts(to_device=1, to_device_arrays=3, to_device_bytes=48 + 4 + 16,
                                                to_host=1, to_host_arrays=3, to_host_bytes=48 + 4 + 16,
                                                to_device_buffers=buffers, to_host_buffers=buffers)


@pytest.mark.parametrize("device", [None, jax.devices()[-1]], ids=["default device", "named device"])
def test_on_a_cpu_the_copy_is_one_explicit_call_onto_the_named_device(device):
    transfers = Transfers(device)
    tree = {"observation": np.arange(12, dtype=np.float32).reshape(4, 3), "step": np.float32(2.5), "none": ()}
    with no_implicit_copies_to_the_device():
        on_device = transfers.to_device(tree)
    np.testing.assert_array_equal(on_device["observation"], tree["observation"])
    assert float(on_device["step"]) == 2.5 and on_device["none"] == ()
    assert on_device["observation"].devices() == {device or jax.devices()[0]}
    assert transfers.counts().to_device == 1


def _policy(lstm_size: int = 0) -> InferencePolicy:
    network = make_network(NetworkConfig(torso="mlp", hidden_sizes=(8,), lstm_size=lstm_size), (3,),
                           np.dtype(np.float32), 2)
    return InferencePolicy(network, network.init(jax.random.key(0)), version=0, seed=0,
                           device=jax.devices()[0])


def _batch(n: int, policy: InferencePolicy):
    return (np.ones((n, 3), np.float32), np.ones(n, bool), policy.network.initial_state(n), np.ones((n, 2), bool))


@pytest.mark.parametrize("lstm_size", [0, 4])
def test_a_forward_pass_copies_its_batch_in_once_and_its_outputs_out_once(lstm_size):
    policy = _policy(lstm_size)
    core_leaves = len(jax.tree.leaves(policy.network.initial_state(4)))
    with no_implicit_copies_to_the_device():
        for _ in range(3):
            out = policy.act(*_batch(4, policy))
        values = policy.values(*_batch(4, policy)[:3])
    assert out.action.shape == (4,) and isinstance(out.action, np.ndarray) and values.shape == (4,)
    counts = policy.transfers.counts()
    assert (counts.to_device, counts.to_host) == (4, 4)
    assert counts.to_device_arrays == 3 * (3 + core_leaves) + (2 + core_leaves)
    assert counts.to_host_arrays == 3 * (2 + core_leaves) + 1
    if policy.transfers.packed:  # on an accelerator: one buffer a call each way
        assert (counts.to_device_buffers, counts.to_host_buffers) == (4, 4)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the CPU path: numpy inputs go into the pass's own call")
@pytest.mark.parametrize("device", [None, jax.devices()[-1]], ids=["default device", "named device"])
def test_on_a_cpu_a_forward_pass_is_one_jitted_call_on_its_device(device, monkeypatch):
    network = make_network(NetworkConfig(torso="mlp", hidden_sizes=(8,)), (3,), np.dtype(np.float32), 2)
    policy = InferencePolicy(network, network.init(jax.random.key(0)), version=0, seed=0, device=device)

    def second_dispatch(tree):
        raise AssertionError("the batch was copied by a jitted call of its own before the pass")

    monkeypatch.setattr(policy.transfers, "_host_memory_copy", second_dispatch)
    with no_implicit_copies_to_the_device():
        out = policy.act(*_batch(4, policy))
    assert out.action.shape == (4,) and set(out.action.tolist()) <= {0, 1}
    assert policy._rng.devices() == {device or jax.devices()[0]}  # the pass ran where its params and key are
    counts = policy.transfers.counts()
    assert (counts.to_device, counts.to_device_arrays, counts.to_host) == (1, 3, 1)


def test_a_batch_with_league_opponents_is_one_copy_each_way():
    policy = _policy()
    table = stack_params([policy.current()[0]] * 2)
    learner, opponents = _batch(3, policy), jax.tree.map(lambda x: np.stack([x, x]), _batch(3, policy))
    with no_implicit_copies_to_the_device():
        mine, theirs = policy.act_with_table(learner, table, np.array([1, 0], np.int32), opponents)
        alone = policy.act_table(table, np.array([0], np.int32), *jax.tree.map(lambda x: x[:1], opponents))
    assert mine.action.shape == (3,) and theirs.action.shape == (2, 3) and alone.action.shape == (1, 3)
    counts = policy.transfers.counts()
    assert (counts.to_device, counts.to_host) == (2, 2)


@pytest.mark.parametrize("in_host_memory", [False, True], ids=["buffer on the device", "buffer in host memory"])
def test_the_replay_copies_an_insert_once_and_a_sample_once(in_host_memory):
    replay = Replay(ReplayConfig(capacity=8), rows([0]), batch_size=2, in_host_memory=in_host_memory)
    with no_implicit_copies_to_the_device():
        assert replay.insert(rows([1, 2, 3]), timeout=1) == 3
        batch = replay.sample(timeout=1)
    assert sorted(np.asarray(batch.reward)[:, 0].tolist())[0] >= 1.0
    assert all(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(batch))
    counts = replay.transfers.counts()
    leaves = len(jax.tree.leaves(rows([1])))
    if in_host_memory:  # a numpy write per insert; a sample copies its gathered rows
        assert (counts.to_device, counts.to_device_arrays, counts.to_host) == (1, leaves, 0)
    else:  # the rows and their slots in; a sample's indices
        assert (counts.to_device, counts.to_device_arrays, counts.to_host) == (2, leaves + 1 + 1, 0)


def test_the_replay_keeps_its_buffer_in_host_memory_exactly_on_a_cpu():
    replay = Replay(ReplayConfig(capacity=8), rows([0]), batch_size=2)
    assert replay.in_host_memory == (jax.default_backend() == "cpu")


def test_a_learning_host_trains_without_an_implicit_copy(host_server):
    trains_without_an_implicit_copy(*host_server, "jax_transfer_guard_host_to_device")


def test_a_named_learning_host_trains_without_an_implicit_copy(named_host_server):
    trains_without_an_implicit_copy(*named_host_server, "jax_transfer_guard_host_to_device")
    assert isinstance(named_host_server[0].pipeline.network, NamedNetwork)  # the v2 path ran


@pytest.fixture
def named_host_server():
    """(host, server) for the protocol v2 host of tests/test_host_named.py (named tensors, two heads)."""
    from test_host_named import CONFIG

    yield from serve_host(CONFIG)


def _vector_worker(address: str):
    """A v1 worker: a step function that says whether the host answered with actions, and its close."""
    worker = RawWorker(address, vector_spec())
    return (lambda: worker.step().HasField("action")), worker.close


def _named_worker(address: str):
    """A protocol v2 worker (dict observations, a discrete and a continuous head), as _vector_worker."""
    from test_host_named import SPEC

    client = NamedWorkerClient(ClientConfig(address, connect_timeout_s=60), SPEC)
    client.connect()
    step = zero_named_step(SPEC)

    def act() -> bool:
        actions = client.step(step.observation, np.ones((SPEC.num_envs, 1)), np.zeros(SPEC.num_envs, bool),
                              np.zeros(SPEC.num_envs, bool), step.legal_mask)
        return sorted(actions) == ["aim", "move"]

    return act, client.close


def trains_without_an_implicit_copy(host, server, guard: str) -> None:
    """A worker steps a learning host until it has made 3 updates, all under the transfer guard `guard`.
    The worker speaks the host's protocol: v2 where the host was built for a named spec."""
    from test_host_named import CONFIG as NAMED

    connect = _named_worker if host.config is NAMED else _vector_worker
    step, close = connect(server.address)
    step()  # the first handshake and step build the model (outside the guard)
    learner = host.pipeline.learner
    failed = False
    with no_implicit_copies_to_the_device(guard):
        while host.metrics.learner_steps < 3 and not failed:
            failed = not step()
    close()
    assert not failed and learner.error is None
    counts = learner.transfers.counts()
    # per update: its clock in, its step and metrics out (the latest update may be between the two)
    assert counts.to_host >= 3 and counts.to_device - counts.to_host in (0, 1)
    assert host.pipeline.policy.transfers.counts().to_device >= 3
