"""Property-based fuzzing of the league's request path: bytes parsed as every request type, and
structured hostile requests (names, roles, counts, steps, outcomes, paths), each through the
real `LeagueServicer` guards, codec and `League` input checks, against a real League on SQLite.

The property: every request gets its response or a status that names the problem (one of the
codes the league documents, details clipped), never another exception, and the league can still
answer every read afterwards. `benchmarks/fuzz_decode.py` runs these with many more examples.
"""

from __future__ import annotations

import asyncio
import math
import os

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seedleague.league.config import LeagueConfig
from seedleague.league.service import League
from seedleague.league.servicer import LeagueServicer
from seedleague.league.types import Role
from seedleague.protocol import codec as wire
from seedleague.v1 import league_pb2 as pb

EXAMPLES = int(os.environ.get("SEEDLEAGUE_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
REFUSALS = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION}
SERVICE = pb.DESCRIPTOR.services_by_name["LeagueService"]
INT64 = st.integers(-(2**63), 2**63 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
NAMES = st.one_of(
    st.sampled_from(["main", "ghost", "main:000000", "", "a b", "tab\tname", "x" * 65, "x" * 100_000, "nul\x00"]),
    st.text(max_size=70),
)
PATHS = st.one_of(st.sampled_from(["/pool/main/9", "", "a\x00b", "line\nbreak", "p" * 5000]), st.text(max_size=40))
OUTCOMES = st.one_of(st.sampled_from([0.0, 0.5, 1.0, 0.25, -1.0]), st.floats(allow_nan=True, allow_infinity=True))


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(f"{code}: {details}")
        self.code, self.details = code, details


class FakeContext:
    """The two things the league servicer uses of a grpc.aio.ServicerContext."""

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    async def abort(self, code: grpc.StatusCode, details: str):
        raise Aborted(code, details)


class Served:
    """One League (SQLite in memory, no rate limit) behind a LeagueServicer, shared by the examples."""

    def __init__(self):
        self.league = League(LeagueConfig(max_requests_per_s=0), ":memory:")
        self.league.register_player("main", Role.MAIN)
        self.league.add_snapshot("main", 0, "/pool/main/0")
        self.servicer = LeagueServicer(self.league)
        self.loop = asyncio.new_event_loop()

    def call(self, method: str, request):
        """The method's response, or Aborted with the status it got."""
        return self.loop.run_until_complete(self.servicer._guarded(method)(request, FakeContext()))


_SERVED: list[Served] = []


def served() -> Served:
    if not _SERVED:
        _SERVED.append(Served())
    return _SERVED[0]


def answer_or_refusal(method: str, request) -> None:
    """The property: a response of the method's type, or a documented refusal with short details."""
    target = served()
    try:
        response = target.call(method, request)
    except Aborted as error:
        assert error.code in REFUSALS, error
        assert 0 < len(error.details) <= wire.MAX_DETAILS_CHARS + 100, len(error.details)
        return
    assert type(response).__name__ == SERVICE.methods_by_name[method].output_type.name


def league_still_answers() -> None:
    league = served().league
    assert league.players() and league.standings()
    matrix = league.payoff()
    assert len(matrix.keys) ** 2 == sum(len(row) for row in matrix.games)
    assert all(math.isfinite(s.elo) for s in league.standings())


def _request_types():
    return [(m.name, getattr(pb, m.input_type.name)) for m in SERVICE.methods]


@FUZZ
@given(st.sampled_from(_request_types()), st.binary(max_size=200))
def test_random_bytes_as_every_request(method_and_type, data):
    method, request_type = method_and_type
    answer_or_refusal(method, wire.lenient_parser(request_type)(data))


@st.composite
def results(draw) -> pb.MatchResult:
    return pb.MatchResult(
        result_id=draw(st.one_of(st.uuids().map(str), st.text(max_size=200))),
        player=draw(NAMES),
        opponent=draw(st.one_of(st.sampled_from(["main", "main:000000"]), NAMES)),
        outcome=draw(OUTCOMES),
        learner_step=draw(st.one_of(st.integers(0, 100), INT64)),
    )


REQUESTS = st.one_of(
    st.builds(lambda n, r: ("RegisterPlayer", pb.RegisterPlayerRequest(name=n, role=r)), NAMES, st.integers(-2, 8)),
    st.builds(lambda p, c: ("GetOpponents", pb.GetOpponentsRequest(player=p, count=c)), NAMES,
              st.one_of(st.integers(-2, 20), INT32)),
    st.builds(lambda rs: ("ReportResults", pb.ReportResultsRequest(results=rs)), st.lists(results(), max_size=5)),
    st.builds(lambda p, s: ("CheckIn", pb.CheckInRequest(player=p, learner_step=s)), NAMES,
              st.one_of(st.integers(-2, 2000), INT64)),
    st.builds(lambda p, s, path: ("AddSnapshot", pb.AddSnapshotRequest(player=p, step=s, path=path)), NAMES,
              st.one_of(st.integers(-2, 2000), INT64), PATHS),
    st.builds(lambda p: ("ListSnapshots", pb.ListSnapshotsRequest(player=p)), NAMES),
    st.sampled_from([("ListPlayers", pb.ListPlayersRequest()), ("Standings", pb.StandingsRequest()),
                     ("Payoff", pb.PayoffRequest())]),
)


@FUZZ
@given(st.lists(REQUESTS, min_size=1, max_size=4))
def test_hostile_requests_get_an_answer_or_their_status(requests):
    for method, request in requests:
        answer_or_refusal(method, request)
    league_still_answers()


@FUZZ
@given(st.lists(REQUESTS, min_size=1, max_size=3), st.data())
def test_truncated_requests(requests, data):
    for method, request in requests:
        wire_bytes = request.SerializeToString()
        cut = wire_bytes[: data.draw(st.integers(0, len(wire_bytes)))]
        answer_or_refusal(method, wire.lenient_parser(type(request))(cut))


@pytest.mark.parametrize(
    "method, request_, code, words",
    [
        ("RegisterPlayer", pb.RegisterPlayerRequest(name="n", role=99), "INVALID_ARGUMENT", "enum value 99"),
        ("RegisterPlayer", pb.RegisterPlayerRequest(name="x" * 100_000, role=pb.ROLE_MAIN), "INVALID_ARGUMENT",
         "chars)"),
        ("GetOpponents", pb.GetOpponentsRequest(player="main", count=2**31 - 1), "INVALID_ARGUMENT", "count"),
        ("GetOpponents", pb.GetOpponentsRequest(player="y" * 100_000, count=1), "NOT_FOUND", "chars)"),
        ("CheckIn", pb.CheckInRequest(player="main", learner_step=-(2**63)), "INVALID_ARGUMENT", "learner_step"),
        ("AddSnapshot", pb.AddSnapshotRequest(player="main", step=5, path="a\x00b"), "INVALID_ARGUMENT", "printable"),
        ("ReportResults", pb.ReportResultsRequest(results=[pb.MatchResult(
            result_id="r", player="main", opponent="main:000000", outcome=float("nan"))]), "INVALID_ARGUMENT",
         "outcome"),
        ("ReportResults", pb.ReportResultsRequest(results=[pb.MatchResult(
            result_id="r", player="main", opponent="z" * 50_000, outcome=1.0)]), "NOT_FOUND", "chars)"),
    ],
    ids=["unknown-role", "huge-name", "absurd-count", "huge-unknown-player", "min-int64-step", "nul-in-path",
         "nan-outcome", "huge-unknown-snapshot"],
)
def test_hostile_values_get_a_clear_short_status(method, request_, code, words):
    with pytest.raises(Aborted) as error:
        served().call(method, request_)
    assert error.value.code == grpc.StatusCode[code] and words in error.value.details, error.value
    assert len(error.value.details) <= wire.MAX_DETAILS_CHARS + 100
    league_still_answers()
