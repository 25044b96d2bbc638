"""The learner trains the newest batch again while no fresh one is ready (seedleague.host.data_reuse), within its
pass and policy-lag bounds, and only where the learner's device would otherwise idle."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from seedleague.host.data_reuse import LAG_FACTOR, DataReuse, passes_for
from seedleague.host.learner_loop import LearnerLoop
from seedleague.host.replay_config import ReplayConfig
from seedleague.metrics import progress_line
from seedleague.rl.learner_config import LearnerConfig
from seedleague.testing.learner_loop import LoopState, ReadyBatches, RecordingMetrics, TakesParams


@pytest.mark.parametrize("reuse, platform, epochs, max_passes, expected", [
    ("auto", "cpu", 4, 0, 1),  # a CPU learner's wait is the workers' compute time: nothing reused
    ("auto", "gpu", 4, 0, 2),  # 10 // 4: two passes of 4 epochs keep a batch's epochs <= 10
    ("auto", "gpu", 1, 0, 10),  # one step per batch (V-trace): up to ten
    ("auto", "gpu", 20, 0, 1),  # already past ten epochs: no reuse
    ("auto", "tpu", 3, 5, 5),  # an explicit bound wins
    ("on", "cpu", 2, 0, 5),
    ("off", "gpu", 1, 0, 1),
])
def test_passes_follow_the_device_and_the_learners_epochs(reuse, platform, epochs, max_passes, expected):
    replay = ReplayConfig(reuse_when_idle=reuse, max_passes=max_passes)
    assert passes_for(replay, LearnerConfig(epochs=epochs), platform) == expected


def test_bad_settings_are_refused_with_what_to_use():
    with pytest.raises(ValueError, match="'auto', 'on' or 'off'"):
        ReplayConfig(reuse_when_idle="yes")
    with pytest.raises(ValueError, match="max_passes must be >= 0"):
        ReplayConfig(max_passes=-1)


def test_a_batch_is_reused_until_its_passes_or_its_lag_run_out():
    reuse = DataReuse(max_passes=3)
    assert reuse.again() is None  # nothing trained yet
    reuse.trained("a", reused=False, policy_lag=1.0)
    assert reuse.lag_bound() == LAG_FACTOR * 1.0
    assert reuse.again() == "a"
    reuse.trained("a", reused=True, policy_lag=2.0)
    assert reuse.again() == "a"
    reuse.trained("a", reused=True, policy_lag=3.0)
    assert reuse.again() is None  # three passes
    reuse.trained("b", reused=False, policy_lag=3.5)  # fresh lags 1 and 3.5: median 2.25, bound 9
    assert reuse.lag_bound() == pytest.approx(LAG_FACTOR * 2.25)
    assert reuse.again() == "b"
    stale = DataReuse(max_passes=10)
    stale.trained("c", reused=False, policy_lag=0.0)  # a median under one bounds at LAG_FACTOR x 1
    stale.trained("c", reused=True, policy_lag=LAG_FACTOR - 0.5)
    assert stale.again() is None  # one more update would train it at a lag past the bound
    stale.trained("d", reused=False, policy_lag=0.0)
    stale.drop()  # the state was replaced
    assert stale.again() is None
    assert not DataReuse(max_passes=1).enabled


def _update(state, batch, clock, scales):
    """Counts updates; reports which batch it trained (batch[1]) and its lag (step minus batch[0], its version)."""
    lag = state.step.astype(jnp.float32) - batch[0]
    return LoopState(state.params + 1.0, state.step + 1), {"batch": batch[1], "policy_lag": lag}


def test_the_loop_trains_the_newest_batch_again_only_while_nothing_fresh_is_ready():
    replay, metrics = ReadyBatches(), RecordingMetrics()
    loop = LearnerLoop(jax.jit(_update), LoopState(jnp.zeros(()), jnp.asarray(0, jnp.int32)), replay, TakesParams(),
                       metrics, reuse=DataReuse(max_passes=3))
    loop.start()
    try:
        replay.put(jnp.array([0.0, 1.0]))  # batch 1, acted by version 0
        metrics.wait_for(3)  # its three passes, without waiting for a fresh batch
        replay.put(jnp.array([3.0, 2.0]), jnp.array([3.0, 3.0]))  # batches 2 and 3 (version 3): 3 waits for 2's end
        metrics.wait_for(7)  # batch 3's three passes end it: nothing is left to train
    finally:
        loop.stop()
    trained = [(int(u["batch"]), bool(u["reused"])) for u in metrics.updates]
    assert trained == [(1, False), (1, True), (1, True), (2, False), (3, False), (3, True), (3, True)]
    assert [u["policy_lag"] for u in metrics.updates] == [0, 1, 2, 0, 1, 2, 3]
    report = metrics.report()
    assert 0 < report["learner_busy"] <= 1 and report["reused"] == pytest.approx(4 / 7)
    assert "reused 57%" in progress_line(report)


def test_without_reuse_the_loop_waits_for_fresh_batches():
    replay, metrics = ReadyBatches(), RecordingMetrics()
    loop = LearnerLoop(jax.jit(_update), LoopState(jnp.zeros(()), jnp.asarray(0, jnp.int32)), replay, TakesParams(),
                       metrics, reuse=DataReuse(max_passes=1))
    loop.start()
    try:
        replay.put(jnp.array([0.0, 1.0]))
        metrics.wait_for(1)
        replay.put(jnp.array([0.0, 2.0]))
        metrics.wait_for(2)
    finally:
        loop.stop()
    assert [(int(u["batch"]), u["reused"]) for u in metrics.updates] == [(1, 0.0), (2, 0.0)]
    assert "reused" not in progress_line(metrics.report())
