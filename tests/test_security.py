"""Token and TLS over real sockets: refusals happen before the backend sees anything, the
worker client and the gym worker process get through with the right settings.

Test certificates are made with the openssl CLI (see `_make_certificate`, the same
command as in `seedleague.security`'s docstring).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import queue
import shutil
import subprocess
import sys

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from seedleague.protocol import codec
from seedleague.protocol.channel import channel_options
from seedleague.protocol.client import ClientConfig, ConnectionLost, HostRefused, WorkerClient
from seedleague.protocol.specs import EnvSpec, zero_step
from seedleague.security import (
    TOKEN_ENV_VAR,
    ClientSecurity,
    ServerSecurity,
    add_security_flags,
    client_security_from_args,
    server_security_from_args,
)
from seedleague.testing.fakes import FakeBackend
from seedleague.testing.server_thread import ServerThread
from seedleague.v1 import env_pb2_grpc

ROOT = pathlib.Path(__file__).resolve().parents[1]
SPEC = EnvSpec("test", observation_shape=(4,), observation_dtype=np.float32, num_actions=2, num_envs=3)
TOKEN = "right-token-0123456789"
WRONG = [(), (("authorization", "Bearer wrong-token"),), (("authorization", TOKEN),)]  # none, wrong, no scheme

needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")


def _make_certificate(directory: pathlib.Path, name: str) -> tuple[str, str]:
    """A self-signed certificate for localhost and 127.0.0.1; returns (cert, key) paths."""
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    command = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    command += ["-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost"]
    command += ["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"]
    subprocess.run(command, check=True, capture_output=True, timeout=30)
    return str(cert), str(key)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[str, str]:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl CLI")
    return _make_certificate(tmp_path_factory.mktemp("tls"), "host")


def _client(address: str, security: ClientSecurity = ClientSecurity(), **config) -> WorkerClient:
    return WorkerClient(ClientConfig(address, worker_name="test", security=security, **config), SPEC)


def _zeros():
    n = SPEC.num_envs
    return np.zeros((n, 4), np.float32), np.zeros(n, np.float32), np.zeros(n, bool), np.zeros(n, bool)


def _raw_step(session_id: str) -> bytes:
    return codec.encode_step(zero_step(SPEC, session_id))


# --- configs and flags --------------------------------------------------------------------------


def test_security_configs_name_bad_fields(tmp_path):
    with pytest.raises(ValueError, match="both tls_cert and tls_key.*tls_cert '/no/such.pem' cannot be read"):
        ServerSecurity(tls_cert="/no/such.pem")
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello")
    with pytest.raises(ValueError, match="token must be printable ASCII.*tls_ca .* holds no .*CERTIFICATE"):
        ClientSecurity(token="has space", tls_ca=str(not_pem))
    assert TOKEN not in repr(ServerSecurity(token=TOKEN)) + repr(ClientSecurity(token=TOKEN))


def test_flags_read_the_token_from_the_environment_unless_given(monkeypatch):
    server, client = argparse.ArgumentParser(), argparse.ArgumentParser()
    add_security_flags(server, "server")
    add_security_flags(client, "client")
    monkeypatch.delenv(TOKEN_ENV_VAR, raising=False)
    assert server_security_from_args(server.parse_args([])) == ServerSecurity()
    monkeypatch.setenv(TOKEN_ENV_VAR, "from-env")
    assert server_security_from_args(server.parse_args([])).token == "from-env"
    assert client_security_from_args(client.parse_args(["--token", "from-flag"])).token == "from-flag"
    with pytest.raises(SystemExit):
        client.parse_args(["--tls-cert", "x.pem"])  # Server-only flag.


# --- token over plaintext -----------------------------------------------------------------------


@pytest.fixture
def backend():
    return FakeBackend()


@pytest.fixture
def guarded(backend):
    with ServerThread(backend, security=ServerSecurity(token=TOKEN)) as server:
        yield server


@pytest.fixture
def stub(guarded):
    with grpc.insecure_channel(guarded.address, options=channel_options(1 << 20)) as channel:
        yield env_pb2_grpc.EnvServiceStub(channel)


@pytest.mark.parametrize("metadata", WRONG, ids=["none", "wrong", "no-scheme"])
def test_handshake_without_the_right_token_is_unauthenticated(backend, stub, metadata):
    with pytest.raises(grpc.RpcError) as caught:
        stub.Handshake(codec.encode_handshake(SPEC, "intruder"), metadata=metadata, timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "missing or wrong token" in caught.value.details()
    assert backend.sessions == []


@pytest.mark.parametrize("metadata", WRONG, ids=["none", "wrong", "no-scheme"])
def test_stream_without_the_right_token_is_refused_before_the_backend(backend, stub, metadata):
    good = (("authorization", f"Bearer {TOKEN}"),)
    session_id = stub.Handshake(codec.encode_handshake(SPEC, "test"), metadata=good, timeout=10).session_id
    pending: queue.SimpleQueue = queue.SimpleQueue()
    pending.put(_raw_step(session_id))
    call = stub.Stream(iter(pending.get, None), metadata=metadata, timeout=10)
    with pytest.raises(grpc.RpcError) as caught:
        next(call)
    pending.put(None)
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    (session,) = backend.sessions
    assert session.steps == 0 and not session.streaming and session.closed is None and backend.violations == []


def test_health_stays_open_and_reflection_needs_the_token(guarded):
    with grpc.insecure_channel(guarded.address) as channel:
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        with pytest.raises(grpc.RpcError) as caught:
            next(reflection.ServerReflectionInfo(iter([request]), timeout=10))
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_worker_client_with_the_right_token_steps(backend, guarded):
    client = _client(guarded.address, ClientSecurity(token=TOKEN))
    client.connect()
    for _ in range(3):
        assert client.step(*_zeros()).shape == (3, 1)
    client.close()
    assert [s.steps for s in backend.sessions] == [3] and backend.violations == []


def test_worker_client_with_a_wrong_token_is_host_refused(backend, guarded):
    with pytest.raises(HostRefused, match="handshake with UNAUTHENTICATED: missing or wrong token.*SEEDLEAGUE_TOKEN"):
        _client(guarded.address, ClientSecurity(token="wrong")).connect()
    with pytest.raises(HostRefused, match="UNAUTHENTICATED"):
        _client(guarded.address).connect()
    assert backend.sessions == []


# --- TLS ----------------------------------------------------------------------------------------


def test_worker_client_over_tls_with_token(certificate):
    cert, key = certificate
    backend = FakeBackend()
    with ServerThread(backend, security=ServerSecurity(token=TOKEN, tls_cert=cert, tls_key=key)) as server:
        client = _client(server.address, ClientSecurity(token=TOKEN, tls_ca=cert))
        client.connect()
        client.step(*_zeros())
        client.close()
        with pytest.raises(HostRefused, match="UNAUTHENTICATED"):
            _client(server.address, ClientSecurity(tls_ca=cert)).connect()
    assert [s.steps for s in backend.sessions] == [1]


def test_plaintext_or_untrusting_client_cannot_reach_a_tls_server(certificate, tmp_path):
    cert, key = certificate
    other_ca, _ = _make_certificate(tmp_path, "other")
    backend = FakeBackend()
    with ServerThread(backend, security=ServerSecurity(tls_cert=cert, tls_key=key)) as server:
        with pytest.raises(ConnectionLost, match="not reachable.*--tls-ca"):
            _client(server.address, connect_timeout_s=0.5).connect()
        with pytest.raises(ConnectionLost, match="not reachable.*signed by --tls-ca"):
            _client(server.address, ClientSecurity(tls_ca=other_ca), connect_timeout_s=0.5).connect()
    assert backend.sessions == []


# --- the gym worker process ---------------------------------------------------------------------


def _run_worker(address: str, *args: str, token_env: str = "") -> tuple[int, str]:
    command = [sys.executable, "-m", "envs.gym_worker", "--address", address, "--env", "CartPole-v1"]
    command += ["--num-envs", "2", "--max-steps", "20", "--connect-timeout", "5", *args]
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV_VAR}
    if token_env:
        env[TOKEN_ENV_VAR] = token_env
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout + done.stderr


def test_gym_worker_with_the_token_flag_runs_and_with_a_wrong_one_exits_2(backend, guarded):
    code, output = _run_worker(guarded.address, "--token", TOKEN)
    assert code == 0, output
    assert [s.steps for s in backend.sessions] == [10]
    code, output = _run_worker(guarded.address, token_env="wrong")
    assert code == 2, output
    assert "UNAUTHENTICATED" in output and "missing or wrong token" in output and "Traceback" not in output
    assert len(backend.sessions) == 1


def test_gym_worker_over_tls_with_the_token_from_the_environment(certificate):
    cert, key = certificate
    backend = FakeBackend()
    with ServerThread(backend, security=ServerSecurity(token=TOKEN, tls_cert=cert, tls_key=key)) as server:
        code, output = _run_worker(server.address, "--tls-ca", cert, token_env=TOKEN)
    assert code == 0, output
    assert [s.steps for s in backend.sessions] == [10]
