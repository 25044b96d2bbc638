"""Loss inputs for composite actions: joint log-probabilities, entropies and KLs summed over heads.

This file owns the step from a named network's outputs and a
`NamedUnroll` to the `LossInputs` that V-trace, PPO and MMD
(seedleague.rl.losses) already take. The losses themselves do not change: their
log pi, log mu, entropy and KL are those of the whole action, each a sum over the
action's independent heads. With one discrete head the numbers are the flat model's exactly.

    outputs, values, _ = network.apply(params, batch.observation, batch.first, batch.core_state)
    inputs = named_loss_inputs(network.heads, outputs, values, batch, discount=0.99)
    loss, metrics = losses.vtrace_loss(inputs, lambda_=0.95)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from seedleague.rl import losses
from seedleague.rl.action_heads import ActionHeads, Categorical
from seedleague.rl.types import NamedUnroll, Unroll


def _rows(tree: dict, rows: slice) -> dict:
    return {name: x[:, rows] for name, x in tree.items()}


def _check(heads: ActionHeads, outputs: dict, values: jax.Array, batch: NamedUnroll) -> None:
    if values.ndim != 2 or values.shape[1] < 2:
        raise ValueError(f"values must be [B, T+1] with T+1 >= 2 rows, got {values.shape}")
    if batch.first.shape != values.shape:
        raise ValueError(f"batch rows {batch.first.shape} must match the network outputs {values.shape}")
    names = [h.name for h in heads.spec.heads]
    for field, tree in (("outputs", outputs), ("batch.action", batch.action),
                        ("batch.behaviour_params", batch.behaviour_params)):
        if sorted(tree) != sorted(names):
            raise ValueError(f"{field} must hold one entry per action head {names}, got {sorted(tree)}")
    for name in names:
        want = values.shape + (heads.num_params(name),)
        for field, tree in (("outputs", outputs), ("batch.behaviour_params", batch.behaviour_params)):
            if tree[name].shape != want:
                raise ValueError(f"{field}[{name!r}] must be [B, T+1, P] = {want}, got {tree[name].shape}")


def named_loss_inputs(heads: ActionHeads, outputs: dict, values: jax.Array, batch: NamedUnroll,
                      discount: float) -> losses.LossInputs:
    """`losses.loss_inputs` for a composite action: outputs {head: [B, T+1, P]} and values [B, T+1] from
    `NamedNetwork.apply` over the batch; row T only supplies V(s_T).

    logit_tm1 (NeuRD's centred logit) is defined for a single discrete head only; otherwise it is NaN, and
    the learner refuses NeuRD for such specs.
    """
    _check(heads, outputs, values, batch)
    # Each term slices the outputs itself, as losses.loss_inputs does, so that one discrete head sums its
    # gradients in the flat losses' order and gives their gradients bit for bit.
    tm1, t = (lambda tree: _rows(tree, slice(None, -1))), (lambda tree: _rows(tree, slice(1, None)))
    mu_tm1 = {name: x.astype(jnp.float32) for name, x in tm1(batch.behaviour_params).items()}
    a_tm1, legal_tm1 = tm1(batch.action), tm1(batch.legal_mask)
    name, head = next(iter(heads.distributions.items()))
    if len(heads.spec.heads) == 1 and isinstance(head, Categorical):
        legal = legal_tm1.get(name, jnp.ones(tm1(outputs)[name].shape, bool))
        logit_tm1 = losses.centred_logit(tm1(outputs)[name], a_tm1[name], legal)
    else:
        logit_tm1 = jnp.full(values[:, :-1].shape, jnp.nan, jnp.float32)
    return losses.LossInputs(
        log_pi_tm1=heads.log_prob(tm1(outputs), a_tm1, legal_tm1),
        logit_tm1=logit_tm1,
        log_mu_tm1=heads.log_prob(mu_tm1, a_tm1, legal_tm1),
        entropy_tm1=heads.entropy(tm1(outputs), legal_tm1),
        entropy_t=jax.lax.stop_gradient(heads.entropy(t(outputs), t(batch.legal_mask))),
        kl_tm1=heads.kl(tm1(outputs), mu_tm1, legal_tm1),
        **losses.value_inputs(values, batch, discount),
    )


def named_unroll_from_flat(batch: Unroll, observation_name: str = "observation",
                           head_name: str = "action") -> NamedUnroll:
    """A flat `Unroll` as a `NamedUnroll` of one observation tensor and one discrete head (the names of
    `seedleague.rl.named_spec.flat_specs`). No copies: the same arrays under the spec's names."""
    return NamedUnroll(
        observation={observation_name: batch.observation},
        first=batch.first,
        action={head_name: batch.action},
        behaviour_params={head_name: batch.behaviour_logits},
        legal_mask={head_name: batch.legal_mask},
        reward=batch.reward,
        terminated=batch.terminated,
        truncated=batch.truncated,
        policy_version=batch.policy_version,
        core_state=batch.core_state,
    )
