"""The host's named steps (every session's, whatever its protocol version) on the model they need, kept out of
the wiring in host.py.

A session whose spec is v1-shaped (one unmasked tensor, one discrete head; every v1
worker's, and v2 ones of that shape: `protocol.named.flat_model`) runs on the flat model
and data path (its teams seat league games, seedleague.host.seating): `as_v1_step`
and `as_named_actions` translate at the edge without copies. Any other spec
builds the named network: `batch_inputs`
concatenates a batch's named tensors and legal masks, `split_actions` cuts the
answer back into [E, S, ...] per head; `record_episode_stats` logs the episode
statistics a worker declares. In a league both kinds seat, score and report games
as v1 does (seedleague.host.seating, results), and a named network's opponent
snapshots act in the same stacked pass over these dicts (seedleague.host.opponents).
For both, `bootstrap` folds the value of a truncated episode's final observation
into its last reward:

    r_T += gamma * V(s_final),  and the step counts as terminated,

computed with the acting params when the final observation arrives (as
stable-baselines3's PPO does), so the learner's losses need nothing new and no
longer stand V(s_t) in for V(s_final) (seedleague.rl.losses.rewards_and_discounts).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import jax
import numpy as np

from seedleague.buckets import pad
from seedleague.host.sessions import AgentStep
from seedleague.protocol.specs import ActionBatch, StepBatch
from seedleague.protocol.named import NamedActionBatch, NamedEnvSpec, NamedStepBatch


def as_v1_step(step: NamedStepBatch, spec: NamedEnvSpec) -> StepBatch:
    """A checked v2 step of a v1-shaped spec as the v1 step it is (no copies)."""
    tensor, head = spec.observation.tensors[0], spec.action.heads[0]
    return StepBatch(step.session_id, step.sequence, step.observation[tensor.name], step.reward, step.terminated,
                     step.truncated, step.legal_mask.get(head.name), step.acting)


def final_rows(step: NamedStepBatch, num_seats: int) -> np.ndarray:
    """The agent rows (env-major, seat-minor) of the final observations a v2 step carries."""
    envs = np.flatnonzero(step.bootstrapped())
    return (envs[:, None] * num_seats + np.arange(num_seats)).reshape(-1)


def attach_final_v1(agents: AgentStep, step: NamedStepBatch, spec: NamedEnvSpec) -> None:
    """Give a v1-shaped session's flattened step the final observations of its v2 message, [M, *shape]."""
    if step.final_observation and agents.final_observation is None:
        rows = final_rows(step, spec.num_seats)
        array = step.final_observation[spec.observation.tensors[0].name]
        agents.final_observation, agents.final_rows = array.reshape((len(rows),) + array.shape[2:]), rows


def as_named_actions(answer: ActionBatch, spec: NamedEnvSpec) -> NamedActionBatch:
    """The host's answer to a v2 step: a v1-shaped session's one action under its head's name; a named
    session's dict as it is."""
    action = answer.action if isinstance(answer.action, dict) else {spec.action.heads[0].name: answer.action}
    return NamedActionBatch(answer.sequence, action, answer.policy_version)


def record_episode_stats(metrics: Any, step: NamedStepBatch) -> None:
    """Each declared stat of every episode `step` ends, per seat, as a running mean "episode_stats/<name>" (the
    progress line and TensorBoard). The first step of a stream ends no episode."""
    if not step.episode_stats or step.sequence == 0:
        return
    ended = step.terminated | step.truncated
    if ended.any():
        for name, values in step.episode_stats.items():
            for value in values[ended].ravel():
                metrics.record(**{f"episode_stats/{name}": float(value)})


def batch_inputs(spec: NamedEnvSpec, agents: list[AgentStep]) -> tuple[dict, dict]:
    """The named observations {key: [N, ...]} and legal masks {head: [N, n]} of a batch of named steps."""
    observation = {key: np.concatenate([a.observation[key] for a in agents]) for key in spec.observation.arrays()}
    legal = {}
    for head in spec.action.discrete:
        if head.has_legal_mask:
            legal[head.name] = np.concatenate([a.legal_mask[head.name] for a in agents])
    return observation, legal


def split_actions(action: Any, rows: slice, num_envs: int, num_seats: int) -> Any:
    """One request's rows of a batch's actions as [E, S, ...] (a dict per head for a named network)."""
    if isinstance(action, dict):
        return {k: v[rows].reshape((num_envs, num_seats) + v.shape[1:]) for k, v in action.items()}
    return action[rows].reshape(num_envs, num_seats)


def bootstrap(step: AgentStep, reward: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
              learning: np.ndarray, core_before: Any, values: Callable, bucket: Callable[[int], int],
              discount: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """reward, terminated, truncated [N] with the truncated episodes that `step` carries final observations of
    (and that are the learner's, `learning`) ended by r += discount * V(final) as a termination. `values` is
    `InferencePolicy.values`; `core_before` the agents' recurrent state when the final observation was seen."""
    rows: Optional[np.ndarray] = step.final_rows
    if step.final_observation is None or rows is None or not len(rows):
        return reward, terminated, truncated
    keep = learning[rows] & truncated[rows]
    if not keep.any():
        return reward, terminated, truncated
    count, size = len(rows), bucket(len(rows))
    observation = jax.tree.map(lambda x: pad(x, size, (x.dtype == bool)), step.final_observation)
    core = jax.tree.map(lambda x: pad(x[rows], size), core_before)
    value = values(observation, np.zeros(size, bool), core)[:count]
    reward, terminated, truncated = reward.copy(), terminated.copy(), truncated.copy()
    kept = rows[keep]
    reward[kept] += np.float32(discount) * value[keep].astype(np.float32)
    terminated[kept], truncated[kept] = True, False
    return reward, terminated, truncated
