"""seedleague.buckets: the padding rule every padded shape uses."""

from seedleague.buckets import power_of_two
from seedleague.host.batcher import BatcherConfig


def test_power_of_two_by_hand():
    assert [power_of_two(n) for n in (0, 1, 2, 3, 5, 8, 9, 1000)] == [1, 1, 2, 4, 8, 8, 16, 1024]


def test_the_batcher_pads_with_the_same_rule_above_its_minimum():
    config = BatcherConfig(min_bucket=8)
    assert [config.bucket(n) for n in (1, 8, 9, 100)] == [8, 8, 16, 128]
