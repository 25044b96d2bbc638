"""The batch of trajectories the host's replay hands the learner.

Row t of an unroll holds the observation the policy acted on at step t, the action
it took, and what followed that action (reward, terminated, truncated). Row T (the
last) is the bootstrap row: only its observation and `first` flag are used; its
action becomes row 0 of the next unroll from the same agent.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax


class Unroll(NamedTuple):
    """A batch of B fixed-length unrolls of T+1 rows each (batch-major)."""

    observation: jax.Array  # [B, T+1, *obs_shape], the worker's observation dtype
    first: jax.Array  # [B, T+1] bool: observation starts an episode (reset core state here)
    action: jax.Array  # [B, T+1] int32
    behaviour_logits: jax.Array  # [B, T+1, A] float32, before legal masking
    legal_mask: jax.Array  # [B, T+1, A] bool (all true for games without masks)
    reward: jax.Array  # [B, T+1] float32: reward that followed action t
    terminated: jax.Array  # [B, T+1] bool: action t reached a terminal state
    truncated: jax.Array  # [B, T+1] bool: action t hit a time limit (bootstrap the value)
    policy_version: jax.Array  # [B, T+1] int32: learner step of the params that acted
    core_state: Any  # pytree of [B, ...]: recurrent state before row 0 (() without a core)


class NamedUnroll(NamedTuple):
    """`Unroll` for named specs (seedleague.rl.named_spec): the same rows, with a dict where the flat `Unroll` has
    the one observation, action, behaviour logits or legal mask."""

    observation: dict  # {key: [B, T+1, *shape]} over ObservationSpec.arrays() (entity masks included)
    first: jax.Array  # [B, T+1] bool, as Unroll.first
    action: dict  # {head: [B, T+1] int32 for a discrete head, [B, T+1, d] float32 for a continuous one}
    behaviour_params: dict  # {head: [B, T+1, P_head] float32}: the distribution params that acted
    legal_mask: dict  # {discrete head with a legal mask: [B, T+1, n] bool}; other heads: every action legal
    reward: jax.Array  # [B, T+1] float32, as Unroll.reward (one reward per step for the whole action)
    terminated: jax.Array  # [B, T+1] bool
    truncated: jax.Array  # [B, T+1] bool
    policy_version: jax.Array  # [B, T+1] int32
    core_state: Any  # pytree of [B, ...]
