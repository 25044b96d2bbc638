"""The states of a population's evaluation games and every member's policy there: a fixed-size uniform sample.

In the evaluation games (seedleague.host.population) every acting row is scored by every member, and each row
carries each member's own reach of it so far. That is all it takes to know, at the row's state, how any mixture of
the members plays as one behaviour policy (Heinrich, Lanctot & Silver 2015, Theorem 7):

    pi(a | s) = sum_k w_k rho_k(s) pi_k(a | s) / sum_k w_k rho_k(s)

for weights w decided later (the meta-game's Nash, one mix per seat). `add` keeps a uniform sample of the rows
(reservoir sampling: Vitter 1985, algorithm R) in fixed memory, on the batcher thread; `save` writes it, and
`load(...).behaviour(seat_weights)` gives the samples seedleague.artifacts.distill fits one network to:

    samples = MoveSamples(capacity=100_000, rng=np.random.default_rng(0))
    samples.add(observation, legal, log_pi, log_reach, seat)   # [n, ...], [n, A], [K, n, A], [n, K], [n]
    samples.save(path)
    load(path).behaviour([[0.0, 0.7, 0.3], [0.5, 0.5, 0.0]])   # distill.Samples: the mixture's policy at each row

A network of named tensors and heads (protocol v2) gives its observation as {tensor: [n, ...]} and its legal masks
and log-policies as {head: ...}: every head's policy at a row is mixed by the same weights w_k rho_k(s), which gives
each head's marginal of the mixture's joint action (the heads of one network act independently given the state).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np

from seedleague.artifacts.distill import Samples
from seedleague.storage import storage_error

FILE = "population_samples.npz"  # in the evaluation games' run directory
MAX_BYTES = 1 << 28  # the sample's memory: rows of large observations (images) are kept fewer, not bigger


class MoveSamples:
    """A uniform sample of at most `capacity` rows of every row `add` was given, and of no more rows than fit in
    `max_bytes` (the first `add` sets the row's size)."""

    def __init__(self, capacity: int, rng: np.random.Generator, max_bytes: int = MAX_BYTES):
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.seen = 0
        self._rng = rng
        self._columns: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return min(self.seen, self.capacity)

    def add(self, observation: Any, legal: Any, log_pi: Any, log_reach: np.ndarray, seat: np.ndarray) -> None:
        """n acting rows: observation [n, ...], legal [n, A], every member's log-policy [K, n, A] (-inf off the
        legal actions), every member's log reach of the row before its move [n, K], the row's seat [n]; a named
        network's observation is a dict of tensors and its legal masks and log-policies dicts of heads."""
        per_member = {f"log_pi{suffix}": x for suffix, x in _columns(log_pi).items()}
        per_row = {**{f"observation{suffix}": x for suffix, x in _columns(observation).items()},
                   **{f"legal{suffix}": x for suffix, x in _columns(legal).items()},
                   "log_reach": np.asarray(log_reach), "seat": np.asarray(seat)}
        count = len(per_row["seat"])
        if not count:
            return
        if not self._columns:  # the first rows set the row's size, and with it the memory's cap
            shapes = {name: (x.shape[1:], _DTYPES.get(name.split(":")[0], x.dtype)) for name, x in per_row.items()}
            shapes.update({name: ((x.shape[0],) + x.shape[2:], np.float32) for name, x in per_member.items()})
            row_bytes = sum(int(np.prod(shape)) * np.dtype(dtype).itemsize for shape, dtype in shapes.values())
            self.capacity = max(1, min(self.capacity, self.max_bytes // row_bytes))
            self._columns = {name: np.zeros((self.capacity,) + shape, dtype) for name, (shape, dtype) in shapes.items()}
        # Row i of the stream (0-based) goes to slot i while the reservoir fills, then to a slot drawn uniformly
        # from [0, i] and is kept only where that slot is < capacity: every row seen stays with equal probability.
        # Only the kept rows are converted: once the reservoir is full, most of a batch is not.
        index = self.seen + np.arange(count)
        slots = np.where(index < self.capacity, index, self._rng.integers(0, index + 1))
        kept = np.flatnonzero(slots < self.capacity)
        rows = {name: np.asarray(x)[kept] for name, x in per_row.items()}
        rows.update({name: np.moveaxis(np.asarray(x)[:, kept], 0, 1) for name, x in per_member.items()})
        for name, x in rows.items():
            self._columns[name][slots[kept]] = x  # cast to the column's dtype on assignment
        self.seen += count

    def save(self, path: str) -> None:
        """The sample as an .npz, written whole or not at all; a StorageError naming the path and the fix where
        the disk refuses it."""
        size = len(self)
        partial = path + ".partial"
        try:
            with open(partial, "wb") as f:
                np.savez(f, seen=np.asarray(self.seen), **{name: x[:size] for name, x in self._columns.items()})
            os.replace(partial, path)
        except OSError as error:
            if os.path.exists(partial):
                os.unlink(partial)
            raise storage_error(error, path, "the evaluation games' recorded moves") from None


@dataclasses.dataclass(frozen=True)
class RecordedMoves:
    """What `MoveSamples.save` wrote: the rows, each member's policy and reach there, and the row's seat (a named
    network's observation a dict of tensors, its legal masks and log-policies dicts of heads)."""

    observation: Any  # [N, ...], or {tensor: [N, ...]}
    legal: Any  # [N, A] bool, or {head: [N, A]}
    log_pi: Any  # [N, K, A], or {head: [N, K, A]}
    log_reach: np.ndarray  # [N, K]
    seat: np.ndarray  # [N]

    def __len__(self) -> int:
        return len(self.seat)

    def behaviour(self, seat_weights) -> Samples:
        """The rows with the policy of the mixture that plays member k with weight seat_weights[seat][k] for a
        whole game ([seats, K], each row summing to 1), as distill.Samples; ValueError where the weights do not
        fit the members."""
        weights = np.asarray(seat_weights, np.float64)
        members = self.log_reach.shape[1]
        if weights.ndim != 2 or weights.shape[1] != members or (self.seat >= len(weights)).any():
            seats = sorted(set(self.seat.tolist()))
            raise ValueError(f"the recorded moves score {members} members in seats {seats}, and the mixture's "
                             f"weights are shaped {weights.shape}: give one row of {members} per seat")
        log_w = np.log(np.where(weights > 0, weights, 1.0)) + np.where(weights > 0, 0.0, -np.inf)
        log_joint = log_w[self.seat] + self.log_reach  # [N, K]: log(w_k rho_k(s)), up to the row's common factor
        joint = np.exp(log_joint - log_joint.max(axis=1, keepdims=True))

        def mixed(log_pi: np.ndarray, legal: np.ndarray) -> np.ndarray:
            probs = np.where(legal, np.einsum("nk,nka->na", joint, np.exp(log_pi.astype(np.float64))), 0.0)
            return (probs / probs.sum(axis=1, keepdims=True)).astype(np.float32)

        if isinstance(self.log_pi, dict):
            probs = {head: mixed(log_pi, self.legal[head]) for head, log_pi in self.log_pi.items()}
        else:
            probs = mixed(self.log_pi, self.legal)
        return Samples(self.observation, self.legal, probs)


_DTYPES = {"legal": bool, "log_reach": np.float32, "seat": np.int8}  # the stored columns' types, by field


def _columns(tree: Any) -> dict[str, np.ndarray]:
    """{"": array} for an array, {":<name>": array} for each entry of a dict: the suffixes of a field's columns."""
    if isinstance(tree, dict):
        return {f":{name}": np.asarray(x) for name, x in tree.items()}
    return {"": np.asarray(tree)}


def _field(data, field: str) -> Any:
    """A stored field: its one column, or the dict of its named columns."""
    if field in data:
        return data[field]
    prefix = field + ":"
    return {name[len(prefix):]: data[name] for name in data if name.startswith(prefix)}


def load(path: str) -> RecordedMoves:
    with np.load(path) as data:
        files = {name: data[name] for name in data.files}
    return RecordedMoves(*(_field(files, field) for field in ("observation", "legal", "log_pi", "log_reach", "seat")))
