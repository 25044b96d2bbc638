"""The sampled meta-game (seedleague.eval.sampled_metagame): balance weights by hand, the estimate exact in
expectation on a game small enough to enumerate, its half-widths, its Nash mixture and the file it is kept in."""

import json
import math

import numpy as np
import pytest

from seedleague.eval.sampled_metagame import FILE, PopulationNash, SampledMetagame, balance_weights, read, write


def test_balance_weights_are_each_members_reach_over_the_mean_reach():
    # reaches 0.5 and 0.25: the mean 0.375, so the weights 4/3 and 2/3; a reach of 0 (log -1e9) weighs 0
    weights = balance_weights(np.log([[0.5, 0.25], [1.0, 1.0]]))
    assert weights == pytest.approx(np.array([[4 / 3, 2 / 3], [1.0, 1.0]]))
    assert balance_weights(np.array([[0.0, -1e9]])) == pytest.approx(np.array([[2.0, 0.0]]))


# A one-move game per seat: seat 0 plays a, seat 1 plays b, seat 0 gets U[a, b]. Member i of seat 0 plays a = 0
# with probability P[i], member j of seat 1 plays b = 0 with probability Q[j]; the true meta-game is
# M[i, j] = sum_ab P_i(a) Q_j(b) U[a, b].
U = np.array([[2.0, -1.0], [-1.0, 1.0]])
P = np.array([1.0, 0.25])
Q = np.array([0.75, 0.5])


def _probabilities(p):
    return np.stack([p, 1.0 - p], axis=1)  # [members, actions]


def test_every_game_counts_for_every_pair_and_the_estimate_is_exact_in_expectation():
    """Games drawn from the behaviour (each seat's member uniform) in exact proportion: the estimate equals the true
    meta-game entry for entry, though each game was played by one pair only."""
    p, q = _probabilities(P), _probabilities(Q)
    behaviour = np.outer(p.mean(0), q.mean(0))  # P(a, b) under the uniform draws: 0.625 / 0.375 each seat
    denominator = 64  # every P(a, b) is a multiple of 1/64
    counts = np.rint(behaviour * denominator).astype(int)
    assert counts.sum() == denominator and np.allclose(counts / denominator, behaviour)
    returns, reach0, reach1 = [], [], []
    for a in range(2):
        for b in range(2):
            returns += [U[a, b]] * counts[a, b]
            reach0 += [np.log(np.maximum(p[:, a], 1e-300))] * counts[a, b]  # member 0 never plays a = 1
            reach1 += [np.log(q[:, b])] * counts[a, b]
    table = SampledMetagame(2)
    table.add(np.array(returns), np.array(reach0), np.array(reach1))
    assert table.games == denominator
    assert table.matrix() == pytest.approx(p @ U @ q.T)  # by hand: member 1 against member 0, .25*.75*2 - .25*.25 - .75*.75 + .75*.25 = -0.0625
    assert table.matrix() == pytest.approx(np.array([[1.25, 0.5], [-0.0625, 0.125]]))


def test_half_widths_follow_the_products_sample_variance():
    table = SampledMetagame(1)
    assert np.isinf(table.half_widths()).all()
    table.add(np.array([1.0, -1.0, 1.0, -1.0]), np.zeros((4, 1)), np.zeros((4, 1)))
    # one member: every weight 1, the products the returns; mean 0, sample variance 4/3, n 4
    assert table.matrix()[0, 0] == pytest.approx(0.0)
    assert table.half_widths()[0, 0] == pytest.approx(1.959963984540054 * math.sqrt((4 / 3) / 4))


def test_shapes_are_checked_and_a_table_without_games_has_no_matrix():
    table = SampledMetagame(2)
    with pytest.raises(ValueError, match="no games yet"):
        table.matrix()
    with pytest.raises(ValueError, match=r"log reaches \[G, 2\]"):
        table.add(np.zeros(3), np.zeros((3, 2)), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="at least one member"):
        SampledMetagame(0)


def test_the_nash_of_matching_pennies_members_mixes_them_evenly():
    # member 0 always plays heads, member 1 always tails, in both seats; seat 0 wins a match, loses a mismatch
    table = SampledMetagame(2)
    heads, tails = np.log([1.0, 1e-300]), np.log([1e-300, 1.0])
    games = [(1.0, heads, heads), (-1.0, heads, tails), (-1.0, tails, heads), (1.0, tails, tails)]
    table.add(np.array([g[0] for g in games]), np.array([g[1] for g in games]), np.array([g[2] for g in games]))
    assert table.matrix() == pytest.approx(np.array([[1.0, -1.0], [-1.0, 1.0]]))
    nash = table.nash(["main:000001", "main:000002"])
    assert nash.seat_weights[0] == pytest.approx((0.5, 0.5)) and nash.seat_weights[1] == pytest.approx((0.5, 0.5))
    assert nash.value == pytest.approx(0.0, abs=1e-9) and nash.games == 4
    with pytest.raises(ValueError, match="one key per member"):
        table.nash(["main:000001"])


def test_one_psro_step_mixes_the_members_against_the_responses_too():
    # pure rock and paper are the members, pure scissors a learned response: among the members paper dominates, but
    # against every network each seat's best mix of the members is rock 1/3, paper 2/3 (hand-solved: seat 0's worst
    # payoffs are 1-a, -a and 2a-1 with a on rock, equal at a = 1/3, its value -1/3; seat 1's mirror image, +1/3)
    table = SampledMetagame(3)
    pure = [np.log(np.where(np.arange(3) == k, 1.0, 1e-300)) for k in range(3)]
    rps = np.array([[0.0, -1.0, 1.0], [1.0, 0.0, -1.0], [-1.0, 1.0, 0.0]])
    pairs = [(i, j) for i in range(3) for j in range(3)]
    table.add(np.array([rps[i, j] for i, j in pairs]), np.array([pure[i] for i, _ in pairs]),
              np.array([pure[j] for _, j in pairs]))
    assert table.matrix() == pytest.approx(rps)
    keys = ["main:000001", "main:000002", "response:population_nash"]
    step = table.nash(keys, mixed=2)
    assert step.seat_weights[0] == pytest.approx((1 / 3, 2 / 3, 0.0), abs=1e-6)
    assert step.seat_weights[1] == pytest.approx((1 / 3, 2 / 3, 0.0), abs=1e-6)
    assert step.value == pytest.approx(0.0, abs=1e-6)  # the mean of seat 0's -1/3 and seat 1's +1/3 (seat 0's side)
    members_only = SampledMetagame(2)
    members_only.add(np.array([rps[i, j] for i, j in pairs if max(i, j) < 2]),
                     np.array([pure[i][:2] for i, j in pairs if max(i, j) < 2]),
                     np.array([pure[j][:2] for i, j in pairs if max(i, j) < 2]))
    assert members_only.nash(keys[:2]).seat_weights == ((0.0, 1.0), (0.0, 1.0))  # paper alone, without the response
    with pytest.raises(ValueError, match=r"mixed must be in \[1, 3\]"):
        table.nash(keys, mixed=0)


def test_the_nash_is_written_and_read_back_and_a_missing_file_says_how_to_make_one(tmp_path):
    nash = PopulationNash(("main:000001", "param_average:000009"), ((1.0, 0.0), (0.25, 0.75)), -0.05, 1000, 0.01)
    path = write(str(tmp_path), nash, dict(evaluation_run="/runs/x"))
    assert path == str(tmp_path / FILE) and json.load(open(path))["evaluation_run"] == "/runs/x"
    assert read(str(tmp_path)) == nash
    with pytest.raises(FileNotFoundError, match="--choose population_nash"):
        read(str(tmp_path / "elsewhere"))
    write(str(tmp_path), nash, source="population_psro")
    assert read(str(tmp_path), "population_psro") == nash and (tmp_path / "population_psro.json").exists()
    with pytest.raises(FileNotFoundError, match="--choose population_nash param_average population_psro"):
        read(str(tmp_path / "elsewhere"), "population_psro")


def test_the_noise_benchmark_draws_tables_whose_mean_is_the_exact_table():
    from benchmarks.sampled_metagame_noise import sampled_table

    # a deal c (1/2 each), then seat 0 plays a seeing c, seat 1 plays b not seeing it; seat 0 gets u[c, a, b].
    # Member i of seat 0 plays a = 0 with probability p0[i, c], member j of seat 1 plays b = 0 with q0[j]
    u = np.array([[[2.0, -1.0], [0.0, 1.0]], [[-3.0, 1.0], [1.0, 2.0]]])
    p0, q0 = np.array([[0.9, 0.2], [0.4, 0.5]]), np.array([0.7, 0.1])
    histories = [(c, a, b) for c in (0, 1) for a in (0, 1) for b in (0, 1)]
    chance = np.full(8, 0.5)
    utility = np.array([u[h] for h in histories])
    reach0 = np.array([[p0[i, c] if a == 0 else 1 - p0[i, c] for i in (0, 1)] for c, a, _ in histories])
    reach1 = np.array([[q0[j] if b == 0 else 1 - q0[j] for j in (0, 1)] for _, _, b in histories])
    exact = reach0.T @ ((chance * utility)[:, None] * reach1)  # M[i, j] = sum_h c u reach0[h, i] reach1[h, j]
    rng = np.random.default_rng(0)
    mean = np.mean([sampled_table(chance, utility, reach0, reach1, 2000, rng) for _ in range(400)], axis=0)
    assert mean == pytest.approx(exact, abs=0.02)  # 800K games in all; the entries' standard errors are < 0.005
