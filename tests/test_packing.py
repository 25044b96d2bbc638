"""seedleague.host.packing, and Transfers with packing on: a tree crosses to the device and back as one buffer,
bit for bit, on a CPU as it will on a GPU."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seedleague.host import packing
from seedleague.host.transfers import Transfers
from seedleague.host.policy import stack_params
from conftest import serve_host
from test_transfers import _batch, _policy, no_implicit_copies_to_the_device, trains_without_an_implicit_copy


def _tree():
    """Every dtype the host sends, scalars, an empty leaf and an empty subtree."""
    return {
        "observation": np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5,
        "first": np.array([True, False, True]),
        "legal": np.array([[1, 0], [0, 1]], np.int8),
        "pixels": np.array([[0, 255, 7]], np.uint8),
        "ids": np.array([-1, 2**31 - 1], np.int32),
        "half": np.array([1.5, -0.25], np.float16),
        "bf16": np.array([3.0], jnp.bfloat16),
        "step": np.float32(2.5),
        "nothing": np.zeros((0, 4), np.float32),
        "core": (),
    }


def test_the_layout_aligns_each_leaf_by_hand():
    treedef = jax.tree.structure((0, 0, 0))
    layout = packing.Layout.of(treedef, [(2, 3), (3,), ()], [np.float32, np.bool_, np.int32])
    # 24 bytes -> 32; 3 bytes -> 16; 4 bytes -> 16
    assert layout.offsets == (0, 32, 48) and layout.size == 64
    assert [layout.nbytes(i) for i in range(3)] == [24, 3, 4]


def test_host_pack_and_unpack_round_trip_without_copies():
    arrays, treedef = packing.host_leaves(_tree())
    layout = packing.Layout.of(treedef, [a.shape for a in arrays], [a.dtype for a in arrays])
    buffer = packing.pack_on_host(layout, arrays)
    assert buffer.dtype == np.uint8 and buffer.shape == (layout.size,)
    back = packing.unpack_on_host(layout, buffer)
    _assert_same(back, _tree())
    assert np.shares_memory(back["observation"], buffer)  # views of the one buffer


def test_float64_and_int64_become_what_device_put_would_make_them():
    arrays, _ = packing.host_leaves((np.ones(2, np.float64), np.arange(2, dtype=np.int64)))
    expected = [jax.device_put(np.ones(2, np.float64)).dtype, jax.device_put(np.arange(2, dtype=np.int64)).dtype]
    assert [a.dtype for a in arrays] == expected


@pytest.mark.parametrize("jitted", [True, False])
def test_device_unpack_and_pack_are_exact_inverses_of_the_host_side(jitted):
    arrays, treedef = packing.host_leaves(_tree())
    layout = packing.Layout.of(treedef, [a.shape for a in arrays], [a.dtype for a in arrays])
    buffer = packing.pack_on_host(layout, arrays)
    unpack, pack = (lambda b: packing.unpack(layout, b)), packing.pack
    if jitted:
        unpack, pack = jax.jit(unpack), jax.jit(pack)
    on_device = unpack(jnp.asarray(buffer))
    _assert_same(jax.device_get(on_device), _tree())
    assert packing.Layout.of_tree(on_device) == layout
    np.testing.assert_array_equal(np.asarray(pack(on_device)), buffer)  # padding included: zeros both ways


def _double(on_device, inputs, scale):
    """A `Transfers.call` function: every input times `scale`, and a counter kept on the device."""
    counter, = on_device
    return jax.tree.map(lambda x: (x * scale).astype(x.dtype), inputs), counter + 1


@pytest.mark.parametrize("packed", [True, False])
def test_a_call_copies_one_buffer_each_way_when_packed(packed):
    transfers = Transfers(jax.devices()[0], packed=packed)
    tree = {key: value for key, value in _tree().items() if key not in ("bf16", "first")}
    counter = jnp.zeros((), jnp.int32)
    with no_implicit_copies_to_the_device():
        for _ in range(2):
            out, counter = transfers.call(_double, (counter,), tree, scale=2)
    assert int(counter) == 2 and all(isinstance(leaf, np.ndarray) for leaf in jax.tree.leaves(out))
    _assert_same(out, jax.tree.map(lambda x: (np.asarray(x) * 2).astype(np.asarray(x).dtype), tree))
    counts, leaves = transfers.counts(), len(jax.tree.leaves(tree))
    assert (counts.to_device, counts.to_host) == (2, 2)
    assert counts.to_device_arrays == counts.to_host_arrays == 2 * leaves
    assert counts.to_device_buffers == counts.to_host_buffers == (2 if packed else 2 * leaves)
    payload = sum(np.asarray(leaf).nbytes for leaf in jax.tree.leaves(tree))
    assert counts.to_device_bytes == counts.to_host_bytes == 2 * payload


def _keep(on_device, inputs):
    (total,), (rows,) = on_device, inputs
    return (), total + rows.sum()


def test_inputs_with_a_large_array_are_copied_one_array_at_a_time():
    transfers = Transfers(jax.devices()[0], packed=True)
    small = {"first": np.ones(3, bool), "legal": np.ones((3, 2), np.int8)}
    large = dict(small, frames=np.ones(packing.LARGE_LEAF_BYTES, np.uint8))  # exactly the threshold
    counter = jnp.zeros((), jnp.int32)
    with no_implicit_copies_to_the_device():
        out, counter = transfers.call(_double, (counter,), small, scale=3)
        assert transfers.counts().to_device_buffers == 1
        out, counter = transfers.call(_double, (counter,), large, scale=3)
    assert transfers.counts().to_device_buffers == 1 + 3 and transfers.counts().to_host_buffers == 1 + 3
    assert int(out["frames"][-1]) == 3 and out["first"].dtype == bool


@pytest.mark.parametrize("packed", [True, False])
def test_a_call_with_no_outputs_fetches_nothing_and_can_donate(packed):
    transfers = Transfers(jax.devices()[0], packed=packed)
    total = jnp.zeros((), jnp.float32)
    out, total = transfers.call(_keep, (total,), (np.ones(3, np.float32),), donate=True)
    assert out == () and float(total) == 3.0 and transfers.counts().to_host == 0


def _tile(on_device, inputs):
    """Breaks `Transfers.call`'s contract: the output's shape follows from `on_device`'s."""
    table, = on_device
    return jnp.tile(inputs[0], table.shape[0]), ()


def test_outputs_shaped_by_what_stays_on_the_device_are_refused_not_misread():
    transfers = Transfers(jax.devices()[0], packed=True)
    inputs = (np.ones(4, np.float32), np.ones(4, bool))
    assert transfers.call(_tile, (jnp.zeros(2),), inputs)[0].shape == (8,)
    with pytest.raises(ValueError, match="_tile returned 64 packed bytes where inputs of these shapes gave 32"):
        transfers.call(_tile, (jnp.zeros(4),), inputs)


def test_the_default_packs_exactly_off_the_cpu():
    assert Transfers(jax.devices()[0]).packed is (jax.devices()[0].platform != "cpu")


@pytest.mark.parametrize("lstm_size", [0, 4])
def test_a_packed_forward_pass_gives_what_an_unpacked_one_gives(lstm_size):
    plain, packed = _policy(lstm_size), _policy(lstm_size)
    packed.transfers = Transfers(packed.device, packed=True)
    with no_implicit_copies_to_the_device():
        for _ in range(2):
            expected, got = plain.act(*_batch(4, plain)), packed.act(*_batch(4, packed))
    _assert_same(got, expected)
    assert packed.transfers.counts().to_device_buffers == packed.transfers.counts().to_host_buffers == 2


def test_packed_league_passes_and_values_give_what_unpacked_ones_give():
    plain, packed = _policy(), _policy()
    packed.transfers = Transfers(packed.device, packed=True)
    table = stack_params([plain.current()[0]] * 2)
    learner, opponents = _batch(3, plain), jax.tree.map(lambda x: np.stack([x, x]), _batch(3, plain))
    slots = np.array([1, 0], np.int32)
    with no_implicit_copies_to_the_device():
        results = [(policy.act_with_table(learner, table, slots, opponents),
                    policy.act_table(table, slots, *opponents), policy.act_stacked(table, *opponents),
                    policy.values(*learner[:3])) for policy in (plain, packed)]
    _assert_same(results[1], results[0])
    assert packed.transfers.counts().to_device_buffers == 4


def _assert_same(got, expected):
    assert jax.tree.structure(got) == jax.tree.structure(expected)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


@pytest.fixture
def host_as_on_an_accelerator(monkeypatch):
    """(host, server) for the small learning host built as on a GPU, on this CPU: the replay's ring on the device,
    and every forward pass and replay insert packed. CI has no GPU; this is the accelerator's host path it runs."""
    import seedleague.host.replay as replay_module
    import seedleague.host.transfers as transfers_module

    monkeypatch.setattr(transfers_module, "is_cpu", lambda device: False)
    monkeypatch.setattr(replay_module, "is_cpu", lambda device: False)
    yield from serve_host()


def test_a_host_built_as_on_an_accelerator_trains_with_one_buffer_each_way(host_as_on_an_accelerator):
    host, server = host_as_on_an_accelerator
    trains_without_an_implicit_copy(host, server, "jax_transfer_guard_host_to_device")  # builds the pipeline
    policy, replay = host.pipeline.policy, host.pipeline.replay
    assert policy.transfers.packed and replay.transfers.packed and not replay.in_host_memory
    passes, inserts = policy.transfers.counts(), replay.transfers.counts()
    assert passes.to_device_buffers == passes.to_device >= 3 and passes.to_host_buffers == passes.to_host
    assert passes.to_device_arrays > passes.to_device  # several arrays a pass, one buffer
    assert inserts.to_device_buffers == inserts.to_device and inserts.to_device_arrays > inserts.to_device
    updates = host.pipeline.learner.transfers.counts()  # each: its clock in, its step and metrics out as one buffer
    assert updates.to_host >= 1 and updates.to_host_buffers == updates.to_host and updates.to_device_buffers == updates.to_device
    assert updates.to_host_arrays > updates.to_host
    assert host.metrics.learner_steps > 0  # the metrics unpacked from the buffer reached the run's metrics
    steps = []  # the step read from the buffer, against the state's own (between two updates)
    host.pipeline.learner.call(lambda state: steps.append((int(state.step), host.pipeline.learner.step)))
    assert steps[0][0] == steps[0][1] > 0
