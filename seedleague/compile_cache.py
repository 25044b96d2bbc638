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
The cache keeps at most `MAX_BYTES`, evicting the least recently used entries.
"""

from __future__ import annotations

import logging
import os
from typing import Optional

log = logging.getLogger(__name__)

VARIABLE = "SEEDLEAGUE_COMPILE_CACHE"
MAX_BYTES = 2 << 30
MIN_COMPILE_SECONDS = 0.2  # cheaper compiles are not worth a file


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
    os.environ["JAX_COMPILATION_CACHE_DIR"] = path  # children (league hosts, workers) find the same cache
    import jax

    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
    return path
