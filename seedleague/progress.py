"""A run's progress file: `<run_dir>/progress.jsonl`, one JSON object per progress tick.

The console's progress line is for people; this file carries the same numbers for
programs (benchmarks/chaos.py, tests, a user's plotting script), so none of them parses
log text. `seedleague.launch.local` appends a tick every report interval and one when the run
stops; each line is flushed as it is written, and a resumed run (`--resume`) appends
to the same file:

    with ProgressFile(run_dir, resumed_from=None) as ticks:   # the writer (seedleague.launch.local)
        ticks.append(metrics.report(), learner_step)
    read(run_dir)        # every whole tick so far, oldest first: [{"time": ..., "env_steps": ..., ...}, ...]

Fields of a tick (docs/usage.md, "Outputs of a run"): `time` (Unix
seconds), `wall_s` (seconds since this process started), `env_steps` and `episodes`
(the run's, a resumed run's earlier ones included), `learner_step` (updates of the
train state, earlier ones included: the number checkpoints are named by),
`learner_steps` (this process's updates, the console's "learner N"), `resumed_from`
(the learner step this process restored, null when it started fresh), `mean_return`
(the last 100 episodes; null before the first), then every other number of the
tick's report under its TensorBoard name (rates, games, win rate, batching, replay,
lag, losses). A number that is not finite is written as null.

A killed writer can leave a torn last line; `read` leaves out a last line that has no
newline yet (a tick being written) and any line that is not a JSON object (a torn one,
ended by the next writer's first newline).
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any, Optional

FILE = "progress.jsonl"
FIRST_FIELDS = ("time", "wall_s", "env_steps", "episodes", "learner_step", "learner_steps", "resumed_from",
                "mean_return")  # in this order at the start of every tick; the rest follow as the report has them


def path(run_dir: str) -> str:
    """Where a run's progress file is."""
    return os.path.join(run_dir, FILE)


def tick(report: dict[str, Any], learner_step: int, resumed_from: Optional[int], now: float) -> dict[str, Any]:
    """The JSON object for one progress tick: `report` (Metrics.report, plus what the launcher adds) with the
    run's learner step, the step this process resumed from and the Unix time `now`."""
    values = dict(report, time=round(now, 3), learner_step=int(learner_step), resumed_from=resumed_from)
    ordered = {name: values[name] for name in FIRST_FIELDS if name in values}
    ordered.update((name, value) for name, value in values.items() if name not in ordered)
    return {name: _plain(value) for name, value in ordered.items()}


def _plain(value: Any) -> Any:
    """A JSON value: numpy scalars as Python numbers, NaN and infinities as None."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class ProgressFile:
    """Appends ticks to `<run_dir>/progress.jsonl`, each flushed at once so a reader sees it."""

    def __init__(self, run_dir: str, resumed_from: Optional[int] = None):
        """`resumed_from`: the learner step of the checkpoint this process restored (None: it started fresh)."""
        self.path = path(run_dir)
        self.resumed_from = resumed_from
        self._file = open(self.path, "a", encoding="utf-8")
        if self._file.tell() and not _ends_with_newline(self.path):  # a killed writer's torn last tick
            self._file.write("\n")  # ends it, so this process's first tick starts a line of its own
            self._file.flush()

    def append(self, report: dict[str, Any], learner_step: int) -> dict[str, Any]:
        """Write one tick (see `tick`) as one line; returns it."""
        record = tick(report, learner_step, self.resumed_from, time.time())
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()
        return record

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> "ProgressFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _ends_with_newline(file_path: str) -> bool:
    with open(file_path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def read(run_dir_or_file: str) -> list[dict[str, Any]]:
    """Every whole tick in a run's progress file, oldest first ([] while it has none or does not exist yet).

    Takes the run directory or the file's path. A last line with no newline yet is being written and is
    left out; so is any line that is not a JSON object (a tick torn when its writer was killed)."""
    file_path = path(run_dir_or_file) if os.path.isdir(run_dir_or_file) else run_dir_or_file
    try:
        with open(file_path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return []
    ticks = []
    for line in text.split("\n")[:-1]:  # the piece after the last newline is not a whole line yet
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            ticks.append(record)
    return ticks
