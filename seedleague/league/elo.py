"""Elo ratings: the expected score of a pairing and the update after one game.

Pure functions of floats (numpy arrays broadcast). Source: A. Elo, "The Rating of
Chessplayers, Past and Present" (1978); logistic form with a 400-point scale, so a
400-point gap means 10:1 odds.

    expected_score(1200, 1200)        # 0.5
    elo_update(1200, 1200, 1.0)       # (1216.0, 1184.0) with k=32
"""

from __future__ import annotations

import numpy as np


def expected_score(r_a, r_b, scale: float = 400.0):
    """E[score of a against b] = 1 / (1 + 10^((r_b - r_a) / scale))."""
    if not scale > 0:
        raise ValueError(f"Elo scale must be > 0, got {scale}")
    if not (isinstance(r_a, float) and isinstance(r_b, float)):  # floats stay floats: the league rates every game
        r_a, r_b = np.asarray(r_a, np.float64), np.asarray(r_b, np.float64)
    return 1.0 / (1.0 + 10.0 ** ((r_b - r_a) / scale))


def elo_update(r_a, r_b, score_a, k: float = 32.0, scale: float = 400.0):
    """(r_a', r_b') after a game that `a` scored `score_a` in (1 win, 0.5 draw, 0 loss).

    Zero-sum: a gains k * (score_a - E_a) and b loses the same.
    """
    if isinstance(score_a, float):
        out_of_range = not 0.0 <= score_a <= 1.0  # NaN too
    else:
        score_a = np.asarray(score_a, np.float64)
        out_of_range = not np.all((score_a >= 0) & (score_a <= 1))
    if out_of_range:
        raise ValueError(f"score_a must be in [0, 1], got {score_a}")
    if not k > 0:
        raise ValueError(f"Elo k must be > 0, got {k}")
    delta = k * (score_a - expected_score(r_a, r_b, scale))
    return r_a + delta, r_b - delta
