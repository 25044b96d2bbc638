"""The learner update: it runs, counts versions, reports metrics, and learns."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seedleague.rl.learner import init_train_state, make_update
from seedleague.rl.learner_config import LearnerConfig
from seedleague.rl.losses import masked_log_softmax
from seedleague.rl.networks import make_network
from seedleague.rl.network_config import NetworkConfig
from seedleague.rl.types import Unroll

NUM_ACTIONS = 3
EXPECTED_METRICS = {"total_loss", "policy_loss", "value_loss", "entropy", "grad_norm", "anneal_progress", "entropy_cost",
                    "importance_ratio", "policy_lag"}


def _synthetic_batch(network, batch=4, rows=6, seed=0):
    """Random unrolls with episode boundaries and a legal mask that hides actions."""
    rng = np.random.default_rng(seed)
    legal = np.ones((batch, rows, NUM_ACTIONS), bool)
    legal[..., 2] = False  # never legal
    legal[0, ::2, 0] = False  # sometimes only action 1 is legal
    action = np.where(legal[..., 0], rng.integers(0, 2, (batch, rows)), 1).astype(np.int32)
    terminated = np.zeros((batch, rows), bool)
    truncated = np.zeros((batch, rows), bool)
    terminated[1, 2] = True
    truncated[2, 3] = True
    first = np.zeros((batch, rows), bool)
    first[1, 3] = first[2, 4] = True
    return Unroll(
        observation=rng.normal(size=(batch, rows, 3)).astype(np.float32),
        first=first,
        action=action,
        behaviour_logits=rng.normal(size=(batch, rows, NUM_ACTIONS)).astype(np.float32),
        legal_mask=legal,
        reward=(1.0 + rng.normal(size=(batch, rows))).astype(np.float32),
        terminated=terminated,
        truncated=truncated,
        policy_version=np.zeros((batch, rows), np.int32),
        core_state=network.initial_state(batch),
    )


# One jitted update per (config, network) for the module: tests whose configs are equal share its compile
# (make_update jits anew on every call). The update donates its state, so each caller still passes its own.
update_for = functools.lru_cache(maxsize=None)(make_update)


# Built once per module: each network compiles its init once.
NETWORKS = {
    lstm_size: make_network(NetworkConfig(hidden_sizes=(16,), lstm_size=lstm_size), (3,), np.float32,
                            NUM_ACTIONS)
    for lstm_size in (0, 8)
}


@pytest.mark.parametrize("lstm_size", [0, 8], ids=["mlp", "lstm"])
@pytest.mark.parametrize("loss", ["vtrace", "ppo", "mmd"])
def test_updates_reduce_the_loss_and_count_versions(loss, lstm_size):
    network = NETWORKS[lstm_size]
    config = LearnerConfig(loss=loss, kl_cost=0.1 if loss == "mmd" else 0.0)
    state = init_train_state(config, network, jax.random.key(0))
    update = update_for(config, network)
    batch = _synthetic_batch(network)
    history = []
    for i in range(8):
        state, metrics = update(state, batch)
        history.append({k: float(v) for k, v in metrics.items()})
        assert all(np.shape(v) == () for v in metrics.values())
        assert history[-1]["policy_lag"] == i  # batch acted with version 0; state was at step i
    expected = EXPECTED_METRICS | ({"clip_fraction"} if loss in ("ppo", "mmd") else set()) | (
        {"kl", "kl_cost"} if loss == "mmd" else set())
    assert set(history[0]) == expected
    assert all(np.isfinite(v) for m in history for v in m.values())
    assert int(state.step) == 8 and state.step.dtype == jnp.int32
    assert history[-1]["total_loss"] < history[0]["total_loss"]


def _act(network, params, observation, first, legal_mask, key):
    """Sample legal actions from the current policy (what the host does)."""
    logits, _, _ = network.apply(params, observation, first, ())
    action = jax.random.categorical(key, masked_log_softmax(logits, legal_mask))
    return action.astype(jnp.int32), logits


def _bandit_batch(action, logits, legal, version, rewarded_arm):
    """One-step episodes: row 0 acts and terminates, row 1 is the bootstrap row."""
    batch = action.shape[0]
    reward = np.zeros((batch, 2), np.float32)
    reward[:, 0] = np.asarray(action[:, 0]) == rewarded_arm
    return Unroll(
        observation=np.ones((batch, 2, 3), np.float32),
        first=np.ones((batch, 2), bool),
        action=np.asarray(action),
        behaviour_logits=np.asarray(logits),
        legal_mask=legal,
        reward=reward,
        terminated=np.array([[True, False]] * batch),
        truncated=np.zeros((batch, 2), bool),
        policy_version=np.full((batch, 2), version, np.int32),
        core_state=(),
    )


@pytest.mark.parametrize("loss", ["vtrace", "ppo", "neurd", "mmd"])
def test_learns_the_rewarded_arm_of_a_bandit(loss):
    # Three arms, the third illegal. Each rewarded arm is learned from a fresh
    # init, so a policy that drifts to one arm regardless of reward fails one case.
    network = NETWORKS[0]
    configs = {"neurd": lambda: LearnerConfig(loss="vtrace", neurd_bound=2.0, learning_rate=1e-2),
               "mmd": lambda: LearnerConfig(loss="mmd", kl_cost=0.05, entropy_cost=0.01, learning_rate=1e-2,
                                            epochs=2, minibatches=2)}
    config = configs.get(loss, lambda: LearnerConfig(loss=loss, learning_rate=1e-2))()
    update = update_for(config, network)
    act = jax.jit(lambda *args: _act(network, *args))
    batch, iterations = 32, 40
    legal = np.broadcast_to(np.array([True, True, False]), (batch, 2, NUM_ACTIONS))
    observation, first = np.ones((batch, 1, 3), np.float32), np.ones((batch, 1), bool)
    for rewarded_arm in (0, 1):
        state = init_train_state(config, network, jax.random.key(rewarded_arm))
        key = jax.random.key(10 + rewarded_arm)
        for _ in range(iterations):
            key, sample_key = jax.random.split(key)
            action, logits = act(state.params, observation, first, legal[:, :1], sample_key)
            # Row 1 repeats row 0's action and logits; it is bootstrap-only.
            action, logits = jnp.repeat(action, 2, axis=1), jnp.repeat(logits, 2, axis=1)
            state, metrics = update(state, _bandit_batch(action, logits, legal, state.step, rewarded_arm))
            assert float(metrics["policy_lag"]) == 0.0
        _, logits = act(state.params, observation[:1], first[:1], legal[:1, :1], key)
        probs = np.exp(masked_log_softmax(logits[0, 0], legal[0, 0]))
        assert probs[rewarded_arm] > 0.9, (loss, rewarded_arm, probs)
        assert probs[2] == 0.0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(loss="a2c"), "loss must be one of"),
        (dict(learning_rate=0.0), "learning_rate must be > 0"),
        (dict(discount=1.5), r"discount must be in \[0, 1\]"),
        (dict(lambda_=-0.1), r"lambda_ must be in \[0, 1\]"),
        (dict(entropy_cost=-1.0), "entropy_cost must be >= 0"),
        (dict(ppo_clip_epsilon=0.0), "ppo_clip_epsilon must be > 0"),
        (dict(max_grad_norm=0.0), r"max_grad_norm must be > 0 \(or None: no clipping\)"),
        (dict(neurd_bound=0.0), "neurd_bound must be > 0"),
        (dict(loss="ppo", neurd_bound=2.0), "neurd_bound replaces the policy term of the vtrace loss"),
        (dict(loss="mmd"), "loss 'mmd' needs kl_cost > 0"),
        (dict(loss="ppo", kl_cost=0.1), "kl_cost applies to loss 'mmd' only"),
        (dict(epochs=0), "epochs must be >= 1"),
        (dict(reward_scale=0.0), "reward_scale must be a finite number > 0"),
        (dict(reward_scale=float("inf")), "reward_scale must be a finite number > 0"),
        (dict(minibatches=0), "minibatches must be >= 1"),
        (dict(loss="ppo", fixed_targets=True, value_clip_epsilon=-0.1), "value_clip_epsilon must be >= 0"),
        (dict(loss="ppo", value_clip_epsilon=0.2), "set --learner.fixed-targets true as well"),
        (dict(loss="vtrace", fixed_targets=True), "fixed_targets applies to losses 'ppo' and 'mmd'"),
    ],
)
def test_config_errors_say_what_to_change(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LearnerConfig(**kwargs)


def test_max_grad_norm_none_feeds_adam_the_raw_gradient_and_keeps_the_state_shape():
    """Two steps, a large gradient then a small one: with clipping Adam sees the first clipped to norm 0.5
    (so the second step differs); with None it sees both as they are. The optimiser state has one shape
    either way, so a run can resume with the other setting."""
    import optax

    from seedleague.rl.learner import _optimizer

    params = {"w": jnp.zeros(2)}
    grads = [{"w": jnp.array([30.0, 40.0])}, {"w": jnp.array([0.3, -0.1])}]  # norms 50 and about 0.32

    def steps(optimizer, scale=lambda g: g):
        state, updates = optimizer.init(params), []
        for g in grads:
            update, state = optimizer.update(scale(g), state, params)
            updates.append(update["w"])
        return state, updates

    plain_state, plain = steps(_optimizer(LearnerConfig(max_grad_norm=None)))
    _, adam = steps(optax.adam(1.0, eps=1e-5))
    np.testing.assert_allclose(plain[1], adam[1], rtol=1e-6)
    clip_state, clipped = steps(_optimizer(LearnerConfig(max_grad_norm=0.5)))
    _, by_hand = steps(optax.adam(1.0, eps=1e-5), lambda g: jax.tree.map(lambda x: x * min(1.0, 0.5 / float(
        jnp.linalg.norm(x))), g))
    np.testing.assert_allclose(clipped[1], by_hand[1], rtol=1e-5)
    assert not np.allclose(clipped[1], plain[1], rtol=1e-2)
    assert jax.tree.structure(plain_state) == jax.tree.structure(clip_state)


def test_learning_rate_and_entropy_cost_anneal_linearly_then_hold():
    from seedleague.rl.learner import anneal_progress, annealed

    config = LearnerConfig(learning_rate=1e-3, learning_rate_final=1e-4, entropy_cost=0.1, entropy_cost_final=0.0,
                           anneal_steps=100)
    entropy = [float(annealed(0.1, 0.0, anneal_progress(config, s))) for s in (0, 50, 100, 1000)]
    assert [round(e, 6) for e in entropy] == [0.1, 0.05, 0.0, 0.0]
    assert float(annealed(0.1, None, anneal_progress(config, 10**6))) == pytest.approx(0.1)
    assert float(anneal_progress(LearnerConfig(), 10**6)) == 0.0  # no anneal
    by_time = LearnerConfig(anneal_steps=100, anneal_seconds=60.0)  # time wins over steps
    assert [float(anneal_progress(by_time, 10**6, t)) for t in (0.0, 15.0, 60.0, 90.0)] == [0.0, 0.25, 1.0, 1.0]
    with pytest.raises(ValueError, match="entropy_cost_final"):
        LearnerConfig(entropy_cost_final=-1.0)
    with pytest.raises(ValueError, match="anneal_seconds must be >= 0"):
        LearnerConfig(anneal_seconds=-1.0)


def test_the_entropy_cost_can_fall_as_one_over_the_root_of_the_updates():
    # alpha(n) = 0.2 * sqrt(1000 / (1000 + n)): 0.2 at 0, 0.1 at 3,000 updates, 0.05 at 15,000; floored at the final cost.
    from seedleague.rl.learner import schedule

    config = LearnerConfig(entropy_cost=0.2, entropy_cost_final=0.04, entropy_decay_steps=1000, anneal_seconds=60.0)
    for fn in (schedule, jax.jit(schedule, static_argnums=0)):
        alphas = [float(fn(config, n, 30.0).entropy_cost) for n in (0, 3000, 15000, 10**6)]
        np.testing.assert_allclose(alphas, [0.2, 0.1, 0.05, 0.04], rtol=1e-6)
        assert float(fn(config, 3000, 30.0).progress) == pytest.approx(0.5)  # the anneal still runs for the rest
    linear = dataclasses.replace(config, entropy_decay_steps=0)
    assert float(schedule(linear, 10**6, 30.0).entropy_cost) == pytest.approx(0.12)  # halfway from 0.2 to 0.04
    with pytest.raises(ValueError, match="entropy_decay_steps must be >= 0"):
        LearnerConfig(entropy_decay_steps=-1)
    # Through an update: the metric is the cost the loss used.
    network = NETWORKS[0]
    state = init_train_state(config, network, jax.random.key(0))
    _, metrics = update_for(config, network)(state._replace(step=jnp.asarray(3000, state.step.dtype)),
                                              _synthetic_batch(network), np.float32(30.0))
    assert float(metrics["entropy_cost"]) == pytest.approx(0.1, rel=1e-6)


def test_the_proximal_weight_can_follow_the_entropy_cost():
    # alpha 0.2 -> 0.05 over 60 s with kl_cost 0.2: eta / alpha held, so kl_cost = 0.2 * 0.2 / alpha:
    # 0.2 at 0 s, 0.32 at 30 s (alpha 0.125), 0.8 at 60 s and after; without the option it stays 0.2.
    from seedleague.rl.learner import Scales, schedule

    config = LearnerConfig(loss="mmd", kl_cost=0.2, entropy_cost=0.2, entropy_cost_final=0.05, anneal_seconds=60.0,
                           kl_follows_entropy=True)
    for fn in (schedule, jax.jit(schedule, static_argnums=0)):
        kl = [float(fn(config, 0, t).kl_cost) for t in (0.0, 30.0, 60.0, 90.0)]
        np.testing.assert_allclose(kl, [0.2, 0.32, 0.8, 0.8], rtol=1e-6)
    # PBT's multipliers apply to the configured kl_cost; the ratio uses the configured alpha, not the scaled one.
    assert float(schedule(config, 0, 60.0, Scales(entropy_cost=2.0, kl_cost=0.5)).kl_cost) == pytest.approx(0.4)
    plain = dataclasses.replace(config, kl_follows_entropy=False)
    assert float(schedule(plain, 0, 60.0).kl_cost) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="kl_follows_entropy divides kl_cost by the annealed entropy cost"):
        dataclasses.replace(config, entropy_cost_final=0.0)
    # Through an update: the update reports the weight its loss used.
    network = NETWORKS[0]
    state = init_train_state(config, network, jax.random.key(0))
    _, metrics = update_for(config, network)(state, _synthetic_batch(network), np.float32(30.0))
    assert float(metrics["entropy_cost"]) == pytest.approx(0.125, rel=1e-6)
    assert float(metrics["kl_cost"]) == pytest.approx(0.32, rel=1e-6)


def test_lookahead_moves_the_params_half_way_from_the_slow_ones_every_interval():
    # k = 2, rate 0.5: update 1 leaves the params as the optimiser made them (p1) and the slow ones at p0;
    # update 2's optimiser step from p1 gives q2, and both params and slow become p0 + 0.5 * (q2 - p0).
    network = NETWORKS[0]
    plain = LearnerConfig(loss="ppo", learning_rate=1e-2)
    config = dataclasses.replace(plain, lookahead_interval=2, lookahead_rate=0.5)
    batch = _synthetic_batch(network)
    from seedleague.rl.learner import LookaheadState

    copy = lambda state: jax.tree.map(jnp.copy, state)  # an update donates the state it is given
    unwrapped = lambda state: state._replace(opt_state=state.opt_state.inner)  # the same state without Lookahead
    state0 = init_train_state(config, network, jax.random.key(0))
    assert isinstance(state0.opt_state, LookaheadState)
    update, update_plain = update_for(config, network), update_for(plain, network)
    state1, _ = update(copy(state0), batch)
    p1, _ = update_plain(copy(unwrapped(state0)), batch)
    _assert_trees_close(state1.params, p1.params)
    _assert_trees_close(state1.opt_state.slow, state0.params)
    q2, _ = update_plain(copy(unwrapped(state1)), batch)
    state2, _ = update(copy(state1), batch)
    expected = jax.tree.map(lambda p0, q: p0 + 0.5 * (q - p0), state0.params, q2.params)
    _assert_trees_close(state2.params, expected)
    _assert_trees_close(state2.opt_state.slow, expected)
    _assert_trees_close(state2.opt_state.inner, q2.opt_state)  # Adam's moments are kept across a sync
    # Without Lookahead the train state has the shape checkpoints of earlier runs have: no slow params anywhere.
    assert not isinstance(init_train_state(plain, network, jax.random.key(0)).opt_state, LookaheadState)
    assert LearnerConfig().lookahead_interval == 0
    with pytest.raises(ValueError, match="lookahead_rate in \\(0, 1\\]"):
        LearnerConfig(lookahead_interval=5, lookahead_rate=0.0)


def test_lookahead_average_restarts_the_params_at_the_mean_of_the_interval_s_iterates():
    # k = 3, rate 1, average: updates 1 and 2 leave the params as the optimiser made them (q1, q2); update 3's
    # optimiser step from q2 gives q3, and the params and the slow ones become (q1 + q2 + q3) / 3; the next
    # interval averages afresh from there.
    network = NETWORKS[0]
    plain = LearnerConfig(loss="ppo", learning_rate=1e-2)
    config = dataclasses.replace(plain, lookahead_interval=3, lookahead_rate=1.0, lookahead_average=True)
    batch = _synthetic_batch(network)
    copy = lambda state: jax.tree.map(jnp.copy, state)
    unwrapped = lambda state: state._replace(opt_state=state.opt_state.inner)
    update, update_plain = update_for(config, network), update_for(plain, network)
    states = [init_train_state(config, network, jax.random.key(0))]
    plain_steps = []
    for _ in range(4):
        plain_steps.append(update_plain(copy(unwrapped(states[-1])), batch)[0])
        states.append(update(copy(states[-1]), batch)[0])
    q1, q2, q3, q4 = (s.params for s in plain_steps)
    _assert_trees_close(states[1].params, q1)
    _assert_trees_close(states[2].params, q2)
    _assert_trees_close(states[2].opt_state.slow, states[0].params)
    expected = jax.tree.map(lambda a, b, c: (a + b + c) / 3, q1, q2, q3)
    _assert_trees_close(states[3].params, expected)
    _assert_trees_close(states[3].opt_state.slow, expected)
    _assert_trees_close(states[4].params, q4)  # the next interval starts from the restart, its mean from q4
    _assert_trees_close(states[4].opt_state.mean, q4)
    with pytest.raises(ValueError, match="set --learner.lookahead-interval > 0"):
        LearnerConfig(lookahead_average=True)


def _assert_trees_close(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)


def test_an_update_follows_the_trained_seconds_it_is_given():
    # Over time, the learning rate at 30 of 60 s is halfway; the param average of the last quarter starts at 45 s.
    network = NETWORKS[0]
    config = LearnerConfig(loss="ppo", learning_rate=1e-2, learning_rate_final=1e-3, anneal_seconds=60.0,
                           average_tail=0.25)
    state = init_train_state(config, network, jax.random.key(0))
    update = update_for(config, network)
    batch = _synthetic_batch(network)
    state, metrics = update(state, batch, np.float32(30.0))
    assert float(metrics["anneal_progress"]) == pytest.approx(0.5)
    assert int(state.average.count) == 0
    state, metrics = update(state, batch, np.float32(45.0))
    assert int(state.average.count) == 1
    for a, p in zip(jax.tree.leaves(state.average.params), jax.tree.leaves(state.params)):
        np.testing.assert_allclose(a, p, rtol=1e-5, atol=1e-7)  # the first averaged update: those params


def test_magnet_follows_the_params_as_a_moving_average_and_pulls_the_policy():
    network = NETWORKS[0]
    batch = _synthetic_batch(network)
    plain = LearnerConfig()
    assert init_train_state(plain, network, jax.random.key(0)).magnet == ()
    fixed = LearnerConfig(magnet_cost=1.0)
    moving = LearnerConfig(magnet_cost=1.0, magnet_rate=0.25)
    for config in (fixed, moving):
        state = init_train_state(config, network, jax.random.key(0))
        initial = jax.tree.map(np.asarray, state.params)
        jax.tree.map(np.testing.assert_array_equal, state.magnet, initial)
        magnet = initial
        update = update_for(config, network)
        for _ in range(3):
            state, metrics = update(state, batch)
            params = jax.tree.map(np.asarray, state.params)
            magnet = jax.tree.map(lambda m, p: m + config.magnet_rate * (p - m), magnet, params)
            assert float(metrics["magnet_kl"]) >= 0.0
        jax.tree.map(lambda got, want: np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6), state.magnet, magnet)
    # The KL term's gradient points the policy at the magnet: with a magnet far
    # from the policy and a cost that dwarfs the policy-gradient term, the KL falls.
    config = LearnerConfig(magnet_cost=100.0, entropy_cost=0.0, learning_rate=1e-2)
    state = init_train_state(config, network, jax.random.key(0))
    noise = np.random.default_rng(1)
    state = state._replace(magnet=jax.tree.map(lambda x: x + noise.normal(size=x.shape).astype(x.dtype), state.magnet))
    update = update_for(config, network)
    kls = []
    for _ in range(30):
        state, metrics = update(state, batch)
        kls.append(float(metrics["magnet_kl"]))
    assert kls[-1] < 0.2 * kls[0], kls


def test_param_average_is_the_mean_of_the_params_after_every_update_from_its_start_step():
    network = NETWORKS[0]
    batch = _synthetic_batch(network)
    assert init_train_state(LearnerConfig(), network, jax.random.key(0)).average == ()
    config = LearnerConfig(average_from=2)
    state = init_train_state(config, network, jax.random.key(0))
    initial = jax.tree.map(np.asarray, state.params)
    jax.tree.map(np.testing.assert_array_equal, state.average.params, initial)
    assert int(state.average.count) == 0
    update = update_for(config, network)
    after = []  # params after the updates at steps 0..4
    for _ in range(5):
        state, _ = update(state, batch)
        after.append(jax.tree.map(np.asarray, state.params))
        if int(state.step) <= 2:  # steps 0 and 1 are before the start: nothing averaged yet
            jax.tree.map(np.testing.assert_array_equal, state.average.params, initial)
    assert int(state.average.count) == 3
    want = jax.tree.map(lambda *p: np.mean(p, axis=0), *after[2:])
    jax.tree.map(lambda got, w: np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6), state.average.params, want)
    # Acting and learning use the params, not their average.
    assert any(not np.allclose(a, p) for a, p in zip(jax.tree.leaves(state.average.params),
                                                     jax.tree.leaves(state.params)))
    with pytest.raises(ValueError, match="average_from must be a learner step >= 0"):
        LearnerConfig(average_from=-1)


def test_magnet_config_errors():
    with pytest.raises(ValueError, match="magnet_rate must be in"):
        LearnerConfig(magnet_rate=1.5)
    with pytest.raises(ValueError, match="magnet_cost must be >= 0"):
        LearnerConfig(magnet_cost=-0.1)


def test_epochs_are_that_many_steps_on_the_batch_under_one_policy_version():
    # With one minibatch, an update of 3 epochs is 3 single-step updates on the same batch (the
    # shuffle only reorders a mean); the policy version counts one update, Adam three steps.
    network = NETWORKS[0]
    batch = _synthetic_batch(network)
    single = LearnerConfig(loss="ppo", learning_rate=1e-2)
    state = init_train_state(single, network, jax.random.key(0))
    update = update_for(single, network)
    for _ in range(3):
        state, _ = update(state, batch)
    triple = LearnerConfig(loss="ppo", learning_rate=1e-2, epochs=3)
    multi, metrics = update_for(triple, network)(init_train_state(triple, network, jax.random.key(0)), batch)
    assert int(multi.step) == 1 and int(state.step) == 3
    for a, b in zip(jax.tree.leaves(multi.params), jax.tree.leaves(state.params)):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-6)
    assert set(metrics) >= EXPECTED_METRICS


@pytest.mark.parametrize("value_clip_epsilon", [0.0, 0.2], ids=["plain", "value_clip"])
def test_fixed_targets_are_those_of_the_params_the_update_starts_from(value_clip_epsilon):
    # One step: the fixed targets come from the very params the gradient is taken at, so the step is
    # the recomputing one's (value clipping is inactive at V = V_old). Three epochs: the recomputing
    # update's later steps see targets from moved values, the fixed one's do not, so they part.
    network = NETWORKS[0]
    batch = _synthetic_batch(network)

    def params_after(epochs, **kwargs):
        config = LearnerConfig(loss="ppo", learning_rate=1e-2, epochs=epochs, **kwargs)
        state, metrics = update_for(config, network)(init_train_state(config, network, jax.random.key(0)), batch)
        assert np.isfinite(float(metrics["total_loss"]))
        return jax.tree.leaves(state.params)

    fixed = dict(fixed_targets=True, value_clip_epsilon=value_clip_epsilon)
    for a, b in zip(params_after(1, **fixed), params_after(1)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert any(not np.allclose(a, b, rtol=1e-4, atol=1e-6)
               for a, b in zip(params_after(3, **fixed), params_after(3)))


def test_minibatches_split_whole_unrolls_and_each_epoch_reshuffles():
    from seedleague.rl.learner import _minibatch_rows

    config = LearnerConfig(epochs=2, minibatches=2)
    rows = np.asarray(_minibatch_rows(config, 4, jax.random.key(0)))
    assert rows.shape == (4, 2)
    for epoch in (rows[:2], rows[2:]):
        assert sorted(epoch.ravel().tolist()) == [0, 1, 2, 3]  # every unroll once per epoch
    with pytest.raises(ValueError, match="multiple of --learner.minibatches"):
        _minibatch_rows(LearnerConfig(minibatches=3), 4, jax.random.key(0))


def test_the_anneal_counts_updates_not_adam_steps():
    # 4 Adam steps per update; the anneal over 2 updates is at 0, then 0.5, then done.
    config = LearnerConfig(loss="ppo", learning_rate=1e-2, learning_rate_final=1e-3, anneal_steps=2, epochs=2,
                           minibatches=2)
    network = NETWORKS[0]
    state = init_train_state(config, network, jax.random.key(0))
    update = update_for(config, network)
    batch = _synthetic_batch(network)
    progress = []
    for _ in range(3):
        state, metrics = update(state, batch)
        progress.append(float(metrics["anneal_progress"]))
    assert progress == [0.0, 0.5, 1.0]


def test_a_magnet_with_an_interval_is_replaced_by_the_params_after_every_interval():
    network = NETWORKS[0]
    batch = _synthetic_batch(network)
    config = LearnerConfig(magnet_cost=0.5, magnet_interval=2, learning_rate=1e-2)
    state = init_train_state(config, network, jax.random.key(0))
    initial = jax.tree.map(np.asarray, state.params)
    update = update_for(config, network)
    state, _ = update(state, batch)  # update 1: the magnet stays the initial params
    jax.tree.map(np.testing.assert_array_equal, state.magnet, initial)
    state, _ = update(state, batch)  # update 2: replaced by the params after it
    after_two = jax.tree.map(np.asarray, state.params)
    jax.tree.map(np.testing.assert_array_equal, state.magnet, after_two)
    state, _ = update(state, batch)  # update 3: held until update 4
    jax.tree.map(np.testing.assert_array_equal, state.magnet, after_two)


def test_a_magnet_with_an_interval_and_a_rate_is_replaced_by_the_moving_average_of_the_params():
    # R-NaD's outer loop: a target follows the params at the rate; every interval the magnet becomes the target.
    network = NETWORKS[0]
    batch = _synthetic_batch(network)
    config = LearnerConfig(magnet_cost=0.5, magnet_interval=2, magnet_rate=0.25, learning_rate=1e-2)
    state = init_train_state(config, network, jax.random.key(0))
    initial = jax.tree.map(np.asarray, state.params)
    target = initial
    update = update_for(config, network)
    for step in (1, 2, 3):
        state, _ = update(state, batch)
        params = jax.tree.map(np.asarray, state.params)
        target = jax.tree.map(lambda t, p: t + 0.25 * (p - t), target, params)
        jax.tree.map(lambda got, want: np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6),
                     state.magnet_target, target)
        if step == 1:  # held at the initial params until the interval ends
            jax.tree.map(np.testing.assert_array_equal, state.magnet, initial)
        if step == 2:  # replaced by the target, not the params
            replaced = target
            jax.tree.map(lambda got, want: np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6),
                         state.magnet, replaced)
            assert not np.allclose(jax.tree.leaves(state.magnet)[0], jax.tree.leaves(params)[0])
    jax.tree.map(lambda got, want: np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6), state.magnet,
                 replaced)  # update 3: held until update 4
    assert init_train_state(LearnerConfig(magnet_cost=0.5, magnet_interval=2), network,
                            jax.random.key(0)).magnet_target == ()


@pytest.mark.parametrize("loss", ["vtrace", "mmd"])
def test_a_magnet_in_the_returns_takes_its_kl_from_the_rewards_scaled_to_the_advantages(loss):
    # The learner's own computation against the one written out here: the magnet's KL at each next row,
    # times magnet_cost (and, for MMD's normalised advantages, the spread of the plain advantages),
    # taken from each reward.
    from seedleague.rl import losses
    from seedleague.rl.learner import _in_returns, _magnet_kl_rows, schedule

    network = NETWORKS[0]
    batch = _synthetic_batch(network)
    config = LearnerConfig(loss=loss, kl_cost=0.2 if loss == "mmd" else 0.0, epochs=2 if loss == "mmd" else 1,
                           magnet_cost=0.3, magnet_in_returns=True, entropy_cost=0.0)
    params = network.init(jax.random.key(0))
    magnet = network.init(jax.random.key(1))
    logits, values, _ = network.apply(params, batch.observation, batch.first, batch.core_state)
    magnet_logits, _, _ = network.apply(magnet, batch.observation, batch.first, batch.core_state)
    inputs = losses.loss_inputs(logits, values, batch, config.discount)
    kl_rows = _magnet_kl_rows(network, logits, magnet_logits, batch)
    np.testing.assert_allclose(kl_rows, losses.masked_kl(logits, magnet_logits, batch.legal_mask), rtol=1e-6)
    scale = 1.0
    if loss == "mmd":
        scale = float(np.std(losses.ppo_targets(inputs, lambda_=config.lambda_).advantage))
        assert scale > 0.1
    want = np.asarray(inputs.r_t) - 0.3 * scale * np.asarray(inputs.discount_t) * np.asarray(kl_rows[:, 1:])
    for fn in (_in_returns, jax.jit(_in_returns, static_argnums=0)):
        got = fn(config, inputs, kl_rows, schedule(config, 0))
        np.testing.assert_allclose(got.r_t, want, rtol=1e-5, atol=1e-6)
    # Through a whole update: the KL in the returns changes the value loss, and the update runs.
    def metrics_of(config):  # a fresh state each time: the update takes its state's buffers
        state = init_train_state(config, network, jax.random.key(0))
        return update_for(config, network)(state._replace(magnet=network.init(jax.random.key(1))), batch)[1]

    with_returns, without = metrics_of(config), metrics_of(dataclasses.replace(config, magnet_in_returns=False))
    assert np.isfinite(float(with_returns["total_loss"]))
    assert float(with_returns["value_loss"]) != pytest.approx(float(without["value_loss"]))
    with pytest.raises(ValueError, match="magnet_in_returns puts the magnet's KL"):
        LearnerConfig(magnet_in_returns=True)


@pytest.mark.parametrize("torso, lstm_size, convolves", [("board", 0, True), ("board", 8, True), ("mlp", 0, False),
                                                         ("mlp", 8, False)])
def test_convolutional_networks_are_recognised_through_nested_jaxprs(torso, lstm_size, convolves):
    # XLA:CPU runs a convolution inside the minibatch loop several times slower, so such networks unroll it.
    from seedleague.rl.learner import _convolves

    shape = (3, 6, 7) if torso == "board" else (5,)
    network = make_network(NetworkConfig(torso=torso, hidden_sizes=(16,), lstm_size=lstm_size), shape, np.float32, 3)
    params = network.init(jax.random.key(0))
    batch = Unroll(observation=jnp.zeros((2, 4) + shape), first=jnp.zeros((2, 4), bool), action=None,
                   behaviour_logits=None, legal_mask=None, reward=None, terminated=None, truncated=None,
                   policy_version=None, core_state=network.initial_state(2))
    assert _convolves(network, params, batch) is convolves


def _loops(jaxpr) -> list:
    """The scan and while equations in `jaxpr` and in the jaxprs nested in it."""
    found = []
    for equation in jaxpr.eqns:
        if equation.primitive.name in ("scan", "while"):
            found.append(equation)
        for value in equation.params.values():
            for inner in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(inner, "jaxpr", inner)
                if hasattr(inner, "eqns"):
                    found += _loops(inner)
    return found


@pytest.mark.parametrize("torso, loops", [("board", False), ("mlp", True)])
def test_minibatch_steps_of_a_convolutional_network_are_unrolled_on_cpu(torso, loops):
    from seedleague.rl.learner import _update
    from seedleague.rl.xla_cpu import has_convolution

    config = LearnerConfig(loss="ppo", epochs=2, minibatches=2)
    shape = (2, 3, 3) if torso == "board" else (5,)
    network = make_network(NetworkConfig(torso=torso, hidden_sizes=(8,)), shape, np.float32, 3)
    rows = (4, 3)
    batch = Unroll(observation=np.zeros(rows + shape, np.float32), first=np.zeros(rows, bool),
                   action=np.zeros(rows, np.int32), behaviour_logits=np.zeros(rows + (3,), np.float32),
                   legal_mask=np.ones(rows + (3,), bool), reward=np.zeros(rows, np.float32),
                   terminated=np.zeros(rows, bool), truncated=np.zeros(rows, bool),
                   policy_version=np.zeros(rows, np.int32), core_state=())
    state = init_train_state(config, network, jax.random.key(0))
    jaxpr = jax.make_jaxpr(functools.partial(_update, config, network))(state, batch).jaxpr
    # A scan lowers to a loop unless it is unrolled over its whole length.
    loops_left = [loop for loop in _loops(jaxpr) if loop.primitive.name == "while"
                  or loop.params["unroll"] is not True and loop.params["unroll"] < loop.params["length"]]
    assert any(loop.primitive.name == "scan" and loop.params["length"] == 4 for loop in loops_left) is loops
    body = lambda loop: loop.params["jaxpr" if loop.primitive.name == "scan" else "body_jaxpr"].jaxpr
    assert not any(has_convolution(body(loop)) for loop in loops_left)


@pytest.mark.parametrize("loss", ["vtrace", "mmd"])
def test_reward_scale_is_the_update_on_rewards_multiplied_by_it(loss):
    """reward_scale c on a batch is exactly the update with its rewards multiplied by c (values and returns
    are then learnt in the scaled units): the same metrics and the same params."""
    network = NETWORKS[0]
    batch = _synthetic_batch(network)
    scaled_batch = batch._replace(reward=batch.reward * np.float32(0.001))
    kl = dict(kl_cost=0.1, epochs=2) if loss == "mmd" else {}
    plain, scaled = LearnerConfig(loss=loss, **kl), LearnerConfig(loss=loss, reward_scale=0.001, **kl)
    def state():  # a fresh one per update: the update donates its state
        return init_train_state(plain, network, jax.random.key(0))

    by_batch, by_batch_metrics = update_for(plain, network)(state(), scaled_batch)
    by_config, by_config_metrics = update_for(scaled, network)(state(), batch)
    for name, value in by_batch_metrics.items():
        np.testing.assert_allclose(by_config_metrics[name], value, rtol=1e-5, atol=1e-7, err_msg=name)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7), by_config.params, by_batch.params)
    unscaled_metrics = update_for(plain, network)(state(), batch)[1]
    assert float(unscaled_metrics["value_loss"]) > 10 * float(by_config_metrics["value_loss"])
