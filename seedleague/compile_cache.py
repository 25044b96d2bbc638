"""JAX's persistent compilation cache for every seedleague process, so a run compiles each function once per machine.

A host compiles its forward pass for every batch bucket, its learner update and (in a league)
the opponent pass: seconds on a CPU, and again in every process of a league run (one host per
learning player) and every rerun. With the cache on, a second run, or a second player's host,
loads those executables from disk instead (JAX keys them by the computation, the JAX and XLA
versions and the device, so a stale entry is never used).

    SEEDLEAGUE_COMPILE_CACHE=off        # no cache
    SEEDLEAGUE_COMPILE_CACHE=/some/dir  # the cache there
    (unset)                             # $XDG_CACHE_HOME/seedleague/jax, else ~/.cache/seedleague/jax

JAX's own JAX_COMPILATION_CACHE_DIR wins where it is set (the test suite sets one per run).
The cache keeps at most `MAX_BYTES`, evicting the least recently used entries. `enable` first removes the entries a
process killed while writing one left behind (`repair`).
"""

from __future__ import annotations

import logging
import os
from typing import Optional

log = logging.getLogger(__name__)

VARIABLE = "SEEDLEAGUE_COMPILE_CACHE"
MAX_BYTES = 2 << 30
MIN_COMPILE_SECONDS = 0.2  # cheaper compiles are not worth a file
# JAX's LRU cache (jax._src.lru_cache) stores an entry as "<key>-cache" then "<key>-atime", under ".lockfile".
_CACHE, _ATIME, _LOCK = "-cache", "-atime", ".lockfile"
LOCK_SECONDS = 10.0  # waiting for another process's cache write; after that `repair` leaves the directory as it is


def directory(environ: Optional[dict] = None) -> Optional[str]:
    """Where this process's cache lives, or None when it is off (see the module docstring)."""
    environ = os.environ if environ is None else environ
    if environ.get("JAX_COMPILATION_CACHE_DIR"):
        return environ["JAX_COMPILATION_CACHE_DIR"]
    chosen = environ.get(VARIABLE, "").strip()
    if chosen.lower() in ("off", "0", "false", "no"):
        return None
    if chosen:
        return os.path.abspath(os.path.expanduser(chosen))
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "seedleague", "jax")


def enable() -> Optional[str]:
    """Turn the cache on for this process (and, through the environment, the processes it starts); returns its
    directory, or None when it is off or cannot be created (then the run compiles as it would without)."""
    path = directory()
    if path is None:
        return None
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as error:
        log.warning("no compilation cache: cannot create %s (%s); set %s to another directory or to off",
                    path, error, VARIABLE)
        return None
    repair(path)
    os.environ["JAX_COMPILATION_CACHE_DIR"] = path  # children (league hosts, workers) find the same cache
    import jax

    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
    return path


def repair(path: str) -> int:
    """Remove the entries of the cache in `path` that a process killed while writing left half-written: an executable
    without its access time, which JAX writes second. JAX's eviction reads every entry's access time before each
    write, so one such entry made every later write fail (a FileNotFoundError warning per compile, the executable not
    kept) in every run on the machine. Holds JAX's own lock meanwhile; returns how many entries it removed."""
    import filelock

    try:
        with filelock.FileLock(os.path.join(path, _LOCK), timeout=LOCK_SECONDS):
            names = set(os.listdir(path))
            orphans = [n for n in names if n.endswith(_CACHE) and n[:-len(_CACHE)] + _ATIME not in names]
            for name in orphans:
                os.remove(os.path.join(path, name))
    except (filelock.Timeout, OSError) as error:
        log.warning("compilation cache %s not checked for half-written entries (%s): if JAX warns that writing an "
                    "entry failed, delete the directory", path, error)
        return 0
    if orphans:
        log.info("removed %d half-written entries from the compilation cache %s (a process was killed while writing "
                 "them); they compile again once", len(orphans), path)
    return len(orphans)
