"""The EnvService gRPC servicer: decode, call a plain backend, encode.

The backend is any object with the `EnvBackend` methods: the training host, the
fake host (random actions) and later the serving host all plug in here, so every
one of them speaks the protocol through this one code path.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

import grpc

from seedleague.protocol import codec
from seedleague.protocol.errors import FAILED_PRECONDITION, INVALID_ARGUMENT, ProtocolError
from seedleague.protocol.specs import PROTOCOL_VERSION, ActionBatch, EnvSpec, StepBatch
from seedleague.v1 import env_pb2, env_pb2_grpc

log = logging.getLogger(__name__)

SERVICE_NAME = env_pb2.DESCRIPTOR.services_by_name["EnvService"].full_name


class EnvBackend(Protocol):
    """What the servicer needs from a host. Raise ProtocolError to refuse input."""

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

    def register(self, server: grpc.aio.Server) -> None:
        env_pb2_grpc.add_EnvServiceServicer_to_server(self, server)

    async def Handshake(self, request: env_pb2.HandshakeRequest, context) -> env_pb2.HandshakeResponse:
        try:
            if request.protocol_version != PROTOCOL_VERSION:
                raise ProtocolError(
                    FAILED_PRECONDITION,
                    f"worker speaks protocol version {request.protocol_version}, host speaks {PROTOCOL_VERSION}",
                )
            if not request.HasField("spec"):
                raise ProtocolError(INVALID_ARGUMENT, "handshake has no env spec")
            spec = codec.decode_spec(request.spec)
            session_id = self._backend.open_session(spec, request.worker_name)
        except ProtocolError as error:
            log.warning("refused handshake from %r: %s", request.worker_name, error.message)
            await context.abort(grpc.StatusCode[error.code], error.message)
        return env_pb2.HandshakeResponse(
            session_id=session_id,
            protocol_version=PROTOCOL_VERSION,
            max_message_bytes=self._backend.max_message_bytes,
        )

    async def Stream(self, request_iterator, context) -> None:
        """Lockstep: read a StepBatch, answer one ActionBatch, until the worker ends the stream.

        A plain coroutine over context.read/write rather than an async generator,
        so the session is closed however the stream ends (error, cancel, shutdown).
        """
        session_id, reason = None, "stream ended"
        try:
            while (message := await context.read()) is not grpc.aio.EOF:
                step = codec.decode_step(message)
                if session_id is None:
                    self._backend.attach(step.session_id)
                    session_id = step.session_id
                elif step.session_id != session_id:
                    raise ProtocolError(
                        INVALID_ARGUMENT, f"stream belongs to session {session_id!r}, message names {step.session_id!r}"
                    )
                actions = await self._backend.step(step)
                await context.write(codec.encode_actions(actions))
        except ProtocolError as error:
            reason = f"{error.code}: {error.message}"
            log.warning("ending stream of session %r: %s", session_id, reason)
            await context.abort(grpc.StatusCode[error.code], error.message)
        except asyncio.CancelledError:  # the worker went away; the RPC is over, nothing to answer
            reason = "cancelled"
        finally:
            if session_id is not None:
                self._backend.close_session(session_id, reason)
