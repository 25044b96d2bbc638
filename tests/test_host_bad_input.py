"""The training host refuses bad input with the right status, keeps serving others, and keeps replay clean."""

import grpc
import numpy as np
import pytest

from conftest import RawWorker, good_step, vector_spec
from seedleague.protocol import codec
from seedleague.protocol.specs import EnvSpec


def expect_status(error_info, code, *fragments):
    assert error_info.value.code() == code, error_info.value.details()
    for fragment in fragments:
        assert fragment in error_info.value.details()


def inserted(host) -> int:
    return host.pipeline.replay._limiter.inserts if host.pipeline else 0


def bad_message(mutate, spec=None):
    """A valid step message for `worker` with `mutate(message)` applied."""

    def build(worker):
        message = codec.encode_step(good_step(worker.spec, worker.session_id, worker.sequence))
        mutate(message)
        return message

    return build


CASES = {
    "wrong shape": (bad_message(lambda m: codec.encode_tensor(np.zeros((2, 1, 4), np.float32), m.observation)),
                    grpc.StatusCode.INVALID_ARGUMENT, "observation has shape (2, 1, 4), expected (2, 1, 3)"),
    "wrong dtype": (bad_message(lambda m: codec.encode_tensor(np.zeros((2, 1, 3), np.float64), m.observation)),
                    grpc.StatusCode.INVALID_ARGUMENT, "observation has dtype float64"),
    "NaN observation": (bad_message(lambda m: codec.encode_tensor(np.full((2, 1, 3), np.nan, np.float32), m.observation)),
                        grpc.StatusCode.INVALID_ARGUMENT, "non-finite"),
    "inf reward": (bad_message(lambda m: codec.encode_tensor(np.full((2, 1), np.inf, np.float32), m.reward)),
                   grpc.StatusCode.INVALID_ARGUMENT, "reward has a non-finite value"),
    "malformed tensor": (bad_message(lambda m: setattr(m.observation, "data", b"\x00" * 5)),
                         grpc.StatusCode.INVALID_ARGUMENT, "observation has 5 data bytes"),
    "unknown dtype": (bad_message(lambda m: setattr(m.reward, "dtype", 99)),
                      grpc.StatusCode.INVALID_ARGUMENT, "unknown dtype enum value 99"),
    "other session id": (bad_message(lambda m: setattr(m, "session_id", "somebody-else")),
                         grpc.StatusCode.INVALID_ARGUMENT, "stream belongs to session"),
    "oversized message": (bad_message(lambda m: setattr(m.observation, "data", b"\x00" * (2 << 20))),
                          grpc.StatusCode.RESOURCE_EXHAUSTED, ""),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_step_ends_only_that_stream_and_enters_no_replay(shared_host_server, case):
    host, server = shared_host_server
    build, code, fragment = CASES[case]
    good = RawWorker(server.address, vector_spec())
    before = inserted(host)
    bad = RawWorker(server.address, vector_spec())
    bad.step(7.0)  # starts the bad worker's unrolls (length 4): nothing complete yet
    for _ in range(6):
        good.step()  # 6 rows: one complete unroll per env, 2 envs
    with pytest.raises(grpc.RpcError) as error:
        bad.send(build(bad))
    expect_status(error, code, fragment)
    good.step()  # still served
    assert inserted(host) - before == 2  # only the good worker's two unrolls
    observations = np.asarray(host.pipeline.replay._buffer.observation)
    assert not (observations == 7.0).any()
    good.close()
    bad.close()


def test_unknown_session_is_a_failed_precondition(shared_host_server):
    host, server = shared_host_server
    worker = RawWorker(server.address, vector_spec())
    message = codec.encode_step(good_step(worker.spec, "no-such-session", 0))
    other = RawWorker(server.address, vector_spec())
    with pytest.raises(grpc.RpcError) as error:
        other.send(message)
    expect_status(error, grpc.StatusCode.FAILED_PRECONDITION, "unknown session id 'no-such-session'")
    worker.close()


def test_spec_that_does_not_fit_the_model_is_refused_at_handshake(host_server):
    host, server = host_server
    RawWorker(server.address, vector_spec()).close()  # builds the model for obs (3,), 2 actions
    with pytest.raises(grpc.RpcError) as error:
        RawWorker(server.address, EnvSpec("other", (5,), np.float32, 2, 1))
    expect_status(error, grpc.StatusCode.FAILED_PRECONDITION, "observation_shape is (5,)")
    with pytest.raises(grpc.RpcError) as error:
        RawWorker(server.address, EnvSpec("other", (3,), np.float32, 4, 1))
    expect_status(error, grpc.StatusCode.FAILED_PRECONDITION, "num_actions is 4")


def test_too_many_envs_is_resource_exhausted(shared_host_server):
    host, server = shared_host_server
    with pytest.raises(grpc.RpcError) as error:
        RawWorker(server.address, vector_spec(num_envs=host.config.limits.max_envs_per_worker + 1))
    expect_status(error, grpc.StatusCode.RESOURCE_EXHAUSTED, "envs")


def test_more_agents_than_one_forward_pass_holds_is_resource_exhausted(shared_host_server):
    host, server = shared_host_server
    agents = host.config.batcher.max_batch_size // 2 + 1
    with pytest.raises(grpc.RpcError) as error:
        RawWorker(server.address, vector_spec(num_envs=agents, num_seats=2))
    expect_status(error, grpc.StatusCode.RESOURCE_EXHAUSTED, "batcher.max_batch_size")


def test_worker_killed_mid_unroll_leaves_nothing_in_replay(shared_host_server):
    host, server = shared_host_server
    before = inserted(host)
    worker = RawWorker(server.address, vector_spec())
    for _ in range(4):  # rows 0..3 of a 5-row unroll
        worker.step(7.0)
    worker.close()
    survivor = RawWorker(server.address, vector_spec())
    for _ in range(5):
        survivor.step()
    assert inserted(host) - before == 2
    assert not (np.asarray(host.pipeline.replay._buffer.observation) == 7.0).any()
    survivor.close()
