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

    def __post_init__(self):
        object.__setattr__(self, "mcts_sims", tuple(self.mcts_sims))
        if self.games < 1 or (self.mcts_games is not None and self.mcts_games < 1):
            raise ValueError(f"--games and --mcts-games must be >= 1, got {self.games} and {self.mcts_games}")
        if any(s < 1 for s in self.mcts_sims):
            raise ValueError(f"--mcts-sims must be positive simulation counts, got {self.mcts_sims}")


QUICK = EvalConfig(games=50, mcts_sims=(100,), mcts_games=10)  # a few seconds: the end of `seedleague train`


def check_average_fraction(fraction: float) -> float:
    """`fraction` (of a league's newest snapshots, `seedleague eval --average`), or ValueError unless in (0, 1]."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"--average must be a fraction of the snapshots in (0, 1], got {fraction}")
    return fraction
