"""TrueSkill-style ratings (mu, sigma) for one game between two keys, beside Elo.

A pure function of floats: the Weng-Lin Bayesian rating update with the
Thurstone-Mosteller model over full pairing (Weng & Lin, "A Bayesian
Approximation Method for Online Ranking", JMLR 12, 2011, Algorithm 1 with the
Thurstone-Mosteller v, w, v~ and w~ of section 3), the open analogue of
Microsoft's TrueSkill (Herbrich et al., NeurIPS 2006). Defaults are TrueSkill's:
mu 25, sigma 25/3, beta sigma/2, and those of the `openskill` package's
`ThurstoneMostellerFull` (draw margin epsilon 0.1, variance floor kappa 1e-4,
dynamics tau mu/300 added to each sigma before every game), whose results this
reproduces to 1e-9 wherever that library's normal CDF keeps its digits (tests/
test_league_math.py; in the far tail, huge upsets, this one is the accurate one). Written out for the two-player,
one-player-per-side case because the league rates every finished episode: the
library's general n-team `rate` deep-copies its inputs and took 55-70 us a game,
most of the league's time at 10K results/s; this takes a few.

    (mu_a, sigma_a), (mu_b, sigma_b) = rate_1v1((25.0, 25 / 3), (25.0, 25 / 3), score_a=1.0)

A leaderboard usually ranks by the conservative mu - 3 sigma.
"""

from __future__ import annotations

import math

INITIAL_MU = 25.0
INITIAL_SIGMA = 25.0 / 3.0
BETA = INITIAL_SIGMA / 2.0  # performance noise of one game
TAU = INITIAL_MU / 300.0  # added (in quadrature) to every sigma before a game, so ratings can keep moving
EPSILON = 0.1  # draw margin
KAPPA = 1e-4  # floor of the factor that shrinks sigma

_FLOAT_EPS = 2.220446049250313e-16  # sys.float_info.epsilon
_SQRT_2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / _SQRT_2)


def _pdf(x: float) -> float:
    return _INV_SQRT_2PI * math.exp(-0.5 * x * x)


def _v(x: float, t: float) -> float:
    """Mean shift of a truncated Gaussian for a decisive game (Weng & Lin's V)."""
    xt = x - t
    denominator = _cdf(xt)
    return -xt if denominator < _FLOAT_EPS else _pdf(xt) / denominator


def _w(x: float, t: float) -> float:
    """Variance shrink for a decisive game (Weng & Lin's W)."""
    xt = x - t
    if _cdf(xt) < _FLOAT_EPS:
        return 1.0 if x < 0 else 0.0
    v = _v(x, t)
    return v * (v + xt)


def _v_draw(x: float, t: float) -> float:
    """Mean shift for a draw (Weng & Lin's V~)."""
    xx = abs(x)
    b = _cdf(t - xx) - _cdf(-t - xx)
    if b < 1e-5:
        return -x - t if x < 0 else -x + t
    a = _pdf(-t - xx) - _pdf(t - xx)
    return (-a if x < 0 else a) / b


def _w_draw(x: float, t: float) -> float:
    """Variance shrink for a draw (Weng & Lin's W~)."""
    xx = abs(x)
    b = _cdf(t - xx) - _cdf(-t - xx)
    if b < _FLOAT_EPS:
        return 1.0
    v = _v_draw(x, t)
    return ((t - xx) * _pdf(t - xx) + (t + xx) * _pdf(-t - xx)) / b + v * v


def rate_1v1(
    a: tuple[float, float], b: tuple[float, float], score_a: float
) -> tuple[tuple[float, float], tuple[float, float]]:
    """((mu_a', sigma_a'), (mu_b', sigma_b')) after a game `a` scored `score_a` in (1, 0.5 or 0)."""
    if score_a not in (0.0, 0.5, 1.0):
        raise ValueError(f"score_a must be 1 (win), 0.5 (draw) or 0 (loss), got {score_a!r}")
    for name, (mu, sigma) in (("a", a), ("b", b)):
        if not sigma > 0:
            raise ValueError(f"sigma of {name} must be > 0, got {sigma}")
    (mu_a, sigma_a), (mu_b, sigma_b) = a, b
    var_a, var_b = sigma_a * sigma_a + TAU * TAU, sigma_b * sigma_b + TAU * TAU
    c = math.sqrt(var_a + var_b + 2.0 * BETA * BETA)
    x, t = (mu_a - mu_b) / c, EPSILON / c
    if score_a == 0.5:
        shift_a, shrink_a = _v_draw(x, t), _w_draw(x, t)
        shift_b, shrink_b = _v_draw(-x, t), _w_draw(-x, t)
    else:
        winner_x = x if score_a == 1.0 else -x  # the winner's side of the mean difference
        shift, shrink = _v(winner_x, t), _w(winner_x, t)
        shift_a, shift_b = (shift, -shift) if score_a == 1.0 else (-shift, shift)
        shrink_a = shrink_b = shrink
    return _posterior(mu_a, var_a, c, shift_a, shrink_a), _posterior(mu_b, var_b, c, shift_b, shrink_b)


def _posterior(mu: float, var: float, c: float, shift: float, shrink: float) -> tuple[float, float]:
    """(mu', sigma') of one side: mu + var/c * V, sigma * sqrt(max(1 - gamma * var/c^2 * W, kappa)), where
    gamma = sigma / c damps the variance update (openskill's default gamma)."""
    sigma = math.sqrt(var)
    gamma = sigma / c
    return mu + var / c * shift, sigma * math.sqrt(max(1.0 - gamma * var / (c * c) * shrink, KAPPA))
