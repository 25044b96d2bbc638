"""One score of a trained output (a Policy or a PolicyMixture) in its two-player OpenSpiel game.

This file owns choosing how a game is scored and putting the answer in one table cell:

    kind = game_kind(game)    # EXPLOITABILITY (imperfect information with an information-state
                              # tensor: poker) or BOARD (perfect information: connect_four)
    result = score(game, output, BoardBudget(games=50, mcts_games=10, mcts_simulations=100))
    format_score(result)      # "0.0213", or "random 48/0/2, mcts100 3/1/6 (greedy 5/0/5)" (wins/draws/losses)

A PolicyMixture is scored as it is played, a member for a whole game: exactly
by OpenSpiel's own best response (`openspiel_eval.mixture_exploitability(..., reference=True)`) in poker, and in a board game by giving each
member its weight's share of the games and adding up the counts. Against MCTS a board game's output
plays twice: sampling its moves, as it was trained, and greedily (each member's most probable legal
move), as a perfect-information game's policy is usually served (`seedleague serve --greedy true`).
"""

from __future__ import annotations

import dataclasses
from typing import Union

import numpy as np
import pyspiel

from seedleague.artifacts.mixture import PolicyMixture
from seedleague.artifacts.policy import Policy
from seedleague.eval import board, openspiel_eval

EXPLOITABILITY = "exploitability"
BOARD = "board"
Output = Union[Policy, PolicyMixture]


@dataclasses.dataclass(frozen=True)
class BoardBudget:
    """How many games a board-game score plays."""

    games: int = 50  # against uniform random
    mcts_games: int = 10  # against MCTS (the slow opponent)
    mcts_simulations: int = 100

    def __post_init__(self):
        if min(self.games, self.mcts_games, self.mcts_simulations) < 1:
            raise ValueError(f"games, mcts_games and mcts_simulations must be >= 1, got {self}")


def game_kind(game: pyspiel.Game) -> str:
    """EXPLOITABILITY for imperfect-information games (exact, over the game's information states, with
    or without an information-state tensor), BOARD for perfect-information games."""
    if game.get_type().information == pyspiel.GameType.Information.PERFECT_INFORMATION:
        return BOARD
    return EXPLOITABILITY


def _members(output: Output) -> tuple[list[Policy], np.ndarray]:
    if isinstance(output, PolicyMixture):
        return output.members, output.weights
    return [output], np.ones(1)


def _scored_weights(output: Output, weights: np.ndarray) -> np.ndarray:
    """The mix to score: one per seat where the mixture has one."""
    return output.seat_weights if isinstance(output, PolicyMixture) and output.seat_weights is not None else weights


def _shares(weights: np.ndarray, games: int) -> list[int]:
    """`games` split by `weights` (largest remainders), so the shares add up to `games`."""
    exact = np.asarray(weights, np.float64) * games
    shares = np.floor(exact).astype(int)
    for i in np.argsort(-(exact - shares), kind="stable")[: games - shares.sum()]:
        shares[i] += 1
    return shares.tolist()


def _wdl(game: pyspiel.Game, output: Output, games: int, play) -> dict:
    """Wins, draws, losses (and games) of `play(game, member, n)` summed over the output's members."""
    members, weights = _members(output)
    counts = dict(games=0, wins=0, draws=0, losses=0)
    for member, n in zip(members, _shares(weights, games)):
        if n:
            stats = play(game, member, n)
            for name in counts:
                counts[name] += getattr(stats, name)
    return counts


def score(game: pyspiel.Game, output: Output, budget: BoardBudget = BoardBudget(), seed: int = 0) -> dict:
    """{"exploitability": x} or {"vs_random": {games, wins, draws, losses}, "vs_mcts": {...},
    "vs_mcts_greedy": {...}, "mcts_simulations": n}, by `game_kind`."""
    if game_kind(game) == EXPLOITABILITY:
        members, weights = _members(output)
        return {EXPLOITABILITY: openspiel_eval.mixture_exploitability(game, members, _scored_weights(output, weights),
                                                                      reference=True)
                if len(members) > 1 else openspiel_eval.exploitability(game, members[0], reference=True)}
    return dict(
        vs_random=_wdl(game, output, budget.games, lambda g, p, n: board.vs_random(g, p, n, seed=seed)),
        vs_mcts=_wdl(game, output, budget.mcts_games,
                     lambda g, p, n: board.vs_mcts(g, p, n, budget.mcts_simulations, seed=seed)),
        vs_mcts_greedy=_wdl(game, output, budget.mcts_games,
                            lambda g, p, n: board.vs_mcts(g, p, n, budget.mcts_simulations, greedy=True, seed=seed)),
        mcts_simulations=budget.mcts_simulations,
    )


def format_score(result: dict | None) -> str:
    """One table cell: the exploitability, or wins/draws/losses against random and MCTS; "n/a" for None."""
    if not result:
        return "n/a"
    if EXPLOITABILITY in result:
        return f"{result[EXPLOITABILITY]:.4f}"
    wdl = lambda c: f"{c['wins']}/{c['draws']}/{c['losses']}"
    greedy = f" (greedy {wdl(result['vs_mcts_greedy'])})" if "vs_mcts_greedy" in result else ""
    return f"random {wdl(result['vs_random'])}, mcts{result['mcts_simulations']} {wdl(result['vs_mcts'])}{greedy}"
