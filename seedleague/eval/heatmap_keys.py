"""Which keys a payoff heatmap shows when the league holds too many to read.

A run of a few minutes freezes hundreds of snapshots, most with a handful of games;
all of them on one heatmap is one grey square. `pick_keys` keeps at most `limit`:

    subset = pick_keys(league.payoff(), limit=24)
    subset.indices        # into payoff.keys, in step order
    subset.describe()     # "24 of 300 keys: the Nash support (...), ..." for report.md

chosen in turn from the Nash support of the win-rate matrix (largest weight first:
the snapshots the league's equilibrium mixes), the most-played keys (most games in
the payoff matrix), and the most recent snapshots, until `limit` keys are picked.
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np

from seedleague.league.nash import symmetric_nash
from seedleague.league.types import PayoffMatrix, parse_key

log = logging.getLogger(__name__)

HEATMAP_KEYS = 24
NASH = "Nash support"
PLAYED = "most played"
RECENT = "most recent"


@dataclasses.dataclass(frozen=True)
class KeySubset:
    """Keys picked for the heatmap, and why each was."""

    indices: list[int]  # into the payoff matrix's keys, in step order
    reasons: dict[int, tuple[str, ...]]  # index -> the lists (NASH, PLAYED, RECENT) that picked it
    total: int  # keys in the payoff matrix

    @property
    def complete(self) -> bool:
        return len(self.indices) == self.total

    def describe(self) -> str:
        """One sentence for report.md: which subset is shown and why."""
        if self.complete:
            return f"All {self.total} keys are shown."
        counts = {name: sum(name in why for why in self.reasons.values()) for name in (NASH, PLAYED, RECENT)}
        return (f"{len(self.indices)} of {self.total} keys are shown, in step order: the {NASH} of the payoff "
                f"matrix ({counts[NASH]} keys, marked *: the snapshots the league's equilibrium mixes), the "
                f"{PLAYED} ({counts[PLAYED]}, most games) and the {RECENT} snapshots ({counts[RECENT]}); a key "
                f"may be in several. Cells with no games are hatched.")


def step_order(keys: list[str]) -> list[int]:
    """Indices of `keys` by snapshot step (live players, which have no step, last), then by key."""
    def order(i: int):
        try:
            _, step = parse_key(keys[i])
        except ValueError:
            step = None
        return (step is None, step or 0, keys[i])

    return sorted(range(len(keys)), key=order)


def nash_weights(win_rate: np.ndarray) -> np.ndarray:
    """The symmetric Nash mixture of the win-rate matrix; zeros when the solver fails (the heatmap goes on)."""
    try:
        return symmetric_nash(win_rate)
    except (ValueError, RuntimeError) as error:
        log.warning("no Nash support for the heatmap: %s", error)
        return np.zeros(len(win_rate))


def pick_keys(payoff: PayoffMatrix, limit: int = HEATMAP_KEYS) -> KeySubset:
    """At most `limit` keys: Nash support, then most played, then most recent, a third of `limit` each
    (what one list leaves unused goes to the next; the most recent fill what is left)."""
    n = len(payoff.keys)
    if n <= limit:
        return KeySubset(step_order(payoff.keys), {}, n)
    win_rate = np.asarray(payoff.win_rate, np.float64).reshape(n, n)
    games = np.asarray(payoff.games, np.float64).reshape(n, n).sum(axis=1)
    weights = nash_weights(win_rate)
    candidates = {
        NASH: [i for i in np.argsort(-weights, kind="stable") if weights[i] > 1e-6],
        PLAYED: [i for i in np.argsort(-games, kind="stable") if games[i] > 0],
        RECENT: step_order(payoff.keys)[::-1],
    }
    reasons: dict[int, list[str]] = {}
    quota = limit // 3
    for round_, name in enumerate((NASH, PLAYED, RECENT)):
        share = limit if name == RECENT else quota * (round_ + 1)  # unused share passes on
        for i in candidates[name]:
            if len(reasons) >= share:
                break
            reasons.setdefault(int(i), []).append(name)  # a key already picked is also named by this list
    order = [i for i in step_order(payoff.keys) if i in reasons]
    return KeySubset(order, {i: tuple(why) for i, why in reasons.items()}, n)
