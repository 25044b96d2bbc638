"""The Node.js Nim worker (envs/node/) against check-worker, a training host, a host restart and
scripted refusals, as real processes.

Installs envs/node's packages with `make node-worker` (npm ci) once; a failed install fails every
test here with its output. Skips when `node` is not on PATH.
"""

import json
import os
import shutil
import subprocess
import sys
import threading
from concurrent import futures

import grpc
import numpy as np
import pytest

from conftest import check_worker_output, free_port, python_sdk_status_rule
from seedleague.v1 import env_pb2, env_pb2_grpc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODE = shutil.which("node")
WORKER_JS = os.path.join(ROOT, "envs", "node", "src", "worker.js")
SEEDLEAGUE = [sys.executable, "-m", "seedleague.cli"]
HOST_FLAGS = ["--unroll_length", "8", "--batch_size", "4", "--replay.capacity", "64", "--network.hidden_sizes", "16"]

pytestmark = pytest.mark.skipif(
    NODE is None, reason="node is not on PATH: install Node.js >= 18 and npm to test envs/node (make node-worker)"
)


@pytest.fixture(scope="module")
def worker_cmd():
    result = subprocess.run(["make", "node-worker"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        pytest.fail(
            "`make node-worker` (npm ci in envs/node) failed:\n" + result.stdout[-4000:] + result.stderr[-4000:],
            pytrace=False,
        )
    return [NODE, WORKER_JS]


def test_node_unit_tests_pass(worker_cmd):
    result = subprocess.run([NODE, "--test", "test/"], cwd=os.path.join(ROOT, "envs", "node"),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_reconnect_rule_matches_the_python_sdk(worker_cmd):
    script = (
        "const { classify, grpc } = require('./src/protocol');"
        "const out = {};"
        "for (const [name, code] of Object.entries(grpc.status)) if (typeof code === 'number' && code !== 0)"
        " out[name] = [classify(code, 'handshake'), classify(code, 'stream')];"
        "console.log(JSON.stringify(out));"
    )
    node = subprocess.run([NODE, "-e", script], cwd=os.path.join(ROOT, "envs", "node"),
                          capture_output=True, text=True, timeout=30, check=True)
    node_rule = json.loads(node.stdout)

    sdk_rule = python_sdk_status_rule()
    assert node_rule == sdk_rule
    assert node_rule["INTERNAL"] == ["reconnect", "reconnect"]


def test_check_worker_passes_every_check(worker_cmd):
    check_worker_output(worker_cmd + ["--address", "{address}", "--envs", "4"])


def start_host(port, run_dir, log_path, learner_steps):
    return subprocess.Popen(
        SEEDLEAGUE + ["host", "--address", f"127.0.0.1:{port}", "--run-dir", str(run_dir),
                      "--max-learner-steps", str(learner_steps), "--max-seconds", "120"] + HOST_FLAGS,
        cwd=ROOT, stdout=open(log_path, "w"), stderr=subprocess.STDOUT,
    )


def summary(run_dir) -> dict:
    with open(run_dir / "summary.json") as f:
        return json.load(f)


def test_host_trains_on_the_node_worker_across_a_host_restart(worker_cmd, tmp_path):
    """Two `seedleague host` runs on one port: the first stops at its budget under the live stream
    (the restart grpc-js may report as INTERNAL RST_STREAM), the worker reconnects to the second."""
    port = free_port()
    worker_log = tmp_path / "worker.log"
    logs = lambda: worker_log.read_text()[-3000:]  # noqa: E731
    # The worker retries with backoff until the host listens, so no need to wait for it.
    worker = subprocess.Popen(
        worker_cmd + ["--address", f"127.0.0.1:{port}", "--envs", "8", "--seed", "1", "--backoff-max", "1"],
        cwd=ROOT, stdout=open(worker_log, "w"), stderr=subprocess.STDOUT,
    )
    try:
        for run in ("first", "second"):
            host = start_host(port, tmp_path / run, tmp_path / f"{run}.log", learner_steps=3)
            rc = host.wait(timeout=120)
            assert rc == 0, (tmp_path / f"{run}.log").read_text()[-3000:]
            result = summary(tmp_path / run)
            assert result["reason"] == "reached 3 learner steps", result
            assert result["env_steps"] > 0 and result["episodes"] > 0, result
            # A lost host means reconnect attempts, not an exit.
            assert worker.poll() is None, logs()
        assert worker_log.read_text().count("connected to") >= 2, logs()
    finally:
        worker.terminate()  # SIGTERM: the worker stops cleanly
        assert worker.wait(timeout=15) == 0, logs()


TOKEN = "s3cret"


class ScriptedHost(env_pb2_grpc.EnvServiceServicer):
    """Needs `authorization: Bearer s3cret` on every call; ends its first stream with `first_code`,
    then answers first-legal actions on later streams."""

    def __init__(self, first_code: grpc.StatusCode):
        self.first_code = first_code
        self.streams = 0
        self.second_stream_stepped = threading.Event()

    @staticmethod
    def authorize(context):
        if ("authorization", f"Bearer {TOKEN}") not in tuple(context.invocation_metadata()):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong token")

    def Handshake(self, request, context):
        self.authorize(context)
        return env_pb2.HandshakeResponse(session_id=f"s{self.streams}", protocol_version=1, max_message_bytes=1 << 20)

    def Stream(self, request_iterator, context):
        self.authorize(context)
        self.streams += 1
        for step in request_iterator:
            if self.streams == 1:
                context.abort(self.first_code, "scripted failure")
            self.second_stream_stepped.set()
            mask = step.legal_mask
            legal = np.frombuffer(mask.data, np.uint8).reshape(tuple(mask.shape))
            actions = legal.argmax(axis=-1).astype("<i4")  # first legal action (0 for a seat not to move)
            tensor = env_pb2.Tensor(dtype=env_pb2.INT32, shape=list(actions.shape), data=actions.tobytes())
            yield env_pb2.ActionBatch(sequence=step.sequence, action=tensor)


WITH_TOKEN = dict(os.environ, SEEDLEAGUE_TOKEN=TOKEN)


def serve(servicer, tls=None):
    """A gRPC server for `servicer` on a free loopback port; `tls` = (cert, key) PEM paths serves TLS."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    env_pb2_grpc.add_EnvServiceServicer_to_server(servicer, server)
    if tls is None:
        port = server.add_insecure_port("127.0.0.1:0")
    else:
        cert, key = (open(path, "rb").read() for path in tls)
        port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(key, cert)]))
    server.start()
    return server, port


def run_until_second_stream(host, worker_cmd, port, *flags):
    """Runs the worker until `host` sees its second stream step; returns its output and exit code."""
    worker = subprocess.Popen(worker_cmd + ["--address", f"localhost:{port}", "--envs", "2", *flags], cwd=ROOT,
                              env=WITH_TOKEN, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        reached = host.second_stream_stepped.wait(timeout=30)
    finally:
        worker.terminate()
        out = worker.communicate(timeout=15)[0]
    assert reached, f"the worker did not open a second stream:\n{out[-3000:]}"
    return out, worker.returncode


def test_internal_on_the_stream_means_reconnect(worker_cmd):
    host = ScriptedHost(grpc.StatusCode.INTERNAL)  # what grpc-js reports for a host restart (RST_STREAM)
    server, port = serve(host)
    try:
        out, rc = run_until_second_stream(host, worker_cmd, port)
    finally:
        server.stop(grace=0)
    assert rc == 0, out
    assert "lost the host (INTERNAL: scripted failure)" in out, out


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI to make a test certificate")
def test_tls_with_the_hosts_ca(worker_cmd, tmp_path):
    cert, key = str(tmp_path / "host.pem"), str(tmp_path / "host.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", key,
                    "-out", cert, "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
                   check=True, capture_output=True, timeout=60)
    host = ScriptedHost(grpc.StatusCode.UNAVAILABLE)
    server, port = serve(host, tls=(cert, key))
    try:
        out, rc = run_until_second_stream(host, worker_cmd, port, "--tls-ca", cert)
    finally:
        server.stop(grace=0)
    assert rc == 0, out


def test_invalid_argument_on_the_stream_is_a_refusal(worker_cmd):
    server, port = serve(ScriptedHost(grpc.StatusCode.INVALID_ARGUMENT))
    try:
        result = subprocess.run(worker_cmd + ["--address", f"127.0.0.1:{port}", "--envs", "2"],
                                cwd=ROOT, env=WITH_TOKEN, capture_output=True, text=True, timeout=30)
    finally:
        server.stop(grace=0)
    assert result.returncode == 2, result.stderr
    assert "host refused (INVALID_ARGUMENT: scripted failure); giving up" in result.stderr, result.stderr


def test_no_token_is_a_refusal(worker_cmd):
    server, port = serve(ScriptedHost(grpc.StatusCode.INTERNAL))
    no_token = {k: v for k, v in os.environ.items() if k != "SEEDLEAGUE_TOKEN"}
    try:
        result = subprocess.run(worker_cmd + ["--address", f"127.0.0.1:{port}"],
                                cwd=ROOT, env=no_token, capture_output=True, text=True, timeout=30)
    finally:
        server.stop(grace=0)
    assert result.returncode == 2, result.stderr
    assert "handshake: host refused (UNAUTHENTICATED: missing or wrong token)" in result.stderr, result.stderr
