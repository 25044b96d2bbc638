"""Distilling a mixture into one network (seedleague.artifacts.distill): the fitted network plays the mixture's
behaviour policy, reach-weighted, not the plain average of its members."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from seedleague.artifacts import distill
from seedleague.artifacts.distill import Samples, fit
from seedleague.artifacts.networks import named_network_for
from seedleague.protocol.named import ActionSpec, DiscreteHead, NamedEnvSpec, ObservationSpec, TensorSpec
from seedleague.rl.network_config import NetworkConfig
from seedleague.rl.networks import make_network

# Two members of weight 1/2 over a two-state game of one player: state 0 first; action 0 there leads to state 1.
MEMBERS = np.array([[[0.9, 0.1], [0.2, 0.8]],   # member A at states 0, 1
                    [[0.1, 0.9], [0.6, 0.4]]])  # member B
# By hand: both reach state 0, so there the mix is (0.5, 0.5). State 1 is reached by A with 0.9, by B with 0.1:
# (0.5 * 0.9 * (0.2, 0.8) + 0.5 * 0.1 * (0.6, 0.4)) / (0.5 * 0.9 + 0.5 * 0.1) = (0.12, 0.38) / 0.5 = (0.24, 0.76),
# where the members' plain average would be (0.4, 0.6).
BEHAVIOUR = np.array([[0.5, 0.5], [0.24, 0.76]])


def _mixture_play(games: int, rng: np.random.Generator) -> Samples:
    """The states the mixture's games reach, each with the policy of the member that game drew."""
    member = rng.integers(0, 2, games)
    states, members = [np.zeros(games, int)], [member]
    went_on = rng.random(games) < MEMBERS[member, 0, 0]  # action 0 at state 0
    states.append(np.ones(went_on.sum(), int))
    members.append(member[went_on])
    state, member = np.concatenate(states), np.concatenate(members)
    return Samples(np.eye(2, dtype=np.float32)[state], np.ones((len(state), 2), bool), MEMBERS[member, state])


def _probs(network, params, observation):
    logits, _, _ = network.apply(params, jnp.asarray(observation)[:, None], jnp.ones((len(observation), 1), bool), ())
    return np.asarray(jax.nn.softmax(logits[:, 0], axis=-1))


def test_the_fitted_network_plays_the_reach_weighted_mixture():
    network = make_network(NetworkConfig(torso="mlp", hidden_sizes=(16,)), (2,), np.float32, 2)
    params = network.init(jax.random.key(0))
    samples = _mixture_play(20_000, np.random.default_rng(0))
    fitted = fit(network, params, samples, steps=1500)
    np.testing.assert_allclose(_probs(network, fitted.params, np.eye(2, dtype=np.float32)), BEHAVIOUR, atol=0.03)
    # the held-out score: the targets are single members' policies, so the network's cross-entropy to them exceeds
    # their entropy by at least the KL of each member's policy to the behaviour one
    assert fitted.cross_entropy > fitted.target_entropy
    assert fitted.samples == len(samples) - len(samples) // 10


def test_a_named_network_is_fitted_head_by_head_to_each_heads_marginal():
    # two tensors in, two heads out ("move" with a legal mask, "say" without), the exact targets at two states:
    # "move" the behaviour above, with its third action illegal; "say" (0.7, 0.3) at state 0, (0.1, 0.9) at 1
    spec = NamedEnvSpec("duel", ObservationSpec((TensorSpec("state", (2,), np.float32), TensorSpec("bias", (1,),
                                                                                                    np.float32))),
                        ActionSpec((DiscreteHead("move", 3, has_legal_mask=True), DiscreteHead("say", 2))),
                        num_envs=1, num_seats=2)
    network = named_network_for(NetworkConfig(torso="mlp", hidden_sizes=(16,)), spec)
    params = network.init(jax.random.key(0))
    state = np.arange(400) % 2
    observation = {"state": np.eye(2, dtype=np.float32)[state], "bias": np.ones((400, 1), np.float32)}
    move = np.pad(BEHAVIOUR, ((0, 0), (0, 1)))[state]
    say = np.array([[0.7, 0.3], [0.1, 0.9]])[state]
    legal = {"move": np.tile([True, True, False], (400, 1)), "say": np.ones((400, 2), bool)}
    fitted = fit(network, params, Samples(observation, legal, {"move": move, "say": say}), steps=1500)
    logits, _, _ = network.apply(fitted.params, {"state": jnp.eye(2)[:, None], "bias": jnp.ones((2, 1, 1))},
                                 jnp.ones((2, 1), bool), ())
    move_probs = jax.nn.softmax(jnp.where(jnp.array([True, True, False]), logits["move"][:, 0], -1e9))
    np.testing.assert_allclose(move_probs, np.pad(BEHAVIOUR, ((0, 0), (0, 1))), atol=0.03)
    np.testing.assert_allclose(jax.nn.softmax(logits["say"][:, 0]), [[0.7, 0.3], [0.1, 0.9]], atol=0.03)
    # exact targets: the held-out cross-entropy is the heads' entropies summed (a mean over the held-out rows of the
    # two states' sums, so between them), plus a KL near 0
    entropy = lambda p: -(p * np.log(np.where(p > 0, p, 1.0))).sum(-1)
    per_state = entropy(move[:2]) + entropy(say[:2])
    assert per_state.min() <= fitted.target_entropy <= per_state.max()
    assert fitted.cross_entropy - fitted.target_entropy == pytest.approx(0.0, abs=0.01)
    with pytest.raises(ValueError, match="one legal mask and one policy per observation and head"):
        Samples(observation, legal, {"move": move})


def test_illegal_probability_and_too_few_states_are_refused():
    legal = np.array([[True, False]] * 30)
    with pytest.raises(ValueError, match="illegal actions"):
        Samples(np.zeros((30, 2), np.float32), legal, np.full((30, 2), 0.5))
    network = make_network(NetworkConfig(torso="mlp", hidden_sizes=(4,)), (2,), np.float32, 2)
    params = network.init(jax.random.key(0))
    few = Samples(np.zeros((5, 2), np.float32), np.ones((5, 2), bool), np.full((5, 2), 0.5))
    with pytest.raises(ValueError, match="at least 20 recorded states"):
        fit(network, params, few)


def test_the_fit_is_adam_on_a_cosine_to_zero_over_its_steps():
    """Without a time bound the fit takes its steps on optax's Adam with a cosine decay to 0, batch for batch."""
    network = make_network(NetworkConfig(torso="mlp", hidden_sizes=(8,)), (2,), np.float32, 2)
    params = network.init(jax.random.key(1))
    samples = _mixture_play(500, np.random.default_rng(1))
    fitted = fit(network, params, samples, steps=30, seed=3)
    assert fitted.steps == 30

    rng = np.random.default_rng(3)  # the fit's own draws: the held-out split, then one batch per step
    train = rng.permutation(len(samples))[len(samples) // distill.HELD_OUT:]
    optimizer = optax.adam(optax.cosine_decay_schedule(distill.LEARNING_RATE, 30))
    state, expected = optimizer.init(params), params
    loss = lambda p, index: distill._cross_entropy(network, p, samples.observation[index], samples.legal[index],
                                                   samples.probs[index].astype(np.float32))
    for _ in range(30):
        batch = train[rng.integers(0, len(train), distill.BATCH)]
        updates, state = optimizer.update(jax.grad(loss)(expected, batch), state, expected)
        expected = optax.apply_updates(expected, updates)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), fitted.params, expected)


def test_a_fit_whose_seconds_run_out_stops_after_at_least_one_step_and_says_how_many_it_took():
    network = make_network(NetworkConfig(torso="mlp", hidden_sizes=(8,)), (2,), np.float32, 2)
    params = network.init(jax.random.key(1))
    samples = _mixture_play(500, np.random.default_rng(1))
    assert fit(network, params, samples, steps=4000, max_seconds=1e-9).steps == 1  # compiling alone outlasts it
    assert fit(network, params, samples, steps=20, max_seconds=1e6).steps == 20
    with pytest.raises(ValueError, match="max_seconds must be > 0"):
        fit(network, params, samples, max_seconds=0)
