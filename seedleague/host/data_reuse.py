"""Training the newest batch again while no fresh one is ready, so a learner on an accelerator never idles.

On an accelerator an update takes a few milliseconds and the learner then waits for the workers' next batch
(benchmarks/README.md, "Pong learns on an H100": 85% of its time). Instead of waiting, it trains the batch it holds
once more: for PPO that is more epochs on it, for V-trace a replay ratio above one. The amount follows the measured
wait (a batch is reused only while the replay has nothing fresh, so a learner that keeps up reuses nothing and
workers that wait for the learner get none of it) and two bounds:

- passes: at most `max_passes` updates on one batch, its first included; by default as many as keep its epochs at
  or under ten, the most the PPO paper trains one batch (Schulman et al. 2017: 3 epochs on Atari, 10 on MuJoCo);
- policy lag: a batch is trained again only while its lag (learner updates since the params that acted, as the
  update measures it) stays within `LAG_FACTOR` times the median lag of the run's fresh batches, so reused data is
  never much staler than the run's own asynchrony already makes it.

The losses weigh every batch against the behaviour policy recorded in it, so a reused batch is corrected as any
off-policy one is (V-trace's truncated importance weights; PPO's clipped ratio).

On a CPU the learner's wait is the time the workers and inference compute on the same cores, so "auto" reuses
nothing there: training more would take their cores, not idle ones.
"""

from __future__ import annotations

import collections
from typing import Any, Optional

import numpy as np

from seedleague.host.replay_config import ReplayConfig
from seedleague.rl.learner_config import LearnerConfig

MOST_EPOCHS = 10  # epochs on one batch, reuses included, when max_passes is left at 0
LAG_FACTOR = 4.0  # a reused batch's policy lag stays within this many times the fresh batches' median
_LAG_WINDOW = 100  # fresh batches whose lag sets the bound


def passes_for(replay: ReplayConfig, learner: LearnerConfig, platform: str) -> int:
    """Most updates on one batch for a learner on `platform` ("cpu", "gpu", "tpu"); 1 means no reuse."""
    if replay.reuse_when_idle == "off" or (replay.reuse_when_idle == "auto" and platform == "cpu"):
        return 1
    return replay.max_passes or max(1, MOST_EPOCHS // learner.epochs)


class DataReuse:
    """Which batch the learner trains next when the replay has none ready: the newest one again, or none."""

    def __init__(self, max_passes: int):
        self.max_passes = max_passes
        self._batch: Any = None
        self._passes = 0
        self._lag = 0.0  # the held batch's policy lag at its last update
        self._fresh_lags: collections.deque = collections.deque(maxlen=_LAG_WINDOW)

    @property
    def enabled(self) -> bool:
        return self.max_passes > 1

    def lag_bound(self) -> float:
        """The most policy lag a reused batch may be trained at: LAG_FACTOR x the fresh batches' median (>= 1)."""
        median = float(np.median(self._fresh_lags)) if self._fresh_lags else 0.0
        return LAG_FACTOR * max(1.0, median)

    def trained(self, batch: Any, reused: bool, policy_lag: Optional[float]) -> None:
        """Record an update on `batch` (`reused`: it came from `again`), with the lag the update measured."""
        if not self.enabled:
            return
        if not reused:
            self._batch, self._passes = batch, 0
            if policy_lag is not None:
                self._fresh_lags.append(policy_lag)
        self._passes += 1
        self._lag = policy_lag if policy_lag is not None else self._lag + 1.0

    def again(self) -> Any:
        """The held batch, to train once more, or None when it has had its passes or would be too stale."""
        if self._batch is None or self._passes >= self.max_passes or self._lag + 1.0 > self.lag_bound():
            return None
        return self._batch

    def drop(self) -> None:
        """Forget the held batch (the learner's state was replaced: its lag no longer counts from there)."""
        self._batch = None
