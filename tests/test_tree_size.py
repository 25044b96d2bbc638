"""seedleague.eval.tree_size: counting a game's histories, Knuth's estimate of the count, and the refusal of a
game too large to measure, each on Kuhn poker by hand or on a game far beyond the cap."""

from seedleague.eval import tree_size


def test_histories_counts_every_node_of_the_tree_and_stops_at_the_cap():
    # Kuhn by hand: 1 chance node deals the first card, 3 chance nodes the second, then 6 deals, each with the
    # betting nodes "", p, b, pp, pb, bp, bb, pbp, pbb (9, the deal's own node included): 1 + 3 + 6 * 9 = 58.
    game = tree_size.game_of("openspiel:kuhn_poker")
    assert tree_size.histories(game, cap=1000) == 58
    assert tree_size.histories(game, cap=58) == 58
    assert tree_size.histories(game, cap=57) is None


def test_knuths_estimate_on_kuhn_by_hand():
    # A playout takes 3 deals, then 2, then the betting: p or b (x 2), then after p, pp or pb (x 2), and after pb,
    # pbp or pbb (x 2); after b, bp or bb ends it. So an estimate is 1 + 3 + 6 + 12 + 24 = 46, or 46 + 48 = 94 when
    # the path goes p, pb (probability 1/4): the mean 0.75 * 46 + 0.25 * 94 = 58 is the exact count above.
    game = tree_size.game_of("openspiel:kuhn_poker")
    estimates = tree_size.estimated_histories(game, probes=400, seed=3)
    assert set(estimates) == {46.0, 94.0} and estimates == sorted(estimates)
    share = estimates.count(94.0) / len(estimates)
    assert 0.15 < share < 0.35  # 1/4 in expectation (seeded, so this draw is fixed)


def test_a_game_far_beyond_the_cap_is_refused_from_its_estimate_without_counting(monkeypatch):
    """battleship at its defaults: counting its tree to the cap took 36 s before a run could start."""
    def counting(*args):
        raise AssertionError("the exact count ran")

    monkeypatch.setattr(tree_size, "histories", counting)
    tree_size.unmeasurable.cache_clear()
    try:
        reason = tree_size.unmeasurable("openspiel:battleship")
    finally:
        tree_size.unmeasurable.cache_clear()
    assert "random playouts' estimates, far more than the 2,000,000" in reason, reason


def test_a_tree_whose_estimates_overflow_floats_is_called_more_than_the_largest_float():
    tree_size.unmeasurable.cache_clear()
    try:
        reason = tree_size.unmeasurable("openspiel:kriegspiel")  # Knuth's products pass 1e308 within a playout
    finally:
        tree_size.unmeasurable.cache_clear()
    assert "its game tree has more than 1e308 histories" in reason and "inf" not in reason, reason
