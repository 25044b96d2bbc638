"""CheckpointConfig, and which paths a checkpoint can live under.

Kept apart from seedleague.checkpoint, which saves and restores jax state with orbax, so that building the command
line and refusing a bad run directory (`seedleague train --run-dir 'a[1]'`) need no jax.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

from seedleague import object_store


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
    found = sorted({c for c in (path if object_store.is_url(path) else os.path.abspath(path))
                    if c in UNREADABLE_PATH_CHARS})
    if not found:
        return None
    return (f"{path!r} contains {' and '.join(repr(c) for c in found)}: orbax-checkpoint globs for its files, so a "
            "checkpoint under that path could not be read back; choose a directory without '[', ']' or '\\'")


def safe_path_part(text: str) -> str:
    """`text` (a game name, say) made fit for one directory name: '/' and UNREADABLE_PATH_CHARS become '_'."""
    return "".join("_" if c in UNREADABLE_PATH_CHARS + "/" else c for c in text)
