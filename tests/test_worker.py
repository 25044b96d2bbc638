"""The worker side: WorkerClient in-process, and the gym worker as a real process, against a FakeBackend."""

from __future__ import annotations

import importlib.util
import pathlib
import signal
import subprocess
import sys
import threading
import time

import grpc
import numpy as np
import pytest

from envs.gym_vector import make_vector_env
from envs.gym_worker import UnsupportedEnv, WorkerConfig, env_spec, run_worker
from envs import worker_loop
from envs.worker_loop import GameWorkerConfig, split_envs
from seedleague.protocol.client import (
    Backoff,
    ClientConfig,
    ConnectionLost,
    HostRefused,
    WorkerClient,
    classify_rpc_error,
)
from seedleague.protocol import codec
from seedleague.protocol.client_v2 import NamedWorkerClient
from seedleague.protocol.specs import EnvSpec
from seedleague.protocol.named import v1_of_named
from seedleague.testing.fakes import FakeBackend, FakeHostConfig
from seedleague.testing.server_thread import ServerThread
from tests.conftest import wait_for
from seedleague.v1 import env_pb2
from tests.system_deps import build_native_stream

ROOT = pathlib.Path(__file__).resolve().parents[1]
SPEC = EnvSpec("test", observation_shape=(4,), observation_dtype=np.float32, num_actions=2, num_envs=3)


def _zeros(spec: EnvSpec = SPEC):
    return (
        np.zeros((spec.num_envs,) + spec.observation_shape, np.float64),
        np.zeros(spec.num_envs, np.float64),
        np.zeros(spec.num_envs, bool),
        np.zeros(spec.num_envs, bool),
    )


def _client(server: ServerThread, spec: EnvSpec = SPEC, **config) -> WorkerClient:
    """A client of `server`; `native_stream="on"` builds the native stream first (`make native-stream`), or skips
    without the C++ toolchain."""
    if config.get("native_stream") == "on":
        build_native_stream()
    return WorkerClient(ClientConfig(server.address, worker_name="test", backoff_initial_s=0.05, **config), spec)


class _Error(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode):
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return "text from the host"


# --- WorkerClient, in-process -------------------------------------------------------------------


@pytest.mark.parametrize(
    "code, during, refused",
    [
        ("INVALID_ARGUMENT", "stream", True),
        ("INVALID_ARGUMENT", "handshake", True),
        ("RESOURCE_EXHAUSTED", "stream", True),
        ("UNIMPLEMENTED", "handshake", True),
        ("FAILED_PRECONDITION", "handshake", True),
        ("FAILED_PRECONDITION", "stream", False),  # unknown session: the host restarted
        ("UNAVAILABLE", "stream", False),
        ("CANCELLED", "stream", False),
        ("DEADLINE_EXCEEDED", "handshake", False),
        ("INTERNAL", "stream", False),
        ("UNKNOWN", "stream", False),
    ],
)
def test_rpc_errors_are_classified(code, during, refused):
    error = classify_rpc_error(_Error(grpc.StatusCode[code]), during)
    assert isinstance(error, HostRefused if refused else ConnectionLost)
    assert code in str(error) and "text from the host" in str(error)


def test_backoff_grows_and_is_capped():
    backoff = Backoff(0.1, 1.0)
    delays = [backoff.next() for _ in range(8)]
    assert 0.05 <= delays[0] <= 0.15 and all(d <= 1.0 for d in delays) and delays[-1] >= 0.5
    backoff.reset()
    assert backoff.next() <= 0.15


def test_client_config_names_bad_fields():
    with pytest.raises(ValueError, match="address.*backoff_initial_s"):
        ClientConfig("nowhere", backoff_initial_s=0.0)


@pytest.mark.parametrize("stream", ["off", "on"], ids=["grpcio", "native"])
def test_client_steps_in_lockstep(stream):
    backend = FakeBackend(FakeHostConfig(policy_version=7))
    with ServerThread(backend) as server:
        client = _client(server, native_stream=stream)
        client.connect()
        for _ in range(10):
            actions = client.step(*_zeros())  # seatless [E, ...] float64 inputs are accepted and cast
            assert actions.shape == (3, 1) and actions.dtype == np.int32
        client.close()
    assert client.policy_version == 7
    session = backend.sessions[0]
    assert session.steps == 10 and session.worker_name == "test" and backend.violations == []
    observation = session.last_step.observation["observation"]  # a v1 step, as the host sees it: one named tensor
    assert observation.shape == (3, 1, 4) and observation.dtype == np.float32


def test_client_rejects_wrong_input_shape_locally():
    with ServerThread(FakeBackend()) as server:
        client = _client(server)
        client.connect()
        observation, reward, terminated, truncated = _zeros()
        with pytest.raises(ValueError, match=r"observation has shape \(3, 5\)"):
            client.step(np.zeros((3, 5)), reward, terminated, truncated)
        client.step(observation, reward, terminated, truncated)  # The stream is still usable.
        client.close()


@pytest.mark.parametrize("stream", ["off", "on"], ids=["grpcio", "native"])
def test_client_bad_data_is_host_refused_with_the_hosts_message(stream):
    with ServerThread(FakeBackend()) as server:
        client = _client(server, native_stream=stream)
        client.connect()
        observation, reward, terminated, truncated = _zeros()
        client.step(observation, reward, terminated, truncated)
        observation[1, 2] = np.nan
        with pytest.raises(HostRefused, match="INVALID_ARGUMENT.*non-finite.*index \\[1, 0, 2\\]"):
            client.step(observation, reward, terminated, truncated)
        client.close()


def test_client_spec_refused_at_handshake():
    with ServerThread(FakeBackend(FakeHostConfig(observation_shape=(8,)))) as server:
        with pytest.raises(HostRefused, match="FAILED_PRECONDITION.*observation shape"):
            _client(server).connect()


def test_client_refuses_steps_larger_than_the_host_accepts():
    spec = EnvSpec("big", (10_000,), np.float32, num_actions=2, num_envs=4)
    with ServerThread(FakeBackend(FakeHostConfig(max_message_bytes=64 * 1024))) as server:
        with pytest.raises(HostRefused, match="one step of 4 envs .* bytes.*fewer envs"):
            _client(server, spec).connect()


@pytest.mark.parametrize("stream", ["off", "on"], ids=["grpcio", "native"])
def test_client_connection_lost_and_reconnect_after_host_restart(stream):
    backend = FakeBackend()
    with ServerThread(backend) as server:
        client = _client(server, native_stream=stream)
        client.connect()
        client.step(*_zeros())
        server.stop()
        with pytest.raises(ConnectionLost):
            client.step(*_zeros())
        with pytest.raises(ConnectionLost, match="not reachable"):
            WorkerClient(ClientConfig(server.address, connect_timeout_s=0.2), SPEC).connect()
        server.start()
        client.connect()
        client.step(*_zeros())
        client.close()
    assert [s.steps for s in backend.sessions] == [1, 1]
    with pytest.raises(ConnectionLost, match="closed"):
        client.step(*_zeros())


def test_close_from_another_thread_unblocks_connect():
    # Nothing listens on this port, so connect waits for the channel until closed.
    client = WorkerClient(ClientConfig("127.0.0.1:1", connect_timeout_s=30), SPEC)
    threading.Timer(0.2, client.close).start()
    with pytest.raises(ConnectionLost, match="connect cancelled: client closed"):  # not its 30 s timeout
        client.connect()


# --- the gym worker, in-process -----------------------------------------------------------------


def _loop(address: str) -> GameWorkerConfig:
    return GameWorkerConfig(client=ClientConfig(address, backoff_initial_s=0.05))


def test_worker_config_names_bad_fields():
    with pytest.raises(ValueError, match="num_envs.*vector.*loop"):
        WorkerConfig(env_id="CartPole-v1", num_envs=0, loop=None, vector="fast")
    with pytest.raises(ValueError, match="address"):
        WorkerConfig(env_id="CartPole-v1", num_envs=1, loop=_loop("nowhere"))


def test_env_spec_of_cartpole_and_unsupported_envs():
    envs, _ = make_vector_env("CartPole-v1", 2, "sync")
    named = env_spec("CartPole-v1", envs)  # v1's form: one tensor "observation", one head "action"
    assert v1_of_named(named) == EnvSpec("CartPole-v1", (4,), np.float32, num_actions=2, num_envs=2)
    assert ([t.name for t in named.observation.tensors], [h.name for h in named.action.heads]) == (["observation"],
                                                                                                  ["action"])
    envs.close()
    envs, _ = make_vector_env("Pendulum-v1", 1, "sync")
    with pytest.raises(UnsupportedEnv, match="v1 spec takes Discrete only"):
        env_spec("Pendulum-v1", envs)
    envs.close()
    with pytest.raises(UnsupportedEnv, match="NoSuchGame"):
        make_vector_env("NoSuchGame-v0", 1)


def test_a_game_says_which_protocol_it_speaks_on_the_wire_and_one_that_does_not_is_refused_naming_the_attribute():
    from envs.tug_worker import TugGame

    assert worker_loop.wire_protocol(TugGame(1)) == 2
    game = TugGame(1)
    for bad in (None, 3):
        game.protocol = bad
        with pytest.raises(ValueError, match=rf"TugGame.protocol must be 1 or 2 .*got {bad}"):
            worker_loop.run_game_worker(game, GameWorkerConfig(ClientConfig(address="127.0.0.1:1")))


class _Recorder:
    """A stream in gRPC's place that keeps every StepBatch's bytes and answers action 0 for every seat."""

    kind = "recorder"

    def __init__(self, shape: tuple[int, int]):
        self.sent: list[bytes] = []
        self._answer = codec.encode_tensor(np.zeros(shape, np.int32))

    def exchange(self, message):
        self.sent.append(message.SerializeToString())
        return env_pb2.ActionBatch(sequence=message.sequence, action=self._answer)


def _kuhn(num_envs: int):
    from envs.openspiel_worker import OpenSpielVectorGame

    return OpenSpielVectorGame("kuhn_poker", num_envs, seed=3)  # action 0 (pass, or fold) is always legal


def _cartpole(num_envs: int):
    from envs.gym_worker import GymVectorGame

    return GymVectorGame("CartPole-v1", make_vector_env("CartPole-v1", num_envs, "sync")[0])


@pytest.mark.parametrize("make_game, old_spec", [
    (_kuhn, EnvSpec("openspiel:kuhn_poker", (11,), np.float32, 2, 4, 2, True, 2.0)),
    (_cartpole, EnvSpec("CartPole-v1", (4,), np.float32, 2, 4)),
])
def test_a_named_game_of_v1s_form_sends_v1_byte_for_byte_as_a_v1_client_with_its_old_spec(make_game, old_spec):
    # The promise to v1 hosts: a game's named spec and dicts turn back into v1 only in the client's adapter, and
    # what reaches the wire is what v1's WorkerClient sent for the EnvSpec the game declared before (fed its arrays).
    config = ClientConfig("127.0.0.1:1", worker_name="w", native_stream="off")
    old, games = WorkerClient(config, old_spec), [make_game(4), make_game(4)]
    named = NamedWorkerClient(config, games[1].spec, protocol=games[1].protocol)
    assert named._v1._handshake_request().SerializeToString() == old._handshake_request().SerializeToString()
    sent = []
    for client, game in zip((old, named._v1), games):
        client._stream = recorder = _Recorder((4, old_spec.num_seats))
        client._set_template("session")
        step = game.reset(3)
        for _ in range(30):
            if client is old:
                mask = step.legal_mask["action"] if step.legal_mask else None
                actions = {"action": old.step(step.observation["observation"], step.reward, step.terminated,
                                              step.truncated, mask, step.acting)}
            else:
                actions = worker_loop._exchange(named, step)
            step = game.step(actions)
        sent.append(recorder.sent)
        game.close()
    assert len(sent[0]) == 30 and sent[1] == sent[0]


def test_run_worker_in_process_stops_on_event():
    backend = FakeBackend()
    stop = threading.Event()
    with ServerThread(backend) as server:
        config = WorkerConfig(env_id="CartPole-v1", num_envs=4, loop=_loop(server.address))
        threading.Timer(0.5, stop.set).start()
        stats = run_worker(config, stop)
    assert stats.steps > 10 and stats.env_steps == 4 * stats.steps and stats.sessions == 1
    # The stop may cancel a step the host already answered: that one is not counted by the worker.
    assert backend.sessions[0].steps in (stats.steps, stats.steps + 1)


# --- the gym worker as a process ----------------------------------------------------------------


def test_gym_worker_does_not_import_jax():
    script = "import sys, envs.gym_worker; assert 'jax' not in sys.modules, 'the worker imported jax'"
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, check=True, timeout=60)


def _spawn(address: str, *args: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "envs.gym_worker", "--address", address, "--backoff-initial", "0.05"]
    command += ["--backoff-max", "0.3", "--log-interval", "1", *args]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(worker: subprocess.Popen, timeout_s: float = 30) -> tuple[int, str]:
    try:
        output, _ = worker.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        worker.kill()
        output, _ = worker.communicate()
        raise AssertionError(f"worker did not exit in {timeout_s} s:\n{output}")
    return worker.returncode, output


class _CartPoleChecks:
    """on_step hook: CartPole's episode boundaries as the host sees them, in any autoreset mode.

    Same-step: an ended env shows a fresh reset at once. Next-step: it shows its
    final observation with `acting` false, then a fresh reset with reward 0.
    """

    def __init__(self):
        self.problems: list[str] = []
        self._acted = None  # [E] bool: acting on the previous message

    def __call__(self, session, step) -> None:
        acting = np.ones(step.terminated.shape, bool) if step.acting is None else step.acting[:, 0]
        acted, self._acted = self._acted, acting
        if acted is None:
            return  # First message of the stream: first observations, flags ignored.
        where, reward, ended = f"step {step.sequence}", step.reward[:, 0], step.terminated | step.truncated
        observation = step.observation["observation"]
        cart, pole = observation[:, 0, 0], observation[:, 0, 2]
        fresh = np.abs(observation[:, 0]).max(axis=-1) <= 0.05
        if not (reward[acted] == 1.0).all():
            self.problems.append(f"{where}: CartPole reward other than 1 after an action: {reward}")
        if not (reward[~acted] == 0.0).all() or (ended & ~acted).any():
            self.problems.append(f"{where}: a reward or an episode end without an action")
        if (ended & acting & ~fresh).any() or (~acted & ~fresh).any():
            self.problems.append(f"{where}: an env starting an episode does not show a fresh reset")
        if (~acting & ~ended).any():
            self.problems.append(f"{where}: an env that did not end is not acting")
        # CartPole's bounds: 2.4 and 12 degrees (0.20944 rad), less float32 rounding of the observation.
        shows_end = (np.abs(cart) > 2.4 - 1e-6) | (np.abs(pole) > np.radians(12) - 1e-6)
        if (~acting & step.terminated & ~shows_end).any():
            self.problems.append(f"{where}: a terminated env's final observation is inside the bounds")


@pytest.mark.parametrize("vector", ["auto", "sync"])  # auto: CartPole's native vector env, next-step autoreset
def test_gym_worker_process_steps_cartpole(vector):
    checks = _CartPoleChecks()
    backend = FakeBackend(on_step=checks)
    with ServerThread(backend) as server:
        worker = _spawn(server.address, "--env", "CartPole-v1", "--num-envs", "8", "--max-steps", "2400",
                        "--vector", vector)
        code, output = _finish(worker)
    assert code == 0, output
    (session,) = backend.sessions
    assert v1_of_named(session.spec) == EnvSpec("CartPole-v1", (4,), np.float32, num_actions=2, num_envs=8)
    assert session.protocol_version == 1  # a Box + Discrete env: named in the worker, v1 on the wire as always
    assert session.steps == 300 and backend.violations == [] and checks.problems == []
    assert session.episodes >= 40  # Random CartPole episodes last ~22 steps: 2400 env steps.
    assert all(ret == (float(length),) for ret, length in zip(session.episode_returns, session.episode_lengths))
    assert min(session.episode_lengths) >= 8
    assert ("native vector env" if vector == "auto" else "sync vector env") in output and "stopped" in output


def test_gym_worker_streams_step_their_groups_as_sessions_of_their_own():
    """--streams 2: the envs split 5 + 4, each group on its own stream (double-buffered sampling), the budget
    shared, and every stream's episodes whole as the host sees them."""
    checks: dict[str, _CartPoleChecks] = {}
    backend = FakeBackend(on_step=lambda session, step: checks.setdefault(session.session_id, _CartPoleChecks())(
        session, step))
    with ServerThread(backend) as server:
        worker = _spawn(server.address, "--env", "CartPole-v1", "--num-envs", "9", "--streams", "2",
                        "--max-steps", "2400", "--worker-name", "w")
        code, output = _finish(worker)
    assert code == 0, output
    sessions = sorted(backend.sessions, key=lambda session: session.worker_name)
    assert [(s.worker_name, s.spec.num_envs) for s in sessions] == [("w/0", 5), ("w/1", 4)]
    assert [s.steps for s in sessions] == [240, 300]  # 1200 env steps each: half the budget
    assert backend.violations == [] and [c.problems for c in checks.values()] == [[], []]
    assert all(s.episodes >= 20 for s in sessions) and "stopped" in output


def test_gym_worker_refuses_more_streams_than_envs_and_stops_every_stream_on_a_refusal():
    with ServerThread(FakeBackend()) as server:
        code, output = _finish(_spawn(server.address, "--env", "CartPole-v1", "--num-envs", "2", "--streams", "3"))
    assert code == 2 and "--streams must be between 1 and --num-envs (2)" in output, output
    backend = FakeBackend(FakeHostConfig(num_actions=3))
    with ServerThread(backend) as server:
        code, output = _finish(_spawn(server.address, "--env", "CartPole-v1", "--num-envs", "4", "--streams", "2"))
    assert code == 2 and "2 actions do not fit the model's 3" in output, output


def test_split_envs_spreads_the_remainder_over_the_first_groups():
    assert split_envs(9, 2) == [5, 4] and split_envs(8, 4) == [2, 2, 2, 2] and split_envs(3, 3) == [1, 1, 1]
    with pytest.raises(ValueError, match="between 1 and --num-envs"):
        split_envs(2, 0)


def test_gym_worker_reconnects_after_host_restart():
    backend = FakeBackend()
    server = ServerThread(backend).start()
    worker = _spawn(server.address, "--env", "CartPole-v1", "--num-envs", "4")
    try:
        wait_for(lambda: backend.sessions and backend.sessions[0].steps > 20, what="first session")
        server.stop()
        time.sleep(0.3)  # The worker finds nobody there and backs off.
        server.start()
        wait_for(lambda: len(backend.sessions) == 2 and backend.sessions[1].steps > 20, what="second session")
        worker.send_signal(signal.SIGTERM)
        code, output = _finish(worker)
    finally:
        worker.kill()
        server.stop()
    assert code == 0, output
    assert "reconnecting" in output and backend.violations == []
    assert backend.sessions[0].closed is not None and backend.sessions[1].closed is not None


def test_gym_worker_exits_nonzero_when_the_host_refuses():
    backend = FakeBackend(FakeHostConfig(num_actions=3))
    with ServerThread(backend) as server:
        worker = _spawn(server.address, "--env", "CartPole-v1", "--num-envs", "2")
        code, output = _finish(worker)
    assert code == 2, output
    assert "FAILED_PRECONDITION" in output and "2 actions do not fit the model's 3" in output


def test_gym_worker_sigterm_exits_zero():
    backend = FakeBackend()
    with ServerThread(backend) as server:
        worker = _spawn(server.address, "--env", "CartPole-v1", "--num-envs", "2")
        try:
            wait_for(lambda: backend.sessions and backend.sessions[0].steps > 10, what="steps")
            worker.send_signal(signal.SIGTERM)
            code, output = _finish(worker, timeout_s=10)
        finally:
            worker.kill()
        wait_for(lambda: backend.sessions[0].closed is not None, what="session close")
    assert code == 0, output
    assert "got SIGTERM" in output and "stopped" in output


HANGS_AFTER_THE_STOP = """
import threading
from envs import worker_loop
worker_loop.STOP_GRACE_S = 0.5
stop = threading.Event()
worker_loop.stop_on_signals(stop)
print("ready", flush=True)
stop.wait()
threading.Event().wait()  # a teardown that never returns
"""


def test_a_worker_that_hangs_after_sigterm_prints_its_stacks_and_exits():
    worker = subprocess.Popen([sys.executable, "-c", HANGS_AFTER_THE_STOP], cwd=pathlib.Path(__file__).parent.parent,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert worker.stdout.readline() == "ready\n"
        worker.send_signal(signal.SIGTERM)
        code, output = _finish(worker)
    finally:
        worker.kill()
    assert code == 1, output  # faulthandler's exit, not the SIGTERM's default death (-15)
    assert "Thread" in output and 'File "<string>", line 9' in output, output  # where the main thread hung


@pytest.mark.skipif(
    importlib.util.find_spec("ale_py") is None or importlib.util.find_spec("cv2") is None,
    reason="Atari needs ale-py and opencv-python-headless (gymnasium's AtariPreprocessing resizes with cv2)",
)
def test_gym_worker_process_atari_observations():
    backend = FakeBackend()
    with ServerThread(backend) as server:
        worker = _spawn(server.address, "--env", "ALE/Pong-v5", "--num-envs", "2", "--max-steps", "10")
        code, output = _finish(worker, timeout_s=60)
    assert code == 0, output
    (session,) = backend.sessions
    spec = v1_of_named(session.spec)
    assert spec.observation_shape == (84, 84, 4) and spec.observation_dtype == np.uint8
    assert spec.num_actions == 6 and session.steps == 5 and "native vector env" in output
    observation = session.last_step.observation["observation"]
    assert observation.shape == (2, 1, 84, 84, 4) and observation.dtype == np.uint8 and observation.any()


def _resident_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20


def test_client_memory_stays_flat_over_many_large_steps():
    # upb keeps every bytes value assigned to a message until the message dies: a
    # StepBatch reused across steps grew by a whole step each time (the OpenSpiel
    # worker reached 6 GB in 8 minutes of connect_four). 400 steps of 256 KiB here
    # would have added ~100 MiB.
    spec = EnvSpec("big", observation_shape=(64, 256), observation_dtype=np.float32, num_actions=2, num_envs=4)
    observation = np.ones((spec.num_envs,) + spec.observation_shape, np.float32)
    with ServerThread(FakeBackend(FakeHostConfig())) as server:
        client = _client(server, spec)
        client.connect()
        zeros = _zeros(spec)
        for _ in range(50):  # warm up allocators and gRPC buffers
            client.step(observation, *zeros[1:])
        before = _resident_mib()
        for _ in range(400):
            client.step(observation, *zeros[1:])
        grown = _resident_mib() - before
        client.close()
    assert grown < 40, f"resident memory grew {grown:.1f} MiB over 400 steps of 256 KiB"
