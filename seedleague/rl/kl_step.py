"""A learning rate steered by how far each update moves the policy: MMD's step, measured, following alpha.

Magnetic mirror descent's iterates converge only while the step is small against the regularisation: eta <= alpha /
L^2 in Sokota et al. 2023 (Theorem 3.4), so a step that may be large at the start must shrink as alpha anneals. In the
deep form the step is Adam's learning rate, and what a rate does to the policy depends on the game, the network and
the stage of training: a fixed schedule either freezes the iterate before it has converged or leaves it moving
(benchmarks/README.md, "The same final learning rate on three Kuhn seeds, liars_dice and Leduc"). `KLStep` steers the
rate instead by what every update measures, the mean KL(pi_new || pi_acting) over its batch (MMD's own proximal
term, the loss's `kl`), towards

    target_t = target_0 * (alpha_t / alpha_0) ** 2

A KL is second order in the step, so the square keeps the step itself proportional to alpha. target_0 is the median
KL of the run's first CALIBRATION updates at the recipe's own rate (or LearnerConfig.kl_target when set): the run
measures it, no game sets it. The steering is the adaptive learning rate of rl_games (Makoviichuk and Makoviychuk),
PPO's adaptive KL rule (Schulman et al. 2017, section 4) applied to the step size: above twice the target the rate
falls by 1.5x, below half of it it rises by 1.5x, and the rate stays within [MIN_RATE, MAX_RATE].

The factor is the learner's state outside the train state: a resumed run calibrates again from its first updates.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

CALIBRATION = 50  # updates at the recipe's rate whose median KL sets target_0
BAND = 2.0  # the rate changes once the KL leaves [target / BAND, target * BAND]
CHANGE = 1.5  # by this factor
MIN_RATE, MAX_RATE = 1e-6, 1e-2


class KLStep:
    """The multiplier on the scheduled learning rate after each update's measured KL and alpha."""

    def __init__(self, learning_rate: float, kl_target: float = 0.0):
        """`learning_rate`: the recipe's initial rate (bounds the factor); `kl_target`: target_0 (0: calibrated)."""
        self.factor = 1.0
        self._lowest, self._highest = MIN_RATE / learning_rate, MAX_RATE / learning_rate
        self.target_0: Optional[float] = kl_target or None
        self.alpha_0: Optional[float] = None
        self._kls: list[float] = []
        self._alphas: list[float] = []

    def target(self, alpha: float) -> Optional[float]:
        """The KL an update at entropy cost `alpha` is steered to (None while calibrating)."""
        if self.target_0 is None or self.alpha_0 is None:
            return None
        return self.target_0 * (alpha / self.alpha_0) ** 2

    def observe(self, kl: float, alpha: float) -> float:
        """Record one update's KL and alpha; returns the factor for the next update."""
        if not (np.isfinite(kl) and np.isfinite(alpha) and alpha > 0):
            return self.factor
        if self.alpha_0 is None:
            self._kls.append(kl)
            self._alphas.append(alpha)
            if len(self._kls) < CALIBRATION:
                return self.factor
            self.target_0 = self.target_0 or float(np.median(self._kls))
            if self.target_0 > 0:  # an update that moves nothing (a loss without the KL term) leaves the rate alone
                self.alpha_0 = float(np.median(self._alphas))
            return self.factor
        target = self.target(alpha)
        if kl > target * BAND:
            self.factor = max(self.factor / CHANGE, self._lowest)
        elif kl < target / BAND:
            self.factor = min(self.factor * CHANGE, self._highest)
        return self.factor
