"""What a run directory holds, as far as its file names tell: no orbax, no jax.

A command line that names a run (`seedleague eval`, `export`, `serve`, `exploit`) is refused before jax
loads where the run's files alone show the problem: no checkpoints directory, one without a step, a pool
without the player asked for. Each function here answers only where the names are conclusive and says
None (or False) otherwise, so that the command then loads jax and asks orbax, which decides every other
case. The messages are the ones the loading path raises (seedleague.artifacts.load,
seedleague.output), so a refusal reads the same either way:

    checkpoint_problem("runs/kuhn")                     # "no checkpoint in '/abs/runs/kuhn'", or None
    snapshot_dir("runs/kuhn", "main:000512")            # ("runs/kuhn/pool/main", 512), or ValueError/FileNotFoundError
    output_problem("runs/kuhn")                          # "'runs/kuhn' has no output yet: ...", or None
"""

from __future__ import annotations

import os
from typing import Optional

from seedleague import object_store
from seedleague.artifacts.output_config import recorded
from seedleague.league.pool_paths import player_dir_of
from seedleague.league.types import parse_key

# The outputs read from the learner's newest checkpoint (seedleague.output._source): a run has none of them
# while its checkpoints directory has no step.
FROM_CHECKPOINTS = ("final", "param_average", "selected")


def checkpoint_dir(path: str) -> str:
    """`<path>/checkpoints` for a run directory, else `path` itself (a Checkpointer or pool player directory)."""
    if object_store.is_url(path):  # a pool player or checkpoints in object storage: read from this machine's mirror
        return object_store.mirror(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no such directory: {path!r}")
    if not os.path.isdir(path):
        raise NotADirectoryError(f"{path!r} is a file; pass a run directory or a checkpoint directory")
    candidate = os.path.join(path, "checkpoints")
    return os.path.abspath(candidate if os.path.isdir(candidate) else path)


def no_checkpoint_message(path: str, directory: str) -> str:
    """What `load_policy(path)` says when `directory` (its checkpoint_dir) holds no checkpoint."""
    message = f"no checkpoint in {directory!r}"
    pool = os.path.join(path, "pool")
    if os.path.isdir(pool):
        players = sorted(os.listdir(pool))
        message += (f"; the run's model pool has players {players}: use load_snapshot({path!r}, 'player:step') "
                    f"or load_policy({os.path.join(pool, players[0]) if players else pool!r})")
    return message


def holds_no_step(directory: str) -> bool:
    """True when local `directory` surely holds no checkpoint: it is missing, or no entry in it is named by a step
    number (orbax names each step's folder by its number; its unfinished `*.orbax-checkpoint-tmp*` folders and the
    set-aside `damaged-<step>` ones are not steps). False for object storage, and wherever a step's folder exists:
    only orbax can tell whether that step is complete."""
    if object_store.is_url(directory):
        return False
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return not any(name.isdigit() for name in names)


def checkpoint_problem(path: str) -> Optional[str]:
    """What `load_policy(path)` would refuse first, where the file names show it: a missing directory, a file, or
    a checkpoint directory without a step. None otherwise, and for object storage (only orbax can tell)."""
    if object_store.is_url(path):
        return None
    try:
        directory = checkpoint_dir(path)
    except (FileNotFoundError, NotADirectoryError) as error:
        return str(error)
    return no_checkpoint_message(path, directory) if holds_no_step(directory) else None


def snapshot_dir(run_dir: str, key: str) -> tuple[str, int]:
    """(the pool player directory or URL, step) of league snapshot `key` ("player:step") of the run in `run_dir`;
    ValueError for a key that names no snapshot, FileNotFoundError for a local pool without the player."""
    player, step = parse_key(key)
    if step is None:
        raise ValueError(
            f"{key!r} names a live player, not a snapshot: pass 'player:step' (e.g. '{key}:000512'), "
            f"load_policy({run_dir!r}) for the learner's newest checkpoint, or "
            f"load_policy({os.path.join(run_dir, 'pool', key)!r}) for {key}'s newest snapshot"
        )
    player_dir = player_dir_of(run_dir, player)  # the run's pool: <run_dir>/pool or its recorded URL
    if not object_store.is_url(player_dir) and not os.path.isdir(player_dir):
        pool = os.path.join(run_dir, "pool")
        known = sorted(os.listdir(pool)) if os.path.isdir(pool) else []
        raise FileNotFoundError(f"snapshot {key!r}: no player directory {player_dir!r} (the pool has players {known})")
    return player_dir, step


def no_output_message(run_dir: str, source: str, directory: str) -> str:
    """What `seedleague.output.resolve(run_dir)` says when its output `source` is read from the learner's
    checkpoints and `directory` (its checkpoints directory) holds none."""
    return (f"{run_dir!r} has no output yet: its output ({source}) is read from the learner's checkpoints and "
            f"{directory} holds none; a run writes its first after --checkpoint.interval-s of training and "
            "one when it stops, so wait for one (or resume the run)")


def output_problem(run_dir: str, source: Optional[str] = None) -> Optional[str]:
    """What `seedleague.output.resolve(run_dir)` (with `source`, else the run's recorded output) would refuse,
    where the file names show it: the output is read from the learner's checkpoints (FROM_CHECKPOINTS) and
    `<run_dir>/checkpoints` holds no step. None otherwise, and for a run with a league database (a
    population-based training member may stand in for the player) or an output.json this cannot read."""
    if not os.path.isdir(run_dir) or os.path.exists(os.path.join(run_dir, "league", "league.sqlite")):
        return None
    if source is None:
        try:
            source = recorded(run_dir).source
        except (OSError, ValueError, TypeError):
            return None
    directory = os.path.join(run_dir, "checkpoints")
    if source not in FROM_CHECKPOINTS or not holds_no_step(directory):
        return None
    return no_output_message(run_dir, source, directory)
