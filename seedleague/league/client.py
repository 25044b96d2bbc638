"""LeagueClient: the league over gRPC, with the same methods as the in-process `League`.

    league = LeagueClient("127.0.0.1:50060", ClientSecurity(token=...))
    league.register_player("main", Role.MAIN)
    matches = league.get_opponents("main", 8)
    league.report_results(results)      # safe to retry: result ids are counted once
    league.close()

Host code can take either a League or a LeagueClient (both are `types.LeagueAPI`).
A call that finds the league unreachable (UNAVAILABLE: down, restarting,
shutting down; or DEADLINE_EXCEEDED) is retried with jittered exponential
backoff until `retry_deadline_s` has passed, then raises `LeagueUnavailable`.
Every method is safe to retry: registering and adding a snapshot are
idempotent, a check-in repeats a pending decision, and results carry ids. Any
other status is the league refusing the request: it raises ProtocolError with
that code and the league's message, as the in-process League would.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Optional, Sequence

import grpc

from seedleague.league import codec, tables
from seedleague.league.types import (
    Match,
    MatchResult,
    PayoffMatrix,
    PlayerInfo,
    Role,
    SnapshotDecision,
    SnapshotInfo,
    Standing,
)
from seedleague.protocol.channel import channel_options
from seedleague.protocol.client import Backoff
from seedleague.protocol.errors import ProtocolError
from seedleague.security import ClientSecurity
from seedleague.v1 import league_pb2 as pb
from seedleague.v1 import league_pb2_grpc

log = logging.getLogger(__name__)

DEFAULT_MAX_MESSAGE_BYTES = 64 << 20  # a payoff matrix of about 2000 keys (16 bytes a pair)
_RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
_TLS_HINT = {
    False: " (if the league serves TLS, pass its CA with --tls-ca)",
    True: " (check that the league serves TLS with a certificate signed by --tls-ca for this address)",
}


class LeagueUnavailable(ConnectionError):
    """The league did not answer within the client's retry deadline."""


class LeagueClient:
    """A LeagueAPI over one gRPC channel; thread-safe (calls may run concurrently)."""

    def __init__(
        self,
        address: str,
        security: ClientSecurity = ClientSecurity(),
        timeout_s: float = 10.0,
        retry_deadline_s: float = 60.0,
        backoff_initial_s: float = 0.05,
        backoff_max_s: float = 2.0,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ):
        problems = [f"{name} must be > 0, got {value}" for name, value in (
            ("timeout_s", timeout_s), ("backoff_initial_s", backoff_initial_s), ("backoff_max_s", backoff_max_s),
            ("max_message_bytes", max_message_bytes)) if not value > 0]
        if not retry_deadline_s >= 0:
            problems.append(f"retry_deadline_s must be >= 0 (0: no retries), got {retry_deadline_s}")
        if not isinstance(security, ClientSecurity):
            problems.append(f"security must be a ClientSecurity, got {type(security).__name__}")
        if problems:
            raise ValueError("bad league client settings: " + "; ".join(problems))
        self.address = address
        self._security = security
        self._timeout_s = timeout_s
        self._retry_deadline_s = retry_deadline_s
        self._backoff = (backoff_initial_s, backoff_max_s)
        options = channel_options(max_message_bytes) + [
            ("grpc.initial_reconnect_backoff_ms", int(backoff_initial_s * 1000)),
            ("grpc.min_reconnect_backoff_ms", int(backoff_initial_s * 1000)),
            ("grpc.max_reconnect_backoff_ms", int(backoff_max_s * 1000)),
        ]
        self._channel = security.channel(address, options)
        self._stub = league_pb2_grpc.LeagueServiceStub(self._channel)
        self._closed = threading.Event()

    # --- LeagueAPI --------------------------------------------------------------------------------

    def register_player(self, name: str, role: Role) -> PlayerInfo:
        request = pb.RegisterPlayerRequest(name=name, role=codec.encode_role(role))
        return codec.decode_player(self._call("RegisterPlayer", request).player)

    def get_opponents(self, player: str, count: int) -> list[Match]:
        reply = self._call("GetOpponents", pb.GetOpponentsRequest(player=player, count=count))
        return [codec.decode_match(m) for m in reply.matches]

    def report_results(self, results: Sequence[MatchResult]) -> int:
        return self._call("ReportResults", codec.encode_results_request(results)).new_results

    def check_in(self, player: str, learner_step: int) -> SnapshotDecision:
        reply = self._call("CheckIn", pb.CheckInRequest(player=player, learner_step=learner_step))
        return codec.decode_decision(reply.decision)

    def add_snapshot(self, player: str, step: int, path: str) -> SnapshotInfo:
        reply = self._call("AddSnapshot", pb.AddSnapshotRequest(player=player, step=step, path=path))
        return codec.decode_snapshot(reply.snapshot)

    def snapshots(self, player: Optional[str] = None) -> list[SnapshotInfo]:
        reply = self._call("ListSnapshots", pb.ListSnapshotsRequest(player=player or ""))
        return [codec.decode_snapshot(s) for s in reply.snapshots]

    def players(self) -> list[PlayerInfo]:
        return [codec.decode_player(p) for p in self._call("ListPlayers", pb.ListPlayersRequest()).players]

    def standings(self) -> list[Standing]:
        return [codec.decode_standing(s) for s in self._call("Standings", pb.StandingsRequest()).standings]

    def payoff(self) -> PayoffMatrix:
        return codec.decode_payoff(self._call("Payoff", pb.PayoffRequest()).payoff)

    # --- extras -----------------------------------------------------------------------------------

    def leaderboard_text(self, top: int = 20) -> str:
        return tables.standings_table(self.standings(), top)

    def close(self) -> None:
        """Close the channel; a call in progress or later raises LeagueUnavailable. Idempotent."""
        self._closed.set()
        self._channel.close()

    def __enter__(self) -> "LeagueClient":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # --- calls ------------------------------------------------------------------------------------

    def _call(self, method: str, request):
        """One RPC, retried while the league is unreachable; see the module docstring."""
        rpc: Callable = getattr(self._stub, method)
        deadline = time.monotonic() + self._retry_deadline_s
        backoff = Backoff(*self._backoff)
        while True:
            if self._closed.is_set():
                raise LeagueUnavailable(f"league client for {self.address} is closed")
            try:
                return rpc(request, timeout=self._timeout_s, metadata=self._security.metadata())
            except grpc.RpcError as error:
                if self._closed.is_set() or error.code() not in _RETRYABLE:
                    raise self._failure(method, error) from None
                wait = backoff.next()
                if time.monotonic() + wait > deadline:
                    raise self._unavailable(method, error) from None
                log.info("league %s %s: %s; retrying in %.2f s", self.address, method, error.code().name, wait)
                self._closed.wait(wait)

    def _failure(self, method: str, error: grpc.RpcError) -> Exception:
        if self._closed.is_set():
            return LeagueUnavailable(f"league client for {self.address} was closed during {method}")
        code, details = error.code(), error.details() or ""
        if code == grpc.StatusCode.UNAUTHENTICATED:
            details += "; give the league's token with --token or the SEEDLEAGUE_TOKEN environment variable"
        return ProtocolError(code.name, f"league refused {method}: {details}")

    def _unavailable(self, method: str, error: grpc.RpcError) -> LeagueUnavailable:
        return LeagueUnavailable(
            f"league at {self.address} did not answer {method} within {self._retry_deadline_s} s "
            f"(last error {error.code().name}: {error.details()}){_TLS_HINT[self._security.tls]}"
        )
