"""PBT's statistics by hand: the two-sample z on mean returns, group-sequential critical values from the
Lan-DeMets spending functions (first looks by hand, later looks against published tables and an independent
bivariate normal integral), when a round scores by return and when by win/loss, and a round that returns separate
where win/loss cannot. Pure maths over hand-made tallies."""

import math

import numpy as np
import pytest
from scipy import stats

from seedleague.league import pbt, sequential
from seedleague.league.config import LeagueConfig
from seedleague.league.pbt import EXPLOIT, KEPT, LOOK, RETURN, WINS, PbtSettings, RoundInput, Tally

EQUAL_FIFTHS = (0.2, 0.4, 0.6, 0.8, 1.0)


def _tally(values) -> Tally:
    """A tally of games with these returns (the outcome their sign)."""
    tally = Tally()
    for v in values:
        tally = tally.add(1.0 if v > 0 else 0.0 if v < 0 else 0.5, v)
    return tally


def test_welch_z_of_a_known_pair_of_samples():
    # a = [2, 1, -1, 2]: mean 1, variance (1 + 0 + 4 + 1) / 3 = 2; b = [-1, 1, -2, -2]: mean -1, variance 2
    # z = (1 - -1) / sqrt(2/4 + 2/4) = 2
    a, b = _tally([2, 1, -1, 2]), _tally([-1, 1, -2, -2])
    assert (a.mean_return, a.return_var, b.mean_return, b.return_var) == pytest.approx((1, 2, -1, 2))
    assert sequential.welch_z(1, 2, 4, -1, 2, 4) == 2.0
    assert pbt.pair_z(a, b, RETURN) == pytest.approx(2.0) and pbt.pair_z(b, a, RETURN) == pytest.approx(-2.0)
    # two constant samples: no spread to scale by, no evidence claimed
    assert sequential.welch_z(2, 0, 10, -2, 0, 10) == 0.0
    with pytest.raises(ValueError, match="at least one value"):
        sequential.welch_z(1, 1, 0, 0, 1, 3)


def test_two_proportion_z_by_hand():
    # Agresti-Caffo: 59 of 98 -> 60 / 100 = 0.6, 39 of 98 -> 0.4; variance 0.24 / 100 + 0.24 / 100 = 0.0048;
    # z = 0.2 / 0.0692820 = 2.886751
    assert sequential.two_proportion_z(59, 98, 39, 98) == pytest.approx(2.886751, abs=1e-6)
    assert sequential.two_proportion_z(39, 98, 59, 98) == pytest.approx(-2.886751, abs=1e-6)
    # all won against all lost stays finite: (1/1 ... ) 11/12 against 1/12, variance 2 x (11/144) / 12
    assert sequential.two_proportion_z(10, 10, 0, 10) == pytest.approx((10 / 12) / math.sqrt(2 * 11 / 144 / 12), abs=1e-9)


def test_the_normal_tail_and_its_inverse_by_table_and_far_out():
    # Tables: P(Z > 1.959964) = 0.025, P(Z > 2.326348) = 0.01; the far tail, where 1 - Phi(z) rounds to 0, by
    # scipy (an independent implementation): the critical value of the least first-crossing chance computed (1e-300).
    assert sequential.normal_isf(0.025) == pytest.approx(1.959964, abs=1e-6)
    assert sequential.normal_isf(0.01) == pytest.approx(2.326348, abs=1e-6)
    assert sequential.normal_sf(1.959964) == pytest.approx(0.025, abs=1e-7)
    assert sequential.normal_isf(0.5) == 0.0 and sequential.normal_sf(0.0) == 0.5
    for p in (0.3, 1e-3, 1e-12, 1e-100, 1e-300):
        assert sequential.normal_isf(p) == pytest.approx(stats.norm.isf(p), rel=1e-12)
        assert sequential.normal_sf(sequential.normal_isf(p)) == pytest.approx(p, rel=1e-12)
    assert sequential.normal_sf(37.0) == pytest.approx(stats.norm.sf(37.0), rel=1e-12)


def test_spending_functions_by_hand():
    # Pocock-type: 0.025 ln(1 + (e - 1) 0.2) = 0.025 x 0.295395 = 0.0073849
    assert sequential.spending("pocock", 0.025, 0.2) == pytest.approx(0.00738486, abs=1e-8)
    # O'Brien-Fleming-type: 2 (1 - Phi(2.241403 / sqrt(0.2))) = 2 (1 - Phi(5.012375)) = 5.3887e-7
    assert sequential.spending("obrien_fleming", 0.025, 0.2) == pytest.approx(5.3887e-7, rel=1e-4)
    for kind in ("pocock", "obrien_fleming"):
        assert sequential.spending(kind, 0.025, 1.0) == pytest.approx(0.025)  # everything spent at the end
    with pytest.raises(ValueError, match="unknown spending function"):
        sequential.spending("bonferroni", 0.05, 0.5)


def test_critical_values_at_equal_information_fractions():
    # first look by hand: Phi^-1(1 - spent(0.2)), then the published Lan-DeMets boundaries for one-sided 0.025 at
    # five equal looks (Jennison and Turnbull 2000; R gsDesign sfLDOF / sfLDPocock, to 4 decimals)
    obf = sequential.boundaries("obrien_fleming", 0.025, EQUAL_FIFTHS)
    assert obf[0] == pytest.approx(stats.norm.isf(5.3887e-7), abs=1e-4) == pytest.approx(4.8769, abs=1e-4)
    assert obf == pytest.approx((4.8769, 3.3569, 2.6803, 2.2898, 2.0310), abs=2e-4)
    pocock = sequential.boundaries("pocock", 0.025, EQUAL_FIFTHS)
    assert pocock[0] == pytest.approx(stats.norm.isf(0.00738486), abs=1e-5) == pytest.approx(2.4380, abs=1e-4)
    assert pocock == pytest.approx((2.4380, 2.4268, 2.4102, 2.3966, 2.3860), abs=2e-4)
    # Bonferroni: alpha / looks at every look, no use of the correlation
    assert sequential.boundaries("bonferroni", 0.05, EQUAL_FIFTHS) == pytest.approx((2.326348,) * 5, abs=1e-6)


@pytest.mark.parametrize("kind", ["pocock", "obrien_fleming"])
def test_two_looks_spend_exactly_alpha_by_an_independent_integral(kind):
    # Z_1, Z_2 at fractions 1/2 and 1 are standard normal with correlation sqrt(1/2): the chance of crossing at
    # either look, 1 - P(Z_1 <= c_1, Z_2 <= c_2), by scipy's bivariate normal, is alpha; the first look spends
    # spent(1/2) alone
    c1, c2 = sequential.boundaries(kind, 0.01, (0.5, 1.0))
    rho = math.sqrt(0.5)
    crossing = 1 - stats.multivariate_normal(mean=[0, 0], cov=[[1, rho], [rho, 1]]).cdf([c1, c2])
    assert crossing == pytest.approx(0.01, abs=1e-6)
    assert stats.norm.sf(c1) == pytest.approx(sequential.spending(kind, 0.01, 0.5), rel=1e-9)


def test_crossing_boundaries_spend_uneven_shares_by_simulation():
    # looks at 0.4, 0.6, 0.8, 1 with first-crossing chances 0.001, 0.002, 0.0005, 0.004: 400,000 Brownian paths
    fractions, shares = (0.4, 0.6, 0.8, 1.0), (0.001, 0.002, 0.0005, 0.004)
    critical = np.array(sequential.crossing_boundaries(fractions, shares))
    assert critical[0] == pytest.approx(stats.norm.isf(0.001))
    steps = np.random.default_rng(0).normal(size=(400_000, 4)) * np.sqrt(np.diff((0.0,) + fractions))
    z = steps.cumsum(axis=1) / np.sqrt(fractions)
    crossed = z > critical
    first = np.where(crossed.any(axis=1), crossed.argmax(axis=1), -1)
    assert [np.mean(first == k) for k in range(4)] == pytest.approx(shares, abs=4e-4)  # 4 standard errors


def test_each_opponent_gets_its_share_of_each_looks_spending():
    assert pbt.look_critical(0.05, 2, 3, 20, "bonferroni") == pytest.approx(pbt.critical_z(0.05, 2, 20))
    # O'Brien-Fleming spends 2 (1 - Phi(1.959964 / sqrt(1/2))) at look 1 of 2; each of 2 opponents half of it:
    # Phi^-1(1 - (1 - Phi(1.959964 sqrt(2)))) = 1.959964 sqrt(2) = 2.771808
    assert pbt.look_critical(0.05, 2, 1, 2, "obrien_fleming") == pytest.approx(1.959964 * math.sqrt(2), abs=1e-5)
    spent = sequential.increments("obrien_fleming", 0.05, 5)
    assert sum(spent) == pytest.approx(0.05) and spent[0] == pytest.approx(1.1726e-5, rel=1e-3)
    # with one opponent throughout, the published-style boundaries at 0.05; one that joined at look 5 has only
    # look 5's spending, Phi^-1(1 - 0.021570) = 2.022345; one that joined at look 2 with a second, half of look 2's
    both = pbt.critical_values(0.05, 5, "obrien_fleming", 5, {"o": 1, "late": 5}, [1] * 5)
    assert both["o"] == pytest.approx(sequential.boundaries("obrien_fleming", 0.05, EQUAL_FIFTHS)[4])
    assert both["late"] == pytest.approx(stats.norm.isf(spent[4])) == pytest.approx(2.022345, abs=1e-5)
    grown = pbt.critical_values(0.05, 5, "obrien_fleming", 2, {"o": 1, "p": 2}, [1, 2])
    assert grown["p"] == pytest.approx(stats.norm.isf(spent[1] / 2)) and grown["o"] < grown["p"]
    # entry: the unbroken run of earlier looks at which b was common; an unrecorded look (None) breaks it
    assert pbt.entries(["a", "b", "c"], [["a"], None, ["a", "b"]], 4) == {"a": 3, "b": 3, "c": 4}
    assert pbt.entries(["a", "b"], [["a"], ["a", "b"]], 3) == {"a": 1, "b": 2}
    assert pbt.look_critical(0.05, 1, 5, 5, "obrien_fleming") < pbt.critical_z(0.05, 1, 5)  # the last look gains
    with pytest.raises(ValueError, match="pbt_spending"):
        LeagueConfig(pbt_spending="holm")
    with pytest.raises(ValueError, match="pbt_looks must be at most 20 with pbt_spending pocock"):
        LeagueConfig(pbt_spending="pocock", pbt_looks=21)
    assert LeagueConfig(pbt_spending="bonferroni", pbt_looks=40).pbt_looks == 40
    # a share too small for a double (a tiny alpha over many opponents) never crosses, and the later looks still work
    tiny = sequential.crossing_boundaries((0.5, 1.0), (0.0, 0.01))
    assert tiny[0] > 30 and tiny[1] == pytest.approx(stats.norm.isf(0.01), abs=1e-3)


def test_a_round_scores_by_return_only_when_every_game_has_one_and_they_are_more_than_signs():
    signs, chips = _tally([1, -1, 1, 0]), _tally([2, -1, 1, -2])
    assert (signs.scale, signs.graded, chips.graded) == (1.0, False, True)
    assert pbt.scoring([signs]) == WINS  # +-1: only the outcome; the two-proportion test keeps its adjustment
    assert pbt.scoring([_tally([2, -2]), _tally([1])]) == RETURN  # magnitudes differ between tallies
    assert pbt.scoring([signs, chips]) == RETURN
    assert pbt.scoring([chips, chips.add(1.0)]) == WINS  # a game with no return (an older host): win/loss
    assert pbt.score(chips, RETURN) == 0.0 and pbt.score(chips, WINS) == 0.5


def _pair(look: int, valued: bool = True, common: tuple = ()) -> RoundInput:
    """x wins 1 and loses 1 chip, y wins 2 and loses 1, each half its 100 games against o: equal win scores."""
    def games(win):
        t = Tally()
        for v in [win] * 50 + [-1.0] * 50:
            t = t.add(1.0 if v > 0 else 0.0, v if valued else None)
        return t
    return RoundInput(3, ["x", "y"], {"x": {"o": games(1.0)}, "y": {"o": games(2.0)}},
                      {"x": PbtSettings(), "y": PbtSettings()}, {"x": "x:1", "y": "y:1"}, look, common)


class Coins:
    def __init__(self, *draws):
        self.draws = list(draws)

    def integers(self, n):
        return self.draws.pop(0)


def test_returns_separate_what_win_loss_cannot():
    # y: mean 0.5, variance 225/99; x: mean 0, variance 100/99: z = 0.5 / sqrt(325 / 9900) = 2.759599
    test = pbt.Test(0.05, 5, 100, "obrien_fleming")
    early = pbt.plan_round(_pair(1), test, 0.5, (0.8, 1.2), Coins(0))
    e = early[0].evidence
    assert [(r.kind, r.member, r.source) for r in early] == [(LOOK, "x", "y")] and e["scored"] == RETURN
    assert e["statistic"] == pytest.approx(2.759599, abs=1e-6)
    assert e["critical"] == pytest.approx(4.229195, abs=1e-5)  # O'Brien-Fleming spends almost nothing at look 1
    assert early[0].evidence["common"] == ["o"]  # what later looks need
    rows = pbt.plan_round(_pair(5, common=(["o"],) * 4), test, 0.5, (0.8, 1.2), Coins(0, 0, 0, 0))
    assert [(r.kind, r.member) for r in rows] == [(EXPLOIT, "x"), (KEPT, "y")]
    e = rows[0].evidence
    assert (e["score"], e["source_score"], e["spending"]) == (pytest.approx(0.0), pytest.approx(0.5), "obrien_fleming")
    assert e["critical"] == pytest.approx(1.739704, abs=1e-5) and e["mean_return"] == pytest.approx(0.0)
    # o common at look 5 only (no earlier look recorded): look 5's spending alone, Phi^-1(1 - 0.021570)
    assert pbt.plan_round(_pair(5), test, 0.5, (0.8, 1.2), Coins(0, 0, 0, 0))[0].evidence["critical"] == (
        pytest.approx(2.022345, abs=1e-5))
    assert "worst mean return 0.000 (against o) under y's 0.500" in rows[0].text()
    assert pbt.leader(_pair(5), [], 100) == ("y", "best worst case by mean return in the open round 3: 0.500 against "
                                                  "o over 1 opponents every member met 100 times")
    signs = pbt.plan_round(_pair(5, valued=False), test, 0.5, (0.8, 1.2), Coins(0))  # the outcomes alone: z 0
    assert [r.kind for r in signs] == [KEPT, KEPT] and signs[1].evidence["scored"] == WINS  # x ranks first on a tie
    assert signs[1].evidence["statistic"] == pytest.approx(0.0) and np.isfinite(signs[1].evidence["critical"])
