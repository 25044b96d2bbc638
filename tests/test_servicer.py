"""The EnvService servicer over a real socket, driven by raw grpc stubs against a FakeBackend."""

from __future__ import annotations

import dataclasses
import queue

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from seedleague.protocol.channel import channel_options
from seedleague.host.servicer import SERVICE_NAME
from seedleague.protocol import codec
from seedleague.protocol.specs import EnvSpec, zero_step
from seedleague.protocol.named import named_of_v1
from seedleague.testing.fakes import FakeBackend, FakeHostConfig
from seedleague.testing.server_thread import ServerThread
from seedleague.v1 import env_pb2 as pb
from seedleague.v1 import env_pb2_grpc

SPEC = EnvSpec("test", observation_shape=(3,), observation_dtype=np.float32, num_actions=4, num_envs=2)


@pytest.fixture
def backend():
    return FakeBackend()


@pytest.fixture
def server(backend):
    with ServerThread(backend) as server:
        yield server


@pytest.fixture
def channel(server):
    with grpc.insecure_channel(server.address, options=channel_options(64 * 2**20)) as channel:
        yield channel


@pytest.fixture
def stub(channel):
    return env_pb2_grpc.EnvServiceStub(channel)


class Lockstep:
    """A raw bidirectional stream driven write-then-read."""

    def __init__(self, stub: env_pb2_grpc.EnvServiceStub):
        self._pending = queue.SimpleQueue()
        self._call = stub.Stream(iter(self._pending.get, None), timeout=10)

    def send(self, message: pb.StepBatch) -> pb.ActionBatch:
        self._pending.put(message)
        return next(self._call)

    def close(self) -> None:
        self._pending.put(None)
        self._call.cancel()


def _step(session_id: str, sequence: int, spec: EnvSpec = SPEC, **overrides) -> pb.StepBatch:
    """`spec`'s zero step (`specs.zero_step`) with `overrides` of its fields, encoded."""
    return codec.encode_step(dataclasses.replace(zero_step(spec, session_id, sequence), **overrides))


def _handshake(stub, spec: EnvSpec = SPEC, version: int = 1) -> pb.HandshakeResponse:
    return stub.Handshake(codec.encode_handshake(spec, "test-worker", version), timeout=10)


def _status(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value.code(), info.value.details()


def test_handshake_opens_a_session(stub, backend):
    reply = _handshake(stub)
    assert reply.session_id and reply.protocol_version == 1
    assert reply.max_message_bytes == backend.max_message_bytes
    (session,) = backend.sessions
    assert session.spec == named_of_v1(SPEC) and session.worker_name == "test-worker"  # v1, named


def test_protocol_version_mismatch_is_failed_precondition(stub):
    code, details = _status(lambda: _handshake(stub, version=2))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert "version 2" in details


def test_bad_spec_is_invalid_argument(stub, backend):
    message = codec.encode_handshake(SPEC, "w")
    message.spec.num_envs = 0
    code, details = _status(lambda: stub.Handshake(message, timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "num_envs" in details
    code, details = _status(lambda: stub.Handshake(pb.HandshakeRequest(protocol_version=1), timeout=10))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "no env spec" in details
    assert backend.sessions == []


def test_model_mismatch_is_failed_precondition():
    backend = FakeBackend(FakeHostConfig(num_actions=6))
    with ServerThread(backend) as server, grpc.insecure_channel(server.address) as channel:
        code, details = _status(lambda: _handshake(env_pb2_grpc.EnvServiceStub(channel)))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "4 actions" in details
    assert backend.violations == [f"handshake: FAILED_PRECONDITION: {details}"]


def test_lockstep_stream_answers_every_step_in_order(stub, backend):
    session_id = _handshake(stub).session_id
    stream = Lockstep(stub)
    for sequence in range(5):
        reply = stream.send(_step(session_id, sequence))
        actions = codec.decode_actions(reply)
        assert actions.sequence == sequence
        assert actions.action.shape == (2, 1) and actions.action.dtype == np.int32
        assert ((actions.action >= 0) & (actions.action < 4)).all()
    stream.close()
    assert backend.sessions[0].steps == 5 and backend.violations == []


def test_unknown_session_is_failed_precondition(stub, backend):
    stream = Lockstep(stub)
    code, details = _status(lambda: stream.send(_step("no-such-session", 0)))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "unknown session" in details
    assert backend.violations and "no-such-session" in backend.violations[0]


def test_closed_session_cannot_stream_again(stub):
    session_id = _handshake(stub).session_id
    first = Lockstep(stub)
    first.send(_step(session_id, 0))
    first.close()
    second = Lockstep(stub)
    code, details = _status(lambda: second.send(_step(session_id, 0)))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "closed" in details


@pytest.mark.parametrize(
    "bad, words",
    [
        (dict(observation=np.zeros((2, 1, 5), np.float32)), ["observation", "shape"]),
        (dict(observation=np.full((2, 1, 3), np.nan, np.float32)), ["observation", "non-finite"]),
        (dict(reward=np.array([[0.0], [np.inf]], np.float32)), ["reward", "non-finite"]),
    ],
    ids=["wrong-shape", "nan-observation", "inf-reward"],
)
def test_bad_step_ends_only_that_stream(stub, backend, bad, words):
    bad_id, good_id = _handshake(stub).session_id, _handshake(stub).session_id
    bad_stream, good_stream = Lockstep(stub), Lockstep(stub)
    bad_stream.send(_step(bad_id, 0))
    good_stream.send(_step(good_id, 0))
    code, details = _status(lambda: bad_stream.send(_step(bad_id, 1, **bad)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert all(word in details for word in words), details
    for sequence in range(1, 4):
        assert good_stream.send(_step(good_id, sequence)).sequence == sequence
    good_stream.close()
    sessions = {s.session_id: s for s in backend.sessions}
    assert details in sessions[bad_id].closed
    assert len(backend.violations) == 1 and details in backend.violations[0]


def test_out_of_order_sequence_is_invalid_argument(stub):
    session_id = _handshake(stub).session_id
    stream = Lockstep(stub)
    stream.send(_step(session_id, 0))
    code, details = _status(lambda: stream.send(_step(session_id, 5)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "sequence 5, expected 1" in details


def test_stream_cannot_switch_sessions(stub):
    first, second = _handshake(stub).session_id, _handshake(stub).session_id
    stream = Lockstep(stub)
    stream.send(_step(first, 0))
    code, details = _status(lambda: stream.send(_step(second, 1)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and second in details


def test_oversized_message_is_resource_exhausted():
    backend = FakeBackend(FakeHostConfig(max_message_bytes=64 * 1024))
    spec = EnvSpec("big", observation_shape=(20_000,), observation_dtype=np.float32, num_actions=2, num_envs=1)
    with ServerThread(backend) as server:
        with grpc.insecure_channel(server.address, options=channel_options(2**24)) as channel:
            stub = env_pb2_grpc.EnvServiceStub(channel)
            reply = _handshake(stub, spec)
            assert reply.max_message_bytes == 64 * 1024
            code, details = _status(lambda: Lockstep(stub).send(_step(reply.session_id, 0, spec)))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, details


def test_random_actions_are_legal(stub):
    spec = EnvSpec("masked", (3,), np.float32, num_actions=4, num_envs=2, num_seats=2, has_legal_mask=True)
    mask = np.zeros((2, 2, 4), bool)
    mask[0, 0, 2] = mask[0, 1, [0, 3]] = mask[1, 0, [1, 3]] = mask[1, 1, :] = True
    session_id = _handshake(stub, spec).session_id
    stream = Lockstep(stub)
    seen = np.zeros((2, 2, 4), bool)
    for sequence in range(60):
        action = codec.decode_actions(stream.send(_step(session_id, sequence, spec, legal_mask=mask))).action
        assert action.shape == (2, 2)
        seen[np.arange(2)[:, None], np.arange(2)[None, :], action] = True
    np.testing.assert_array_equal(seen, mask)  # only legal actions, and every legal one in time


def test_backend_counts_episodes(stub, backend):
    session_id = _handshake(stub).session_id
    stream = Lockstep(stub)
    ones = np.ones((2, 1), np.float32)
    flags = [np.array([False, False]), np.array([True, False]), np.array([False, False]), np.array([False, True])]
    for sequence, done in enumerate(flags):
        stream.send(_step(session_id, sequence, reward=ones, terminated=done))
    stream.close()
    session = backend.sessions[0]
    # Step 0 only carries first observations: env 0's episode ends after 1 action, env 1's after 3.
    assert session.episodes == 2
    assert list(session.episode_lengths) == [1, 3]
    assert list(session.episode_returns) == [(1.0,), (3.0,)]


def test_health_check_reports_serving(channel):
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", SERVICE_NAME):
        reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_reflection_lists_the_env_service(channel):
    reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    (reply,) = list(reflection.ServerReflectionInfo(iter([request]), timeout=10))
    names = {service.name for service in reply.list_services_response.service}
    assert "seedleague.v1.EnvService" in names and "grpc.health.v1.Health" in names


def test_server_thread_restarts_on_the_same_port(backend):
    server = ServerThread(backend).start()
    port = server.port
    server.stop()
    server.start()
    try:
        assert server.port == port
        with grpc.insecure_channel(server.address) as channel:
            assert _handshake(env_pb2_grpc.EnvServiceStub(channel)).session_id
    finally:
        server.stop()
