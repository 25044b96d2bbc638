"""The worker-side SDK: one lockstep gRPC stream from a Python env worker to a host.

A worker describes its envs with an `EnvSpec`, then:

    client = WorkerClient(ClientConfig(address="127.0.0.1:50051"), spec)
    client.connect()                       # handshake + open the stream
    actions = client.step(obs, reward, terminated, truncated)   # [E, S] int32
    ...
    client.close()

With a token-protected or TLS host, pass `ClientConfig(..., security=ClientSecurity(token=..., tls_ca=...))`
(`seedleague.security`): the token rides on every call as `authorization: Bearer` metadata.

Failures surface as two exceptions. `ConnectionLost` is retriable: back off
(`Backoff`), `connect()` again and start fresh episodes in every env. `HostRefused`
means the host rejected this worker's spec or data; retrying would get the same
answer, so the worker should stop and show the host's message.

This module owns the client half of the protocol (handshake, lockstep stream,
error classification, backoff). It imports grpc and numpy only, never jax, so
workers start fast.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import random
import socket
import threading
from typing import Any, Optional

import grpc
import numpy as np

from seedleague.protocol.channel import channel_options
from seedleague.protocol import codec, native_stream
from seedleague.protocol.errors import FAILED_PRECONDITION, INTERNAL, RESOURCE_EXHAUSTED, ProtocolError
from seedleague.protocol.specs import PROTOCOL_VERSION, EnvSpec, zero_step
from seedleague.security import ClientSecurity
from seedleague.v1 import env_pb2, env_pb2_grpc


def default_worker_name() -> str:
    """hostname:pid, the name a worker shows in the host's logs by default."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclasses.dataclass(frozen=True)
class ClientConfig:
    """How a worker reaches its host."""

    address: str  # "host:port" (any gRPC target, e.g. "unix:/tmp/host.sock", also works)
    worker_name: str = dataclasses.field(default_factory=default_worker_name)
    max_message_bytes: int = 64 * 2**20
    backoff_initial_s: float = 0.1
    backoff_max_s: float = 5.0
    connect_timeout_s: float = 10.0  # per attempt, waiting for the channel to be ready
    security: ClientSecurity = ClientSecurity()  # token and TLS; default plaintext, no token
    # Each step's exchange in C++ (seedleague.protocol.native_stream): "auto" where `make native-stream` built it,
    # "on" to require it, "off" for grpcio's stream.
    native_stream: str = "auto"
    native_stream_library: str = ""  # its path; "" for build/native/libseedleague_stream.so in this checkout

    def __post_init__(self):
        problems = []
        if ":" not in self.address:
            problems.append(f"address must be 'host:port', got {self.address!r}")
        if self.max_message_bytes < 1024:
            problems.append(f"max_message_bytes must be >= 1024, got {self.max_message_bytes}")
        if not 0 < self.backoff_initial_s <= self.backoff_max_s:
            problems.append(
                f"need 0 < backoff_initial_s <= backoff_max_s, got {self.backoff_initial_s} and {self.backoff_max_s}"
            )
        if self.connect_timeout_s <= 0:
            problems.append(f"connect_timeout_s must be > 0, got {self.connect_timeout_s}")
        if self.native_stream not in native_stream.MODES:
            problems.append(f"native_stream must be one of {', '.join(native_stream.MODES)}, got {self.native_stream!r}")
        else:
            try:
                native_stream.wanted(self.native_stream, self.native_stream_library)
            except native_stream.NativeStreamUnavailable as error:
                problems.append(str(error))
        if not isinstance(self.security, ClientSecurity):
            problems.append(f"security must be a ClientSecurity, got {type(self.security).__name__}")
        if problems:
            raise ValueError("bad client config: " + "; ".join(problems))


class HostRefused(Exception):
    """The host rejected this worker (bad spec, bad data, version mismatch): do not retry."""

    def __init__(self, code: str, details: str, during: str):
        super().__init__(f"host refused the {during} with {code}: {details}")
        self.code = code
        self.details = details


class ConnectionLost(Exception):
    """The stream or channel broke (host gone, restarted or shutting down): reconnect with backoff."""


class Backoff:
    """Capped exponential backoff with jitter: initial, 2x, 4x, ... up to max_s, each times U(0.5, 1.5)."""

    def __init__(self, initial_s: float, max_s: float, rng: Optional[random.Random] = None):
        self._initial_s = initial_s
        self._max_s = max_s
        self._rng = rng or random.Random()
        self._attempt = 0

    def next(self) -> float:
        """Seconds to wait before the next attempt."""
        base = min(self._max_s, self._initial_s * 2.0**self._attempt)
        self._attempt += 1
        return min(self._max_s, base * self._rng.uniform(0.5, 1.5))

    def reset(self) -> None:
        """Call after a success; the next failure waits `initial_s` again."""
        self._attempt = 0


# Codes that mean "this request will never be accepted", whatever the phase.
_REFUSED = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.ALREADY_EXISTS,
    }
)


# Appended to "not reachable": a TLS mismatch looks like an unreachable host from the client's side.
_TLS_HINT = {
    False: " (if the host serves TLS, pass its CA with --tls-ca)",
    True: " (check that the host serves TLS with a certificate signed by --tls-ca for this address)",
}


def classify_rpc_error(error: grpc.RpcError, during: str) -> Exception:
    """HostRefused or ConnectionLost for a failed call; `during` is "handshake" or "stream".

    FAILED_PRECONDITION refuses a handshake (spec does not fit the model, version
    mismatch) but on the stream it means "unknown or closed session", which is
    what a restarted host answers: handshaking again fixes it.
    """
    code = error.code()
    details = error.details() or ""
    if code == grpc.StatusCode.UNAUTHENTICATED:
        hint = "give this worker the host's token with --token or the SEEDLEAGUE_TOKEN environment variable"
        return HostRefused(code.name, f"{details}; {hint}", during)
    if code in _REFUSED or (code == grpc.StatusCode.FAILED_PRECONDITION and during == "handshake"):
        return HostRefused(code.name, details, during)
    return ConnectionLost(f"{during} failed with {code.name}: {details}")


@dataclasses.dataclass(frozen=True)
class _Slot:
    """One per-step input: its wire dtype and the shapes `step` accepts for it."""

    name: str
    shape: tuple[int, ...]  # [E, S, ...]
    seatless: Optional[tuple[int, ...]]  # [E, ...], accepted when num_seats == 1 (same bytes)
    dtype: np.dtype

    def encode(self, array) -> bytes:
        array = np.asarray(array)
        if array.shape != self.shape and array.shape != self.seatless:
            accepted = f"{self.shape}" + (f" or {self.seatless}" if self.seatless else "")
            raise ValueError(f"{self.name} has shape {array.shape}, expected {accepted}")
        return array.astype(self.dtype, copy=False).tobytes()


def _slots(spec: EnvSpec) -> dict[str, _Slot]:
    agents = (spec.num_envs, spec.num_seats)
    single = spec.num_seats == 1

    def slot(name, shape, dtype, has_seat=True):
        seatless = (spec.num_envs,) + shape[2:] if single and has_seat else None
        return _Slot(name, shape, seatless, np.dtype(dtype).newbyteorder("<"))

    return {
        "observation": slot("observation", agents + spec.observation_shape, spec.observation_dtype),
        "reward": slot("reward", agents, np.float32),
        "terminated": slot("terminated", (spec.num_envs,), bool, has_seat=False),
        "truncated": slot("truncated", (spec.num_envs,), bool, has_seat=False),
        "legal_mask": slot("legal_mask", agents + (spec.num_actions,), bool),
        "acting": slot("acting", agents, bool),
    }


def _template_step(spec: EnvSpec, session_id: str, acting: bool) -> env_pb2.StepBatch:
    """A zero StepBatch with every tensor's dtype and shape set (and its data bytes)."""
    return codec.encode_step(zero_step(spec, session_id, acting=acting))


def _without_data(message: env_pb2.StepBatch) -> env_pb2.StepBatch:
    """`message` with every tensor's data bytes cleared: the dtypes and shapes that each step copies."""
    for name in ("observation", "reward", "terminated", "truncated", "legal_mask", "acting"):
        if message.HasField(name):  # touching an absent one would make it present
            getattr(message, name).data = b""
    return message


class GrpcioStream:
    """grpcio's blocking stream in the shape of `native_stream.NativeStream`: `exchange` a message for the host's
    answer (RpcError on failure, StopIteration if the host ended the stream), `cancel` from any thread."""

    kind = "grpcio stream"

    def __init__(self, stub: Any, metadata: tuple[tuple[str, str], ...]):
        self._pending: "queue.SimpleQueue[Optional[Any]]" = queue.SimpleQueue()
        self._call = stub.Stream(iter(self._pending.get, None), metadata=metadata)  # requests: put, until None

    def exchange(self, message: Any) -> Any:
        self._pending.put(message)
        return next(self._call)

    def cancel(self) -> None:
        self._pending.put(None)
        self._call.cancel()


class WorkerClient:
    """One worker's session with a host: handshake, then lockstep `step` calls.

    Not thread-safe except `close`, which may be called from any thread (e.g. a
    signal watcher) and makes a blocked `connect` or `step` raise ConnectionLost.
    """

    def __init__(self, config: ClientConfig, spec: EnvSpec):
        self.config = config
        self.spec = spec
        self.policy_version = 0
        self.session_id: Optional[str] = None
        self.host_max_message_bytes = 0
        self._slots = self._make_slots(spec)
        self._lock = threading.Lock()
        self._closed = False
        self._channel: Optional[grpc.Channel] = None
        self._ready: Optional[grpc.Future] = None
        self._stream: Optional[GrpcioStream | native_stream.NativeStream] = None  # the open Stream call
        self._template: Optional[env_pb2.StepBatch] = None  # dtypes and shapes of every step's message
        self._sequence = 0

    @staticmethod
    def _make_slots(spec: Any) -> dict:
        return _slots(spec)

    def connect(self) -> None:
        """Handshake and open the stream (dropping any previous one). Raises ConnectionLost or HostRefused."""
        self._teardown()
        channel = self.config.security.channel(self.config.address, self._channel_options())
        with self._lock:
            if self._closed:
                channel.close()
                raise ConnectionLost("client is closed")
            self._channel = channel
        try:
            self._wait_until_ready(channel)
            reply = self._handshake(channel)
            self._open_stream(channel, reply)
        except BaseException:
            self._teardown()
            raise

    @property
    def stream_kind(self) -> str:
        """What carries the open stream's steps: "native stream" or "grpcio stream" ("" before connect)."""
        stream = self._stream
        return "" if stream is None else stream.kind

    def step(
        self,
        observation: np.ndarray,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        legal_mask: Optional[np.ndarray] = None,
        acting: Optional[np.ndarray] = None,
    ) -> np.ndarray:
        """Send one step of every env and return the host's actions, [E, S] int32 (read-only).

        Shapes are [E, S, ...] as in the proto; with one seat, [E, ...] is accepted
        too. The first step after `connect` carries first observations (its reward
        and flags are ignored by the host).
        """
        stream = self._stream
        if stream is None:
            raise ConnectionLost("client is closed") if self._closed else RuntimeError("call connect() before step()")
        # A fresh message every step: upb keeps every bytes value ever assigned to a
        # message in that message's arena until the message dies, so one reused
        # StepBatch grew by a whole step's data per step (connect_four: ~8 MiB/s).
        message = env_pb2.StepBatch()
        message.CopyFrom(self._template)
        self._fill(message, observation, reward, terminated, truncated, legal_mask, acting)
        reply = self._exchange(stream, message)
        actions = self._check_reply(reply, acting)
        self._sequence += 1
        self.policy_version = reply.policy_version
        return actions

    def _exchange(self, stream: Any, message: Any) -> Any:
        """Send `message` as this step's and return the host's reply; ConnectionLost or HostRefused on failure."""
        message.sequence = self._sequence
        try:
            return stream.exchange(message)
        except grpc.RpcError as error:
            self._teardown()
            raise classify_rpc_error(error, "stream") from None
        except StopIteration:
            self._teardown()
            raise ConnectionLost(f"host ended the stream without answering step {self._sequence}") from None

    def close(self) -> None:
        """End the stream and the channel for good; safe from any thread, idempotent."""
        with self._lock:
            self._closed = True
        self._teardown()

    def _channel_options(self) -> list[tuple[str, int]]:
        backoff_ms = int(self.config.backoff_initial_s * 1000)
        return channel_options(self.config.max_message_bytes) + [
            ("grpc.initial_reconnect_backoff_ms", backoff_ms),
            ("grpc.min_reconnect_backoff_ms", backoff_ms),
            ("grpc.max_reconnect_backoff_ms", int(self.config.backoff_max_s * 1000)),
        ]

    def _wait_until_ready(self, channel: grpc.Channel) -> None:
        ready = grpc.channel_ready_future(channel)
        with self._lock:
            self._ready = ready
        try:
            ready.result(timeout=self.config.connect_timeout_s)
        except grpc.FutureTimeoutError:
            raise ConnectionLost(
                f"host at {self.config.address} not reachable within {self.config.connect_timeout_s} s"
                f"{_TLS_HINT[self.config.security.tls]}"
            ) from None
        except grpc.FutureCancelledError:
            raise ConnectionLost("connect cancelled: client closed") from None

    # What differs between the protocol versions' clients (NamedWorkerClient sets v2's): the service stub,
    # the version and its service's name in refusals, the handshake request and the largest step's size.
    _STUB = env_pb2_grpc.EnvServiceStub
    _STREAM_METHOD = f"/{env_pb2.DESCRIPTOR.services_by_name['EnvService'].full_name}/Stream"
    _ANSWER = env_pb2.ActionBatch
    _VERSION = PROTOCOL_VERSION
    _ON_SERVICE = ""

    def _handshake_request(self) -> Any:
        return codec.encode_handshake(self.spec, self.config.worker_name)

    def _largest_step_bytes(self, session_id: str) -> int:
        """The encoded size of the largest step this worker can send (every seat acting)."""
        return _template_step(self.spec, session_id, acting=True).ByteSize()

    def _handshake(self, channel: grpc.Channel) -> env_pb2.HandshakeResponse:
        try:
            reply = self._STUB(channel).Handshake(self._handshake_request(), timeout=self.config.connect_timeout_s,
                                                  metadata=self.config.security.metadata())
        except grpc.RpcError as error:
            raise classify_rpc_error(error, "handshake") from None
        if reply.protocol_version != self._VERSION:
            raise HostRefused(FAILED_PRECONDITION, f"host speaks protocol version {reply.protocol_version}"
                              f"{self._ON_SERVICE}, this worker {self._VERSION}", "handshake")
        return reply

    def _open_stream(self, channel: grpc.Channel, reply: env_pb2.HandshakeResponse) -> None:
        largest = self._largest_step_bytes(reply.session_id)
        limit = min(reply.max_message_bytes or self.config.max_message_bytes, self.config.max_message_bytes)
        if largest > limit:
            raise HostRefused(
                RESOURCE_EXHAUSTED,
                f"one step of {self.spec.num_envs} envs x {self.spec.num_seats} seats is up to {largest} bytes, but "
                f"the host accepts {reply.max_message_bytes} and this client {self.config.max_message_bytes}; "
                "use fewer envs per worker or raise the limits",
                "handshake",
            )
        self._set_template(reply.session_id)
        self._start_call(self._STUB(channel), reply)

    def _set_template(self, session_id: str) -> None:
        """The message each step copies: every tensor's dtype and shape set, no data."""
        self._template = _without_data(_template_step(self.spec, session_id, acting=False))

    def _start_call(self, stub: Any, reply: Any) -> None:
        """Open the Stream call on `stub` (either version's; or natively, where ClientConfig.native_stream says)
        for the session of handshake `reply`."""
        self._sequence = 0
        if native_stream.wanted(self.config.native_stream, self.config.native_stream_library):
            stream = self._open_native_stream()
        else:
            stream = GrpcioStream(stub, self.config.security.metadata())
        with self._lock:
            if self._closed:
                stream.cancel()
                raise ConnectionLost("client is closed")
            self._stream, self._ready = stream, None
        self.session_id = reply.session_id
        self.host_max_message_bytes = reply.max_message_bytes

    def _open_native_stream(self) -> native_stream.NativeStream:
        security = self.config.security
        try:
            return native_stream.NativeStream(
                self.config.address, self._STREAM_METHOD, self._ANSWER, security.metadata(),
                security.root_certificates(), self.config.max_message_bytes, self.config.native_stream_library)
        except grpc.RpcError as error:
            raise classify_rpc_error(error, "stream") from None

    def _fill(self, message, observation, reward, terminated, truncated, legal_mask, acting) -> None:
        slots = self._slots
        message.observation.data = slots["observation"].encode(observation)
        message.reward.data = slots["reward"].encode(reward)
        message.terminated.data = slots["terminated"].encode(terminated)
        message.truncated.data = slots["truncated"].encode(truncated)
        if self.spec.has_legal_mask:
            if legal_mask is None:
                raise ValueError("the spec declares has_legal_mask=True: pass legal_mask on every step")
            message.legal_mask.data = slots["legal_mask"].encode(legal_mask)
        elif legal_mask is not None:
            raise ValueError("legal_mask passed but the spec declares has_legal_mask=False")
        if acting is None:
            message.ClearField("acting")
        else:
            slot = slots["acting"]
            message.acting.dtype = codec.dtype_to_enum(bool)
            message.acting.shape[:] = slot.shape
            message.acting.data = slot.encode(acting)

    def _check_reply(self, reply: env_pb2.ActionBatch, acting: Optional[np.ndarray]) -> np.ndarray:
        """The reply's actions, or ConnectionLost (after dropping the stream) if the host answered nonsense."""
        try:
            if reply.sequence != self._sequence:
                raise ProtocolError(INTERNAL, f"host answered sequence {reply.sequence} to step {self._sequence}")
            actions = codec.decode_tensor(reply.action, "action")
            expected = (self.spec.num_envs, self.spec.num_seats)
            if actions.shape != expected or actions.dtype != np.int32:
                raise ProtocolError(
                    INTERNAL, f"host sent actions {actions.dtype}{actions.shape}, expected int32{expected}"
                )
            chosen = actions if acting is None else actions[np.asarray(acting, bool).reshape(expected)]
            if chosen.size and (chosen.min() < 0 or chosen.max() >= self.spec.num_actions):
                raise ProtocolError(INTERNAL, f"host sent an action outside [0, {self.spec.num_actions})")
        except ProtocolError as error:
            self._teardown()
            raise ConnectionLost(f"bad answer from host: {error.message}") from None
        return actions

    def _teardown(self) -> None:
        with self._lock:
            channel, ready, stream = self._channel, self._ready, self._stream
            self._channel = self._ready = self._stream = None
        if ready is not None:
            ready.cancel()
        if stream is not None:
            stream.cancel()
        if channel is not None:
            channel.close()
