"""Exact exploitability of policies in two-player zero-sum OpenSpiel games.

This file owns turning a `seedleague.api.Policy` into a table of action probabilities
over every information state of both players (batched forward passes over the
observations the OpenSpiel env worker would send: seedleague.eval.game_tree walks the
tree once) and the realization-equivalent behaviour strategy of a weighted mixture of
policies (a league's Nash mixture). Best responses are vectorised over the tree; with
`reference=True` they are OpenSpiel's own (C++), as a run's final score is checked:

    game = load_game("leduc_poker")
    exploitability(game, policy)                          # NashConv / 2; 0 at a Nash equilibrium
    mixture_exploitability(game, [p1, p2], [0.7, 0.3])

Exploitability enumerates the whole game tree, so it is for small games (Kuhn,
Leduc, Liar's Dice, oshi_zumo's 1.4M histories...), not for connect_four.
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import numpy as np
import pyspiel
from open_spiel.python import policy as openspiel_policy

from seedleague.games.openspiel import load_game, observation_shape
from seedleague.artifacts.mixture import mixture_weights, seat_mixture_weights
from seedleague.artifacts.policy import Policy
from seedleague.eval import game_tree

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


def as_tabular(game: pyspiel.Game, probs: np.ndarray) -> openspiel_policy.TabularPolicy:
    """The table `probs` [S, A] (rows of `game_tree.of(game)`) as an OpenSpiel TabularPolicy, for OpenSpiel's
    Python algorithms (small games: TabularPolicy enumerates every state in Python)."""
    tree, tabular = game_tree.of(game), openspiel_policy.TabularPolicy(game)
    tabular.action_probability_array[[tabular.state_lookup[key] for key in tree.keys]] = probs
    return tabular


def tabular_policy(game: GameLike, policy: Policy) -> openspiel_policy.TabularPolicy:
    """`policy` as an OpenSpiel TabularPolicy over every information state of both players."""
    game = as_game(game)
    check_fits(game, policy)
    return as_tabular(game, game_tree.of(game).probabilities(policy))


def exploitability(game: GameLike, policy: Policy, reference: bool = False) -> float:
    """Exploitability (NashConv / 2) of `policy` playing both seats; 0.458 for uniform random Kuhn.
    `reference`: by OpenSpiel's own best response (slower on large trees; the same number)."""
    game = as_game(game)
    check_fits(game, policy)
    tree = game_tree.of(game)
    return _score(tree, tree.probabilities(policy), reference)


def _score(tree: game_tree.GameTree, probs: np.ndarray, reference: bool) -> float:
    return tree.openspiel_exploitability(probs) if reference else tree.exploitability(probs)


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


def _checked_weights(count: int, weights) -> np.ndarray:
    """Normalised mixture weights: [K], or [seats, K] for one mix per seat; ValueError names a bad one."""
    return (seat_mixture_weights if np.ndim(weights) == 2 else mixture_weights)(count, weights)


class PolicyTables:
    """Action probabilities [K, S, A] and own reach [K, S] of K policies over every information
    state, computed once, so that many mixtures of the same policies are cheap to score (the
    averaging windows of benchmarks/average_policy.py, the output's candidates)."""

    def __init__(self, game: GameLike, policies: Sequence[Policy]):
        self.game = as_game(game)
        if not policies:
            raise ValueError("PolicyTables needs at least one policy")
        for p in policies:
            check_fits(self.game, p)
        self.tree = game_tree.of(self.game)
        self.probs = np.stack([self.tree.probabilities(p) for p in policies])
        self.reach = self.tree.own_reach(self.probs)

    def mixed(self, weights, members: Optional[Sequence[int]] = None) -> np.ndarray:
        """[S, A]: the behaviour strategy of the mixture of policies[members] (default: all) with `weights`
        ([K], or [seats, K] for one mix per seat: each information state mixed by its seat's row)."""
        index = np.arange(len(self.probs)) if members is None else np.asarray(members, np.int64)
        checked = _checked_weights(len(index), weights)
        if checked.ndim == 2:
            if len(checked) != self.game.num_players():
                raise ValueError(f"{self.game} has {self.game.num_players()} seats, got seat weights for {len(checked)}")
            mixed = np.stack([mix_behaviour(self.probs[index], self.reach[index], row) for row in checked])
            return mixed[self.tree.seat, np.arange(len(self.tree.seat))]
        return mix_behaviour(self.probs[index], self.reach[index], checked)

    def mixture(self, weights, members: Optional[Sequence[int]] = None) -> openspiel_policy.TabularPolicy:
        """`mixed` as an OpenSpiel TabularPolicy (small games)."""
        return as_tabular(self.game, self.mixed(weights, members))

    def exploitability(self, weights: Sequence[float], members: Optional[Sequence[int]] = None,
                       reference: bool = False) -> float:
        return _score(self.tree, self.mixed(weights, members), reference)


def mixture_policy(game: GameLike, policies: Sequence[Policy], weights) -> openspiel_policy.TabularPolicy:
    """The behaviour strategy of playing policies[k] with probability weights[k] (normalised)
    for a whole game, in both seats (or by weights[seat][k] in each seat), as one TabularPolicy."""
    _checked_weights(len(policies), weights)  # names a bad weight before any forward pass
    return PolicyTables(game, policies).mixture(weights)


def mixture_exploitability(game: GameLike, policies: Sequence[Policy], weights, reference: bool = False) -> float:
    """Exploitability of the mixture that plays policies[k] with probability weights[k] for a whole game
    (weights [seats, K]: by its seat's row in each seat). `reference`: as `exploitability`."""
    _checked_weights(len(policies), weights)
    return PolicyTables(game, policies).exploitability(weights, reference=reference)
