"""A mixture of networks served one whole episode at a time: `seedleague serve` of a run whose
output is a mixture (seedleague.output: average_policy, league_nash).

It stands where a league player's opponent source stands, so the host serves it with the
machinery it plays league opponents with: at each episode start of an env, `draw` gives a
`Match` against one member (drawn by weight, per env, per episode), `Seating(every_seat=True)`
seats that member on every seat of the env until the episode ends, and the host's stacked
forward pass (`InferencePolicy.act_stacked`) acts for every member in play at once. A mixture with
one mix per seat (`seat_weights`, the least exploitable mixture's) draws each seat's member by its
own row, and the match names the member of every seat.

    mixture = ServedMixture(["main:000500", "main:001000"], [0.3, 0.7], [params_a, params_b], rng)
    mixture.draw(4)                          # 4 Matches, one member each
    mixture.opponent_params("main:000500")   # params_a
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from seedleague.artifacts.mixture import mixture_weights, seat_mixture_weights
from seedleague.league.types import Match


class ServedMixture:
    """Members (key, weight, params on the inference device) and the per-episode draw."""

    def __init__(self, keys: Sequence[str], weights: Sequence[float], params: Sequence[Any], rng: np.random.Generator,
                 seat_weights: Any = None):
        if len(set(keys)) != len(keys) or len(params) != len(keys):
            raise ValueError(f"a served mixture needs distinct keys and one params tree per key, got keys {list(keys)} "
                             f"and {len(params)} params")
        self.keys = list(keys)
        self.weights = mixture_weights(len(keys), weights)
        self.seat_weights = None if seat_weights is None else seat_mixture_weights(len(keys), seat_weights)
        self._params = dict(zip(self.keys, params))
        self._rng = rng

    def draw(self, count: int) -> list[Match]:
        """`count` members for new episodes, each drawn by weight independently (per seat, with seat weights)."""
        if self.seat_weights is None:
            picks = self._rng.choice(len(self.keys), size=count, p=self.weights)
            return [Match(opponent=self.keys[i], self_play=False) for i in picks]
        by_seat = np.stack([self._rng.choice(len(self.keys), size=count, p=row) for row in self.seat_weights], axis=1)
        return [Match(opponent=self.keys[seats[0]], self_play=False, seats=tuple(self.keys[i] for i in seats))
                for seats in by_seat]

    def opponent_params(self, key: str) -> Any:
        return self._params[key]
