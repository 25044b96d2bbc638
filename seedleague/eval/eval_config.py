"""How much one `seedleague eval` plays, and the checks on its settings, without jax or pyspiel, so that the command's
flags (seedleague.eval.cli_args) refuse a bad value before seedleague.eval.measure loads them.

    config = EvalConfig(games=100, mcts_sims=(100, 1000))   # ValueError naming the flag when a count is < 1
    check_average_fraction(0.33)                             # ValueError unless in (0, 1]
"""

from __future__ import annotations

import dataclasses
from typing import Optional


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    """How much to play in one `seedleague eval`."""

    games: int = 100  # against random and head-to-head
    mcts_sims: tuple[int, ...] = (100,)  # one MCTS opponent per simulation count
    mcts_games: Optional[int] = None  # games against each MCTS opponent (None: `games`)
    uct_c: float = 2.0
    greedy: bool = False  # the policy plays its most probable legal action instead of sampling
    seed: int = 0
    match_seconds: Optional[float] = None  # a match begins no game after this long (None: all its games)

    def __post_init__(self):
        object.__setattr__(self, "mcts_sims", tuple(self.mcts_sims))
        if self.games < 1 or (self.mcts_games is not None and self.mcts_games < 1):
            raise ValueError(f"--games and --mcts-games must be >= 1, got {self.games} and {self.mcts_games}")
        if any(s < 1 for s in self.mcts_sims):
            raise ValueError(f"--mcts-sims must be positive simulation counts, got {self.mcts_sims}")
        if self.match_seconds is not None and not self.match_seconds > 0:
            raise ValueError(f"--match-seconds must be > 0 (leave it out to play every game), got {self.match_seconds}")


# The end of `seedleague train`: a few seconds on small games; on large ones (an MCTS opponent's random rollouts in chess
# took 100 s for its 10 games, hive's longer) each match stops beginning games after match_seconds.
QUICK = EvalConfig(games=50, mcts_sims=(100,), mcts_games=10, match_seconds=20.0)


def check_average_fraction(fraction: float) -> float:
    """`fraction` (of a league's newest snapshots, `seedleague eval --average`), or ValueError unless in (0, 1]."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"--average must be a fraction of the snapshots in (0, 1], got {fraction}")
    return fraction
