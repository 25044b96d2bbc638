"""The learning rate steered by each update's measured KL (seedleague.rl.kl_step), checked on hand-computed cases,
and the learner loop applying its factor on top of population-based training's scales."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from seedleague.host.learner_loop import LearnerLoop
from seedleague.rl import kl_step
from seedleague.rl.kl_step import KLStep
from seedleague.rl.learner import Scales
from seedleague.testing.learner_loop import LoopState, ReadyBatches, RecordingMetrics, TakesParams


def _calibrated(kls=(0.01,) * kl_step.CALIBRATION, alpha=0.2, **kwargs) -> KLStep:
    step = KLStep(learning_rate=1e-3, **kwargs)
    for kl in kls:
        assert step.observe(kl, alpha) == 1.0  # the rate is the recipe's while it calibrates
    return step


def test_calibration_takes_the_median_kl_and_alpha_of_the_first_updates():
    kls = [0.001 * (i + 1) for i in range(kl_step.CALIBRATION)]  # 0.001 ... 0.050: median 0.0255
    step = _calibrated(kls)
    assert step.target_0 == pytest.approx(0.0255)
    assert step.alpha_0 == 0.2
    assert step.target(0.1) == pytest.approx(0.0255 / 4)  # half the alpha, a quarter of the KL: the step halves


def test_the_rate_falls_above_twice_the_target_and_rises_below_half_of_it():
    step = _calibrated()  # target 0.01 at alpha 0.2
    assert step.observe(0.019, 0.2) == 1.0  # within [0.005, 0.02]: unchanged
    assert step.observe(0.021, 0.2) == pytest.approx(1 / 1.5)
    assert step.observe(0.021, 0.2) == pytest.approx(1 / 1.5 ** 2)
    assert step.observe(0.004, 0.2) == pytest.approx(1 / 1.5)
    # at alpha 0.1 the target is 0.0025: a KL of 0.006 is above twice it
    assert step.observe(0.006, 0.1) == pytest.approx(1 / 1.5 ** 2)


def test_the_rate_stays_within_its_bounds():
    step = _calibrated()
    for _ in range(100):
        step.observe(1.0, 0.2)
    assert step.factor * 1e-3 == pytest.approx(kl_step.MIN_RATE)
    for _ in range(100):
        step.observe(0.0, 0.2)
    assert step.factor * 1e-3 == pytest.approx(kl_step.MAX_RATE)


def test_a_given_target_replaces_the_calibrated_one_and_bad_readings_change_nothing():
    step = _calibrated(kl_target=0.03)
    assert step.target_0 == 0.03
    assert step.observe(float("nan"), 0.2) == 1.0
    assert step.observe(0.5, 0.0) == 1.0  # no alpha: no target
    still = _calibrated(kls=(0.0,) * kl_step.CALIBRATION)  # updates that move nothing: never steered
    assert still.target(0.2) is None and still.observe(1.0, 0.2) == 1.0


def _update(state, batch, clock, scales):
    """Reports a KL that grows with the learning rate's multiplier, and the multipliers it was given."""
    metrics = {"kl": 0.1 * scales.learning_rate, "entropy_cost": jnp.float32(0.2), "lr_scale": scales.learning_rate,
               "entropy_scale": scales.entropy_cost}
    return LoopState(state.params, state.step + 1), metrics


def test_the_loop_multiplies_the_learning_rate_by_the_steered_factor_on_top_of_the_scales():
    updates = kl_step.CALIBRATION + 3
    metrics, replay = RecordingMetrics(), ReadyBatches()
    replay.put(*[jnp.zeros(())] * updates)
    step = KLStep(learning_rate=1e-3, kl_target=0.002)  # the update's KL stays over twice that throughout
    loop = LearnerLoop(jax.jit(_update), LoopState(jnp.zeros(()), jnp.asarray(0, jnp.int32)), replay, TakesParams(),
                       metrics, kl_step=step)
    loop.set_scales(Scales(entropy_cost=2.0, learning_rate=0.5, kl_cost=1.0))  # population-based training's
    loop.start()
    try:
        metrics.wait_for(updates)
    finally:
        loop.stop()
    lr_scales = [u["lr_scale"] for u in metrics.updates]
    assert lr_scales[:kl_step.CALIBRATION + 1] == [0.5] * (kl_step.CALIBRATION + 1)
    # KLs of 0.05, 0.033, 0.022 are over 2 x 0.002: each update after calibration divides the factor by 1.5
    assert lr_scales[kl_step.CALIBRATION + 1:] == pytest.approx([0.5 / 1.5, 0.5 / 1.5 ** 2])
    assert {u["entropy_scale"] for u in metrics.updates} == {2.0}
    assert metrics.updates[-1]["learning_rate_factor"] == pytest.approx(1 / 1.5 ** 3)
    assert loop.scales.learning_rate == 0.5  # the scales as given
