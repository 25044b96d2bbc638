"""TrueSkill-style ratings (mu, sigma) for one game between two keys, beside Elo.

A pure function over floats, wrapping the `openskill` package's Weng-Lin
Thurstone-Mosteller model (Weng & Lin, "A Bayesian Approximation Method for
Online Ranking", JMLR 2011), the open Bayesian analogue of Microsoft's TrueSkill
(Herbrich et al., NeurIPS 2006). Defaults are TrueSkill's: mu 25, sigma 25/3;
a leaderboard usually ranks by the conservative mu - 3 sigma.

    (mu_a, sigma_a), (mu_b, sigma_b) = rate_1v1((25.0, 25 / 3), (25.0, 25 / 3), score_a=1.0)
"""

from __future__ import annotations

import functools

from openskill.models import ThurstoneMostellerFull

INITIAL_MU = 25.0
INITIAL_SIGMA = 25.0 / 3.0

_RANKS = {1.0: [0, 1], 0.5: [0, 0], 0.0: [1, 0]}  # lower rank is better; equal ranks draw


@functools.lru_cache(maxsize=1)
def _model() -> ThurstoneMostellerFull:
    return ThurstoneMostellerFull(mu=INITIAL_MU, sigma=INITIAL_SIGMA)


def rate_1v1(
    a: tuple[float, float], b: tuple[float, float], score_a: float
) -> tuple[tuple[float, float], tuple[float, float]]:
    """((mu_a', sigma_a'), (mu_b', sigma_b')) after a game `a` scored `score_a` in (1, 0.5 or 0)."""
    if score_a not in _RANKS:
        raise ValueError(f"score_a must be 1 (win), 0.5 (draw) or 0 (loss), got {score_a!r}")
    for name, (mu, sigma) in (("a", a), ("b", b)):
        if not sigma > 0:
            raise ValueError(f"sigma of {name} must be > 0, got {sigma}")
    model = _model()
    (new_a,), (new_b,) = model.rate(
        [[model.rating(mu=a[0], sigma=a[1])], [model.rating(mu=b[0], sigma=b[1])]], ranks=_RANKS[float(score_a)]
    )
    return (float(new_a.mu), float(new_a.sigma)), (float(new_b.mu), float(new_b.sigma))
