"""A strategy over whole games: a mixture of policies played one member per episode, and its weights.

    mixture = PolicyMixture([policy_a, policy_b], [0.3, 0.7], seed=0)
    member = mixture.draw()               # play a whole episode with it (seat=s: by seat s's own mix)
    mixture_weights(2, [3, 7])            # [0.3, 0.7]: normalised, a bad one refused naming it
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from seedleague.artifacts.policy import Policy, Rng


def mixture_weights(count: int, weights: Any) -> np.ndarray:
    """`weights` for a mixture of `count` policies, normalised to sum to 1; ValueError names a bad one."""
    w = np.asarray(weights, np.float64)
    if count == 0 or w.shape != (count,):
        raise ValueError(f"a mixture needs one weight per policy and at least one policy; got {count} policies, "
                         f"{len(w) if w.ndim == 1 else w.shape} weights")
    if not np.all(np.isfinite(w)) or (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"mixture weights must be finite, >= 0 and not all 0, got {list(weights)}")
    return w / w.sum()


def seat_mixture_weights(count: int, seat_weights: Any) -> np.ndarray:
    """[seats, count]: one row of `mixture_weights` per seat; ValueError names a bad row."""
    rows = np.asarray(seat_weights, np.float64)
    if rows.ndim != 2 or rows.shape[0] < 1:
        raise ValueError(f"seat weights need one row of {count} weights per seat, got shape {rows.shape}")
    return np.stack([mixture_weights(count, row) for row in rows])


class PolicyMixture:
    """A strategy over whole games: play `members[k]` for an entire episode with probability
    `weights[k]` (normalised to sum to 1). This is how an average policy of self-play, or a league's
    Nash mixture, is played: `draw()` a member at every episode start and act with it until the
    episode ends. Averaging the members' action probabilities state by state instead would be
    another strategy (seedleague.eval.openspiel_eval.mixture_policy builds the equivalent one).

    With `seat_weights` ([seats, K]) each seat has its own mix, as the least exploitable mixture of
    a run's networks does (seedleague.eval.least_exploitable): `draw(seat=s)` draws by row s, and
    `weights` (their mean) is the mix for a caller that does not know its seat."""

    def __init__(self, members: list[Policy], weights: list[float], seed: int = 0, seat_weights: Any = None):
        self.weights = mixture_weights(len(members), weights)
        self.seat_weights = None if seat_weights is None else seat_mixture_weights(len(members), seat_weights)
        if len({m.spec for m in members}) > 1:
            raise ValueError(f"a mixture's members must share one env spec, got {sorted({str(m.spec) for m in members})}")
        self.members = list(members)
        self.spec = members[0].spec
        self._rng = np.random.default_rng(seed)

    def __repr__(self) -> str:
        return f"PolicyMixture({len(self.members)} members of {self.spec.env_name!r})"

    def draw(self, rng: Rng = None, seat: Optional[int] = None) -> Policy:
        """The member to play the next whole episode with (rng: a Generator or int seed; None: the
        mixture's own generator), in `seat` where the mixture has one mix per seat."""
        generator = self._rng if rng is None else np.random.default_rng(rng)
        weights = self.weights
        if seat is not None and self.seat_weights is not None:
            if not 0 <= seat < len(self.seat_weights):
                raise ValueError(f"this mixture has weights for seats 0-{len(self.seat_weights) - 1}, got seat {seat}")
            weights = self.seat_weights[seat]
        return self.members[generator.choice(len(self.members), p=weights)]
