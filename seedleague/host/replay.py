"""On-device replay of unrolls behind a samples-per-insert rate limiter.

The buffer is a pytree of jax arrays [capacity + 1, ...] on one device (the
default one, or this process's first learner device when given the learner's
batch sharding, in which case sampled batches come back split over the learner
mesh: see seedleague.rl.sharding); the extra slot absorbs padding rows so inserts compile for a few bucket sizes
only. On a CPU device, whose memory is the host's, the buffer is numpy arrays [capacity, ...] instead: an insert
is a numpy write, far cheaper than a jitted copy while the learner computes beside it, and a
sample one copy of the gathered batch (benchmarks/README.md, "The host's copies on a CPU").

The rate limiter follows Reverb's SampleToInsertRatio: with
diff = inserts * samples_per_insert - samples, inserts wait while diff would
exceed min_size * spi + error_buffer and samples wait while diff would drop
below min_size * spi - error_buffer. So the learner neither starves nor
replays stale data without bound, and a lagging learner slows inference down.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from seedleague.buckets import power_of_two
from seedleague.host.transfers import Transfers, is_cpu
from seedleague.rl import sharding as sharding_lib
from seedleague.rl.types import Unroll
from seedleague.host.replay_config import ReplayConfig


class RateLimiter:
    """Reverb-style samples-per-insert limiter; callers hold `lock` (a Condition)."""

    def __init__(self, samples_per_insert: float, min_size: int, error_buffer: float):
        self.spi = samples_per_insert
        self.min_size = min_size
        self.min_diff = min_size * samples_per_insert - error_buffer
        self.max_diff = min_size * samples_per_insert + error_buffer
        self.inserts = 0
        self.samples = 0

    @property
    def diff(self) -> float:
        return self.inserts * self.spi - self.samples

    def room(self) -> int:
        """How many items may be inserted now, one at a time as in Reverb."""
        by_ratio = int((self.max_diff - self.diff) / self.spi + 1e-9) if self.diff <= self.max_diff else 0
        return max(by_ratio, self.min_size - self.inserts, 0)

    def can_insert(self, count: int) -> bool:
        return self.room() >= count

    def can_sample(self, count: int, size: int) -> bool:
        return size >= max(self.min_size, 1) and self.diff - count >= self.min_diff - 1e-9


def _insert(on_device, inputs):
    """For `Transfers.call`: the ring `on_device` with `rows` written at `slots`; nothing goes back."""
    (buffer,), (rows, slots) = on_device, inputs
    return (), jax.tree.map(lambda b, r: b.at[slots].set(r), buffer, rows)


@jax.jit
def _gather(buffer, slots):
    return jax.tree.map(lambda b: b[slots], buffer)


class Replay:
    """Thread-safe ring buffer: the host inserts completed unrolls, the learner samples."""

    def __init__(self, config: ReplayConfig, example: Unroll, batch_size: int, seed: int = 0,
                 batch_sharding: Optional[jax.sharding.NamedSharding] = None, in_host_memory: Optional[bool] = None):
        """`batch_sharding` (the learner's, over its mesh): where sampled batches go; None: the default device.
        `in_host_memory`: keep the buffer in numpy arrays (None: exactly when the device is a CPU)."""
        if config.capacity < batch_size:
            raise ValueError(f"replay capacity {config.capacity} is below the learner batch size {batch_size}")
        device = None
        if batch_sharding is not None:
            local = batch_sharding.mesh.local_devices
            if batch_size % len(local):
                raise ValueError(f"batch_size {batch_size} does not split evenly over this process's {len(local)} "
                                 "learner devices: use a multiple of that (--batch-size) or change "
                                 "--devices.learner-devices")
            device = local[0]
            if batch_sharding.mesh.size == 1:
                batch_sharding = None  # batches are gathered on the one learner device already
        self.config = config
        self.batch_size = batch_size
        self._batch_sharding = batch_sharding
        self.in_host_memory = is_cpu(device) if in_host_memory is None else in_host_memory
        slots = config.capacity + (0 if self.in_host_memory else 1)  # on the device, a last slot takes padding rows
        zeros = np.zeros if self.in_host_memory else functools.partial(jnp.zeros, device=device)
        self._buffer = jax.tree.map(lambda x: zeros((slots,) + np.shape(x)[1:], np.asarray(x).dtype), example)
        min_size = config.min_size or batch_size
        self._limiter = RateLimiter(config.samples_per_insert, min_size, config.error_buffer_for(batch_size))
        self._cond = threading.Condition()
        self._rng = np.random.default_rng(seed)
        self.transfers = Transfers(device)  # an insert: one copy of its rows in; a sample: one of its indices
        self._next_slot = 0  # where the next insert goes
        self._size = 0
        self._unread = 0
        self._closed = False
        self.insert_wait_s = 0.0
        self.sample_wait_s = 0.0

    @property
    def size(self) -> int:
        return self._size

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Wake every waiter; later calls return at once."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def insert(self, rows: Unroll, timeout: Optional[float] = None) -> int:
        """Insert complete unrolls (numpy, batch-major) as the rate limiter allows.

        Waits up to `timeout` for room, item by item as Reverb does (so a chunk
        larger than the limiter's slack, or than the ring, cannot deadlock);
        returns how many rows went in: fewer than given only if closed or timed out.
        """
        count = int(np.shape(rows.first)[0])
        done = 0
        deadline = None if timeout is None else time.perf_counter() + timeout
        with self._cond:
            while done < count:
                start = time.perf_counter()
                left = None if deadline is None else max(0.0, deadline - start)
                if not self._cond.wait_for(lambda: self._closed or self._limiter.room() > 0, left) or self._closed:
                    break
                self.insert_wait_s += time.perf_counter() - start
                part = min(count - done, self._limiter.room(), self.config.capacity)
                self._write(jax.tree.map(lambda x: x[done:done + part], rows), part)
                done += part
        return done

    def insert_all(self, rows: Unroll, stopping: Callable[[], bool], poll_s: float = 1.0) -> int:
        """Insert every row, waiting as long as the rate limiter asks (the host's back-pressure on its
        workers), until `stopping()` turns true or the replay closes; returns how many went in."""
        done, count = 0, int(np.shape(rows.first)[0])
        while done < count and not stopping() and not self._closed:
            done += self.insert(jax.tree.map(lambda x: x[done:], rows), timeout=poll_s)
        return done

    def _write(self, rows: Unroll, count: int) -> None:
        """Put `count` rows into the ring; the caller holds the lock and checked the limiter."""
        slots = (self._next_slot + np.arange(count)) % self.config.capacity
        if self.in_host_memory:
            jax.tree.map(lambda buffer, new: buffer.__setitem__(slots, new), self._buffer, rows)
        else:
            padded = power_of_two(count)
            slots = np.concatenate([slots, np.full(padded - count, self.config.capacity)]).astype(np.int32)
            pad = lambda x: np.concatenate([x, np.zeros((padded - count,) + x.shape[1:], x.dtype)])
            _, self._buffer = self.transfers.call(_insert, (self._buffer,), (jax.tree.map(pad, rows), slots),
                                                  donate=True)
        self._next_slot = (self._next_slot + count) % self.config.capacity
        self._size = min(self.config.capacity, self._size + count)
        self._unread = min(self.config.capacity, self._unread + count)
        self._limiter.inserts += count
        self._cond.notify_all()

    def sample(self, timeout: Optional[float] = None) -> Optional[Unroll]:
        """A batch of `batch_size` unrolls as device arrays, or None if closed or timed out."""
        count = self.batch_size
        start = time.perf_counter()
        with self._cond:
            ready = lambda: self._closed or (self._limiter.can_sample(count, self._size) and self._fifo_ready(count))
            if not self._cond.wait_for(ready, timeout) or self._closed:
                return None
            self.sample_wait_s += time.perf_counter() - start
            if self.in_host_memory:  # a numpy copy of the rows, so inserts may overwrite them once the lock is free
                slots = self._pick(count)
                batch = jax.tree.map(lambda buffer: buffer[slots], self._buffer)
            else:
                batch = _gather(self._buffer, self.transfers.to_device(self._pick(count)))
            self._limiter.samples += count
            self._cond.notify_all()
        if self.in_host_memory:
            batch = self.transfers.to_device(batch)
        if self._batch_sharding is not None:
            batch = sharding_lib.shard_batch(batch, self._batch_sharding)
        return batch

    def _fifo_ready(self, count: int) -> bool:
        return self.config.sampler != "fifo" or self._unread >= count

    def _pick(self, count: int) -> np.ndarray:
        if self.config.sampler == "uniform":
            return self._rng.integers(0, self._size, count).astype(np.int32)
        oldest = (self._next_slot - self._unread) % self.config.capacity
        self._unread -= count
        return ((oldest + np.arange(count)) % self.config.capacity).astype(np.int32)
