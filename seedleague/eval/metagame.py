"""The exact meta-game of a population of policies in a small two-player zero-sum OpenSpiel game.

PSRO's meta-solver needs the payoff of every policy against every other. For
poker-sized games it can be computed exactly, without sampling: enumerate every
terminal history h once, with its chance probability c_h, the first seat's
utility u_h and the decisions each seat took on the way. A policy's reach of h
from seat s is the product of its probabilities of seat s's decisions, so for K
policies at once

    reach_s = exp(D_s @ log pi)          D_s: [H, S*A] decision counts of seat s
    M[i, j] = sum_h c_h u_h reach_0[i, h] reach_1[j, h]     (i in seat 0, j in seat 1)

and the symmetric meta-game (each policy plays both seats equally often) pays
i against j  (M[i, j] - M[j, i]) / 2. Its Nash mixture (a linear program) is the
population's best mix; `nash_mixture_exploitability` reports how exploitable that
mix is when played as one behaviour strategy.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyspiel

from seedleague.eval import game_tree
from seedleague.eval.game_tree import TerminalTable  # re-exported: the terminal histories every metagame reads
from seedleague.eval.openspiel_eval import PolicyTables, as_game
from seedleague.league.nash import solve_zero_sum


def terminal_table(game: pyspiel.Game) -> TerminalTable:
    """Every terminal history of `game` (its tree is enumerated: seedleague.eval.game_tree)."""
    return game_tree.of(game).terminal_table()


def reaches(tables: Sequence[np.ndarray], terminal: TerminalTable) -> list[np.ndarray]:
    """Per seat, [H, K]: each policy's own reach of each terminal history from that seat, from their
    [S, A] tables (the product of the policy's probabilities of the seat's decisions on the way)."""
    with np.errstate(divide="ignore"):
        log_pi = np.log(np.stack([t.reshape(-1) for t in tables], axis=1))  # [S*A, K]; -inf for probability 0
    # Only stored entries multiply, so an untaken action's -inf never meets a 0.
    return [np.exp(decisions @ np.where(np.isfinite(log_pi), log_pi, -1e9)) for decisions in terminal.decisions]


def payoff_matrix(game: pyspiel.Game, tables: Sequence[np.ndarray], terminal: TerminalTable) -> np.ndarray:
    """[K, K] expected utility of policy i in seat 0 against policy j in seat 1, from their [S, A] tables."""
    reach = reaches(tables, terminal)
    return reach[0].T @ (terminal.weight[:, None] * reach[1])


def symmetric_nash(payoff_seat0: np.ndarray) -> np.ndarray:
    """Nash mixture of the meta-game where each policy plays both seats equally often."""
    antisymmetric = (payoff_seat0 - payoff_seat0.T) / 2
    row, _, _ = solve_zero_sum(antisymmetric)
    return row


def nash_mixture_exploitability(game, policies: Sequence) -> tuple[float, np.ndarray]:
    """(exploitability of the population's exact Nash mixture, its weights [K])."""
    return newest_nash_mixtures(game, policies, [len(policies)])[0]


PAYOFF_BYTES = 1 << 30  # the payoff computation holds about four float64 [terminal histories, K] arrays at once


def largest_population(terminal: TerminalTable) -> int:
    """The most policies whose payoff matrix fits PAYOFF_BYTES on a game with these terminal histories
    (liars_dice, 147,420 of them: 227; Leduc, 5,520: over 6,000)."""
    return max(1, PAYOFF_BYTES // (32 * len(terminal.weight)))


def newest_nash_mixtures(game, policies: Sequence, sizes: Sequence[int], terminal: TerminalTable | None = None,
                         tables: PolicyTables | None = None) -> list[tuple[float, np.ndarray]]:
    """For each K in `sizes`, the Nash mixture of the meta-game among the last K of `policies` (the
    newest, for a population listed oldest first): (its exploitability, its weights [K]). The payoffs
    are computed once for the whole population and each window solves its own sub-matrix.
    `terminal`: the game's terminal_table, and `tables`: PolicyTables whose first rows are `policies`,
    when the caller has them already."""
    game = as_game(game)
    tables = tables if tables is not None else PolicyTables(game, policies)
    count = len(policies)
    payoff = payoff_matrix(game, tables.probs[:count], terminal if terminal is not None else terminal_table(game))
    out = []
    for size in sizes:
        weights = symmetric_nash(payoff[-size:, -size:])
        support = np.flatnonzero(weights > 1e-9)
        value = tables.exploitability(weights[support] / weights[support].sum(), count - size + support)
        out.append((value, weights))
    return out
