"""The flat game tree: its walk, own reach, terminal table and exploitability against OpenSpiel's own
Python algorithms and hand-computed Kuhn values."""

import numpy as np
import pytest
from open_spiel.python import policy as openspiel_policy
from open_spiel.python.algorithms import expected_game_score
from open_spiel.python.algorithms import exploitability as openspiel_exploitability

from seedleague.games.openspiel import load_game
from seedleague.eval import game_tree, metagame

KUHN = load_game("kuhn_poker")
GOOFSPIEL = load_game("turn_based_simultaneous_game(game=goofspiel(num_cards=3,imp_info=True,points_order=descending))")


def random_table(tree: game_tree.GameTree, seed: int) -> np.ndarray:
    probs = np.random.default_rng(seed).random(tree.masks.shape) * tree.masks
    return probs / probs.sum(axis=-1, keepdims=True)


def as_openspiel(game, tree: game_tree.GameTree, probs: np.ndarray) -> openspiel_policy.TabularPolicy:
    tabular = openspiel_policy.TabularPolicy(game)
    for row, key in enumerate(tree.keys):
        tabular.action_probability_array[tabular.state_lookup[key]] = probs[row]
    return tabular


def test_kuhn_walk_counts_and_orders_every_history():
    tree = game_tree.walk(KUHN)
    # 1 deal root + 3 first cards + 6 deals, then 6 x (2 + 2 + 2) decisions: 58 histories, 30 terminal.
    assert len(tree.parent) == 58 and len(tree.terminals) == 30 and len(tree.keys) == 12
    assert (tree.parent[1:] < np.arange(1, 58)).all() and tree.parent[0] == -1  # parents come first
    depth = np.repeat(np.arange(len(tree.depth_starts) - 1), np.diff(tree.depth_starts))
    assert (depth[1:] == depth[tree.parent[1:]] + 1).all()
    assert tree.chance[tree.terminals].sum() == pytest.approx(5.0)  # each of the 6 deals (1/6) has 5 endings
    assert sorted(len(key) for key in tree.keys) == [1] * 3 + [2] * 6 + [3] * 3  # "0", "0p", "0b", "0pb", ...
    np.testing.assert_array_equal(tree.masks.sum(axis=1), 2)


def test_own_reach_by_hand_in_kuhn():
    """Player 0 bets (action 1) with probability b at its first move and calls with c after pass-bet;
    player 1 bets with q after a pass. Player 0 reaches "Xpb" with its own pass: 1 - b; player 1 reaches
    "Xp" and "Xb" with probability 1 (no own move before)."""
    tree = game_tree.walk(KUHN)
    b, c, q = 0.3, 0.6, 0.8
    probs = np.zeros((len(tree.keys), 2))
    for row, key in enumerate(tree.keys):
        bet = {1: b, 3: c}.get(len(key), q) if tree.seat[row] == 0 else q
        probs[row] = [1 - bet, bet]
    reach = tree.own_reach(np.stack([probs, probs[:, ::-1]]))
    for row, key in enumerate(tree.keys):
        expected = {1: 1.0, 3: 1 - b}[len(key)] if tree.seat[row] == 0 else 1.0
        assert reach[0, row] == pytest.approx(expected), key
        assert reach[1, row] == pytest.approx({1: 1.0, 3: b}[len(key)] if tree.seat[row] == 0 else 1.0), key


@pytest.mark.parametrize("game", [KUHN, load_game("leduc_poker"), GOOFSPIEL], ids=["kuhn", "leduc", "goofspiel"])
def test_exploitability_equals_openspiels_python_and_cpp_best_responses(game):
    tree = game_tree.walk(game)
    for seed in (0, 1):
        probs = random_table(tree, seed)
        expected = openspiel_exploitability.exploitability(game, as_openspiel(game, tree, probs))
        assert tree.exploitability(probs) == pytest.approx(expected, abs=1e-9)
        assert tree.openspiel_exploitability(probs) == pytest.approx(expected, abs=1e-9)
    # a pure strategy: every best-response tie and zero reach handled
    pure = np.eye(tree.num_actions)[np.argmax(tree.masks, axis=1)]
    assert tree.exploitability(pure) == pytest.approx(
        openspiel_exploitability.exploitability(game, as_openspiel(game, tree, pure)), abs=1e-9)


@pytest.mark.parametrize("game", [KUHN, GOOFSPIEL], ids=["kuhn", "goofspiel"])
def test_terminal_table_payoffs_equal_openspiel_expected_values(game):
    tree = game_tree.walk(game)
    tables = [random_table(tree, seed) for seed in (2, 3)]
    payoff = metagame.payoff_matrix(game, tables, tree.terminal_table())
    policies = [as_openspiel(game, tree, t) for t in tables]
    for i in range(2):
        for j in range(2):
            expected = expected_game_score.policy_value(game.new_initial_state(), [policies[i], policies[j]])[0]
            assert payoff[i, j] == pytest.approx(expected, abs=1e-9)


def test_the_sequence_form_of_kuhn():
    """Each seat's sequences are its (information state, action) pairs, and an information state hangs off
    the seat's own last decision: player 0's second move ("Xpb") comes after its own pass on "X"."""
    tree = game_tree.walk(KUHN)
    table = tree.terminal_table()
    assert [len(c) for c in table.columns] == [12, 12]
    rows = {key: row for row, key in enumerate(tree.keys)}
    for card in "012":
        assert table.parent[rows[card]] == (0, -1)
        assert table.parent[rows[card + "pb"]] == (0, rows[card] * 2 + 0)
        assert table.parent[rows[card + "p"]] == (1, -1)
    # every terminal history of Kuhn follows at least one decision of each seat
    assert (table.last[0] >= 0).all() and (table.last[1] >= 0).all()


def test_of_caches_one_game():
    first = game_tree.of(KUHN)
    assert game_tree.of(load_game("kuhn_poker")) is first
    game_tree.of(GOOFSPIEL)
    assert game_tree.of(KUHN) is not first  # only the most recent game's tree is kept


def test_best_response_by_hand_in_kuhn():
    """Uniform Kuhn is exploitable by 11/24 (OpenSpiel's anchor 0.458). Against a player 1 that always bets
    and always calls, player 0's best response per card (opponent's card equally likely among the other
    two): Jack: pass, then fold: -1. Queen: betting wins 2 against the Jack and loses 2 against the King,
    as does pass-call; pass-fold loses 1: best 0. King: bet, +2. Mean over the cards: (-1 + 0 + 2) / 3."""
    tree = game_tree.walk(KUHN)
    uniform = tree.masks / tree.masks.sum(axis=1, keepdims=True)
    assert tree.exploitability(uniform) == pytest.approx(11 / 24, abs=1e-12)
    assert tree.openspiel_exploitability(uniform) == pytest.approx(11 / 24, abs=1e-12)
    always = np.tile([0.0, 1.0], (len(tree.keys), 1))
    assert tree.best_response_value(always, 0) == pytest.approx(1 / 3, abs=1e-12)


@pytest.mark.parametrize("game", [KUHN, load_game("leduc_poker"), GOOFSPIEL], ids=["kuhn", "leduc", "goofspiel"])
def test_one_pass_best_response_equals_the_level_by_level_one(game):
    """Where every information state lies at one depth, the best response takes one bottom-up pass; the
    general pass per level of the responder's decisions must choose the same and value it the same."""
    tree = game_tree.walk(game)
    assert all(by_depth is not None for by_depth in tree._deciders_by_depth)
    for seed in (4, 5):
        weight = np.random.default_rng(seed).random(len(tree.terminals))
        for responder in (0, 1):
            leaf = np.zeros(len(tree.parent))
            leaf[tree.terminals] = (1.0 if responder == 0 else -1.0) * tree.utility[tree.terminals] * weight
            value, choice = tree.best_response(weight, responder)
            by_level = tree._best_response_by_level(leaf, responder)
            assert value == pytest.approx(by_level[0], abs=1e-12)
            np.testing.assert_array_equal(choice, by_level[1])


def test_best_response_decides_an_information_state_whose_histories_lie_at_two_depths():
    """A hand-made tree: chance deals a or b (1/2 each); after a, seat 0 decides at I (action 0 wins 1,
    action 1 wins 0); after b, a second chance node (one outcome) comes first, then seat 0 decides at the
    same I (action 0 loses 3, action 1 wins 1). Action 0 earns (1 - 3) / 2 = -1, action 1 earns 1/2: the
    best response plays action 1 in both histories and is worth 1/2, which no choice made depth by depth
    (action 0 at the shallow history) would find."""
    T, C = game_tree.TERMINAL, game_tree.CHANCE
    tree = game_tree.GameTree(
        game=None, keys=("I",), seat=np.array([0], np.int8), observations=np.zeros((1, 1), np.float32),
        masks=np.ones((1, 2), bool),
        parent=np.array([-1, 0, 0, 1, 1, 2, 5, 5]),
        player=np.array([C, 0, C, T, T, 0, T, T], np.int8),
        row=np.array([-1, 0, -1, -1, -1, 0, -1, -1]),
        action=np.array([-1, 0, 1, 0, 1, 0, 0, 1]),
        chance=np.array([1, .5, .5, .5, .5, .5, .5, .5]),
        utility=np.array([0, 0, 0, 1, 0, 0, -3, 1], np.float64),
        depth_starts=np.array([0, 1, 3, 6, 8]))
    assert tree._deciders_by_depth[0] is None  # so the level-by-level pass is the one taken
    value, choice = tree.best_response(tree.chance[tree.terminals], 0)
    assert value == pytest.approx(0.5) and choice.tolist() == [1]
    plays_1 = tree.chance[tree.terminals] * (tree.action[tree.terminals] == 1)  # seat 0 always plays action 1
    assert tree.best_response(plays_1, 1)[0] == pytest.approx(-0.5)  # seat 1 has no choice: -(0 + 1) / 2
