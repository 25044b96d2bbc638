"""One batch's forward pass: the learner's rows with the live params and each league opponent's rows
with its snapshot's params, padded to the batcher's bucket sizes so each size compiles once.

    out = forward(policy, table, bucket, observation, first, core, legal, opponents, opponent_params)
    # opponents: [N] snapshot key per row (None: the learner's row), or None for a batch without any;
    # opponent_params(key): that snapshot's params, or None where none is cached (the row plays as the learner)

A batch without opponents is one `InferencePolicy.act`; one with opponents is one jitted call over the
learner's rows and the opponents' rows together (seedleague.host.opponents.OpponentTable). For a
named network (protocol v2) observation and legal are dicts of [N, ...] arrays, and so are the
actions and logits (behaviour params) returned, one per head.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import jax
import numpy as np

from seedleague.buckets import pad, pad_dict
from seedleague.host.opponents import OpponentTable, take_rows
from seedleague.host.policy import Actions, InferencePolicy


def forward(policy: InferencePolicy, table: OpponentTable, bucket: Callable[[int], int], observation, first, core,
            legal, opponents: Optional[np.ndarray], opponent_params: Optional[Callable[[str], Any]]) -> Actions:
    """Actions, logits and core state for every row of the batch (see the module docstring)."""
    if opponents is None or not any(key is not None for key in opponents):
        return act_padded(policy, bucket, observation, first, core, legal)
    groups: dict[Optional[str], list[int]] = {}
    params_of: dict[str, Any] = {}
    for row, key in enumerate(opponents):
        if key is not None and key not in params_of:
            params_of[key] = opponent_params(key)
        groups.setdefault(key if params_of.get(key) is not None else None, []).append(row)  # not cached: plays as the learner
    batch = len(first)
    out_of: dict[str, Any] = {}  # "action", "logits": filled row by row (arrays, or dicts of them per head)
    new_core = jax.tree.map(np.copy, core)
    version = policy.version

    def put(rows: np.ndarray, out: Actions) -> None:
        for name in ("action", "logits"):
            part = getattr(out, name)
            if name not in out_of:  # shaped like the first answer: [batch, ...] per leaf
                out_of[name] = jax.tree.map(lambda x: np.zeros((batch,) + x.shape[1:], x.dtype), part)
            jax.tree.map(lambda target, source: target.__setitem__(rows, source), out_of[name], part)
        jax.tree.map(lambda target, source: target.__setitem__(rows, source), new_core, out.core_state)

    learner_rows = groups.pop(None, None)
    if learner_rows and groups:  # the usual league batch: one jitted call for both
        version = table.act_with_learner(policy, np.asarray(learner_rows), groups, params_of, observation, first, core,
                                         legal, put, bucket)
    elif groups:
        table.act(policy, groups, params_of, observation, first, core, legal, put, bucket)
    else:
        rows = np.asarray(learner_rows)
        out = act_padded(policy, bucket, *take_rows((observation, first, core, legal), rows))
        put(rows, out)
        version = out.policy_version
    return Actions(out_of["action"], out_of["logits"], new_core, version)


def act_padded(policy: InferencePolicy, bucket: Callable[[int], int], observation, first, core, legal) -> Actions:
    """The learner's params on `len(first)` rows padded to `bucket(len(first))` (one compile per bucket)."""
    count = len(first)
    size = bucket(count)
    if isinstance(observation, dict):  # a named network: dicts of named tensors, heads and legal masks
        out = policy.act(pad_dict(observation, size, None), pad(first, size, True),
                         jax.tree.map(lambda x: pad(x, size), core), pad_dict(legal, size, True))
        cut = lambda tree: jax.tree.map(lambda x: x[:count], tree)
        return Actions(cut(out.action), cut(out.logits), cut(out.core_state), out.policy_version)
    out = policy.act(pad(observation, size), pad(first, size, True), jax.tree.map(lambda x: pad(x, size), core),
                     pad(legal, size, True))
    return Actions(out.action[:count], out.logits[:count], jax.tree.map(lambda x: x[:count], out.core_state),
                   out.policy_version)
