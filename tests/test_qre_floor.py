"""benchmarks.qre_floor: MMD's behavioural-form step, the logit agent QRE it converges to, and a run's temperature."""

import math

import numpy as np
import pyspiel
import pytest

from benchmarks import qre_floor
from seedleague.rl.learner_config import LearnerConfig

ROW_PAYOFF = [[2.0, 0.0], [0.0, 1.0]]  # the row player's; the column player gets its negative


def _sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def test_one_mmd_step_by_hand():
    probs = np.array([[0.5, 0.5, 0.0]])
    q = np.array([[1.0, 0.0, 5.0]])
    legal = np.array([[True, True, False]])
    # (log 0.5 + [1, 0]) / (1 + 1 * 1): the logits differ by 1/2, so p0 = e^0.5 / (e^0.5 + 1)
    stepped = qre_floor.mmd_step(probs, q, legal, step_size=1.0, temperature=1.0)
    np.testing.assert_allclose(stepped, [[math.exp(0.5) / (math.exp(0.5) + 1), 1 / (math.exp(0.5) + 1), 0.0]])
    # a step that is all magnet (eta * q negligible) pulls towards uniform: the square root of the odds
    pulled = qre_floor.mmd_step(np.array([[0.8, 0.2, 0.0]]), np.zeros((1, 3)), legal, step_size=1.0, temperature=1.0)
    np.testing.assert_allclose(pulled[0, :2], [2 / 3, 1 / 3])


def _row_game():
    matrix = pyspiel.create_matrix_game("qre_test", "2x2 zero-sum", ["a", "b"], ["a", "b"],
                                        ROW_PAYOFF, (-np.array(ROW_PAYOFF)).tolist())
    return pyspiel.convert_to_turn_based(matrix)


def _logit_qre_by_bisection(tau: float) -> tuple[float, float]:
    """(P(row plays a), P(column plays a)) at the logit QRE of ROW_PAYOFF, from its two equations:
    p = sigmoid((2q - (1 - q)) / tau) and q = sigmoid(((1 - p) - 2p) / tau)."""
    column = lambda p: _sigmoid((1 - 3 * p) / tau)  # noqa: E731
    lo, hi = 0.0, 1.0
    for _ in range(200):  # p - sigmoid((3 q(p) - 1) / tau) increases in p
        mid = (lo + hi) / 2
        if mid - _sigmoid((3 * column(mid) - 1) / tau) > 0:
            hi = mid
        else:
            lo = mid
    return lo, column(lo)


@pytest.mark.parametrize("tau", [2.0, 0.5])
def test_the_solve_reaches_the_logit_qre_of_a_matrix_game(tau):
    qre = qre_floor.agent_qre(_row_game(), tau, step_size=0.5, tol=1e-9, max_steps=20000)
    assert qre.residual < 1e-9
    p, q = _logit_qre_by_bisection(tau)
    table = qre.policy.action_probability_array
    rows = {state.current_player(): table[i] for i, state in enumerate(qre.policy.states)}
    np.testing.assert_allclose(rows[0], [p, 1 - p], atol=1e-6)
    np.testing.assert_allclose(rows[1], [q, 1 - q], atol=1e-6)


def test_a_lower_temperature_is_closer_to_nash_on_kuhn():
    game = pyspiel.load_game("kuhn_poker")
    from open_spiel.python.algorithms.exploitability import exploitability

    scores = [exploitability(game, qre_floor.agent_qre(game, tau, step_size=0.5, tol=1e-6).policy) for tau in (0.4, 0.2)]
    assert scores[1] < scores[0]
    assert abs(scores[1] - 0.0436) < 1e-3  # benchmarks/README.md's table: Kuhn's QRE at tau 0.2


def test_a_runs_temperature_is_alpha_times_the_advantage_spread():
    mmd = LearnerConfig(loss="mmd", kl_cost=0.2, entropy_cost=0.2, entropy_cost_final=0.05)
    losses = [50.0] * 90 + [4.5] * 10  # the newest tenth: 0.5 * spread^2 = 4.5, so a spread of 3
    alpha, spread, tau = qre_floor.temperature(mmd, losses)
    assert (alpha, spread) == (0.05, 3.0) and tau == pytest.approx(0.15)
    vtrace = LearnerConfig(loss="vtrace", entropy_cost=0.03)  # its entropy cost is in reward units already
    assert qre_floor.temperature(vtrace, losses) == (0.03, 1.0, 0.03)
    with pytest.raises(ValueError, match="no value loss"):
        qre_floor.temperature(mmd, [])


def test_a_temperature_of_zero_is_refused_with_what_to_use():
    with pytest.raises(ValueError, match="CFR"):
        qre_floor.agent_qre(_row_game(), 0.0)
