"""The learner thread: sample from replay, update, publish params, checkpoint.

The maths lives in seedleague.rl.learner (`update(state, batch) -> (state,
metrics)`); this module only drives it, times the waits, and hands fresh params
to inference after every update: a copy on the inference device, since the next
update donates the state. On an accelerator the update's step and metrics (about twenty
scalars) come back as one buffer, packed inside the update's own jitted call
(seedleague.host.packing): one copy to the device (the clock) and one back per update.

Given a multi-process device layout (seedleague.rl.sharding), every process runs
one LearnerLoop and each update is a collective over all of them: before every
update the processes agree (a small all-gather) that each has a batch and none is
stopping, so they update in lockstep and stop together at the same step.

While the replay has no fresh batch, a `DataReuse` (seedleague.host.data_reuse) may hand the loop the newest batch
to train again instead of waiting; every update records whether its batch was reused, and the report turns the
update and wait times into the learner's busy share.

An update whose loss or gradient norm is NaN or inf stops the loop before its params are
published, saved or snapshotted (`NonFiniteUpdate`); a save the disk refuses stops it too
(`seedleague.storage.StorageError`). Either is left in `error` for the host to stop the run
with, without a traceback.
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
import numpy as np

from seedleague.checkpoint import Checkpointer, NonFiniteState
from seedleague.host import packing
from seedleague.host.data_reuse import DataReuse
from seedleague.host.policy import InferencePolicy
from seedleague.host.replay import Replay
from seedleague.host.transfers import Transfers
from seedleague.metrics import Metrics
from seedleague.rl import sharding
from seedleague.rl.kl_step import KLStep
from seedleague.rl.learner import Scales
from seedleague.storage import StorageError

log = logging.getLogger(__name__)

_WATCHED = ("total_loss", "grad_norm")  # an update's metrics that must be finite for its state to be kept


class NonFiniteUpdate(RuntimeError):
    """An update gave a NaN or inf loss or gradient: its state is never published, saved or snapshotted."""


# Faults the loop stops on with one line, not a traceback: the message says what happened and what to do.
_EXPECTED = (NonFiniteUpdate, NonFiniteState, StorageError)


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
        layout: Optional[sharding.DeviceLayout] = None,
        clock: Optional[Callable[[], float]] = None,
        reuse: Optional[DataReuse] = None,
        kl_step: Optional[KLStep] = None,
    ):
        """`layout`: where the state lives and inference acts (None: everything on the default device);
        `clock`: the run's trained seconds, across --resume, for an anneal over time (None: this loop's own);
        `reuse`: trains the newest batch again while no fresh one is ready (None: never; nor with several
        processes, which update in lockstep); `kl_step`: steers the learning rate by each update's measured KL
        (LearnerConfig.step_control "kl"; None: the schedule's rate)."""
        self._update = update
        self.state = state
        self._layout = layout
        self._step = int(sharding.local_value(state.step))
        self._replay = replay
        self._policy = policy
        self._metrics = metrics
        self._checkpointer = checkpointer
        self._interval = checkpoint_interval_s
        self._meta = checkpoint_meta
        self._lockstep = layout is not None and layout.multi_process  # several processes update together
        self._reuse = reuse if reuse is not None and reuse.enabled and not self._lockstep else None
        started = time.perf_counter()
        self._clock = clock or (lambda: time.perf_counter() - started)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="learner", daemon=True)
        self._state_lock = threading.Lock()
        self.transfers = Transfers()  # an update: its clock in, its step and metrics out
        # Packed: the step and metrics leave the update as one buffer (not where a multi-process learner's arrays
        # span processes: each fetches its own replica of each).
        self._packed = self.transfers.packed and not self._lockstep
        self._returned: Optional[packing.Layout] = None  # the packed step and metrics, once traced
        self._calls: "queue.SimpleQueue[tuple[Callable, concurrent.futures.Future]]" = queue.SimpleQueue()
        self._ended = threading.Event()  # the loop has returned: calls fail at once
        self.error: Optional[BaseException] = None
        self._poisoned = False  # the state holds an update with a non-finite loss: nothing may save it
        self._kl_step = kl_step
        self._scales_lock = threading.Lock()  # set_scales (any thread) and the KLStep's factor (this loop's)
        self.set_scales(Scales())

    def set_scales(self, scales: Scales) -> None:
        """Multipliers on the entropy cost, learning rate and kl_cost from the next update on (population-based
        training: seedleague.league.pbt); traced by the update, so no recompile. Any thread. A KLStep's factor
        multiplies the learning rate's on top."""
        with self._scales_lock:
            self.scales = Scales(*(float(v) for v in scales))  # as given, for logs and tests
            self._put_scales()

    def _put_scales(self) -> None:
        """The multipliers the update reads: `scales`, the learning rate's times the KLStep's factor (callers hold
        the scales lock)."""
        factor = self._kl_step.factor if self._kl_step is not None else 1.0
        scales = self.scales._replace(learning_rate=self.scales.learning_rate * factor)
        values = tuple(np.float32(v) for v in scales)
        if self._layout is None:
            values = jax.device_put(values)  # on the device once, not at every update
        elif not self._layout.multi_process:
            values = jax.device_put(values, self._layout.replicated)
        self._scales = Scales(*values)


    @property
    def step(self) -> int:
        """Updates so far, readable from any thread (the state itself is donated by each update)."""
        return self._step

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop after the current update and write a final checkpoint (not after a fault: the error stays in
        `error`, and the newest checkpoint on disk is the one to resume from). Once stopped, a later call does
        nothing."""
        if self._stop.is_set() and not self._thread.is_alive():
            return
        self._stop.set()
        self._replay.close()
        self._thread.join(timeout=60)
        if self.error is not None:
            return
        try:
            self.save()
        except _EXPECTED as error:
            self.error = error

    def call(self, fn: Callable[[Any], Any], timeout: float = 60.0) -> Any:
        """Run `fn(state)` on the learner thread between two updates and return what it returns.

        If `fn` returns a TrainState, it becomes the learner's state and its params are
        published (e.g. an exploiter reset to its initial params); return None to only
        read the state (e.g. to save a snapshot). Raises TimeoutError if the learner
        does not get to it in time (stopped or failed).
        """
        if self._lockstep:
            raise RuntimeError("LearnerLoop.call would change one process's state of a multi-process learner")
        if self._poisoned:  # the thread stopped at a NaN update: nothing may read or save its state
            raise NonFiniteUpdate("the learner stopped at a non-finite update; its state is not used")
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._calls.put((fn, future))
        if self._ended.is_set():  # the loop is over: nothing would run the call (its own exit may have missed it)
            self._fail_calls()
        return future.result(timeout)

    def _fail_calls(self) -> None:
        """Fail every waiting call at once: the loop has ended (the replay closed at the end of a run, a stop, a
        fault), so a caller (a league check-in saving a snapshot) does not wait out its timeout."""
        while True:
            try:
                _, future = self._calls.get_nowait()
            except queue.Empty:
                return
            future.set_exception(TimeoutError("the learner has stopped: nothing runs calls on its thread any more"))

    def _run_calls(self) -> None:
        while True:
            try:
                fn, future = self._calls.get_nowait()
            except queue.Empty:
                return
            try:
                if self._poisoned:
                    raise NonFiniteUpdate("the learner stopped at a non-finite update; its state is not used")
                with self._state_lock:
                    new_state = fn(self.state)
                    if new_state is not None:
                        if self._layout is not None:
                            new_state = jax.device_put(new_state, self._layout.replicated)
                        self.state = new_state
                        if self._reuse is not None:
                            self._reuse.drop()
                        self._policy.publish(self._params_copy(new_state), int(new_state.step))
                future.set_result(None if new_state is None else int(new_state.step))
            except BaseException as error:
                future.set_exception(error)

    def _params_copy(self, state: Any) -> Any:
        """Params inference may keep: the next update donates the state's buffers."""
        if self._layout is None:
            return jax.tree.map(jnp.copy, state.params)
        return sharding.copy_to_device(state.params, self._layout.inference_device)

    def save(self) -> None:
        if self._checkpointer is not None and not self._poisoned:
            with self._state_lock:
                step = int(sharding.local_value(self.state.step))
                self._checkpointer.save(step, sharding.portable(self.state), self._meta())

    def _run(self) -> None:
        last_save = time.monotonic()
        lockstep = self._lockstep
        batch = waited = None  # waited: when the loop began looking for its next batch (timed-out tries included)
        try:
            while lockstep or (not self._stop.is_set() and not self._replay.closed):
                self._run_calls()
                waited = time.perf_counter() if waited is None else waited
                reused = False
                if batch is None and self._reuse is not None:
                    batch = self._replay.sample(timeout=0)
                    if batch is None:
                        batch = self._reuse.again()
                        reused = batch is not None
                if batch is None:
                    batch = self._replay.sample(timeout=0.5)
                save = self._checkpointer is not None and time.monotonic() - last_save > self._interval
                if lockstep:
                    go, stop, save = self._agree(batch is not None, save)
                    if stop:
                        break
                    if not go:
                        continue  # keep this process's batch until every process has one
                if batch is None:
                    continue
                self._learn(batch, waited, reused)
                batch = waited = None
                if save:  # with several processes every one saves the same step (a collective write)
                    self.save()
                    last_save = time.monotonic()
        except _EXPECTED as error:  # surfaced by the host, which stops the run with this one line
            log.info("learner stopped: %s", error)
            self.error = error
        except BaseException as error:  # surfaced by the host, which stops the run
            log.exception("learner failed")
            self.error = error
        finally:
            self._ended.set()
            self._fail_calls()

    def _learn(self, batch: Any, waited: float, reused: bool = False) -> None:
        """One update on `batch` (`reused`: trained before), then publish its params and record its metrics."""
        started = time.perf_counter()
        with self._state_lock:
            clock = self.transfers.to_device(np.float32(self._clock()))
            if self._packed:
                if self._returned is None:
                    state, metrics = jax.eval_shape(self._update, self.state, batch, clock, self._scales)  # traced, not run
                    self._returned = packing.Layout.of_tree((state.step, metrics))
                self.state, buffer = _UPDATE_AND_PACK(self._update, self.state, batch, clock, self._scales)
                params = self._params_copy(self.state)
                step, metrics = self.transfers.fetch_packed(self._returned, buffer, "the learner's update")
            else:
                self.state, metrics = self._update(self.state, batch, clock, self._scales)
                params = self._params_copy(self.state)
                step, metrics = self.transfers.to_host(jax.tree.map(sharding.local_value, (self.state.step, metrics)))
        metrics = {k: float(v) for k, v in metrics.items()}
        self._check_finite(int(step), metrics)
        version = self._step = int(step)
        self._policy.publish(params, version)
        if self._reuse is not None:
            self._reuse.trained(batch, reused, metrics.get("policy_lag"))
        if self._kl_step is not None and "kl" in metrics:
            factor = self._kl_step.factor
            if self._kl_step.observe(metrics["kl"], metrics["entropy_cost"]) != factor:
                with self._scales_lock:
                    self._put_scales()
            metrics["learning_rate_factor"] = self._kl_step.factor
        done = time.perf_counter()
        metrics.update(sample_wait_ms=1000 * (started - waited), update_ms=1000 * (done - started),
                       reused=float(reused))
        self._metrics.record_learner_step(**metrics)

    def _check_finite(self, step: int, metrics: dict[str, float]) -> None:
        """NonFiniteUpdate, with the state marked unusable, when a watched metric of update `step` is NaN or inf."""
        bad = {name: metrics[name] for name in _WATCHED if name in metrics and not np.isfinite(metrics[name])}
        if not bad:
            return
        self._poisoned = True
        latest = self._checkpointer.latest_step() if self._checkpointer is not None else None
        where = (f"the newest checkpoint, {self._checkpointer.directory}/{latest}, is untouched: --resume continues "
                 "from it" if latest is not None else "no checkpoint was saved yet")
        found = ", ".join(f"{name} {value}" for name, value in bad.items())
        raise NonFiniteUpdate(f"the learner's update {step} gave {found}; it was not published, saved or "
                              f"snapshotted, and {where}. Look for huge rewards or observations from the workers; "
                              "if they are sound, the learner diverged: --resume keeps the learner settings saved "
                              "with the run, so start a new --run-dir with a lower --learner.learning-rate")

    def _agree(self, ready: bool, save: bool) -> tuple[bool, bool, bool]:
        """(every process has a batch, some process stops, some process is due to save): one all-gather."""
        from jax.experimental import multihost_utils

        stopping = self._stop.is_set() or self._replay.closed
        flags = np.asarray(multihost_utils.process_allgather(np.array([ready, stopping, save], np.int32)))
        stop = bool(flags[:, 1].any())
        if stop and not stopping:
            peers = np.flatnonzero(flags[:, 1]).tolist()
            log.warning("learner process(es) %s stopped at step %d; this process stops learning too", peers, self._step)
        return bool(flags[:, 0].all()), stop, bool(flags[:, 2].any())


def _update_and_pack(update: Callable, state: Any, batch: Any, clock: jax.Array,
                     scales: Scales) -> tuple[Any, jax.Array]:
    """`update`, with its new step and metrics packed into one byte buffer in the same call."""
    state, metrics = update(state, batch, clock, scales)
    return state, packing.pack((state.step, metrics))

_UPDATE_AND_PACK = jax.jit(_update_and_pack, static_argnums=0, donate_argnums=1)
