"""The EnvService gRPC servicer: decode, call a plain backend, encode.

The backend is any object with the `EnvBackend` methods: the training host
(learning, or serving a checkpoint with `learn=False`) and the fake host (random
actions) all plug in here, so every one of them speaks the protocol through this
one code path.

Hostile input stops here too: bytes that are no valid message get
INVALID_ARGUMENT, a spec over the backend's `SessionLimits` is refused before
the backend sees it, echoed client strings are clipped, and a stream whose
worker goes quiet for `stream_idle_timeout_s` is ended with DEADLINE_EXCEEDED.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Protocol, TypeVar

import grpc

from seedleague.host.sessions import SessionLimits, check_spec
from seedleague.protocol import codec
from seedleague.protocol.errors import FAILED_PRECONDITION, INVALID_ARGUMENT, ProtocolError
from seedleague.protocol.specs import PROTOCOL_VERSION, ActionBatch, EnvSpec, StepBatch
from seedleague.v1 import env_pb2, env_pb2_grpc

log = logging.getLogger(__name__)

SERVICE_NAME = env_pb2.DESCRIPTOR.services_by_name["EnvService"].full_name
MAX_WORKER_NAME_CHARS = 256  # longer worker names are cut (they only appear in logs)
DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"

T = TypeVar("T")


class EnvBackend(Protocol):
    """What the servicer needs from a host. Raise ProtocolError to refuse input.

    A backend with `config.limits` (a SessionLimits, as the training host has) is held to those
    limits; any other to the default SessionLimits."""

    max_message_bytes: int

    def open_session(self, spec: EnvSpec, worker_name: str) -> str:
        """Check `spec` against the model and return a new session id."""

    def attach(self, session_id: str) -> None:
        """Bind a stream to a session; unknown or already-streaming ids are refused."""

    async def step(self, step: StepBatch) -> ActionBatch:
        """Check `step`, choose actions for it and record the transition."""

    def close_session(self, session_id: str, reason: str) -> None:
        """Forget the session; its partial trajectories are dropped."""


class EnvServicer(env_pb2_grpc.EnvServiceServicer):
    """Thin adapter between protobuf messages and an EnvBackend."""

    def __init__(self, backend: EnvBackend):
        self._backend = backend
        self._draining = False  # set by drain: each stream ends with UNAVAILABLE at its next message
        self._open_streams = 0
        limits = getattr(getattr(backend, "config", None), "limits", None)
        self._limits = limits if isinstance(limits, SessionLimits) else SessionLimits()

    def register(self, server: grpc.aio.Server) -> None:
        """As the generated `add_EnvServiceServicer_to_server`, but with lenient request parsers."""
        handlers = {
            "Handshake": grpc.unary_unary_rpc_method_handler(
                self.Handshake,
                request_deserializer=codec.lenient_parser(env_pb2.HandshakeRequest),
                response_serializer=env_pb2.HandshakeResponse.SerializeToString,
            ),
            "Stream": grpc.stream_stream_rpc_method_handler(
                self.Stream,
                request_deserializer=codec.lenient_parser(env_pb2.StepBatch),
                response_serializer=env_pb2.ActionBatch.SerializeToString,
            ),
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
        server.add_registered_method_handlers(SERVICE_NAME, handlers)

    async def Handshake(self, request: env_pb2.HandshakeRequest, context) -> env_pb2.HandshakeResponse:
        worker_name = ""
        try:
            request = codec.check_parsed(request)
            worker_name = request.worker_name[:MAX_WORKER_NAME_CHARS]
            if request.protocol_version != PROTOCOL_VERSION:
                raise ProtocolError(
                    FAILED_PRECONDITION,
                    f"worker speaks protocol version {request.protocol_version}, host speaks {PROTOCOL_VERSION}",
                )
            if not request.HasField("spec"):
                raise ProtocolError(INVALID_ARGUMENT, "handshake has no env spec")
            spec = codec.decode_spec(request.spec)
            check_spec(spec, self._limits)
            session_id = self._backend.open_session(spec, worker_name)
        except ProtocolError as error:
            details = codec.clip(error.message)
            log.warning("refused handshake from %r: %s", worker_name, details)
            await context.abort(grpc.StatusCode[error.code], details)
        return env_pb2.HandshakeResponse(
            session_id=session_id,
            protocol_version=PROTOCOL_VERSION,
            max_message_bytes=self._backend.max_message_bytes,
        )

    async def Stream(self, request_iterator, context) -> None:
        """Lockstep: read a StepBatch, answer one ActionBatch, until the worker ends the stream.

        A plain coroutine over context.read/write rather than an async generator,
        so the session is closed however the stream ends (error, cancel, shutdown,
        idle deadline).
        """
        session_id, reason = None, "stream ended"
        self._open_streams += 1
        try:
            while (message := await self._idle(context.read(), "sent no StepBatch")) is not grpc.aio.EOF:
                if self._draining:
                    reason = "the host is stopping"
                    await context.abort(grpc.StatusCode.UNAVAILABLE, "the host is stopping; reconnect to its next run")
                step = codec.decode_step(codec.check_parsed(message))
                if session_id is None:
                    self._backend.attach(step.session_id)
                    session_id = step.session_id
                elif step.session_id != session_id:
                    raise ProtocolError(
                        INVALID_ARGUMENT, f"stream belongs to session {session_id!r}, message names {step.session_id!r}"
                    )
                actions = await self._backend.step(step)
                await self._idle(context.write(codec.encode_actions(actions)), "read no ActionBatch")
        except ProtocolError as error:
            details = codec.clip(error.message)
            reason = f"{error.code}: {details}"
            log.warning("ending stream of session %s: %s", codec.clip(repr(session_id), 64), reason)
            await context.abort(grpc.StatusCode[error.code], details)
        except asyncio.CancelledError:  # the worker went away; the RPC is over, nothing to answer
            reason = "cancelled"
        finally:
            self._open_streams -= 1
            if session_id is not None:
                self._backend.close_session(session_id, reason)

    async def drain(self, timeout_s: float) -> None:
        """End every open stream with UNAVAILABLE at its worker's next message (a worker reconnects on it),
        waiting up to `timeout_s` for them: then stopping the server cancels no call in flight, which
        grpc would print as a CancelledError traceback."""
        self._draining = True
        deadline = asyncio.get_running_loop().time() + timeout_s
        while self._open_streams and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)

    async def _idle(self, waiting: Awaitable[T], what: str) -> T:
        """`waiting`'s result, or DEADLINE_EXCEEDED once the worker has been quiet for the idle timeout."""
        timeout = self._limits.stream_idle_timeout_s
        if not timeout:
            return await waiting
        try:
            async with asyncio.timeout(timeout):  # no extra task per message, unlike wait_for
                return await waiting
        except TimeoutError:
            raise ProtocolError(
                DEADLINE_EXCEEDED,
                f"worker {what} for {timeout:g} s (SessionLimits.stream_idle_timeout_s): session closed, "
                "handshake again",
            ) from None
