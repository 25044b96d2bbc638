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
"""

from __future__ import annotations

import dataclasses
import os

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

    def add(self, observation: np.ndarray, legal: np.ndarray, log_pi: np.ndarray, log_reach: np.ndarray,
            seat: np.ndarray) -> None:
        """n acting rows: observation [n, ...], legal [n, A], every member's log-policy [K, n, A] (-inf off the
        legal actions), every member's log reach of the row before its move [n, K], the row's seat [n]."""
        observation, log_pi = np.asarray(observation), np.asarray(log_pi)
        count = len(observation)
        if not count:
            return
        if not self._columns:  # the first rows set the row's size, and with it the memory's cap
            members, actions = log_pi.shape[0], log_pi.shape[2]
            shapes = dict(observation=(observation.shape[1:], observation.dtype), legal=((actions,), bool),
                          log_pi=((members, actions), np.float32), log_reach=((members,), np.float32),
                          seat=((), np.int8))
            row_bytes = sum(int(np.prod(shape)) * np.dtype(dtype).itemsize for shape, dtype in shapes.values())
            self.capacity = max(1, min(self.capacity, self.max_bytes // row_bytes))
            self._columns = {name: np.zeros((self.capacity,) + shape, dtype) for name, (shape, dtype) in shapes.items()}
        # Row i of the stream (0-based) goes to slot i while the reservoir fills, then to a slot drawn uniformly
        # from [0, i] and is kept only where that slot is < capacity: every row seen stays with equal probability.
        # Only the kept rows are converted: once the reservoir is full, most of a batch is not.
        index = self.seen + np.arange(count)
        slots = np.where(index < self.capacity, index, self._rng.integers(0, index + 1))
        kept = np.flatnonzero(slots < self.capacity)
        rows = dict(observation=observation[kept], legal=np.asarray(legal, bool)[kept],
                    log_pi=np.moveaxis(log_pi[:, kept], 0, 1), log_reach=np.asarray(log_reach)[kept],
                    seat=np.asarray(seat)[kept])
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
    """What `MoveSamples.save` wrote: the rows, each member's policy and reach there, and the row's seat."""

    observation: np.ndarray  # [N, ...]
    legal: np.ndarray  # [N, A] bool
    log_pi: np.ndarray  # [N, K, A]
    log_reach: np.ndarray  # [N, K]
    seat: np.ndarray  # [N]

    def __len__(self) -> int:
        return len(self.observation)

    def behaviour(self, seat_weights) -> Samples:
        """The rows with the policy of the mixture that plays member k with weight seat_weights[seat][k] for a
        whole game ([seats, K], each row summing to 1), as distill.Samples; ValueError where the weights do not
        fit the members."""
        weights = np.asarray(seat_weights, np.float64)
        members = self.log_pi.shape[1]
        if weights.ndim != 2 or weights.shape[1] != members or (self.seat >= len(weights)).any():
            seats = sorted(set(self.seat.tolist()))
            raise ValueError(f"the recorded moves score {members} members in seats {seats}, and the mixture's "
                             f"weights are shaped {weights.shape}: give one row of {members} per seat")
        log_w = np.log(np.where(weights > 0, weights, 1.0)) + np.where(weights > 0, 0.0, -np.inf)
        log_joint = log_w[self.seat] + self.log_reach  # [N, K]: log(w_k rho_k(s)), up to the row's common factor
        joint = np.exp(log_joint - log_joint.max(axis=1, keepdims=True))
        probs = np.einsum("nk,nka->na", joint, np.exp(self.log_pi.astype(np.float64)))
        probs = np.where(self.legal, probs, 0.0)
        return Samples(self.observation, self.legal, (probs / probs.sum(axis=1, keepdims=True)).astype(np.float32))


def load(path: str) -> RecordedMoves:
    with np.load(path) as data:
        return RecordedMoves(data["observation"], data["legal"], data["log_pi"], data["log_reach"], data["seat"])
