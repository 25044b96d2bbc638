"""Named observation and action specs: named tensors in, named action heads out.

This file owns what a named (protocol v2) agent sees and does, as the learner
needs to know it: an `ObservationSpec` is a tuple of named tensors, an `ActionSpec`
a tuple of named heads, each discrete (n actions, optional legal mask) or
continuous (a float32 Box with finite low/high bounds). The flat shape, one
observation tensor and one discrete action (what protocol v1 carries, and what
the flat model of seedleague.rl.networks takes), is the special case
`flat_specs(...)`:

    observation_spec = ObservationSpec((
        TensorSpec("vector", (32,), np.float32),
        TensorSpec("screen", (84, 84, 4), np.uint8),
        TensorSpec("entities", (16, 8), np.float32, masked=True),  # carries "entities/mask" bool[16]
    ))
    action_spec = ActionSpec((DiscreteHead("move", 5, has_legal_mask=True),
                              ContinuousHead("aim", low=(-1.0, -1.0), high=(1.0, 1.0))))
    observation_spec.arrays()  # {"vector": ((32,), float32), ..., "entities/mask": ((16,), bool)}

A batch of observations is a dict over `observation_spec.arrays()` (each name's
array with leading batch axes); a batch of actions a dict over the head names:
int32 [...] for a discrete head, float32 [..., d] for a continuous one.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Union

import numpy as np

# Names may not contain "/": the mask of a masked tensor is carried as "<name>/mask", which
# therefore never collides with a tensor's own name.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\Z")
MASK_SUFFIX = "/mask"


def mask_key(name: str) -> str:
    """The key under which the entity mask of masked tensor `name` travels."""
    return name + MASK_SUFFIX


def _check_name(kind: str, name: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"{kind} name {name!r} must match {_NAME.pattern} (letters, digits, _ . -; no '/')")


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """One named observation tensor of one agent.

    masked: the tensor is a list of entities [N, F] (N slots of F features) whose
        valid slots a bool mask [N] marks; the mask travels as `mask_key(name)`.
        Masked-out slots must not change the network's output.
    """

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    masked: bool = False

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype))
        _check_name("observation tensor", self.name)
        if any(d <= 0 for d in self.shape):
            raise ValueError(f"observation tensor {self.name!r}: shape {self.shape} has a dimension <= 0")
        if not (np.issubdtype(self.dtype, np.number) or self.dtype == bool):
            raise ValueError(f"observation tensor {self.name!r}: dtype must be numeric or bool, got {self.dtype}")
        if self.masked and len(self.shape) != 2:
            raise ValueError(f"observation tensor {self.name!r} is masked, so it must be an entity list [N, F]; "
                             f"got shape {self.shape} (set masked=False, or reshape to [N, F])")


@dataclasses.dataclass(frozen=True)
class ObservationSpec:
    """The named tensors one agent observes, in a fixed order (the network concatenates in this order)."""

    tensors: tuple[TensorSpec, ...]

    def __post_init__(self):
        object.__setattr__(self, "tensors", tuple(self.tensors))
        if not self.tensors:
            raise ValueError("an ObservationSpec needs at least one tensor")
        names = [t.name for t in self.tensors]
        if len(set(names)) != len(names):
            raise ValueError(f"observation tensor names must be unique, got {names}")

    def arrays(self) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        """Every array an observation carries, masks included: key -> (shape, dtype)."""
        out = {}
        for t in self.tensors:
            out[t.name] = (t.shape, t.dtype)
            if t.masked:
                out[mask_key(t.name)] = ((t.shape[0],), np.dtype(bool))
        return out

    def zeros(self, batch_shape: tuple[int, ...]) -> dict[str, np.ndarray]:
        """An all-zero observation batch (every mask all true): a template for init and tests."""
        return {key: (np.ones if dtype == bool else np.zeros)(tuple(batch_shape) + shape, dtype)
                for key, (shape, dtype) in self.arrays().items()}


@dataclasses.dataclass(frozen=True)
class DiscreteHead:
    """A discrete action head: one of `num_actions`, with a per-step legal mask when `has_legal_mask`."""

    name: str
    num_actions: int
    has_legal_mask: bool = False

    def __post_init__(self):
        _check_name("action head", self.name)
        if not isinstance(self.num_actions, (int, np.integer)) or self.num_actions < 1:
            raise ValueError(f"discrete head {self.name!r}: num_actions must be an int >= 1, got {self.num_actions}")


@dataclasses.dataclass(frozen=True)
class ContinuousHead:
    """A continuous action head: a float32 Box of d = len(low) dimensions with finite bounds low < high."""

    name: str
    low: tuple[float, ...]
    high: tuple[float, ...]

    def __post_init__(self):
        _check_name("action head", self.name)
        low = tuple(float(x) for x in np.atleast_1d(self.low))
        high = tuple(float(x) for x in np.atleast_1d(self.high))
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)
        if len(low) != len(high) or not low:
            raise ValueError(f"continuous head {self.name!r}: low and high must be non-empty and of one length, "
                             f"got {len(low)} and {len(high)}")
        if not all(math.isfinite(x) for x in low + high):
            raise ValueError(f"continuous head {self.name!r}: bounds must be finite, got low={low} high={high}; "
                             "give the Box finite bounds (an unbounded action cannot be squashed or clipped)")
        if not all(lo < hi for lo, hi in zip(low, high)):
            raise ValueError(f"continuous head {self.name!r}: every low must be < high, got low={low} high={high}")
        if not all(np.float32(lo) < np.float32(hi) for lo, hi in zip(low, high)):
            raise ValueError(f"continuous head {self.name!r}: low and high must differ in float32")

    @property
    def size(self) -> int:
        return len(self.low)


ActionHeadSpec = Union[DiscreteHead, ContinuousHead]


@dataclasses.dataclass(frozen=True)
class ActionSpec:
    """The named heads of one agent's action, in a fixed order. Multi-discrete and hybrid actions are several heads."""

    heads: tuple[ActionHeadSpec, ...]

    def __post_init__(self):
        object.__setattr__(self, "heads", tuple(self.heads))
        if not self.heads:
            raise ValueError("an ActionSpec needs at least one head")
        names = [h.name for h in self.heads]
        if len(set(names)) != len(names):
            raise ValueError(f"action head names must be unique, got {names}")
        for head in self.heads:
            if not isinstance(head, (DiscreteHead, ContinuousHead)):
                raise ValueError(f"an action head must be a DiscreteHead or ContinuousHead, got {head!r}")

    @property
    def discrete(self) -> tuple[DiscreteHead, ...]:
        return tuple(h for h in self.heads if isinstance(h, DiscreteHead))


FLAT_OBSERVATION = "observation"
FLAT_ACTION = "action"


def flat_specs(observation_shape: tuple[int, ...], observation_dtype, num_actions: int,
               has_legal_mask: bool = False) -> tuple[ObservationSpec, ActionSpec]:
    """The flat shape (one observation tensor, one discrete action) as named specs: one tensor named
    "observation", one discrete head named "action" (`is_flat_shaped` holds for the result)."""
    return (ObservationSpec((TensorSpec(FLAT_OBSERVATION, observation_shape, observation_dtype),)),
            ActionSpec((DiscreteHead(FLAT_ACTION, int(num_actions), has_legal_mask),)))


def is_flat_shaped(observation_spec: ObservationSpec, action_spec: ActionSpec) -> bool:
    """One unmasked observation tensor and one discrete head: the flat shape, which the flat network and losses
    (seedleague.rl.networks, `Unroll`) handle as they are."""
    return (len(observation_spec.tensors) == 1 and not observation_spec.tensors[0].masked
            and len(action_spec.heads) == 1 and isinstance(action_spec.heads[0], DiscreteHead))
