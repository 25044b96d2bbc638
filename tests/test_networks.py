"""Network output shapes, observation scaling, and LSTM resets at episode starts."""

import jax
import numpy as np
import pytest

from seedleague.rl.networks import _BoardTorso, make_network, squash_beyond_unit
from seedleague.rl.network_config import NATURE_CNN, NetworkConfig


def _first(batch, time, starts=()):
    first = np.zeros((batch, time), bool)
    for b, t in starts:
        first[b, t] = True
    return first


# Networks are built once per module: each init and each new input shape compiles.
@pytest.fixture(scope="module")
def mlp():
    network = make_network(NetworkConfig(), (3,), np.float32, num_actions=2)
    return network, network.init(jax.random.key(0))


@pytest.fixture(scope="module")
def lstm():
    network = make_network(NetworkConfig(hidden_sizes=(16,), lstm_size=8), (3,), np.float32, 2)
    return network, network.init(jax.random.key(0))


def test_mlp_shapes_and_near_uniform_initial_policy(mlp):
    network, params = mlp
    obs = np.random.default_rng(0).normal(size=(3, 5, 3)).astype(np.float32)
    logits, value, core = network.apply(params, obs, _first(3, 5), network.initial_state(3))
    assert logits.shape == (3, 5, 2) and logits.dtype == np.float32
    assert value.shape == (3, 5) and value.dtype == np.float32
    assert core == () and network.initial_state(3) == ()
    assert np.max(np.abs(logits)) < 0.1  # policy head initialised 100x small
    assert "value_torso" in params["params"]  # MLP default: separate value network


def test_uint8_observations_are_scaled_to_unit_range(mlp):
    as_floats, params = mlp
    as_bytes = make_network(NetworkConfig(), (3,), np.uint8, num_actions=2)
    byte_obs = np.array([[[255, 0, 51]]], np.uint8)
    float_obs = np.array([[[1.0, 0.0, 0.2]]], np.float32)
    out_bytes = as_bytes.apply(params, byte_obs, _first(1, 1), ())
    out_floats = as_floats.apply(params, float_obs, _first(1, 1), ())
    np.testing.assert_allclose(out_bytes[0], out_floats[0], rtol=1e-5)
    np.testing.assert_allclose(out_bytes[1], out_floats[1], rtol=1e-5)


def test_nature_cnn_on_atari_frames():
    # Shapes only, by abstract evaluation: compiling a CNN on CPU costs seconds.
    network = make_network(NATURE_CNN, (84, 84, 4), np.uint8, num_actions=6)
    params = jax.eval_shape(network.init, jax.random.key(0))
    torso = params["params"]["torso"]
    assert [torso[f"Conv_{i}"]["kernel"].shape for i in range(3)] == [
        (8, 8, 4, 32), (4, 4, 32, 64), (3, 3, 64, 64)]
    assert torso["Dense_0"]["kernel"].shape == (7 * 7 * 64, 512)  # VALID padding: 84 -> 20 -> 9 -> 7
    assert "value_torso" not in params["params"]  # conv default: one shared torso
    obs = jax.ShapeDtypeStruct((2, 1, 84, 84, 4), np.uint8)
    logits, value, core = jax.eval_shape(network.apply, params, obs, _first(2, 1), ())
    assert logits.shape == (2, 1, 6) and logits.dtype == np.float32
    assert value.shape == (2, 1) and core == ()


def test_conv_torso_works_on_small_frames():
    network = make_network(NetworkConfig(), (10, 10, 3), np.float32, num_actions=4)  # auto -> conv
    params = network.init(jax.random.key(0))
    logits, value, _ = network.apply(params, np.zeros((2, 3, 10, 10, 3), np.float32), _first(2, 3), ())
    assert logits.shape == (2, 3, 4) and value.shape == (2, 3)


def test_board_torso_reads_channels_first_planes_square_by_square():
    network = make_network(NetworkConfig(torso="board", hidden_sizes=(16,)), (5, 6, 7), np.float32, num_actions=7)
    params = network.init(jax.random.key(0))
    torso = params["params"]["torso"]
    assert [torso[f"Conv_{i}"]["kernel"].shape for i in range(2)] == [(3, 3, 5, 32), (3, 3, 32, 32)]
    assert torso["Dense_0"]["kernel"].shape == (6 * 7 * 32, 16)  # SAME, stride 1: the board stays 6 x 7
    assert "value_torso" not in params["params"]
    logits, value, _ = network.apply(params, np.zeros((2, 3, 5, 6, 7), np.float32), _first(2, 3), ())
    assert logits.shape == (2, 3, 7) and value.shape == (2, 3)
    # Two 3x3 convolutions see 5x5 squares: a piece in the corner moves only the features of
    # the squares within two rows and columns of it.
    conv_only = {"params": {k: v for k, v in torso.items() if k.startswith("Conv")}}
    empty, corner = np.zeros((1, 5, 6, 7), np.float32), np.zeros((1, 5, 6, 7), np.float32)
    corner[0, 1, 0, 0] = 1.0
    features = [_BoardTorso(hidden_sizes=()).apply(conv_only, board).reshape(6, 7, 32) for board in (empty, corner)]
    moved = np.abs(np.asarray(features[1] - features[0])).sum(axis=-1) > 0
    assert moved[:3, :3].any() and not moved[3:].any() and not moved[:, 3:].any()


def test_lstm_shapes_and_state(lstm):
    network, params = lstm
    core = network.initial_state(2)
    assert [c.shape for c in core] == [(2, 8), (2, 8)] and not np.any(core[0])
    obs = np.ones((2, 6, 3), np.float32)
    logits, value, new_core = network.apply(params, obs, _first(2, 6), core)
    assert logits.shape == (2, 6, 2) and value.shape == (2, 6)
    assert [c.shape for c in new_core] == [(2, 8), (2, 8)] and np.any(new_core[1])


def test_lstm_resets_at_first_rows(lstm):
    network, params = lstm
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(2, 6, 3)).astype(np.float32)
    carried = tuple(rng.normal(size=(2, 8)).astype(np.float32) for _ in range(2))
    # Unroll 0 starts an episode at row 3; unroll 1 never resets.
    logits, value, _ = network.apply(params, obs, _first(2, 6, [(0, 3)]), carried)
    fresh_logits, fresh_value, _ = network.apply(params, obs[:, 3:], _first(2, 3), network.initial_state(2))
    np.testing.assert_allclose(logits[0, 3:], fresh_logits[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value[0, 3:], fresh_value[0], rtol=1e-5, atol=1e-6)
    # Without the reset, the carried memory changes the outputs.
    assert not np.allclose(value[1, 3:], fresh_value[1], atol=1e-4)


def test_lstm_step_by_step_matches_whole_unroll(lstm):
    network, params = lstm
    obs = np.random.default_rng(1).normal(size=(2, 6, 3)).astype(np.float32)
    first = _first(2, 6, [(0, 0), (1, 2)])
    whole_logits, whole_value, whole_core = network.apply(params, obs, first, network.initial_state(2))
    core = network.initial_state(2)
    for t in range(6):  # inference: T = 1, core state carried between calls
        logits, value, core = network.apply(params, obs[:, t:t + 1], first[:, t:t + 1], core)
        np.testing.assert_allclose(logits[:, 0], whole_logits[:, t], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(value[:, 0], whole_value[:, t], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(core[0], whole_core[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(torso="resnet"), "torso must be one of"),
        (dict(hidden_sizes=(64, 0)), "positive ints"),
        (dict(torso="mlp", hidden_sizes=()), "at least one layer"),
        (dict(lstm_size=-1), "lstm_size"),
        (dict(lstm_size=8, shared_torso=False), "shared_torso=True"),
    ],
)
def test_config_errors_say_what_to_change(kwargs, match):
    with pytest.raises(ValueError, match=match):
        NetworkConfig(**kwargs)


def test_make_network_rejects_conv_for_flat_observations():
    with pytest.raises(ValueError, match="needs \\[H, W, C\\]"):
        make_network(NetworkConfig(torso="conv"), (4,), np.float32, 2)
    with pytest.raises(ValueError, match="torso='board' needs \\[C, H, W\\]"):
        make_network(NetworkConfig(torso="board"), (11,), np.float32, 2)


def test_apply_rejects_mismatched_inputs(mlp):
    network, params = mlp
    with pytest.raises(ValueError, match="observation must be"):
        network.apply(params, np.zeros((2, 3), np.float32), _first(2, 1), ())
    with pytest.raises(ValueError, match="first must be"):
        network.apply(params, np.zeros((2, 3, 3), np.float32), _first(2, 1), ())


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jitted"])
def test_squash_beyond_unit_keeps_unit_range_inputs_and_logs_the_rest(jit):
    squash = jax.jit(squash_beyond_unit) if jit else squash_beyond_unit
    x = np.array([-1200.0, -np.e, -1.0, -0.5, 0.0, 0.25, 1.0, np.e ** 2, 1200.0], np.float32)
    expected = [-(1 + np.log(1200.0)), -2.0, -1.0, -0.5, 0.0, 0.25, 1.0, 3.0, 1 + np.log(1200.0)]
    np.testing.assert_allclose(np.asarray(squash(x)), expected, rtol=1e-6)
    assert float(squash(np.float32(1200.0))) == pytest.approx(8.0901, abs=1e-4)  # a stack of 1,200 chips


def test_a_squashing_network_sees_unit_range_inputs_as_they_are_and_large_ones_squashed():
    plain = make_network(NetworkConfig(hidden_sizes=(8,)), (3,), np.float32, 2)
    squashing = make_network(NetworkConfig(hidden_sizes=(8,), squash_inputs=True), (3,), np.float32, 2)
    params = plain.init(jax.random.key(1))
    assert jax.tree.structure(params) == jax.tree.structure(squashing.init(jax.random.key(1)))  # same params
    first = _first(1, 2)
    unit = np.array([[[1.0, -0.3, 0.0], [0.5, 0.5, -1.0]]], np.float32)
    for a, b in zip(plain.apply(params, unit, first, ()), squashing.apply(params, unit, first, ())):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    chips = np.array([[[300.0, 1.0, 0.0], [-1200.0, 0.5, 2.0]]], np.float32)
    logged = np.array([[[1 + np.log(300.0), 1.0, 0.0], [-(1 + np.log(1200.0)), 0.5, 1 + np.log(2.0)]]], np.float32)
    for a, b in zip(squashing.apply(params, chips, first, ()), plain.apply(params, logged, first, ())):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
