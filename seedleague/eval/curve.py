"""Exploitability over training, read back from a run's model pool (poker games).

Each snapshot of a player is one point: its learner step, env steps and
training wall-clock (from the snapshot's meta), the exploitability of its policy,
that of the uniform mixture of the last `window` snapshots (an average
policy, mixed as behaviour strategies) and, where the learner kept one
(LearnerConfig.average_from), that of its param average at the snapshot's step.
`seedleague report` plots it;
`python -m benchmarks.exploitability_curve RUN_DIR` prints it. `snapshot_times` and
`nearest_snapshot` find the snapshot a run held at a given training time
(benchmarks/league_suite.py scores runs at fractions of their budget with them).
"""

from __future__ import annotations

import os
from typing import Optional

from seedleague.games.openspiel import load_game
from seedleague.artifacts.load import NoParamAverageError, load_policy, load_snapshot
from seedleague.eval.openspiel_eval import exploitability, mixture_exploitability
from seedleague.league.model_pool import ModelPool, root_of


def player_snapshots(run_dir: str, player: str) -> tuple[list[str], list]:
    """`player`'s snapshot keys in the run's model pool, oldest first, and their loaded policies."""
    pool = ModelPool(root_of(run_dir))
    try:
        keys = pool.keys(player)
    finally:
        pool.close()
    return keys, [load_snapshot(run_dir, key) for key in keys]


def snapshot_times(run_dir: str, player: str = "main") -> list[tuple[str, float]]:
    """(key, training wall-clock seconds) of `player`'s snapshots, oldest first, read from their
    meta only (no params); snapshots without a recorded wall_s are left out."""
    pool = ModelPool(root_of(run_dir))
    try:
        times = [(key, pool.meta(key).get("wall_s")) for key in pool.keys(player)]
    finally:
        pool.close()
    return [(key, float(wall_s)) for key, wall_s in times if wall_s is not None]


def nearest_snapshot(times: list[tuple[str, float]], wall_s: float) -> Optional[tuple[str, float]]:
    """The (key, wall_s) of `times` closest to `wall_s` seconds of training (the earlier on a tie); None if empty."""
    if not times:
        return None
    return min(times, key=lambda kt: (abs(kt[1] - wall_s), kt[1]))


def load_param_average(path: str, step: Optional[int] = None, seed: int = 0):
    """The learner's running mean of its params in checkpoint `step` of `path` (see
    `seedleague.api.load_policy(average=True)`), or None where that checkpoint keeps none (yet)."""
    try:
        return load_policy(path, step, seed=seed, average=True)
    except NoParamAverageError:
        return None


def snapshot_curve(run_dir: str, player: str = "main", window: int = 10, every: int = 1) -> list[dict]:
    """One row per `every`-th snapshot of `player` (and always the last): key, step, env_steps, wall_s,
    exploitability, window_mixture, param_average (None before averaging began or without it).
    [] when the player has no snapshots."""
    if window < 1 or every < 1:
        raise ValueError(f"window and every must be >= 1, got {window} and {every}")
    keys, policies = player_snapshots(run_dir, player)
    if not keys:
        return []
    game = load_game(policies[0].spec.env_name.partition(":")[2])
    rows = []
    for i, (key, policy) in enumerate(zip(keys, policies)):
        if i % every and i != len(keys) - 1:
            continue
        recent = policies[max(0, i - window + 1): i + 1]
        average = load_param_average(os.path.join(run_dir, "pool", player), policy.step)
        rows.append(dict(
            key=key, step=policy.step, env_steps=policy.meta.get("env_steps"), wall_s=policy.meta.get("wall_s"),
            exploitability=exploitability(game, policy),
            window_mixture=mixture_exploitability(game, recent, [1.0] * len(recent)),
            param_average=None if average is None else exploitability(game, average),
        ))
    return rows


def as_eval_history(rows: list[dict]) -> list[dict]:
    """Curve rows in the shape of `seedleague eval` history entries (for the report's plot)."""
    return [dict(time=None, step=r["step"], env_steps=r["env_steps"], wall_s=r["wall_s"], policy=r["key"],
                 results=dict(exploitability=r["exploitability"], mixture_exploitability=r["window_mixture"],
                              param_average_exploitability=r.get("param_average")))
            for r in rows]
