"""benchmarks.optimizer_dynamics: its exact self-play on Kuhn's tabular policies reaches the quantal-response
equilibrium that benchmarks.qre_floor solves independently (exploitability 0.0436 at temperature 0.2, the table in
benchmarks/README.md) when the optimiser lets it, and the paths it differentiates count each history's decisions."""

import pyspiel
import pytest

from benchmarks.optimizer_dynamics import learner_config, path_counts, play
from seedleague.eval import game_tree


@pytest.fixture(scope="module")
def kuhn():
    return game_tree.of(pyspiel.load_game("kuhn_poker"))


def test_every_history_counts_the_decisions_on_its_way(kuhn):
    counts = path_counts(kuhn)
    terminal = kuhn.player == game_tree.TERMINAL
    # Kuhn ends after pass-pass, bet-call, bet-fold (two decisions) or pass-bet-call, pass-bet-fold (three).
    assert sorted(set(counts[terminal].sum(axis=1))) == [2.0, 3.0]
    assert counts[kuhn.parent < 0].sum() == 0


def test_without_momentum_the_iterates_reach_the_temperatures_equilibrium(kuhn):
    scores = play(kuhn, learner_config("--adam-b1 0"), alpha=0.2, learning_rate=0.01, steps=4000)
    assert scores[-1] == pytest.approx(0.0436, abs=0.004)


def test_flags_are_the_learners_own():
    config = learner_config("--adam-b1 0 --optimism 1")
    assert (config.adam_b1, config.optimism) == (0.0, 1.0)
    with pytest.raises(ValueError, match="optimism must be >= 0"):
        learner_config("--optimism -1")
