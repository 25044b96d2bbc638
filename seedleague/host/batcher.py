"""Dynamic batching: groups pending requests into one forward pass.

A batch runs as soon as every attached worker has a request waiting (each
worker is in lockstep, so none will send more), when it reaches the size limit,
or when `timeout_ms` has passed since its first request arrived; whichever comes
first. SEED only runs full batches; Acme pads partial ones after a timeout; this
does both and never waits for a worker that is not there. The batcher owns
grouping and timing only; `run_batch` (supplied by the host) does the work.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from typing import Any, Callable, Optional

from seedleague.buckets import power_of_two

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class BatcherConfig:
    """When a partial batch runs, and how large a batch may grow."""

    max_batch_size: int = 4096  # agents in one forward pass
    timeout_ms: float = 5.0  # a partial batch runs this long after its first request
    min_bucket: int = 8  # batches are padded to powers of two from here (bounds XLA recompiles)

    def __post_init__(self):
        if self.max_batch_size < 1:
            raise ValueError(f"batcher max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.timeout_ms < 0:
            raise ValueError(f"batcher timeout_ms must be >= 0, got {self.timeout_ms}")
        if self.min_bucket < 1:
            raise ValueError(f"batcher min_bucket must be >= 1, got {self.min_bucket}")

    def bucket(self, size: int) -> int:
        """The padded size for a batch of `size` agents."""
        return max(self.min_bucket, power_of_two(size))


@dataclasses.dataclass
class Request:
    """One worker's step waiting for inference."""

    size: int  # agents
    payload: Any
    arrived: float = dataclasses.field(default_factory=time.perf_counter)


class Batcher:
    """A thread that forms batches from `submit`ted requests and hands them to `run_batch`."""

    def __init__(
        self,
        config: BatcherConfig,
        run_batch: Callable[[list[Request]], None],
        expected_requests: Callable[[], int],
    ):
        self.config = config
        self._run_batch = run_batch
        self._expected = expected_requests
        self._queue: "queue.SimpleQueue[Request]" = queue.SimpleQueue()
        self._held: Optional[Request] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="batcher", daemon=True)
        self.batches = 0
        self.timeouts = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def submit(self, request: Request) -> None:
        if request.size > self.config.max_batch_size:
            raise ValueError(f"request of {request.size} agents exceeds max_batch_size {self.config.max_batch_size}")
        self._queue.put(request)

    def next_batch(self, wait_s: float = 0.1) -> list[Request]:
        """Block until a batch is due; [] if nothing arrived within `wait_s`."""
        first = self._held or self._get(wait_s)
        self._held = None
        if first is None:
            return []
        batch, size = [first], first.size
        deadline = first.arrived + self.config.timeout_ms / 1000
        while len(batch) < self._expected():
            request = self._get(deadline - time.perf_counter())
            if request is None:
                self.timeouts += 1
                break
            if size + request.size > self.config.max_batch_size:
                self._held = request
                break
            batch.append(request)
            size += request.size
        return batch

    def _get(self, timeout: float) -> Optional[Request]:
        try:
            return self._queue.get(timeout=max(0.0, timeout)) if timeout > 0 else self._queue.get_nowait()
        except queue.Empty:
            return None

    def _loop(self) -> None:
        while not self._stop.is_set():
            batch = self.next_batch()
            if not batch:
                continue
            self.batches += 1
            try:
                self._run_batch(batch)
            except Exception:  # a bug in run_batch must not silently stop inference for everyone
                log.exception("inference batch failed")
