"""Statistics for tests repeated as data grows: the two-sample z statistics (on means, on proportions) and
group-sequential critical values; PBT's (seedleague.league.pbt) come from here.

    z = welch_z(mean_a, var_a, n_a, mean_b, var_b, n_b)      # one-sided statistic of "a's mean is above b's"
    z = two_proportion_z(wins_a, games_a, wins_b, games_b)     # the same for win rates (draws as half wins)
    spent = spending("pocock", 0.05, t=0.4)                    # the level spent by information fraction 0.4
    c = boundaries("obrien_fleming", 0.01, (0.2, 0.4, 0.6, 0.8, 1.0))   # one critical z a look

Repeated looks at a growing sample: a test that rejects at the first look whose z passes the fixed-sample
critical value rejects a true null far more often than its level. Splitting the level evenly over the looks
(Bonferroni) is valid but wastes power, because successive z statistics of the same growing sample are strongly
correlated (corr(Z_j, Z_k) = sqrt(t_j / t_k)). A group-sequential test spends the level over the looks by a
spending function alpha(t) of the information fraction t (Lan and DeMets 1983, "Discrete sequential boundaries
for clinical trials", Biometrika 70: 659-663) and sets each look's critical value c_k so that the chance of first
crossing at look k under the null is alpha(t_k) - alpha(t_{k-1}), computed from the joint normal law of the
statistics (the canonical Brownian-motion form; the numerical recursion of Armitage, McPherson and Rowe 1969,
Jennison and Turnbull 2000, "Group Sequential Methods with Applications to Clinical Trials", ch. 19).

Spending functions (one-sided level alpha):
- "pocock": alpha ln(1 + (e - 1) t) (Lan and DeMets' Pocock-type: nearly equal critical values a look);
- "obrien_fleming": 2 (1 - Phi(Phi^-1(1 - alpha / 2) / sqrt(t))) (O'Brien-Fleming-type: almost nothing early,
  the last look's critical value near the fixed-sample one);
- "bonferroni": alpha / L at each of L looks, Phi^-1(1 - alpha / L) (no use of the correlation; the old rule).

Pure functions of floats; no state. The normal law's tail and its inverse are the standard library's (math.erfc,
statistics.NormalDist); scipy only in the numerical recursion (`crossing_boundaries`), imported there: every
`seedleague league` command and the league service import this module, and most never compute a critical value.
"""

from __future__ import annotations

import functools
import math
from statistics import NormalDist
from typing import Sequence

import numpy as np

from seedleague.league.config import SPENDINGS  # the names; this module computes them

_GRID = 401  # points of the numerical integration a look (Simpson's rule)
_SMALLEST = 1e-300  # the least first-crossing chance computed (critical value 37.0)
_TAIL_SD = 10.0  # the grid's lower end, in standard deviations of the partial sum below 0


def normal_sf(z: float) -> float:
    """P(Z > z) for a standard normal Z, accurate in the far tail (1 - Phi(z) would round to 0 there)."""
    return 0.5 * math.erfc(z / math.sqrt(2))


def normal_isf(p: float) -> float:
    """The z with P(Z > z) = p, for p in (0, 1): the one-sided critical value of level p."""
    return -NormalDist().inv_cdf(p)


def welch_z(mean_a: float, var_a: float, n_a: float, mean_b: float, var_b: float, n_b: float) -> float:
    """One-sided large-sample statistic of "a's expectation is above b's" from two independent samples' means and
    (unbiased) variances: (mean_a - mean_b) / sqrt(var_a / n_a + var_b / n_b) (Welch 1947's statistic, referred
    to the normal law: the league's samples are hundreds of games). 0 when the standard error is 0 (two constant
    samples: no measured spread to scale the difference by, so no evidence is claimed)."""
    if n_a < 1 or n_b < 1:
        raise ValueError(f"each sample needs at least one value, got {n_a} and {n_b}")
    error = math.sqrt(max(var_a, 0.0) / n_a + max(var_b, 0.0) / n_b)
    return (mean_a - mean_b) / error if error > 0 else 0.0


def two_proportion_z(wins_a: float, games_a: float, wins_b: float, games_b: float) -> float:
    """One-sided z statistic of p_a > p_b from two independent samples (wins may count draws as halves), with
    Agresti and Caffo's adjustment (2000, "Simple and effective confidence intervals for proportions and
    differences of proportions"): one win and one loss added to each sample, so 0 and 1 give a finite z."""
    p_a, p_b = (wins_a + 1) / (games_a + 2), (wins_b + 1) / (games_b + 2)
    return (p_a - p_b) / math.sqrt(p_a * (1 - p_a) / (games_a + 2) + p_b * (1 - p_b) / (games_b + 2))


def spending(kind: str, alpha: float, t: float) -> float:
    """The one-sided level spent by information fraction `t` in (0, 1] under spending function `kind`
    (SPENDINGS except "bonferroni", which spends by looks, not by information)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if not 0 < t <= 1:
        raise ValueError(f"the information fraction must be in (0, 1], got {t}")
    if kind == "pocock":
        return alpha * math.log(1 + (math.e - 1) * t)
    if kind == "obrien_fleming":
        return 2 * normal_sf(normal_isf(alpha / 2) / math.sqrt(t))
    raise ValueError(f"unknown spending function {kind!r}: use one of {', '.join(SPENDINGS[:2])}")


def boundaries(kind: str, alpha: float, fractions: Sequence[float]) -> tuple[float, ...]:
    """The critical values c_1..c_L of a one-sided test at level `alpha` looked at at information `fractions`
    (increasing, in (0, 1]): reject at the first look k with Z_k > c_k. "bonferroni": every c_k =
    Phi^-1(1 - alpha / L). Otherwise c_k solves P(Z_1 <= c_1, ..., Z_{k-1} <= c_{k-1}, Z_k > c_k) =
    spending(t_k) - spending(t_{k-1}) under the null, with (Z_k) the canonical joint normal statistics."""
    fractions = tuple(float(t) for t in fractions)
    if not fractions or any(not 0 < t <= 1 for t in fractions) or any(
            b <= a for a, b in zip(fractions, fractions[1:])):
        raise ValueError(f"information fractions must increase within (0, 1], got {fractions}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if kind == "bonferroni":
        return (normal_isf(alpha / len(fractions)),) * len(fractions)
    return _spent_boundaries(kind, alpha, fractions)


def _spent_boundaries(kind: str, alpha: float, fractions: tuple[float, ...]) -> tuple[float, ...]:
    """`boundaries` for a spending function: each look's increment of the spent level."""
    spent = [0.0] + [spending(kind, alpha, t) for t in fractions]
    return crossing_boundaries(fractions, tuple(b - a for a, b in zip(spent, spent[1:])))


def increments(kind: str, alpha: float, looks: int) -> tuple[float, ...]:
    """The level spending function `kind` spends at each of `looks` equally spaced looks (fractions k / looks):
    alpha(t_k) - alpha(t_k-1), summing to alpha."""
    spent = [0.0] + [spending(kind, alpha, k / looks) for k in range(1, looks + 1)]
    return tuple(b - a for a, b in zip(spent, spent[1:]))


@functools.lru_cache(maxsize=1024)
def crossing_boundaries(fractions: tuple[float, ...], targets: tuple[float, ...]) -> tuple[float, ...]:
    """Critical values c_1..c_L at information `fractions` such that, under the null, the chance of first
    crossing at look k, P(Z_1 <= c_1, ..., Z_{k-1} <= c_{k-1}, Z_k > c_k), is `targets[k]` (each in (0, 1)):
    so P(some look crosses) = sum(targets). The recursion over the sub-density of the partial sum
    S_k = Z_k sqrt(t_k) (Brownian motion: independent normal increments of variance t_k - t_{k-1}) on the
    continuation region, integrated by Simpson's rule on a grid."""
    if len(fractions) != len(targets) or not fractions or any(not 0 <= a < 1 for a in targets):
        raise ValueError(f"one target in [0, 1) per look, got {targets} for {fractions}")
    # scipy's vectorised normal cdf and root finder: imported here, not at the top, since importing scipy takes
    # about a second that every league command and the league service would pay without computing this.
    from scipy import optimize, special

    targets = tuple(max(a, _SMALLEST) for a in targets)  # a share that underflowed: a look that never crosses
    critical = [normal_isf(targets[0])]
    s = _grid(critical[0], fractions[0])
    f = _normal_pdf(s / math.sqrt(fractions[0])) / math.sqrt(fractions[0])
    for k in range(1, len(fractions)):
        step, weights = math.sqrt(fractions[k] - fractions[k - 1]), _simpson(s) * f
        target = targets[k]

        def crossing(c: float) -> float:  # P(continue to look k, then Z_k > c)
            return float(weights @ special.ndtr((s - c * math.sqrt(fractions[k])) / step))

        high = 40.0
        c = optimize.brentq(lambda c: crossing(c) - target, -10.0, high, xtol=1e-10, rtol=1e-12) \
            if crossing(high) < target < crossing(-10.0) else high
        critical.append(float(c))
        grid = _grid(c, fractions[k])
        f = _normal_pdf((grid[:, None] - s[None, :]) / step) @ weights / step
        s = grid
    return tuple(critical)


def _grid(c: float, t: float) -> np.ndarray:
    """The continuation region of the partial sum at fraction t, (-_TAIL_SD sqrt(t), c sqrt(t)], as grid points."""
    root = math.sqrt(t)
    return np.linspace(-_TAIL_SD * root, max(c, -_TAIL_SD + 1) * root, _GRID)


def _normal_pdf(x: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _simpson(x: np.ndarray) -> np.ndarray:
    """Simpson's rule weights on an evenly spaced grid of an odd number of points."""
    h = x[1] - x[0]
    w = np.ones(len(x))
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    return w * h / 3.0
