"""Assembles one session's agent steps into fixed-length unrolls, vectorised.

Each agent slot (one per env and seat) fills rows 0..T of its own unroll. A row
is written when the agent acts; the reward and episode-end flags that follow an
action arrive with the agent's next step and are written back into the previous
row. Rewards a seat receives while it does not act (turn-based games) are summed
into its next acting step, and an episode start it sees while not acting marks
its next acting row as `first` (so the learner resets recurrent state there). When row T is written the unroll is complete: it is
handed out whole and row T becomes row 0 of the agent's next unroll. Nothing
partial ever leaves this object, so a worker that disappears mid-unroll leaves
nothing half-written in replay.

A protocol v2 session with named tensors and several action heads keeps its rows as a
`NamedUnroll` (`UnrollStore.named`): the observation, action, behaviour
params and legal masks are then dicts of such columns, written the same way.
"""

from __future__ import annotations

from typing import Any, Optional

import jax
import numpy as np

from seedleague.rl.action_heads import ActionHeads
from seedleague.rl.named_spec import DiscreteHead, ObservationSpec
from seedleague.rl.types import NamedUnroll, Unroll

# The columns that are dicts in a NamedUnroll (one array per tensor or head), and the one named differently.
_BEHAVIOUR = {Unroll: "behaviour_logits", NamedUnroll: "behaviour_params"}


def _put(column: Any, index: tuple, value: Any) -> None:
    """column[index] = value, for one array or a dict of them (a named column and its values by key)."""
    if isinstance(column, dict):
        for key, target in column.items():
            target[index] = value[key] if isinstance(value, dict) else value
    else:
        column[index] = value


def _take(value: Any, rows: np.ndarray) -> Any:
    return {k: v[rows] for k, v in value.items()} if isinstance(value, dict) else value[rows]


def _copy_row(column: Any, done: np.ndarray, last: int) -> None:
    for target in column.values() if isinstance(column, dict) else (column,):
        target[done, 0] = target[done, last]


def named_rows(num_agents: int, unroll_length: int, observation_spec: ObservationSpec, heads: ActionHeads,
               initial_core_state: Any) -> NamedUnroll:
    """Zeroed NamedUnroll rows [num_agents, T+1, ...] for one observation spec and action heads."""
    rows = (num_agents, unroll_length + 1)
    spec = heads.spec
    return NamedUnroll(
        observation={k: np.zeros(rows + shape, dtype) for k, (shape, dtype) in observation_spec.arrays().items()},
        first=np.zeros(rows, bool),
        action={h.name: np.zeros(rows, np.int32) if isinstance(h, DiscreteHead) else np.zeros(rows + (h.size,),
                                                                                              np.float32)
                for h in spec.heads},
        behaviour_params={h.name: np.zeros(rows + (heads.num_params(h.name),), np.float32) for h in spec.heads},
        legal_mask={h.name: np.ones(rows + (h.num_actions,), bool) for h in spec.discrete if h.has_legal_mask},
        reward=np.zeros(rows, np.float32),
        terminated=np.zeros(rows, bool),
        truncated=np.zeros(rows, bool),
        policy_version=np.zeros(rows, np.int32),
        core_state=initial_core_state,
    )


class UnrollStore:
    """Per-session buffers of shape [num_agents, T+1, ...] and the write cursor of each agent."""

    def __init__(
        self,
        num_agents: int,
        unroll_length: int,
        observation_shape: tuple[int, ...],
        observation_dtype: np.dtype,
        num_actions: int,
        initial_core_state: Any,
    ):
        rows = (num_agents, unroll_length + 1)
        self._init(num_agents, unroll_length, Unroll(
            observation=np.zeros(rows + tuple(observation_shape), observation_dtype),
            first=np.zeros(rows, bool),
            action=np.zeros(rows, np.int32),
            behaviour_logits=np.zeros(rows + (num_actions,), np.float32),
            legal_mask=np.ones(rows + (num_actions,), bool),
            reward=np.zeros(rows, np.float32),
            terminated=np.zeros(rows, bool),
            truncated=np.zeros(rows, bool),
            policy_version=np.zeros(rows, np.int32),
            core_state=initial_core_state,
        ))

    @classmethod
    def named(cls, num_agents: int, unroll_length: int, observation_spec: ObservationSpec, heads: ActionHeads,
              initial_core_state: Any) -> "UnrollStore":
        """A store of NamedUnroll rows: `add` then takes dicts for observation, action, logits, legal_mask."""
        store = cls.__new__(cls)
        store._init(num_agents, unroll_length,
                    named_rows(num_agents, unroll_length, observation_spec, heads, initial_core_state))
        return store

    def _init(self, num_agents: int, unroll_length: int, rows: Any) -> None:
        self.unroll_length = unroll_length
        self._rows = rows
        self._behaviour = _BEHAVIOUR[type(rows)]
        initial_core_state = rows.core_state
        self._core_at_last_row = jax.tree.map(np.copy, initial_core_state)
        self._cursor = np.zeros(num_agents, np.int64)
        self._pending_reward = np.zeros(num_agents, np.float32)
        self._pending_terminated = np.zeros(num_agents, bool)
        self._pending_truncated = np.zeros(num_agents, bool)
        self._pending_first = np.zeros(num_agents, bool)

    def add(
        self,
        *,
        acting: np.ndarray,  # [N] bool
        reward: np.ndarray,  # [N] float32, reward since the agent's last step
        terminated: np.ndarray,  # [N] bool
        truncated: np.ndarray,  # [N] bool
        observation: Any,  # [N, *obs] (named: {key: [N, *shape]})
        first: np.ndarray,  # [N] bool
        action: Any,  # [N] int32 (named: {head: [N] int32 or [N, d] float32})
        logits: Any,  # [N, A] float32 (named: the behaviour params {head: [N, P]})
        legal_mask: Any,  # [N, A] bool or None (named: {head: [N, n]} or None)
        policy_version: int,
        core_state: Any,  # pytree of [N, ...]: state before this step
    ) -> Optional[Unroll | NamedUnroll]:
        """Record one step of every agent; return the unrolls it completed, if any."""
        self._pending_reward += reward
        self._pending_terminated |= terminated
        self._pending_truncated |= truncated
        self._pending_first |= first
        agents = np.flatnonzero(acting)
        if agents.size == 0:
            return None
        rows, cursor = self._rows, self._cursor[agents]
        previous = agents[cursor > 0]
        back = self._cursor[previous] - 1
        rows.reward[previous, back] = self._pending_reward[previous]
        rows.terminated[previous, back] = self._pending_terminated[previous]
        rows.truncated[previous, back] = self._pending_truncated[previous]
        self._pending_reward[agents] = 0.0
        self._pending_terminated[agents] = False
        self._pending_truncated[agents] = False

        _put(rows.observation, (agents, cursor), _take(observation, agents))
        rows.first[agents, cursor] = self._pending_first[agents]
        self._pending_first[agents] = False
        _put(rows.action, (agents, cursor), _take(action, agents))
        _put(getattr(rows, self._behaviour), (agents, cursor), _take(logits, agents))
        _put(rows.legal_mask, (agents, cursor), True if legal_mask is None else _take(legal_mask, agents))
        rows.policy_version[agents, cursor] = policy_version
        self._store_core(agents[cursor == 0], core_state, rows.core_state)
        self._store_core(agents[cursor == self.unroll_length], core_state, self._core_at_last_row)
        self._cursor[agents] += 1
        return self._emit_complete()

    @staticmethod
    def _store_core(agents: np.ndarray, source: Any, target: Any) -> None:
        if agents.size:
            jax.tree.map(lambda t, s: t.__setitem__(agents, s[agents]), target, source)

    def _emit_complete(self) -> Optional[Unroll]:
        done = np.flatnonzero(self._cursor == self.unroll_length + 1)
        if done.size == 0:
            return None
        rows, last = self._rows, self.unroll_length
        complete = jax.tree.map(lambda x: x[done], rows)
        for field in ("observation", "first", "action", self._behaviour, "legal_mask", "policy_version"):
            _copy_row(getattr(rows, field), done, last)
        rows.reward[done] = 0.0
        rows.terminated[done] = False
        rows.truncated[done] = False
        self._store_core(done, self._core_at_last_row, rows.core_state)
        self._cursor[done] = 1
        return complete
