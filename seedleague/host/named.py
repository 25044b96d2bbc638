"""The host's named steps (every session's, whatever its protocol version) on the model they need, kept out of
the wiring in host.py.

A session whose spec has one unmasked tensor and one discrete head (every v1 worker's, and v2 ones of that shape:
`protocol.named.flat_model`) runs on the flat model and data path: `Session.flatten` hands it the spec's one
tensor and mask as arrays, and `split_actions` puts the model's one action array back under its head's name. Any
other spec builds the named network: `batch_inputs` concatenates a batch's named tensors and legal masks,
`split_actions` cuts its answer back into [E, S, ...] per head. `record_episode_stats` logs the episode
statistics a worker declares. In a league both kinds seat, score and report games the same way
(seedleague.host.seating, results), and a named network's opponent snapshots act in the same stacked pass over
these dicts (seedleague.host.opponents).
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
from seedleague.protocol.named import NamedEnvSpec, NamedStepBatch


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


def split_actions(action: Any, rows: slice, spec: NamedEnvSpec) -> dict:
    """One request's rows of a batch's actions as {head: [E, S, ...]}: the named network's dict per head, the flat
    model's one array under its one head's name."""
    agents = (spec.num_envs, spec.num_seats)
    if isinstance(action, dict):
        return {k: v[rows].reshape(agents + v.shape[1:]) for k, v in action.items()}
    return {spec.action.heads[0].name: action[rows].reshape(agents)}


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
