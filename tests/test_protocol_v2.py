"""Protocol v2 over a real socket: codec round trips, the client against the fake host, every refusal naming
its tensor or head, version negotiation, and v1 workers unchanged beside v2 ones."""

from __future__ import annotations

import dataclasses
import queue

import grpc
import numpy as np
import pytest

from seedleague.grpc_server import ThreadedServer
from seedleague.host.servicer import SERVICE_NAME, EnvServicer
from seedleague.protocol import codec_v2
from seedleague.protocol.channel import channel_options
from seedleague.protocol.client import ClientConfig, HostRefused, WorkerClient
from seedleague.protocol.client_v2 import NamedWorkerClient
from seedleague.protocol.errors import ProtocolError
from seedleague.protocol.specs import EnvSpec
from seedleague.protocol.named import (ActionSpec, ContinuousHead, DiscreteHead, ObservationSpec,
                                       NamedEnvSpec, TensorSpec, check_named_actions,
                                       check_named_step, flat_spec, named_of_v1, v1_of_named,
                                       zero_named_step)
from seedleague.testing.fakes import FakeBackend
from seedleague.testing.server_thread import ServerThread
from seedleague.v2 import env_pb2 as pb
from seedleague.v2 import env_pb2_grpc

SPEC = NamedEnvSpec(
    "hybrid",
    ObservationSpec((TensorSpec("vector", (5,), np.float32), TensorSpec("screen", (6, 6, 2), np.uint8),
                     TensorSpec("entities", (4, 3), np.float32, masked=True))),
    ActionSpec((DiscreteHead("move", 5, has_legal_mask=True), DiscreteHead("fire", 2),
                ContinuousHead("aim", (-1.0, 0.0), (1.0, 2.0)))),
    num_envs=3, num_seats=2, episode_stats=("win", "kills"), seat_team=(0, 1),
)


def _step(sequence: int = 0, session_id: str = "s") -> "codec_v2.NamedStepBatch":
    step = zero_named_step(SPEC, session_id, sequence)
    rng = np.random.default_rng(sequence)
    step.observation["vector"] = rng.normal(size=(3, 2, 5)).astype(np.float32)
    step.observation["entities/mask"][:, :, 2:] = False
    step.legal_mask["move"][:, :, 0] = False
    return step


def test_codec_round_trip_keeps_every_field():
    spec = codec_v2.decode_spec(codec_v2.encode_spec(SPEC))
    assert spec == SPEC
    step = _step(3)
    step.truncated[1] = True
    step.final_observation = {k: v[1:2] if v.dtype == bool else v[1:2] + 1 for k, v in step.observation.items()}
    step.episode_stats["win"][1] = 1.0
    back = codec_v2.decode_step(pb.StepBatch.FromString(codec_v2.encode_step(step).SerializeToString()))
    check_named_step(SPEC, back)
    for field in ("observation", "legal_mask", "final_observation", "episode_stats"):
        got, want = getattr(back, field), getattr(step, field)
        assert sorted(got) == sorted(want)
        for key in want:
            np.testing.assert_array_equal(got[key], want[key])
            assert got[key].dtype == want[key].dtype


@pytest.mark.parametrize("mutate, field, words", [
    (lambda s: s.observation.pop("screen"), "observation/screen", "missing"),
    (lambda s: s.observation.__setitem__("radar", np.zeros((3, 2, 1), np.float32)), "observation/radar", "not in"),
    (lambda s: s.observation.pop("entities/mask"), "observation/entities/mask", "missing"),
    (lambda s: s.observation.__setitem__("screen", np.zeros((3, 2, 6, 6, 2), np.float32)), "observation/screen",
     "dtype"),
    (lambda s: s.observation.__setitem__("vector", np.zeros((3, 2, 4), np.float32)), "observation/vector", "shape"),
    (lambda s: s.observation["vector"].__setitem__((0, 0, 0), np.nan), "observation/vector", "non-finite"),
    (lambda s: s.legal_mask.pop("move"), "legal_mask/move", "missing"),
    (lambda s: s.legal_mask.__setitem__("fire", np.ones((3, 2, 2), bool)), "legal_mask/fire", "not in"),
    (lambda s: s.legal_mask["move"].__setitem__((1, 0), False), "legal_mask/move", "no legal action"),
    (lambda s: s.episode_stats.pop("kills"), "episode_stats/kills", "missing"),
    (lambda s: s.truncated.__setitem__(0, True), "final_observation/vector", "missing"),
    (lambda s: s.final_observation.__setitem__("vector", np.zeros((1, 2, 5), np.float32)), "final_observation/vector",
     "no env is truncated"),
])
def test_bad_steps_are_refused_naming_the_tensor(mutate, field, words):
    step = _step()
    mutate(step)
    with pytest.raises(ProtocolError) as error:
        check_named_step(SPEC, step)
    assert error.value.code == "INVALID_ARGUMENT" and error.value.field == field
    assert words in error.value.message and field.split("/", 1)[1] in error.value.message


@pytest.mark.parametrize("mutate, words", [
    (lambda a: a.pop("fire"), "2 action heads"),
    (lambda a: a.__setitem__("jump", np.zeros((3, 2), np.int32)), "4 action heads"),
    (lambda a: a.__setitem__("aim", np.full((3, 2, 2), 0.5, np.float32) * np.array([1, 9], np.float32)), "outside"),
    (lambda a: a["aim"].__setitem__((0, 0, 0), np.inf), "non-finite"),
    (lambda a: a["move"].__setitem__((0, 0), 0), "illegal"),
    (lambda a: a.__setitem__("fire", np.zeros((3, 2), np.int64)), "dtype"),
])
def test_bad_actions_are_refused_naming_the_head(mutate, words):
    action = {"move": np.ones((3, 2), np.int32), "fire": np.zeros((3, 2), np.int32),
              "aim": np.zeros((3, 2, 2), np.float32) + np.array([0.0, 1.0], np.float32)}
    legal = _step().legal_mask
    check_named_actions(SPEC, dict(action), None, legal)
    mutate(action)
    with pytest.raises(ProtocolError) as error:
        check_named_actions(SPEC, action, None, legal)
    assert error.value.code == "INVALID_ARGUMENT" and words in error.value.message


def test_bad_specs_are_refused_naming_the_problem():
    message = codec_v2.encode_spec(SPEC)
    message.action[2].continuous.high[0] = float("inf")
    with pytest.raises(ProtocolError, match="'aim'.*finite"):
        codec_v2.decode_spec(message)
    message = codec_v2.encode_spec(SPEC)
    message.observation[1].name = "vector"
    with pytest.raises(ProtocolError, match="unique"):
        codec_v2.decode_spec(message)
    message = codec_v2.encode_spec(SPEC)
    message.seat_team[:] = [0, 2]
    with pytest.raises(ProtocolError, match="seat_team"):
        codec_v2.decode_spec(message)
    message = codec_v2.encode_spec(SPEC)
    message.return_bound = -2.0
    with pytest.raises(ProtocolError, match="return_bound must be a finite number >= 0"):
        codec_v2.decode_spec(message)


def test_the_return_bound_crosses_the_wire_and_both_spec_versions():
    bounded = dataclasses.replace(SPEC, return_bound=1200.0)
    assert codec_v2.decode_spec(pb.EnvSpec.FromString(codec_v2.encode_spec(bounded).SerializeToString())) == bounded
    v1 = EnvSpec("poker", (7,), np.float32, 3, 4, num_seats=2, has_legal_mask=True, return_bound=1200.0)
    assert named_of_v1(v1).return_bound == 1200.0
    assert v1_of_named(named_of_v1(v1)) == v1
    assert named_of_v1(v1) == flat_spec("poker", (7,), np.float32, 3, 4, 2, True, 1200.0)


@pytest.fixture
def server():
    with ServerThread(FakeBackend()) as server:
        yield server


def test_client_steps_a_named_game_against_the_fake_host(server):
    client = NamedWorkerClient(ClientConfig(server.address), SPEC)
    client.connect()
    try:
        for sequence in range(4):
            step = _step(sequence)
            if sequence == 2:
                step.truncated[0] = True
                step.final_observation = {k: v[:1] for k, v in step.observation.items()}
            actions = client.step(step.observation, step.reward, step.terminated, step.truncated, step.legal_mask,
                                  final_observation=step.final_observation, episode_stats=step.episode_stats)
            assert sorted(actions) == ["aim", "fire", "move"]
            assert actions["aim"].shape == (3, 2, 2) and actions["aim"].dtype == np.float32
            assert (actions["move"] != 0).all()  # action 0 of "move" is illegal everywhere
    finally:
        client.close()
    session = server.backend.sessions[0]
    assert session.spec == SPEC and session.steps == 4 and session.episodes == 1
    assert not server.backend.violations


def _raw_stream(channel, step) -> grpc.RpcError:
    stub = env_pb2_grpc.EnvServiceStub(channel)
    pending = queue.SimpleQueue()
    call = stub.Stream(iter(pending.get, None), timeout=10)
    pending.put(codec_v2.encode_step(step))
    with pytest.raises(grpc.RpcError) as error:
        next(call)
    pending.put(None)
    return error.value


def test_host_refuses_a_missing_tensor_with_invalid_argument_naming_it(server):
    with grpc.insecure_channel(server.address, options=channel_options(64 * 2**20)) as channel:
        stub = env_pb2_grpc.EnvServiceStub(channel)
        reply = stub.Handshake(codec_v2.encode_handshake(SPEC, "raw"))
        assert reply.protocol_version == 2
        step = _step(0, reply.session_id)
        step.observation.pop("screen")
        error = _raw_stream(channel, step)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "'screen'" in error.details()
    assert server.backend.sessions[0].steps == 0  # nothing of the bad message was recorded


def test_host_refuses_another_version_on_the_v2_service(server):
    with grpc.insecure_channel(server.address) as channel:
        with pytest.raises(grpc.RpcError) as error:
            env_pb2_grpc.EnvServiceStub(channel).Handshake(codec_v2.encode_handshake(SPEC, "raw", version=1))
    assert error.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "version 1" in error.value.details()


def test_a_session_streams_on_the_service_it_handshook_on(server):
    """The servicer, the only code that knows a session's protocol version, holds its stream to that version:
    a v1 session's steps on the v2 service are refused (FAILED_PRECONDITION: handshake again) even when they
    name v1's tensor and head, and nothing of them reaches the backend."""
    from seedleague.protocol import codec
    from seedleague.v1 import env_pb2_grpc as grpc_v1
    v1_spec = EnvSpec("v1", (3,), np.float32, 4, num_envs=2)
    with grpc.insecure_channel(server.address) as channel:
        reply = grpc_v1.EnvServiceStub(channel).Handshake(codec.encode_handshake(v1_spec, "raw"))
        step = zero_named_step(named_of_v1(v1_spec), reply.session_id, 0)
        error = _raw_stream(channel, step)
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, error.details()
    assert "opened with protocol version 1 but streams version 2" in error.details()
    (session,) = server.backend.sessions
    assert session.protocol_version == 1 and session.steps == 0 and not session.streaming


def test_v1_and_v2_workers_share_one_host(server):
    v1 = WorkerClient(ClientConfig(server.address), EnvSpec("v1", (3,), np.float32, 4, num_envs=2))
    v2 = NamedWorkerClient(ClientConfig(server.address), SPEC)
    v1.connect()
    v2.connect()
    try:
        for _ in range(3):
            assert v1.step(np.zeros((2, 3), np.float32), np.zeros(2), np.zeros(2, bool), np.zeros(2, bool)).shape == (2, 1)
            step = _step()
            v2.step(step.observation, step.reward, step.terminated, step.truncated, step.legal_mask)
    finally:
        v1.close()
        v2.close()
    assert [s.steps for s in server.backend.sessions] == [3, 3] and not server.backend.violations


def test_a_v1_shaped_v2_worker_falls_back_to_v1_on_a_host_without_v2():
    backend = FakeBackend()
    # A server with only the v1 service, as a host from before protocol v2.
    servicer = EnvServicer(backend)
    only_v1 = lambda server: server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        SERVICE_NAME, _v1_handlers(servicer)),))
    spec = NamedEnvSpec("v1-shaped", ObservationSpec((TensorSpec("obs", (3,), np.float32),)),
                        ActionSpec((DiscreteHead("act", 4),)), num_envs=2)
    with ThreadedServer("127.0.0.1:0", lambda: [only_v1], [SERVICE_NAME], 2**20) as server:
        client = NamedWorkerClient(ClientConfig(server.address), spec)
        client.connect()
        try:
            actions = client.step({"obs": np.zeros((2, 3), np.float32)}, np.zeros(2), np.zeros(2, bool),
                                  np.zeros(2, bool))
        finally:
            client.close()
        named = NamedWorkerClient(ClientConfig(server.address), SPEC)
        with pytest.raises(HostRefused) as refused:  # no v1 form: give up, with the host's answer
            named.connect()
        named.close()
    assert client.protocol_version == 1 and actions["act"].shape == (2, 1)
    assert backend.sessions[0].protocol_version == 1 and len(backend.sessions) == 1
    assert refused.value.code == "UNIMPLEMENTED"


def test_the_named_client_speaks_v1_when_asked_with_the_same_dicts_and_refuses_a_spec_v1_cannot_carry(server):
    # v1 on the wire is the named client's adapter: the caller gives and gets named tensors and heads.
    spec = NamedEnvSpec("v1-shaped", ObservationSpec((TensorSpec("obs", (3,), np.float32),)),
                        ActionSpec((DiscreteHead("act", 4, has_legal_mask=True),)), num_envs=2)
    client = NamedWorkerClient(ClientConfig(server.address), spec, protocol=1)
    legal = np.zeros((2, 4), bool)
    legal[:, 2] = True
    client.connect()
    try:
        actions = [client.step({"obs": np.full((2, 3), i, np.float32)}, np.zeros(2), np.zeros(2, bool),
                               np.zeros(2, bool), {"act": legal}) for i in range(3)]
    finally:
        client.close()
    (session,) = server.backend.sessions
    assert client.protocol_version == 1 and client.session_id == session.session_id
    assert session.protocol_version == 1 and session.steps == 3 and not server.backend.violations
    assert v1_of_named(session.spec) == EnvSpec("v1-shaped", (3,), np.float32, 4, 2, has_legal_mask=True)
    assert all(a["act"].shape == (2, 1) and (a["act"] == 2).all() for a in actions)  # the only legal action
    np.testing.assert_array_equal(session.last_step.observation["observation"], np.full((2, 1, 3), 2, np.float32))
    with pytest.raises(ValueError, match="protocol must be 2, or 1 for a spec of v1's form .* got 1 for hybrid's spec"):
        NamedWorkerClient(ClientConfig(server.address), SPEC, protocol=1)


def _v1_handlers(servicer: EnvServicer) -> dict:
    from seedleague.protocol import codec
    from seedleague.v1 import env_pb2 as pb1
    return {
        "Handshake": grpc.unary_unary_rpc_method_handler(
            servicer.Handshake, request_deserializer=codec.lenient_parser(pb1.HandshakeRequest),
            response_serializer=pb1.HandshakeResponse.SerializeToString),
        "Stream": grpc.stream_stream_rpc_method_handler(
            servicer.Stream, request_deserializer=codec.lenient_parser(pb1.StepBatch),
            response_serializer=pb1.ActionBatch.SerializeToString),
    }


def test_bytes_that_are_no_v2_message_and_an_oversized_spec_are_refused_with_invalid_argument(server):
    with grpc.insecure_channel(server.address) as channel:
        handshake = channel.unary_unary("/seedleague.v2.EnvService/Handshake")  # raw bytes in and out
        with pytest.raises(grpc.RpcError) as error:
            handshake(b"\xff\xff\xff", timeout=10)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "not a valid" in error.value.details()
        request = codec_v2.encode_handshake(SPEC, "raw")
        for i in range(300):
            request.spec.episode_stats.append(f"s{i}")
        with pytest.raises(grpc.RpcError) as error:
            env_pb2_grpc.EnvServiceStub(channel).Handshake(request, timeout=10)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "302 episode stats" in error.value.details()


def test_a_v1_shaped_spec_is_v1_unless_it_declares_stats_or_teams_of_several_seats():
    from seedleague.protocol.named import v1_of_named

    observation = ObservationSpec((TensorSpec("obs", (3,), np.float32),))
    action = ActionSpec((DiscreteHead("act", 4, has_legal_mask=True),))
    two = NamedEnvSpec("g", observation, action, num_envs=2, num_seats=2)
    assert v1_of_named(two) == EnvSpec("g", (3,), np.float32, 4, 2, 2, has_legal_mask=True)
    assert v1_of_named(NamedEnvSpec("g", observation, action, 2, 2, seat_team=(0, 1))) is not None
    assert v1_of_named(NamedEnvSpec("g", observation, action, 2, 4, seat_team=(0, 0, 1, 1))) is None
    assert v1_of_named(NamedEnvSpec("g", observation, action, 2, 2, episode_stats=("win",))) is None


def test_a_fake_host_with_a_model_shape_takes_a_v1_shaped_spec_with_stats_and_teams_as_the_host_does():
    from seedleague.protocol.errors import FAILED_PRECONDITION
    from seedleague.testing.fakes import FakeHostConfig

    board = ObservationSpec((TensorSpec("board", (2, 6, 7), np.float32),))
    column = ActionSpec((DiscreteHead("column", 7, has_legal_mask=True),))
    backend = FakeBackend(FakeHostConfig(observation_shape=(2, 6, 7), num_actions=7))
    with_stats = NamedEnvSpec("c4", board, column, 2, 2, episode_stats=("win",), seat_team=(0, 1))
    assert backend.open_session(with_stats, "w")  # the host runs it on the flat model (protocol.named.flat_model)
    two_heads = ActionSpec(column.heads + (DiscreteHead("pass", 2),))
    with pytest.raises(ProtocolError) as refused:
        backend.open_session(NamedEnvSpec("c4", board, two_heads, 2, 2), "w")
    assert refused.value.code == FAILED_PRECONDITION and "1 tensors and 2 heads" in refused.value.message
    with pytest.raises(ProtocolError) as refused:
        backend.open_session(NamedEnvSpec("c4", board, ActionSpec((DiscreteHead("column", 6),)), 2, 2), "w")
    assert "6 actions do not fit the model's 7" in refused.value.message
