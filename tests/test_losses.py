"""Masked categorical maths, episode boundaries and the two losses, checked by hand."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seedleague.rl import losses
from seedleague.rl.types import Unroll
from seedleague.rl.vtrace import generalized_advantage_estimation

MAYBE_JIT = pytest.mark.parametrize("maybe_jit", [lambda f: f, jax.jit], ids=["eager", "jit"])
MASK = np.array([True, False, True, False])


@MAYBE_JIT
def test_masked_policy_gives_illegal_actions_zero_probability(maybe_jit):
    logits = np.array([0.0, 50.0, 0.0, -3.0], np.float32)
    log_probs = maybe_jit(losses.masked_log_softmax)(logits, MASK)
    assert np.all(np.isfinite(log_probs))
    np.testing.assert_allclose(np.exp(log_probs), [0.5, 0.0, 0.5, 0.0], atol=1e-7)


@MAYBE_JIT
def test_masked_entropy_of_uniform_logits_is_log_of_legal_count(maybe_jit):
    logits = np.zeros((2, 4), np.float32)
    mask = np.stack([MASK, np.ones(4, bool)])
    entropy = maybe_jit(losses.masked_entropy)(logits, mask)
    np.testing.assert_allclose(entropy, [math.log(2), math.log(4)], rtol=1e-6)


def test_masked_entropy_and_log_prob_have_finite_gradients():
    logits = np.array([1.0, 2.0, -1.0, 0.5], np.float32)

    def objective(x):
        return losses.masked_entropy(x, MASK) + losses.masked_log_prob(x, jnp.array(2), MASK)

    grad = jax.grad(objective)(logits)
    assert np.all(np.isfinite(grad))
    np.testing.assert_allclose(grad[~MASK], 0.0)


@MAYBE_JIT
def test_masked_log_prob_picks_the_action(maybe_jit):
    logits = np.array([[math.log(3.0), 9.0, 0.0, 9.0]], np.float32)  # legal probs 3/4 and 1/4
    log_pi = maybe_jit(losses.masked_log_prob)(logits, np.array([2]), MASK[None])
    np.testing.assert_allclose(log_pi, [math.log(0.25)], rtol=1e-6)


@MAYBE_JIT
def test_truncation_bootstraps_with_the_value_of_the_last_state(maybe_jit):
    # gamma = 0.9; step 1 terminates, step 2 is truncated, step 3 has both flags.
    # discount = [0.9, 0, 0, 0]
    # r = [1, 1, 1 + 0.9 * V(s_2) = 1 + 0.9 * 30 = 28, 1 (terminated wins: no bootstrap)]
    fn = maybe_jit(functools.partial(losses.rewards_and_discounts, gamma=0.9))
    r_t, discount_t = fn(
        np.ones(4, np.float32),
        np.array([False, True, False, True]),
        np.array([False, False, True, True]),
        np.array([10.0, 20.0, 30.0, 40.0], np.float32),
    )
    np.testing.assert_allclose(discount_t, [0.9, 0.0, 0.0, 0.0], rtol=1e-6)
    np.testing.assert_allclose(r_t, [1.0, 1.0, 28.0, 1.0], rtol=1e-6)


def _unroll(reward, terminated, truncated, action, num_actions=3):
    b, rows = np.shape(reward)
    return Unroll(
        observation=np.zeros((b, rows, 1), np.float32),
        first=np.zeros((b, rows), bool),
        action=np.asarray(action, np.int32),
        behaviour_logits=np.zeros((b, rows, num_actions), np.float32),
        legal_mask=np.ones((b, rows, num_actions), bool),
        reward=np.asarray(reward, np.float32),
        terminated=np.asarray(terminated, bool),
        truncated=np.asarray(truncated, bool),
        policy_version=np.zeros((b, rows), np.int32),
        core_state=(),
    )


def test_loss_inputs_align_rows_and_ignore_the_bootstrap_row():
    # T = 2 (3 rows). Row 0 is truncated: r_0 = 1 + 0.5 * V(s_0) = 1 + 0.5 * 4 = 3.
    # Row 2 is bootstrap-only: its reward 1000 and flags must not appear anywhere.
    batch = _unroll(
        reward=[[1.0, 2.0, 1000.0]],
        terminated=[[False, False, True]],
        truncated=[[True, False, True]],
        action=[[0, 1, 2]],
    )
    logits = jnp.log(jnp.array([[[0.5, 0.25, 0.25], [0.2, 0.6, 0.2], [1 / 3, 1 / 3, 1 / 3]]]))
    values = jnp.array([[4.0, 6.0, 8.0]])
    inputs = losses.loss_inputs(logits, values, batch, discount=0.5)
    np.testing.assert_allclose(inputs.r_t, [[3.0, 2.0]], rtol=1e-6)
    np.testing.assert_allclose(inputs.discount_t, [[0.0, 0.5]], rtol=1e-6)
    np.testing.assert_allclose(inputs.v_tm1, [[4.0, 6.0]])
    np.testing.assert_allclose(inputs.v_t, [[6.0, 8.0]])
    np.testing.assert_allclose(inputs.log_pi_tm1, np.log([[0.5, 0.6]]), rtol=1e-6)
    np.testing.assert_allclose(inputs.log_mu_tm1, np.log([[1 / 3, 1 / 3]]), rtol=1e-6)


def _inputs(**fields):
    fields.setdefault("entropy_t", np.zeros_like(np.asarray(fields["r_t"])))
    fields.setdefault("logit_tm1", np.zeros_like(np.asarray(fields["r_t"])))
    fields.setdefault("kl_tm1", np.zeros_like(np.asarray(fields["r_t"])))
    return losses.LossInputs(**{k: jnp.asarray(v, jnp.float32) for k, v in fields.items()})


@MAYBE_JIT
def test_vtrace_loss_hand_example(maybe_jit):
    # One step, on-policy (rho = 1), episode ends: target = r = 1, error = 1, pg advantage = 1.
    # policy_loss = -1 * log 0.5 = 0.6931; value_loss = 0.5 * 1^2 = 0.5; entropy = 0.7
    # loss = 0.6931 + 0.5 * 0.5 - 0.01 * 0.7 = 0.9361
    inputs = _inputs(log_pi_tm1=[[math.log(0.5)]], log_mu_tm1=[[math.log(0.5)]], entropy_tm1=[[0.7]],
                     v_tm1=[[0.0]], v_t=[[5.0]], r_t=[[1.0]], discount_t=[[0.0]])
    fn = functools.partial(losses.vtrace_loss, entropy_cost=0.01, baseline_cost=0.5)
    loss, metrics = maybe_jit(fn)(inputs)
    np.testing.assert_allclose(metrics["policy_loss"], math.log(2), rtol=1e-6)
    np.testing.assert_allclose(metrics["value_loss"], 0.5, rtol=1e-6)
    np.testing.assert_allclose(metrics["importance_ratio"], 1.0, rtol=1e-6)
    np.testing.assert_allclose(loss, math.log(2) + 0.25 - 0.007, rtol=1e-6)


def test_vtrace_loss_gradient_is_minus_advantage_over_steps():
    # Two steps with pg advantages [1, -2] (rho = 1, episode ends each step, V = 0).
    # d policy_loss / d log_pi = -advantage / (B * T) = [-0.5, 1]
    base = dict(log_mu_tm1=[[0.0, 0.0]], entropy_tm1=[[0.0, 0.0]], v_tm1=[[0.0, 0.0]],
                v_t=[[0.0, 0.0]], r_t=[[1.0, -2.0]], discount_t=[[0.0, 0.0]])
    grad = jax.grad(lambda x: losses.vtrace_loss(_inputs(log_pi_tm1=x, **base), entropy_cost=0.0)[0])(
        jnp.zeros((1, 2))
    )
    np.testing.assert_allclose(grad, [[-0.5, 1.0]], rtol=1e-6)


@MAYBE_JIT
def test_vtrace_loss_with_the_entropy_in_the_returns_hand_example(maybe_jit):
    # One episode of two steps, on-policy, V = 0, lambda 1, rewards [0, 1], entropy cost 0.1, and
    # entropies H(s_1) = 0.6 (after step 0) and 0.9 (after step 1, which ends the episode: unused):
    #   soft rewards r_i + 0.1 * gamma_i * H(s_{i+1}): [0.06, 1]
    #   returns (= targets = pg advantages): [1.06, 1]
    #   loss = policy_loss + 0.5 * value_loss - 0.1 * mean(entropy of s_0, s_1)
    log_pi = [math.log(0.5), math.log(0.25)]
    inputs = _inputs(log_pi_tm1=[log_pi], log_mu_tm1=[log_pi], entropy_tm1=[[0.7, 0.6]], entropy_t=[[0.6, 0.9]],
                     v_tm1=[[0.0, 0.0]], v_t=[[0.0, 0.0]], r_t=[[0.0, 1.0]], discount_t=[[1.0, 0.0]])
    returns = [1.06, 1.0]
    fn = functools.partial(losses.vtrace_loss, entropy_cost=0.1, baseline_cost=0.5, entropy_in_returns=True)
    loss, metrics = maybe_jit(fn)(inputs)
    policy_loss = -(returns[0] * log_pi[0] + returns[1] * log_pi[1]) / 2
    value_loss = 0.5 * (returns[0] ** 2 + returns[1] ** 2) / 2
    np.testing.assert_allclose(metrics["policy_loss"], policy_loss, rtol=1e-6)
    np.testing.assert_allclose(metrics["value_loss"], value_loss, rtol=1e-6)
    np.testing.assert_allclose(loss, policy_loss + 0.5 * value_loss - 0.1 * 0.65, rtol=1e-6)
    plain = losses.vtrace_loss(inputs, entropy_cost=0.1, baseline_cost=0.5)[1]
    np.testing.assert_allclose(plain["value_loss"], 0.5 * (1.0 + 1.0) / 2, rtol=1e-6)  # without: returns [1, 1]


@MAYBE_JIT
def test_magnet_rewards_take_the_next_states_kl_from_each_reward(maybe_jit):
    # Two episodes of two steps, magnet cost 0.2. Episode 0 goes on after step 0 (gamma 1) and ends
    # after step 1; episode 1 is truncated with gamma 0.5 after step 0. KL(pi || rho) at the next
    # states: [[0.5, 0.7], [0.4, 0.3]].
    #   r_i - 0.2 * gamma_i * KL(s_{i+1}) = [[1 - 0.1, 2 - 0], [0 - 0.04, -1 - 0]]
    inputs = _inputs(log_pi_tm1=np.zeros((2, 2)), log_mu_tm1=np.zeros((2, 2)), entropy_tm1=np.zeros((2, 2)),
                     v_tm1=np.zeros((2, 2)), v_t=np.zeros((2, 2)), r_t=[[1.0, 2.0], [0.0, -1.0]],
                     discount_t=[[1.0, 0.0], [0.5, 0.0]])
    kl_t = jnp.asarray([[0.5, 0.7], [0.4, 0.3]])
    out = maybe_jit(losses.magnet_rewards)(inputs, 0.2, kl_t)
    np.testing.assert_allclose(out.r_t, [[0.9, 2.0], [-0.04, -1.0]], rtol=1e-6)
    np.testing.assert_array_equal(out.v_tm1, inputs.v_tm1)  # only the rewards change
    # The KL is data: no gradient flows back through the rewards into it.
    grad = jax.grad(lambda kl: jnp.sum(losses.magnet_rewards(inputs, 0.2, kl).r_t))(kl_t)
    np.testing.assert_array_equal(grad, np.zeros((2, 2)))
    with pytest.raises(ValueError, match="kl_t must be"):
        losses.magnet_rewards(inputs, 0.2, kl_t[:, :1])


def test_magnet_rewards_regularise_the_vtrace_returns_by_hand():
    # One episode of two steps, on-policy, V = 0, lambda 1, rewards [0, 1]; the magnet's KL at s_1
    # is 0.5, so with cost 0.2 the returns are those of the regularised game: [1 - 0.1, 1].
    log_pi = [math.log(0.5), math.log(0.25)]
    inputs = _inputs(log_pi_tm1=[log_pi], log_mu_tm1=[log_pi], entropy_tm1=[[0.0, 0.0]], v_tm1=[[0.0, 0.0]],
                     v_t=[[0.0, 0.0]], r_t=[[0.0, 1.0]], discount_t=[[1.0, 0.0]])
    regularised = losses.magnet_rewards(inputs, 0.2, jnp.asarray([[0.5, 0.9]]))
    _, metrics = losses.vtrace_loss(regularised, entropy_cost=0.0, baseline_cost=0.5)
    np.testing.assert_allclose(metrics["value_loss"], 0.5 * (0.9 ** 2 + 1.0) / 2, rtol=1e-6)


def test_loss_inputs_carry_the_next_states_entropy_without_a_gradient():
    batch = _unroll(reward=[[0.0, 0.0, 0.0]], terminated=[[False, True, False]], truncated=[[False, False, False]],
                    action=[[0, 2, 0]])
    logits = jnp.asarray([[[0.0, 0.0, 0.0], [1.0, 0.0, -1.0], [0.0, 0.0, 0.0]]])
    inputs = losses.loss_inputs(logits, jnp.zeros((1, 3)), batch, discount=1.0)
    p = np.exp([1.0, 0.0, -1.0]) / np.exp([1.0, 0.0, -1.0]).sum()
    np.testing.assert_allclose(inputs.entropy_t, [[-(p * np.log(p)).sum(), math.log(3)]], rtol=1e-6)  # rows 1 and 2
    grad = jax.grad(lambda x: jnp.sum(losses.loss_inputs(x, jnp.zeros((1, 3)), batch, 1.0).entropy_t))(logits)
    np.testing.assert_allclose(grad, 0.0)


def test_centred_logit_is_the_actions_logit_minus_the_legal_mean():
    logits = jnp.asarray([[3.0, 100.0, 1.0, -7.0]])
    np.testing.assert_allclose(losses.centred_logit(logits, jnp.asarray([0]), jnp.asarray([MASK])), [1.0])
    np.testing.assert_allclose(losses.centred_logit(logits, jnp.asarray([2]), jnp.asarray([MASK])), [-1.0])


def _neurd_grad(logit, advantage_rewards, pi):
    """d policy_loss / d centred logit, and the metrics, for one-step episodes (on-policy, V = 0)."""
    log_pi = [[math.log(p) for p in pi]]
    zeros = [[0.0] * len(pi)]
    base = dict(log_pi_tm1=log_pi, log_mu_tm1=log_pi, entropy_tm1=zeros, v_tm1=zeros, v_t=zeros,
                r_t=[advantage_rewards], discount_t=zeros)

    def policy_loss(y):
        return losses.vtrace_loss(_inputs(logit_tm1=y, **base), entropy_cost=0.0, neurd_bound=2.0)[1]["policy_loss"]

    y = jnp.asarray([logit], jnp.float32)
    return jax.grad(policy_loss)(y), losses.vtrace_loss(_inputs(logit_tm1=y, **base), neurd_bound=2.0)[1]


def test_neurd_moves_each_logit_by_its_advantage_over_pi():
    # Advantages [1, -2] (rewards of one-step episodes, V = 0) at pi(a) = [0.5, 0.25], B * T = 2:
    # d loss / d y = -advantage / pi / 2 = [-1, 4]; the softmax policy gradient would scale by pi instead.
    grad, metrics = _neurd_grad([0.0, 0.0], [1.0, -2.0], [0.5, 0.25])
    np.testing.assert_allclose(grad, [[-1.0, 4.0]], rtol=1e-6)
    assert float(metrics["neurd_blocked"]) == 0.0


def test_neurd_does_not_push_a_logit_past_its_bound():
    # Both logits past +-2 and both advantages pushing further out: no gradient at all.
    grad, metrics = _neurd_grad([2.5, -2.5], [1.0, -2.0], [0.5, 0.25])
    np.testing.assert_allclose(grad, [[0.0, 0.0]])
    assert float(metrics["neurd_blocked"]) == 1.0
    # Past the upper bound, a negative advantage still pulls the logit back in.
    grad, metrics = _neurd_grad([2.5, 2.5], [1.0, -2.0], [0.5, 0.25])
    np.testing.assert_allclose(grad, [[0.0, 4.0]], rtol=1e-6)
    assert float(metrics["neurd_blocked"]) == 0.5


@MAYBE_JIT
def test_ppo_loss_hand_example(maybe_jit):
    # Two steps, each ending its episode, V = 0, rewards [1, -1]:
    #   q - V = [1, -1], normalised (mean 0, std 1) -> [1, -1]
    #   ratio = [1.5, 0.5], clipped to [1.2, 0.8] with eps = 0.2
    #   min(ratio * A, clipped * A) = [min(1.5, 1.2), min(-0.5, -0.8)] = [1.2, -0.8]
    #   policy_loss = -mean([1.2, -0.8]) = -0.2; both ratios are outside the clip range.
    #   V-trace targets: min(1, rho) * (r - V) = [1, -0.5]; value_loss = 0.5 * mean([1, 0.25]) = 0.3125
    inputs = _inputs(log_pi_tm1=[[math.log(1.5), math.log(0.5)]], log_mu_tm1=[[0.0, 0.0]],
                     entropy_tm1=[[0.0, 0.0]], v_tm1=[[0.0, 0.0]], v_t=[[3.0, 3.0]],
                     r_t=[[1.0, -1.0]], discount_t=[[0.0, 0.0]])
    loss, metrics = maybe_jit(functools.partial(losses.ppo_loss, clip_epsilon=0.2))(inputs)
    np.testing.assert_allclose(metrics["policy_loss"], -0.2, rtol=1e-5)
    np.testing.assert_allclose(metrics["value_loss"], 0.3125, rtol=1e-6)
    np.testing.assert_allclose(metrics["clip_fraction"], 1.0)
    np.testing.assert_allclose(loss, -0.2 + 0.5 * 0.3125, rtol=1e-5)


@MAYBE_JIT
def test_ppo_loss_stays_finite_when_a_narrow_gaussian_makes_the_ratio_overflow(maybe_jit):
    # log(pi / mu) = 200 overflows exp in float32; capped at MAX_LOG_RATIO = 20 the step with A = +1 takes the
    # clipped branch (1.2) and the one with A = -1 the capped ratio, -e^20: the loss and its gradient stay finite.
    def loss(log_pi):
        inputs = _inputs(log_pi_tm1=log_pi, log_mu_tm1=[[0.0, 0.0]], entropy_tm1=[[0.0, 0.0]], v_tm1=[[0.0, 0.0]],
                         v_t=[[0.0, 0.0]], r_t=[[1.0, -1.0]], discount_t=[[0.0, 0.0]])
        return losses.ppo_loss(inputs, clip_epsilon=0.2)[0]

    log_pi = jnp.array([[200.0, 200.0]])
    value, grad = maybe_jit(jax.value_and_grad(loss))(log_pi)
    np.testing.assert_allclose(value, -(1.2 - math.exp(20.0)) / 2 + 0.5 * 1.0, rtol=1e-7)  # value loss 0.5 * mean([1, 1])
    assert np.isfinite(np.asarray(grad)).all() and (np.asarray(grad) == 0).all()  # both past the cap: no slope


@MAYBE_JIT
def test_clipped_value_loss_hand_example(maybe_jit):
    # eps = 0.2, V_old = [0, 1, 0], returns R = [1, 1.2, 1], current V = [0.5, 2.0, 0.1]:
    #   step 0: V moved 0.5 from V_old, clipped to 0.2: errors^2 unclipped 0.25, clipped 0.64 -> 0.64
    #   step 1: V moved 1.0, clipped to 1.2 = R: unclipped 0.64, clipped 0 -> 0.64
    #   step 2: V moved 0.1, inside the clip: both 0.81 -> 0.81
    #   value_loss = 0.5 * mean([0.64, 0.64, 0.81]) = 0.348333
    # Gradient d/dV: step 0 takes the clipped (constant) branch -> 0; steps 1 and 2 the unclipped one,
    # (V - R) / 3 -> [0, 0.8 / 3, -0.9 / 3].
    targets = losses.PPOTargets(advantage=jnp.zeros((1, 3)), returns=jnp.array([[1.0, 1.2, 1.0]]),
                                v_old=jnp.array([[0.0, 1.0, 0.0]]))
    fn = maybe_jit(lambda v: losses.clipped_value_loss(v, targets, 0.2))
    v = jnp.array([[0.5, 2.0, 0.1]])
    np.testing.assert_allclose(fn(v), 0.5 * (0.64 + 0.64 + 0.81) / 3, rtol=1e-6)
    np.testing.assert_allclose(jax.grad(fn)(v), [[0.0, 0.8 / 3, -0.9 / 3]], rtol=1e-5, atol=1e-7)


@MAYBE_JIT
def test_ppo_loss_with_fixed_targets_and_value_clipping_hand_example(maybe_jit):
    # The inputs of test_ppo_loss_hand_example, but the targets are given (computed under older params):
    #   advantages [2, -2] normalise to [1, -1], so policy_loss = -0.2 as there;
    #   V = [0, 0], V_old = [0.5, -0.5], returns [1, -1], eps 0.1: V moved 0.5 from V_old, clipped to
    #   [0.4, -0.4]; errors^2 unclipped [1, 1], clipped [0.36, 0.36] -> value_loss = 0.5 * 1 = 0.5.
    #   Without clipping the value loss is the same 0.5; with V_old = V = 0 it would be too: the
    #   clip only decides where the gradient comes from.
    inputs = _inputs(log_pi_tm1=[[math.log(1.5), math.log(0.5)]], log_mu_tm1=[[0.0, 0.0]],
                     entropy_tm1=[[0.0, 0.0]], v_tm1=[[0.0, 0.0]], v_t=[[3.0, 3.0]],
                     r_t=[[1.0, -1.0]], discount_t=[[0.0, 0.0]])
    targets = losses.PPOTargets(advantage=jnp.array([[2.0, -2.0]]), returns=jnp.array([[1.0, -1.0]]),
                                v_old=jnp.array([[0.5, -0.5]]))
    fn = functools.partial(losses.ppo_loss, clip_epsilon=0.2, value_clip_epsilon=0.1)
    loss, metrics = maybe_jit(fn)(inputs, targets=targets)
    np.testing.assert_allclose(metrics["policy_loss"], -0.2, rtol=1e-5)
    np.testing.assert_allclose(metrics["value_loss"], 0.5, rtol=1e-6)
    np.testing.assert_allclose(loss, -0.2 + 0.5 * 0.5, rtol=1e-5)
    with pytest.raises(ValueError, match="value clipping needs the old values"):
        losses.ppo_loss(inputs, value_clip_epsilon=0.1)


def test_ppo_targets_on_policy_are_gae_and_its_returns():
    # rho = 1: the advantage is GAE(lambda) (Schulman et al. 2016) and the value target A + V.
    v_tm1, v_t = [[0.5, 1.0, -0.5]], [[1.0, -0.5, 2.0]]
    r_t, discount_t = [[1.0, 0.0, 2.0]], [[0.9, 0.9, 0.0]]
    inputs = _inputs(log_pi_tm1=[[-0.3, -1.0, -0.7]], log_mu_tm1=[[-0.3, -1.0, -0.7]], entropy_tm1=[[0.0] * 3],
                     v_tm1=v_tm1, v_t=v_t, r_t=r_t, discount_t=discount_t)
    targets = losses.ppo_targets(inputs, lambda_=0.8)
    gae = generalized_advantage_estimation(*(jnp.asarray(x[0]) for x in (v_tm1, v_t, r_t, discount_t)), lambda_=0.8)
    np.testing.assert_allclose(targets.advantage[0], gae, rtol=1e-6)
    np.testing.assert_allclose(targets.returns[0], gae + jnp.asarray(v_tm1[0]), rtol=1e-6)
    np.testing.assert_allclose(targets.v_old, v_tm1)


def test_losses_reject_misaligned_inputs():
    inputs = _inputs(log_pi_tm1=[[0.0, 0.0]], log_mu_tm1=[[0.0]], entropy_tm1=[[0.0, 0.0]],
                     v_tm1=[[0.0, 0.0]], v_t=[[0.0, 0.0]], r_t=[[0.0, 0.0]], discount_t=[[0.0, 0.0]])
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        losses.vtrace_loss(inputs)


@MAYBE_JIT
def test_masked_kl_counts_legal_actions_only(maybe_jit):
    p = np.array([[0.0, 9.0, math.log(3.0), 0.0], [1.0, 0.0, 1.0, 0.0]], np.float32)  # legal: 1/4, 3/4
    q = np.array([[0.0, -9.0, 0.0, 5.0], [2.0, 0.0, 2.0, 0.0]], np.float32)  # legal: 1/2, 1/2
    kl = maybe_jit(losses.masked_kl)(p, q, np.stack([MASK, MASK]))
    expected = 0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5)
    np.testing.assert_allclose(kl, [expected, 0.0], atol=1e-6)
    assert float(losses.masked_kl(p[0], q[0], np.zeros(4, bool))) == 0.0


@MAYBE_JIT
def test_mmd_loss_hand_example(maybe_jit):
    # One on-policy step that ends its episode: ratio 1, advantage r - V = 1 - 0.25 = 0.75 (not normalised).
    # policy_loss = -0.75; value_loss = 0.5 * 0.75^2 = 0.28125; entropy 0.7; KL 0.2
    # loss = -0.75 + 0.5 * 0.28125 - 0.05 * 0.7 + 2.0 * 0.2 = -0.244375
    inputs = _inputs(log_pi_tm1=[[math.log(0.5)]], log_mu_tm1=[[math.log(0.5)]], entropy_tm1=[[0.7]],
                     kl_tm1=[[0.2]], v_tm1=[[0.25]], v_t=[[5.0]], r_t=[[1.0]], discount_t=[[0.0]])
    fn = functools.partial(losses.mmd_loss, kl_cost=2.0, entropy_cost=0.05, baseline_cost=0.5,
                           normalize_advantages=False)
    loss, metrics = maybe_jit(fn)(inputs)
    np.testing.assert_allclose(metrics["policy_loss"], -0.75, rtol=1e-6)
    np.testing.assert_allclose(metrics["value_loss"], 0.28125, rtol=1e-6)
    np.testing.assert_allclose(metrics["kl"], 0.2, rtol=1e-6)
    np.testing.assert_allclose(loss, -0.244375, rtol=1e-5)


def _one_state_batch(actions, mu_logits, q):
    """One-step episodes from one state, row i taking actions[i] (bootstrap row after each)."""
    n, num_actions = len(actions), len(mu_logits)
    action = np.repeat(np.asarray(actions, np.int32)[:, None], 2, axis=1)
    reward = np.zeros((n, 2), np.float32)
    reward[:, 0] = np.asarray(q, np.float32)[np.asarray(actions)]
    return Unroll(
        observation=np.zeros((n, 2, 1), np.float32), first=np.ones((n, 2), bool), action=action,
        behaviour_logits=np.broadcast_to(np.asarray(mu_logits, np.float32), (n, 2, num_actions)),
        legal_mask=np.ones((n, 2, num_actions), bool), reward=reward,
        terminated=np.array([[True, False]] * n), truncated=np.zeros((n, 2), bool),
        policy_version=np.zeros((n, 2), np.int32), core_state=())


@pytest.mark.parametrize("jitted", [False, True], ids=["eager", "jit"])
def test_mmd_loss_is_minimised_by_the_papers_closed_form_step(jitted):
    # Sokota et al. 2023, eq. for MMD with a uniform magnet: the minimiser of
    #   -E_pi[q] - alpha * H(pi) + (1 / eta) * KL(pi || pi_t)
    # is pi ~ (pi_t * exp(eta * q)) ** (1 / (1 + eta * alpha)). Rows take each action in proportion
    # to pi_t = mu = (1/2, 1/4, 1/4), so the loss's sample means are exact expectations under mu.
    alpha, eta = 0.5, 2.0
    mu = np.array([0.5, 0.25, 0.25])
    q = np.array([1.0, 0.0, 2.0])
    batch = _one_state_batch([0, 0, 1, 2], np.log(mu), q)
    fn = functools.partial(losses.mmd_loss, kl_cost=1.0 / eta, entropy_cost=alpha, baseline_cost=0.0,
                           clip_epsilon=1e6, lambda_=1.0, normalize_advantages=False)

    def loss_of(theta):
        logits = jnp.broadcast_to(theta, (4, 2, 3))
        return fn(losses.loss_inputs(logits, jnp.zeros((4, 2)), batch, discount=1.0))[0]

    expected = (mu * np.exp(eta * q)) ** (1.0 / (1.0 + eta * alpha))
    expected /= expected.sum()
    gradient = jax.grad(loss_of)
    gradient = jax.jit(gradient) if jitted else gradient
    # The closed form is a stationary point of the loss (logits are free up to a constant) ...
    np.testing.assert_allclose(gradient(jnp.log(jnp.asarray(expected, jnp.float32))), np.zeros(3), atol=1e-5)
    # ... and the minimum: a quasi-Newton search from the uniform policy lands on it. Eagerly, the search's
    # hundreds of op-by-op evaluations cost seconds and test nothing the jitted one does not.
    if jitted:
        from scipy.optimize import minimize

        value_and_grad = jax.jit(jax.value_and_grad(loss_of))
        as_float64 = lambda t: tuple(np.asarray(x, np.float64) for x in value_and_grad(jnp.asarray(t, jnp.float32)))  # noqa: E731
        result = minimize(as_float64, np.zeros(3), jac=True, method="BFGS", options=dict(gtol=1e-7))
        np.testing.assert_allclose(jax.nn.softmax(result.x), expected, atol=1e-4)
    assert np.abs(gradient(jnp.zeros(3))).max() > 0.05  # away from it the loss does pull


def test_mmd_kl_is_the_exact_kl_from_the_behaviour_policy():
    logits = jnp.log(jnp.array([[[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]]]) + 1e-30)
    mu = np.array([[[0.25, 0.75, 1.0], [1 / 3, 1 / 3, 1 / 3]]], np.float32)
    batch = Unroll(observation=np.zeros((1, 2, 1)), first=np.ones((1, 2), bool), action=np.zeros((1, 2), np.int32),
                   behaviour_logits=np.log(mu), legal_mask=np.array([[[True, True, False], [True, True, True]]]),
                   reward=np.zeros((1, 2)), terminated=np.array([[True, False]]), truncated=np.zeros((1, 2), bool),
                   policy_version=np.zeros((1, 2), np.int32), core_state=())
    inputs = losses.loss_inputs(logits, jnp.zeros((1, 2)), batch, discount=1.0)
    # Row 0: pi = (1/2, 1/2), mu restricted to the legal actions = (1/4, 3/4).
    expected = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)
    np.testing.assert_allclose(inputs.kl_tm1, [[expected]], rtol=1e-5)
