"""Exploitability over training, read back from a run's model pool (poker games).

Each snapshot of a player is one point: its learner step, env steps and
training wall-clock (from the snapshot's meta), the exploitability of its policy,
and that of the uniform mixture of the last `window` snapshots (an average
policy, mixed as behaviour strategies). `seedleague report` plots it;
`python -m benchmarks.exploitability_curve RUN_DIR` prints it.
"""

from __future__ import annotations

import os

from envs.openspiel_games import load_game
from seedleague.api import load_snapshot
from seedleague.eval.openspiel_eval import exploitability, mixture_exploitability
from seedleague.league.model_pool import ModelPool


def player_snapshots(run_dir: str, player: str) -> tuple[list[str], list]:
    """`player`'s snapshot keys in the run's model pool, oldest first, and their loaded policies."""
    pool = ModelPool(os.path.join(run_dir, "pool"))
    try:
        keys = pool.keys(player)
    finally:
        pool.close()
    return keys, [load_snapshot(run_dir, key) for key in keys]


def snapshot_curve(run_dir: str, player: str = "main", window: int = 10, every: int = 1) -> list[dict]:
    """One row per `every`-th snapshot of `player` (and always the last): key, step, env_steps, wall_s,
    exploitability, window_mixture. [] when the player has no snapshots."""
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
        rows.append(dict(
            key=key, step=policy.step, env_steps=policy.meta.get("env_steps"), wall_s=policy.meta.get("wall_s"),
            exploitability=exploitability(game, policy),
            window_mixture=mixture_exploitability(game, recent, [1.0] * len(recent)),
        ))
    return rows


def as_eval_history(rows: list[dict]) -> list[dict]:
    """Curve rows in the shape of `seedleague eval` history entries (for the report's plot)."""
    return [dict(time=None, step=r["step"], env_steps=r["env_steps"], wall_s=r["wall_s"], policy=r["key"],
                 results=dict(exploitability=r["exploitability"], mixture_exploitability=r["window_mixture"]))
            for r in rows]
