"""SessionLimits: how many workers and envs one host accepts, and how long it waits for them.

Kept apart from seedleague.host.sessions, which turns workers' steps into jax arrays, so that building the command
line (`seedleague train --help`, a refused flag) needs no jax.
"""

from __future__ import annotations

import dataclasses
import math


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
