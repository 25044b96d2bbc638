"""The learner thread: sample from replay, update, publish params, checkpoint.

The maths lives in seedleague.rl.learner (`update(state, batch) -> (state,
metrics)`); this module only drives it, times the waits, and hands fresh params
to inference after every update.
"""

from __future__ import annotations

import concurrent.futures
import logging
import queue
import threading
import time
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp

from seedleague.checkpoint import Checkpointer
from seedleague.host.policy import InferencePolicy
from seedleague.host.replay import Replay
from seedleague.metrics import Metrics

log = logging.getLogger(__name__)


class LearnerLoop:
    """Runs `update` on replay batches in a thread until stopped."""

    def __init__(
        self,
        update: Callable,
        state: Any,
        replay: Replay,
        policy: InferencePolicy,
        metrics: Metrics,
        checkpointer: Optional[Checkpointer] = None,
        checkpoint_interval_s: float = 60.0,
        checkpoint_meta: Callable[[], dict] = dict,
    ):
        self._update = update
        self.state = state
        self._step = int(state.step)
        self._replay = replay
        self._policy = policy
        self._metrics = metrics
        self._checkpointer = checkpointer
        self._interval = checkpoint_interval_s
        self._meta = checkpoint_meta
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="learner", daemon=True)
        self._state_lock = threading.Lock()
        self._calls: "queue.SimpleQueue[tuple[Callable, concurrent.futures.Future]]" = queue.SimpleQueue()
        self.error: Optional[BaseException] = None

    @property
    def step(self) -> int:
        """Updates so far, readable from any thread (the state itself is donated by each update)."""
        return self._step

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop after the current update and write a final checkpoint."""
        self._stop.set()
        self._replay.close()
        self._thread.join(timeout=60)
        self.save()

    def call(self, fn: Callable[[Any], Any], timeout: float = 60.0) -> Any:
        """Run `fn(state)` on the learner thread between two updates and return what it returns.

        If `fn` returns a TrainState, it becomes the learner's state and its params are
        published (e.g. an exploiter reset to its initial params); return None to only
        read the state (e.g. to save a snapshot). Raises TimeoutError if the learner
        does not get to it in time (stopped or failed).
        """
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._calls.put((fn, future))
        return future.result(timeout)

    def _run_calls(self) -> None:
        while True:
            try:
                fn, future = self._calls.get_nowait()
            except queue.Empty:
                return
            try:
                with self._state_lock:
                    new_state = fn(self.state)
                    if new_state is not None:
                        self.state = new_state
                        self._policy.publish(jax.tree.map(jnp.copy, new_state.params), int(new_state.step))
                future.set_result(None if new_state is None else int(new_state.step))
            except BaseException as error:
                future.set_exception(error)

    def save(self) -> None:
        if self._checkpointer is not None:
            with self._state_lock:
                self._checkpointer.save(int(self.state.step), self.state, self._meta())

    def _run(self) -> None:
        last_save = time.monotonic()
        try:
            while not self._stop.is_set() and not self._replay.closed:
                self._run_calls()
                waited = time.perf_counter()
                batch = self._replay.sample(timeout=0.5)
                if batch is None:
                    continue
                started = time.perf_counter()
                with self._state_lock:
                    self.state, metrics = self._update(self.state, batch)
                    params = jax.tree.map(jnp.copy, self.state.params)  # the next update donates the state
                    version = int(self.state.step)
                self._step = version
                self._policy.publish(params, version)
                metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
                done = time.perf_counter()
                metrics.update(sample_wait_ms=1000 * (started - waited), update_ms=1000 * (done - started))
                self._metrics.record_learner_step(**metrics)
                if self._checkpointer is not None and time.monotonic() - last_save > self._interval:
                    self.save()
                    last_save = time.monotonic()
        except BaseException as error:  # surfaced by the host, which stops the run
            log.exception("learner failed")
            self.error = error
