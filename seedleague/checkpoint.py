"""Orbax checkpoints of the full training state, with a JSON sidecar of run counters.

`Checkpointer.save(step, state, meta)` writes `<dir>/<step>/{state,meta}`;
`restore(latest_step(), template)` reads the newest complete one back into the
structure of `template`. Typed PRNG keys are stored as their raw key data.

Several processes may share a directory (the league's model pool: each host writes
its own player's snapshots and reads the others'), so a step this process has not
seen is looked for on disk again before it is called missing.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from typing import Any, Optional

import jax
import orbax.checkpoint as ocp

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    """Where and how often the host saves its training state."""

    directory: str = ""  # "" disables checkpointing
    interval_s: float = 60.0  # seconds between saves (a final save happens at shutdown)
    max_to_keep: int = 3  # older checkpoints are deleted beyond this many
    restore_step: Optional[int] = None  # the step a resumed or serving host restores (None: the newest)

    def __post_init__(self):
        if self.interval_s <= 0:
            raise ValueError(f"checkpoint interval_s must be > 0, got {self.interval_s}")
        if self.max_to_keep < 1:
            raise ValueError(f"checkpoint max_to_keep must be >= 1, got {self.max_to_keep}")


# Characters orbax-checkpoint cannot have in a checkpoint's path: it globs for its own files, so "[1]" in a
# directory name reads as a character class and the checkpoint it just wrote cannot be read back (a backslash,
# glob's escape, likewise). Measured with orbax-checkpoint's StandardCheckpointer: a[1]b and a\b fail, a single
# [ or ], *, ?, {}, spaces, ;=, and % do not; refused all the same for [ and ] alone, so a rule is easy to state.
UNREADABLE_PATH_CHARS = "[]\\"


def path_problem(path: str) -> Optional[str]:
    """Why a checkpoint under `path` could not be read back (it holds one of UNREADABLE_PATH_CHARS), or None."""
    found = sorted({c for c in os.path.abspath(path) if c in UNREADABLE_PATH_CHARS})
    if not found:
        return None
    return (f"{path!r} contains {' and '.join(repr(c) for c in found)}: orbax-checkpoint globs for its files, so a "
            "checkpoint under that path could not be read back; choose a directory without '[', ']' or '\\'")


def safe_path_part(text: str) -> str:
    """`text` (a game name, say) made fit for one directory name: '/' and UNREADABLE_PATH_CHARS become '_'."""
    return "".join("_" if c in UNREADABLE_PATH_CHARS + "/" else c for c in text)


def _is_key(x: Any) -> bool:
    return isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _to_savable(state: Any) -> Any:
    return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, state)


def _from_savable(restored: Any, template: Any) -> Any:
    return jax.tree.map(lambda r, t: jax.random.wrap_key_data(r, impl=jax.random.key_impl(t)) if _is_key(t) else r, restored, template)


class Checkpointer:
    """Saves and restores (state, meta) pairs under one directory."""

    def __init__(self, config: CheckpointConfig):
        problem = path_problem(config.directory)
        if problem:
            raise ValueError(f"checkpoint directory {problem}")
        self.config = config
        self.directory = os.path.abspath(config.directory)
        os.makedirs(self.directory, exist_ok=True)
        options = ocp.CheckpointManagerOptions(max_to_keep=config.max_to_keep, enable_async_checkpointing=False)
        self._manager = ocp.CheckpointManager(self.directory, options=options, item_names=("state", "meta"))
        # One caller at a time: a host's prefetch thread restores opponents while its learner saves.
        self._lock = threading.RLock()

    def save(self, step: int, state: Any, meta: dict) -> None:
        """Save `state` as `step`; a step already on disk holds the same state and is kept as is."""
        with self._lock:
            if self._has(step):
                log.info("checkpoint %d already saved; keeping it", step)
                return
            args = ocp.args.Composite(state=ocp.args.StandardSave(_to_savable(state)), meta=ocp.args.JsonSave(meta))
            self._manager.save(step, args=args, force=True)
            self._manager.wait_until_finished()
        log.info("saved checkpoint %s/%d", self.directory, step)

    def latest_step(self) -> Optional[int]:
        steps = self.steps()
        return steps[-1] if steps else None

    def steps(self) -> list[int]:
        """Every complete checkpoint in the directory, read from disk (another process may have added some)."""
        with self._lock:
            self._manager.reload()
            return sorted(self._manager.all_steps())

    def restore(self, step: int, template: Any) -> tuple[Any, dict]:
        """(state, meta) of checkpoint `step`, shaped like `template`."""
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, _to_savable(template))
        args = ocp.args.Composite(state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore())
        with self._lock:
            self._require(step)
            restored = self._manager.restore(step, args=args)
        return _from_savable(restored["state"], template), dict(restored["meta"])

    def restore_meta(self, step: Optional[int] = None) -> Optional[dict]:
        """Only the JSON sidecar of checkpoint `step` (default: the newest): run counters, env spec, config."""
        with self._lock:
            step = self.latest_step() if step is None else step
            if step is None:
                return None
            self._require(step)
            restored = self._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        return dict(restored["meta"])

    def _has(self, step: int) -> bool:
        """Whether `step` is complete on disk; the manager's cached list is re-read once when it lacks it."""
        if step in self._manager.all_steps():
            return True
        self._manager.reload()
        return step in self._manager.all_steps()

    def _require(self, step: int) -> None:
        if not self._has(step):
            raise FileNotFoundError(f"no checkpoint {step} in {self.directory}; it holds {self.steps()}")

    def close(self) -> None:
        with self._lock:
            self._manager.close()
