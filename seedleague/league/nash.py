"""Nash equilibria of two-player zero-sum matrix games, by linear programming.

Pure functions of numpy arrays. Source: von Neumann's minimax theorem; the LP
is the textbook one (e.g. Shoham & Leyton-Brown, "Multiagent Systems", 2009,
section 4.2.1), solved with scipy's HiGHS. `symmetric_nash` gives PSRO's
meta-strategy (Lanctot et al., "A Unified Game-Theoretic Approach to
Multiagent Reinforcement Learning", NeurIPS 2017) over a league's empirical
win-rate matrix.

    x, y, v = solve_zero_sum(np.array([[0, -1, 1], [1, 0, -1], [-1, 1, 0]]))   # RPS: 1/3 each, v = 0
"""

from __future__ import annotations

import numpy as np


def solve_zero_sum(payoff: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """(row_strategy [M], col_strategy [N], value) of the game where the row player gets payoff[i, j].

    The row player maximises and the column player minimises; `value` is the row
    player's expected payoff at equilibrium. When several equilibria exist, one
    of them is returned.
    """
    a = np.asarray(payoff, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] == 0 or a.shape[1] == 0:
        raise ValueError(f"payoff must be a non-empty matrix [M, N], got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError("payoff has NaN or infinite entries")
    row, value = _maximin(a)
    col, neg_value = _maximin(-a.T)
    return row, col, float(0.5 * (value - neg_value))  # the two LPs agree up to solver tolerance


def _maximin(a: np.ndarray) -> tuple[np.ndarray, float]:
    """The row strategy x maximising min_j (x^T a)_j, and that value.

    Variables [x_1..x_M, v]: maximise v subject to v - sum_i x_i a[i, j] <= 0 for
    every column j, sum_i x_i = 1, x >= 0, v free.
    """
    from scipy.optimize import linprog  # optional-heavy: scipy.optimize loads only when an LP is solved

    m, n = a.shape
    c = np.zeros(m + 1)
    c[-1] = -1.0  # linprog minimises; minimise -v
    a_ub = np.hstack([-a.T, np.ones((n, 1))])
    a_eq = np.hstack([np.ones((1, m)), np.zeros((1, 1))])
    bounds = [(0.0, None)] * m + [(None, None)]
    result = linprog(c, A_ub=a_ub, b_ub=np.zeros(n), A_eq=a_eq, b_eq=[1.0], bounds=bounds, method="highs")
    if result.status != 0:
        raise RuntimeError(f"the zero-sum LP failed: {result.message}")
    x = np.clip(result.x[:m], 0.0, None)
    return x / x.sum(), float(result.x[-1])


def symmetric_nash(win_rate_matrix: np.ndarray) -> np.ndarray:
    """A Nash mixture [K] over K policies, from P[i, j] = P(policy i beats policy j).

    The meta-game pays 2P - 1 to the row policy; taken as P - P^T, which is the
    same when P + P^T = 1 and exactly antisymmetric otherwise, so the game is
    symmetric zero-sum with value 0 and the row strategy serves both seats.
    """
    p = np.asarray(win_rate_matrix, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] != p.shape[1] or p.shape[0] == 0:
        raise ValueError(f"win_rate_matrix must be a non-empty square matrix [K, K], got shape {p.shape}")
    if not np.all((p >= 0.0) & (p <= 1.0)):
        raise ValueError("win rates must lie in [0, 1]")
    row, _ = _maximin(p - p.T)  # a symmetric game: the column player's LP has the same solution
    return row


def league_nash(keys: list[str], win_rate: np.ndarray, player: str | None = None) -> dict[str, float]:
    """The Nash mixture over a league's snapshots (keys "player:step"; of `player` only, if given)
    from its payoff matrix's win rates: PSRO's meta-strategy, as {snapshot key: weight > 0}."""
    picked = [i for i, key in enumerate(keys) if ":" in key and (player is None or key.rpartition(":")[0] == player)]
    if not picked:
        raise ValueError(f"the league has no snapshots{f' of {player}' if player else ''} to mix")
    weights = symmetric_nash(np.asarray(win_rate, np.float64)[np.ix_(picked, picked)])
    return {keys[i]: float(w) for i, w in zip(picked, weights) if w > 1e-9}
