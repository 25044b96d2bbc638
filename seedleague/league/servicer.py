"""The LeagueService gRPC servicer: decode, call a `League`, encode.

Every method is one line of work on the League, run in a worker thread (the
League blocks on its lock and on SQLite commits, the event loop must not); a
ProtocolError from decoding or from the League becomes the gRPC status it
names, with its message.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, TypeVar

import grpc

from seedleague.league import codec
from seedleague.league.types import LeagueAPI
from seedleague.protocol.errors import ProtocolError
from seedleague.v1 import league_pb2 as pb
from seedleague.v1 import league_pb2_grpc

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["LeagueService"].full_name

T = TypeVar("T")


class LeagueServicer(league_pb2_grpc.LeagueServiceServicer):
    """Thin adapter between protobuf messages and a League (any `LeagueAPI`)."""

    def __init__(self, league: LeagueAPI):
        self._league = league

    def register(self, server: grpc.aio.Server) -> None:
        league_pb2_grpc.add_LeagueServiceServicer_to_server(self, server)

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
        if error.code != "UNAVAILABLE":
            log.info("refused %s: %s: %s", method, error.code, error.message)
        await context.abort(grpc.StatusCode[error.code], error.message)
