"""What the league page reads from the run's own files beside the league: each host's progress ticks (env
steps and learner steps over time), the run's evaluations and `seedleague exploit`'s best responses.

    files = RunFiles("runs/kuhn")          # the run directory: its league is runs/kuhn/league
    shown = files.read(["main", "exploiter"], snapshots, wall_t)   # the page's env-step and exploitability data

The league itself sees learner steps only (check-ins and snapshots carry them); env steps are what the hosts
already write, one tick every report interval, to their progress files (`seedleague.progress`), laid out as
`seedleague.launch.league` lays a league run out: the first player's host in RUN/progress.jsonl, every other
player's in RUN/players/NAME/progress.jsonl. A snapshot of player P at learner step s is placed at P's env
steps and wall-clock time at step s, interpolated between P's ticks (a snapshot after P's last tick waits for
the next one). Exploitability comes from two writers: `seedleague eval --run-dir RUN` appends every
evaluation to RUN/eval/history.jsonl (each results field named `*exploitability` is a curve over the run's
env steps), and `seedleague exploit --run-dir RUN` trains each best response in RUN/exploit/NAME/: its
summary.json holds the estimate and the response's learning curve once it ended, its progress.jsonl the
response's mean return while it trains. Files are read where they grew since the last read (a progress file
is followed from its last offset), so a long run costs the page no more per read than a short one.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Optional, Sequence

import numpy as np

from seedleague import progress

MAX_POINTS = 400  # points per curve the page gets (each series keeps at most twice this)
MAX_READ_BYTES = 8 << 20  # one read of a growing file; the rest is read at the next sample
MAX_BEST_RESPONSES = 20  # the newest best responses shown
EXPLOITABILITY_SUFFIX = "exploitability"  # eval results fields that are exploitabilities (NashConv / 2)


class JsonLines:
    """The whole JSON-object lines a file gained since the last call (a torn or unfinished line is left out)."""

    def __init__(self, path: str):
        self.path = path
        self._offset, self._inode = 0, None

    def read_new(self) -> tuple[list[dict], bool]:
        """(new records, whether the file was replaced or cut since the last call: its records start over)."""
        try:
            stat = os.stat(self.path)
        except OSError:
            return [], False
        restarted = self._inode is not None and (stat.st_ino != self._inode or stat.st_size < self._offset)
        if restarted or self._inode is None:
            self._offset, self._inode = 0, stat.st_ino
        if stat.st_size == self._offset:
            return [], restarted
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read(MAX_READ_BYTES)
        except OSError:
            return [], restarted
        end = data.rfind(b"\n")
        if end < 0:
            return [], restarted
        self._offset += end + 1
        records = []
        for line in data[:end].split(b"\n"):
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                records.append(record)
        return records, restarted


class HostProgress:
    """One host's (time, learner step, env steps) over its run, from its progress ticks, kept monotone."""

    def __init__(self, path: str):
        self.lines = JsonLines(path)
        self.time: list[float] = []
        self.learner_step: list[int] = []
        self.env_steps: list[int] = []

    def update(self) -> None:
        ticks, restarted = self.lines.read_new()
        if restarted:
            self.time, self.learner_step, self.env_steps = [], [], []
        for tick in ticks:
            self.add(tick)
        if len(self.time) > 2 * MAX_POINTS:
            keep = slice(None, None, 2)  # every second point: the span stays, the step grows
            self.time, self.learner_step, self.env_steps = self.time[keep], self.learner_step[keep], self.env_steps[keep]

    def add(self, tick: dict) -> None:
        """One tick. A fresh host's first tick adds the origin (step 0, env step 0, its start time); a tick
        behind the last one (a host resumed from an earlier checkpoint) drops the points it supersedes."""
        try:
            t, step, env_steps = float(tick["time"]), int(tick["learner_step"]), int(tick["env_steps"])
        except (KeyError, TypeError, ValueError):
            return
        if not self.time and tick.get("resumed_from") is None and isinstance(tick.get("wall_s"), (int, float)):
            self.time.append(t - float(tick["wall_s"]))
            self.learner_step.append(0)
            self.env_steps.append(0)
        while self.learner_step and self.learner_step[-1] > step:
            self.time.pop(), self.learner_step.pop(), self.env_steps.pop()
        self.time.append(t)
        self.learner_step.append(step)
        self.env_steps.append(env_steps)

    def at_steps(self, steps: Sequence[int]) -> list[list[Optional[float]]]:
        """[env steps, time] at each learner step: when the learner first reached it (interpolated between ticks;
        [None, None] outside the ticks' span)."""
        first = [i for i, step in enumerate(self.learner_step) if i == 0 or step != self.learner_step[i - 1]]
        xs = [self.learner_step[i] for i in first]
        return [list(pair) for pair in zip(_within(xs, [self.env_steps[i] for i in first], steps, 0),
                                           _within(xs, [self.time[i] for i in first], steps, 2))]

    def env_steps_at_times(self, times: Sequence[float]) -> list[Optional[float]]:
        """Env steps at each wall-clock time (interpolated; None outside the ticks' span)."""
        return _within(self.time, self.env_steps, times, 0)

    def to_json(self) -> dict:
        picks = _thin_indices(len(self.time), MAX_POINTS)
        return dict(t=[round(self.time[i], 2) for i in picks], learner_step=[self.learner_step[i] for i in picks],
                    env_steps=[self.env_steps[i] for i in picks])


def _within(xs: Sequence[float], ys: Sequence[float], at: Sequence[float], digits: int) -> list[Optional[float]]:
    """ys interpolated at each of `at` over the non-decreasing xs; None outside [xs[0], xs[-1]] (or with no
    points); rounded to `digits` (0: an int)."""
    if not xs or not len(at):
        return [None] * len(at)
    at = np.asarray(at, np.float64)
    values = np.interp(at, np.asarray(xs, np.float64), np.asarray(ys, np.float64))
    inside = (at >= xs[0]) & (at <= xs[-1])
    return [(round(float(v), digits) if digits else int(round(v))) if ok else None for v, ok in zip(values, inside)]


def _thin_indices(length: int, max_points: int) -> list[int]:
    """At most `max_points` evenly spaced indices into `length` items, the first and the last always kept."""
    if length <= max_points:
        return list(range(length))
    return [int(i) for i in np.unique(np.linspace(0, length - 1, max_points).round().astype(int))]


def progress_paths(run_dir: str, players: Sequence[str]) -> dict[str, str]:
    """{player: its host's progress file} for the learning `players`: RUN/players/NAME/progress.jsonl where that
    directory exists, and RUN/progress.jsonl for the one player left (the run's first host) when exactly one is."""
    paths = {name: progress.path(os.path.join(run_dir, "players", name)) for name in players
             if os.path.isdir(os.path.join(run_dir, "players", name))}
    left = [name for name in players if name not in paths]
    if len(left) == 1 and os.path.exists(progress.path(run_dir)):
        paths[left[0]] = progress.path(run_dir)
    return paths


def evaluation_points(entries: Sequence[dict]) -> dict[str, list[list]]:
    """{results field: [[env steps, wall_s, learner step, value, time], ...]} for every `*exploitability` field of
    `seedleague eval`'s history entries (None where an entry lacks one of the x values)."""
    series: dict[str, list[list]] = {}
    for entry in entries:
        results = entry.get("results")
        if not isinstance(results, dict):
            continue
        for field, value in results.items():
            if field.endswith(EXPLOITABILITY_SUFFIX) and isinstance(value, (int, float)) and np.isfinite(value):
                series.setdefault(field, []).append([_number(entry.get("env_steps")), _number(entry.get("wall_s")),
                                                     _number(entry.get("step")), round(float(value), 6),
                                                     _number(entry.get("time"))])
    return series


def _number(value) -> Optional[float]:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value) else None


def best_response(directory: str, summary: Optional[dict], ticks: Sequence[dict]) -> dict:
    """One `seedleague exploit` run for the page: its estimate (value, 95% half-width, games, read-out, still
    rising) and its curve [[seconds, mean return]] from summary.json once it ended, else its progress ticks'
    mean return while it trains."""
    shown = dict(name=os.path.basename(directory), finished=summary is not None)
    found = (summary or {}).get("exploit") or {}
    estimate = found.get("estimate") or {}
    if summary is not None:
        shown.update(estimate=estimate.get("value"), ci95=estimate.get("ci95"), games=estimate.get("games"),
                     read_out=bool(found.get("read_out")), still_rising=bool(found.get("still_rising")),
                     error=found.get("error") or ("" if estimate else "no estimate"),
                     curve=[[p.get("t_s"), p.get("value")] for p in found.get("curve", []) if isinstance(p, dict)])
    else:
        shown.update(curve=[[t.get("wall_s"), t.get("mean_return")] for t in ticks
                            if _number(t.get("wall_s")) is not None and _number(t.get("mean_return")) is not None])
    picks = _thin_indices(len(shown["curve"]), MAX_POINTS)
    shown["curve"] = [shown["curve"][i] for i in picks]
    return shown


class RunFiles:
    """The run's files the page reads, followed from one sample to the next."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        self.hosts: dict[str, HostProgress] = {}  # by progress file path
        self._history = JsonLines(os.path.join(run_dir, "eval", "history.jsonl"))
        self._evaluations: dict[str, list[list]] = {}
        self._responses: dict[str, tuple[tuple, dict]] = {}  # directory -> (its files' stat, what is shown)

    def read(self, players: Sequence[str], snapshots: Sequence[dict], wall_t: Sequence[float]) -> dict:
        """The page's data from the run's files: per player its progress and its live Elo samples' env steps
        (`wall_t`: the wall-clock series' times), each snapshot's [env steps, time], the evaluations' and the
        best responses' exploitability."""
        by_player = {}
        for name, path in progress_paths(self.run_dir, players).items():
            host = self.hosts.setdefault(path, HostProgress(path))
            host.update()
            by_player[name] = host
        at = {}
        for name, host in by_player.items():
            own = [s for s in snapshots if s["player"] == name]
            at.update(zip((s["key"] for s in own), host.at_steps([s["step"] for s in own])))
        return dict(progress={name: host.to_json() for name, host in by_player.items()},
                    snapshot_at=at,
                    wall_env_steps={name: host.env_steps_at_times(wall_t) for name, host in by_player.items()},
                    evaluations=self._read_evaluations(), best_responses=self._read_best_responses())

    def _read_evaluations(self) -> dict[str, list[list]]:
        entries, restarted = self._history.read_new()
        if restarted:
            self._evaluations = {}
        for field, points in evaluation_points(entries).items():
            kept = self._evaluations.setdefault(field, [])
            kept.extend(points)
            if len(kept) > 2 * MAX_POINTS:
                del kept[:len(kept) - 2 * MAX_POINTS]  # the newest evaluations
        return self._evaluations

    def _read_best_responses(self) -> list[dict]:
        found = sorted(glob.glob(os.path.join(glob.escape(self.run_dir), "exploit", "*", "")), key=_mtime)
        shown = []
        for directory in found[-MAX_BEST_RESPONSES:]:
            directory = directory.rstrip(os.sep)
            files = (os.path.join(directory, "summary.json"), progress.path(directory))
            stamp = tuple(_stat(path) for path in files)
            if stamp == (None, None):
                continue
            cached = self._responses.get(directory)
            if cached is None or cached[0] != stamp:
                summary = _json_file(files[0])
                ticks = progress.read(files[1]) if summary is None else []
                self._responses[directory] = (stamp, best_response(directory, summary, ticks))
            shown.append(self._responses[directory][1])
        return shown


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def _stat(path: str) -> Optional[tuple]:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


def _json_file(path: str) -> Optional[dict]:
    """The JSON object in `path`, or None (absent, being written, not an object)."""
    try:
        with open(path) as f:
            value = json.load(f)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None
