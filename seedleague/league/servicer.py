"""The LeagueService gRPC servicer: decode, call a `League`, encode.

Every method is one line of work on the League, run in a worker thread (the
League blocks on its lock and on SQLite commits, the event loop must not); a
ProtocolError from decoding or from the League becomes the gRPC status it
names, with its message (clipped: it may echo client input).

Before any of that, each call passes two guards: a token bucket per client
connection (`LeagueConfig.max_requests_per_s`, `request_burst`; over it:
RESOURCE_EXHAUSTED) and the request parse (bytes that are no valid message:
INVALID_ARGUMENT rather than gRPC's UNKNOWN).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import Awaitable, Callable, TypeVar

import grpc

from seedleague.league import codec
from seedleague.league.config import LeagueConfig
from seedleague.league.types import LeagueAPI
from seedleague.protocol import codec as wire
from seedleague.protocol.errors import ProtocolError
from seedleague.v1 import league_pb2 as pb
from seedleague.v1 import league_pb2_grpc

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["LeagueService"].full_name

T = TypeVar("T")


class LeagueServicer(league_pb2_grpc.LeagueServiceServicer):
    """Thin adapter between protobuf messages and a League (any `LeagueAPI`).

    The rate limit is the league's `config` (a LeagueConfig) if it has one, else the default's."""

    def __init__(self, league: LeagueAPI):
        self._league = league
        config = getattr(league, "config", None)
        config = config if isinstance(config, LeagueConfig) else LeagueConfig()
        self._limiter = RateLimiter(config.max_requests_per_s, config.request_burst)

    def register(self, server: grpc.aio.Server) -> None:
        """As the generated `add_LeagueServiceServicer_to_server`, with both guards around every method."""
        handlers = {
            method.name: grpc.unary_unary_rpc_method_handler(
                self._guarded(method.name),
                request_deserializer=wire.lenient_parser(getattr(pb, method.input_type.name)),
                response_serializer=getattr(pb, method.output_type.name).SerializeToString,
            )
            for method in pb.DESCRIPTOR.services_by_name["LeagueService"].methods
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
        server.add_registered_method_handlers(SERVICE_NAME, handlers)

    def _guarded(self, name: str) -> Callable[..., Awaitable]:
        method = getattr(self, name)

        async def guarded(request, context: grpc.aio.ServicerContext):
            peer = context.peer()
            if not self._limiter.allow(peer):
                limiter = self._limiter
                await context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"{name}: over the league's request rate limit of {limiter.rate:g}/s (burst {limiter.burst}) "
                    "for this client: slow down (LeagueConfig.max_requests_per_s, request_burst)",
                )
            if isinstance(request, wire.Malformed):
                log.info("refused %s from %s: %s", name, peer, request.refusal().message)
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.refusal().message)
            return await method(request, context)

        return guarded

    async def RegisterPlayer(self, request: pb.RegisterPlayerRequest, context) -> pb.RegisterPlayerResponse:
        def call():
            role = codec.decode_role(request.role)
            return pb.RegisterPlayerResponse(player=codec.encode_player(self._league.register_player(request.name, role)))

        return await _answer(context, "RegisterPlayer", call)

    async def GetOpponents(self, request: pb.GetOpponentsRequest, context) -> pb.GetOpponentsResponse:
        def call():
            matches = self._league.get_opponents(request.player, request.count)
            return pb.GetOpponentsResponse(matches=[codec.encode_match(m) for m in matches])

        return await _answer(context, "GetOpponents", call)

    async def ReportResults(self, request: pb.ReportResultsRequest, context) -> pb.ReportResultsResponse:
        def call():
            results = codec.decode_results_request(request)
            new = self._league.report_results(results)
            return pb.ReportResultsResponse(new_results=new, duplicate_results=len(results) - new)

        return await _answer(context, "ReportResults", call)

    async def CheckIn(self, request: pb.CheckInRequest, context) -> pb.CheckInResponse:
        def call():
            decision = self._league.check_in(request.player, request.learner_step)
            return pb.CheckInResponse(decision=codec.encode_decision(decision))

        return await _answer(context, "CheckIn", call)

    async def AddSnapshot(self, request: pb.AddSnapshotRequest, context) -> pb.AddSnapshotResponse:
        def call():
            snapshot = self._league.add_snapshot(request.player, request.step, request.path)
            return pb.AddSnapshotResponse(snapshot=codec.encode_snapshot(snapshot))

        return await _answer(context, "AddSnapshot", call)

    async def ListPlayers(self, request: pb.ListPlayersRequest, context) -> pb.ListPlayersResponse:
        def call():
            return pb.ListPlayersResponse(players=[codec.encode_player(p) for p in self._league.players()])

        return await _answer(context, "ListPlayers", call)

    async def ListSnapshots(self, request: pb.ListSnapshotsRequest, context) -> pb.ListSnapshotsResponse:
        def call():
            snapshots = self._league.snapshots(request.player or None)
            return pb.ListSnapshotsResponse(snapshots=[codec.encode_snapshot(s) for s in snapshots])

        return await _answer(context, "ListSnapshots", call)

    async def Standings(self, request: pb.StandingsRequest, context) -> pb.StandingsResponse:
        def call():
            return pb.StandingsResponse(standings=[codec.encode_standing(s) for s in self._league.standings()])

        return await _answer(context, "Standings", call)

    async def Payoff(self, request: pb.PayoffRequest, context) -> pb.PayoffResponse:
        def call():
            return pb.PayoffResponse(payoff=codec.encode_payoff(self._league.payoff()))

        return await _answer(context, "Payoff", call)


async def _answer(context: grpc.aio.ServicerContext, method: str, call: Callable[[], T]) -> T:
    """`call()`'s reply, or the status its ProtocolError names."""
    try:
        return await asyncio.to_thread(call)
    except ProtocolError as error:
        details = wire.clip(error.message)
        if error.code != "UNAVAILABLE":
            log.info("refused %s: %s: %s", method, error.code, details)
        await context.abort(grpc.StatusCode[error.code], details)


class RateLimiter:
    """Token buckets keyed by client: each holds up to `burst` tokens, refills at `rate` a second,
    and a call takes one. `rate` 0 allows everything. Call from one thread (the event loop).

    At most `max_clients` buckets are kept; beyond that the least recently used is forgotten (it
    starts again full), so a flood of connections cannot grow memory."""

    def __init__(self, rate: float, burst: int, max_clients: int = 4096, clock: Callable[[], float] = time.monotonic):
        self.rate, self.burst, self.max_clients = rate, burst, max_clients
        self._clock = clock
        self._buckets: "collections.OrderedDict[str, tuple[float, float]]" = collections.OrderedDict()

    def allow(self, client: str) -> bool:
        if not self.rate > 0:
            return True
        now = self._clock()
        tokens, last = self._buckets.pop(client, (float(self.burst), now))
        tokens = refill(tokens, now - last, self.rate, self.burst)
        allowed = tokens >= 1.0
        self._buckets[client] = (tokens - 1.0 if allowed else tokens, now)
        if len(self._buckets) > self.max_clients:
            self._buckets.popitem(last=False)
        return allowed


def refill(tokens: float, elapsed_s: float, rate: float, burst: float) -> float:
    """A token bucket's tokens after `elapsed_s` seconds at `rate` a second, capped at `burst`."""
    return min(float(burst), tokens + max(0.0, elapsed_s) * rate)
