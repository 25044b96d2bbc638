"""FakeBackend: a host with no model. It speaks the full env protocol, answers
uniformly random legal actions, and records what it saw.

It implements the `EnvBackend` protocol of `seedleague.host.servicer`, so it runs
behind the same servicer as the training host:

    backend = FakeBackend()
    with ServerThread(backend) as server:       # seedleague.testing.server_thread
        ...run a worker against server.address...
    backend.violations          # every refused message, as "session: CODE: text"
    backend.sessions[0].episodes

A game team can point its worker at it to check the protocol before any model
exists; tests use it to check workers, clients and the servicer.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import threading
from typing import Callable, Optional

import numpy as np

from seedleague.host.session_limits import SessionLimits, check_capacity
from seedleague.protocol.errors import FAILED_PRECONDITION, INVALID_ARGUMENT, RESOURCE_EXHAUSTED, ProtocolError
from seedleague.protocol.named import (NamedActionBatch, NamedEnvSpec, NamedStepBatch,
                                       check_named_step, flat_model, random_named_actions)


@dataclasses.dataclass(frozen=True)
class FakeHostConfig:
    """What the fake host accepts. None / 0 means "anything"."""

    seed: int = 0
    max_message_bytes: int = 64 * 2**20
    policy_version: int = 0  # reported on every ActionBatch
    observation_shape: Optional[tuple[int, ...]] = None  # refuse other shapes, as a model would
    num_actions: Optional[int] = None  # refuse other action counts, as a model would
    max_envs: int = 0  # total envs over open sessions; more is RESOURCE_EXHAUSTED
    history: int = 1000  # completed episodes remembered per session
    limits: SessionLimits = SessionLimits()  # the real host's limits (envs per worker, workers, spec size)

    def __post_init__(self):
        if self.observation_shape is not None:
            object.__setattr__(self, "observation_shape", tuple(int(d) for d in self.observation_shape))
        problems = []
        if self.max_message_bytes < 1024:
            problems.append(f"max_message_bytes must be >= 1024, got {self.max_message_bytes}")
        if self.num_actions is not None and self.num_actions < 1:
            problems.append(f"num_actions must be >= 1 or None, got {self.num_actions}")
        if self.max_envs < 0:
            problems.append(f"max_envs must be >= 0 (0 = unlimited), got {self.max_envs}")
        if self.history < 0:
            problems.append(f"history must be >= 0, got {self.history}")
        if problems:
            raise ValueError("bad fake host config: " + "; ".join(problems))


@dataclasses.dataclass
class FakeSession:
    """What the fake host knows about one session. Counters cover its one stream."""

    session_id: str
    spec: NamedEnvSpec  # as the worker declared it (a v1 worker's: one tensor "observation", one head "action")
    worker_name: str
    history: int
    protocol_version: int = 0  # the version of the service it handshook on (0 until the servicer says)
    streaming: bool = False
    closed: Optional[str] = None  # the close reason, once closed
    steps: int = 0  # StepBatch messages accepted
    episodes: int = 0  # episodes ended (terminated or truncated), over all envs
    largest_return: float = 0.0  # the largest absolute return of one seat in any ended episode
    last_step: Optional[NamedStepBatch] = dataclasses.field(default=None, repr=False)
    episode_returns: collections.deque = dataclasses.field(init=False, repr=False)  # per-seat return tuples
    episode_lengths: collections.deque = dataclasses.field(init=False, repr=False)  # actions per episode

    def __post_init__(self):
        self.episode_returns = collections.deque(maxlen=self.history)
        self.episode_lengths = collections.deque(maxlen=self.history)
        self._return = np.zeros((self.spec.num_envs, self.spec.num_seats), np.float64)
        self._length = np.zeros(self.spec.num_envs, np.int64)
        self._acted = np.ones(self.spec.num_envs, bool)  # some seat of the env acted on the previous step

    @property
    def env_steps(self) -> int:
        return self.steps * self.spec.num_envs

    def record(self, step: NamedStepBatch) -> None:
        """Account one accepted step; the first step of a stream only carries first observations."""
        if self.steps > 0:
            self._return += step.reward
            self._length += self._acted  # an env restarting without an action (next-step autoreset) adds none
            for env in np.flatnonzero(step.terminated | step.truncated):
                self.episode_returns.append(tuple(self._return[env].tolist()))
                self.largest_return = max(self.largest_return, float(np.abs(self._return[env]).max()))
                self.episode_lengths.append(int(self._length[env]))
                self._return[env] = 0.0
                self._length[env] = 0
                self.episodes += 1
        self.steps += 1
        self._acted = np.ones(self.spec.num_envs, bool) if step.acting is None else step.acting.any(axis=1)
        self.last_step = step


class FakeBackend:
    """An `EnvBackend` that accepts any valid spec (within its config) and acts at random."""

    def __init__(
        self,
        config: FakeHostConfig = FakeHostConfig(),
        on_step: Optional[Callable[[FakeSession, NamedStepBatch], None]] = None,
    ):
        self.config = config
        self.max_message_bytes = config.max_message_bytes
        self.violations: list[str] = []
        self._on_step = on_step
        self._rng = np.random.default_rng(config.seed)
        self._sessions: dict[str, FakeSession] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()

    @property
    def sessions(self) -> list[FakeSession]:
        """Every session ever opened, oldest first (a snapshot, safe from any thread)."""
        with self._lock:
            return list(self._sessions.values())

    def session(self, session_id: str) -> Optional[FakeSession]:
        """The session of that id, if ever opened."""
        return self._sessions.get(session_id)

    def open_session(self, spec: NamedEnvSpec, worker_name: str) -> str:
        self._check_spec(spec)
        session_id = f"fake-{next(self._ids)}"
        with self._lock:
            self._sessions[session_id] = FakeSession(session_id, spec, worker_name, self.config.history)
        return session_id

    def opened_on(self, session_id: str, version: int) -> None:
        """The servicer's word on the protocol version a session handshook on (what a fake host reports)."""
        self._sessions[session_id].protocol_version = version

    def attach(self, session_id: str) -> None:
        session = self._sessions.get(session_id)
        if session is None:
            self._refuse(session_id, FAILED_PRECONDITION, f"unknown session id {session_id!r}: handshake again")
        if session.closed is not None:
            self._refuse(session_id, FAILED_PRECONDITION, f"session {session_id!r} is closed ({session.closed})")
        if session.streaming:
            self._refuse(session_id, FAILED_PRECONDITION, f"session {session_id!r} already has a stream")
        session.streaming = True

    async def step(self, step: NamedStepBatch) -> NamedActionBatch:
        """Uniform legal actions for every head of the session's spec."""
        session = self._sessions[step.session_id]
        if step.sequence != session.steps:
            self._refuse(session.session_id, INVALID_ARGUMENT, f"sequence {step.sequence}, expected {session.steps}")
        try:
            check_named_step(session.spec, step)
        except ProtocolError as error:
            self._refuse(session.session_id, error.code, error.message, error.field)
        session.record(step)
        if self._on_step is not None:
            self._on_step(session, step)
        action = random_named_actions(self._rng, session.spec, step.legal_mask)
        return NamedActionBatch(sequence=step.sequence, action=action, policy_version=self.config.policy_version)

    def close_session(self, session_id: str, reason: str) -> None:
        session = self._sessions.get(session_id)
        if session is not None and session.closed is None:
            session.closed = reason
            session.streaming = False

    def _check_spec(self, spec: NamedEnvSpec) -> None:
        config = self.config
        with self._lock:
            open_sessions = sum(1 for s in self._sessions.values() if s.closed is None)
        try:
            check_capacity(spec, config.limits, open_sessions)
        except ProtocolError as error:
            self._refuse("handshake", error.code, error.message, error.field)
        if config.observation_shape is not None or config.num_actions is not None:
            if not flat_model(spec):  # as the host: one tensor and one discrete head (with any stats or teams)
                self._refuse("handshake", FAILED_PRECONDITION, "the model takes one observation tensor and one "
                             f"discrete action head; the spec declares {len(spec.observation.tensors)} tensors and "
                             f"{len(spec.action.heads)} heads")
            shape, num_actions = spec.observation.tensors[0].shape, spec.action.heads[0].num_actions
            if config.observation_shape is not None and shape != config.observation_shape:
                self._refuse("handshake", FAILED_PRECONDITION,
                             f"observation shape {shape} does not fit the model's {config.observation_shape}")
            if config.num_actions is not None and num_actions != config.num_actions:
                self._refuse("handshake", FAILED_PRECONDITION,
                             f"{num_actions} actions do not fit the model's {config.num_actions}")
        if config.max_envs:
            with self._lock:
                open_envs = sum(s.spec.num_envs for s in self._sessions.values() if s.closed is None)
            if open_envs + spec.num_envs > config.max_envs:
                self._refuse(
                    "handshake",
                    RESOURCE_EXHAUSTED,
                    f"{spec.num_envs} more envs would exceed the host's limit of {config.max_envs} ({open_envs} open)",
                )

    def _refuse(self, where: str, code: str, message: str, field: Optional[str] = None) -> None:
        """Record the violation, then raise it for the servicer to turn into a status."""
        self.violations.append(f"{where}: {code}: {message}")
        raise ProtocolError(code, message, field)


class FakeLeague:
    """A league with no maths: a fixed opponent list, a switchable outage, and a record of every call.

    Implements `seedleague.league.types.LeagueAPI` in memory so the host's league
    side can be tested alone:

        league = FakeLeague(opponents=["main:000000"])   # every match is that snapshot
        league.available = False                         # every call raises ConnectionError
        league.results                                   # {result_id: MatchResult}, each counted once
    """

    def __init__(self, opponents: Optional[list[str]] = None, snapshot_every: int = 0, reset: bool = False):
        from seedleague.league import types

        self._types = types
        self.opponents = list(opponents or [])  # [] = self-play
        self.snapshot_every = snapshot_every  # learner steps between snapshot decisions (0: only the first)
        self.reset = reset
        self.available = True
        self.registered: dict[str, object] = {}
        self.results: dict[str, object] = {}
        self.report_calls = 0
        self.added: list[object] = []
        self._rng = np.random.default_rng(0)
        self._lock = threading.Lock()

    def _check(self) -> None:
        if not self.available:
            raise ConnectionError("fake league is unavailable")

    def register_player(self, name, role):
        self._check()
        self.registered[name] = role
        return self._types.PlayerInfo(name, role)

    def get_opponents(self, player, count):
        self._check()
        if not self.opponents:
            return [self._types.Match(player, True)] * count
        picks = self._rng.integers(len(self.opponents), size=count)
        return [self._types.Match(self.opponents[i], False) for i in picks]

    def report_results(self, results):
        self._check()
        with self._lock:
            self.report_calls += 1
            new = [r for r in results if r.result_id not in self.results]
            self.results.update((r.result_id, r) for r in new)
        return len(new)

    def check_in(self, player, learner_step):
        self._check()
        mine = [s for s in self.added if s.player == player]
        due = not mine or (self.snapshot_every and learner_step - mine[-1].step >= self.snapshot_every)
        return self._types.SnapshotDecision(bool(due), bool(due and mine and self.reset), "fake schedule")

    def add_snapshot(self, player, step, path):
        self._check()
        info = self._types.SnapshotInfo(self._types.snapshot_key(player, step), player, step, path, self._types.Role.MAIN)
        if all(s.key != info.key for s in self.added):
            self.added.append(info)
        return info

    def snapshots(self, player=None):
        return [s for s in self.added if player is None or s.player == player]

    def players(self):
        return [self._types.PlayerInfo(n, r) for n, r in self.registered.items()]

    def standings(self):
        return []

    def payoff(self):
        return self._types.PayoffMatrix([], [], [])
