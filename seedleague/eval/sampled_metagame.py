"""The meta-game of a run's newest snapshots, estimated from games they play, with every game counted for every pair.

PSRO's meta-solver needs the payoff M[i, j] of every member i in seat 0 against every member j in seat 1. Where no
game tree can be walked, it is estimated from evaluation games. Played pair by pair, a K x K matrix needs K^2 times
the games of one entry (Kuhn: 16,000 games per pair for its Nash to approach the exact one's, 65M for 64 members).
Instead every evaluation game draws each seat's member uniformly and independently, and each game estimates every
entry by importance weighting (multiple importance sampling with the balance heuristic, Veach & Guibas 1995): with
R_s[k] the product of member k's probabilities of seat s's actions along the game (its reach of the game from seat
s), the behaviour reached it with mu_s = mean_k R_s[k] (chance and the other seat cancel), so

    M_hat[i, j] = (1/N) sum_n u_n * w0_n[i] * w1_n[j],   w_s[k] = R_s[k] / mu_s = K * softmax_k(log R_s)[k]

is unbiased for every (i, j), each weight at most K and near 1 where the members agree. Its 95% half-widths come
from the sample variance of the products. On Kuhn a million such games reach the exact matrix's Nash
(benchmarks/README.md, "Every game counted for every pair").

    table = SampledMetagame(64)
    table.add(returns_seat0, log_reach_seat0, log_reach_seat1)     # [G], [G, K], [G, K] of G finished games
    table.matrix(), table.half_widths()                            # [K, K] each
    mixture = table.nash(keys)                                      # PopulationNash: one mix per seat, its bound
    mixture = table.nash(keys, mixed=62)     # the first 62 mixed, the rest (learned responses) opponents only

With learned best responses among the networks, the mixture is one step of PSRO: the members' mix against the
members and the responses (Anytime PSRO's restricted distribution, McAleer et al. 2022): seat 0's mix over the
members maximises its worst payoff against every network in seat 1, seat 1's likewise, so a response that beats
the members' plain Nash moves the mix away from what it exploits, and the responses themselves are never mixed in.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional, Sequence

import numpy as np

from seedleague import storage
from seedleague.league.nash import solve_zero_sum

Z_95 = 1.959963984540054
FILE = "population_nash.json"  # in the run directory: the `population_nash` output (seedleague.output)
FILES = {"population_nash": FILE, "population_psro": "population_psro.json"}  # each estimated output's file
# how `seedleague exploit` estimates each (population_psro's games include the responses to the others measured)
CHOOSE = {"population_nash": "population_nash", "population_psro": "population_nash param_average population_psro"}


def balance_weights(log_reach: np.ndarray) -> np.ndarray:
    """[G, K] weights R[k] / mean_k R[k] from log reaches [G, K] (computed as K * softmax, so no reach underflows)."""
    log_reach = np.asarray(log_reach, np.float64)
    shifted = np.exp(log_reach - log_reach.max(axis=1, keepdims=True))
    return log_reach.shape[1] * shifted / shifted.sum(axis=1, keepdims=True)


@dataclasses.dataclass(frozen=True)
class PopulationNash:
    """The Nash mixture of an estimated meta-game: one mix per seat over the members, the game's estimated value
    for seat 0, the games it rests on and the largest entry's 95% half-width (an entrywise error of at most h
    makes the mixture a 2h-equilibrium of the true meta-game)."""

    keys: tuple[str, ...]
    seat_weights: tuple[tuple[float, ...], tuple[float, ...]]
    value: float
    games: int
    max_half_width: float

    def to_json(self) -> dict:
        return dict(keys=list(self.keys), seat_weights=[list(w) for w in self.seat_weights], value=self.value,
                    games=self.games, max_half_width=self.max_half_width)

    @classmethod
    def from_json(cls, entry: dict) -> "PopulationNash":
        return cls(tuple(entry["keys"]), tuple(tuple(float(x) for x in w) for w in entry["seat_weights"]),
                   float(entry["value"]), int(entry["games"]), float(entry["max_half_width"]))


class SampledMetagame:
    """Running sums of the importance-weighted payoffs of K members' meta-game (see the module docstring)."""

    def __init__(self, size: int):
        if size < 1:
            raise ValueError(f"a meta-game needs at least one member, got {size}")
        self.size = size
        self.games = 0
        self._sum = np.zeros((size, size))
        self._squares = np.zeros((size, size))

    def add(self, returns: np.ndarray, log_reach0: np.ndarray, log_reach1: np.ndarray) -> None:
        """Finished games: seat 0's return [G] and each member's log reach of each game from seat 0 and from
        seat 1 ([G, K] each; a member's log reach sums its log-probabilities of that seat's actions)."""
        returns = np.asarray(returns, np.float64)
        if returns.ndim != 1 or np.shape(log_reach0) != (returns.size, self.size) \
                or np.shape(log_reach1) != (returns.size, self.size):
            raise ValueError(f"need returns [G] and log reaches [G, {self.size}] per seat, got {returns.shape}, "
                             f"{np.shape(log_reach0)} and {np.shape(log_reach1)}")
        if not returns.size:
            return
        w0, w1 = balance_weights(log_reach0), balance_weights(log_reach1)
        self._sum += np.einsum("g,gi,gj->ij", returns, w0, w1)
        self._squares += np.einsum("g,gi,gj->ij", returns**2, w0**2, w1**2)
        self.games += returns.size

    def matrix(self) -> np.ndarray:
        """[K, K] estimated payoff of member i in seat 0 against member j in seat 1."""
        if not self.games:
            raise ValueError("no games yet")
        return self._sum / self.games

    def half_widths(self) -> np.ndarray:
        """[K, K] 95% half-widths of `matrix` (normal, from the products' sample variance); inf below two games."""
        if self.games < 2:
            return np.full((self.size, self.size), np.inf)
        mean = self._sum / self.games
        variance = np.maximum(self._squares / self.games - mean**2, 0.0) * self.games / (self.games - 1)
        return Z_95 * np.sqrt(variance / self.games)

    def nash(self, keys: Sequence[str], mixed: Optional[int] = None) -> PopulationNash:
        """The estimated matrix's Nash equilibrium, one mix per seat (seat 0 maximises, seat 1 minimises). With
        `mixed` < K, each seat mixes only the first `mixed` networks against all K in the other seat (the
        restricted distribution: see the module docstring); `value` is then the mean of the two restricted games'
        values for seat 0 (each seat's guaranteed payoff, the other's counted from seat 0's side)."""
        if len(keys) != self.size:
            raise ValueError(f"one key per member: {self.size} members, got {len(keys)} keys")
        mixed = self.size if mixed is None else mixed
        if not 1 <= mixed <= self.size:
            raise ValueError(f"mixed must be in [1, {self.size}] (the networks a seat may mix), got {mixed}")
        matrix = self.matrix()
        if mixed == self.size:
            row, column, value = solve_zero_sum(matrix)
        else:
            row, _, value0 = solve_zero_sum(matrix[:mixed])
            _, column, value1 = solve_zero_sum(matrix[:, :mixed])
            row, column = (np.append(w, np.zeros(self.size - mixed)) for w in (row, column))
            value = 0.5 * (value0 + value1)
        clean = lambda w: tuple(float(x) for x in np.where(w > 1e-9, w, 0.0) / np.where(w > 1e-9, w, 0.0).sum())
        return PopulationNash(tuple(keys), (clean(np.asarray(row)), clean(np.asarray(column))), float(value),
                              self.games, float(self.half_widths().max()))


def write(run_dir: str, nash: PopulationNash, extra: Optional[dict] = None, source: str = "population_nash") -> str:
    """`<run_dir>/population_nash.json` (or the file of `source`, one of FILES), atomically; returns its path."""
    path = os.path.join(run_dir, FILES[source])
    storage.write_json(path, {**nash.to_json(), **(extra or {})}, indent=1)
    return path


def read(run_dir: str, source: str = "population_nash") -> PopulationNash:
    """The run's estimated population Nash (or `source`'s mixture); FileNotFoundError saying how to make one."""
    path = os.path.join(run_dir, FILES[source])
    if not os.path.exists(path):
        raise FileNotFoundError(f"{run_dir} has no {FILES[source]}: estimate it with `seedleague exploit --run-dir "
                                f"{run_dir} --choose {CHOOSE[source]} ...` (evaluation games among its newest "
                                "snapshots)")
    with open(path) as f:
        return PopulationNash.from_json(json.load(f))
