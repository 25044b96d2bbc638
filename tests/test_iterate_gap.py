"""benchmarks.iterate_gap: self-play visits, the split by visits, and action values under an opponent share."""

import numpy as np
import pyspiel
from open_spiel.python import policy as openspiel_policy
from open_spiel.python.algorithms import action_value
from open_spiel.python.algorithms import expected_game_score
from open_spiel.python.algorithms import exploitability as openspiel_exploitability

from benchmarks import iterate_gap

KUHN = pyspiel.load_game("kuhn_poker")


def _uniform():
    tabular = openspiel_policy.TabularPolicy(KUHN)
    return tabular, tabular.action_probability_array.copy()


def test_uniform_self_play_visits_kuhns_states_as_the_deal_and_each_coin_flip_say():
    tabular, uniform = _uniform()
    visits = iterate_gap.self_play_visits(KUHN, tabular, uniform)
    # the first player's 3 cards (1/3 each); the second's after a pass or a bet (1/3 x 1/2 each, 6 states);
    # the first player's after pass-bet (1/3 x 1/2 x 1/2 each)
    np.testing.assert_allclose(np.sort(visits), sorted([1 / 3] * 3 + [1 / 6] * 6 + [1 / 12] * 3))


def test_the_split_swaps_exactly_the_rarest_states():
    tabular, uniform = _uniform()
    visits = iterate_gap.self_play_visits(KUHN, tabular, uniform)
    rarest = np.argsort(visits, kind="stable")[:3]  # the three pass-bet states: a quarter of the 12
    probs = uniform.copy()
    probs[rarest] = [0.0, 1.0]  # always call there
    score = lambda p: float(openspiel_exploitability.exploitability(KUHN, _with(p)))  # noqa: E731
    rows = iterate_gap.split_by_visits(KUHN, tabular, probs, uniform, fractions=(0.25,))
    assert np.isclose(rows[0]["visit_share"], (3 / 12) / (1 + 1 + 3 / 12))  # of all visits, 2.25 states a game
    assert np.isclose(rows[0]["rare_to_qre"], score(uniform))  # the rarest quarter set back: uniform again
    assert np.isclose(rows[0]["rest_to_qre"], score(probs))  # only the rarest quarter kept: the policy itself
    same = iterate_gap.split_by_visits(KUHN, tabular, uniform, uniform, fractions=(0.5, 0.9))
    assert all(np.isclose(row[key], score(uniform)) for row in same for key in ("rare_to_qre", "rest_to_qre"))


def test_the_distance_to_the_qre_weighs_each_state_by_its_visits():
    visits = np.array([3.0, 1.0])
    qre = np.array([[0.5, 0.5], [0.5, 0.5]])
    probs = np.array([[1.0, 0.0], [0.5, 0.5]])  # off by 0.5 (TV) at the state with 3 of the 4 visits
    assert np.isclose(iterate_gap.visit_weighted_distance(visits, probs, qre), 0.5 * 3 / 4)


def _with(probs):
    tabular = openspiel_policy.TabularPolicy(KUHN)
    tabular.action_probability_array = probs
    return tabular


def test_an_opponent_share_weighs_each_opponents_values_by_how_often_it_lets_the_state_be_reached():
    pi, uniform = _uniform()
    seats = np.array([state.current_player() for state in pi.states])
    after_pass = np.array([state.history_str().endswith("0") and len(state.history()) == 3 for state in pi.states])
    after_bet = np.array([state.history_str().endswith("1") and len(state.history()) == 3 for state in pi.states])
    assert after_pass.sum() == after_bet.sum() == 3 and (seats[after_pass | after_bet] == 1).all()
    sigma = _with(np.tile([0.0, 1.0], (len(uniform), 1)))  # always bets: as the first seat it never passes
    calculator = action_value.TreeWalkCalculator(KUHN)
    own = np.asarray(calculator(policies=[pi, pi], tabular_policy=pi).action_values)
    against = np.asarray(calculator(policies=[sigma, pi], tabular_policy=pi).action_values)
    none = iterate_gap.mixed_action_values(calculator, pi, sigma, seats, share=0.0)
    np.testing.assert_allclose(none, own)
    every = iterate_gap.mixed_action_values(calculator, pi, sigma, seats, share=1.0)
    np.testing.assert_allclose(every[after_bet], against[after_bet])  # sigma is the only opponent there
    np.testing.assert_allclose(every[after_pass], own[after_pass])  # sigma never lets these be reached
    # half the episodes each: after a bet, sigma (always) reaches twice as often as the uniform first seat (1/2)
    half = iterate_gap.mixed_action_values(calculator, pi, sigma, seats, share=0.5)
    np.testing.assert_allclose(half[after_bet], (own[after_bet] * 0.5 + against[after_bet] * 1.0) / 1.5)
    np.testing.assert_allclose(half[after_pass], own[after_pass])


def test_snapshot_moves_measure_each_snapshot_against_the_qre_and_the_one_before():
    tabular, uniform = _uniform()
    first_states = np.flatnonzero([len(state.history()) == 2 for state in tabular.states])  # the opening player's 3
    always_bet = uniform.copy()
    always_bet[first_states] = [0.0, 1.0]
    rows = iterate_gap.snapshot_moves(KUHN, tabular, [uniform, always_bet, always_bet], uniform)
    assert rows[0]["moved"] is None and rows[0]["to_qre"] == 0.0
    # the opener never passes now: its 3 states (1/3 of the deal each) are 0.5 (TV) off, the 3 states after
    # a pass are never reached, the 3 after a bet are reached with 1/3 each and unchanged
    assert np.isclose(rows[1]["to_qre"], 0.5 * 1.0 / 2.0)
    assert np.isclose(rows[1]["moved"], rows[1]["to_qre"])  # the one before was the QRE itself
    assert rows[2]["moved"] == 0.0 and np.isclose(rows[2]["to_qre"], rows[1]["to_qre"])
    expected = [float(openspiel_exploitability.exploitability(KUHN, _with(p))) for p in (uniform, always_bet)]
    assert np.allclose([row["exploitability"] for row in rows], expected + expected[1:])


def test_the_snapshots_mixture_weighs_each_snapshot_by_its_own_reach():
    tabular, uniform = _uniform()
    opener = np.array([len(state.history()) == 2 for state in tabular.states])
    pass_bet = np.array([state.history()[2:] == [0, 1] for state in tabular.states])
    assert opener.sum() == pass_bet.sum() == 3
    always_bet, always_pass = uniform.copy(), uniform.copy()
    always_bet[opener], always_pass[opener] = [0.0, 1.0], [1.0, 0.0]
    always_bet[pass_bet], always_pass[pass_bet] = [1.0, 0.0], [0.0, 1.0]  # fold / call after pass-bet
    reach = iterate_gap.own_reach(KUHN, tabular, always_bet)
    assert (reach[opener] == 1.0).all() and (reach[pass_bet] == 0.0).all()  # it never passes, so never gets there
    mixture = iterate_gap.snapshot_mixture(KUHN, tabular, [always_bet, always_pass])
    np.testing.assert_allclose(mixture[opener], 0.5)  # both reach the opening: the plain mean
    np.testing.assert_allclose(mixture[pass_bet], np.tile([0.0, 1.0], (3, 1)))  # only always_pass gets there
    np.testing.assert_allclose(mixture[~(opener | pass_bet)], uniform[~(opener | pass_bet)])  # the second player's
    # Kuhn's theorem: the mixture's behaviour policy plays like the 50/50 mixture of the two, here as the opener
    # against a second player who always bets after a pass (so the pass-bet states matter) and calls half the time
    second = uniform.copy()
    second[[i for i, state in enumerate(tabular.states) if state.history()[2:] == [0]]] = [0.0, 1.0]
    def value(probs):
        return expected_game_score.policy_value(KUHN.new_initial_state(), [_with(probs), _with(second)])[0]

    assert not np.isclose(value(always_bet), value(always_pass))
    assert np.isclose(value(mixture), 0.5 * (value(always_bet) + value(always_pass)))
