"""Joint loss inputs over action heads: the flat numbers exactly for one discrete head, sums over heads otherwise,
and the learner update on a named batch."""

import functools
import math

import jax
import numpy as np
import pytest

from seedleague.rl import losses
from seedleague.rl.action_heads import ActionHeads
from seedleague.rl.learner import init_train_state, make_update
from seedleague.rl.learner_config import LearnerConfig
from seedleague.rl.networks import make_network
from seedleague.rl.network_config import NetworkConfig
from seedleague.rl.named_losses import named_loss_inputs, named_unroll_from_flat
from seedleague.rl.named_network import NamedNetworkConfig, make_named_network
from seedleague.rl.named_spec import (ActionSpec, ContinuousHead, DiscreteHead, ObservationSpec, TensorSpec,
                                      flat_specs)
from seedleague.rl.types import NamedUnroll, Unroll

MAYBE_JIT = pytest.mark.parametrize("maybe_jit", [lambda f: f, jax.jit], ids=["eager", "jit"])
NUM_ACTIONS = 3
LOSSES = {
    "vtrace": functools.partial(losses.vtrace_loss, lambda_=0.95, entropy_cost=0.02),
    "vtrace_neurd": functools.partial(losses.vtrace_loss, lambda_=0.9, neurd_bound=2.0, entropy_in_returns=True),
    "ppo": functools.partial(losses.ppo_loss, entropy_cost=0.02),
    "mmd": functools.partial(losses.mmd_loss, kl_cost=0.3, entropy_cost=0.05),
}


def _flat_batch(batch=3, rows=5, seed=0):
    """Random flat unrolls with episode ends, a truncation and a legal mask that hides actions."""
    rng = np.random.default_rng(seed)
    legal = np.ones((batch, rows, NUM_ACTIONS), bool)
    legal[0, ::2, 2] = False
    action = rng.integers(0, 2, (batch, rows)).astype(np.int32)
    terminated, truncated = np.zeros((batch, rows), bool), np.zeros((batch, rows), bool)
    terminated[1, 2] = truncated[2, 1] = True
    return Unroll(
        observation=rng.normal(size=(batch, rows, 3)).astype(np.float32), first=np.zeros((batch, rows), bool),
        action=action, behaviour_logits=rng.normal(size=(batch, rows, NUM_ACTIONS)).astype(np.float32),
        legal_mask=legal, reward=rng.normal(size=(batch, rows)).astype(np.float32), terminated=terminated,
        truncated=truncated, policy_version=np.zeros((batch, rows), np.int32), core_state=())


@pytest.mark.parametrize("loss, maybe_jit", [(name, jax.jit) for name in sorted(LOSSES)] + [("vtrace", lambda f: f)],
                         ids=[f"{name}-jit" for name in sorted(LOSSES)] + ["vtrace-eager"])
def test_one_discrete_head_gives_the_flat_numbers_exactly(loss, maybe_jit):
    batch = _flat_batch()
    rng = np.random.default_rng(1)
    logits = rng.normal(size=batch.behaviour_logits.shape).astype(np.float32)
    values = rng.normal(size=batch.reward.shape).astype(np.float32)
    heads = ActionHeads(flat_specs((3,), np.float32, NUM_ACTIONS, has_legal_mask=True)[1])

    def flat_path(logits, values, batch):
        return LOSSES[loss](losses.loss_inputs(logits, values, batch, 0.9))

    def named_path(logits, values, batch):
        inputs = named_loss_inputs(heads, {"action": logits}, values, named_unroll_from_flat(batch), 0.9)
        return LOSSES[loss](inputs)

    flat_loss, flat_metrics = maybe_jit(flat_path)(logits, values, batch)
    loss_value, metrics = maybe_jit(named_path)(logits, values, batch)
    np.testing.assert_array_equal(loss_value, flat_loss)
    assert metrics.keys() == flat_metrics.keys()
    for name in metrics:
        np.testing.assert_array_equal(metrics[name], flat_metrics[name], err_msg=name)
    flat_grad = jax.grad(lambda x: flat_path(x, values, batch)[0])(logits)
    grad = jax.grad(lambda x: named_path(x, values, batch)[0])(logits)
    np.testing.assert_array_equal(grad, flat_grad)


@MAYBE_JIT
def test_two_heads_add_their_log_probabilities_entropies_and_kls(maybe_jit):
    # One unroll, T = 1 (two rows). Head "move": logits log(0.25), log(0.75), action 1 -> log 0.75 under pi;
    # mu uniform -> log 0.5. Head "aim" (clipped, Box [-1, 1]): pi N(0, 0.5^2), mu N(0.5, 0.5^2), action 0.25.
    spec = ActionSpec((DiscreteHead("move", 2), ContinuousHead("aim", low=(-1.0,), high=(1.0,))))
    heads = ActionHeads(spec, continuous="clipped")
    log_half = math.log(0.5)
    outputs = {"move": np.log(np.array([[[0.25, 0.75], [0.5, 0.5]]], np.float32)),
               "aim": np.array([[[0.0, log_half], [0.0, log_half]]], np.float32)}
    behaviour = {"move": np.zeros((1, 2, 2), np.float32), "aim": np.array([[[0.5, log_half]] * 2], np.float32)}
    batch = NamedUnroll(
        observation={}, first=np.zeros((1, 2), bool), action={"move": np.array([[1, 0]], np.int32),
                                                            "aim": np.array([[[0.25], [0.0]]], np.float32)},
        behaviour_params=behaviour, legal_mask={}, reward=np.ones((1, 2), np.float32),
        terminated=np.array([[True, False]]), truncated=np.zeros((1, 2), bool),
        policy_version=np.zeros((1, 2), np.int32), core_state=())
    inputs = maybe_jit(functools.partial(named_loss_inputs, heads, discount=0.9))(
        outputs, np.zeros((1, 2), np.float32), batch=batch)

    def log_normal(x, mean, std):
        return -0.5 * ((x - mean) / std) ** 2 - math.log(std) - 0.5 * math.log(2 * math.pi)

    gaussian_entropy = 0.5 * math.log(2 * math.pi * math.e * 0.25)
    np.testing.assert_allclose(inputs.log_pi_tm1, [[math.log(0.75) + log_normal(0.25, 0.0, 0.5)]], rtol=1e-5)
    np.testing.assert_allclose(inputs.log_mu_tm1, [[math.log(0.5) + log_normal(0.25, 0.5, 0.5)]], rtol=1e-5)
    np.testing.assert_allclose(
        inputs.entropy_tm1, [[-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)) + gaussian_entropy]], rtol=1e-5)
    np.testing.assert_allclose(inputs.entropy_t, [[math.log(2) + gaussian_entropy]], rtol=1e-5)
    categorical_kl = 0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5)
    gaussian_kl = (0.0 - 0.5) ** 2 / (2 * 0.5 ** 2)  # equal stds: the means' gap over twice the variance
    np.testing.assert_allclose(inputs.kl_tm1, [[categorical_kl + gaussian_kl]], rtol=1e-5)
    assert np.isnan(inputs.logit_tm1).all()  # NeuRD's logit: single discrete head only


# Built once per module: each network compiles its init once.
HYBRID = make_named_network(
    NamedNetworkConfig(NetworkConfig(hidden_sizes=(16,)), entity_features=8),
    ObservationSpec((TensorSpec("vector", (3,), np.float32), TensorSpec("units", (4, 2), np.float32, masked=True))),
    ActionSpec((DiscreteHead("move", 3, has_legal_mask=True), ContinuousHead("aim", low=(-2.0,), high=(2.0,)))))


def _hybrid_batch(network, params, batch=4, rows=5, seed=0):
    rng = np.random.default_rng(seed)
    observation = network.observation_spec.zeros((batch, rows))
    observation["vector"] = rng.normal(size=(batch, rows, 3)).astype(np.float32)
    observation["units"] = rng.normal(size=(batch, rows, 4, 2)).astype(np.float32)
    observation["units/mask"][..., 3] = False
    first = np.zeros((batch, rows), bool)
    outputs, _, _ = network.apply(params, observation, first, ())
    legal = {"move": np.ones((batch, rows, 3), bool)}
    action = network.heads.sample(outputs, legal, jax.random.key(seed))
    # Rewarded for the "aim" close to 1 and for "move" 2: both heads must learn.
    reward = (2 * (np.asarray(action["move"]) == 2) - np.abs(np.asarray(action["aim"])[..., 0] - 1.0))
    return NamedUnroll(observation=observation, first=first, action=action, behaviour_params=outputs,
                       legal_mask=legal, reward=reward.astype(np.float32), terminated=np.ones((batch, rows), bool),
                            truncated=np.zeros((batch, rows), bool), policy_version=np.zeros((batch, rows), np.int32),
                            core_state=())


def test_learner_update_runs_on_a_named_batch():
    # MMD is PPO's surrogate plus a KL to the behaviour; the magnet adds a KL to other params.
    config = LearnerConfig(loss="mmd", kl_cost=0.1, magnet_cost=0.1)
    state = init_train_state(config, HYBRID, jax.random.key(0))
    batch = _hybrid_batch(HYBRID, state.params)
    update = make_update(config, HYBRID)
    for _ in range(3):
        state, metrics = update(state, batch)
        assert all(np.isfinite(float(v)) for v in metrics.values()), metrics
    assert int(state.step) == 3 and {"magnet_kl", "entropy"} <= set(metrics)


def test_learner_update_with_a_flat_shaped_named_network_is_the_flat_update():
    config = LearnerConfig(loss="vtrace", minibatches=2)
    flat = make_network(NetworkConfig(hidden_sizes=(16,)), (3,), np.float32, NUM_ACTIONS)
    named = make_named_network(NamedNetworkConfig(NetworkConfig(hidden_sizes=(16,))),
                               *flat_specs((3,), np.float32, NUM_ACTIONS, has_legal_mask=True))
    batch = _flat_batch(batch=4)
    flat_state, flat_metrics = make_update(config, flat)(init_train_state(config, flat, jax.random.key(0)), batch)
    state, metrics = make_update(config, named)(init_train_state(config, named, jax.random.key(0)),
                                                named_unroll_from_flat(batch))
    for x, y in zip(jax.tree.leaves(state.params), jax.tree.leaves(flat_state.params)):
        np.testing.assert_array_equal(x, y)
    for name in metrics:
        np.testing.assert_array_equal(metrics[name], flat_metrics[name], err_msg=name)


def test_learner_refuses_neurd_for_several_heads():
    with pytest.raises(ValueError, match="single discrete action head"):
        make_update(LearnerConfig(loss="vtrace", neurd_bound=2.0), HYBRID)
