"""Exact exploitability of policies in two-player zero-sum OpenSpiel games.

This file owns turning a `seedleague.api.Policy` into an OpenSpiel `TabularPolicy`
(one batched forward pass over every information state of both players, encoded
exactly as the OpenSpiel env worker encodes them) and the realization-equivalent
behaviour strategy of a weighted mixture of policies (a league's Nash mixture):

    game = load_game("leduc_poker")
    exploitability(game, policy)                          # NashConv / 2; 0 at a Nash equilibrium
    mixture_exploitability(game, [p1, p2], [0.7, 0.3])

Exploitability enumerates the whole game tree, so it is for small games (Kuhn,
Leduc, small Liar's Dice...), not for connect_four.
"""

from __future__ import annotations

import copy
from typing import Optional, Sequence, Union

import numpy as np
import pyspiel
from open_spiel.python import policy as openspiel_policy
from open_spiel.python.algorithms import exploitability as openspiel_exploitability

from envs.openspiel_games import encode, legal_mask, load_game, observation_shape
from seedleague.api import Policy, mixture_weights, seat_mixture_weights

GameLike = Union[pyspiel.Game, str]


def as_game(game: GameLike) -> pyspiel.Game:
    """A loaded game, from a game or an OpenSpiel game name."""
    return load_game(game) if isinstance(game, str) else game


def check_fits(game: pyspiel.Game, policy: Policy) -> None:
    """Raise ValueError unless `policy` was built for `game`'s observations and actions."""
    spec = policy.spec
    shape, actions = observation_shape(game), game.num_distinct_actions()
    if tuple(spec.observation_shape) != shape or spec.num_actions != actions:
        raise ValueError(
            f"the policy ({spec.env_name}: observation {tuple(spec.observation_shape)}, {spec.num_actions} actions) "
            f"does not fit {game}: observation {shape}, {actions} actions"
        )


def _infostates(game: pyspiel.Game) -> tuple[openspiel_policy.TabularPolicy, np.ndarray, np.ndarray]:
    """Every information state of both players: (uniform TabularPolicy, observations [S, ...], masks [S, A])."""
    tabular = openspiel_policy.TabularPolicy(game)
    actions = game.num_distinct_actions()
    observations = np.stack([encode(s, s.current_player()) for s in tabular.states])
    masks = np.stack([legal_mask(s, s.current_player(), actions) for s in tabular.states])
    return tabular, observations, masks


def _table(policy: Policy, observations: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """[S, A] float64 action probabilities, rows summing to 1 over legal actions."""
    probs = np.asarray(policy.action_probabilities(observations, masks), np.float64) * masks
    return probs / probs.sum(axis=-1, keepdims=True)


def tabular_policy(game: GameLike, policy: Policy) -> openspiel_policy.TabularPolicy:
    """`policy` as an OpenSpiel TabularPolicy over every information state of both players."""
    game = as_game(game)
    check_fits(game, policy)
    tabular, observations, masks = _infostates(game)
    tabular.action_probability_array[:] = _table(policy, observations, masks)
    return tabular


def exploitability(game: GameLike, policy: Policy) -> float:
    """Exploitability (NashConv / 2) of `policy` playing both seats; 0.458 for uniform random Kuhn."""
    game = as_game(game)
    return float(openspiel_exploitability.exploitability(game, tabular_policy(game, policy)))


def mix_behaviour(probs: np.ndarray, reach: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Behaviour strategy realization-equivalent to the mixture that picks policy k
    with probability w_k for a whole game (Heinrich, Lanctot & Silver 2015, Theorem 7):

        pi(a | s) = sum_k w_k rho_k(s) pi_k(a | s) / sum_k w_k rho_k(s)

    probs [K, S, A]: pi_k(a | s); reach [K, S]: rho_k(s), the acting player's own
    reach probability of information state s under policy k; weights [K] >= 0.
    Where no policy reaches s (denominator 0) the plain weighted average is used;
    s is then unreachable under the mixture too, so the choice does not matter.
    """
    k, s, _ = probs.shape
    if reach.shape != (k, s) or weights.shape != (k,):
        raise ValueError(f"mix_behaviour: probs {probs.shape} needs reach [{k}, {s}] and weights [{k}], "
                         f"got {reach.shape} and {weights.shape}")
    joint_ks = weights[:, None] * reach
    total_s = joint_ks.sum(axis=0)
    mixed_sa = np.einsum("ks,ksa->sa", joint_ks, probs)
    average_sa = np.einsum("k,ksa->sa", weights, probs) / weights.sum()
    reached = total_s > 0
    return np.where(reached[:, None], mixed_sa / np.where(reached, total_s, 1.0)[:, None], average_sa)


def own_reach(game: pyspiel.Game, tabular: openspiel_policy.TabularPolicy, probs: np.ndarray) -> np.ndarray:
    """[K, S] reach probability of each information state by its acting player's own
    actions, under each of the K policy tables `probs` [K, S, A] (perfect recall:
    the same for every history of the information state)."""
    reach = np.zeros(probs.shape[:2])

    def visit(state: pyspiel.State, reach_pk: np.ndarray) -> None:
        if state.is_terminal() or not reach_pk.any():  # below, every reach is 0 (the default)
            return
        if state.is_chance_node():
            for action, _ in state.chance_outcomes():
                visit(state.child(action), reach_pk)
            return
        player = state.current_player()
        index = tabular.state_index(state)
        reach[:, index] = reach_pk[player]
        for action in state.legal_actions():
            child_pk = reach_pk.copy()
            child_pk[player] = reach_pk[player] * probs[:, index, action]
            visit(state.child(action), child_pk)

    visit(game.new_initial_state(), np.ones((game.num_players(), probs.shape[0])))
    return reach


def _checked_weights(count: int, weights) -> np.ndarray:
    """Normalised mixture weights: [K], or [seats, K] for one mix per seat; ValueError names a bad one."""
    return (seat_mixture_weights if np.ndim(weights) == 2 else mixture_weights)(count, weights)


class PolicyTables:
    """Action probabilities [K, S, A] and own reach [K, S] of K policies over every information
    state, computed once, so that many mixtures of the same policies are cheap to score (the
    averaging windows of benchmarks/average_policy.py)."""

    def __init__(self, game: GameLike, policies: Sequence[Policy]):
        self.game = as_game(game)
        if not policies:
            raise ValueError("PolicyTables needs at least one policy")
        for p in policies:
            check_fits(self.game, p)
        self._tabular, observations, masks = _infostates(self.game)
        self.probs = np.stack([_table(p, observations, masks) for p in policies])
        self.reach = own_reach(self.game, self._tabular, self.probs)
        self._seat = np.array([state.current_player() for state in self._tabular.states])  # [S]: who acts there

    def mixture(self, weights, members: Optional[Sequence[int]] = None) -> openspiel_policy.TabularPolicy:
        """The behaviour strategy of the mixture of policies[members] (default: all) with `weights`
        ([K], or [seats, K] for one mix per seat: each information state mixed by its seat's row)."""
        index = np.arange(len(self.probs)) if members is None else np.asarray(members, np.int64)
        tabular = copy.copy(self._tabular)
        checked = _checked_weights(len(index), weights)
        if checked.ndim == 2:
            if len(checked) != self.game.num_players():
                raise ValueError(f"{self.game} has {self.game.num_players()} seats, got seat weights for {len(checked)}")
            mixed = np.stack([mix_behaviour(self.probs[index], self.reach[index], row) for row in checked])
            tabular.action_probability_array = mixed[self._seat, np.arange(len(self._seat))]
            return tabular
        tabular.action_probability_array = mix_behaviour(self.probs[index], self.reach[index], checked)
        return tabular

    def exploitability(self, weights: Sequence[float], members: Optional[Sequence[int]] = None) -> float:
        return float(openspiel_exploitability.exploitability(self.game, self.mixture(weights, members)))


def mixture_policy(game: GameLike, policies: Sequence[Policy], weights) -> openspiel_policy.TabularPolicy:
    """The behaviour strategy of playing policies[k] with probability weights[k] (normalised)
    for a whole game, in both seats (or by weights[seat][k] in each seat), as one TabularPolicy."""
    _checked_weights(len(policies), weights)  # names a bad weight before any forward pass
    return PolicyTables(game, policies).mixture(weights)


def mixture_exploitability(game: GameLike, policies: Sequence[Policy], weights) -> float:
    """Exploitability of the mixture that plays policies[k] with probability weights[k] for a whole game
    (weights [seats, K]: by its seat's row in each seat)."""
    game = as_game(game)
    return float(openspiel_exploitability.exploitability(game, mixture_policy(game, policies, weights)))
