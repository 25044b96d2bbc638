"""V-trace and GAE against small examples computed by hand, jitted and not."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seedleague.rl.vtrace import generalized_advantage_estimation, vtrace

MAYBE_JIT = pytest.mark.parametrize("maybe_jit", [lambda f: f, jax.jit], ids=["eager", "jit"])

# One trajectory of T = 3 steps; the episode ends after step 1 (discount 0 there).
V_TM1 = np.array([1.0, 2.0, 3.0], np.float32)
V_T = np.array([2.0, 3.0, 4.0], np.float32)
R_T = np.array([1.0, 0.0, 2.0], np.float32)
DISCOUNT_T = np.array([0.5, 0.0, 0.5], np.float32)
RHO_TM1 = np.array([2.0, 0.5, 1.0], np.float32)  # step 0 gets clipped at 1, step 1 does not


@MAYBE_JIT
def test_vtrace_hand_example_lambda_one(maybe_jit):
    # rho_bar = c_bar = 1: clipped rho = [1, 0.5, 1], c = [1, 0.5, 1]
    # delta_i = clipped_rho_i * (r_i + discount_i * v_t_i - v_tm1_i)
    #   delta_0 = 1   * (1 + 0.5 * 2 - 1) =  1
    #   delta_1 = 0.5 * (0 + 0   * 3 - 2) = -1
    #   delta_2 = 1   * (2 + 0.5 * 4 - 3) =  1
    # backwards: acc_2 = 1; acc_1 = -1 + 0 * 0.5 * 1 = -1; acc_0 = 1 + 0.5 * 1 * (-1) = 0.5
    # targets v_s = v_tm1 + acc = [1.5, 1, 4]; errors = [0.5, -1, 1]
    # q_s = r_s + discount_s * v_{s+1} (v_T bootstrap = 4) = [1 + 0.5 * 1, 0, 2 + 0.5 * 4] = [1.5, 0, 4]
    # pg_advantage = min(1, rho) * (q - v_tm1) = [1 * 0.5, 0.5 * (-2), 1 * 1] = [0.5, -1, 1]
    out = maybe_jit(vtrace)(V_TM1, V_T, R_T, DISCOUNT_T, RHO_TM1)
    np.testing.assert_allclose(out.targets, [1.5, 1.0, 4.0], rtol=1e-6)
    np.testing.assert_allclose(out.errors, [0.5, -1.0, 1.0], rtol=1e-6)
    np.testing.assert_allclose(out.q_estimate, [1.5, 0.0, 4.0], rtol=1e-6)
    np.testing.assert_allclose(out.pg_advantage, [0.5, -1.0, 1.0], rtol=1e-6)


@MAYBE_JIT
def test_vtrace_hand_example_lambda_half(maybe_jit):
    # c = 0.5 * min(1, rho) = [0.5, 0.25, 0.5]; deltas as above = [1, -1, 1]
    # acc_2 = 1; acc_1 = -1; acc_0 = 1 + 0.5 * 0.5 * (-1) = 0.75 -> targets = [1.75, 1, 4]
    # bootstrap = lambda * v_{s+1} + (1 - lambda) * V(s+1) = [0.5*1 + 0.5*2, 0.5*4 + 0.5*3] = [1.5, 3.5],
    #   then V(s_T) = 4 at the last step
    # q = [1 + 0.5 * 1.5, 0 + 0 * 3.5, 2 + 0.5 * 4] = [1.75, 0, 4]; pg = [0.75, -1, 1]
    out = maybe_jit(functools.partial(vtrace, lambda_=0.5))(V_TM1, V_T, R_T, DISCOUNT_T, RHO_TM1)
    np.testing.assert_allclose(out.targets, [1.75, 1.0, 4.0], rtol=1e-6)
    np.testing.assert_allclose(out.q_estimate, [1.75, 0.0, 4.0], rtol=1e-6)
    np.testing.assert_allclose(out.pg_advantage, [0.75, -1.0, 1.0], rtol=1e-6)


@MAYBE_JIT
def test_vtrace_hand_example_rho_not_clipped(maybe_jit):
    # rho_bar = pg_rho_bar = 2: clipped rho = [2, 0.5, 1]; c stays min(1, rho) = [1, 0.5, 1]
    # delta_0 = 2 * 1 = 2; acc_0 = 2 + 0.5 * 1 * (-1) = 1.5 -> targets = [2.5, 1, 4]
    # q unchanged = [1.5, 0, 4]; pg = [2 * 0.5, 0.5 * (-2), 1 * 1] = [1, -1, 1]
    fn = functools.partial(vtrace, clip_rho_threshold=2.0, clip_pg_rho_threshold=2.0)
    out = maybe_jit(fn)(V_TM1, V_T, R_T, DISCOUNT_T, RHO_TM1)
    np.testing.assert_allclose(out.targets, [2.5, 1.0, 4.0], rtol=1e-6)
    np.testing.assert_allclose(out.pg_advantage, [1.0, -1.0, 1.0], rtol=1e-6)


@MAYBE_JIT
def test_vtrace_on_policy_targets_are_n_step_returns(maybe_jit):
    rng = np.random.default_rng(0)
    length, gamma = 6, 0.9
    values = rng.normal(size=length + 1).astype(np.float32)
    r_t = rng.normal(size=length).astype(np.float32)
    discount_t = np.full(length, gamma, np.float32)
    out = maybe_jit(vtrace)(values[:-1], values[1:], r_t, discount_t, np.ones(length, np.float32))
    # v_s = sum_{i>=s} gamma^(i-s) r_i + gamma^(T-s) V(s_T)
    expected = [
        sum(gamma ** (i - s) * r_t[i] for i in range(s, length)) + gamma ** (length - s) * values[-1]
        for s in range(length)
    ]
    np.testing.assert_allclose(out.targets, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.pg_advantage, out.q_estimate - values[:-1], rtol=1e-5, atol=1e-5)


@MAYBE_JIT
def test_gae_hand_example(maybe_jit):
    # delta = r + discount * v_t - v_tm1 = [1 + 1 - 1, 0 - 2, 2 + 2 - 3] = [1, -2, 1]
    # A_2 = 1; A_1 = -2 + 0 * 0.5 * 1 = -2; A_0 = 1 + 0.5 * 0.5 * (-2) = 0.5
    gae = maybe_jit(functools.partial(generalized_advantage_estimation, lambda_=0.5))
    np.testing.assert_allclose(gae(V_TM1, V_T, R_T, DISCOUNT_T), [0.5, -2.0, 1.0], rtol=1e-6)


@pytest.mark.parametrize("lambda_", [0.0, 0.5, 0.95, 1.0])
def test_on_policy_vtrace_advantage_equals_gae(lambda_):
    rng = np.random.default_rng(1)
    values = rng.normal(size=8).astype(np.float32)
    r_t = rng.normal(size=7).astype(np.float32)
    discount_t = np.array([0.9, 0.9, 0.0, 0.9, 0.9, 0.9, 0.0], np.float32)
    out = vtrace(values[:-1], values[1:], r_t, discount_t, np.ones(7, np.float32), lambda_=lambda_)
    gae = generalized_advantage_estimation(values[:-1], values[1:], r_t, discount_t, lambda_=lambda_)
    np.testing.assert_allclose(out.pg_advantage, gae, rtol=1e-5, atol=1e-5)


def test_vtrace_gradient_flows_only_through_v_tm1():
    def value_loss(v_tm1, v_t):
        return jnp.sum(0.5 * vtrace(v_tm1, v_t, R_T, DISCOUNT_T, RHO_TM1).errors ** 2)

    g_tm1, g_t = jax.grad(value_loss, argnums=(0, 1))(V_TM1, V_T)
    np.testing.assert_allclose(g_tm1, -np.array([0.5, -1.0, 1.0]), rtol=1e-6)  # -(errors)
    np.testing.assert_allclose(g_t, 0.0)


def test_vtrace_rejects_batched_or_ragged_inputs():
    with pytest.raises(ValueError, match="rank-1"):
        vtrace(V_TM1[None], V_T[None], R_T[None], DISCOUNT_T[None], RHO_TM1[None])
    with pytest.raises(ValueError, match="same length"):
        vtrace(V_TM1, V_T, R_T[:2], DISCOUNT_T, RHO_TM1)
