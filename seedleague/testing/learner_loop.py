"""Neighbours of a `seedleague.host.learner_loop.LearnerLoop` under test: batches the test makes ready, a policy
that takes published params, metrics that keep every update's values, and a small train state."""

from __future__ import annotations

import collections
import threading
from typing import Any, NamedTuple

from seedleague.metrics import Metrics


class LoopState(NamedTuple):
    """A train state with what the loop reads: params and a step."""

    params: Any
    step: Any


class ReadyBatches:
    """The replay's interface over batches the test puts: a fresh batch is there only once the test puts it."""

    def __init__(self):
        self._fresh: collections.deque = collections.deque()
        self._ready = threading.Condition()
        self.closed = False

    def put(self, *batches) -> None:
        """Make `batches` ready at once, in order."""
        with self._ready:
            self._fresh.extend(batches)
            self._ready.notify_all()

    def sample(self, timeout=None):
        with self._ready:
            if not self._ready.wait_for(lambda: self._fresh, timeout or 0):
                return None
            return self._fresh.popleft()

    def close(self) -> None:
        self.closed = True


class TakesParams:
    """An inference policy that takes published params and does nothing with them."""

    def publish(self, params, version) -> None:
        pass


class RecordingMetrics(Metrics):
    """Metrics that also keep each update's values in order; `wait_for(n)` returns once there are n."""

    def __init__(self):
        super().__init__()
        self.updates: list[dict[str, float]] = []
        self._changed = threading.Condition()

    def record_learner_step(self, **values) -> None:
        super().record_learner_step(**values)
        with self._changed:
            self.updates.append(values)
            self._changed.notify_all()

    def wait_for(self, count: int, timeout: float = 60) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.updates) >= count, timeout=timeout):
                raise AssertionError(f"{len(self.updates)} updates in {timeout:g} s, expected {count}: {self.updates}")
