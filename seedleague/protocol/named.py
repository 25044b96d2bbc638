"""The one representation of a worker's envs on the host side: named observation tensors and action heads.

This file owns what a session's messages must hold, whichever protocol version carries them: v2's
messages (proto/seedleague/v2/env.proto) as they are, v1's as one tensor "observation" and one
discrete head "action" (seedleague.protocol.codec's adapter). Every backend of the servicer sees
only these types.
A `NamedEnvSpec` names its observation tensors and action heads with the
learner's own spec types (seedleague.rl.named_spec, numpy only), so the host
builds its network from it as it is:

    spec = NamedEnvSpec("Pendulum-v1", ObservationSpec((TensorSpec("obs", (3,), np.float32),)),
                        ActionSpec((ContinuousHead("torque", (-2.0,), (2.0,)),)), num_envs=8)
    check_named_step(spec, step)                # ProtocolError naming the tensor, or None
    check_named_actions(spec, action, acting)   # ProtocolError naming the head, or None

Every array is indexed [env, seat, ...] as in v1. A v1 `EnvSpec` is the special case
`named_of_v1(spec)` and `v1_of_named` goes back when it can: conversions for the wire edge (the codec,
the clients, the worker tools) only. Above it a spec of that shape is `flat_spec(...)`, and `flat_model`
says a spec runs on the flat model.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import numpy as np

from seedleague.protocol.errors import INVALID_ARGUMENT, ProtocolError
from seedleague.protocol.specs import MAX_RANK, EnvSpec, _expect, _expect_finite, return_bound_problem
from seedleague.rl.named_spec import (ActionSpec, ContinuousHead, DiscreteHead, ObservationSpec, TensorSpec,
                                      FLAT_ACTION, FLAT_OBSERVATION, _check_name, flat_specs, is_flat_shaped)

PROTOCOL_VERSION_V2 = 2
MAX_NAMED = 256  # most observation tensors, action heads or episode stats in one spec
MAX_NAME_LENGTH = 64  # longest tensor, head or stat name


def _problems_of(spec: "NamedEnvSpec") -> list[str]:
    problems = []
    for what, count in (("num_envs", spec.num_envs), ("num_seats", spec.num_seats)):
        if count < 1:
            problems.append(f"{what} must be >= 1, got {count}")
    for what, names in (("observation tensors", [t.name for t in spec.observation.tensors]),
                        ("action heads", [h.name for h in spec.action.heads]), ("episode stats", spec.episode_stats)):
        if len(names) > MAX_NAMED:
            problems.append(f"{len(names)} {what}, at most {MAX_NAMED}")
        long = [n for n in names if len(n) > MAX_NAME_LENGTH]
        if long:
            problems.append(f"{what} names longer than {MAX_NAME_LENGTH} chars: {long[:3]}")
    if len(set(spec.episode_stats)) != len(spec.episode_stats):
        problems.append(f"episode stat names must be unique, got {list(spec.episode_stats)}")
    for tensor in spec.observation.tensors:
        if len(tensor.shape) > MAX_RANK - 2:
            problems.append(f"observation tensor {tensor.name!r} has {len(tensor.shape)} dimensions, "
                            f"at most {MAX_RANK - 2}")
    if spec.seat_team:
        if len(spec.seat_team) != spec.num_seats:
            problems.append(f"seat_team has {len(spec.seat_team)} entries for {spec.num_seats} seats "
                            "(give one team per seat, or none)")
        elif sorted(set(spec.seat_team)) != list(range(len(set(spec.seat_team)))):
            problems.append(f"seat_team {list(spec.seat_team)} must number teams 0, 1, ..., T-1, each used")
    return problems + return_bound_problem(spec.return_bound)


@dataclasses.dataclass(frozen=True)
class NamedEnvSpec:
    """One v2 worker's envs: named observation tensors and action heads per agent, envs, seats, stats, teams."""

    env_name: str
    observation: ObservationSpec
    action: ActionSpec
    num_envs: int
    num_seats: int = 1
    episode_stats: tuple[str, ...] = ()
    seat_team: tuple[int, ...] = ()  # team of each seat; () = every seat its own team
    return_bound: float = 0.0  # largest |return| of one seat in one episode; 0: not declared (as v1's)

    def __post_init__(self):
        object.__setattr__(self, "episode_stats", tuple(self.episode_stats))
        object.__setattr__(self, "seat_team", tuple(int(t) for t in self.seat_team))
        try:
            for name in self.episode_stats:
                _check_name("episode stat", name)
        except ValueError as error:
            raise ProtocolError(INVALID_ARGUMENT, f"bad env spec: {error}") from None
        problems = _problems_of(self)
        if problems:
            raise ProtocolError(INVALID_ARGUMENT, "bad env spec: " + "; ".join(problems))

    @property
    def num_agents(self) -> int:
        return self.num_envs * self.num_seats

    @property
    def has_legal_mask(self) -> bool:
        """Some discrete head declares a legal mask (as v1's flag of the same name)."""
        return any(h.has_legal_mask for h in self.action.discrete)

    @property
    def teams(self) -> tuple[int, ...]:
        """Team of each seat (every seat its own team when the spec gives none)."""
        return self.seat_team or tuple(range(self.num_seats))

    @functools.cached_property
    def observation_arrays(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """`observation.arrays()`, computed once: every step is checked against it."""
        return self.observation.arrays()

    @functools.cached_property
    def masked_heads(self) -> tuple[DiscreteHead, ...]:
        """The discrete heads that declare a legal mask, computed once."""
        return tuple(h for h in self.action.discrete if h.has_legal_mask)


def flat_spec(env_name: str, observation_shape: tuple[int, ...], observation_dtype, num_actions: int,
              num_envs: int = 1, num_seats: int = 1, has_legal_mask: bool = False,
              return_bound: float = 0.0) -> NamedEnvSpec:
    """The named spec of the flat model (`flat_model` holds): one tensor "observation", one discrete head "action"."""
    observation, action = flat_specs(tuple(observation_shape), observation_dtype, num_actions, has_legal_mask)
    return NamedEnvSpec(env_name, observation, action, num_envs, num_seats, return_bound=return_bound)


def named_of_v1(spec: EnvSpec) -> NamedEnvSpec:
    """A v1 spec as a v2 one: one tensor "observation", one discrete head "action" (the wire edge's adapter)."""
    return flat_spec(spec.env_name, spec.observation_shape, spec.observation_dtype, spec.num_actions, spec.num_envs,
                     spec.num_seats, spec.has_legal_mask, spec.return_bound)


def v1_of_named(spec: NamedEnvSpec) -> Optional[EnvSpec]:
    """The v1 spec a v2 spec is, when it has the flat shape (one unmasked tensor, one discrete head) and carries
    nothing v1 lacks (stats, teams of more than one seat); else None."""
    teams = spec.seat_team and spec.seat_team != tuple(range(spec.num_seats))  # one seat per team: v1's seats
    if not is_flat_shaped(spec.observation, spec.action) or spec.episode_stats or teams:
        return None
    tensor, head = spec.observation.tensors[0], spec.action.heads[0]
    return EnvSpec(spec.env_name, tensor.shape, tensor.dtype, head.num_actions, spec.num_envs, spec.num_seats,
                   head.has_legal_mask, spec.return_bound)


def flat_model(spec: NamedEnvSpec) -> bool:
    """Whether `spec` runs on the flat model (one observation array in, one categorical out: rl/networks.py,
    `Unroll`): one unmasked tensor and one discrete head, every v1 worker's spec and v2 ones of that shape.
    Anything else builds the named network. The one place this choice is made."""
    return is_flat_shaped(spec.observation, spec.action)


@dataclasses.dataclass
class NamedStepBatch:
    """One step of all a v2 worker's envs, decoded: dicts where v1 has one tensor. See the v2 proto."""

    session_id: str
    sequence: int
    observation: dict  # {key: [E, S, *shape]} over spec.observation.arrays() (masks included)
    reward: np.ndarray  # [E, S] float32
    terminated: np.ndarray  # [E] bool
    truncated: np.ndarray  # [E] bool
    legal_mask: dict = dataclasses.field(default_factory=dict)  # {discrete head with a mask: [E, S, n] bool}
    acting: Optional[np.ndarray] = None  # [E, S] bool
    # {key: [K, S, *shape]} for the K truncated envs; None: a v1 step, whose protocol carries none (the learner
    # then stands V(s_t) in for V(s_final), seedleague.rl.losses.rewards_and_discounts)
    final_observation: Optional[dict] = dataclasses.field(default_factory=dict)
    episode_stats: dict = dataclasses.field(default_factory=dict)  # {stat: [E, S] float32}

    def bootstrapped(self) -> np.ndarray:
        """[E] bool: the envs whose final observation this step carries (truncated and not terminated)."""
        return self.truncated & ~self.terminated


@dataclasses.dataclass
class NamedActionBatch:
    """The host's answer to one v2 StepBatch: {head: [E, S] int32 or [E, S, d] float32}."""

    sequence: int
    action: dict
    policy_version: int


def zero_named_step(spec: NamedEnvSpec, session_id: str = "", sequence: int = 0,
                    acting: bool = False) -> NamedStepBatch:
    """A step that fits `spec` exactly: zero observations (every entity mask true), no episode ends, every
    action legal, zero stats, and (with `acting`) every seat acting. A template for clients and tests."""
    agents = (spec.num_envs, spec.num_seats)
    return NamedStepBatch(
        session_id=session_id, sequence=sequence, observation=spec.observation.zeros(agents),
        reward=np.zeros(agents, np.float32), terminated=np.zeros(spec.num_envs, bool),
        truncated=np.zeros(spec.num_envs, bool),
        legal_mask={h.name: np.ones(agents + (h.num_actions,), bool) for h in spec.action.discrete if h.has_legal_mask},
        acting=np.ones(agents, bool) if acting else None,
        episode_stats={name: np.zeros(agents, np.float32) for name in spec.episode_stats},
    )


def _expect_names(field: str, got: dict, expected) -> None:
    if len(got) == len(expected) and all(k in got for k in expected):
        return
    expected = list(expected)
    missing, extra = [k for k in expected if k not in got], sorted(k for k in got if k not in expected)
    if missing:
        raise ProtocolError(INVALID_ARGUMENT, f"{field} tensor {missing[0]!r} is missing (the spec declares "
                            f"{expected})", f"{field}/{missing[0]}")
    if extra:
        raise ProtocolError(INVALID_ARGUMENT, f"{field} tensor {extra[0]!r} is not in the spec (it declares "
                            f"{expected})", f"{field}/{extra[0]}")


def _expect_arrays(field: str, arrays: dict, spec: NamedEnvSpec, leading: tuple[int, ...]) -> None:
    expected = spec.observation_arrays
    _expect_names(field, arrays, expected)
    for key, (shape, dtype) in expected.items():
        _expect(f"{field}/{key}", arrays[key], leading + shape, dtype)
        _expect_finite(f"{field}/{key}", arrays[key])


def _check_legal(spec: NamedEnvSpec, step: NamedStepBatch, agents: tuple[int, int]) -> None:
    masked = spec.masked_heads
    if not masked:
        if step.legal_mask:
            _expect_names("legal_mask", step.legal_mask, ())
        return
    _expect_names("legal_mask", step.legal_mask, [h.name for h in masked])
    acting = step.acting if step.acting is not None else np.ones(agents, bool)
    for head in masked:
        mask = step.legal_mask[head.name]
        _expect(f"legal_mask/{head.name}", mask, agents + (head.num_actions,), np.dtype(bool))
        stuck = acting & ~mask.any(axis=-1)
        if stuck.any():
            env, seat = np.argwhere(stuck)[0].tolist()
            raise ProtocolError(INVALID_ARGUMENT, f"legal_mask of head {head.name!r} has no legal action for acting "
                                f"env {env} seat {seat}", f"legal_mask/{head.name}")


def _check_final(spec: NamedEnvSpec, step: NamedStepBatch) -> None:
    """The final observations of exactly the envs truncated and not terminated, each fitting the spec."""
    count = int(np.count_nonzero(step.bootstrapped()))
    if count:
        _expect_arrays("final_observation", step.final_observation, spec, (count, spec.num_seats))
    elif step.final_observation:
        name = next(iter(step.final_observation))
        raise ProtocolError(INVALID_ARGUMENT, f"final_observation tensor {name!r} sent but no env is truncated "
                            "(and not terminated) in this step", f"final_observation/{name}")


def check_named_step(spec: NamedEnvSpec, step: NamedStepBatch) -> None:
    """Raise ProtocolError(INVALID_ARGUMENT), its message and `field` naming the tensor, unless `step` fits
    `spec` exactly: every named tensor present, none extra, dtypes, shapes, finite values, usable masks."""
    agents = (spec.num_envs, spec.num_seats)
    _expect_arrays("observation", step.observation, spec, agents)
    _expect("reward", step.reward, agents, np.dtype(np.float32))
    _expect("terminated", step.terminated, (spec.num_envs,), np.dtype(bool))
    _expect("truncated", step.truncated, (spec.num_envs,), np.dtype(bool))
    _expect_finite("reward", step.reward)
    if step.acting is not None:
        _expect("acting", step.acting, agents, np.dtype(bool))
    _check_legal(spec, step, agents)
    if step.final_observation is not None:  # None: a v1 step (its protocol has no final observations)
        _check_final(spec, step)
    _expect_names("episode_stats", step.episode_stats, spec.episode_stats)
    for name in spec.episode_stats:
        _expect(f"episode_stats/{name}", step.episode_stats[name], agents, np.dtype(np.float32))
        _expect_finite(f"episode_stats/{name}", step.episode_stats[name])


def _check_head(head, action: np.ndarray, agents: tuple[int, int], acting: np.ndarray,
                legal: Optional[np.ndarray]) -> None:
    field = f"action/{head.name}"
    if isinstance(head, DiscreteHead):
        _expect(field, action, agents, np.dtype(np.int32))
        chosen = action[acting]
        if chosen.size and (chosen.min() < 0 or chosen.max() >= head.num_actions):
            raise ProtocolError(INVALID_ARGUMENT, f"action head {head.name!r} has an action outside "
                                f"[0, {head.num_actions})", field)
        if legal is not None and chosen.size and not np.take_along_axis(
                legal, action[..., None], -1)[..., 0][acting].all():
            raise ProtocolError(INVALID_ARGUMENT, f"action head {head.name!r} chose an illegal action", field)
        return
    _expect(field, action, agents + (head.size,), np.dtype(np.float32))
    chosen = action[acting]
    if not np.isfinite(chosen).all():
        raise ProtocolError(INVALID_ARGUMENT, f"action head {head.name!r} has a non-finite value", field)
    low, high = np.asarray(head.low, np.float32), np.asarray(head.high, np.float32)
    if chosen.size and ((chosen < low).any() or (chosen > high).any()):
        raise ProtocolError(INVALID_ARGUMENT, f"action head {head.name!r} has a value outside its Box "
                            f"[{list(head.low)}, {list(head.high)}]", field)


def check_named_actions(spec: NamedEnvSpec, action: dict, acting: Optional[np.ndarray] = None,
                        legal_mask: Optional[dict] = None) -> None:
    """Raise ProtocolError(INVALID_ARGUMENT) naming the head unless `action` holds one array per head of the
    spec, none extra, each of its dtype and shape, within bounds (discrete: [0, n) and legal; continuous: finite
    and in [low, high]) at the acting seats."""
    agents = (spec.num_envs, spec.num_seats)
    names = [h.name for h in spec.action.heads]
    if len(action) != len(names):
        raise ProtocolError(INVALID_ARGUMENT, f"{len(action)} action heads, the spec declares {len(names)}: {names}",
                            "action")
    _expect_names("action", action, names)
    acting = np.ones(agents, bool) if acting is None else np.asarray(acting, bool).reshape(agents)
    for head in spec.action.heads:
        _check_head(head, np.asarray(action[head.name]), agents, acting, (legal_mask or {}).get(head.name))


def random_named_actions(rng: np.random.Generator, spec: NamedEnvSpec, legal_mask: dict) -> dict:
    """Uniform actions for every head: legal discrete actions, continuous ones uniform in the Box."""
    agents = (spec.num_envs, spec.num_seats)
    out = {}
    for head in spec.action.heads:
        if isinstance(head, DiscreteHead):
            mask = legal_mask.get(head.name)
            keys = rng.random(agents + (head.num_actions,))
            out[head.name] = (keys if mask is None else np.where(mask, keys, -1.0)).argmax(-1).astype(np.int32)
        else:
            low, high = np.asarray(head.low, np.float32), np.asarray(head.high, np.float32)
            out[head.name] = rng.uniform(low, high, size=agents + (head.size,)).astype(np.float32).clip(low, high)
    return out


__all__ = ["ActionSpec", "ContinuousHead", "DiscreteHead", "ObservationSpec", "TensorSpec", "FLAT_ACTION",
           "FLAT_OBSERVATION", "PROTOCOL_VERSION_V2", "NamedEnvSpec", "NamedStepBatch", "NamedActionBatch",
           "flat_model", "flat_spec", "named_of_v1", "v1_of_named", "zero_named_step", "check_named_step",
           "check_named_actions", "random_named_actions"]
