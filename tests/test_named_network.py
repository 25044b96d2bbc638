"""The named network: specs, encoder choice, a Dict-like spec end to end, entity masks, the flat network exactly."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seedleague.rl import losses
from seedleague.rl.encoders import encoder_kind, image_layout
from seedleague.rl.networks import make_network, squash_beyond_unit
from seedleague.rl.network_config import NetworkConfig
from seedleague.rl.named_losses import named_loss_inputs
from seedleague.rl.named_network import (NamedNetworkConfig, act, all_legal, check_observation,
                                         make_named_network)
from seedleague.rl.named_spec import (ActionSpec, ContinuousHead, DiscreteHead, ObservationSpec, TensorSpec,
                                      mask_key, flat_specs)
from seedleague.rl.types import NamedUnroll

OBSERVATION_SPEC = ObservationSpec((
    TensorSpec("vector", (5,), np.float32),
    TensorSpec("screen", (8, 8, 3), np.uint8),
    TensorSpec("entities", (6, 4), np.float32, masked=True),
))
ACTION_SPEC = ActionSpec((
    DiscreteHead("move", 3, has_legal_mask=True),
    ContinuousHead("aim", low=(-1.0, 0.0), high=(1.0, 2.0)),
))
B, ROWS = 2, 4


@pytest.fixture(scope="module")
def dict_network():
    """Built once per module: each network compiles its init once."""
    network = make_named_network(NamedNetworkConfig(NetworkConfig(hidden_sizes=(32,)),
                                                    entity_features=16), OBSERVATION_SPEC, ACTION_SPEC)
    return network, network.init(jax.random.key(0))


def _observation(seed=0):
    rng = np.random.default_rng(seed)
    mask = np.ones((B, ROWS, 6), bool)
    mask[:, :, 4:] = False  # the last two entity slots are empty
    mask[1, 2, :] = False  # one row sees no entity at all
    return {
        "vector": rng.normal(size=(B, ROWS, 5)).astype(np.float32),
        "screen": rng.integers(0, 256, (B, ROWS, 8, 8, 3)).astype(np.uint8),
        "entities": rng.normal(size=(B, ROWS, 6, 4)).astype(np.float32),
        mask_key("entities"): mask,
    }


def _batch(network, params, seed=0):
    """Unrolls that the network itself acted in, so every action is legal and in its Box."""
    observation = _observation(seed)
    first = np.zeros((B, ROWS), bool)
    first[:, 0] = True
    legal = {"move": np.ones((B, ROWS, 3), bool)}
    legal["move"][0, 1, 0] = False
    outputs, _, _ = network.apply(params, observation, first, ())
    action = network.heads.sample(outputs, legal, jax.random.key(seed))
    terminated = np.zeros((B, ROWS), bool)
    terminated[1, 1] = True
    return NamedUnroll(
        observation=observation, first=first, action=action, behaviour_params=outputs, legal_mask=legal,
        reward=np.random.default_rng(seed).normal(size=(B, ROWS)).astype(np.float32), terminated=terminated,
        truncated=np.zeros((B, ROWS), bool), policy_version=np.zeros((B, ROWS), np.int32), core_state=())


def test_encoders_follow_the_spec():
    kinds = [encoder_kind(t) for t in OBSERVATION_SPEC.tensors]
    assert kinds == ["vector", "image", "entities"]
    assert image_layout((84, 84, 4)) == "HWC" and image_layout((3, 6, 7)) == "CHW"
    assert OBSERVATION_SPEC.arrays()[mask_key("entities")] == ((6,), np.dtype(bool))


def test_dict_spec_network_runs_forward(dict_network):
    network, params = dict_network
    outputs, value, core = network.apply(params, _observation(), np.zeros((B, ROWS), bool), ())
    assert outputs["move"].shape == (B, ROWS, 3) and outputs["aim"].shape == (B, ROWS, 4)
    assert value.shape == (B, ROWS) and core == ()
    assert all(np.all(np.isfinite(x)) for x in (*outputs.values(), value))
    encoders = params["params"]["torso"]
    assert {"image_screen", "entities_entities"} <= set(encoders)  # one encoder per non-vector tensor


def test_dict_spec_loss_has_finite_gradients(dict_network):
    network, params = dict_network
    batch = _batch(network, params)

    def loss(p):
        outputs, values, _ = network.apply(p, batch.observation, batch.first, batch.core_state)
        inputs = named_loss_inputs(network.heads, outputs, values, batch, discount=0.99)
        return losses.ppo_loss(inputs)[0]

    value, grads = jax.jit(jax.value_and_grad(loss))(params)
    assert np.isfinite(value)
    leaves = jax.tree.leaves(grads)
    assert all(np.all(np.isfinite(g)) for g in leaves)
    for name in ("policy_head_move", "policy_head_aim"):  # both heads learn
        assert np.any(grads["params"][name]["kernel"] != 0)
    assert np.any(grads["params"]["torso"]["entities_entities"]["Dense_0"]["kernel"] != 0)


def test_masked_out_entities_do_not_change_the_output(dict_network):
    network, params = dict_network
    first = np.zeros((B, ROWS), bool)
    observation = _observation()
    changed = dict(observation)
    mask = observation[mask_key("entities")]
    changed["entities"] = np.where(mask[..., None], observation["entities"], 1e6)  # wild values in empty slots
    changed["entities"][1, 2] = np.nan  # a row with no valid entity at all
    base = network.apply(params, observation, first, ())
    after = network.apply(params, changed, first, ())
    for x, y in zip(jax.tree.leaves(base), jax.tree.leaves(after)):
        np.testing.assert_array_equal(x, y)
    # A valid entity does change it, and the order of the entities does not.
    moved = dict(observation, entities=observation["entities"].copy())
    moved["entities"][0, 0, 0] += 1.0
    assert not np.allclose(network.apply(params, moved, first, ())[1], base[1])
    order = np.array([3, 0, 2, 1, 5, 4])
    permuted = dict(observation, entities=observation["entities"][:, :, order])
    permuted[mask_key("entities")] = mask[:, :, order]
    np.testing.assert_allclose(network.apply(params, permuted, first, ())[1], base[1], rtol=1e-4, atol=1e-5)


def test_a_flat_spec_builds_the_flat_network_exactly():
    config = NetworkConfig(hidden_sizes=(16,))
    flat = make_network(config, (3,), np.float32, 4)
    observation_spec, action_spec = flat_specs((3,), np.float32, 4, has_legal_mask=True)
    named = make_named_network(NamedNetworkConfig(config), observation_spec, action_spec)
    params = flat.init(jax.random.key(1))
    assert jax.tree.structure(named.init(jax.random.key(1))) == jax.tree.structure(params)
    obs = np.random.default_rng(0).normal(size=(2, 3, 3)).astype(np.float32)
    first = np.zeros((2, 3), bool)
    logits, value, _ = flat.apply(params, obs, first, ())
    outputs, named_value, _ = named.apply(params, {"observation": obs}, first, ())
    np.testing.assert_array_equal(outputs["action"], logits)
    np.testing.assert_array_equal(named_value, value)


def test_apply_names_the_tensor_that_does_not_fit(dict_network):
    network, params = dict_network
    first = np.zeros((B, ROWS), bool)
    observation = _observation()
    with pytest.raises(ValueError, match=r"missing \['entities/mask'\]"):
        check_observation(OBSERVATION_SPEC, {k: v for k, v in observation.items() if k != "entities/mask"}, first)
    with pytest.raises(ValueError, match="observation 'vector' must be"):
        network.apply(params, dict(observation, vector=np.zeros((B, ROWS, 4), np.float32)), first, ())


@pytest.mark.parametrize("make, match", [
    (lambda: TensorSpec("a/b", (3,), np.float32), "no '/'"),
    (lambda: TensorSpec("e", (3,), np.float32, masked=True), r"entity list \[N, F\]"),
    (lambda: ContinuousHead("c", low=(-np.inf,), high=(1.0,)), "finite"),
    (lambda: ContinuousHead("c", low=(1.0,), high=(1.0,)), "low must be < high"),
    (lambda: DiscreteHead("d", 0), "num_actions"),
    (lambda: ActionSpec((DiscreteHead("d", 2), DiscreteHead("d", 3))), "unique"),
    (lambda: ObservationSpec(()), "at least one tensor"),
    (lambda: NamedNetworkConfig(continuous="beta"), "'squashed' or 'clipped'"),
    (lambda: make_named_network(NamedNetworkConfig(NetworkConfig(torso="mlp")), OBSERVATION_SPEC,
                                ACTION_SPEC), "use torso='auto'"),
])
def test_bad_specs_say_what_to_change(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_all_legal_covers_the_masked_heads_only():
    legal = all_legal(ACTION_SPEC, (2,))
    assert set(legal) == {"move"} and legal["move"].shape == (2, 3) and legal["move"].all()
    assert jnp.asarray(legal["move"]).dtype == bool


def test_act_samples_legal_actions_in_the_box_and_greedy_takes_the_modes(dict_network):
    network, params = dict_network
    observation = {key: x[:, 0] for key, x in _observation().items()}  # [N = B] agents, one step
    legal = {"move": np.array([[False, True, False], [True, False, True]])}
    action, behaviour, core = act(network, params, observation, np.ones(B, bool), (), legal, jax.random.key(0))
    assert np.asarray(action["move"]).tolist()[0] == 1 and np.asarray(action["move"])[1] in (0, 2)
    aim = np.asarray(action["aim"])
    assert aim.shape == (B, 2) and np.all((aim >= [-1, 0]) & (aim <= [1, 2]))
    assert behaviour["aim"].shape == (B, 4) and core == ()
    greedy, _, _ = act(network, params, observation, np.ones(B, bool), (), legal, jax.random.key(0), greedy=True)
    for name, mode in network.heads.mode(behaviour, legal).items():
        np.testing.assert_array_equal(greedy[name], mode)


def test_squash_inputs_logs_every_float_tensor_beyond_unit_range_and_leaves_frames_alone(dict_network):
    network, params = dict_network
    squashing = make_named_network(NamedNetworkConfig(NetworkConfig(hidden_sizes=(32,), squash_inputs=True),
                                                      entity_features=16), OBSERVATION_SPEC, ACTION_SPEC)
    large = _observation()
    large["vector"] = large["vector"] * 500.0
    large["entities"] = large["entities"] * 500.0
    logged = dict(large, vector=np.asarray(squash_beyond_unit(large["vector"])),
                  entities=np.asarray(squash_beyond_unit(large["entities"])))
    first = np.zeros((B, ROWS), bool)
    squashed_out, squashed_value, _ = squashing.apply(params, large, first, network.initial_state(B))
    plain_out, plain_value, _ = network.apply(params, logged, first, network.initial_state(B))
    np.testing.assert_allclose(np.asarray(squashed_value), np.asarray(plain_value), rtol=1e-5, atol=1e-5)
    for head in squashed_out:
        np.testing.assert_allclose(np.asarray(squashed_out[head]), np.asarray(plain_out[head]), rtol=1e-5, atol=1e-5)
