"""Actor-critic losses over a batch of unrolls: IMPALA's V-trace loss and PPO's.

This file owns the maths between the network's outputs and a scalar loss:
categorical log-probabilities and entropy under a legal-action mask, the rewards
and discounts implied by episode boundaries, and the two losses. Everything is a
pure function of arrays. The learner calls it as

    logits, values, _ = network.apply(params, batch.observation, batch.first, batch.core_state)
    inputs = loss_inputs(logits, values, batch, discount=0.99)
    loss, metrics = vtrace_loss(inputs, lambda_=0.95, entropy_cost=0.01, baseline_cost=0.5)

Row T of an unroll is bootstrap-only: its value is V(s_T) for the last step and
its action, reward and flags are unused. Losses are means over the B x T steps,
so the gradient's scale does not grow with the batch size.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from seedleague.rl.types import Unroll
from seedleague.rl.vtrace import vtrace


class LossInputs(NamedTuple):
    """Time-aligned learning inputs for rows 0..T-1 of a batch, each [B, T].

    Index [b, i] describes the transition from s_i to s_{i+1} of unroll b, in
    the naming of `seedleague.rl.vtrace`.
    """

    log_pi_tm1: jax.Array  # log pi(a_i | s_i) under the learner's params (differentiable)
    logit_tm1: jax.Array  # logit of a_i minus the mean logit of the legal actions at s_i (differentiable; NeuRD)
    log_mu_tm1: jax.Array  # log mu(a_i | s_i) under the behaviour params that acted
    entropy_tm1: jax.Array  # entropy of pi(. | s_i) over legal actions (differentiable)
    entropy_t: jax.Array  # entropy of pi(. | s_{i+1}), no gradient (soft returns, see soft_rewards)
    kl_tm1: jax.Array  # KL(pi(. | s_i) || mu(. | s_i)) over legal actions (differentiable; MMD's proximal term)
    v_tm1: jax.Array  # V(s_i) (differentiable)
    v_t: jax.Array  # V(s_{i+1}), no gradient
    r_t: jax.Array  # reward after a_i, plus the truncation bootstrap (see rewards_and_discounts)
    discount_t: jax.Array  # gamma, or 0 where the episode ended after a_i


# --- Categorical policy under a legal-action mask ------------------------------


def masked_log_softmax(logits: jax.Array, legal_mask: jax.Array) -> jax.Array:
    """Log-probabilities [..., A] of softmax(logits) restricted to legal actions.

    Illegal actions get the most negative finite float as their logit, so their
    probability is exactly 0 while every log-probability stays finite (no -inf,
    hence no NaN gradients). A row with no legal action falls back to uniform.
    """
    if logits.shape != legal_mask.shape:
        raise ValueError(
            f"logits {logits.shape} and legal_mask {legal_mask.shape} must have the same shape"
        )
    masked = jnp.where(legal_mask, logits, jnp.finfo(logits.dtype).min)
    return jax.nn.log_softmax(masked, axis=-1)


def masked_log_prob(logits: jax.Array, action: jax.Array, legal_mask: jax.Array) -> jax.Array:
    """log pi(action) [...] for logits [..., A] and integer actions [...]."""
    if action.shape != logits.shape[:-1]:
        raise ValueError(
            f"action {action.shape} must be logits {logits.shape} without the action axis"
        )
    log_probs = masked_log_softmax(logits, legal_mask)
    return jnp.take_along_axis(log_probs, action[..., None].astype(jnp.int32), axis=-1)[..., 0]


def centred_logit(logits: jax.Array, action: jax.Array, legal_mask: jax.Array) -> jax.Array:
    """logit(action) minus the mean logit over legal actions [...]: the policy's own
    coordinates, unchanged by the shift that softmax ignores (NeuRD's logit bound applies to it)."""
    legal = legal_mask.astype(logits.dtype)
    mean = jnp.sum(logits * legal, axis=-1) / jnp.maximum(jnp.sum(legal, axis=-1), 1.0)
    return jnp.take_along_axis(logits, action[..., None].astype(jnp.int32), axis=-1)[..., 0] - mean


def masked_entropy(logits: jax.Array, legal_mask: jax.Array) -> jax.Array:
    """Entropy [...] of the masked policy, summed over legal actions only.

    Uniform logits over k legal actions give log(k).
    """
    log_probs = masked_log_softmax(logits, legal_mask)
    p_log_p = jnp.where(legal_mask, jnp.exp(log_probs) * log_probs, 0.0)
    return -jnp.sum(p_log_p, axis=-1)


def masked_kl(logits: jax.Array, other_logits: jax.Array, legal_mask: jax.Array) -> jax.Array:
    """KL(p || q) [...] of the masked policies of `logits` (p) and `other_logits` (q).

    Sums over legal actions only; 0 where no action is legal.
    """
    log_p = masked_log_softmax(logits, legal_mask)
    log_q = masked_log_softmax(other_logits, legal_mask)
    return jnp.sum(jnp.where(legal_mask, jnp.exp(log_p) * (log_p - log_q), 0.0), axis=-1)


# --- Episode boundaries ---------------------------------------------------------


def rewards_and_discounts(
    r_t: jax.Array,
    terminated_t: jax.Array,
    truncated_t: jax.Array,
    v_tm1: jax.Array,
    gamma: float,
) -> tuple[jax.Array, jax.Array]:
    """Rewards and discounts [...] that encode where episodes end.

        discount_t = gamma * (1 - terminated_t) * (1 - truncated_t)
        r_t       += gamma * truncated_t * (1 - terminated_t) * stop_gradient(V(s_t))

    A terminated step ends the return. A truncated step (a time limit) should
    bootstrap from V(s_{t+1}), but the final observation of a truncated episode
    is not sent (the next row is already the next episode's first), so V(s_t),
    the value of the state the last action was taken in, stands in for it.
    Consecutive states usually have similar values, so this bias is small next
    to treating the time limit as a termination (Pardo et al. 2018, "Time
    Limits in Reinforcement Learning"). `v_tm1` here is V(s_t) of the row that
    carries the flags. Terminated wins
    when both flags are set. Rows after a boundary belong to the next episode;
    the zero discount already stops returns from crossing it.
    """
    if not (r_t.shape == terminated_t.shape == truncated_t.shape == v_tm1.shape):
        raise ValueError(
            "r_t, terminated_t, truncated_t and v_tm1 must have one shape, got "
            f"{r_t.shape}, {terminated_t.shape}, {truncated_t.shape}, {v_tm1.shape}"
        )
    terminated = terminated_t.astype(jnp.float32)
    truncated = truncated_t.astype(jnp.float32) * (1.0 - terminated)
    discount_t = gamma * (1.0 - terminated) * (1.0 - truncated)
    r_t = r_t.astype(jnp.float32) + gamma * truncated * jax.lax.stop_gradient(v_tm1)
    return r_t, discount_t


def loss_inputs(logits: jax.Array, values: jax.Array, batch: Unroll, discount: float) -> LossInputs:
    """Align the network's outputs over a whole unroll with the batch.

    logits [B, T+1, A] and values [B, T+1] come from `network.apply` over
    `batch.observation`; row T only supplies V(s_T).
    """
    if not (logits.ndim == 3 and values.shape == logits.shape[:2]):
        raise ValueError(
            f"logits must be [B, T+1, A] and values [B, T+1], got {logits.shape} and {values.shape}"
        )
    if batch.action.shape != values.shape:
        raise ValueError(
            f"batch rows {batch.action.shape} must match the network outputs {values.shape}"
        )
    if values.shape[1] < 2:
        raise ValueError(f"an unroll needs T+1 >= 2 rows, got {values.shape[1]}")
    legal_tm1 = batch.legal_mask[:, :-1]
    mu_logits_tm1 = batch.behaviour_logits[:, :-1].astype(jnp.float32)
    a_tm1 = batch.action[:, :-1]
    return LossInputs(
        log_pi_tm1=masked_log_prob(logits[:, :-1], a_tm1, legal_tm1),
        logit_tm1=centred_logit(logits[:, :-1], a_tm1, legal_tm1),
        log_mu_tm1=masked_log_prob(mu_logits_tm1, a_tm1, legal_tm1),
        entropy_tm1=masked_entropy(logits[:, :-1], legal_tm1),
        entropy_t=jax.lax.stop_gradient(masked_entropy(logits[:, 1:], batch.legal_mask[:, 1:])),
        kl_tm1=masked_kl(logits[:, :-1], mu_logits_tm1, legal_tm1),
        **value_inputs(values, batch, discount),
    )


def value_inputs(values: jax.Array, batch, discount: float) -> dict[str, jax.Array]:
    """The value half of `LossInputs` (v_tm1, v_t, r_t, discount_t) from values [B, T+1] and the batch's
    reward, terminated and truncated rows; shared by every policy parameterisation."""
    v_tm1, v_t = values[:, :-1], jax.lax.stop_gradient(values[:, 1:])
    r_t, discount_t = rewards_and_discounts(
        batch.reward[:, :-1], batch.terminated[:, :-1], batch.truncated[:, :-1], v_tm1, discount
    )
    return dict(v_tm1=v_tm1, v_t=v_t, r_t=r_t, discount_t=discount_t)


# --- Losses ----------------------------------------------------------------------


def _check_inputs(inputs: LossInputs) -> None:
    shapes = {name: jnp.shape(x) for name, x in inputs._asdict().items()}
    if not (len(set(shapes.values())) == 1 and inputs.v_tm1.ndim == 2):
        raise ValueError(
            f"every LossInputs field must be [B, T], got {shapes}"
        )


def _batched_vtrace(inputs: LossInputs, rho_tm1: jax.Array, lambda_: float,
                    clip_rho_threshold: float, clip_pg_rho_threshold: float):
    """V-trace over each unroll of a batch-major [B, T] batch."""
    one_trajectory = functools.partial(
        vtrace,
        lambda_=lambda_,
        clip_rho_threshold=clip_rho_threshold,
        clip_pg_rho_threshold=clip_pg_rho_threshold,
    )
    return jax.vmap(one_trajectory)(
        inputs.v_tm1, inputs.v_t, inputs.r_t, inputs.discount_t, rho_tm1
    )


def soft_rewards(inputs: LossInputs, entropy_cost: jax.Array | float) -> LossInputs:
    """The inputs with the entropy of the next state in each reward: r_i + entropy_cost * gamma_i * H(s_{i+1}).

    An entropy bonus in the loss regularises each state on its own: the values,
    and so the advantages of earlier actions, know nothing of the entropy later
    states earn. With this added to the rewards (no gradient through it) the
    return from s_i is the entropy-regularised return after s_i's own action, so
    the policy gradient follows the regularised game itself, the game whose
    quantal-response equilibrium the annealed self-play schedules aim at (the soft
    Q-values of soft actor-critic). The loss keeps its entropy bonus for s_i
    itself; the expected entropy H rather than a sampled -log pi(a_{i+1}) keeps
    the returns' variance down. A terminated step (gamma_i = 0) earns none.
    """
    return inputs._replace(r_t=inputs.r_t + entropy_cost * inputs.discount_t * inputs.entropy_t)


def magnet_rewards(inputs: LossInputs, magnet_cost: jax.Array | float, kl_t: jax.Array) -> LossInputs:
    """The inputs with the magnet's KL at the next state taken from each reward:
    r_i - magnet_cost * gamma_i * KL(pi(. | s_{i+1}) || rho(. | s_{i+1})).

    R-NaD's reward transform (Perolat et al., Science 2022, "Mastering the game of
    Stratego", the v-trace of its reference code: the regularisation enters the
    returns, not only the loss), here for the learner's own states: the return from
    s_i is then that of the game regularised towards the magnet rho, so the values
    and the advantages of earlier actions know what later divergence from rho costs,
    and the policy gradient follows the regularised game whose fixed point R-NaD's
    outer loop moves towards a Nash equilibrium. `kl_t` [B, T] is that KL at s_{i+1},
    taken as data (no gradient). A terminated step (gamma_i = 0) pays none. With a
    uniform magnet this is `soft_rewards` up to log |A(s)| per step.
    """
    if kl_t.shape != inputs.r_t.shape:
        raise ValueError(f"kl_t must be [B, T] like the rewards {inputs.r_t.shape}, got {kl_t.shape}")
    kl_t = jax.lax.stop_gradient(kl_t)
    return inputs._replace(r_t=inputs.r_t - magnet_cost * inputs.discount_t * kl_t)


def vtrace_loss(
    inputs: LossInputs,
    *,
    lambda_: float = 1.0,
    clip_rho_threshold: float = 1.0,
    clip_pg_rho_threshold: float = 1.0,
    entropy_cost: float = 0.01,
    baseline_cost: float = 0.5,
    entropy_in_returns: bool = False,
    neurd_bound: Optional[float] = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """IMPALA actor-critic loss (Espeholt et al. 2018, section 4.2).

        policy_loss = -mean(pg_advantage * log pi(a_i | s_i))
        value_loss  = mean(0.5 * (v_s - V(s_i))^2)
        loss        = policy_loss + baseline_cost * value_loss - entropy_cost * mean(entropy)

    with v_s and pg_advantage from V-trace at importance ratios pi / mu. With
    `entropy_in_returns` the entropy cost goes into the rewards
    as well (`soft_rewards`). With `neurd_bound` the policy term is NeuRD's
    (`neurd_policy_loss`) instead of the softmax policy gradient's.
    """
    _check_inputs(inputs)
    if entropy_in_returns:
        inputs = soft_rewards(inputs, entropy_cost)
    rho_tm1 = jnp.exp(jax.lax.stop_gradient(inputs.log_pi_tm1) - inputs.log_mu_tm1)
    out = _batched_vtrace(inputs, rho_tm1, lambda_, clip_rho_threshold, clip_pg_rho_threshold)
    extra = {}
    if neurd_bound is None:
        policy_loss = -jnp.mean(out.pg_advantage * inputs.log_pi_tm1)
    else:
        policy_loss, extra = neurd_policy_loss(inputs, out.pg_advantage, neurd_bound)
    value_loss = jnp.mean(0.5 * jnp.square(out.errors))
    entropy = jnp.mean(inputs.entropy_tm1)
    loss = policy_loss + baseline_cost * value_loss - entropy_cost * entropy
    metrics = {
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "entropy": entropy,
        "importance_ratio": jnp.mean(rho_tm1),
        **extra,
    }
    return loss, metrics


def neurd_policy_loss(inputs: LossInputs, pg_advantage: jax.Array, bound: float) -> tuple[jax.Array, dict]:
    """Neural replicator dynamics' policy term (Hennes et al. 2020; the policy update of R-NaD).

        policy_loss = -mean(can_move * pg_advantage / pi(a_i | s_i) * y_i)

    y_i is a_i's centred logit. Its gradient moves each logit by the action's
    advantage itself (the sampled estimate, divided by pi(a_i) so that its
    expectation is the advantage of every action), where the softmax policy
    gradient moves it by pi(a) * advantage: an action that has become rare is still
    corrected at full speed, which is what lets the replicator dynamics of
    two-player zero-sum games circle an equilibrium instead of running off towards
    the faces of the simplex. Logits past +-`bound` are not pushed further out
    (can_move = 0 there), which keeps the policy away from determinism and so the
    1 / pi weights moderate (other states' updates, through the shared network,
    can still move a logit past it).
    """
    advantage = jax.lax.stop_gradient(pg_advantage)
    y = inputs.logit_tm1
    y_now = jax.lax.stop_gradient(y)
    can_move = jnp.where(advantage > 0, y_now < bound, y_now > -bound)
    weight = jnp.where(can_move, advantage / jnp.exp(jax.lax.stop_gradient(inputs.log_pi_tm1)), 0.0)
    return -jnp.mean(weight * y), {"neurd_blocked": 1.0 - jnp.mean(can_move.astype(jnp.float32))}


class PPOTargets(NamedTuple):
    """What PPO holds fixed over an update's epochs, each [B, T] and without a gradient
    (`ppo_targets`; the rollout buffer's advantages, returns and values in CleanRL's ppo.py)."""

    advantage: jax.Array  # q_i - V_old(s_i), before normalisation
    returns: jax.Array  # the value targets (V-trace's v_s; on-policy the GAE(lambda) returns)
    v_old: jax.Array  # V_old(s_i), the values the targets were computed with (value clipping's centre)


def ppo_targets(
    inputs: LossInputs,
    *,
    lambda_: float = 0.95,
    clip_rho_threshold: float = 1.0,
    entropy_cost: jax.Array | float = 0.0,
    entropy_in_returns: bool = False,
) -> PPOTargets:
    """Advantages and value targets from `inputs` (under the params an update starts from), computed once.

    As `ppo_loss` computes them per call: V-trace at ratios pi / mu, whose advantage q_i - V(s_i)
    is GAE(lambda) when the data is on-policy (ratio 1), and whose targets v_s are then the
    GAE(lambda) returns A_i + V(s_i).
    """
    _check_inputs(inputs)
    if entropy_in_returns:
        inputs = soft_rewards(inputs, entropy_cost)
    inputs = jax.tree.map(jax.lax.stop_gradient, inputs)
    rho_tm1 = jnp.exp(inputs.log_pi_tm1 - inputs.log_mu_tm1)
    out = _batched_vtrace(inputs, rho_tm1, lambda_, clip_rho_threshold, 1.0)
    return PPOTargets(advantage=out.q_estimate - inputs.v_tm1, returns=out.targets, v_old=inputs.v_tm1)


def clipped_value_loss(v_tm1: jax.Array, targets: PPOTargets, clip_epsilon: float) -> jax.Array:
    """PPO's clipped value loss (OpenAI baselines ppo2; CleanRL ppo.py with clip_vloss; Huang et al.
    2022, "The 37 implementation details of PPO", detail 9):

        v_clipped  = V_old(s_i) + clip(V(s_i) - V_old(s_i), -eps, eps)
        value_loss = mean(0.5 * max((V(s_i) - R_i)^2, (v_clipped - R_i)^2))

    The max keeps the larger error, so a step that moves a value more than eps from V_old
    gets no gradient from the steps where that move brought it nearer its target.
    """
    if not (v_tm1.shape == targets.returns.shape == targets.v_old.shape):
        raise ValueError(f"values {v_tm1.shape}, returns {targets.returns.shape} and old values "
                         f"{targets.v_old.shape} must have one shape [B, T]")
    v_clipped = targets.v_old + jnp.clip(v_tm1 - targets.v_old, -clip_epsilon, clip_epsilon)
    return jnp.mean(0.5 * jnp.maximum(jnp.square(v_tm1 - targets.returns), jnp.square(v_clipped - targets.returns)))


MAX_LOG_RATIO = 20.0  # ppo_loss's cap on log(pi / mu) before exp


def ppo_loss(
    inputs: LossInputs,
    *,
    clip_epsilon: float = 0.2,
    lambda_: float = 0.95,
    clip_rho_threshold: float = 1.0,
    entropy_cost: float = 0.01,
    baseline_cost: float = 0.5,
    entropy_in_returns: bool = False,
    normalize_advantages: bool = True,
    targets: Optional[PPOTargets] = None,
    value_clip_epsilon: float = 0.0,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """PPO clipped surrogate (Schulman et al. 2017, eq. 7) with V-trace advantages.

        ratio       = pi(a_i | s_i) / mu(a_i | s_i)
        A_i         = normalise(q_i - V(s_i))           over the whole (mini)batch
        policy_loss = -mean(min(ratio * A_i, clip(ratio, 1 - eps, 1 + eps) * A_i))
        value_loss  = mean(0.5 * (v_s - V(s_i))^2)

    Advantages and value targets come from V-trace rather than GAE: in a SEED
    learner the acting params lag the learner's, so the data is off-policy by a
    few updates. V-trace's truncated ratios correct the later steps of each
    return; the surrogate's own ratio corrects the first action, so the
    advantage is q_i - V(s_i) without V-trace's extra pg ratio. When the data is
    on-policy (ratio 1) this is exactly GAE(lambda).

    `targets` (from `ppo_targets` under the params an update started from) fixes the
    advantages and value targets over the update's epochs, as the standard
    implementations do (baselines ppo2, CleanRL: GAE once per rollout); without them
    both are recomputed here from the current values. `value_clip_epsilon` > 0 (needs
    `targets`) clips the value loss around `targets.v_old` (`clipped_value_loss`).
    `entropy_in_returns` as in `vtrace_loss`; `normalize_advantages` False keeps
    the advantages in reward units (the maths of `mmd_loss` is stated in them).
    """
    _check_inputs(inputs)
    if value_clip_epsilon > 0 and targets is None:
        raise ValueError("value clipping needs the old values: pass targets=ppo_targets(...) from the params the "
                         "update started from")
    log_ratio = inputs.log_pi_tm1 - inputs.log_mu_tm1
    # Capped before exp: a Gaussian head that has narrowed can put an old action tens of nats less likely
    # under mu than pi; exp overflows to inf and the clipped objective's gradient becomes inf * 0 = NaN.
    # The cap changes the loss only where the ratio passes e^MAX_LOG_RATIO, far outside the clip range.
    ratio = jnp.exp(jnp.minimum(log_ratio, MAX_LOG_RATIO))
    if targets is None:
        targets = ppo_targets(inputs, lambda_=lambda_, clip_rho_threshold=clip_rho_threshold,
                              entropy_cost=entropy_cost, entropy_in_returns=entropy_in_returns)
    advantage = targets.advantage
    if normalize_advantages:
        advantage = (advantage - jnp.mean(advantage)) / (jnp.std(advantage) + 1e-8)
    clipped_ratio = jnp.clip(ratio, 1.0 - clip_epsilon, 1.0 + clip_epsilon)
    policy_loss = -jnp.mean(jnp.minimum(ratio * advantage, clipped_ratio * advantage))
    if value_clip_epsilon > 0:
        value_loss = clipped_value_loss(inputs.v_tm1, targets, value_clip_epsilon)
    else:
        value_loss = jnp.mean(0.5 * jnp.square(targets.returns - inputs.v_tm1))
    entropy = jnp.mean(inputs.entropy_tm1)
    loss = policy_loss + baseline_cost * value_loss - entropy_cost * entropy
    metrics = {
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "entropy": entropy,
        "importance_ratio": jnp.mean(jax.lax.stop_gradient(ratio)),
        "clip_fraction": jnp.mean((jnp.abs(ratio - 1.0) > clip_epsilon).astype(jnp.float32)),
    }
    return loss, metrics


def mmd_loss(
    inputs: LossInputs,
    *,
    kl_cost: float,
    entropy_cost: float = 0.05,
    **ppo_kwargs,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Magnetic mirror descent as a deep RL loss (Sokota et al., ICLR 2023, section 5 and App. J).

    MMD's step at every information state s, with a uniform magnet, is

        pi_{t+1}(s) = argmax_pi  E_pi[q_t(s, .)] + alpha * H(pi) - (1 / eta) * KL(pi || pi_t(s))
                    = normalise((pi_t(s) * exp(eta * q_t(s, .))) ** (1 / (1 + eta * alpha)))

    (a uniform magnet rho makes alpha * KL(pi || rho) an entropy bonus up to a
    constant). Its deep form is PPO's surrogate for E_pi[q_t] plus the two
    regularisers, minimised for a few epochs from the params that acted (mu =
    pi_t):

        loss = ppo_loss(entropy_cost=alpha) + kl_cost * mean(KL(pi(. | s_i) || mu(. | s_i)))

    with kl_cost = 1 / eta. The KL is computed exactly over the legal actions
    from the behaviour logits (the paper's reference code estimates it from the
    sampled action's ratio). Its gradient is zero at the params that acted, so it
    only acts within an update's several epochs (LearnerConfig.epochs): a single
    gradient step per batch is plain entropy-regularised PPO. With both
    regularisers the iterates themselves converge to the quantal-response
    equilibrium of the alpha-regularised game (last-iterate convergence), instead
    of circling a Nash equilibrium as unregularised self-play does; as alpha
    shrinks that equilibrium approaches a Nash equilibrium.
    """
    loss, metrics = ppo_loss(inputs, entropy_cost=entropy_cost, **ppo_kwargs)
    kl = jnp.mean(inputs.kl_tm1)
    return loss + kl_cost * kl, dict(metrics, kl=kl)
