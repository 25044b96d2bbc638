"""Prioritised fictitious self-play (PFSP): how likely each candidate opponent is to be drawn.

Pure functions of numpy arrays. Source: Vinyals et al., "Grandmaster level in
StarCraft II using multi-agent reinforcement learning", Nature 2019 (Methods,
"Prioritized fictitious self-play", and the pseudocode's `pfsp`): opponent B is
drawn for player A with probability proportional to f(P[A beats B]).

    win_rates = np.array([0.2, 0.5, 0.9])            # P[live player beats each candidate]
    probs = pfsp_weights(win_rates, "hard")          # [0.64, 0.25, 0.01] / 0.90
    opponent = rng.choice(len(probs), p=probs)
"""

from __future__ import annotations

import numpy as np

WEIGHTINGS = ("hard", "variance", "linear", "linear_capped", "uniform")


def pfsp_weights(win_rates: np.ndarray, weighting: str, p: float = 2.0) -> np.ndarray:
    """Probabilities over candidates [N] from P[player beats candidate] [N] in [0, 1].

    Weightings f(x): "hard" (1-x)^p (AlphaStar's "squared" for p=2: focus on the
    hardest opponents), "variance" x(1-x) (opponents of similar strength),
    "linear" 1-x, "linear_capped" min(0.5, 1-x) (the league exploiters'),
    "uniform" 1. When every weight is 0 (the player beats everyone surely) the
    draw falls back to uniform, as in the AlphaStar pseudocode.
    """
    if weighting not in WEIGHTINGS:
        raise ValueError(f"unknown PFSP weighting {weighting!r}: use one of {', '.join(WEIGHTINGS)}")
    x = np.asarray(win_rates, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"win_rates must be a vector [N], got shape {x.shape}")
    if x.size == 0:
        raise ValueError("win_rates is empty: PFSP needs at least one candidate opponent")
    if not np.all((x >= 0.0) & (x <= 1.0)):  # also refuses NaN
        raise ValueError(f"win rates must lie in [0, 1], got {x.tolist()}")
    if not p > 0.0:
        raise ValueError(f"PFSP exponent p must be > 0, got {p}")
    weights = _weights(x, weighting, p)
    total = weights.sum()
    if total <= 0.0:
        return np.full(x.shape, 1.0 / x.size)
    return weights / total


def _weights(x: np.ndarray, weighting: str, p: float) -> np.ndarray:
    if weighting == "hard":
        return (1.0 - x) ** p
    if weighting == "variance":
        return x * (1.0 - x)
    if weighting == "linear":
        return 1.0 - x
    if weighting == "linear_capped":
        return np.minimum(0.5, 1.0 - x)
    return np.ones_like(x)
