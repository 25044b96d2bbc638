"""The Ruby tic-tac-toe worker (envs/ruby/), written from docs/protocol.md alone, against
check-worker, a SIGKILLed and resumed host, the fake host's handshake refusal and a host that
answers the wrong sequence, as real processes; and its reconnect rule against the Python SDK's,
status by status.

Generates the Ruby stubs with `make ruby-worker` once. Skips, saying what to install, when `ruby`,
its `grpc` gem or `grpc_tools_ruby_protoc` is missing (`make ruby-deps` installs them on Debian).
"""

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from concurrent import futures

import grpc
import numpy as np
import pytest

from conftest import check_worker_output, free_port, python_sdk_status_rule
from seedleague import progress
from seedleague.api import load_policy
from seedleague.v1 import env_pb2, env_pb2_grpc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUBY = shutil.which("ruby")
WORKER_RB = os.path.join(ROOT, "envs", "ruby", "worker.rb")
SEEDLEAGUE = [sys.executable, "-m", "seedleague.cli"]


def _missing_ruby_grpc() -> str:
    if RUBY is None:
        return "ruby is not on PATH"
    if subprocess.run([RUBY, "-e", 'require "grpc"'], capture_output=True).returncode != 0:
        return "ruby has no grpc gem"
    if shutil.which("grpc_tools_ruby_protoc") is None:
        return "grpc_tools_ruby_protoc (the grpc-tools gem) is not on PATH"
    return ""


MISSING = _missing_ruby_grpc()
pytestmark = pytest.mark.skipif(
    bool(MISSING), reason=f"{MISSING}: `make ruby-deps` (Debian: ruby ruby-grpc ruby-grpc-tools) to test envs/ruby"
)


@pytest.fixture(scope="module")
def worker_cmd():
    result = subprocess.run(["make", "ruby-worker"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        pytest.fail("`make ruby-worker` failed:\n" + result.stdout[-4000:] + result.stderr[-4000:], pytrace=False)
    return [RUBY, WORKER_RB]


def test_check_worker_passes_every_check(worker_cmd):
    check_worker_output(worker_cmd + ["--address", "{address}", "--num-envs", "4"])


def test_reconnect_rule_matches_the_python_sdk(worker_cmd):
    script = (
        f"require {json.dumps(WORKER_RB)}; load_stubs(File.join({json.dumps(ROOT)}, 'build', 'ruby'));"
        "require 'json'; out = {};"
        "GRPC::Core::StatusCodes.constants.each do |name|"
        "  code = GRPC::Core::StatusCodes.const_get(name); next if code.zero?;"
        "  error = GRPC::BadStatus.new_status_exception(code, 'x');"
        "  out[name] = [true, false].map { |h| give_up?(error, h) ? 'refused' : 'reconnect' };"
        "end; puts JSON.generate(out)"
    )
    ruby = subprocess.run([RUBY, "-e", script], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert ruby.returncode == 0, ruby.stderr[-2000:]
    ruby_rule = json.loads(ruby.stdout)

    sdk_rule = python_sdk_status_rule()
    assert ruby_rule == sdk_rule
    assert ruby_rule["INTERNAL"] == ["reconnect", "reconnect"]


def test_a_spec_the_host_cannot_serve_exits_2_with_the_hosts_reason(worker_cmd):
    address = f"127.0.0.1:{free_port()}"
    host = subprocess.Popen(SEEDLEAGUE + ["fake-host", "--address", address, "--num-actions", "5"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in host.stdout:  # the fake host prints its address once it listens
            if address in line:
                break
        worker = subprocess.run(worker_cmd + ["--address", address, "--num-envs", "2"],
                                cwd=ROOT, capture_output=True, text=True, timeout=60)
    finally:
        host.terminate()
        host.wait(timeout=30)
    assert worker.returncode == 2, worker.stdout + worker.stderr
    assert "FAILED_PRECONDITION" in worker.stderr and "9" in worker.stderr, worker.stderr


def test_a_backoff_cap_below_the_first_wait_is_refused_before_connecting(worker_cmd):
    worker = subprocess.run(worker_cmd + ["--address", "127.0.0.1:1", "--backoff-max", "0.01"],
                            cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert worker.returncode == 2 and "--backoff-max must be >= 0.1 s (the first wait), got 0.01" in worker.stderr, (
        worker.stdout + worker.stderr)


HOST_FLAGS = ["--unroll_length", "8", "--batch_size", "4", "--replay.capacity", "64", "--network.hidden_sizes", "16",
              "--network.torso", "mlp",  # the worker is tested here, not the board torso (slow to compile)
              "--checkpoint.interval-s", "1", "--max-seconds", "120"]


def saved_steps(run_dir) -> list[int]:
    directory = run_dir / "checkpoints"
    return sorted(int(name) for name in os.listdir(directory) if name.isdigit()) if directory.is_dir() else []


def test_a_sigkilled_host_resumed_on_its_port_gets_the_worker_back(worker_cmd, tmp_path):
    """The must-show of issue 20: the worker, written from the docs alone, rides out a SIGKILLed
    `seedleague host` and trains on under the one restarted with --resume on the same port."""
    port, run_dir = free_port(), tmp_path / "run"
    host_cmd = SEEDLEAGUE + ["host", "--address", f"127.0.0.1:{port}", "--run-dir", str(run_dir)] + HOST_FLAGS
    worker_log = tmp_path / "worker.log"
    logs = lambda: worker_log.read_text()[-3000:]  # noqa: E731
    worker = subprocess.Popen(worker_cmd + ["--address", f"127.0.0.1:{port}", "--num-envs", "8", "--backoff-max", "1"],
                              cwd=ROOT, stdout=open(worker_log, "w"), stderr=subprocess.STDOUT)
    try:
        first = subprocess.Popen(host_cmd, cwd=ROOT, stdout=open(tmp_path / "first.log", "w"), stderr=subprocess.STDOUT)
        try:
            while not [step for step in saved_steps(run_dir) if step > 0]:  # a checkpoint with updates in it
                assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
                assert worker.poll() is None, logs()
                time.sleep(0.2)
        finally:
            first.kill()
            first.wait(timeout=30)
        killed_at = max(saved_steps(run_dir))
        killed_env_steps = load_policy(str(run_dir), killed_at).meta["env_steps"]
        target = killed_at + 3
        second = subprocess.run(host_cmd + ["--resume", "--max-learner-steps", str(target)], cwd=ROOT,
                                capture_output=True, text=True, timeout=180)
        out = second.stdout + second.stderr
        assert second.returncode == 0, out[-3000:]
        resumed = [tick for tick in progress.read(str(run_dir)) if tick["resumed_from"] is not None]
        assert resumed and resumed[-1]["resumed_from"] == killed_at, out[-3000:]
        result = json.loads((run_dir / "summary.json").read_text())
        assert result["reason"] == f"reached {target} learner steps", result
        assert result["learner_step"] >= target, result
        assert result["env_steps"] > killed_env_steps, result  # the worker stepped the resumed host
        assert worker.poll() is None, logs()  # a lost host means reconnect attempts, not an exit
        assert "connection lost (" in worker_log.read_text(), logs()
    finally:
        worker.terminate()  # SIGTERM: the worker closes its stream and exits 0
        assert worker.wait(timeout=15) == 0, logs()


class WrongSequenceHost(env_pb2_grpc.EnvServiceServicer):
    """Answers its first stream with the wrong sequence number, later streams with the first legal move."""

    def __init__(self):
        self.streams = 0
        self.second_stream_stepped = threading.Event()

    def Handshake(self, request, context):
        return env_pb2.HandshakeResponse(session_id=f"s{self.streams}", protocol_version=1, max_message_bytes=1 << 20)

    def Stream(self, request_iterator, context):
        self.streams += 1
        for step in request_iterator:
            mask = step.legal_mask
            legal = np.frombuffer(mask.data, np.uint8).reshape(tuple(mask.shape))
            actions = legal.argmax(axis=-1).astype("<i4")
            tensor = env_pb2.Tensor(dtype=env_pb2.INT32, shape=list(actions.shape), data=actions.tobytes())
            if self.streams > 1:
                self.second_stream_stepped.set()
            yield env_pb2.ActionBatch(sequence=step.sequence + (self.streams == 1), action=tensor)


def test_a_host_answering_the_wrong_sequence_is_dropped_and_reconnected(worker_cmd):
    host = WrongSequenceHost()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    env_pb2_grpc.add_EnvServiceServicer_to_server(host, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    worker = subprocess.Popen(worker_cmd + ["--address", f"127.0.0.1:{port}", "--num-envs", "2"], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        reached = host.second_stream_stepped.wait(timeout=30)
    finally:
        worker.terminate()
        out = worker.communicate(timeout=15)[0]
        server.stop(None)
    assert reached, out[-3000:]
    assert worker.returncode == 0, out[-3000:]
    assert "host answered sequence 1 to step 0" in out, out[-3000:]
