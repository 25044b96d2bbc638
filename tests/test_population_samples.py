"""The evaluation games' sample of moves (seedleague.host.population_samples): uniform over every row it saw, in
fixed memory, written whole, and read back as the policy of any mixture of the members, worked out by hand."""

import os

import numpy as np
import pytest

from seedleague.host.population_samples import MoveSamples, load
from seedleague.storage import StorageError

LOG_HALF = np.log(0.5)


def _rows(start, count, members=2):
    """Rows numbered start..start+count-1 (the number is the observation), 3 actions of which the last is illegal,
    every member playing the two legal ones evenly from a reach of 1, all in seat 0."""
    observation = np.arange(start, start + count, dtype=np.float32)[:, None]
    legal = np.tile([True, True, False], (count, 1))
    log_pi = np.broadcast_to(np.array([LOG_HALF, LOG_HALF, -np.inf]), (members, count, 3))
    return observation, legal, log_pi, np.zeros((count, members)), np.zeros(count, int)


def test_every_row_seen_stays_with_the_same_probability():
    # 1,000 rows in batches of 50 through a reservoir of 100, 400 times: each row should stay 1/10 of the time
    kept = np.zeros(1000)
    rng = np.random.default_rng(0)
    for _ in range(400):
        samples = MoveSamples(100, rng)
        for start in range(0, 1000, 50):
            samples.add(*_rows(start, 50))
        assert len(samples) == 100 and samples.seen == 1000
        kept[samples._columns["observation"][:, 0].astype(int)] += 1
    shares = kept.reshape(10, 100).sum(axis=1) / (400 * 100)  # each tenth of the stream's share of the sample
    np.testing.assert_allclose(shares, 0.1, atol=0.01)


def test_the_behaviour_of_a_mixture_is_its_members_policies_weighted_by_weight_and_own_reach(tmp_path):
    # Two members at two rows. Row 0, seat 0: member A plays (0.9, 0.1) from reach 1, member B (0.1, 0.9) from reach
    # 1; with weights (0.5, 0.5): (0.5, 0.5). Row 1, seat 0: A plays (0.2, 0.8) from reach 0.9, B (0.6, 0.4) from
    # 0.1: (0.5 * 0.9 * (0.2, 0.8) + 0.5 * 0.1 * (0.6, 0.4)) / 0.5 = (0.24, 0.76). Row 2, seat 1, where seat 1's
    # weights are (0, 1): B's own policy (0.3, 0.7), whatever A plays or reaches.
    log_pi = np.log(np.array([[[0.9, 0.1], [0.2, 0.8], [0.5, 0.5]],
                              [[0.1, 0.9], [0.6, 0.4], [0.3, 0.7]]]))
    log_reach = np.log(np.array([[1.0, 1.0], [0.9, 0.1], [1.0, 0.2]]))
    samples = MoveSamples(10, np.random.default_rng(0))
    samples.add(np.eye(3, dtype=np.float32), np.ones((3, 2), bool), log_pi, log_reach, np.array([0, 0, 1]))
    path = str(tmp_path / "population_samples.npz")
    samples.save(path)
    assert os.listdir(tmp_path) == ["population_samples.npz"]  # nothing half-written left beside it
    behaviour = load(path).behaviour([[0.5, 0.5], [0.0, 1.0]])
    np.testing.assert_allclose(behaviour.probs, [[0.5, 0.5], [0.24, 0.76], [0.3, 0.7]], rtol=1e-5)
    np.testing.assert_array_equal(behaviour.observation, np.eye(3))
    with pytest.raises(ValueError, match="score 2 members in seats .0, 1.*give one row of 2 per seat"):
        load(path).behaviour([[1.0, 0.0, 0.0]] * 2)


def test_a_named_networks_heads_are_each_mixed_by_the_same_weights_and_reaches(tmp_path):
    # the rows of the test above with two tensors in and two heads out: head "move" is the policy above, head "say"
    # (3 actions, the last illegal) has A play (0.5, 0.5, 0) and B (0.0, 1.0, 0) everywhere. Row 1: the same weights
    # 0.9 / 0.1 as above give "say" 0.9 * (0.5, 0.5) + 0.1 * (0, 1) = (0.45, 0.55, 0); row 2 (seat 1, B alone): B's.
    move = np.log(np.array([[[0.9, 0.1], [0.2, 0.8], [0.5, 0.5]],
                            [[0.1, 0.9], [0.6, 0.4], [0.3, 0.7]]]))
    say = np.broadcast_to(np.log(np.array([[[0.5, 0.5, 1e-300]], [[1e-300, 1.0, 1e-300]]])), (2, 3, 3)).copy()
    say[..., 2] = -np.inf  # off the legal actions, as the population's masked softmax gives
    log_reach = np.log(np.array([[1.0, 1.0], [0.9, 0.1], [1.0, 0.2]]))
    observation = {"board": np.eye(3, dtype=np.float32), "turn": np.arange(3, dtype=np.int32)[:, None]}
    legal = {"move": np.ones((3, 2), bool), "say": np.tile([True, True, False], (3, 1))}
    samples = MoveSamples(10, np.random.default_rng(0))
    samples.add(observation, legal, {"move": move, "say": say}, log_reach, np.array([0, 0, 1]))
    path = str(tmp_path / "population_samples.npz")
    samples.save(path)
    behaviour = load(path).behaviour([[0.5, 0.5], [0.0, 1.0]])
    np.testing.assert_allclose(behaviour.probs["move"], [[0.5, 0.5], [0.24, 0.76], [0.3, 0.7]], rtol=1e-5)
    np.testing.assert_allclose(behaviour.probs["say"], [[0.25, 0.75, 0], [0.45, 0.55, 0], [0, 1, 0]], atol=1e-6)
    assert behaviour.observation["turn"].dtype == np.int32 and behaviour.observation["turn"][:, 0].tolist() == [0, 1, 2]
    np.testing.assert_array_equal(behaviour.legal["say"], legal["say"])


def test_illegal_actions_get_no_probability_and_a_reach_of_zero_no_weight(tmp_path):
    # member A reached the row with probability 0 (the population's floor, log -1e9): the row is B's alone
    observation, legal, log_pi, log_reach, seat = _rows(0, 1)
    log_pi = np.log(np.array([[[0.9, 0.1, 1e-30]], [[0.2, 0.8, 1e-30]]]))
    samples = MoveSamples(4, np.random.default_rng(0))
    samples.add(observation, legal, log_pi, np.array([[-1e9, 0.0]]), seat)
    samples.save(str(tmp_path / "s.npz"))
    np.testing.assert_allclose(load(str(tmp_path / "s.npz")).behaviour([[0.5, 0.5]]).probs, [[0.2, 0.8, 0.0]],
                               rtol=1e-5)


def test_memory_is_bounded_and_a_directory_that_cannot_be_written_is_named_with_the_fix(tmp_path):
    # a row: a float32 observation (4 bytes), three legal flags (3), two members' three log-probabilities (24), two
    # log reaches (8) and a seat (1): 40 bytes, so 200 bytes hold 5 rows whatever the capacity asked
    small = MoveSamples(1000, np.random.default_rng(0), max_bytes=200)
    small.add(*_rows(0, 50))
    assert small.capacity == 5 and len(small) == 5 and small.seen == 50
    with pytest.raises(StorageError, match="could not write the evaluation games' recorded moves to .*missing"):
        small.save(str(tmp_path / "missing" / "population_samples.npz"))
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        MoveSamples(0, np.random.default_rng(0))
