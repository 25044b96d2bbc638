"""`seedleague check-worker` on real worker processes, and `seedleague fake-host` as a process.

The gym worker must pass every check; each fault of tests/workers/broken_worker.py
must fail the check that names it.
"""

from __future__ import annotations

import pathlib
import queue
import signal
import subprocess
import sys
import threading

import grpc
import numpy as np
import pytest

from seedleague.protocol import codec
from seedleague.protocol.specs import EnvSpec
from conftest import RawWorker
from seedleague.host.session_limits import SessionLimits
from seedleague.testing.fakes import FakeBackend, FakeHostConfig
from seedleague.testing.server_thread import ServerThread
from seedleague.tools import check_worker as cw
from seedleague.tools.fake_host import FakeHostServer
from seedleague.v1 import env_pb2, env_pb2_grpc

ROOT = pathlib.Path(__file__).resolve().parents[1]
BROKEN = [sys.executable, str(ROOT / "tests" / "workers" / "broken_worker.py")]
FAST = cw.CheckConfig(steps=30, timeout_s=15.0, shutdown_timeout_s=5.0)


def test_gym_worker_passes_every_check():
    command = [sys.executable, "-m", "envs.gym_worker", "--address", "{address}", "--env", "CartPole-v1", "--num-envs", "4"]
    command += ["--backoff-initial", "0.05", "--backoff-max", "0.3"]
    report = cw.check_worker(command, FAST)
    assert report.passed, report.format()
    assert [result.name for result in report.results] == list(cw.CHECKS)
    assert report.spec.env_name == "CartPole-v1" and report.spec.num_envs == 4
    assert "not declared" in report.result(cw.LEGAL_MASKS).detail
    assert "not declared (return_bound 0)" in report.result(cw.RETURN_BOUND).detail


def test_the_gym_worker_on_pendulum_passes_every_check_on_protocol_v2():
    command = [sys.executable, "-m", "envs.gym_worker", "--address", "{address}", "--env", "Pendulum-v1", "--num-envs",
               "2", "--vector", "sync", "--backoff-initial", "0.05", "--backoff-max", "0.3"]
    report = cw.check_worker(command, cw.CheckConfig(steps=210, timeout_s=30.0, shutdown_timeout_s=5.0))
    assert report.passed, report.format()  # the fake host refuses a truncation without its final observation
    assert "protocol v2" in report.result(cw.HANDSHAKE).detail and "box[-2.0]..[2.0]" in report.format()


def test_well_behaved_broken_worker_passes_with_address_from_the_environment():
    script = f'exec "$0" "$1" --address "${cw.ADDRESS_ENV}" --fault none'
    report = cw.check_worker(["sh", "-c", script, *BROKEN], FAST)
    assert report.passed, report.format()
    assert "steps over 2 sessions" in report.result(cw.LEGAL_MASKS).detail
    assert "within the declared 14" in report.result(cw.RETURN_BOUND).detail  # its episodes pay up to 14


@pytest.mark.parametrize(
    "fault, check, evidence",
    [
        ("wrong-shape", cw.OBSERVATIONS, "step 4 of session fake-0: INVALID_ARGUMENT: observation/observation has shape (2, 1, 4)"),
        ("bad-mask", cw.LEGAL_MASKS, "step 4 of session fake-0: INVALID_ARGUMENT: legal_mask of head 'action' has no legal action"),
        ("no-reconnect", cw.RECONNECT, "exited with code 1"),
        ("low-bound", cw.RETURN_BOUND, "beyond the declared return_bound 2"),
    ],
)
def test_each_fault_fails_its_check(fault, check, evidence):
    report = cw.check_worker([*BROKEN, "--address", "{address}", "--fault", fault], FAST)
    assert report.failed[0] == check, report.format()
    assert report.result(check).status == "FAIL" and evidence in report.result(check).detail, report.format()
    assert report.result(cw.HANDSHAKE).passed
    assert [r.name for r in report.results if r.status == "FAIL"] == [check], report.format()
    assert "checks did not pass" in report.format()


def test_a_v2_worker_passes_and_a_missing_tensor_fails_the_observation_check_naming_it():
    report = cw.check_worker([*BROKEN, "--address", "{address}", "--protocol", "2"], FAST)
    assert report.passed, report.format()
    assert "protocol v2" in report.result(cw.HANDSHAKE).detail and "progress float32[3]" in report.format()
    report = cw.check_worker([*BROKEN, "--address", "{address}", "--protocol", "2", "--fault", "missing-tensor"], FAST)
    assert [r.name for r in report.results if r.status == "FAIL"] == [cw.OBSERVATIONS], report.format()
    assert "observation tensor 'progress' is missing" in report.result(cw.OBSERVATIONS).detail, report.format()


def test_command_line_exit_codes(capsys):
    assert cw.main(["--steps", "5"]) == 2
    assert "no worker command" in capsys.readouterr().err
    assert cw.main(["--steps", "1", "--", "true"]) == 2
    assert "steps must be >= 2" in capsys.readouterr().err
    assert cw.main(["--", "/nonexistent/worker"]) == 2
    assert cw.main(["--steps", "5", "--timeout", "5", "--", "true"]) == 1
    output = capsys.readouterr().out
    assert "FAIL handshake: no handshake: the worker exited with code 0" in output


def _lines(stream) -> "queue.SimpleQueue[str]":
    lines: queue.SimpleQueue = queue.SimpleQueue()
    threading.Thread(target=lambda: [lines.put(line) for line in stream], daemon=True).start()
    return lines


def _line_with(lines: "queue.SimpleQueue[str]", text: str, timeout_s: float = 15.0) -> str:
    while True:
        line = lines.get(timeout=timeout_s)
        if text in line:
            return line


def test_fake_host_logs_violations_and_session_summaries_and_exits_zero_on_sigterm():
    command = [sys.executable, "-m", "seedleague.tools.fake_host", "--address", "127.0.0.1:0"]
    host = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    worker = None
    try:
        lines = _lines(host.stdout)
        address = _line_with(lines, "fake host serving").split(" on ")[1].split()[0]
        worker = subprocess.Popen([*BROKEN, "--address", address, "--fault", "bad-mask"], stderr=subprocess.DEVNULL)
        assert "broken-counter" in _line_with(lines, "opened by")
        violation = _line_with(lines, "VIOLATION")
        assert "step 4" in violation and "legal_mask of head 'action' has no legal action for acting env 0 seat 0" in violation
        assert "4 steps" in _line_with(lines, "closed")
        assert worker.wait(10) == 2
        host.send_signal(signal.SIGTERM)
        assert host.wait(10) == 0
        assert "1 violations" in _line_with(lines, "stopped after")
    finally:
        for process in (worker, host):
            if process is not None and process.poll() is None:
                process.kill()


def _stream_one(stub, message: env_pb2.StepBatch) -> env_pb2.ActionBatch:
    return next(iter(stub.Stream(iter([message]), timeout=10)))


def _first_step(session_id: str, spec: EnvSpec) -> env_pb2.StepBatch:
    """Step 0 of a one-seat spec without legal masks: zeros."""
    message = env_pb2.StepBatch(session_id=session_id, sequence=0)
    codec.encode_tensor(np.zeros((spec.num_envs, 1, *spec.observation_shape), np.float32), message.observation)
    codec.encode_tensor(np.zeros((spec.num_envs, 1), np.float32), message.reward)
    codec.encode_tensor(np.zeros(spec.num_envs, bool), message.terminated)
    codec.encode_tensor(np.zeros(spec.num_envs, bool), message.truncated)
    return message


def test_fake_host_prints_an_oversized_message_and_refuses_it_as_the_host_does():
    """docs/protocol.md section 9: every violation is printed, an oversized StepBatch too (gRPC alone would
    refuse it before the fake host saw it, and print nothing)."""
    limit = 4096
    command = [sys.executable, "-m", "seedleague.tools.fake_host", "--address", "127.0.0.1:0",
               "--max-message-bytes", str(limit)]
    host = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = _lines(host.stdout)
        address = _line_with(lines, "fake host serving").split(" on ")[1].split()[0]
        with grpc.insecure_channel(address) as channel:
            stub = env_pb2_grpc.EnvServiceStub(channel)
            for name, size, allowed in (("small", 64, True), ("big", 1024, False)):
                spec = EnvSpec(name, (size,), np.float32, num_actions=2, num_envs=2)
                session_id = stub.Handshake(codec.encode_handshake(spec, name), timeout=10).session_id
                message = _first_step(session_id, spec)
                assert (message.ByteSize() <= limit) == allowed
                if allowed:
                    assert _stream_one(stub, message).sequence == 0
                    continue
                with pytest.raises(grpc.RpcError) as refused:
                    _stream_one(stub, message)
                assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert f"StepBatch of {message.ByteSize()} bytes" in refused.value.details()
        violation = _line_with(lines, "VIOLATION")
        assert f"session {session_id} step 0: RESOURCE_EXHAUSTED: StepBatch of {message.ByteSize()} bytes" in violation
        assert f"({limit} bytes, max_message_bytes in the handshake reply)" in violation
        host.send_signal(signal.SIGTERM)
        assert host.wait(10) == 0
        assert "1 violations" in _line_with(lines, "stopped after")
    finally:
        if host.poll() is None:
            host.kill()


def test_check_worker_records_an_oversized_message_as_a_stream_violation():
    backend = cw.CheckingBackend(FakeHostConfig(max_message_bytes=4096))
    spec = EnvSpec("big", (1024,), np.float32, num_actions=2, num_envs=2)
    with FakeHostServer(backend, "127.0.0.1:0") as server, grpc.insecure_channel(server.address) as channel:
        stub = env_pb2_grpc.EnvServiceStub(channel)
        session_id = stub.Handshake(codec.encode_handshake(spec, "big"), timeout=10).session_id
        message = _first_step(session_id, spec)
        with pytest.raises(grpc.RpcError) as refused:
            _stream_one(stub, message)
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    (violation,) = backend.found
    assert violation.check == cw.STREAM and violation.sequence == 0
    assert f"StepBatch of {message.ByteSize()} bytes is larger than this host accepts (4096 bytes" in violation.message


def test_refusals_made_by_the_servicer_are_attributed_to_their_check():
    """Wrong protocol version and undecodable steps never reach the backend; the servicer's log does."""
    backend = cw.CheckingBackend(FakeHostConfig())
    spec = EnvSpec("x", (3,), np.float32, num_actions=2, num_envs=2)
    with cw.ServicerRefusals(backend), ServerThread(backend) as server:
        stub = env_pb2_grpc.EnvServiceStub(grpc.insecure_channel(server.address))
        with pytest.raises(grpc.RpcError):
            stub.Handshake(codec.encode_handshake(spec, "test", version=7), timeout=5)
        session_id = stub.Handshake(codec.encode_handshake(spec, "test"), timeout=5).session_id
        message = env_pb2.StepBatch(session_id=session_id, sequence=0)
        codec.encode_tensor(np.zeros((2, 1, 3), np.float32), message.observation)
        with pytest.raises(grpc.RpcError):
            list(stub.Stream(iter([message]), timeout=5))
    version, missing = backend.found
    assert version.check == cw.HANDSHAKE and "protocol version 7" in version.message
    assert missing.check == cw.REWARDS and missing.message == "step batch has no reward tensor"


def test_the_fake_host_refuses_what_the_host_refuses_and_records_it():
    backend = FakeBackend(FakeHostConfig(limits=SessionLimits(max_workers=1)))
    server = ServerThread(backend).start()
    try:
        with pytest.raises(grpc.RpcError) as refused:
            RawWorker(server.address, EnvSpec("big", (4,), np.dtype(np.float32), 2, 5000))  # over 4,096 envs
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "5000 envs; this host allows at most 4096" in refused.value.details()
        first = RawWorker(server.address, EnvSpec("ok", (4,), np.dtype(np.float32), 2, 4))
        with pytest.raises(grpc.RpcError, match="limit of 1 workers"):
            RawWorker(server.address, EnvSpec("ok", (4,), np.dtype(np.float32), 2, 4))
        first.close()
        assert [v.split(":")[1].strip() for v in backend.violations] == ["RESOURCE_EXHAUSTED"] * 2
    finally:
        server.stop()


def test_a_refusal_is_attributed_by_the_field_it_names_not_by_words_in_its_message():
    from seedleague.protocol.errors import INVALID_ARGUMENT, ProtocolError
    from seedleague.protocol.specs import StepBatch, check_step

    spec = EnvSpec("x", (3,), np.float32, num_actions=2, num_envs=2)
    step = StepBatch("s", 1, np.zeros((2, 1, 3), np.float32), np.full((2, 1), np.nan, np.float32),
                     np.zeros(2, bool), np.zeros(2, bool))
    with pytest.raises(ProtocolError) as refused:
        check_step(spec, step)
    assert refused.value.field == "reward"
    found = cw.Violation("s", 1, refused.value.code, refused.value.message, refused.value.field)
    assert found.check == cw.REWARDS
    # A stream-level refusal whose text happens to mention a field stays a stream refusal.
    stream = cw.Violation("s", 1, INVALID_ARGUMENT, "stream belongs to session 'a', observation of 'b'")
    assert stream.check == cw.STREAM
