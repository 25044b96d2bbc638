"""The league's maths by hand: PFSP weights, decayed payoff counts, Elo, Nash, TrueSkill, config checks."""

from __future__ import annotations

import numpy as np
import pytest

from seedleague.league import payoff
from seedleague.league.config import LeagueConfig
from seedleague.league.elo import elo_update, expected_score
from seedleague.league.nash import solve_zero_sum, symmetric_nash
from seedleague.league.pfsp import pfsp_weights
from seedleague.league import trueskill
from seedleague.league.trueskill import BETA, INITIAL_MU, INITIAL_SIGMA, TAU, rate_1v1

X = np.array([0.2, 0.5, 0.9])  # P[player beats each of three candidates]

# --- PFSP -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "weighting, p, weights",
    [
        ("hard", 2.0, [0.64, 0.25, 0.01]),  # (1-x)^2
        ("hard", 1.0, [0.8, 0.5, 0.1]),  # (1-x)^1 = linear
        ("hard", 3.0, [0.512, 0.125, 0.001]),
        ("variance", 2.0, [0.16, 0.25, 0.09]),  # x(1-x)
        ("linear", 2.0, [0.8, 0.5, 0.1]),  # 1-x
        ("linear_capped", 2.0, [0.5, 0.5, 0.1]),  # min(0.5, 1-x)
        ("uniform", 2.0, [1.0, 1.0, 1.0]),
    ],
)
def test_pfsp_weights_by_hand(weighting, p, weights):
    expected = np.array(weights) / sum(weights)
    np.testing.assert_allclose(pfsp_weights(X, weighting, p), expected, rtol=1e-12)


def test_pfsp_falls_back_to_uniform_when_every_weight_is_zero():
    np.testing.assert_allclose(pfsp_weights(np.array([1.0, 1.0]), "hard"), [0.5, 0.5])
    np.testing.assert_allclose(pfsp_weights(np.array([0.0, 1.0, 1.0]), "variance"), [1 / 3] * 3)
    np.testing.assert_allclose(pfsp_weights(np.array([0.7]), "linear"), [1.0])


def test_pfsp_refuses_bad_input():
    with pytest.raises(ValueError, match="empty"):
        pfsp_weights(np.array([]), "hard")
    with pytest.raises(ValueError, match="use one of hard, variance, linear, linear_capped, uniform"):
        pfsp_weights(X, "squared")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        pfsp_weights(np.array([0.5, 1.5]), "hard")
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        pfsp_weights(np.array([np.nan]), "hard")
    with pytest.raises(ValueError, match="vector"):
        pfsp_weights(np.ones((2, 2)) / 2, "hard")
    with pytest.raises(ValueError, match="p must be > 0"):
        pfsp_weights(X, "hard", p=0.0)


# --- payoff ---------------------------------------------------------------------------------------


def test_decayed_update_sequence_by_hand():
    row = np.zeros(4)
    row = payoff.decayed_update(row, 1.0, decay=0.5)  # win
    np.testing.assert_allclose(row, [1.0, 0.0, 0.0, 1.0])
    row = payoff.decayed_update(row, 0.5, decay=0.5)  # draw: [0.5, 0, 0, 0.5] + draw
    np.testing.assert_allclose(row, [0.5, 1.0, 0.0, 1.5])
    row = payoff.decayed_update(row, 0.0, decay=0.5)  # loss: [0.25, 0.5, 0, 0.75] + loss
    np.testing.assert_allclose(row, [0.25, 0.5, 1.0, 1.75])
    # (0.25 + 0.5/2) / 1.75
    assert payoff.win_rate(row[0], row[1], row[3], min_games=1) == pytest.approx(0.5 / 1.75)
    assert payoff.win_rate(row[0], row[1], row[3], min_games=2) == 0.5  # 1.75 decayed games < 2


def test_decay_099_needs_six_results_for_five_games():
    row = np.zeros(4)
    for _ in range(5):
        row = payoff.decayed_update(row, 1.0, decay=0.99)
    assert row[payoff.GAMES] == pytest.approx(1 + 0.99 + 0.99**2 + 0.99**3 + 0.99**4)  # 4.90099
    assert payoff.win_rate(row[0], row[1], row[3], min_games=5) == 0.5
    row = payoff.decayed_update(row, 1.0, decay=0.99)
    assert payoff.win_rate(row[0], row[1], row[3], min_games=5) == pytest.approx(1.0)


def test_win_rate_is_elementwise_with_no_games_at_one_half():
    rates = payoff.win_rate(np.array([2.0, 0.0, 0.0]), np.array([1.0, 0.0, 2.0]), np.array([4.0, 0.0, 2.0]), 0)
    np.testing.assert_allclose(rates, [2.5 / 4, 0.5, 0.5])


def test_decayed_update_refuses_bad_input():
    with pytest.raises(ValueError, match="outcome must be 1"):
        payoff.decayed_update(np.zeros(4), 0.3, 0.99)
    with pytest.raises(ValueError, match="shape"):
        payoff.decayed_update(np.zeros(3), 1.0, 0.99)
    with pytest.raises(ValueError, match="decay"):
        payoff.decayed_update(np.zeros(4), 1.0, 0.0)


def test_inherit_moves_the_live_row_to_the_child_and_clears_the_live_row():
    counts = np.zeros((3, 3, 4))  # keys: 0 live "a", 1 snapshot "b:0", 2 new snapshot "a:1"
    counts[0, 1] = [3, 1, 0, 4]  # a vs b:0
    counts[1, 0] = [0, 1, 3, 4]  # b:0 vs a (mirrored)
    table = payoff.inherit(counts, parent=0, child=2)
    np.testing.assert_array_equal(table[2, 1], [3, 1, 0, 4])
    np.testing.assert_array_equal(table[1, 2], [0, 1, 3, 4])
    assert not table[0].any() and not table[:, 0].any()
    assert counts[0, 1, 0] == 3  # the input is not modified
    with pytest.raises(ValueError, match="distinct"):
        payoff.inherit(counts, 1, 1)


# --- Elo ------------------------------------------------------------------------------------------


def test_elo_by_hand():
    assert expected_score(1200, 1200) == 0.5
    e = 1 / (1 + 10 ** (-200 / 400))  # 0.7597
    assert expected_score(1400, 1200) == pytest.approx(e)
    assert expected_score(1200, 1400) == pytest.approx(1 - e)
    assert elo_update(1200, 1200, 1.0) == pytest.approx((1216.0, 1184.0))
    assert elo_update(1200, 1200, 0.5) == pytest.approx((1200.0, 1200.0))
    assert elo_update(1400, 1200, 0.0) == pytest.approx((1400 - 32 * e, 1200 + 32 * e))
    assert elo_update(1200, 1200, 1.0, k=16) == pytest.approx((1208.0, 1192.0))
    with pytest.raises(ValueError, match="score_a"):
        elo_update(1200, 1200, 2.0)
    for bad in (float("nan"), -0.1):  # plain floats (the league's path, one game at a time) and arrays alike
        with pytest.raises(ValueError, match="score_a"):
            elo_update(1200.0, 1200.0, bad)
        with pytest.raises(ValueError, match="score_a"):
            elo_update(np.array([1200.0, 1200.0]), np.array([1200.0, 1200.0]), np.array([1.0, bad]))
    one_game = elo_update(1400.0, 1200.0, 0.0)
    assert all(type(r) is float for r in one_game)
    r_a, r_b = elo_update(np.array([1400.0, 1200.0]), np.array([1200.0, 1300.0]), np.array([0.0, 0.5]))
    assert (r_a[0], r_b[0]) == pytest.approx(one_game) and r_a[1] == pytest.approx(elo_update(1200.0, 1300.0, 0.5)[0])


# --- Nash -----------------------------------------------------------------------------------------


def _check_equilibrium(a, x, y, value):
    """x guarantees at least `value` against every column, y at most `value` against every row."""
    a = np.asarray(a, float)
    assert (x @ a).min() == pytest.approx(value, abs=1e-7)
    assert (a @ y).max() == pytest.approx(value, abs=1e-7)


def test_nash_rock_paper_scissors_is_uniform_with_value_zero():
    a = np.array([[0, -1, 1], [1, 0, -1], [-1, 1, 0]])
    x, y, value = solve_zero_sum(a)
    np.testing.assert_allclose(x, [1 / 3] * 3, atol=1e-7)
    np.testing.assert_allclose(y, [1 / 3] * 3, atol=1e-7)
    assert value == pytest.approx(0.0, abs=1e-9)


def test_nash_matching_pennies():
    x, y, value = solve_zero_sum(np.array([[1, -1], [-1, 1]]))
    np.testing.assert_allclose(x, [0.5, 0.5], atol=1e-7)
    np.testing.assert_allclose(y, [0.5, 0.5], atol=1e-7)
    assert value == pytest.approx(0.0, abs=1e-9)


def test_nash_pure_saddle_point():
    # Entry (0, 1) = 2 is the minimum of its row and the maximum of its column.
    a = np.array([[4, 2, 3], [1, 0, 5], [3, 1, 2]])
    x, y, value = solve_zero_sum(a)
    np.testing.assert_allclose(x, [1, 0, 0], atol=1e-7)
    np.testing.assert_allclose(y, [0, 1, 0], atol=1e-7)
    assert value == pytest.approx(2.0)


def test_nash_non_square():
    # Row mixes (p, 1-p): columns pay 3p, 3-3p, 2; max_p min(...) is 1.5 at p = 1/2,
    # and the minimiser never uses column 3 (it always pays 2 > 1.5).
    a = np.array([[3, 0, 2], [0, 3, 2]])
    x, y, value = solve_zero_sum(a)
    np.testing.assert_allclose(x, [0.5, 0.5], atol=1e-7)
    np.testing.assert_allclose(y, [0.5, 0.5, 0.0], atol=1e-7)
    assert value == pytest.approx(1.5)
    _check_equilibrium(a, x, y, value)


def test_nash_biased_rock_paper_scissors_by_hand():
    # Rock beats scissors by 2. Column payoffs zero: xP = 2 xS, xR = xS, xP = 2 xR -> (1, 2, 1) / 4.
    a = np.array([[0, -1, 2], [1, 0, -1], [-2, 1, 0]])
    x, y, value = solve_zero_sum(a)
    np.testing.assert_allclose(x, [0.25, 0.5, 0.25], atol=1e-7)
    np.testing.assert_allclose(y, [0.25, 0.5, 0.25], atol=1e-7)
    assert value == pytest.approx(0.0, abs=1e-9)


def test_nash_refuses_bad_matrices():
    with pytest.raises(ValueError, match="matrix"):
        solve_zero_sum(np.zeros((0, 3)))
    with pytest.raises(ValueError, match="NaN"):
        solve_zero_sum(np.array([[np.nan]]))
    with pytest.raises(ValueError, match="square"):
        symmetric_nash(np.full((2, 3), 0.5))


def test_symmetric_nash_of_win_rates():
    rps = np.array([[0.5, 0.0, 1.0], [1.0, 0.5, 0.0], [0.0, 1.0, 0.5]])
    np.testing.assert_allclose(symmetric_nash(rps), [1 / 3] * 3, atol=1e-7)
    dominant = np.array([[0.5, 0.8], [0.2, 0.5]])  # policy 0 beats policy 1 80% of the time
    np.testing.assert_allclose(symmetric_nash(dominant), [1.0, 0.0], atol=1e-7)
    np.testing.assert_allclose(symmetric_nash(np.array([[0.5]])), [1.0])


# --- TrueSkill ------------------------------------------------------------------------------------


def test_trueskill_win_draw_loss_are_symmetric():
    start = (INITIAL_MU, INITIAL_SIGMA)
    (mu_a, sigma_a), (mu_b, sigma_b) = rate_1v1(start, start, 1.0)
    assert mu_a > INITIAL_MU > mu_b and mu_a - INITIAL_MU == pytest.approx(INITIAL_MU - mu_b)
    assert sigma_a == pytest.approx(sigma_b) and sigma_a < INITIAL_SIGMA
    (mu_c, _), (mu_d, _) = rate_1v1(start, start, 0.0)
    assert (mu_c, mu_d) == pytest.approx((mu_b, mu_a))
    (mu_e, sigma_e), (mu_f, _) = rate_1v1(start, start, 0.5)
    assert mu_e == pytest.approx(INITIAL_MU) and mu_f == pytest.approx(INITIAL_MU) and sigma_e < INITIAL_SIGMA
    with pytest.raises(ValueError, match="score_a"):
        rate_1v1(start, start, 0.3)


def _openskill_1v1(a, b, score_a):
    from openskill.models import ThurstoneMostellerFull

    model = ThurstoneMostellerFull(mu=INITIAL_MU, sigma=INITIAL_SIGMA)
    ranks = {1.0: [0, 1], 0.5: [0, 0], 0.0: [1, 0]}[score_a]
    (new_a,), (new_b,) = model.rate([[model.rating(mu=a[0], sigma=a[1])], [model.rating(mu=b[0], sigma=b[1])]],
                                    ranks=ranks)
    return (new_a.mu, new_a.sigma), (new_b.mu, new_b.sigma)


def test_trueskill_matches_the_openskill_reference_over_a_league_of_games():
    # The written-out update against the library's general one: random ratings, every outcome, and a long
    # chain of games. Within 4 c of each other, where openskill's 0.5 * (1 + erf(x)) keeps its digits.
    rng = np.random.default_rng(0)
    compared = 0
    while compared < 300:
        a = (float(rng.uniform(-10, 60)), float(rng.uniform(0.05, 12)))
        b = (float(rng.uniform(-10, 60)), float(rng.uniform(0.05, 12)))
        c = np.sqrt(a[1] ** 2 + b[1] ** 2 + 2 * TAU**2 + 2 * BETA**2)
        if abs(a[0] - b[0]) > 4 * c:
            continue
        compared += 1
        for score in (1.0, 0.5, 0.0):
            np.testing.assert_allclose(rate_1v1(a, b, score), _openskill_1v1(a, b, score), rtol=1e-9, atol=1e-9)
    ours = theirs = ((INITIAL_MU, INITIAL_SIGMA), (INITIAL_MU, INITIAL_SIGMA))
    for score in rng.choice([0.0, 0.5, 1.0], size=500, p=[0.3, 0.1, 0.6]):
        ours, theirs = rate_1v1(*ours, float(score)), _openskill_1v1(*theirs, float(score))
    # 500 chained updates carry each game's last-digit differences (erfc here, erf there) along
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def test_trueskill_stays_accurate_for_a_huge_upset():
    # 4 to 8 c apart, the truncated-Gaussian terms need the normal CDF's far tail: checked against scipy's
    # log_ndtr. There openskill's erf-based CDF cancels, and one upset left the favourite at the sigma floor.
    from scipy import special

    for x in np.linspace(-8.0, -4.0, 9):
        v_exact = np.exp(-0.5 * x * x - 0.5 * np.log(2 * np.pi) - special.log_ndtr(x))
        assert trueskill._v(x, 0.0) == pytest.approx(v_exact, rel=1e-9)
        assert trueskill._w(x, 0.0) == pytest.approx(v_exact * (v_exact + x), rel=1e-6)
    favourite, underdog = (53.7, 5.18), (-36.7, 7.98)
    (_, sigma_f), (_, sigma_u) = rate_1v1(favourite, underdog, 0.0)
    assert 0.5 * favourite[1] < sigma_f < favourite[1] and 0.5 * underdog[1] < sigma_u < underdog[1]


# --- config ---------------------------------------------------------------------------------------


def test_config_errors_say_what_to_change():
    LeagueConfig()  # defaults are valid
    with pytest.raises(ValueError, match=r"main_self_play \+ main_pfsp \+ main_forgotten must sum to 1"):
        LeagueConfig(main_pfsp=0.6)
    with pytest.raises(ValueError, match=r"exploiter_snapshot_win_rate is a probability.*\[0, 1\]"):
        LeagueConfig(exploiter_snapshot_win_rate=70)
    with pytest.raises(ValueError, match="snapshot_interval_steps must be > 0"):
        LeagueConfig(snapshot_interval_steps=0)
    with pytest.raises(ValueError, match="pfsp_weighting 'squared' is unknown: use one of hard"):
        LeagueConfig(pfsp_weighting="squared")
    with pytest.raises(ValueError, match="mode 'nash' is unknown"):
        LeagueConfig(mode="nash")
    with pytest.raises(ValueError, match=r"payoff_decay must be in \(0, 1\]"):
        LeagueConfig(payoff_decay=1.5)


def test_league_nash_mixes_only_snapshots_and_solves_their_meta_game():
    from seedleague.league.nash import league_nash

    keys = ["main", "main:000001", "main:000002", "other:000003"]
    # rock-paper-scissors among the three snapshots; the live player beats everything (ignored)
    p = np.array([[0.5, 1.0, 1.0, 1.0],
                  [0.0, 0.5, 1.0, 0.0],
                  [0.0, 0.0, 0.5, 1.0],
                  [0.0, 1.0, 0.0, 0.5]])
    weights = league_nash(keys, p)
    assert set(weights) == {"main:000001", "main:000002", "other:000003"}
    assert all(abs(w - 1 / 3) < 1e-6 for w in weights.values())
    assert list(league_nash(keys, p, player="other")) == ["other:000003"]
    with pytest.raises(ValueError, match="no snapshots of nobody"):
        league_nash(keys, p, player="nobody")
