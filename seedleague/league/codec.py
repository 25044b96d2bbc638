"""The only module that converts between league protobuf messages and `league.types` dataclasses.

Decoding checks structure only (a role is set and known, the payoff matrix is
K x K); the League checks meaning (names, outcomes, steps) and answers
ProtocolError, whichever side of the wire it runs on.
"""

from __future__ import annotations

from typing import Sequence

from seedleague.league.types import (
    Match,
    MatchResult,
    PayoffMatrix,
    PbtAnswer,
    PlayerInfo,
    Role,
    SnapshotDecision,
    SnapshotInfo,
    Standing,
)
from seedleague.protocol.errors import INVALID_ARGUMENT, ProtocolError
from seedleague.v1 import league_pb2 as pb

_ROLES = {
    Role.MAIN: pb.ROLE_MAIN,
    Role.MAIN_EXPLOITER: pb.ROLE_MAIN_EXPLOITER,
    Role.LEAGUE_EXPLOITER: pb.ROLE_LEAGUE_EXPLOITER,
    Role.ANCHOR: pb.ROLE_ANCHOR,
    Role.HUMAN: pb.ROLE_HUMAN,
}
_ROLE_OF_ENUM = {enum: role for role, enum in _ROLES.items()}


def encode_role(role: Role) -> int:
    try:
        return _ROLES[Role(role)]
    except ValueError:
        raise ProtocolError(INVALID_ARGUMENT, f"unknown role {role!r}: use one of {', '.join(r.value for r in Role)}")


def decode_role(enum: int, what: str = "role") -> Role:
    try:
        return _ROLE_OF_ENUM[enum]
    except KeyError:
        raise ProtocolError(INVALID_ARGUMENT, f"{what} is unset or unknown (enum value {enum})") from None


# --- records --------------------------------------------------------------------------------------


def encode_player(info: PlayerInfo) -> pb.PlayerInfo:
    return pb.PlayerInfo(
        name=info.name,
        role=encode_role(info.role),
        learner_step=info.learner_step,
        snapshots=info.snapshots,
        resets=info.resets,
        last_snapshot_step=info.last_snapshot_step,
    )


def decode_player(message: pb.PlayerInfo) -> PlayerInfo:
    return PlayerInfo(
        name=message.name,
        role=decode_role(message.role, f"role of player {message.name!r}"),
        learner_step=message.learner_step,
        snapshots=message.snapshots,
        resets=message.resets,
        last_snapshot_step=message.last_snapshot_step,
    )


def encode_snapshot(info: SnapshotInfo) -> pb.SnapshotInfo:
    return pb.SnapshotInfo(key=info.key, player=info.player, step=info.step, path=info.path, role=encode_role(info.role))


def decode_snapshot(message: pb.SnapshotInfo) -> SnapshotInfo:
    role = decode_role(message.role, f"role of snapshot {message.key!r}")
    return SnapshotInfo(key=message.key, player=message.player, step=message.step, path=message.path, role=role)


def encode_match(match: Match) -> pb.Match:
    return pb.Match(opponent=match.opponent, self_play=match.self_play, rates_only=match.rates_only)


def decode_match(message: pb.Match) -> Match:
    return Match(opponent=message.opponent, self_play=message.self_play, rates_only=message.rates_only)


def encode_result(result: MatchResult) -> pb.MatchResult:
    return pb.MatchResult(
        result_id=result.result_id,
        player=result.player,
        opponent=result.opponent,
        outcome=result.outcome,
        learner_step=result.learner_step,
        value=result.value,  # None leaves the optional field unset
    )


def decode_result(message: pb.MatchResult) -> MatchResult:
    return MatchResult(
        result_id=message.result_id,
        player=message.player,
        opponent=message.opponent,
        outcome=message.outcome,
        learner_step=message.learner_step,
        value=message.value if message.HasField("value") else None,
    )


def encode_decision(decision: SnapshotDecision) -> pb.SnapshotDecision:
    message = pb.SnapshotDecision(snapshot=decision.snapshot, reset=decision.reset, reason=decision.reason)
    if decision.pbt is not None:
        p = decision.pbt
        message.pbt.CopyFrom(pb.PbtSettings(entropy_cost=p.entropy_cost, learning_rate=p.learning_rate,
                                            kl_cost=p.kl_cost, copy_from=p.copy_from, note=p.note))
    return message


def decode_decision(message: pb.SnapshotDecision) -> SnapshotDecision:
    answer = None
    if message.HasField("pbt"):
        p = message.pbt
        if not all(v > 0 for v in (p.entropy_cost, p.learning_rate, p.kl_cost)):
            raise ProtocolError(INVALID_ARGUMENT, "pbt settings must be multipliers > 0")
        answer = PbtAnswer(p.entropy_cost, p.learning_rate, p.kl_cost, p.copy_from, p.note)
    return SnapshotDecision(snapshot=message.snapshot, reset=message.reset, reason=message.reason, pbt=answer)


def encode_standing(row: Standing) -> pb.Standing:
    return pb.Standing(
        key=row.key,
        role=encode_role(row.role),
        elo=row.elo,
        games=row.games,
        win_rate=row.win_rate,
        trueskill_mu=row.trueskill_mu,
        trueskill_sigma=row.trueskill_sigma,
        pbt=row.pbt,
    )


def decode_standing(message: pb.Standing) -> Standing:
    return Standing(
        key=message.key,
        role=decode_role(message.role, f"role of {message.key!r}"),
        elo=message.elo,
        games=message.games,
        win_rate=message.win_rate,
        trueskill_mu=message.trueskill_mu,
        trueskill_sigma=message.trueskill_sigma,
        pbt=message.pbt,
    )


def encode_payoff(matrix: PayoffMatrix) -> pb.PayoffMatrix:
    return pb.PayoffMatrix(
        keys=matrix.keys,
        win_rate=[p for row in matrix.win_rate for p in row],
        games=[g for row in matrix.games for g in row],
    )


def decode_payoff(message: pb.PayoffMatrix) -> PayoffMatrix:
    k = len(message.keys)
    if len(message.win_rate) != k * k or len(message.games) != k * k:
        raise ProtocolError(
            INVALID_ARGUMENT,
            f"payoff matrix of {k} keys needs {k * k} win rates and games, "
            f"got {len(message.win_rate)} and {len(message.games)}",
        )
    return PayoffMatrix(keys=list(message.keys), win_rate=_rows(message.win_rate, k), games=_rows(message.games, k))


def _rows(flat: Sequence[float], k: int) -> list[list[float]]:
    return [list(flat[i * k : (i + 1) * k]) for i in range(k)]


# --- requests and responses -----------------------------------------------------------------------


def encode_results_request(results: Sequence[MatchResult]) -> pb.ReportResultsRequest:
    return pb.ReportResultsRequest(results=[encode_result(r) for r in results])


def decode_results_request(message: pb.ReportResultsRequest) -> list[MatchResult]:
    return [decode_result(r) for r in message.results]
