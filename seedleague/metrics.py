"""Run metrics: thread-safe counters, a TensorBoard writer and a live console line.

Components record into one `Metrics` object; `report()` turns the counters into
rates and means since the last report, writes them as TensorBoard scalars and
returns them. `progress_line` formats the same numbers for the console.

The scalars are written and flushed by the caller of `report()`, not by a writer
thread: tensorboardX's own thread dies on a full disk and leaves every later
`add_scalar` blocked on a queue nobody drains. Here a failed write raises a
`StorageError` naming the file, and the run stops.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from typing import Optional, Sequence

import numpy as np

from seedleague.storage import storage_error


class Metrics:
    """Counters shared by the host's threads; everything is O(1) per record."""

    def __init__(self, logdir: Optional[str] = None, return_window: int = 100):
        self._lock = threading.Lock()
        self._writer: Optional[_ScalarWriter] = _ScalarWriter(logdir) if logdir else None
        self.env_steps = 0
        self.agent_steps = 0
        self.episodes = 0
        self.learner_steps = 0
        self.returns: collections.deque = collections.deque(maxlen=return_window)
        self.games = 0  # finished games of a seated (multi-player) run; an episode counts each learning seat
        self.league_games = 0  # of those, games against a league snapshot
        self.league_outcomes: collections.deque = collections.deque(maxlen=return_window)  # 1 / 0.5 / 0
        self.lengths: collections.deque = collections.deque(maxlen=return_window)
        self._sums: dict[str, float] = collections.defaultdict(float)
        self._counts: dict[str, int] = collections.defaultdict(int)
        self._last_time = time.perf_counter()
        self._last_env_steps = 0
        self._last_learner_steps = 0
        self.start_time = self._last_time

    def record_steps(self, env_steps: int, agent_steps: int) -> None:
        with self._lock:
            self.env_steps += env_steps
            self.agent_steps += agent_steps

    def record_episodes(self, returns: np.ndarray, lengths: np.ndarray) -> None:
        if len(returns) == 0:
            return
        with self._lock:
            self.episodes += len(returns)
            self.returns.extend(returns.tolist())
            self.lengths.extend(lengths.tolist())

    def record_games(self, games: int, league_outcomes: Sequence[float] = ()) -> None:
        """`games` finished games, and the learner's outcomes (1 win, 0.5 draw, 0 loss) in those
        played against league snapshots (self-play games have none)."""
        with self._lock:
            self.games += games
            self.league_games += len(league_outcomes)
            self.league_outcomes.extend(league_outcomes)

    def record(self, **values: float) -> None:
        """Add samples to running means (reset at each report)."""
        with self._lock:
            for name, value in values.items():
                self._sums[name] += float(value)
                self._counts[name] += 1

    def record_learner_step(self, **values: float) -> None:
        with self._lock:
            self.learner_steps += 1
        self.record(**values)

    def mean_return(self) -> float:
        with self._lock:
            return float(np.mean(self.returns)) if self.returns else float("nan")

    def report(self) -> dict[str, float]:
        """Rates and means since the last report; also written to TensorBoard."""
        with self._lock:
            now = time.perf_counter()
            elapsed = max(now - self._last_time, 1e-9)
            out = {
                "env_steps": self.env_steps,
                "episodes": self.episodes,
                "learner_steps": self.learner_steps,
                "env_steps_per_s": (self.env_steps - self._last_env_steps) / elapsed,
                "learner_steps_per_s": (self.learner_steps - self._last_learner_steps) / elapsed,
                "mean_return": float(np.mean(self.returns)) if self.returns else float("nan"),
                "mean_episode_length": float(np.mean(self.lengths)) if self.lengths else float("nan"),
                "wall_s": now - self.start_time,
            }
            if self.games:
                out.update(games=self.games, league_games=self.league_games)
            if self.league_outcomes:  # (wins + draws/2) / games over the recent window
                out["league_win_rate"] = float(np.mean(self.league_outcomes))
            out.update({name: self._sums[name] / self._counts[name] for name in self._sums})
            if "update_ms" in out and "sample_wait_ms" in out:  # the learner's share of time in updates, not waits
                out["learner_busy"] = out["update_ms"] / max(out["update_ms"] + out["sample_wait_ms"], 1e-9)
            self._sums.clear()
            self._counts.clear()
            self._last_time, self._last_env_steps, self._last_learner_steps = now, self.env_steps, self.learner_steps
        if self._writer is not None:
            writer, self._writer = self._writer, None  # a writer that failed is not tried again
            writer.write({k: v for k, v in out.items() if np.isfinite(v)}, int(out["env_steps"]))
            self._writer = writer
        return out

    def close(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()


class _ScalarWriter:
    """TensorBoard scalars appended to one event file in the calling thread; StorageError when a write fails."""

    def __init__(self, logdir: str):
        self.logdir = logdir
        self._file = None

    def write(self, scalars: dict[str, float], step: int) -> None:
        from tensorboardX import summary  # function-local: the TensorBoard protos are needed only when logging
        from tensorboardX.proto import event_pb2

        try:
            if self._file is None:
                from tensorboardX.event_file_writer import EventsWriter

                os.makedirs(self.logdir, exist_ok=True)
                self._file = EventsWriter(os.path.join(self.logdir, "events"))
            for name, value in scalars.items():
                event = event_pb2.Event(wall_time=time.time(), step=step, summary=summary.scalar(name, value))
                self._file.write_event(event)
            self._file.flush()
        except OSError as error:
            raise storage_error(error, self.logdir, "the TensorBoard scalars") from None

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:  # a full disk was already reported by write(); nothing is left to save here
                pass


def _si(x: float) -> str:
    for unit, scale in (("M", 1e6), ("K", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.1f}{unit}"
    return f"{x:.0f}"


def progress_line(report: dict[str, float]) -> str:
    """One console line: throughput, games, returns (or, in a league, the learner's win rate against
    its opponents: wins + draws/2 over the last games), batching, replay, staleness, loss."""
    get = report.get
    parts = [
        f"{get('wall_s', 0):6.1f}s",
        f"steps {_si(get('env_steps', 0))} ({_si(get('env_steps_per_s', 0))}/s)",
        f"episodes {int(get('episodes', 0))}",
    ]
    if "games" in report:  # a seated game: an episode counts each learning seat, a game once
        league_games = f" ({int(get('league_games'))} vs league)" if get("league_games") else ""
        parts.append(f"games {int(get('games'))}{league_games}")
    if "best_response_return" in report:  # `seedleague exploit`: the learner's mean return against the output
        parts.append(f"best response's return {get('best_response_return'):+.4f}")
    if "league_win_rate" in report:  # a zero-sum game's return averages to 0 over both seats: say who wins
        parts.append(f"win rate vs league(100) {get('league_win_rate'):.3f}")
    else:
        parts.append(f"return(100) {get('mean_return', float('nan')):.1f}")
    stats = sorted(k for k in report if k.startswith("episode_stats/"))  # a v2 worker's declared statistics
    if stats:
        parts.append(" ".join(f"{k.partition('/')[2]} {report[k]:.3g}" for k in stats))
    parts.append(f"learner {int(get('learner_steps', 0))} ({get('learner_steps_per_s', 0):.0f}/s)")
    if "inference_batch" in report:
        parts.append(f"batch {get('inference_batch'):.0f} in {get('inference_ms', 0):.2f}ms")
    if "replay_size" in report:
        parts.append(f"replay {get('replay_size'):.0f}")
    if "update_ms" in report:
        parts.append(f"update {get('update_ms'):.1f}ms wait {get('sample_wait_ms', 0):.1f}ms")
    if get("reused"):  # seedleague.host.data_reuse: the share of updates on a batch trained before
        parts.append(f"reused {100 * get('reused'):.0f}%")
    if "insert_wait_ms" in report:
        parts.append(f"insert wait {get('insert_wait_ms'):.1f}ms")
    if "policy_lag" in report:
        parts.append(f"lag {get('policy_lag'):.1f}")
    if "total_loss" in report:
        parts.append(f"loss {get('total_loss'):.3f}")
    return " | ".join(parts)
