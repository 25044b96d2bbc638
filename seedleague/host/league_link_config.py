"""LeagueLinkConfig: which league a host plays in, as which player, and how it talks to it.

Kept apart from seedleague.host.league_link, which holds opponents' params with jax, so that building the command
line (`seedleague train --help`, a refused flag) needs no jax.
"""

from __future__ import annotations

import dataclasses

from seedleague.league.types import Role


@dataclasses.dataclass(frozen=True)
class LeagueLinkConfig:
    """Which league a host plays in, as which player, and how it talks to it."""

    address: str = ""  # league service "host:port"; "" = no league (self-play with one policy on every seat)
    player: str = "main"  # the league player this host trains (its snapshots carry this name)
    role: Role = Role.MAIN
    pool_dir: str = ""  # the model pool shared by the league's hosts ("" = <league run dir>/pool, set by the launcher)
    prefetch: int = 256  # opponents fetched per league call
    report_batch: int = 256  # results per report call at most
    report_interval_s: float = 0.5  # seconds between result reports to the league
    check_in_interval_s: float = 2.0  # seconds between the learner's check-ins (snapshot decisions)
    retry_s: float = 1.0  # wait after a failed league call before the next try
    cache_size: int = 16  # opponent params kept on the device (soft: opponents in play are never evicted)
    cache_keep_s: float = 30.0  # an opponent used within this long counts as in play
    max_pending_results: int = 1_000_000  # beyond this the oldest unreported results are dropped, with a warning
    # False: games against snapshots rate them and the learner, but replay records none of them (nor do the
    # episode metrics count them: they are league games, counted there); the learner trains on self-play
    # alone. An entropy-regularised learner's fixed point in self-play is the game's QRE; a share of data
    # against a fixed exploitable opponent moves that fixed point (benchmarks/README.md).
    train_on_matches: bool = True

    def __post_init__(self):
        if not self.player or ":" in self.player or any(c.isspace() for c in self.player):
            raise ValueError(f"league player name {self.player!r} must be non-empty, without ':' or whitespace")
        Role(self.role)  # raises for an unknown role
        if not self.train_on_matches and Role(self.role) is not Role.MAIN:
            raise ValueError(f"a {Role(self.role).value} learns from its games against snapshots, and "
                             "league.train_on_matches false would leave it nothing to train on: drop "
                             "--league.train-on-matches false for this player (main agents only)")
        for name in ("prefetch", "report_batch", "cache_size", "max_pending_results"):
            if getattr(self, name) < 1:
                raise ValueError(f"league.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("report_interval_s", "check_in_interval_s", "retry_s", "cache_keep_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"league.{name} must be > 0, got {getattr(self, name)}")

    @property
    def enabled(self) -> bool:
        return bool(self.address)
