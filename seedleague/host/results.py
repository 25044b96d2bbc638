"""A league run's game results: one MatchResult per finished game against a snapshot, with the learner seat's
(team's) return and the outcome its sign gives, the check that a game's seats (teams) really play a zero-sum game, and the
check that its returns stay within the bound its spec declares.

    outcomes = report(link, player, version, seating, ended_envs, returns)   # 1 win, 0.5 draw, 0 loss each
    problem = not_zero_sum(spec, ended_envs, returns)                        # None, or why to refuse the worker
    problem = beyond_return_bound(spec, returns)                              # None, or what to warn about
"""

from __future__ import annotations

import uuid
from typing import Optional

import numpy as np

from seedleague.host.seating import Seating
from seedleague.league.types import MatchResult, outcome_of
from seedleague.protocol.named import NamedEnvSpec


outcome = outcome_of  # 1 (win), 0.5 (draw) or 0 (loss) from the sign of the learner seat's return


def report(link, player: str, version: int, seating: Seating, envs: np.ndarray, returns: np.ndarray) -> list[float]:
    """Send `link` (a LeagueLink) one result per game of `envs` (just ended) played against a snapshot;
    returns their outcomes (self-play games have none)."""
    outcomes = []
    by_team = seating.team_returns(returns)  # [E, T]: every seat its own team unless the spec groups them
    for env in envs:
        opponent = seating.opponent[env]
        if opponent is None:
            continue
        value = float(by_team[env, seating.learner_team[env]])
        outcomes.append(outcome(value))
        link.report(MatchResult(uuid.uuid4().hex, player, opponent, outcomes[-1], version, value))
    return outcomes


ZERO_SUM_TOLERANCE = 1e-3  # relative to the episode's largest return; rewards are float32 sums


def beyond_return_bound(spec: NamedEnvSpec, returns: np.ndarray) -> Optional[str]:
    """Why `returns` (of episodes just ended, any shape) break the spec's declared return_bound, or None (also when
    it declares none): a league run scales rewards by that bound (seedleague.presets.scale_for_bound)."""
    bound = spec.return_bound
    if not bound or not returns.size:
        return None
    largest = float(np.abs(returns).max())
    if largest <= bound * (1 + 1e-6):
        return None
    return (f"an episode of {spec.env_name!r} returned {largest:g} to one seat, beyond the return_bound {bound:g} its "
            "spec declares (rewards are learnt scaled by that bound): declare the largest absolute return one seat "
            "can get in an episode, or 0 if the game does not know it")


def not_zero_sum(spec: NamedEnvSpec, envs: np.ndarray, returns: np.ndarray,
                 seating: Optional[Seating] = None) -> Optional[str]:
    """Why the episodes of `envs` (just ended; `returns` [E*S], env-major) break league play, or None.

    The league scores a game as a win, loss or draw of one seat (or team: `seating`'s teams, a team's
    return the mean of its seats') from the sign of its return, which means something only when every
    seat's (team's) gain is another's loss: each episode's returns must sum to zero over the seats
    (teams). The spec does not say whether a game is zero-sum; its episodes do."""
    if not len(envs):
        return None
    if seating is not None:
        by_env = seating.team_returns(returns)[envs]
    else:
        by_env = returns.reshape(spec.num_envs, spec.num_seats)[envs]
    total = by_env.sum(axis=1)
    bad = np.abs(total) > ZERO_SUM_TOLERANCE * np.maximum(1.0, np.abs(by_env).max(axis=1))
    if not bad.any():
        return None
    i = int(np.argmax(bad))
    return (f"the league trains zero-sum games only, and an episode of {spec.env_name!r} (env {int(envs[i])}) "
            f"ended with returns {np.round(by_env[i], 4).tolist()} over its seats, summing to {total[i]:.4g}: "
            "give the seats rewards that sum to zero over each episode (one seat's gain is the others' loss), "
            "or train the game as single-agent (num_seats 1)")
