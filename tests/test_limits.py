"""Limits as configuration, and hostile input over real sockets.

- the league's token bucket (hand-checked, then over a socket: RESOURCE_EXHAUSTED for the noisy
  client while another is served);
- hostile messages sent to a real training host and to a real league server: each gets its status,
  a good client on the same server keeps being served, and the server's memory stays bounded;
- the per-stream idle deadline, on the servicer alone (a fake backend: fast).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import queue
import threading
import time
import types
import uuid

import grpc
import numpy as np
import pytest

from conftest import RawWorker, good_step, vector_spec, wait_for
from seedleague.host.session_limits import SessionLimits, check_spec
from seedleague.league.client import LeagueClient
from seedleague.league.config import LeagueConfig
from seedleague.league.server import LeagueServer
from seedleague.league.service import League
from seedleague.league.servicer import RateLimiter, refill
from seedleague.league.types import MatchResult, Role
from seedleague.protocol import codec
from seedleague.protocol.channel import channel_options
from seedleague.protocol.errors import ProtocolError
from seedleague.protocol.specs import EnvSpec, zero_step
from seedleague.protocol.named import named_of_v1
from seedleague.testing.fakes import FakeBackend
from seedleague.testing.server_thread import ServerThread
from seedleague.v1 import env_pb2 as pb
from seedleague.v1 import env_pb2_grpc
from seedleague.v1 import league_pb2 as lpb
from seedleague.v1 import league_pb2_grpc

RSS_GROWTH_BOUND = 32 << 20  # generous (measured: under 1 MiB per 600 messages); a leaked stream each would show


def rss_bytes() -> int:
    """This process's resident set size (the servers under test run in it), after a collection and
    handing freed heap back to the OS, so the number tracks live memory rather than the allocator."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def status_of(call) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as error:
        call()
    return error.value.code(), error.value.details() or ""


# --- limits as configuration ----------------------------------------------------------------------


def test_token_bucket_by_hand():
    now = [0.0]
    limiter = RateLimiter(rate=2.0, burst=3, max_clients=2, clock=lambda: now[0])
    assert [limiter.allow("a") for _ in range(4)] == [True, True, True, False]  # the burst, then empty
    now[0] = 0.5  # +1 token at 2/s
    assert [limiter.allow("a") for _ in range(2)] == [True, False]
    assert limiter.allow("b")  # another client has its own bucket
    now[0] = 100.0
    assert [limiter.allow("a") for _ in range(4)] == [True, True, True, False]  # refilled to the burst, no more
    limiter.allow("c")  # a third client: the least recently used ("b") is forgotten
    assert len(limiter._buckets) == 2 and "b" not in limiter._buckets
    assert all(RateLimiter(0.0, 1).allow("x") for _ in range(10_000))  # 0: no limit
    assert refill(0.0, 0.25, 4.0, 10) == 1.0 and refill(9.5, 10.0, 4.0, 10) == 10.0
    assert refill(2.0, -1.0, 4.0, 10) == 2.0  # a clock that went backwards adds nothing


def test_limits_are_validated_with_a_message_saying_what_to_change():
    with pytest.raises(ValueError, match="stream_idle_timeout_s must be >= 0"):
        SessionLimits(stream_idle_timeout_s=-1)
    with pytest.raises(ValueError, match="max_num_actions must be >= 1"):
        SessionLimits(max_num_actions=0)
    assert SessionLimits(stream_idle_timeout_s=0).stream_idle_timeout_s == 0  # no deadline
    with pytest.raises(ValueError, match="max_requests_per_s must be >= 0"):
        LeagueConfig(max_requests_per_s=-1)
    with pytest.raises(ValueError, match="request_burst must be >= 1"):
        LeagueConfig(request_burst=0)


def test_handshake_limits_on_actions_and_observation_size():
    limits = SessionLimits(max_num_actions=8, max_observation_elements=100)
    check_spec(named_of_v1(EnvSpec("ok", (10, 10), np.uint8, 8, 1)), limits)
    for spec, words in [(EnvSpec("a", (3,), np.float32, 9, 1), "max_num_actions"),
                        (EnvSpec("o", (10, 11), np.uint8, 2, 1), "max_observation_elements")]:
        with pytest.raises(ProtocolError, match=words) as error:
            check_spec(named_of_v1(spec), limits)
        assert error.value.code == "RESOURCE_EXHAUSTED"


def test_league_rate_limit_over_a_socket(tmp_path):
    # One token a second: the burst's five calls must not outlast a refill, even on a starved CPU.
    league = League(LeagueConfig(max_requests_per_s=1.0, request_burst=5), str(tmp_path / "league.sqlite"))
    with LeagueServer(league) as server:
        noisy = LeagueClient(server.address, retry_deadline_s=0)
        noisy.register_player("main", Role.MAIN)
        for _ in range(4):
            noisy.players()  # 5 calls: the burst
        with pytest.raises(ProtocolError, match="max_requests_per_s") as error:
            noisy.players()
        assert error.value.code == "RESOURCE_EXHAUSTED"
        # Another connection (its own subchannel: channels in one process otherwise share one) has its own bucket.
        options = channel_options(1 << 20) + [("grpc.use_local_subchannel_pool", 1)]
        with grpc.insecure_channel(server.address, options=options) as channel:
            calm = league_pb2_grpc.LeagueServiceStub(channel)
            assert [p.name for p in calm.ListPlayers(lpb.ListPlayersRequest(), timeout=5).players] == ["main"]
        time.sleep(1.1)  # 1/s: one token back
        assert noisy.standings() is not None
        noisy.close()
    league.close()


# --- hostile input to a real training host -------------------------------------------------------


class RawStream:
    """A Stream call that sends raw bytes, so tests can send what no encoder would."""

    def __init__(self, channel: grpc.Channel):
        self._method = channel.stream_stream("/seedleague.v1.EnvService/Stream")

    def send(self, data: bytes) -> bytes:
        """Send `data` as the stream's one message, then half-close; the first reply."""
        return next(self._method(iter([data]), timeout=30))


def _step_with(worker: RawWorker, mutate) -> bytes:
    message = codec.encode_step(good_step(worker.spec, worker.session_id, worker.sequence))
    mutate(message)
    return message.SerializeToString()


def _tensor(field: str, dtype: int, shape: list, data: bytes = b""):
    return lambda m: getattr(m, field).CopyFrom(pb.Tensor(dtype=dtype, shape=shape, data=data))


STREAM_CASES = {
    "random bytes": (lambda w: b"\xff\xfe\x00garbage", "INVALID_ARGUMENT", "not a valid seedleague.v1.StepBatch"),
    "truncated step": (lambda w: _step_with(w, lambda m: None)[:-7], "INVALID_ARGUMENT", "not a valid"),
    "2^40 elements": (lambda w: _step_with(w, _tensor("observation", pb.FLOAT32, [1 << 20, 1 << 20])),
                      "RESOURCE_EXHAUSTED", "elements"),
    "zero beside huge dims": (lambda w: _step_with(w, _tensor("observation", pb.FLOAT32, [0, 1 << 62])),
                              "RESOURCE_EXHAUSTED", "spans"),
    "40 dimensions": (lambda w: _step_with(w, _tensor("reward", pb.FLOAT32, [1] * 40, b"\0" * 4)),
                      "INVALID_ARGUMENT", "40 dimensions"),
    "negative dims": (lambda w: _step_with(w, _tensor("reward", pb.FLOAT32, [-2, -1], b"\0" * 8)),
                      "INVALID_ARGUMENT", "negative"),
    "shape/bytes mismatch": (lambda w: _step_with(w, _tensor("reward", pb.FLOAT32, [2, 1], b"\0" * 5)),
                             "INVALID_ARGUMENT", "5 data bytes"),
    "dtype enum 99": (lambda w: _step_with(w, lambda m: setattr(m.observation, "dtype", 99)),
                      "INVALID_ARGUMENT", "enum value 99"),
    "inf observation": (lambda w: _step_with(w, lambda m: codec.encode_tensor(
        np.full((2, 1, 3), -np.inf, np.float32), m.observation)), "INVALID_ARGUMENT", "non-finite"),
    "unknown seat": (lambda w: _step_with(w, lambda m: codec.encode_tensor(np.zeros((2, 2), np.float32), m.reward)),
                     "INVALID_ARGUMENT", "reward has shape (2, 2)"),
    "200 kB session id": (lambda w: _step_with(w, lambda m: setattr(m, "session_id", "x" * 200_000)),
                          "FAILED_PRECONDITION", "chars)"),
}


@pytest.mark.parametrize("case", list(STREAM_CASES))
def test_hostile_step_gets_its_status_while_another_worker_is_served(shared_host_server, case):
    _, server = shared_host_server
    build, code, words = STREAM_CASES[case]
    good = RawWorker(server.address, vector_spec())
    good.step()
    bad = RawWorker(server.address, vector_spec())
    bad.close()  # only its session id and spec are used, by a raw stream
    with grpc.insecure_channel(server.address, options=channel_options(8 << 20)) as channel:
        got, details = status_of(lambda: RawStream(channel).send(build(bad)))
    assert got == grpc.StatusCode[code] and words in details, (got, details)
    assert len(details) <= codec.MAX_DETAILS_CHARS + 100
    good.step()
    good.close()


def _handshake(spec: pb.EnvSpec) -> bytes:
    return pb.HandshakeRequest(protocol_version=1, spec=spec, worker_name="hostile").SerializeToString()


def _spec(shape=(3,), num_actions=2, num_envs=2, num_seats=1, dtype=pb.FLOAT32) -> pb.EnvSpec:
    message = pb.EnvSpec(env_name="hostile", num_envs=num_envs, num_seats=num_seats)
    message.observation.dtype, message.observation.shape[:] = dtype, list(shape)
    message.action.num_actions = num_actions
    return message


HANDSHAKE_CASES = {
    "random bytes": (b"\x0a\xff\xff\xff", "INVALID_ARGUMENT", "not a valid seedleague.v1.HandshakeRequest"),
    "2^40-element observation": (_handshake(_spec(shape=(1 << 20, 1 << 20))), "RESOURCE_EXHAUSTED",
                                 "max_observation_elements"),
    "2^31-1 actions": (_handshake(_spec(num_actions=2**31 - 1)), "RESOURCE_EXHAUSTED", "max_num_actions"),
    "a billion envs": (_handshake(_spec(num_envs=10**9)), "RESOURCE_EXHAUSTED", "envs"),
    "negative seats": (_handshake(_spec(num_seats=-1)), "INVALID_ARGUMENT", "num_seats"),
    "dtype enum 99": (_handshake(_spec(dtype=99)), "INVALID_ARGUMENT", "enum value 99"),
    "40-dim observation": (_handshake(_spec(shape=[1] * 40)), "INVALID_ARGUMENT", "40 dimensions"),
    "1 MB env name": (pb.HandshakeRequest(protocol_version=1, spec=pb.EnvSpec(
        env_name="e" * 1_000_000, observation=pb.TensorSpec(dtype=pb.FLOAT32, shape=[3]),
        action=pb.ActionSpec(num_actions=2), num_envs=1, num_seats=1)).SerializeToString(), "INVALID_ARGUMENT",
        "env_name must be at most 256"),
}


@pytest.mark.parametrize("case", list(HANDSHAKE_CASES))
def test_hostile_handshake_gets_its_status(shared_host_server, case):
    _, server = shared_host_server
    data, code, words = HANDSHAKE_CASES[case]
    good = RawWorker(server.address, vector_spec())
    with grpc.insecure_channel(server.address) as channel:
        got, details = status_of(lambda: channel.unary_unary("/seedleague.v1.EnvService/Handshake")(data, timeout=10))
    assert got == grpc.StatusCode[code] and words in details, (got, details)
    good.step()
    good.close()


def test_host_memory_stays_bounded_under_hostile_messages(shared_host_server):
    host, server = shared_host_server
    good = RawWorker(server.address, vector_spec())
    bad = RawWorker(server.address, vector_spec())
    bad.close()
    cases = [build for build, _, _ in STREAM_CASES.values()]

    def barrage(rounds: int) -> None:
        with grpc.insecure_channel(server.address, options=channel_options(8 << 20)) as channel:
            for i in range(rounds):
                with pytest.raises(grpc.RpcError):
                    RawStream(channel).send(cases[i % len(cases)](bad))
                with pytest.raises(grpc.RpcError):
                    channel.unary_unary("/seedleague.v1.EnvService/Handshake")(
                        list(HANDSHAKE_CASES.values())[i % len(HANDSHAKE_CASES)][0], timeout=10)
                if i % 10 == 0:
                    good.step()

    for _ in range(40):  # warm up: the learner starts (and compiles) on these unrolls before we measure
        good.step()
    deadline = time.monotonic() + 60
    while host.pipeline.learner.step < 2 and time.monotonic() < deadline:
        good.step()
        time.sleep(0.05)
    barrage(30)
    sessions, before = len(host.sessions), rss_bytes()
    barrage(200)
    growth = rss_bytes() - before
    print(f"host RSS {before / 2**20:.0f} MiB, growth over 400 hostile messages {growth / 2**20:+.2f} MiB")
    good.step()
    assert len(host.sessions) <= sessions  # no session left behind by a refused stream or handshake
    good.close()
    assert growth < RSS_GROWTH_BOUND, f"RSS grew {growth / 2**20:.1f} MiB over 400 hostile messages"


# --- hostile input to a real league server --------------------------------------------------------


LEAGUE_CASES = {
    "random bytes": ("ReportResults", b"\x0a\x05\xff\xff", "INVALID_ARGUMENT", "not a valid"),
    "unknown role": ("RegisterPlayer", lpb.RegisterPlayerRequest(name="r", role=7), "INVALID_ARGUMENT", "enum value 7"),
    "1 MB name": ("RegisterPlayer", lpb.RegisterPlayerRequest(name="n" * 1_000_000, role=lpb.ROLE_MAIN),
                  "INVALID_ARGUMENT", "chars)"),
    "unknown player": ("GetOpponents", lpb.GetOpponentsRequest(player="ghost", count=1), "NOT_FOUND", "ghost"),
    "absurd count": ("GetOpponents", lpb.GetOpponentsRequest(player="main", count=2**31 - 1), "INVALID_ARGUMENT",
                     "count"),
    "NaN outcome": ("ReportResults", lpb.ReportResultsRequest(results=[lpb.MatchResult(
        result_id="r", player="main", opponent="main", outcome=float("nan"))]), "INVALID_ARGUMENT", "outcome"),
    "negative step": ("CheckIn", lpb.CheckInRequest(player="main", learner_step=-5), "INVALID_ARGUMENT",
                      "learner_step"),
    "NUL in path": ("AddSnapshot", lpb.AddSnapshotRequest(player="main", step=1, path="/a\x00b"), "INVALID_ARGUMENT",
                    "printable"),
}


def _raw_league_call(channel: grpc.Channel, method: str, request) -> None:
    data = request if isinstance(request, bytes) else request.SerializeToString()
    channel.unary_unary(f"/seedleague.v1.LeagueService/{method}")(data, timeout=10)


def test_hostile_league_requests_get_their_status_and_memory_stays_bounded(tmp_path):
    league = League(LeagueConfig(max_requests_per_s=0), str(tmp_path / "league.sqlite"))
    with LeagueServer(league) as server:
        good = LeagueClient(server.address, retry_deadline_s=0)
        good.register_player("main", Role.MAIN)
        with grpc.insecure_channel(server.address, options=channel_options(8 << 20)) as channel:

            def barrage(rounds: int) -> None:
                for i in range(rounds):
                    method, request, code, words = list(LEAGUE_CASES.values())[i % len(LEAGUE_CASES)]
                    got, details = status_of(lambda: _raw_league_call(channel, method, request))
                    assert got == grpc.StatusCode[code] and words in details, (method, got, details)
                    assert len(details) <= codec.MAX_DETAILS_CHARS + 100
                    if i % 10 == 0:  # the good client is served between hostile calls
                        good.report_results([MatchResult(uuid.uuid4().hex, "main", "main", 1.0, 1)])

            barrage(len(LEAGUE_CASES) * 3)
            # A leak grows the RSS in every round; a one-time step (a new server thread and its malloc
            # arena, once 33.9 MiB in CI) shows in one round at most, so the smaller growth is the test.
            growths = []
            for _ in range(2):
                before = rss_bytes()
                barrage(400)
                growths.append(rss_bytes() - before)
            print(f"league RSS {before / 2**20:.0f} MiB, growth over two rounds of 400 hostile requests "
                  f"{[round(g / 2**20, 2) for g in growths]} MiB")
        assert [p.name for p in good.players()] == ["main"]
        good.close()
    league.close()
    assert min(growths) < RSS_GROWTH_BOUND, (
        f"RSS grew {[round(g / 2**20, 1) for g in growths]} MiB in each of two rounds of 400 hostile league requests")


# --- the per-stream idle deadline, on the servicer alone -------------------------------------------


class Limited:
    """A FakeBackend held to given SessionLimits (the servicer reads `config.limits`)."""

    def __init__(self, limits: SessionLimits):
        self._inner = FakeBackend()
        self.config = types.SimpleNamespace(limits=limits)
        self.max_message_bytes = self._inner.max_message_bytes

    def __getattr__(self, name):
        return getattr(self._inner, name)


def test_idle_streams_are_ended_with_deadline_exceeded_and_their_sessions_closed():
    backend = Limited(SessionLimits(stream_idle_timeout_s=0.5))
    spec = EnvSpec("v", (3,), np.float32, 2, 1)
    with ServerThread(backend) as server, grpc.insecure_channel(server.address) as channel:
        stub = env_pb2_grpc.EnvServiceStub(channel)
        silent = queue.SimpleQueue()  # handshakes, opens its stream, sends nothing
        stub.Handshake(codec.encode_handshake(spec, "silent"), timeout=5)
        silent_call = stub.Stream(iter(silent.get, None), timeout=10)
        once = queue.SimpleQueue()  # sends one step, then nothing
        sid = stub.Handshake(codec.encode_handshake(spec, "once"), timeout=5).session_id
        once_call = stub.Stream(iter(once.get, None), timeout=10)
        once.put(codec.encode_step(zero_step(spec, sid, 0)))
        next(once_call)
        for call in (silent_call, once_call):  # the server's idle limit (named), not the calls' own 10 s deadline
            code, details = status_of(lambda: next(call))
            assert code == grpc.StatusCode.DEADLINE_EXCEEDED and "stream_idle_timeout_s" in details
        # the server closes the session just after it sends the status
        wait_for(lambda: [s for s in backend.sessions if s.worker_name == "once" and s.closed], 5, "the session's close")
        closed = {s.worker_name: s.closed for s in backend.sessions}
        assert "DEADLINE_EXCEEDED" in closed["once"]  # the session that streamed is closed, its state dropped
        silent.put(None)
        once.put(None)


def _open_stream(channel, spec: EnvSpec, name: str):
    """Handshake as `name` and open the lockstep stream: (session id, queue feeding the stream, the call)."""
    stub = env_pb2_grpc.EnvServiceStub(channel)
    sid = stub.Handshake(codec.encode_handshake(spec, name), timeout=5).session_id
    pending = queue.SimpleQueue()
    return sid, pending, stub.Stream(iter(pending.get, None), timeout=10)


def test_a_slow_but_steady_worker_is_not_cut_off():
    backend = Limited(SessionLimits(stream_idle_timeout_s=0.5))
    spec = EnvSpec("v", (3,), np.float32, 2, 1)
    with ServerThread(backend) as server, grpc.insecure_channel(server.address) as channel:
        sid, pending, call = _open_stream(channel, spec, "slow")
        for sequence in range(5):  # 0.3 s between steps: 1.5 s in all, each gap under the deadline
            pending.put(codec.encode_step(zero_step(spec, sid, sequence)))
            assert next(call).sequence == sequence
            time.sleep(0.3)
        pending.put(None)
        assert list(call) == []


def test_an_idle_timeout_of_zero_waits_forever():
    backend = Limited(SessionLimits(stream_idle_timeout_s=0))
    spec = EnvSpec("v", (3,), np.float32, 2, 1)
    with ServerThread(backend) as server, grpc.insecure_channel(server.address) as channel:
        sid, pending, call = _open_stream(channel, spec, "patient")
        pending.put(codec.encode_step(zero_step(spec, sid, 0)))
        assert next(call).sequence == 0
        time.sleep(1.0)
        pending.put(codec.encode_step(zero_step(spec, sid, 1)))
        assert next(call).sequence == 1
        pending.put(None)
        assert list(call) == []


class SlowStep(Limited):
    """A Limited backend whose first step is held until `release` is set: the host, not the worker, is slow."""

    def __init__(self, limits: SessionLimits):
        super().__init__(limits)
        self.holding = threading.Event()
        self.release = threading.Event()

    async def step(self, step):
        if step.sequence == 0:
            self.holding.set()
            while not self.release.is_set():
                await asyncio.sleep(0.01)
        return await self._inner.step(step)


def test_time_the_host_holds_a_step_does_not_count_against_the_idle_deadline():
    backend = SlowStep(SessionLimits(stream_idle_timeout_s=0.3))
    spec = EnvSpec("v", (3,), np.float32, 2, 1)
    with ServerThread(backend) as server, grpc.insecure_channel(server.address) as channel:
        sid, pending, call = _open_stream(channel, spec, "patient")
        pending.put(codec.encode_step(zero_step(spec, sid, 0)))
        assert backend.holding.wait(5)
        time.sleep(1.0)  # the host holds the step for over three idle timeouts
        backend.release.set()
        assert next(call).sequence == 0
        pending.put(codec.encode_step(zero_step(spec, sid, 1)))
        assert next(call).sequence == 1
        pending.put(None)
        assert list(call) == []


def test_the_registry_counts_attached_sessions_through_attach_close_and_double_close():
    from seedleague.host.sessions import Session, SessionRegistry

    registry = SessionRegistry(SessionLimits())
    spec = named_of_v1(EnvSpec("v", (3,), np.float32, 2, 4))
    make = lambda sid: Session(sid, spec, "w", 0, lambda n: ())
    a, b, c = (registry.open(spec, "w", make) for _ in range(3))
    registry.attach(a.id)
    registry.attach(b.id)
    with pytest.raises(ProtocolError, match="already has a stream"):
        registry.attach(a.id)
    assert registry.attached_count() == 2
    registry.close(c.id)  # never attached
    registry.close(a.id)
    registry.close(a.id)  # closed twice (stream end after a stop): counted once
    assert registry.attached_count() == 1 and len(registry) == 1
