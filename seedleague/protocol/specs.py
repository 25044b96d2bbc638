"""What a worker steps and what one step carries, as plain dataclasses.

`EnvSpec` is fixed by the handshake; `StepBatch` and `ActionBatch` are one
message each way on the stream. `check_step` enforces that a decoded step fits
its session's spec (shapes, dtypes, finite values, usable legal masks).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from seedleague.protocol.errors import INVALID_ARGUMENT, ProtocolError

PROTOCOL_VERSION = 1

# Most dimensions of any tensor on the wire (numpy's own limit is 32 on 1.x, 64 on 2.x);
# an observation has two fewer, the env and seat dimensions coming first.
MAX_RANK = 32


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """One worker's envs: observation and action space per agent, envs and seats."""

    env_name: str
    observation_shape: tuple[int, ...]
    observation_dtype: np.dtype
    num_actions: int
    num_envs: int
    num_seats: int = 1
    has_legal_mask: bool = False
    return_bound: float = 0.0  # largest |return| of one seat in one episode; 0: not declared (see `return_bound_problem`)

    def __post_init__(self):
        object.__setattr__(self, "observation_shape", tuple(int(d) for d in self.observation_shape))
        object.__setattr__(self, "observation_dtype", np.dtype(self.observation_dtype))
        problems = []
        if any(d <= 0 for d in self.observation_shape):
            problems.append(f"observation shape {self.observation_shape} has a dimension <= 0")
        if len(self.observation_shape) > MAX_RANK - 2:
            problems.append(f"observation shape has {len(self.observation_shape)} dimensions, at most {MAX_RANK - 2}")
        if self.num_actions < 1:
            problems.append(f"num_actions must be >= 1, got {self.num_actions}")
        if self.num_envs < 1:
            problems.append(f"num_envs must be >= 1, got {self.num_envs}")
        if self.num_seats < 1:
            problems.append(f"num_seats must be >= 1, got {self.num_seats}")
        problems += return_bound_problem(self.return_bound)
        if problems:
            raise ProtocolError(INVALID_ARGUMENT, "bad env spec: " + "; ".join(problems))

    @property
    def num_agents(self) -> int:
        """Agent slots this worker needs on the host: one per (env, seat)."""
        return self.num_envs * self.num_seats


def return_bound_problem(bound: float) -> list[str]:
    """What is wrong with a spec's return_bound (the largest absolute return one seat can get in one episode, 0
    when the game does not declare it), as a list of at most one problem."""
    if np.isfinite(bound) and bound >= 0:
        return []
    return [f"return_bound must be a finite number >= 0 (the largest absolute return of one seat in one episode; "
            f"0 if the game does not know it), got {bound}"]


@dataclasses.dataclass
class StepBatch:
    """One step of all a worker's envs, decoded. See proto/seedleague/v1/env.proto."""

    session_id: str
    sequence: int
    observation: np.ndarray  # [E, S, *obs_shape]
    reward: np.ndarray  # [E, S] float32
    terminated: np.ndarray  # [E] bool
    truncated: np.ndarray  # [E] bool
    legal_mask: Optional[np.ndarray] = None  # [E, S, A] bool
    acting: Optional[np.ndarray] = None  # [E, S] bool


@dataclasses.dataclass
class ActionBatch:
    """The host's answer to one StepBatch."""

    sequence: int
    action: np.ndarray  # [E, S] int32
    policy_version: int


def zero_step(spec: EnvSpec, session_id: str = "", sequence: int = 0, acting: bool = False) -> StepBatch:
    """A StepBatch that fits `spec` exactly: zero observations and rewards, no episode ends,
    every action legal, and (with `acting`) every seat acting. A template for clients and tests."""
    agents = (spec.num_envs, spec.num_seats)
    return StepBatch(
        session_id=session_id,
        sequence=sequence,
        observation=np.zeros(agents + spec.observation_shape, spec.observation_dtype),
        reward=np.zeros(agents, np.float32),
        terminated=np.zeros(spec.num_envs, bool),
        truncated=np.zeros(spec.num_envs, bool),
        legal_mask=np.ones(agents + (spec.num_actions,), bool) if spec.has_legal_mask else None,
        acting=np.ones(agents, bool) if acting else None,
    )


def _expect(name: str, array: Optional[np.ndarray], shape: tuple, dtype: np.dtype) -> None:
    if array is None:
        raise ProtocolError(INVALID_ARGUMENT, f"{name} is missing", name)
    if array.dtype != dtype:
        raise ProtocolError(INVALID_ARGUMENT, f"{name} has dtype {array.dtype}, expected {np.dtype(dtype)}", name)
    if array.shape != shape:
        raise ProtocolError(INVALID_ARGUMENT, f"{name} has shape {array.shape}, expected {shape}", name)


def _expect_finite(name: str, array: np.ndarray) -> None:
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        bad = np.argwhere(~np.isfinite(array))[0].tolist()
        raise ProtocolError(INVALID_ARGUMENT, f"{name} has a non-finite value (NaN or inf) at index {bad}", name)


def check_step(spec: EnvSpec, step: StepBatch) -> None:
    """Raise ProtocolError(INVALID_ARGUMENT) unless `step` fits `spec` exactly."""
    agents = (spec.num_envs, spec.num_seats)
    _expect("observation", step.observation, agents + spec.observation_shape, spec.observation_dtype)
    _expect("reward", step.reward, agents, np.dtype(np.float32))
    _expect("terminated", step.terminated, (spec.num_envs,), np.dtype(bool))
    _expect("truncated", step.truncated, (spec.num_envs,), np.dtype(bool))
    _expect_finite("observation", step.observation)
    _expect_finite("reward", step.reward)
    if step.acting is not None:
        _expect("acting", step.acting, agents, np.dtype(bool))
    if spec.has_legal_mask:
        _expect("legal_mask", step.legal_mask, agents + (spec.num_actions,), np.dtype(bool))
        acting = step.acting if step.acting is not None else np.ones(agents, bool)
        stuck = acting & ~step.legal_mask.any(axis=-1)
        if stuck.any():
            env, seat = np.argwhere(stuck)[0].tolist()
            raise ProtocolError(INVALID_ARGUMENT, f"legal_mask has no legal action for acting env {env} seat {seat}",
                                "legal_mask")
    elif step.legal_mask is not None:
        raise ProtocolError(INVALID_ARGUMENT, "legal_mask sent but the handshake declared has_legal_mask=false",
                            "legal_mask")
