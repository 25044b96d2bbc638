"""Off-policy return targets: V-trace (IMPALA) and generalized advantage estimation.

Both functions are pure and time-major over ONE trajectory of T transitions, in
rlax's naming: index i of every argument describes the transition from state
s_i to s_{i+1}:

    v_tm1[i]      = V(s_i)              value of the state the action was taken in
    v_t[i]        = V(s_{i+1})          value of the state that followed
    r_t[i]        = reward that followed action a_i
    discount_t[i] = gamma, or 0 where the episode ended after a_i
    rho_tm1[i]    = pi(a_i | s_i) / mu(a_i | s_i), target over behaviour policy

Batch them with `jax.vmap` (batch-major data: `in_axes=0`). Called as

    out = vtrace(v_tm1, v_t, r_t, discount_t, rho_tm1, lambda_=0.95)
    value_loss = 0.5 * out.errors ** 2
    policy_loss = -out.pg_advantage * log_pi_tm1
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class VTraceOutput(NamedTuple):
    """V-trace results for one trajectory, each [T]."""

    errors: jax.Array  # stop_gradient(targets) - v_tm1: regress the value on this
    pg_advantage: jax.Array  # clipped_pg_rho * (q_estimate - v_tm1), no gradient
    q_estimate: jax.Array  # r_t + discount_t * bootstrap: estimate of Q(s_i, a_i), no gradient
    targets: jax.Array  # v_s of the paper: the V-trace value targets, no gradient


def _check_trajectory(**arrays: jax.Array) -> None:
    """All arguments must be rank-1 arrays of one length T."""
    lengths = set()
    for name, array in arrays.items():
        if jnp.ndim(array) != 1:
            raise ValueError(
                f"{name} must be a rank-1 time-major array [T], got shape {jnp.shape(array)}; "
                "vmap over the batch axis for batched data"
            )
        lengths.add(jnp.shape(array)[0])
    if len(lengths) != 1:
        raise ValueError(
            f"all inputs must have the same length T, got shapes "
            f"{ {name: jnp.shape(a) for name, a in arrays.items()} }"
        )


def _discounted_backward_sum(x_t: jax.Array, decay_t: jax.Array) -> jax.Array:
    """acc_i = x_i + decay_i * acc_{i+1} with acc_T = 0, by a reverse scan."""

    def step(acc, inputs):
        x, decay = inputs
        acc = x + decay * acc
        return acc, acc

    _, acc_t = jax.lax.scan(step, jnp.zeros((), x_t.dtype), (x_t, decay_t), reverse=True)
    return acc_t


def vtrace(
    v_tm1: jax.Array,
    v_t: jax.Array,
    r_t: jax.Array,
    discount_t: jax.Array,
    rho_tm1: jax.Array,
    lambda_: float = 1.0,
    clip_rho_threshold: float = 1.0,
    clip_pg_rho_threshold: float = 1.0,
) -> VTraceOutput:
    """V-trace targets and policy-gradient advantages for one trajectory.

    Espeholt et al. 2018, "IMPALA: Scalable Distributed Deep-RL with Importance
    Weighted Actor-Learner Architectures", eq. (1) and Remark 1:

        delta_i = min(rho_bar, rho_i) * (r_i + discount_i * V(s_{i+1}) - V(s_i))
        c_i     = lambda * min(1, rho_i)
        v_s     = V(s) + sum_{i>=s} (prod_{s<=j<i} discount_j c_j) delta_i
                = V(s) + delta_s + discount_s c_s (v_{s+1} - V(s_{s+1}))

    computed backwards with `jax.lax.scan`. The policy-gradient advantage is
    min(rho_bar_pg, rho_s) * (q_s - V(s)) with q_s = r_s + discount_s * b_{s+1}
    and the bootstrap b_{s+1} = lambda * v_{s+1} + (1 - lambda) * V(s_{s+1})
    (V(s_T) at the last step), as in rlax. With lambda = 1 this is exactly the
    paper's q_s = r_s + discount_s * v_{s+1}; with rho = 1 everywhere the
    advantage q_s - V(s) equals GAE(lambda), so V-trace reduces to the on-policy
    estimator PPO uses.

    Gradients flow only into `errors` through v_tm1; targets, q_estimate and
    pg_advantage are stop-gradiented.
    """
    _check_trajectory(v_tm1=v_tm1, v_t=v_t, r_t=r_t, discount_t=discount_t, rho_tm1=rho_tm1)
    rho_tm1 = jax.lax.stop_gradient(rho_tm1)
    c_tm1 = lambda_ * jnp.minimum(1.0, rho_tm1)
    clipped_rho_tm1 = jnp.minimum(clip_rho_threshold, rho_tm1)
    td_error_tm1 = clipped_rho_tm1 * (r_t + discount_t * v_t - v_tm1)
    # v_s - V(s) = delta_s + discount_s * c_s * (v_{s+1} - V(s_{s+1})).
    targets_tm1 = jax.lax.stop_gradient(
        v_tm1 + _discounted_backward_sum(td_error_tm1, discount_t * c_tm1)
    )

    bootstrap_t = jnp.concatenate(
        [lambda_ * targets_tm1[1:] + (1.0 - lambda_) * v_tm1[1:], v_t[-1:]]
    )
    q_estimate = jax.lax.stop_gradient(r_t + discount_t * bootstrap_t)
    clipped_pg_rho_tm1 = jnp.minimum(clip_pg_rho_threshold, rho_tm1)
    pg_advantage = jax.lax.stop_gradient(clipped_pg_rho_tm1 * (q_estimate - v_tm1))
    return VTraceOutput(
        errors=targets_tm1 - v_tm1,
        pg_advantage=pg_advantage,
        q_estimate=q_estimate,
        targets=targets_tm1,
    )


def generalized_advantage_estimation(
    v_tm1: jax.Array,
    v_t: jax.Array,
    r_t: jax.Array,
    discount_t: jax.Array,
    lambda_: float = 0.95,
) -> jax.Array:
    """GAE(lambda) advantages [T] for one on-policy trajectory.

    Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized
    Advantage Estimation", eq. (16):

        delta_i = r_i + discount_i * V(s_{i+1}) - V(s_i)
        A_i     = delta_i + discount_i * lambda * A_{i+1},   A_T = 0

    The result is stop-gradiented (it is a target, not a prediction).
    """
    _check_trajectory(v_tm1=v_tm1, v_t=v_t, r_t=r_t, discount_t=discount_t)
    delta_tm1 = r_t + discount_t * v_t - v_tm1
    return jax.lax.stop_gradient(_discounted_backward_sum(delta_tm1, discount_t * lambda_))
