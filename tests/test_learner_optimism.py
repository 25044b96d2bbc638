"""The learner's optimiser in games: Adam's momentum (adam_b1) and optimism (Daskalakis, Ilyas, Syrgkanis & Zeng,
"Training GANs with optimism", ICLR 2018). Their steps on hand-computed gradients, and the property they are
there for, on two-player games whose equilibrium is (0, 0): simultaneous steps with Adam's usual momentum spiral
away even from a strongly monotone game's equilibrium (Gidel et al., AISTATS 2019), without it they converge;
on the bilinear game only optimism converges."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from seedleague.rl.learner import _optimizer
from seedleague.rl.learner_config import LearnerConfig


def _steps(config: LearnerConfig, gradients) -> list[float]:
    """The unit-rate updates `_optimizer(config)` makes for a scalar parameter fed `gradients` in turn."""
    optimizer = _optimizer(config)
    params = jnp.zeros(())
    state = optimizer.init(params)
    updates = []
    for g in gradients:
        update, state = optimizer.update(jnp.asarray(g, jnp.float32), state, params)
        updates.append(float(update))
    return updates


def test_an_optimistic_step_adds_optimism_times_the_change_in_adams_step():
    # Adam's step r_t = m_hat / (sqrt(v_hat) + eps): after g = 1, r_1 = 1; after g = 1, -1: m_2 = 0.9 * 0.1 - 0.1
    # = -0.01, m_hat = -0.01 / 0.19, v_hat = 1, so r_2 = -1 / 19. The optimistic update is -r_t - o (r_t - r_{t-1}).
    # The first step has no earlier one to compare with. The gradient clip (0.5 of the global norm) scales both
    # gradients alike, which Adam's ratio does not see.
    r1, r2 = 1.0, -1.0 / 19.0
    plain = _steps(LearnerConfig(), [1.0, -1.0])
    assert plain == pytest.approx([-r1, -r2], abs=1e-4)
    optimistic = _steps(LearnerConfig(optimism=0.5), [1.0, -1.0])
    assert optimistic == pytest.approx([-r1, -r2 - 0.5 * (r2 - r1)], abs=1e-4)
    # Without momentum (adam_b1 0) m_hat is the gradient itself: r_2 = -1.
    no_momentum = _steps(LearnerConfig(optimism=0.5, adam_b1=0.0), [1.0, -1.0])
    assert no_momentum == pytest.approx([-1.0, 1.0 + 0.5 * 2.0], abs=1e-4)


def _play(config: LearnerConfig, regularisation: float, learning_rate: float = 0.01, steps: int = 4000) -> float:
    """Distance from the equilibrium (0, 0) after `steps` simultaneous steps from (1, 1) on the game where x
    minimises x * y + r / 2 * x^2 and y maximises x * y - r / 2 * y^2 (bilinear at r = 0; strongly monotone,
    as an entropy-regularised game is, at r > 0)."""
    optimizer = _optimizer(config)
    params = {"x": jnp.ones(()), "y": jnp.ones(())}

    def step(carry, _):
        params, state = carry
        x, y = params["x"], params["y"]
        grads = {"x": y + regularisation * x, "y": -x + regularisation * y}  # each one's gradient of its own loss
        updates, state = optimizer.update(grads, state, params)
        return (jax.tree.map(lambda p, u: p + learning_rate * u, params, updates), state), None

    (params, _), _ = jax.lax.scan(step, (params, optimizer.init(params)), None, length=steps)
    return float(np.hypot(params["x"], params["y"]))


def test_adams_momentum_spirals_a_regularised_game_away_and_without_it_the_steps_converge():
    start = np.hypot(1.0, 1.0)
    assert _play(LearnerConfig(), regularisation=0.05) > start  # b1 0.9: out, though the game is strongly monotone
    assert _play(LearnerConfig(adam_b1=0.0), regularisation=0.05) < 0.1
    assert _play(LearnerConfig(adam_b1=0.0, optimism=1.0), regularisation=0.05) < 0.01


def test_optimism_without_momentum_converges_on_the_bilinear_game_where_adam_circles():
    assert _play(LearnerConfig(adam_b1=0.0), regularisation=0.0) > 0.5
    assert _play(LearnerConfig(adam_b1=0.0, optimism=1.0), regularisation=0.0) < 0.2


def test_a_negative_optimism_or_a_momentum_outside_0_1_is_refused_by_name():
    with pytest.raises(ValueError, match="optimism must be >= 0"):
        LearnerConfig(optimism=-0.1)
    with pytest.raises(ValueError, match=r"adam_b1 must be in \[0, 1\)"):
        LearnerConfig(adam_b1=1.0)
