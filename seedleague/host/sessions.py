"""Per-worker state on the host: one Session per handshake, and the registry of them.

A session owns everything the host keeps for one worker's agents (one agent per
env and seat): recurrent core state, the unroll store, episode returns. It lives
from the handshake until its stream ends; a session that never streams expires,
and the servicer ends a stream whose worker goes quiet for
`SessionLimits.stream_idle_timeout_s`. The handshake limits a spec must pass before it reaches the model are
checked in seedleague.host.session_limits (`check_spec`, `check_capacity`; see docs/limits.md).
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from typing import Any, Callable, Optional

import jax
import numpy as np

from seedleague.host.seating import Seating
from seedleague.host.unroll_store import UnrollStore
from seedleague.protocol.errors import FAILED_PRECONDITION, ProtocolError
from seedleague.protocol.named import NamedEnvSpec, NamedStepBatch, flat_model
from seedleague.host.session_limits import SessionLimits, check_capacity


@dataclasses.dataclass
class AgentStep:
    """One worker step flattened to agents (env-major, seat-minor), ready for inference."""

    session: "Session"
    observation: np.ndarray  # [N, *obs]
    first: np.ndarray  # [N] bool
    reward: np.ndarray  # [N] float32
    terminated: np.ndarray  # [N] bool
    truncated: np.ndarray  # [N] bool
    acting: np.ndarray  # [N] bool
    legal_mask: Optional[np.ndarray]  # [N, A] bool
    # Set by the host from the session's Seating (league play); without a league every row is the learner's.
    learning_before: Optional[np.ndarray] = None  # [N] bool: learner rows of the episodes this step's rewards end
    learning: Optional[np.ndarray] = None  # [N] bool: learner rows of the episodes this step's actions continue
    opponents: Optional[np.ndarray] = None  # [N] object: snapshot key acting for each row, None = learner
    # Protocol v2: the final observations of the episodes this step truncated, {key: [M, *shape]}, and the agent
    # rows [M] they belong to (None: none sent). For the named network `observation`, `legal_mask` and
    # `final_observation` are dicts; for the flat model the arrays of the spec's one tensor and one head.
    final_observation: Any = None
    final_rows: Optional[np.ndarray] = None


class Session:
    """Host-side state of one worker's agents."""

    def __init__(
        self,
        session_id: str,
        spec: NamedEnvSpec,
        worker_name: str,
        unroll_length: int,
        initial_state: Callable[[int], Any],
        seating: Optional[Seating] = None,
        heads: Any = None,
    ):
        """`heads` (the network's seedleague.rl.action_heads.ActionHeads) is needed for the named network (a spec
        of which seedleague.protocol.named.flat_model does not hold)."""
        self.id = session_id
        self.seating = seating  # who plays which seat, for league play; None: the learner plays every seat
        self.spec = spec
        self.worker_name = worker_name
        self.created = time.monotonic()
        self.attached = False
        self.closed = False
        self.refusal: Optional[str] = None  # why the host refuses this session's next step (e.g. not zero-sum)
        self.beyond_bound_warned = False  # an episode's return exceeded the spec's return_bound (warned once)
        self.num_agents = spec.num_agents
        self.core_state = initial_state(self.num_agents)
        self.initial_core = initial_state(self.num_agents)  # what a new episode's recurrent state starts from
        self.has_core_state = bool(jax.tree.leaves(self.initial_core))  # a recurrent network's; none for a feed-forward one
        self.unrolls: Optional[UnrollStore] = None  # none on an inference-only host (unroll_length 0)
        self.named = not flat_model(spec)  # the named network's steps; else the flat model's (one tensor, one head)
        flat = None if self.named else (spec.observation.tensors[0], spec.action.heads[0])
        if unroll_length and self.named:
            self.unrolls = UnrollStore.named(self.num_agents, unroll_length, spec.observation, heads,
                                             initial_state(self.num_agents))
        elif unroll_length:
            self.unrolls = UnrollStore(self.num_agents, unroll_length, flat[0].shape, flat[0].dtype, flat[1].num_actions,
                                       initial_state(self.num_agents))
        self._fresh = True
        # Shared read-only masks, so no step builds its own: every agent (`acting` of a step that sends none, and
        # every row the learner's without a league) and, for a flat model's spec without legal masks, every action.
        self.every_agent = _read_only(np.ones(self.num_agents, bool))
        self.every_action = None if self.named or spec.has_legal_mask else _read_only(
            np.ones((self.num_agents, flat[1].num_actions), bool))
        self._flat_names = None if self.named else (flat[0].name, flat[1].name)  # the flat model's tensor and head
        self._observation_shape = None if self.named else (self.num_agents,) + flat[0].shape
        self._episode_return = np.zeros(self.num_agents, np.float64)
        self._episode_length = np.zeros(self.num_agents, np.int64)

    def flatten(self, step: NamedStepBatch) -> AgentStep:
        """[E, S, ...] tensors -> [N, ...] agents; the stream's first step starts every episode. The flat model's
        session takes its spec's one tensor and one head's mask as arrays, the named network's every one as dicts;
        final observations go to the agent rows of the truncated envs (none on the first step, which ends no
        episode). No copy of any per-env array: reshapes of the step's own (read-only) arrays, and an absent
        `acting` is one shared read-only array."""
        seats, n = self.spec.num_seats, self.num_agents
        fresh, self._fresh = self._fresh, False
        if fresh:
            first, reward = np.ones(n, bool), np.zeros(n, np.float32)
            terminated, truncated = np.zeros(n, bool), np.zeros(n, bool)
        else:
            terminated = step.terminated if seats == 1 else np.repeat(step.terminated, seats)
            truncated = step.truncated if seats == 1 else np.repeat(step.truncated, seats)
            first, reward = terminated | truncated, step.reward.reshape(n)
        if self.named:
            observation = {k: v.reshape((n,) + v.shape[2:]) for k, v in step.observation.items()}
            legal_mask = {k: v.reshape(n, -1) for k, v in step.legal_mask.items()} or None
        else:  # the flat model: one array in, one categorical out
            observation = step.observation[self._flat_names[0]].reshape(self._observation_shape)
            legal_mask = step.legal_mask.get(self._flat_names[1])
            legal_mask = None if legal_mask is None else legal_mask.reshape(n, -1)
        final, final_rows = None, None
        if step.final_observation and not fresh:
            envs = np.flatnonzero(step.bootstrapped())
            final_rows = (envs[:, None] * seats + np.arange(seats)).reshape(-1)
            final = {k: v.reshape((len(final_rows),) + v.shape[2:]) for k, v in step.final_observation.items()}
            final = final if self.named else final[self._flat_names[0]]
        return AgentStep(
            session=self, observation=observation, first=first, reward=reward, terminated=terminated,
            truncated=truncated, acting=self.every_agent if step.acting is None else step.acting.reshape(n),
            legal_mask=legal_mask, final_observation=final, final_rows=final_rows,
        )

    def finished_episodes(self, agents: AgentStep) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Add this step's rewards; return (ended, returns, lengths), each [N]: which agents' episodes
        this step ended, and the return and length of those episodes (meaningless where not ended)."""
        self._episode_return += agents.reward
        ended = agents.terminated | agents.truncated
        returns, lengths = self._episode_return.copy(), self._episode_length.copy()
        self._episode_return[ended] = 0.0
        self._episode_length[ended] = 0
        self._episode_length += agents.acting
        return ended, returns, lengths


class SessionRegistry:
    """Thread-safe map of session id -> Session, enforcing the host's limits."""

    def __init__(self, limits: SessionLimits):
        self.limits = limits
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self._attached = 0  # sessions with a stream: the batcher asks for it before every request it waits for

    def open(self, spec: NamedEnvSpec, worker_name: str, make: Callable[[str], Session]) -> Session:
        check_capacity(spec, self.limits, open_sessions=0)
        with self._lock:
            self._expire_unattached()
            check_capacity(spec, self.limits, open_sessions=len(self._sessions))
            session = make(uuid.uuid4().hex)
            self._sessions[session.id] = session
            return session

    def attach(self, session_id: str) -> Session:
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                raise ProtocolError(FAILED_PRECONDITION, f"unknown session id {session_id!r}: handshake first")
            if session.attached:
                raise ProtocolError(FAILED_PRECONDITION, f"session {session_id!r} already has a stream")
            session.attached = True
            self._attached += 1
            return session

    def get(self, session_id: str) -> Session:
        session = self._sessions.get(session_id)
        if session is None or not session.attached:
            raise ProtocolError(FAILED_PRECONDITION, f"unknown or closed session id {session_id!r}")
        return session

    def close(self, session_id: str) -> Optional[Session]:
        with self._lock:
            session = self._sessions.pop(session_id, None)
            if session is not None and session.attached:
                self._attached -= 1
        if session is not None:
            session.closed = True
        return session

    def attached_count(self) -> int:
        """Open sessions with a stream, in O(1)."""
        return self._attached

    def __len__(self) -> int:
        return len(self._sessions)

    def _expire_unattached(self) -> None:
        now = time.monotonic()
        for sid, session in list(self._sessions.items()):
            if not session.attached and now - session.created > self.limits.attach_timeout_s:
                del self._sessions[sid]


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array
