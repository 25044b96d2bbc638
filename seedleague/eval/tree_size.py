"""How large an OpenSpiel game's tree is, and whether a run's candidates can be measured on it exactly.

Exact exploitability walks the whole game tree (seedleague.eval.game_tree); a tree of billions of histories would
take a machine's memory before anything is printed. `unmeasurable` says why a game cannot be measured in minutes
(not an OpenSpiel imperfect-information game, or too many histories: Knuth's estimate first, then a count up to
the cap); the output's choice (seedleague.eval.output_selection), the presets and the end of a run ask it. Only
numpy and pyspiel: building a preset or refusing a command line loads no jax.
"""

from __future__ import annotations

import functools
import math
from typing import Optional

import numpy as np
import pyspiel

from seedleague.games.openspiel import game_name, load_game

# Above this many histories (nodes of the game tree) nothing is measured. Measured on 2 cores with the flat tree
# (seedleague.eval.game_tree): oshi_zumo(coins=6,size=2,horizon=6)'s 1,431,565 histories walk in 9 s and 0.6 GB,
# each exploitability takes about 1 s, and the whole choice over 44 networks 204 s (benchmarks/README.md).
# Counting up to the cap costs about 3 s per million histories, paid once at the start of a run on such a game.
MAX_HISTORIES = 2_000_000
SURELY_TOO_LARGE = 100  # a median Knuth estimate this many times MAX_HISTORIES skips the count (`unmeasurable`)


def game_of(env_name: str):
    """The loaded OpenSpiel game when `env_name` is an imperfect-information OpenSpiel game (exact
    exploitability can be measured), else None."""
    name = game_name(env_name)
    if name is None:
        return None

    game = load_game(name)
    return game if game.get_type().information == pyspiel.GameType.Information.IMPERFECT_INFORMATION else None


def histories(game, cap: int) -> Optional[int]:
    """The number of histories (tree nodes, chance and terminal ones included) of `game`, or None when there
    are more than `cap`; stops counting at the cap, so it costs at most `cap` steps."""
    stack, count = [game.new_initial_state()], 0
    while stack:
        state = stack.pop()
        count += 1
        if count > cap:
            return None
        if state.is_terminal():
            continue
        actions = [a for a, _ in state.chance_outcomes()] if state.is_chance_node() else state.legal_actions()
        stack.extend(state.child(a) for a in actions)
    return count


def estimated_histories(game, probes: int = 32, seed: int = 0) -> list[float]:
    """Knuth's estimates (1975, "Estimating the efficiency of backtrack programs") of the number of histories of
    `game`, one per random playout, sorted: along a path that takes a child uniformly at random at every node
    (chance outcomes too, as `histories` counts them), 1 + d0 + d0 d1 + d0 d1 d2 + ..., d_i the children of the
    path's i-th node. Each is unbiased (its mean over paths is the exact count); one playout costs one episode."""
    rng = np.random.default_rng(seed)
    estimates = []
    for _ in range(probes):
        state, total, width = game.new_initial_state(), 1.0, 1.0
        while not state.is_terminal():
            actions = [a for a, _ in state.chance_outcomes()] if state.is_chance_node() else state.legal_actions()
            width *= len(actions)  # nodes at this depth, as this path sees the tree
            total += width
            state.apply_action(actions[rng.integers(len(actions))])
        estimates.append(total)
    return sorted(estimates)


@functools.lru_cache(maxsize=16)
def unmeasurable(env_name: str) -> str:
    """Why no candidate of a run on `env_name` can be measured exactly ("" when they can). A game whose median
    Knuth estimate is over SURELY_TOO_LARGE times the cap is not counted (counting to the cap took minutes on
    gin_rummy or rbc, before anything started). That refuses no game within the cap: by Markov's inequality an
    estimate exceeds 100 times the exact count with probability at most 1/100, so the median of 32 does with
    probability below 1e-23."""
    game = game_of(env_name)
    if game is None:
        return "not an OpenSpiel imperfect-information game"
    estimates = estimated_histories(game)
    median = estimates[len(estimates) // 2]
    if median > SURELY_TOO_LARGE * MAX_HISTORIES:
        size = f"about {median:.1e}" if math.isfinite(median) else "more than 1e308"  # kriegspiel's overflow floats
        return (f"its game tree has {size} histories by the median of {len(estimates)} random playouts' "
                f"estimates, far more than the {MAX_HISTORIES:,} that can be measured exactly in minutes")
    if histories(game, MAX_HISTORIES) is None:
        return (f"its game tree has more than {MAX_HISTORIES:,} histories, too many to measure every candidate "
                "exactly in minutes")
    return ""


def tree_too_large(env_name: str) -> str:
    """Why the end of a run does not compute `env_name`'s exact exploitability ("" where it does): an OpenSpiel
    imperfect-information game whose tree is too large to walk in minutes (`unmeasurable`; walking phantom_ttt's
    took all 24 GB of a machine's memory before the kernel killed the run, with nothing printed)."""
    if game_of(env_name) is None:
        return ""  # not an imperfect-information game: scored by games, if at all
    why = unmeasurable(env_name)
    return f"{env_name}'s exploitability is not computed exactly: {why}" if why else ""
