"""XLA:CPU compile choices (seedleague.rl.xla_cpu): library fusions off for the learner's update and for forward
passes that convolve, the same numbers either way, and a jaxlib without the option left as it is."""

import logging

import jax
import numpy as np
import pytest
from jax import lax

from seedleague.host.policy import InferencePolicy
from seedleague.rl import xla_cpu
from seedleague.rl.learner import init_train_state, make_update
from seedleague.rl.learner_config import LearnerConfig
from seedleague.rl.networks import make_network
from seedleague.rl.network_config import NetworkConfig
from seedleague.rl.types import Unroll

pytestmark = pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU's compile choices")


def _conv(x, w):
    return lax.conv_general_dilated(x, w, (2, 2), "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def test_a_convolution_compiled_with_library_fusions_off_has_none_and_the_same_numbers():
    options = xla_cpu.library_fusions_off()
    assert options == {"xla_cpu_experimental_ynn_fusion_type": ""}  # this jaxlib knows the option
    rng = np.random.default_rng(0)
    x, w = rng.normal(size=(8, 12, 12, 4)).astype(np.float32), rng.normal(size=(4, 4, 4, 16)).astype(np.float32)
    default = jax.jit(_conv)
    off = jax.jit(_conv, compiler_options=options)
    assert "ynn_fusion" not in off.lower(x, w).compile().as_text()
    np.testing.assert_allclose(np.asarray(off(x, w)), np.asarray(default(x, w)), rtol=1e-5, atol=1e-5)


def test_a_jaxlib_without_the_option_keeps_its_defaults_and_says_so(monkeypatch, caplog):
    monkeypatch.setattr(xla_cpu, "_LIBRARY_FUSIONS_OFF", {"xla_cpu_no_such_option_for_this_test": ""})
    xla_cpu._takes_library_fusions_off.cache_clear()
    try:
        with caplog.at_level(logging.INFO, logger=xla_cpu.__name__):
            assert xla_cpu.library_fusions_off() == {}
        assert "xla_cpu_no_such_option_for_this_test" in caplog.text
    finally:
        monkeypatch.undo()
        xla_cpu._takes_library_fusions_off.cache_clear()
    assert xla_cpu.library_fusions_off()


def _board_batch(network, rows=(4, 3), shape=(3, 6, 7), seed=0):
    rng = np.random.default_rng(seed)
    first = np.zeros(rows, bool)
    first[:, 0] = True
    return Unroll(observation=rng.normal(size=rows + shape).astype(np.float32), first=first,
                  action=rng.integers(0, 3, rows).astype(np.int32),
                  behaviour_logits=rng.normal(size=rows + (3,)).astype(np.float32),
                  legal_mask=np.ones(rows + (3,), bool), reward=rng.normal(size=rows).astype(np.float32),
                  terminated=np.zeros(rows, bool), truncated=np.zeros(rows, bool),
                  policy_version=np.zeros(rows, np.int32), core_state=network.initial_state(rows[0]))


def test_the_update_on_its_own_and_inside_a_callers_jit_is_the_same_update():
    # On its own the update compiles with the option; a caller's jit (the host's packed learner step) may not
    # pass options to a nested jit, so there the update is inlined without them: the same maths either way. Two
    # minibatch steps (a board torso's are unrolled on CPU, each compiled twice here: alone and nested).
    config = LearnerConfig(loss="ppo", epochs=1, minibatches=2)
    network = make_network(NetworkConfig(torso="board", hidden_sizes=(16,)), (3, 6, 7), np.float32, 3)
    update = make_update(config, network)
    batch = _board_batch(network)
    alone, metrics = update(init_train_state(config, network, jax.random.key(0)), batch)
    nested, nested_metrics = jax.jit(lambda state, batch: update(state, batch))(
        init_train_state(config, network, jax.random.key(0)), batch)
    for a, b in zip(jax.tree.leaves(alone.params), jax.tree.leaves(nested.params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
    assert int(alone.step) == int(nested.step) == 1
    np.testing.assert_allclose(float(metrics["total_loss"]), float(nested_metrics["total_loss"]), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("torso, shape, off", [("board", (3, 6, 7), True), ("mlp", (5,), False)])
def test_a_forward_pass_that_convolves_compiles_with_library_fusions_off_and_an_mlps_with_them(torso, shape, off):
    network = make_network(NetworkConfig(torso=torso, hidden_sizes=(16,)), shape, np.float32, 3)
    policy = InferencePolicy(network, network.init(jax.random.key(0)), version=0, seed=0)
    rows = 4
    out = policy.act(np.zeros((rows,) + shape, np.float32), np.ones(rows, bool), network.initial_state(rows),
                     np.ones((rows, 3), bool))
    assert out.action.shape == (rows,)
    assert list(policy.transfers._fusions_off.values()) == [off]


@pytest.mark.parametrize("torso, shape, off", [("board", (3, 6, 7), True), ("mlp", (5,), False)])
def test_the_update_compiles_with_library_fusions_off_only_where_its_network_convolves(monkeypatch, torso, shape, off):
    # On one core an MLP's update is faster with them (benchmarks/README.md), a CNN's far slower.
    jit_options = []
    real_jit = jax.jit

    def recording_jit(fn, **settings):
        jit_options.append(settings.get("compiler_options"))
        return real_jit(fn, **settings)

    monkeypatch.setattr(jax, "jit", recording_jit)
    config = LearnerConfig(loss="ppo", epochs=1, minibatches=1)
    network = make_network(NetworkConfig(torso=torso, hidden_sizes=(8,)), shape, np.float32, 3)
    state = init_train_state(config, network, jax.random.key(0))
    update = make_update(config, network)
    jit_options.clear()  # only the update's first call picks its compile options
    state, _ = update(state, _board_batch(network, shape=shape))
    state, _ = update(state, _board_batch(network, shape=shape, seed=1))
    assert int(state.step) == 2
    assert jit_options == ([xla_cpu.library_fusions_off()] if off else [])


def test_a_jit_choosing_fusions_traces_once_per_static_value_and_keeps_the_numbers():
    traces = []

    def layer(x, w, conv):
        traces.append(conv)
        return _conv(x, w).sum() if conv else (x.reshape(x.shape[0], -1)[:, :4] @ w[0, 0]).sum()

    chosen = xla_cpu.jit_choosing_fusions(layer, static_argnames=("conv",))
    rng = np.random.default_rng(0)
    x, w = rng.normal(size=(2, 6, 6, 4)).astype(np.float32), rng.normal(size=(2, 2, 4, 3)).astype(np.float32)
    for conv in (True, False, True, False):
        np.testing.assert_allclose(float(chosen(x, w, conv=conv)), float(jax.jit(layer, static_argnums=2)(x, w, conv)),
                                   rtol=1e-5)
    assert chosen.choices == {(True,): True, (False,): False}
    traces.clear()
    chosen(x, w, True)
    chosen(x, w, conv=False)
    assert traces == []  # chosen and compiled once per static value; later calls only dispatch


@pytest.mark.parametrize("torso, shape, off", [("board", (3, 6, 7), True), ("mlp", (5,), False)])
def test_a_loaded_policy_answers_through_the_compile_its_network_calls_for(torso, shape, off):
    from seedleague.artifacts import policy as artifact_policy

    config = NetworkConfig(torso=torso, hidden_sizes=(16,))
    network = make_network(config, shape, np.float32, 3)
    policy = artifact_policy.Policy(config, network.init(jax.random.key(0)),
                                    artifact_policy.PolicySpec("test", shape, np.float32, 3))
    probs = policy.action_probabilities(np.zeros((5,) + shape, np.float32))
    assert probs.shape == (5, 3)
    np.testing.assert_allclose(probs.sum(axis=-1), 1.0, rtol=1e-5)
    assert artifact_policy._forward.choices[(policy.network,)] is off
