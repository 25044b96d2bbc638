"""A best response's sample of the output's moves (seedleague.host.output_samples): uniform over every row it saw,
in fixed memory, written whole, refused with the path and the fix where the disk refuses it."""

import os

import numpy as np
import pytest

from seedleague.host.output_samples import OutputSamples, load, masked_probs
from seedleague.storage import StorageError


def _rows(start, count):
    """Rows numbered start.. start+count-1 (the number is the observation), 3 actions of which the last is illegal."""
    observation = np.arange(start, start + count, dtype=np.float32)[:, None]
    legal = np.tile([True, True, False], (count, 1))
    return observation, legal, np.zeros((count, 3), np.float32)


def test_masked_probs_are_the_softmax_over_the_legal_actions():
    probs = masked_probs(np.array([[0.0, np.log(3.0), 9.0]]), np.array([[True, True, False]]))
    np.testing.assert_allclose(probs, [[0.25, 0.75, 0.0]], rtol=1e-6)


def test_every_row_seen_stays_with_the_same_probability():
    # 1,000 rows in batches of 50 through a reservoir of 100, 400 times: each row should stay 1/10 of the time
    kept = np.zeros(1000)
    rng = np.random.default_rng(0)
    for _ in range(400):
        samples = OutputSamples(100, rng)
        for start in range(0, 1000, 50):
            samples.add(*_rows(start, 50))
        assert len(samples) == 100 and samples.seen == 1000
        kept[samples._columns["observation"][:, 0].astype(int)] += 1
    shares = kept.reshape(10, 100).sum(axis=1) / (400 * 100)  # each tenth of the stream's share of the sample
    np.testing.assert_allclose(shares, 0.1, atol=0.01)


def test_the_sample_is_written_whole_and_read_back_as_distillation_samples(tmp_path):
    samples = OutputSamples(8, np.random.default_rng(0))
    samples.add(*_rows(0, 5))
    path = str(tmp_path / "output_samples.npz")
    samples.save(path)
    read = load(path)
    assert len(read) == 5 and read.observation[:, 0].tolist() == [0, 1, 2, 3, 4]
    np.testing.assert_allclose(read.probs, [[0.5, 0.5, 0.0]] * 5)  # logits 0 over the two legal actions
    assert os.listdir(tmp_path) == ["output_samples.npz"]  # nothing half-written left beside it


def test_memory_is_bounded_and_a_directory_that_cannot_be_written_is_named_with_the_fix(tmp_path):
    samples = OutputSamples(8, np.random.default_rng(0))
    samples.add(*_rows(0, 5))
    with pytest.raises(StorageError, match="could not write the output's recorded play to .*missing"):
        samples.save(str(tmp_path / "missing" / "output_samples.npz"))
    # rows of 4 + 3 + 12 bytes (one float32 observation, three legal flags, three float32 probabilities): 100 bytes
    # hold 5 of them, whatever the capacity asked
    small = OutputSamples(1000, np.random.default_rng(0), max_bytes=100)
    small.add(*_rows(0, 50))
    assert small.capacity == 5 and len(small) == 5 and small.seen == 50
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        OutputSamples(0, np.random.default_rng(0))
