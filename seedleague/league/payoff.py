"""The payoff table's arithmetic: decayed win/draw/loss/game counts of one ordered pair,
and the win rate they give.

Pure functions of numpy arrays. A pair's row is [wins, draws, losses, games] from
the first key's side. Sources: AlphaStar pseudocode (Vinyals et al., Nature 2019,
`Payoff._update`: every count of the pair is multiplied by `decay` = 0.99 each
time the pair gets a new result, then the result is added) and TLeague (Sun et
al. 2020, `PayoffMatrix`: win rate (wins + draws/2) / games, 0.5 below 5 games).

    row_ab = decayed_update(row_ab, outcome=1.0, decay=0.99)   # a beat b
    row_ba = decayed_update(row_ba, outcome=0.0, decay=0.99)   # the reverse pair, symmetric
    p = win_rate(row_ab[WINS], row_ab[DRAWS], row_ab[GAMES], min_games=5)

Note `games` is the decayed count: with decay 0.99, five results make 4.90
games, so `min_games=5` needs six.
"""

from __future__ import annotations

import numpy as np

WINS, DRAWS, LOSSES, GAMES = 0, 1, 2, 3
ROW = 4  # length of a pair's row
OUTCOMES = (0.0, 0.5, 1.0)  # loss, draw, win


def decayed_update(counts: np.ndarray, outcome: float, decay: float) -> np.ndarray:
    """A new row [wins, draws, losses, games]: `counts` * decay, plus one game with `outcome`.

    `outcome` is 1 (win), 0.5 (draw) or 0 (loss) from the row's first key's side.
    """
    counts = np.asarray(counts, dtype=np.float64)
    if counts.shape != (ROW,):
        raise ValueError(f"counts must be [wins, draws, losses, games], shape ({ROW},), got {counts.shape}")
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome must be 1 (win), 0.5 (draw) or 0 (loss), got {outcome!r}")
    if not 0.0 < decay <= 1.0:
        raise ValueError(f"decay must be in (0, 1], got {decay}")
    updated = counts * decay
    updated[{1.0: WINS, 0.5: DRAWS, 0.0: LOSSES}[float(outcome)]] += 1.0
    updated[GAMES] += 1.0
    return updated


def win_rate(wins: np.ndarray, draws: np.ndarray, games: np.ndarray, min_games: float) -> np.ndarray:
    """(wins + draws/2) / games elementwise, 0.5 where games < min_games (too little data).

    Works on scalars and arrays of one shape; returns float64 of that shape.
    """
    wins, draws, games = (np.asarray(a, dtype=np.float64) for a in (wins, draws, games))
    if not wins.shape == draws.shape == games.shape:
        raise ValueError(f"wins, draws and games must share a shape, got {wins.shape}, {draws.shape}, {games.shape}")
    if min_games < 0:
        raise ValueError(f"min_games must be >= 0, got {min_games}")
    enough = (games >= min_games) & (games > 0)
    rate = (wins + 0.5 * draws) / np.where(enough, games, 1.0)
    return np.where(enough, rate, 0.5)


def inherit(counts: np.ndarray, parent: int, child: int) -> np.ndarray:
    """A new table [K, K, 4] where `child` takes over `parent`'s row and column, and `parent`'s are zero.

    TLeague lets a child model inherit its parent's payoff row. Here the child is
    a snapshot of live player `parent`: the games the live params played become
    the snapshot's (so snapshot i keeps its results against snapshots j < i), and
    the live player starts a fresh row because its params move on from here.
    """
    counts = np.asarray(counts, dtype=np.float64)
    k = counts.shape[0]
    if counts.ndim != 3 or counts.shape != (k, k, ROW):
        raise ValueError(f"counts must have shape [K, K, {ROW}], got {counts.shape}")
    if not (0 <= parent < k and 0 <= child < k and parent != child):
        raise ValueError(f"parent {parent} and child {child} must be distinct indices below {k}")
    table = counts.copy()
    table[child, :] = counts[parent, :]
    table[:, child] = counts[:, parent]
    table[child, child] = counts[parent, parent]
    table[child, parent] = table[parent, child] = 0.0
    table[parent, :] = 0.0
    table[:, parent] = 0.0
    return table


def wilson_interval(rate: np.ndarray, games: np.ndarray, z: float = 1.96) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of the Wilson score interval of a win rate `rate` measured over `games` games, elementwise.

    Wilson (1927), "Probable inference, the law of succession, and statistical inference":
    centre (p + z²/2n) / (1 + z²/n), half-width z·sqrt(p(1-p)/n + z²/4n²) / (1 + z²/n).
    Decayed (fractional) game counts are used as n; with no games the interval is [0, 1].
    z = 1.96 gives 95%.
    """
    p, n = np.broadcast_arrays(np.asarray(rate, dtype=np.float64), np.asarray(games, dtype=np.float64))
    if np.any(n < 0) or np.any((p < 0) | (p > 1)):
        raise ValueError("rate must be in [0, 1] and games >= 0")
    safe_n = np.where(n > 0, n, 1.0)
    denominator = 1.0 + z * z / safe_n
    centre = (p + z * z / (2 * safe_n)) / denominator
    half = z * np.sqrt(p * (1 - p) / safe_n + z * z / (4 * safe_n * safe_n)) / denominator
    low = np.where(n > 0, np.clip(centre - half, 0.0, 1.0), 0.0)
    high = np.where(n > 0, np.clip(centre + half, 0.0, 1.0), 1.0)
    return low, high
