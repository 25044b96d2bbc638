"""A worker's env spec, read before the host exists.

`seedleague train --worker-cmd CMD`, and `seedleague host` with no --env, know nothing
of the game until a worker says what it is. A probe server reads the first handshake
(its spec, named tensors and heads whatever the worker's protocol version) and answers
UNAVAILABLE ("the host is starting"); the run's settings then come from that spec
(`presets.preset_for_spec`).

    spec = probe_spec(workers, "127.0.0.1", log_dir, security)   # train: start worker 0, read, stop it
    spec, address = await_spec("0.0.0.0:50051", security)        # host: wait for a worker from anywhere

`probe_spec` stops the worker it started; the real workers start against the real
host. After `await_spec` the real host binds the same address, and the worker, told
UNAVAILABLE, reconnects to it with backoff (docs/protocol.md sections 6 and 7). A
started worker that exits before its handshake, or does not handshake in time, ends
the run with `WorkerRefused`, whose message carries the end of the worker's log.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import signal
import threading

from seedleague.launch.child import ChildExited, ChildNotReady, log_tail
from seedleague.launch.local import REFUSED_STATUS, WorkerProcesses, WorkerRefused, interrupt
from seedleague.launch.run_config import WorkerSpec
from seedleague.grpc_server import ThreadedServer
from seedleague.host import servicer
from seedleague.host.servicer import SERVICE_NAMES, EnvServicer
from seedleague.protocol.errors import FAILED_PRECONDITION, UNAVAILABLE, ProtocolError
from seedleague.protocol.named import NamedActionBatch, NamedEnvSpec, NamedStepBatch
from seedleague.security import ServerSecurity
from seedleague.launch import ADDRESS_ENV

PROBE_MAX_MESSAGE_BYTES = 64 << 20
_STARTING = "the host is starting: it read this worker's spec to choose its settings"


class _QuietProbe(logging.Filter):
    """Drops the servicer's warning for the probe's own, expected, answer to the handshake."""

    def filter(self, record: logging.LogRecord) -> bool:
        return _STARTING not in record.getMessage()


class SpecProbe:
    """An EnvBackend that keeps the first handshake's spec and serves nothing (no session opens)."""

    max_message_bytes = PROBE_MAX_MESSAGE_BYTES

    def __init__(self):
        self.spec: NamedEnvSpec | None = None
        self.worker_name = ""
        self.received = threading.Event()

    def open_session(self, spec: NamedEnvSpec, worker_name: str) -> str:
        if self.spec is None:
            self.spec, self.worker_name = spec, worker_name
            self.received.set()
        # UNAVAILABLE means "reconnect" (docs/protocol.md section 6): the worker retries, then is stopped.
        raise ProtocolError(UNAVAILABLE, _STARTING)

    def attach(self, session_id: str) -> None:
        raise ProtocolError(FAILED_PRECONDITION, "the host is starting: handshake again")

    async def step(self, step: NamedStepBatch) -> NamedActionBatch:
        raise ProtocolError(FAILED_PRECONDITION, "the host is starting: handshake again")

    def close_session(self, session_id: str, reason: str) -> None:
        pass


def _serving(address: str, security: ServerSecurity) -> tuple[ThreadedServer, SpecProbe]:
    backend = SpecProbe()
    server = ThreadedServer(address, lambda: [EnvServicer(backend).register], SERVICE_NAMES,
                            backend.max_message_bytes, security, thread_name="seedleague-spec-probe")
    return server.start(), backend


@contextlib.contextmanager
def _quiet_servicer():
    """The servicer's log without its warning for each of the probe's expected answers."""
    quiet, servicer_log = _QuietProbe(), logging.getLogger(servicer.__name__)
    servicer_log.addFilter(quiet)
    try:
        yield
    finally:
        servicer_log.removeFilter(quiet)


def await_spec(address: str, security: ServerSecurity = ServerSecurity()) -> tuple[NamedEnvSpec, str]:
    """Serve the probe on `address` until a worker handshakes; (its spec, `address` with the bound port).

    Waits as long as it takes (Ctrl-C raises KeyboardInterrupt); the host then serves on the same port."""
    with _quiet_servicer():
        server, backend = _serving(address, security)
        print(f"seedleague host waiting on {server.address} for its first worker, from any machine: that worker's "
              "spec chooses the run's settings (--env chooses them by name instead)", flush=True)
        try:
            while not backend.received.wait(0.2):
                pass
        finally:
            server.stop(grace=0)
    return backend.spec, f"{address.rpartition(':')[0]}:{server.port}"


def probe_spec(workers: WorkerSpec, bind_host: str, log_dir: str, security: ServerSecurity = ServerSecurity(),
               timeout_s: float = 60.0) -> NamedEnvSpec:
    """Start worker 0 of `workers` against a probe on `bind_host` (a free port); its handshake's spec.

    Raises WorkerRefused if the worker exits first (status 2: it refuses its game) or sends no
    handshake within `timeout_s`; either way the message ends with the tail of its log."""
    with _quiet_servicer(), _sigterm_interrupts():
        server, backend = _serving(f"{bind_host}:0", security)
        try:
            return _first_handshake(workers, server, backend, log_dir, security, timeout_s)
        finally:
            server.stop(grace=0)


@contextlib.contextmanager
def _sigterm_interrupts():
    """SIGTERM raises KeyboardInterrupt meanwhile (main thread only), so the started worker is still stopped:
    it runs in a session of its own, which a signal to the launcher does not reach."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _first_handshake(workers: WorkerSpec, server: ThreadedServer, backend: SpecProbe, log_dir: str,
                     security: ServerSecurity, timeout_s: float) -> NamedEnvSpec:
    first = WorkerProcesses(dataclasses.replace(workers, count=1, max_restarts=0), server.address, log_dir, security)
    try:
        first.start()
        child = first.process(0)
        child.wait_until(lambda: True if backend.received.is_set() else None, timeout_s, "its handshake")
    except ChildExited as error:
        why = "refused to go on" if child.returncode == REFUSED_STATUS else "exited before its handshake"
        raise WorkerRefused(f"worker 0 {why} (exit status {child.returncode}); the end of its log "
                            f"{first.log_path(0)}:\n{log_tail(first.log_path(0))}") from error
    except ChildNotReady as error:
        raise WorkerRefused(
            f"worker 0 sent no handshake within {timeout_s:g} s to {server.address}: does its command pass "
            f"the host's address as {{address}} (or read ${ADDRESS_ENV})? The end of its log "
            f"{first.log_path(0)}:\n{log_tail(first.log_path(0))}") from error
    finally:
        first.stop()
    return backend.spec
