"""seedleague.buckets: the padding rule every padded shape uses."""

import numpy as np

from seedleague.buckets import pad, pad_dict, power_of_two
from seedleague.host.batcher import BatcherConfig


def test_power_of_two_by_hand():
    assert [power_of_two(n) for n in (0, 1, 2, 3, 5, 8, 9, 1000)] == [1, 1, 2, 4, 8, 8, 16, 1024]


def test_the_batcher_pads_with_the_same_rule_above_its_minimum():
    config = BatcherConfig(min_bucket=8)
    assert [config.bucket(n) for n in (1, 8, 9, 100)] == [8, 8, 16, 128]


def test_padding_appends_rows_of_the_value_and_true_rows_to_masks_by_hand():
    x = np.array([[1.0, 2.0]], np.float32)
    np.testing.assert_array_equal(pad(x, 3), [[1, 2], [0, 0], [0, 0]])
    assert pad(x, 1) is x and pad(x, 3).dtype == np.float32
    padded = pad_dict({"obs": np.array([5], np.int32), "mask": np.array([[True, False]])}, 2)
    np.testing.assert_array_equal(padded["obs"], [5, 0])
    np.testing.assert_array_equal(padded["mask"], [[True, False], [True, True]])  # a padded row has a legal action
    np.testing.assert_array_equal(pad_dict({"mask": np.array([[False]])}, 2, False)["mask"], [[False], [False]])
