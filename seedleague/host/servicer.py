"""The EnvService gRPC servicer, both protocol versions: decode, call a plain backend, encode.

The backend is any object with the `EnvBackend` methods: the training host
(learning, or serving a checkpoint with `learn=False`) and the fake host (random
actions) all plug in here, so every one of them speaks the protocol through this
one code path. It serves seedleague.v1.EnvService and seedleague.v2.EnvService
on the same server. Backends see one representation, v2's named tensors and heads
(`seedleague.protocol.named`): a v1 session's spec, steps and answers pass through v1's adapter in
`codec` (one tensor "observation", one head "action"). A session's version is that
of the service it handshook on, and its stream must use the same service; the
servicer, which alone knows the service, holds sessions to it.

Hostile input stops here too: bytes that are no valid message get
INVALID_ARGUMENT, a spec over the backend's `SessionLimits` is refused before
the backend sees it, echoed client strings are clipped, and a stream whose
worker goes quiet for `stream_idle_timeout_s` is ended with DEADLINE_EXCEEDED.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from types import ModuleType
from typing import Any, Awaitable, Callable, Optional, Protocol, TypeVar

import grpc

from seedleague.host.session_limits import SessionLimits, check_spec
from seedleague.protocol import codec, codec_v2
from seedleague.protocol.errors import FAILED_PRECONDITION, INVALID_ARGUMENT, ProtocolError
from seedleague.protocol.specs import PROTOCOL_VERSION
from seedleague.protocol.named import PROTOCOL_VERSION_V2, NamedActionBatch, NamedEnvSpec, NamedStepBatch
from seedleague.v1 import env_pb2
from seedleague.v2 import env_pb2 as env_pb2_v2

log = logging.getLogger(__name__)

SERVICE_NAME = env_pb2.DESCRIPTOR.services_by_name["EnvService"].full_name
SERVICE_NAME_V2 = env_pb2_v2.DESCRIPTOR.services_by_name["EnvService"].full_name
SERVICE_NAMES = [SERVICE_NAME, SERVICE_NAME_V2]  # what a host that speaks both versions serves (health, reflection)


@dataclasses.dataclass(frozen=True)
class _Version:
    """One protocol version as the servicer sees it: its messages and its codec."""

    number: int
    service: str
    pb: ModuleType
    decode_spec: Callable[[Any], Any]
    decode_step: Callable[[Any], Any]
    encode_actions: Callable[[Any], Any]


_V1 = _Version(PROTOCOL_VERSION, SERVICE_NAME, env_pb2, codec.decode_named_spec, codec.decode_named_step,
               codec.encode_named_actions)
_V2 = _Version(PROTOCOL_VERSION_V2, SERVICE_NAME_V2, env_pb2_v2, codec_v2.decode_spec, codec_v2.decode_step,
               codec_v2.encode_actions)
MAX_WORKER_NAME_CHARS = 256  # longer worker names are cut (they only appear in logs)
MAX_UNSTREAMED_SESSIONS = 4096  # handshaken sessions whose version the servicer remembers until their stream opens
DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"

T = TypeVar("T")


class EnvBackend(Protocol):
    """What the servicer needs from a host. Raise ProtocolError to refuse input.

    A backend with `config.limits` (a SessionLimits, as the training host has) is held to those
    limits; any other to the default SessionLimits. A backend with an `opened_on(session_id, version)`
    method (the fake hosts, which report it) is told each session's protocol version after its handshake."""

    max_message_bytes: int

    def open_session(self, spec: NamedEnvSpec, worker_name: str) -> str:
        """Check `spec` against the model and return a new session id."""

    def attach(self, session_id: str) -> None:
        """Bind a stream to a session; unknown or already-streaming ids are refused."""

    async def step(self, step: NamedStepBatch) -> NamedActionBatch:
        """Check `step`, choose actions for it (one array per head) and record the transition."""

    def close_session(self, session_id: str, reason: str) -> None:
        """Forget the session; its partial trajectories are dropped."""


class EnvServicer:
    """Thin adapter between protobuf messages and an EnvBackend."""

    def __init__(self, backend: EnvBackend):
        self._backend = backend
        self._draining = False  # set by drain: each stream ends with UNAVAILABLE at its next message
        self._open_streams = 0
        self._versions: dict[str, int] = {}  # session id -> protocol version it handshook on, until it streams
        limits = getattr(getattr(backend, "config", None), "limits", None)
        self._limits = limits if isinstance(limits, SessionLimits) else SessionLimits()

    def register(self, server: grpc.aio.Server) -> None:
        """As the generated `add_EnvServiceServicer_to_server`, for both versions' services, with lenient request
        parsers."""
        for version in (_V1, _V2):
            handlers = {
                "Handshake": grpc.unary_unary_rpc_method_handler(
                    functools.partial(self._handshake, version),
                    request_deserializer=codec.lenient_parser(version.pb.HandshakeRequest),
                    response_serializer=version.pb.HandshakeResponse.SerializeToString,
                ),
                "Stream": grpc.stream_stream_rpc_method_handler(
                    functools.partial(self._stream, version),
                    request_deserializer=codec.lenient_parser(version.pb.StepBatch),
                    response_serializer=version.pb.ActionBatch.SerializeToString,
                ),
            }
            server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(version.service, handlers),))
            server.add_registered_method_handlers(version.service, handlers)

    async def Handshake(self, request: env_pb2.HandshakeRequest, context) -> env_pb2.HandshakeResponse:
        """v1's Handshake (the generated servicer's name)."""
        return await self._handshake(_V1, request, context)

    async def Stream(self, request_iterator, context) -> None:
        """v1's Stream (the generated servicer's name)."""
        await self._stream(_V1, request_iterator, context)

    async def _handshake(self, version: _Version, request, context):
        worker_name = ""
        try:
            request = codec.check_parsed(request)
            worker_name = request.worker_name[:MAX_WORKER_NAME_CHARS]
            if request.protocol_version != version.number:
                raise ProtocolError(
                    FAILED_PRECONDITION,
                    f"worker speaks protocol version {request.protocol_version} on {version.service}, which is "
                    f"version {version.number}; this host speaks {PROTOCOL_VERSION} ({SERVICE_NAME}) and "
                    f"{PROTOCOL_VERSION_V2} ({SERVICE_NAME_V2})",
                )
            if not request.HasField("spec"):
                raise ProtocolError(INVALID_ARGUMENT, "handshake has no env spec")
            spec = version.decode_spec(request.spec)
            check_spec(spec, self._limits)
            session_id = self._backend.open_session(spec, worker_name)
            self._remember(session_id, version.number)
            if hasattr(self._backend, "opened_on"):
                self._backend.opened_on(session_id, version.number)
        except ProtocolError as error:
            details = codec.clip(error.message)
            log.warning("refused handshake from %r: %s", worker_name, details)
            await context.abort(grpc.StatusCode[error.code], details)
        return version.pb.HandshakeResponse(
            session_id=session_id,
            protocol_version=version.number,
            max_message_bytes=self._backend.max_message_bytes,
        )

    async def _stream(self, version: _Version, request_iterator, context) -> None:
        """Lockstep: read a StepBatch, answer one ActionBatch, until the worker ends the stream.

        A plain coroutine over context.read/write rather than an async generator,
        so the session is closed however the stream ends (error, cancel, shutdown,
        idle deadline).
        """
        session_id, reason = None, "stream ended"
        self._open_streams += 1
        idle = _IdleDeadline(self._limits.stream_idle_timeout_s)
        try:
            while (message := await idle.wait(context.read(), "sent no StepBatch")) is not grpc.aio.EOF:
                if self._draining:
                    reason = "the host is stopping"
                    await context.abort(grpc.StatusCode.UNAVAILABLE, "the host is stopping; reconnect to its next run")
                step = version.decode_step(codec.check_parsed(message))
                if session_id is None:
                    self._check_version(step.session_id, version.number)
                    self._backend.attach(step.session_id)
                    session_id = step.session_id
                elif step.session_id != session_id:
                    raise ProtocolError(
                        INVALID_ARGUMENT, f"stream belongs to session {session_id!r}, message names {step.session_id!r}"
                    )
                actions = await self._backend.step(step)
                await idle.wait(context.write(version.encode_actions(actions)), "read no ActionBatch")
        except ProtocolError as error:
            details = codec.clip(error.message)
            reason = f"{error.code}: {details}"
            log.warning("ending stream of session %s: %s", codec.clip(repr(session_id), 64), reason,
                        extra={"field": error.field})
            await context.abort(grpc.StatusCode[error.code], details)
        except asyncio.CancelledError:  # the worker went away; the RPC is over, nothing to answer
            reason = "cancelled"
        finally:
            idle.close()
            self._open_streams -= 1
            if session_id is not None:
                self._backend.close_session(session_id, reason)

    def _remember(self, session_id: str, version: int) -> None:
        if len(self._versions) >= MAX_UNSTREAMED_SESSIONS:  # the oldest never streamed: the backend expires it
            del self._versions[next(iter(self._versions))]
        self._versions[session_id] = version

    def _check_version(self, session_id: str, version: int) -> None:
        """Refuse (FAILED_PRECONDITION: handshake again) a stream on one version's service for a session
        handshaken on the other's."""
        opened = self._versions.pop(session_id, version)
        if opened != version:
            raise ProtocolError(FAILED_PRECONDITION, f"session was opened with protocol version {opened} but "
                                f"streams version {version}: handshake and stream on the same version's service")

    async def drain(self, timeout_s: float) -> None:
        """End every open stream with UNAVAILABLE at its worker's next message (a worker reconnects on it),
        waiting up to `timeout_s` for them: then stopping the server cancels no call in flight, which
        grpc would print as a CancelledError traceback."""
        self._draining = True
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self._open_streams and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)


class _IdleDeadline:
    """A stream's idle deadline (`SessionLimits.stream_idle_timeout_s`; 0: none): `wait` raises
    DEADLINE_EXCEEDED once the worker has been quiet that long. It counts only time spent waiting on
    the worker, never the host's.

    One timer per stream, re-armed only when it fires, rather than an `asyncio.timeout` per wait, which
    made and cancelled two timers per message (the profile: benchmarks/README.md, "The host ceiling")."""

    def __init__(self, timeout_s: float):
        self._timeout = timeout_s
        self._waiting_since: Optional[float] = None  # loop time the current wait on the worker began
        self._expired = False
        self._task = asyncio.current_task()
        self._loop = asyncio.get_running_loop()
        self._timer = self._loop.call_at(self._loop.time() + timeout_s, self._check) if timeout_s else None

    async def wait(self, waiting: Awaitable[T], what: str) -> T:
        """`waiting`'s result, or ProtocolError(DEADLINE_EXCEEDED) if the worker `what` for the timeout."""
        if self._timer is None:
            return await waiting
        self._waiting_since = self._loop.time()
        try:
            return await waiting
        except asyncio.CancelledError:
            if not self._expired:
                raise
            self._task.uncancel()
            raise ProtocolError(
                DEADLINE_EXCEEDED,
                f"worker {what} for {self._timeout:g} s (SessionLimits.stream_idle_timeout_s): session closed, "
                "handshake again",
            ) from None
        finally:
            self._waiting_since = None

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _check(self) -> None:
        """Timer callback: cancel the stream's task if its current wait has lasted the timeout, else re-arm
        for the moment it would (or a full timeout from now, while the host has the step)."""
        since = self._waiting_since
        now = self._loop.time()
        if since is not None and now - since >= self._timeout:
            self._expired, self._timer = True, None
            self._task.cancel()
            return
        self._timer = self._loop.call_at((now if since is None else since) + self._timeout, self._check)
