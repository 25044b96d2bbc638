"""The C++ Connect Four worker (envs/cpp/) against check-worker, a training host, TLS hosts and a league run
started by `seedleague train --worker-cmd`, as real processes. It speaks protocol v2 by default (a named board
tensor, a legal-masked column head, two teams of one, episode stats), protocol v1 with `--protocol 1` and
against a host that has no v2 service.

Builds build/cpp/connect_four_worker with `make cpp-worker` once; a failed build fails
every test here with the build output. Without the C++ gRPC toolchain they skip (`make deps` as root installs it).
Test certificates come from the openssl CLI (tests/test_security.py's `_make_certificate`).
"""

import dataclasses
import json
import os
import re
import signal
import shutil
import socket
import subprocess
import sys
import time

import grpc
import numpy as np
import onnxruntime as ort
import pytest

from conftest import RawWorker, check_worker_output, free_port
from seedleague.league.client import LeagueClient
from seedleague.league.types import Role, Standing
from seedleague.grpc_server import ThreadedServer
from seedleague.host.servicer import SERVICE_NAME, EnvServicer
from seedleague.protocol import codec
from seedleague.protocol.specs import EnvSpec, zero_step
from seedleague.protocol.named import (ActionSpec, DiscreteHead, ObservationSpec, NamedActionBatch,
                                       NamedEnvSpec, TensorSpec, v1_of_named)
from seedleague import checkpoint_meta, progress
from seedleague.api import PolicySpec, load_trained
from seedleague.cli import main
from seedleague.security import ClientSecurity, ServerSecurity
from seedleague.testing.fakes import FakeBackend
from seedleague.testing.server_thread import ServerThread
from test_e2e import summary
from test_protocol_v2 import _v1_handlers
from test_security import _make_certificate
from system_deps import cpp_skip_reason

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BINARY = os.path.join(ROOT, "build", "cpp", "connect_four_worker")
SEEDLEAGUE = [sys.executable, "-m", "seedleague.cli"]


@pytest.fixture(scope="module")
def worker_binary():
    if cpp_skip_reason():
        pytest.skip(cpp_skip_reason())
    result = subprocess.run(["make", "cpp-worker"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    if result.returncode != 0 or not os.access(BINARY, os.X_OK):
        pytest.fail(
            "`make cpp-worker` failed (run `make cpp-deps` as root for gRPC/protobuf):\n"
            + result.stdout[-4000:] + result.stderr[-4000:],
            pytrace=False,
        )
    return BINARY


# What the worker declares on protocol v2: exactly v1's game, named, with teams and stats.
SPEC_V2 = NamedEnvSpec(
    "ConnectFour-cpp", ObservationSpec((TensorSpec("board", (2, 6, 7), np.float32),)),
    ActionSpec((DiscreteHead("column", 7, has_legal_mask=True),)), num_envs=8, num_seats=2,
    episode_stats=("win", "moves"), seat_team=(0, 1), return_bound=1.0)


@pytest.mark.parametrize("protocol", [[], ["--protocol", "1"]], ids=["v2", "v1"])
def test_check_worker_passes_every_check(worker_binary, protocol):
    out = check_worker_output([worker_binary, "--address", "{address}", "--num-envs", "4", *protocol])
    version = "v1" if protocol else "v2"
    assert f"PASS handshake: protocol {version}," in out, out[-4000:]


class Recorder(FakeBackend):
    """A fake host that keeps every step it accepted and can replace its answers (`answer(step, actions)`)."""

    def __init__(self, answer=None):
        super().__init__()
        self.steps, self._answer = [], answer

    async def step(self, step):
        actions = await super().step(step)
        self.steps.append(step)
        if self._answer is not None and isinstance(actions, NamedActionBatch):
            actions.action = self._answer(step, actions.action)
        return actions


def run_worker(address: str, *flags: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([BINARY, "--address", address, "--num-envs", "8", "--seed", "3", *flags],
                          capture_output=True, text=True, timeout=timeout)


def test_v2_steps_carry_the_named_board_the_column_mask_and_each_finished_games_stats(worker_binary):
    backend = Recorder()
    with ServerThread(backend) as server:
        result = run_worker(server.address, "--max-steps", "1600")
    assert result.returncode == 0 and "1600 env steps" in result.stderr, result.stderr
    assert "protocol 2" in result.stderr and not backend.violations, (result.stderr, backend.violations)
    assert backend.sessions[0].spec == SPEC_V2
    ended_games = 0
    for step in backend.steps[1:]:  # the first step of a stream only carries first observations
        board, mask = step.observation["board"], step.legal_mask["column"]
        assert not step.truncated.any() and not step.final_observation  # Connect Four is never cut off
        np.testing.assert_array_equal(mask, board[:, :, :, 5, :].sum(axis=2) == 0)  # columns whose top is empty
        np.testing.assert_array_equal(step.acting.sum(axis=1), 1)  # one seat to move
        win, moves, reward = step.episode_stats["win"], step.episode_stats["moves"], step.reward
        ended = step.terminated
        np.testing.assert_array_equal(win[ended], (reward[ended] > 0).astype(np.float32))
        np.testing.assert_array_equal(reward[ended].sum(axis=1), 0)  # zero-sum: +1/-1, or a 0/0 draw
        assert ((moves[ended] >= 7) & (moves[ended] <= 42)).all() and (moves[ended, 0] == moves[ended, 1]).all()
        draws = ended & (reward[:, 0] == 0)
        assert (moves[draws] == 42).all()  # a draw is a full board
        assert not win[~ended].any() and not moves[~ended].any()  # stats only where a game ends
        assert not board[ended].any()  # same-step autoreset: the new game's empty board
        ended_games += int(ended.sum())
    assert ended_games >= 20, ended_games


def test_bad_actions_from_the_host_are_replaced_or_refused_as_on_v1(worker_binary):
    # Out of range (-1, 7) and full columns (always 0) are not legal: the worker plays the first legal column.
    def out_of_range(step, action):
        return {"column": np.full_like(action["column"], -1 if step.sequence % 2 else 7)}

    for answer in (out_of_range, lambda step, action: {"column": np.zeros_like(action["column"])}):
        backend = Recorder(answer)
        with ServerThread(backend) as server:
            result = run_worker(server.address, "--max-steps", "800")
        assert result.returncode == 0 and "800 env steps" in result.stderr, result.stderr
        assert "illegal action(s); played the first legal column" in result.stderr, result.stderr
        assert backend.sessions[0].episodes > 0 and not backend.violations
    # An answer that is not the declared head is a broken host: the worker says what it got and exits 2.
    backend = Recorder(lambda step, action: {"col": action["column"]})
    with ServerThread(backend) as server:
        result = run_worker(server.address)
    assert result.returncode == 2 and "action holds heads ['col'], expected exactly ['column']" in result.stderr, \
        result.stderr
    backend = Recorder(lambda step, action: {"column": action["column"].astype(np.float32)})
    with ServerThread(backend) as server:
        result = run_worker(server.address)
    assert result.returncode == 2 and "action head 'column' has dtype FLOAT32, shape [8, 2] and 64 bytes, expected " \
        "INT32 [8, 2]" in result.stderr, result.stderr


def test_a_host_without_v2_gets_protocol_1(worker_binary):
    backend = FakeBackend()
    servicer = EnvServicer(backend)
    only_v1 = lambda server: server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        SERVICE_NAME, _v1_handlers(servicer)),))
    with ThreadedServer("127.0.0.1:0", lambda: [only_v1], [SERVICE_NAME], 2**20) as server:
        result = run_worker(server.address, "--max-steps", "80")
    assert result.returncode == 0 and "80 env steps" in result.stderr, result.stderr
    assert "no protocol 2 service (UNIMPLEMENTED); speaking protocol 1" in result.stderr, result.stderr
    assert [(s.protocol_version, v1_of_named(s.spec)) for s in backend.sessions] == [
        (1, EnvSpec("ConnectFour-cpp", (2, 6, 7), np.float32, 7, 8, 2, True, 1.0))]
    assert "0 reconnects" in result.stderr and not backend.violations


def test_a_bad_protocol_flag_exits_2_naming_it(worker_binary):
    result = run_worker("127.0.0.1:1", "--protocol", "3")
    assert result.returncode == 2 and "--protocol must be 1 or 2, got 3" in result.stderr, result.stderr


@pytest.mark.parametrize("protocol", [[], ["--protocol", "1"]], ids=["v2", "v1"])
def test_host_trains_on_the_cpp_worker(worker_binary, tmp_path, protocol):
    port = free_port()
    run_dir = tmp_path / "run"
    host_log, worker_log = tmp_path / "host.log", tmp_path / "worker.log"
    host = subprocess.Popen(
        SEEDLEAGUE + ["host", "--address", f"127.0.0.1:{port}", "--run-dir", str(run_dir),
                      "--max-learner-steps", "5", "--max-seconds", "120", "--unroll_length", "8",
                      "--batch_size", "4", "--replay.capacity", "64", "--network.hidden_sizes", "16",
                      "--network.torso", "mlp"],  # the worker is tested here, not the board torso (slow to compile)
        cwd=ROOT, stdout=open(host_log, "w"), stderr=subprocess.STDOUT,
    )
    # The worker retries with backoff until the host listens, so no need to wait for it.
    worker = subprocess.Popen(
        [worker_binary, "--address", f"127.0.0.1:{port}", "--num-envs", "8", "--seed", "1", *protocol],
        cwd=ROOT, stdout=open(worker_log, "w"), stderr=subprocess.STDOUT,
    )
    try:
        host_rc = host.wait(timeout=150)
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
        worker_alive_after_host = worker.poll() is None
        worker.terminate()  # SIGTERM: the worker stops cleanly
        worker_rc = worker.wait(timeout=15)
    logs = f"--- host ---\n{host_log.read_text()[-3000:]}\n--- worker ---\n{worker_log.read_text()[-2000:]}"
    assert host_rc == 0, logs
    with open(run_dir / "summary.json") as f:
        summary = json.load(f)
    assert summary["reason"] == "reached 5 learner steps", logs
    assert summary["learner_step"] >= 5 and summary["env_steps"] > 0, logs
    assert summary["episodes"] > 0, logs
    # A lost host means reconnect attempts, not an exit; SIGTERM then exits 0.
    assert worker_alive_after_host, logs
    assert worker_rc == 0, logs
    assert f"protocol {1 if protocol else 2})" in worker_log.read_text(), logs  # "connected to ... (..., protocol N)"
    # Either way the host runs the game on its flat model (one tensor, one discrete head: protocol.named.flat_model):
    # its checkpoints record the v1 spec (protocol 1), and the run's output is a v1 policy.
    meta = checkpoint_meta.read(str(run_dir / "checkpoints"))
    assert meta.record_protocol == 1, meta
    assert v1_of_named(meta.spec) == EnvSpec("ConnectFour-cpp", (2, 6, 7), np.float32, 7, 1), meta
    trained = load_trained(str(run_dir))
    assert trained.spec == PolicySpec("ConnectFour-cpp", (2, 6, 7), np.float32, 7), trained.spec


def wait_listening(port, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on port {port}")


def test_token_is_sent_and_refusals_exit_2(worker_binary, tmp_path):
    port = free_port()
    env = dict(os.environ, SEEDLEAGUE_TOKEN="s3cret")
    fake = subprocess.Popen(
        SEEDLEAGUE + ["fake-host", "--address", f"127.0.0.1:{port}", "--observation-shape", "2,6,7", "--num-actions", "7"],
        cwd=ROOT, env=env, stdout=open(tmp_path / "fake.log", "w"), stderr=subprocess.STDOUT,
    )
    try:
        wait_listening(port)
        no_token = {k: v for k, v in os.environ.items() if k != "SEEDLEAGUE_TOKEN"}
        cmd = [worker_binary, "--address", f"127.0.0.1:{port}", "--num-envs", "4"]
        refused = subprocess.run(cmd, env=no_token, capture_output=True, text=True, timeout=30)
        assert refused.returncode == 2 and "UNAUTHENTICATED" in refused.stderr, refused.stderr
        ok = subprocess.run(cmd + ["--max-steps", "400"], env=env, capture_output=True, text=True, timeout=30)
        assert ok.returncode == 0 and "400 env steps" in ok.stderr, ok.stderr
    finally:
        fake.terminate()
        fake.wait(timeout=15)
    assert "0 violations" in (tmp_path / "fake.log").read_text()


needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI for test certificates")


@needs_openssl
def test_tls_with_the_hosts_ca_and_a_token(worker_binary, tmp_path):
    cert, key = _make_certificate(tmp_path, "host")
    port = free_port()
    env = dict(os.environ, SEEDLEAGUE_TOKEN="s3cret")
    fake = subprocess.Popen(
        SEEDLEAGUE + ["fake-host", "--address", f"127.0.0.1:{port}", "--observation-shape", "2,6,7", "--num-actions", "7",
                      "--tls-cert", cert, "--tls-key", key],
        cwd=ROOT, env=env, stdout=open(tmp_path / "fake.log", "w"), stderr=subprocess.STDOUT,
    )
    try:
        wait_listening(port)
        ok = subprocess.run([worker_binary, "--address", f"localhost:{port}", "--num-envs", "4", "--tls-ca", cert,
                             "--max-steps", "400"], env=env, capture_output=True, text=True, timeout=30)
        assert ok.returncode == 0 and "400 env steps" in ok.stderr, ok.stderr
        assert f"connected to localhost:{port} over TLS" in ok.stderr, ok.stderr
    finally:
        fake.terminate()
        fake.wait(timeout=15)
    assert "0 violations" in (tmp_path / "fake.log").read_text()


@dataclasses.dataclass(frozen=True)
class MutualTls(ServerSecurity):
    """TLS that also demands a client certificate signed by `client_ca` (the real server, stricter credentials)."""

    client_ca: str = ""

    def credentials(self) -> grpc.ServerCredentials:
        cert, key, client_ca = (open(path, "rb").read() for path in (self.tls_cert, self.tls_key, self.client_ca))
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=client_ca, require_client_auth=True)


@needs_openssl
def test_a_client_certificate_and_a_server_name_override(worker_binary, tmp_path):
    # The host's certificate names only "seedleague-host", so connecting to 127.0.0.1 needs --tls-server-name;
    # the server refuses any client without a certificate signed by client.pem.
    host_cert, host_key = str(tmp_path / "host.pem"), str(tmp_path / "host.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", host_key,
                    "-out", host_cert, "-subj", "/CN=seedleague-host", "-addext", "subjectAltName=DNS:seedleague-host"],
                   check=True, capture_output=True, timeout=30)
    client_cert, client_key = _make_certificate(tmp_path, "client")
    backend = FakeBackend()
    security = MutualTls(tls_cert=host_cert, tls_key=host_key, client_ca=client_cert)
    with ServerThread(backend, security=security) as server:
        ok = subprocess.run([worker_binary, "--address", server.address, "--num-envs", "2", "--max-steps", "20",
                             "--tls-ca", host_cert, "--tls-server-name", "seedleague-host",
                             "--tls-cert", client_cert, "--tls-key", client_key],
                            capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0 and "20 env steps" in ok.stderr, ok.stderr
    assert len(backend.sessions) == 1 and backend.sessions[0].env_steps >= 20
    assert not backend.violations


@needs_openssl
def test_bad_tls_flags_exit_2_naming_the_flag(worker_binary, tmp_path):
    cert, key = _make_certificate(tmp_path, "host")
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello")
    cases = {
        ("--tls-ca", "/no/such.pem"): "--tls-ca '/no/such.pem' cannot be read",
        ("--tls-ca", str(not_pem)): f"--tls-ca '{not_pem}' holds no '-----BEGIN ...CERTIFICATE-----' PEM block",
        ("--tls-ca", cert, "--tls-cert", cert, "--tls-key", cert): f"--tls-key '{cert}' holds no '-----BEGIN ...PRIVATE KEY",
        ("--tls-ca", cert, "--tls-cert", cert): "give both --tls-cert and --tls-key",
        ("--tls-cert", cert, "--tls-key", key): "--tls-server-name, --tls-cert and --tls-key need --tls-ca",
    }
    for flags, problem in cases.items():
        result = subprocess.run([worker_binary, "--address", "127.0.0.1:1", *flags], capture_output=True, text=True,
                                timeout=30)
        assert result.returncode == 2 and problem in result.stderr, (flags, result.stderr)


# The test-sized run: a small MLP, short unrolls, snapshots every 3 updates, small opponent prefetches, and one Adam
# step an update (the game recipe takes 4 x 4, which on CPU a board torso's update unrolls: 16 convolution steps to
# compile): the run checks the worker, TLS, the league and the output, not learning.
SMALL_LEAGUE = ["--unroll-length", "4", "--batch-size", "8", "--network.hidden-sizes", "16", "--replay.capacity", "64",
                "--league.check-in-interval-s", "0.5", "--league.prefetch", "16",
                "--league-config.snapshot-interval-steps", "3", "--learner.epochs", "1", "--learner.minibatches", "1",
                "--no-eval"]


@pytest.fixture(scope="module")
def league_run(worker_binary, tmp_path_factory):
    """(run dir, console output) of the documented command (envs/cpp/README.md), over TLS with a token: the host
    serves the certificate, the worker's command trusts it. It runs until the league service's standings show a
    snapshot with rated games (an event: asked on each line it prints once its progress file counts games against
    the league), then gets Ctrl-C; --max-seconds is only a safety cap."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl CLI for test certificates")
    tmp_path = tmp_path_factory.mktemp("league")
    cert, key = _make_certificate(tmp_path, "host")
    run_dir = tmp_path / "run"
    command = f"{worker_binary} --address {{address}} --num-envs 16 --seed {{seed}} --tls-ca {cert}"
    run = subprocess.Popen(
        SEEDLEAGUE + ["train", "--worker-cmd", command, "--run-dir", str(run_dir), "--max-seconds", "150",
                      "--tls-cert", cert, "--tls-key", key] + SMALL_LEAGUE,
        cwd=ROOT, env=dict(os.environ, SEEDLEAGUE_TOKEN="s3cret"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )
    seen, league = [], None
    for line in run.stdout:
        seen.append(line)
        address = re.match(r"league service on (\S+);", line)
        if address:
            league = LeagueClient(address.group(1), ClientSecurity(token="s3cret", tls_ca=cert))
        against_league = league and any(tick.get("league_games") for tick in progress.read(str(run_dir)))
        if against_league and rated_snapshots(league.standings()):
            run.send_signal(signal.SIGINT)
            break
    if league:
        league.close()
    rest, _ = run.communicate(timeout=90)
    output = "".join(seen) + rest
    assert run.returncode == 0, output[-4000:]
    return run_dir, output


def rated_snapshots(standings) -> list:
    """The league snapshots (keys player:step) that have rated games."""
    return [row for row in standings if ":" in row.key and row.games > 0]


def test_train_worker_cmd_runs_a_league_over_tls_with_rated_games_between_snapshots(league_run):
    run_dir, output = league_run
    assert ("'ConnectFour-cpp' (protocol v2): observation {board float32[2x6x7]}, action {column discrete(7, legal "
            "mask)}, 16 envs x 2 seats, stats ['win', 'moves'], teams [0, 1]") in output, output[-4000:]
    # One tensor and one discrete head: the host trains it on the flat model, the board torso for [C, H, W] planes.
    trained = load_trained(run_dir)
    assert trained.network_config.torso == "board" and isinstance(trained.spec, PolicySpec), trained.spec
    ticks = progress.read(str(run_dir))
    # The worker's episode stats reach the host's metrics: each seat wins at most half of the games, draws none.
    wins = [tick["episode_stats/win"] for tick in ticks if "episode_stats/win" in tick]
    moves = [tick["episode_stats/moves"] for tick in ticks if "episode_stats/moves" in tick]
    assert wins and all(0 <= w <= 0.5 for w in wins) and moves and all(7 <= m <= 42 for m in moves), ticks[-1]
    result = summary(run_dir)
    assert result["reason"] == "interrupted", output[-4000:]
    assert result["worker_restarts"] == 0 and result["league_games"] > 0, output[-4000:]
    standings = [Standing(**dict(row, role=Role(row["role"]))) for row in result["standings"]]
    assert rated_snapshots(standings), result["standings"]  # snapshots frozen into the pool, rated by games against them
    worker_log = (run_dir / "logs" / "worker-0.log").read_text()
    assert "over TLS" in worker_log and "UNAUTHENTICATED" not in worker_log, worker_log[-2000:]
    assert "got signal" in worker_log and "stopped:" in worker_log, worker_log[-2000:]  # stopped, not killed


def test_the_runs_exported_onnx_acts_as_its_served_policy(league_run, tmp_path):
    """The run's output, exported to ONNX, picks the same greedy actions in onnxruntime as `seedleague serve`
    answers over gRPC for the same boards and legal masks; the v2 worker plays against that served output."""
    run_dir, _ = league_run
    port = free_port()
    serve = subprocess.Popen(SEEDLEAGUE + ["serve", "--checkpoint", str(run_dir), "--address", f"127.0.0.1:{port}",
                                           "--run-dir", str(tmp_path / "serve"), "--greedy", "true"],
                             cwd=ROOT, stdout=open(tmp_path / "serve.log", "w"), stderr=subprocess.STDOUT)
    try:
        # In this process while serve starts: the exporter's one-time set-up is then shared with test_export.py.
        assert main(["export", "--run-dir", str(run_dir), "--format", "onnx", "--out", str(tmp_path / "policy.onnx")]) == 0
        sidecar = json.loads((tmp_path / "policy.onnx.json").read_text())
        assert sidecar["kind"] == "policy" and sidecar["observation"]["env_name"] == "ConnectFour-cpp", sidecar
        wait_listening(port, timeout=90)
        spec = EnvSpec("ConnectFour-cpp", (2, 6, 7), np.float32, 7, num_envs=64, num_seats=2, has_legal_mask=True)
        rng = np.random.default_rng(0)
        step = zero_step(spec, acting=True)
        step.observation = (rng.random(step.observation.shape) < 0.3).astype(np.float32)  # stones on both planes
        step.legal_mask = rng.random(step.legal_mask.shape) < 0.6
        step.legal_mask[..., 3] = True  # every row has a legal column
        worker = RawWorker(f"127.0.0.1:{port}", spec)
        step.session_id = worker.session_id
        served = codec.decode_actions(worker.send(codec.encode_step(step))).action
        worker.close()
        # The worker itself, on protocol v2, plays against the served (v1-model) output.
        played = run_worker(f"127.0.0.1:{port}", "--max-steps", "160", timeout=60)
        assert played.returncode == 0 and "160 env steps" in played.stderr, played.stderr
        assert "protocol 2" in played.stderr and "illegal" not in played.stderr, played.stderr
    finally:
        serve.terminate()
        serve.wait(timeout=60)
    session = ort.InferenceSession(str(tmp_path / "policy.onnx"), providers=["CPUExecutionProvider"])
    observation, mask = step.observation.reshape(-1, 2, 6, 7), step.legal_mask.reshape(-1, 7)
    probs = session.run(["probabilities"], {"observation": observation, "legal_mask": mask})[0]
    top2 = np.sort(probs, axis=-1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 1e-4  # rows whose greedy action does not hang on float rounding
    assert clear.sum() >= 100, probs
    np.testing.assert_array_equal(served.reshape(-1)[clear], probs.argmax(-1)[clear])
    assert mask[np.arange(len(mask)), served.reshape(-1)].all()
