"""Shared fixtures: a real training host behind a real gRPC server on a loopback port.

The suite shares one JAX compilation cache, new for each session, with every process it starts (the
variables below are inherited): many tests build the same networks and learner updates, in this process
and in the hosts they launch, and each compile after the first is then read back instead of repeated.
Those processes also compile without LLVM's optimisation passes (`TEST_XLA_FLAGS`): the suite compiles
hundreds of small functions and runs each briefly, so the passes cost it about a quarter of its CPU time
and save none of it (benchmarks/README.md, "Test suite time"). They change how fast the code runs, never
what it computes.
"""

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

TEST_XLA_FLAGS = "--xla_backend_optimization_level=0"


def xla_flags(*flags: str) -> str:
    """XLA_FLAGS for a process the suite starts: the inherited ones, the suite's, and `flags`."""
    return " ".join(filter(None, (os.environ.get("XLA_FLAGS", ""), *flags)))


if TEST_XLA_FLAGS not in os.environ.get("XLA_FLAGS", ""):  # before anything imports jax
    os.environ["XLA_FLAGS"] = xla_flags(TEST_XLA_FLAGS)
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="seedleague-tests-jax-cache-")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.3")
    atexit.register(shutil.rmtree, os.environ["JAX_COMPILATION_CACHE_DIR"], True)

import dataclasses
import queue

import grpc
import numpy as np
import pytest

from seedleague.protocol.channel import channel_options
from seedleague.host.host import Host, HostConfig
from seedleague.host.replay_config import ReplayConfig
from seedleague.host.session_limits import SessionLimits
from seedleague.metrics import Metrics
from seedleague.protocol import codec
from seedleague.protocol.specs import EnvSpec, StepBatch, zero_step
from seedleague.tools.check_worker import CHECKS
from seedleague.rl.network_config import NetworkConfig
from seedleague.testing.server_thread import ServerThread
from seedleague.v1 import env_pb2_grpc

def free_port() -> int:
    """A loopback TCP port free right now, for a child process that must be told its address up front."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SMALL_HOST = HostConfig(
    unroll_length=4,
    batch_size=2,
    max_message_bytes=1 << 20,
    limits=SessionLimits(max_envs_per_worker=64),
    replay=ReplayConfig(capacity=256, error_buffer=10_000),
    network=NetworkConfig(torso="mlp", hidden_sizes=(8,)),
)


def vector_spec(num_envs=2, **kw) -> EnvSpec:
    return EnvSpec("vector", (3,), np.float32, 2, num_envs, **kw)


def good_step(spec: EnvSpec, session_id: str, sequence: int, value: float = 0.5) -> StepBatch:
    step = zero_step(spec, session_id, sequence)
    step.observation = np.full_like(step.observation, value)
    return step


class RawWorker:
    """A worker speaking raw protobuf, so tests can send anything at all."""

    def __init__(self, address: str, spec: EnvSpec):
        self.channel = grpc.insecure_channel(address, options=channel_options(8 << 20))
        self.stub = env_pb2_grpc.EnvServiceStub(self.channel)
        self.spec = spec
        # the first handshake builds the model (compiles), which takes seconds on a loaded machine
        self.session_id = self.stub.Handshake(codec.encode_handshake(spec, "raw-test"), timeout=60).session_id
        self._pending: queue.SimpleQueue = queue.SimpleQueue()
        self._call = self.stub.Stream(iter(self._pending.get, None), timeout=30)
        self.sequence = 0

    def send(self, message):
        self._pending.put(message)
        return next(self._call)

    def step(self, value: float = 0.5):
        reply = self.send(codec.encode_step(good_step(self.spec, self.session_id, self.sequence, value)))
        self.sequence += 1
        return reply

    def close(self):
        self._pending.put(None)
        self._call.cancel()
        self.channel.close()


def wait_for(condition, timeout: float = 20.0, what="the condition") -> bool:
    """True once `condition()` holds (asked every 20 ms); AssertionError naming `what` (a string, or a
    function giving one, asked only then) when it has not within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what() if callable(what) else what}")
        time.sleep(0.02)
    return True


def stopped_output(process: subprocess.Popen, timeout: float = 30.0) -> str:
    """SIGTERM `process` (started with stdout=PIPE, text=True) and return all it printed. One still running
    `timeout` seconds later gets SIGABRT, so a Python process started with PYTHONFAULTHANDLER=1 prints every
    thread's stack, and the AssertionError carries that: where it hung, not only that it did."""
    process.terminate()
    try:
        return process.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        output = process.communicate(timeout=timeout)[0]
        raise AssertionError(f"pid {process.pid} still ran {timeout} s after SIGTERM; its stacks at SIGABRT:\n"
                             f"{output[-8000:]}") from None


def seedleague_here(capsys, *args: str) -> subprocess.CompletedProcess:
    """`seedleague ARGS` run in this process (the same main, without a process start and its imports: about 3 s of
    CPU each), as a CompletedProcess with what it printed: for refusals (a run that starts would share this
    process's logging, signals and devices). A refusal's console path as its own process is checked where its kind
    is (tests/test_output.py's test_a_refusal_reaches_the_console_of_a_train_process; test_storage_faults'
    read-only and truncated-database --resume)."""
    from seedleague import cli

    capsys.readouterr()
    try:
        status = cli.main(list(args))
    except SystemExit as exit:  # argparse's refusals; a message in place of a status, as the interpreter shows it
        status = exit.code
        if isinstance(status, str):
            print(status, file=sys.stderr)
            status = 1
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(["seedleague", *args], status, captured.out, captured.err)


def check_worker_output(worker_command: list) -> str:
    """`seedleague check-worker -- WORKER_COMMAND` run as a user would, asserted to pass every check; its output."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run([sys.executable, "-m", "seedleague.cli", "check-worker", "--"] + worker_command,
                            cwd=root, capture_output=True, text=True, timeout=120)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert f"all {len(CHECKS)} checks passed" in out, out[-4000:]
    assert "FAIL" not in out and "SKIP" not in out, out[-4000:]
    return out


def python_sdk_status_rule() -> dict[str, list[str]]:
    """What the Python SDK does on each gRPC status (at handshake, on the stream): "refused" or "reconnect",
    the rule docs/protocol.md section 6 gives; workers in other languages are checked against it."""
    from seedleague.protocol.client import HostRefused, classify_rpc_error

    class Failed(grpc.RpcError):
        def __init__(self, code):
            self._code = code

        def code(self):
            return self._code

        def details(self):
            return ""

    def sdk(code, during):
        return "refused" if isinstance(classify_rpc_error(Failed(code), during), HostRefused) else "reconnect"

    return {c.name: [sdk(c, "handshake"), sdk(c, "stream")] for c in grpc.StatusCode if c != grpc.StatusCode.OK}


def serve_host(config: HostConfig = SMALL_HOST):
    """(host, server) for a Host of `config` on a loopback port, stopped when the generator closes."""
    host = Host(config, Metrics())
    server = ServerThread(host).start()
    yield host, server
    server.stop()
    host.stop()


@pytest.fixture
def host_server():
    """(host, server) for a small MLP host; stopped after the test."""
    yield from serve_host()


@pytest.fixture(scope="module")
def shared_host_server():
    """Like host_server, shared by a module's tests (each test counts replay inserts as deltas)."""
    yield from serve_host()


@pytest.fixture
def host_config():
    return dataclasses.replace(SMALL_HOST)


def pytest_collection_modifyitems(config, items):
    """Skip tests marked `gpu` where JAX sees no GPU (CI has none)."""
    import jax

    if any(d.platform == "gpu" for d in jax.devices()):
        return
    skip = pytest.mark.skip(reason="needs a GPU; JAX sees none")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
