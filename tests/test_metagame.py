"""The exact meta-game of a population: payoffs equal OpenSpiel's expected values, and the Nash mixture
is a Nash equilibrium of the symmetric meta-game."""

import numpy as np
import pytest
from open_spiel.python.algorithms import expected_game_score

from seedleague.games.openspiel import load_game
from seedleague.eval import game_tree, metagame, openspiel_eval
from test_eval import PurePolicy

KUHN = load_game("kuhn_poker")


class UniformKuhn(PurePolicy):
    def action_probabilities(self, observation, legal_mask=None):
        return np.full((len(observation), 2), 0.5, np.float32)


POPULATION = [PurePolicy(first=0, then=1), PurePolicy(first=1, then=0), PurePolicy(first=1, then=1), UniformKuhn(0, 0)]


def test_payoffs_equal_openspiel_expected_values():
    tables = [openspiel_eval.tabular_policy(KUHN, p) for p in POPULATION]
    probs = [game_tree.of(KUHN).probabilities(p) for p in POPULATION]
    matrix = metagame.payoff_matrix(KUHN, probs, metagame.terminal_table(KUHN))
    for i in range(len(POPULATION)):
        for j in range(len(POPULATION)):
            expected = expected_game_score.policy_value(KUHN.new_initial_state(), [tables[i], tables[j]])[0]
            assert matrix[i, j] == pytest.approx(expected, abs=1e-9)


def test_nash_mixture_is_an_equilibrium_of_the_symmetric_meta_game():
    value, weights = metagame.nash_mixture_exploitability(KUHN, POPULATION)
    assert weights.sum() == pytest.approx(1.0) and (weights >= -1e-12).all()
    probs = [game_tree.of(KUHN).probabilities(p) for p in POPULATION]
    m = metagame.payoff_matrix(KUHN, probs, metagame.terminal_table(KUHN))
    symmetric = (m - m.T) / 2
    assert (weights @ symmetric >= -1e-7).all()  # no member of the population beats the mixture
    assert value == pytest.approx(openspiel_eval.mixture_exploitability(KUHN, POPULATION, weights))


def test_each_window_of_the_newest_policies_gets_its_own_nash_mixture():
    # Oldest first: the uniform policy is the oldest, so only the window of all four can mix it in.
    population = [UniformKuhn(0, 0), PurePolicy(first=0, then=1), PurePolicy(first=1, then=0), PurePolicy(first=1, then=1)]
    windows = metagame.newest_nash_mixtures(KUHN, population, [2, 4])
    for size, (value, weights) in zip([2, 4], windows):
        alone_value, alone_weights = metagame.nash_mixture_exploitability(KUHN, population[-size:])
        assert len(weights) == size and value == pytest.approx(alone_value)
        np.testing.assert_allclose(weights, alone_weights, atol=1e-9)
        assert value == pytest.approx(openspiel_eval.mixture_exploitability(KUHN, population[-size:], weights))
