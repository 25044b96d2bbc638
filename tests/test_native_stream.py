"""The native stream (seedleague/protocol/native_stream.cc): a Python worker's lockstep exchange in C++, against
real gRPC servers on loopback: the same bytes as grpcio's stream, close from another thread, a stream ended
without an answer, TLS with a token, protocol v2, a gym worker process, and what a worker says when the library
is missing. (tests/test_worker.py runs its client tests on both streams: refusals, host restarts.)

Builds build/native/libseedleague_stream.so with `make native-stream` once (`make test` does too); a failed build
fails every test that needs it with the build output; without the C++ gRPC toolchain they skip (`make deps` as root)."""

from __future__ import annotations

import asyncio
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import threading

import grpc
import numpy as np
import pytest

from seedleague.host.servicer import EnvServicer
from seedleague.protocol import native_stream
from seedleague.protocol.client import ClientConfig, ConnectionLost, HostRefused, WorkerClient
from seedleague.protocol.client_v2 import NamedWorkerClient
from seedleague.protocol.specs import EnvSpec
from seedleague.protocol.named import ActionSpec, ContinuousHead, DiscreteHead, ObservationSpec, NamedEnvSpec, TensorSpec
from seedleague.security import ClientSecurity, ServerSecurity
from seedleague.testing.fakes import FakeBackend
from seedleague.testing.server_thread import ServerThread
from system_deps import build_native_stream

ROOT = pathlib.Path(__file__).resolve().parents[1]
SPEC = EnvSpec("test", observation_shape=(4,), observation_dtype=np.float32, num_actions=3, num_envs=5)


@pytest.fixture(scope="module", autouse=True)
def library():
    build_native_stream()


def _client(address: str, mode: str, spec=SPEC, security: ClientSecurity = ClientSecurity()) -> WorkerClient:
    config = ClientConfig(address, worker_name="test", native_stream=mode, security=security)
    return (NamedWorkerClient if isinstance(spec, NamedEnvSpec) else WorkerClient)(config, spec)


def _step_inputs(seed: int):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(5, 4)), rng.normal(size=5), rng.random(5) < 0.2, rng.random(5) < 0.1)


class _Recording(FakeBackend):
    """A fake host that keeps every step it was sent, as decoded by the servicer."""

    def __init__(self):
        super().__init__()
        self.steps = []

    async def step(self, step):
        self.steps.append(step)
        return await super().step(step)


def test_the_native_stream_sends_what_grpcio_sends_and_is_answered_alike():
    recorded = {}
    for mode in ("off", "on"):
        backend = _Recording()
        with ServerThread(backend) as server:
            client = _client(server.address, mode)
            client.connect()
            assert client.stream_kind == {"off": "grpcio stream", "on": "native stream"}[mode]
            for seed in range(20):
                actions = client.step(*_step_inputs(seed))
                assert actions.shape == (5, 1) and actions.dtype == np.int32 and ((0 <= actions) & (actions < 3)).all()
            client.close()
        assert backend.violations == [] and [s.steps for s in backend.sessions] == [20]
        recorded[mode] = backend.steps
    for off, on in zip(recorded["off"], recorded["on"], strict=True):
        assert off.sequence == on.sequence
        np.testing.assert_array_equal(off.observation["observation"], on.observation["observation"])
        for field in ("reward", "terminated", "truncated"):
            np.testing.assert_array_equal(getattr(off, field), getattr(on, field))


class _Hanging(FakeBackend):
    """A fake host that takes steps and never answers them."""

    def __init__(self):
        super().__init__()
        self.received = threading.Event()

    async def step(self, step):
        self.received.set()
        await asyncio.Event().wait()


def test_close_from_another_thread_ends_a_step_blocked_on_the_host():
    backend = _Hanging()
    with ServerThread(backend) as server:
        client = _client(server.address, "on")
        client.connect()
        closer = threading.Thread(target=lambda: (backend.received.wait(30), client.close()))
        closer.start()
        with pytest.raises(ConnectionLost, match="CANCELLED"):
            client.step(*_step_inputs(0))
        closer.join()
        with pytest.raises(ConnectionLost, match="closed"):
            client.step(*_step_inputs(1))


def test_a_worker_waiting_on_the_host_stops_on_sigterm():
    """The wait for an answer comes back to the interpreter in slices, so the worker's signal handler runs while
    the host keeps it waiting (a stop at the end of a run): it stops cleanly, not at its stop grace's deadline."""
    backend = _Hanging()
    with ServerThread(backend) as server:
        worker = subprocess.Popen([sys.executable, "-m", "envs.gym_worker", "--address", server.address, "--env",
                                   "CartPole-v1", "--num-envs", "4", "--native-stream", "on"],
                                  cwd=ROOT, stderr=subprocess.PIPE, text=True)
        try:
            assert backend.received.wait(60), "the worker never sent a step"
            worker.send_signal(signal.SIGTERM)
            _, stderr = worker.communicate(timeout=60)
        finally:
            worker.kill()
    assert worker.returncode == 0, stderr[-3000:]
    assert "got SIGTERM: stopping" in stderr and "(native stream)" in stderr


def test_a_host_that_ends_the_stream_without_answering_is_a_lost_connection():
    class Ending(FakeBackend):
        async def step(self, step):
            raise asyncio.CancelledError  # the servicer ends the call without a status error

    with ServerThread(Ending()) as server:
        client = _client(server.address, "on")
        client.connect()
        with pytest.raises(ConnectionLost, match="host ended the stream without answering step 0"):
            client.step(*_step_inputs(0))
        client.close()


def test_protocol_v2_steps_through_the_native_stream():
    spec = NamedEnvSpec(
        "named", ObservationSpec((TensorSpec("grid", (2, 3), np.float32), TensorSpec("flags", (2,), np.int32))),
        ActionSpec((DiscreteHead("move", 4, has_legal_mask=True), ContinuousHead("aim", (-1.0, -1.0), (1.0, 1.0)))), num_envs=3)
    backend = FakeBackend()
    with ServerThread(backend) as server:
        client = _client(server.address, "on", spec)
        client.connect()
        assert client.stream_kind == "native stream"
        legal = np.ones((3, 4), bool)
        legal[:, 0] = False
        for _ in range(5):
            actions = client.step({"grid": np.zeros((3, 2, 3)), "flags": np.ones((3, 2))}, np.zeros(3),
                                  np.zeros(3, bool), np.zeros(3, bool), legal_mask={"move": legal})
            assert (actions["move"] > 0).all() and actions["aim"].shape == (3, 1, 2)
        client.close()
    assert backend.violations == [] and backend.sessions[0].steps == 5


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI for test certificates")
def test_tls_and_the_token_ride_on_the_native_stream(tmp_path):
    from test_security import _make_certificate

    cert, key = _make_certificate(tmp_path, "host")
    backend = FakeBackend()
    with ServerThread(backend, "localhost:0", ServerSecurity(token="s3cret", tls_cert=cert, tls_key=key)) as server:
        client = _client(server.address, "on", security=ClientSecurity(token="s3cret", tls_ca=cert))
        client.connect()
        for seed in range(3):
            client.step(*_step_inputs(seed))
        client.close()
    assert backend.violations == [] and backend.sessions[0].steps == 3  # the stream, not only the handshake


def test_a_wrong_token_on_the_stream_is_refused():
    """The stream is its own call with its own metadata: one that presents the wrong token is refused."""
    backend = FakeBackend()
    with ServerThread(backend, security=ServerSecurity(token="s3cret")) as server:
        client = _client(server.address, "on", security=ClientSecurity(token="s3cret"))
        client.connect()
        client.step(*_step_inputs(0))
        stream = native_stream.NativeStream(server.address, WorkerClient._STREAM_METHOD, WorkerClient._ANSWER,
                                            metadata=[("authorization", "Bearer wrong")])
        with pytest.raises(native_stream.NativeStreamError) as refused:
            stream.exchange(client._template)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        client.close()


def test_a_gym_worker_process_steps_through_the_native_stream():
    backend = FakeBackend()
    with ServerThread(backend) as server:
        done = subprocess.run([sys.executable, "-m", "envs.gym_worker", "--address", server.address, "--env",
                               "CartPole-v1", "--num-envs", "8", "--max-steps", "800", "--native-stream", "on"],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "(native stream)" in done.stderr  # the worker says which stream it steps on
    assert backend.violations == [] and backend.sessions[0].steps == 100


def test_without_the_library_on_is_refused_with_the_build_command_and_auto_uses_grpcio(tmp_path):
    missing = str(tmp_path / "missing.so")
    with pytest.raises(ValueError, match="native_stream='on' but .*missing.so is not built.*make native-stream"):
        ClientConfig("127.0.0.1:1", native_stream="on", native_stream_library=missing)
    with ServerThread(FakeBackend()) as server:
        client = WorkerClient(ClientConfig(server.address, native_stream="auto", native_stream_library=missing), SPEC)
        client.connect()
        assert client.stream_kind == "grpcio stream"
        client.step(*_step_inputs(0))
        client.close()
    # a worker's command line takes the path from $SEEDLEAGUE_NATIVE_STREAM and refuses on the console
    done = subprocess.run([sys.executable, "-m", "envs.gym_worker", "--address", "127.0.0.1:1", "--env", "CartPole-v1",
                           "--native-stream", "on"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, native_stream.LIBRARY_ENV: missing})
    assert done.returncode == 2 and "missing.so is not built: build it with `make native-stream`" in done.stderr
    with pytest.raises(ValueError, match="native_stream must be one of auto, on, off, got 'fast'"):
        ClientConfig("127.0.0.1:1", native_stream="fast")
