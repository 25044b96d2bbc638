"""The league's vocabulary: plain dataclasses shared by the league service, its
gRPC codec and client, the host's opponent source and the league report.

Names: a *player* is a learning agent with a role (one learner host each, e.g.
"main"); a *snapshot* is a frozen copy of a player's params in the model pool,
keyed "player:step" (`snapshot_key`). A match is always the live player (the
learner, key = its player name) against an opponent key, which is either the
player's own name (self-play: both seats run the learner's live params) or a
snapshot key.

Two kinds of member never train. An *anchor* (role ANCHOR) is a fixed policy rated on
the same scale as everyone: the uniform random policy (`UNIFORM_ANCHOR`) or another
run's output, read from a path. Its key is its bare name (no ":"), its one
`SnapshotInfo` (key = name, step 0) holds that path, and learners meet it in a small
share of their episodes (`LeagueConfig.anchor_share`); those games rate, they are never
trained on (`Match.rates_only`). A *human* (role HUMAN) is a person playing through
`seedleague play`: a key whose results are reported like a learner's.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Optional, Protocol, Sequence


class Role(str, enum.Enum):
    """AlphaStar roles (Vinyals et al., Nature 2019); historical snapshots never learn."""

    MAIN = "main"
    MAIN_EXPLOITER = "main_exploiter"
    LEAGUE_EXPLOITER = "league_exploiter"
    ANCHOR = "anchor"  # a fixed member: never trains, never draws opponents
    HUMAN = "human"  # a person playing through `seedleague play`


FIXED_ROLES = (Role.ANCHOR, Role.HUMAN)  # members that are not learners: no check-ins, snapshots or draws
UNIFORM_ANCHOR = "uniform"  # the anchor path (and default name) of the uniform random policy in the run's network


def learns(role: Role) -> bool:
    """Whether a member of `role` is a learning player (checks in, snapshots, draws opponents)."""
    return Role(role) not in FIXED_ROLES


class Mode(str, enum.Enum):
    """How opponents are chosen for a run's players."""

    SELF_PLAY = "self_play"  # latest against latest (the learner plays itself)
    LAST_N = "last_n"  # uniform over the player's own last N snapshots
    PFSP = "pfsp"  # prioritised fictitious self-play over every snapshot
    ALPHASTAR = "alphastar"  # the full role-based league
    PSRO = "psro"  # opponents drawn from the Nash mixture of the empirical payoff matrix


def snapshot_key(player: str, step: int) -> str:
    """Key of `player`'s snapshot taken at learner step `step`, e.g. "main:000512"."""
    return f"{player}:{step:06d}"


def parse_key(key: str) -> tuple[str, Optional[int]]:
    """("main", 512) for "main:000512"; ("main", None) for the live player "main"."""
    player, sep, step = key.rpartition(":")
    if not sep:
        return key, None
    if not player or not step.isdigit():
        raise ValueError(f"bad snapshot key {key!r}: expected 'player:step' with a non-negative integer step")
    return player, int(step)


@dataclasses.dataclass(frozen=True)
class PlayerInfo:
    name: str
    role: Role
    learner_step: int = 0  # last step the player's host checked in with
    snapshots: int = 0  # how many snapshots it has in the pool
    resets: int = 0  # times it was reset to its initial params
    last_snapshot_step: int = 0


@dataclasses.dataclass(frozen=True)
class SnapshotInfo:
    key: str  # "player:step"
    player: str
    step: int  # learner step at which the params were frozen
    path: str  # model-pool directory holding the orbax checkpoint of that step
    role: Role


@dataclasses.dataclass(frozen=True)
class Match:
    """One episode's opponent for a learning player."""

    opponent: str  # the player's own name for self-play, else a snapshot key
    self_play: bool  # True when both seats run the learner's live params
    seats: tuple[str, ...] = ()  # a served mixture with one mix per seat: the member on each seat (host only)
    rates_only: bool = False  # a game against an anchor: it rates the two; replay records none of it


def outcome_of(learner_return: float) -> float:
    """1 (win), 0.5 (draw) or 0 (loss) from the sign of the learner seat's return."""
    return 1.0 if learner_return > 0 else 0.0 if learner_return < 0 else 0.5


@dataclasses.dataclass(frozen=True)
class MatchResult:
    """The outcome of one episode, as the learner's host reports it.

    `result_id` is chosen by the reporter (a uuid); the league counts each id
    once, so a report retried after a lost reply is not counted twice.
    """

    result_id: str
    player: str  # the learning player (live key)
    opponent: str  # snapshot key it played
    outcome: float  # 1 win, 0.5 draw, 0 loss, from the learner's seat
    learner_step: int = 0
    value: Optional[float] = None  # the learner seat's (team's) return in the game's units; None: not reported


@dataclasses.dataclass(frozen=True)
class PbtAnswer:
    """A PBT member's settings as the league holds them, and a copy to make (seedleague.league.pbt)."""

    entropy_cost: float = 1.0  # multipliers on the learner's entropy cost, learning rate and kl_cost
    learning_rate: float = 1.0
    kl_cost: float = 1.0
    copy_from: str = ""  # a snapshot key: take its params, optimiser state, magnet and average now ("": none)
    note: str = ""  # the change, in words, for logs


@dataclasses.dataclass(frozen=True)
class SnapshotDecision:
    """The league's answer to a learner checking in: freeze a snapshot now? reset after it? PBT's settings."""

    snapshot: bool
    reset: bool = False
    reason: str = ""
    pbt: Optional[PbtAnswer] = None  # set for a member of population-based training


@dataclasses.dataclass(frozen=True)
class Standing:
    """One leaderboard row."""

    key: str  # live player name or snapshot key
    role: Role
    elo: float
    games: float  # decayed game count against everyone
    win_rate: float  # decayed, over all its games
    trueskill_mu: float = 25.0
    trueskill_sigma: float = 25.0 / 3
    pbt: str = ""  # a PBT member's settings and newest copy, in words ("" for everyone else)


@dataclasses.dataclass(frozen=True)
class PayoffMatrix:
    """Decayed win rates: `win_rate[i][j]` = P(keys[i] beats keys[j]) (0.5 for draws and no data)."""

    keys: list[str]
    win_rate: list[list[float]]
    games: list[list[float]]


class LeagueAPI(Protocol):
    """What a learner host needs from the league. Implemented in-process by
    `seedleague.league.service.League` and over gRPC by `seedleague.league.client.LeagueClient`
    (same signatures), and by `seedleague.testing.fakes.FakeLeague` in tests."""

    def register_player(self, name: str, role: Role) -> PlayerInfo:
        """Create the player (or return the existing one: a restarted host re-registers)."""

    def get_opponents(self, player: str, count: int) -> list[Match]:
        """`count` independent draws of the next episodes' opponents for `player`."""

    def report_results(self, results: Sequence[MatchResult]) -> int:
        """Record outcomes; returns how many were new (already-known result ids count once)."""

    def check_in(self, player: str, learner_step: int) -> SnapshotDecision:
        """The learner's progress; the answer says whether to snapshot (and reset) now."""

    def add_snapshot(self, player: str, step: int, path: str) -> SnapshotInfo:
        """Register params already saved in the model pool at `path` as snapshot player:step (idempotent)."""

    def snapshots(self, player: Optional[str] = None) -> list[SnapshotInfo]:
        """Every snapshot (of `player` only, if given), oldest first."""

    def players(self) -> list[PlayerInfo]: ...

    def standings(self) -> list[Standing]:
        """Leaderboard, best Elo first."""

    def payoff(self) -> PayoffMatrix: ...
