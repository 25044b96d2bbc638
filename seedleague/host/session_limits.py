"""SessionLimits: how many workers and envs one host accepts, and how long it waits for them; `check_spec` and
`check_capacity` hold a worker's handshake to them.

Kept apart from seedleague.host.sessions, which turns workers' steps into jax arrays, so that building the command
line (`seedleague train --help`, a refused flag) and the servicer (which `seedleague fake-host` and `check-worker`
serve with) need no jax.
"""

from __future__ import annotations

import dataclasses
import math

from seedleague.protocol.errors import RESOURCE_EXHAUSTED, ProtocolError
from seedleague.protocol.named import DiscreteHead, NamedEnvSpec


_COUNTS = ("max_workers", "max_envs_per_worker", "max_num_actions", "max_observation_elements")


@dataclasses.dataclass(frozen=True)
class SessionLimits:
    """How many workers and envs one host accepts, and how long it waits for them."""

    max_workers: int = 256  # sessions one host accepts at once
    max_envs_per_worker: int = 4096  # envs one worker may step in one message
    # The first spec builds the model, so these bound its size: a spec's num_actions (the policy head) and
    # elements of one agent's observation (the torso's input; 2^20 is e.g. 512 x 512 x 4).
    max_num_actions: int = 1 << 16
    max_observation_elements: int = 1 << 20  # elements of one agent's observation (see above)
    attach_timeout_s: float = 60.0  # a handshaken session with no stream after this is dropped
    # A stream whose worker sends no StepBatch (or reads no ActionBatch) for this long is ended with
    # DEADLINE_EXCEEDED and its session closed; 0 waits forever. Counts worker time only, never the host's.
    stream_idle_timeout_s: float = 300.0

    def __post_init__(self):
        problems = [f"{name} must be >= 1, got {getattr(self, name)}" for name in _COUNTS if getattr(self, name) < 1]
        if not self.attach_timeout_s > 0:
            problems.append(f"attach_timeout_s must be > 0, got {self.attach_timeout_s}")
        if not (self.stream_idle_timeout_s >= 0 and math.isfinite(self.stream_idle_timeout_s)):
            problems.append(f"stream_idle_timeout_s must be >= 0 s (0: no deadline), got {self.stream_idle_timeout_s}")
        if problems:
            raise ValueError("bad session limits: " + "; ".join(problems))


def check_spec(spec: NamedEnvSpec, limits: SessionLimits) -> None:
    """Refuse with RESOURCE_EXHAUSTED, before a model is built for it, a spec with too many actions or too
    large an observation (e.g. 2^40 elements): the heads' action counts and continuous dimensions, summed,
    and the elements of every named tensor, summed. Env and worker counts are checked when the session opens
    (`SessionRegistry.open`), message sizes by gRPC."""
    outputs = sum(h.num_actions if isinstance(h, DiscreteHead) else h.size for h in spec.action.heads)
    if outputs > limits.max_num_actions:
        raise ProtocolError(
            RESOURCE_EXHAUSTED,
            f"worker declares {outputs} actions (all heads' actions and continuous dimensions); this host allows "
            f"at most {limits.max_num_actions} (SessionLimits.max_num_actions)",
        )
    elements = sum(math.prod(shape) for shape, _ in spec.observation.arrays().values())
    if elements > limits.max_observation_elements:
        raise ProtocolError(
            RESOURCE_EXHAUSTED,
            f"worker declares observations of {elements} elements in all tensors; this host allows at most "
            f"{limits.max_observation_elements} per agent (SessionLimits.max_observation_elements)",
        )


def check_capacity(spec: NamedEnvSpec, limits: SessionLimits, open_sessions: int) -> None:
    """Refuse with RESOURCE_EXHAUSTED a worker with more envs than one worker may step, or one more
    worker than the host serves (`open_sessions` are open now)."""
    if spec.num_envs > limits.max_envs_per_worker:
        raise ProtocolError(
            RESOURCE_EXHAUSTED,
            f"worker declares {spec.num_envs} envs; this host allows at most {limits.max_envs_per_worker} per worker "
            "(SessionLimits.max_envs_per_worker): start more workers with fewer envs each",
        )
    if open_sessions >= limits.max_workers:
        raise ProtocolError(RESOURCE_EXHAUSTED, f"host already serves its limit of {limits.max_workers} workers")
