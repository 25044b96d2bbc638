"""A worker binary's env spec, read before the host exists.

`seedleague train --worker-cmd CMD` with no --env knows nothing of the game until a
worker says what it is. `probe_spec` starts the first worker against a probe server
that reads its handshake (the `EnvSpec`), answers UNAVAILABLE ("the host is
starting"), and stops the worker; the run's settings then come from that spec
(`presets.preset_for_spec`) and the real workers start against the real host.

    spec = probe_spec(workers, "127.0.0.1", log_dir, security)

A worker that exits before its handshake, or does not handshake in time, ends the
run with `WorkerRefused`, whose message carries the end of the worker's log.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time

from launch.local import ADDRESS_ENV, REFUSED_STATUS, WorkerProcesses, WorkerRefused, WorkerSpec, log_tail
from seedleague.grpc_server import ThreadedServer
from seedleague.host import servicer
from seedleague.host.servicer import SERVICE_NAME, EnvServicer
from seedleague.protocol.errors import FAILED_PRECONDITION, UNAVAILABLE, ProtocolError
from seedleague.protocol.specs import ActionBatch, EnvSpec, StepBatch
from seedleague.security import ServerSecurity

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
        self.spec: EnvSpec | None = None
        self.worker_name = ""
        self.received = threading.Event()

    def open_session(self, spec: EnvSpec, worker_name: str) -> str:
        if self.spec is None:
            self.spec, self.worker_name = spec, worker_name
            self.received.set()
        # UNAVAILABLE means "reconnect" (docs/protocol.md section 6): the worker retries, then is stopped.
        raise ProtocolError(UNAVAILABLE, _STARTING)

    def attach(self, session_id: str) -> None:
        raise ProtocolError(FAILED_PRECONDITION, "the host is starting: handshake again")

    async def step(self, step: StepBatch) -> ActionBatch:
        raise ProtocolError(FAILED_PRECONDITION, "the host is starting: handshake again")

    def close_session(self, session_id: str, reason: str) -> None:
        pass


def probe_spec(workers: WorkerSpec, bind_host: str, log_dir: str, security: ServerSecurity = ServerSecurity(),
               timeout_s: float = 60.0) -> EnvSpec:
    """Start worker 0 of `workers` against a probe on `bind_host` (a free port); its handshake's spec.

    Raises WorkerRefused if the worker exits first (status 2: it refuses its game) or sends no
    handshake within `timeout_s`; either way the message ends with the tail of its log."""
    backend = SpecProbe()
    server = ThreadedServer(f"{bind_host}:0", lambda: [EnvServicer(backend).register], [SERVICE_NAME],
                            backend.max_message_bytes, security, thread_name="seedleague-spec-probe")
    quiet, servicer_log = _QuietProbe(), logging.getLogger(servicer.__name__)
    servicer_log.addFilter(quiet)
    server.start()
    first = WorkerProcesses(dataclasses.replace(workers, count=1, max_restarts=0), server.address, log_dir, security)
    try:
        first.start()
        process = first.process(0)
        deadline = time.monotonic() + timeout_s
        while not backend.received.wait(0.05):
            if process.poll() is not None:
                why = ("refused to go on" if process.returncode == REFUSED_STATUS
                       else "exited before its handshake")
                raise WorkerRefused(f"worker 0 {why} (exit status {process.returncode}); the end of its log "
                                    f"{first.log_path(0)}:\n{log_tail(first.log_path(0))}")
            if time.monotonic() > deadline:
                raise WorkerRefused(
                    f"worker 0 sent no handshake within {timeout_s:g} s to {server.address}: does its command pass "
                    f"the host's address as {{address}} (or read ${ADDRESS_ENV})? The end of its log "
                    f"{first.log_path(0)}:\n{log_tail(first.log_path(0))}")
    finally:
        first.stop()
        server.stop(grace=0)
        servicer_log.removeFilter(quiet)
    return backend.spec
