"""The states a frozen output played in a best response's games, and its policy there: a fixed-size uniform sample.

A best response's host seats the output's networks (a mixture's members, drawn per game by weight) against its
learner; every forward pass of theirs passes here (`add`), on the batcher thread. Reservoir sampling (Vitter 1985,
algorithm R, as NFSP keeps its supervised buffer) holds a uniform sample of every state seen so far in fixed memory;
`save` writes it for seedleague.artifacts.distill to fit one network that plays as the mixture does:

    samples = OutputSamples(capacity=100_000, rng=np.random.default_rng(0))
    samples.add(observation, legal, logits)       # the output's acting rows of one batch
    samples.save(path)                            # observation, legal, probs (.npz)
"""

from __future__ import annotations

import os

import numpy as np

from seedleague.artifacts.distill import Samples
from seedleague.storage import storage_error

FILE = "output_samples.npz"  # in the best response's run directory
MAX_BYTES = 1 << 28  # the sample's memory: rows of large observations (images) are kept fewer, not bigger


def masked_probs(logits: np.ndarray, legal: np.ndarray) -> np.ndarray:
    """Softmax over the legal actions of each row (illegal exactly 0), in float32."""
    shifted = np.where(legal, logits, -np.inf)
    shifted = shifted - shifted.max(axis=-1, keepdims=True)
    weights = np.exp(shifted)
    return (weights / weights.sum(axis=-1, keepdims=True)).astype(np.float32)


class OutputSamples:
    """A uniform sample of at most `capacity` (observation, legal, probs) rows of every row `add` was given, and of no
    more rows than fit in `max_bytes` (the first `add` sets the row's size)."""

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

    def add(self, observation: np.ndarray, legal: np.ndarray, logits: np.ndarray) -> None:
        """Rows [R, ...], [R, A] bool, [R, A] of the output's networks acting."""
        rows = dict(observation=np.asarray(observation), legal=np.asarray(legal, bool),
                    probs=masked_probs(np.asarray(logits, np.float32), np.asarray(legal, bool)))
        count = len(rows["observation"])
        if not self._columns and count:
            row_bytes = sum(x[0].nbytes for x in rows.values())
            self.capacity = max(1, min(self.capacity, self.max_bytes // row_bytes))
            self._columns = {name: np.zeros((self.capacity,) + x.shape[1:], x.dtype) for name, x in rows.items()}
        # Row i of the stream (0-based) goes to slot i while the reservoir fills, then to a slot drawn uniformly
        # from [0, i] and is kept only where that slot is < capacity: every row seen stays with equal probability.
        index = self.seen + np.arange(count)
        slots = np.where(index < self.capacity, index, self._rng.integers(0, index + 1))
        kept = slots < self.capacity
        for name, x in rows.items():
            self._columns[name][slots[kept]] = x[kept]
        self.seen += count

    def save(self, path: str) -> None:
        """The sample as an .npz (observation, legal, probs, seen), written whole or not at all; a StorageError
        naming the path and the fix where the disk refuses it."""
        size = len(self)
        columns = {name: x[:size] for name, x in self._columns.items()}
        partial = path + ".partial"
        try:
            with open(partial, "wb") as f:
                np.savez(f, seen=np.asarray(self.seen), **columns)
            os.replace(partial, path)
        except OSError as error:
            if os.path.exists(partial):
                os.unlink(partial)
            raise storage_error(error, path, "the output's recorded play") from None


def load(path: str):
    """The samples `OutputSamples.save` wrote, as seedleague.artifacts.distill.Samples."""
    with np.load(path) as data:
        return Samples(data["observation"], data["legal"], data["probs"])
