"""Where a run's model pool is: `<run_dir>/pool`, or the object-storage URL the run recorded in `<run_dir>/pool.url`.

Kept apart from seedleague.league.model_pool (which reads and writes snapshots through orbax and loads jax), so
that a command line naming a run's snapshots can be refused before jax loads (seedleague.artifacts.run_files).

    root_of("runs/kuhn")                 # "runs/kuhn/pool", or the URL recorded by record_root
    player_dir_of("runs/kuhn", "main")   # "runs/kuhn/pool/main": that player's Checkpointer directory
"""

from __future__ import annotations

import os

from seedleague import object_store

_ROOT_RECORD = "pool.url"  # <run_dir>/pool.url: where the run's pool is, when not <run_dir>/pool


def root_of(run_dir: str) -> str:
    """The model pool of the run in `run_dir`: the URL it recorded, else `<run_dir>/pool`."""
    try:
        with open(os.path.join(run_dir, _ROOT_RECORD)) as f:
            return f.read().strip()
    except FileNotFoundError:
        return os.path.join(run_dir, "pool")


def player_dir_of(run_dir: str, player: str) -> str:
    """`player`'s snapshot directory (or URL) in the pool of the run in `run_dir`."""
    root = root_of(run_dir)
    return object_store.join(root, player) if object_store.is_url(root) else os.path.join(root, player)


def record_root(run_dir: str, root: str) -> None:
    """Note in `run_dir` that its pool is `root` (object storage); a local pool needs no note."""
    if object_store.is_url(root):
        with open(os.path.join(run_dir, _ROOT_RECORD), "w") as f:
            f.write(root + "\n")
