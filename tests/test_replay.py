"""Replay: ring buffer contents, FIFO order and Reverb-style rate limiting."""

import threading

import numpy as np
import pytest

from seedleague.host.replay import RateLimiter, Replay
from seedleague.host.replay_config import ReplayConfig
from seedleague.rl.types import Unroll


def rows(ids, length=3):
    """Unrolls whose every field is tagged by id, so samples can be traced back."""
    n = len(ids)
    ids = np.asarray(ids, np.float32)
    return Unroll(
        observation=np.broadcast_to(ids[:, None, None], (n, length + 1, 2)).copy(),
        first=np.zeros((n, length + 1), bool),
        action=np.zeros((n, length + 1), np.int32),
        behaviour_logits=np.zeros((n, length + 1, 2), np.float32),
        legal_mask=np.ones((n, length + 1, 2), bool),
        reward=np.broadcast_to(ids[:, None], (n, length + 1)).copy(),
        terminated=np.zeros((n, length + 1), bool),
        truncated=np.zeros((n, length + 1), bool),
        policy_version=np.zeros((n, length + 1), np.int32),
        core_state=(),
    )


def sampled_ids(batch):
    return np.asarray(batch.reward)[:, 0].astype(int).tolist()


IN_HOST_MEMORY = pytest.mark.parametrize("in_host_memory", [False, True], ids=["on the device", "in host memory"])


@IN_HOST_MEMORY
def test_fifo_samples_oldest_first_each_once(in_host_memory):
    replay = Replay(ReplayConfig(capacity=8, sampler="fifo"), rows([0]), batch_size=2, in_host_memory=in_host_memory)
    assert replay.insert(rows([1, 2, 3]), timeout=1)
    assert replay.insert(rows([4]), timeout=1)
    assert sampled_ids(replay.sample(timeout=1)) == [1, 2]
    assert sampled_ids(replay.sample(timeout=1)) == [3, 4]
    assert replay.sample(timeout=0.05) is None  # nothing unread


@IN_HOST_MEMORY
def test_ring_buffer_wraps_and_keeps_newest(in_host_memory):
    replay = Replay(ReplayConfig(capacity=4, samples_per_insert=1.0, sampler="uniform", error_buffer=100), rows([0]),
                    batch_size=4, in_host_memory=in_host_memory)
    for start in range(0, 12, 3):
        assert replay.insert(rows([start, start + 1, start + 2]), timeout=1)
    assert replay.size == 4
    assert set(sampled_ids(replay.sample(timeout=1))) <= {8, 9, 10, 11}


def test_rate_limiter_blocks_inserts_until_the_learner_samples():
    replay = Replay(ReplayConfig(capacity=64, samples_per_insert=1.0, min_size=2, error_buffer=2), rows([0]), batch_size=2)
    assert replay.insert(rows([1, 2, 3, 4]), timeout=1) == 4  # diff 4 = max (2*1 + 2)
    assert replay.insert(rows([5]), timeout=0.05) == 0  # would exceed the error buffer
    assert replay.sample(timeout=1) is not None
    assert replay.insert(rows([5]), timeout=1) == 1


def test_a_chunk_larger_than_the_slack_goes_in_as_the_learner_samples():
    # spi 4 and batch 2: the limiter's slack (8 samples) holds 2 unrolls, the chunk is 6
    replay = Replay(ReplayConfig(capacity=64, samples_per_insert=4.0, sampler="uniform", error_buffer=4),
                    rows([0]), batch_size=2)
    assert replay.insert(rows(list(range(6))), timeout=0.05) == 3  # 2 below min_size, then 1 by ratio
    results = []
    inserter = threading.Thread(target=lambda: results.append(replay.insert(rows(list(range(6, 12))), timeout=10)))
    inserter.start()
    # 9 unrolls allow 9 * 4 = 36 samples of slack, of which the limiter keeps min_diff = 4: 16 batches of 2
    for _ in range(16):
        assert replay.sample(timeout=10) is not None
    inserter.join(10)
    assert results == [6]
    assert replay.sample(timeout=0.05) is None


def test_insert_all_waits_out_the_limiter_until_every_row_is_in_or_the_host_stops():
    replay = Replay(ReplayConfig(capacity=64, samples_per_insert=1.0, min_size=2, error_buffer=2), rows([0]), batch_size=2)
    results, stopping = [], threading.Event()
    inserter = threading.Thread(target=lambda: results.append(replay.insert_all(rows(list(range(6))), stopping.is_set,
                                                                                poll_s=0.05)))
    inserter.start()
    assert replay.sample(timeout=10) is not None  # 4 went in at once (the limiter's slack); this makes room for 2
    inserter.join(10)
    assert results == [6]
    # a stopping host gives up on what the limiter holds back, and says how many went in
    stopping.set()
    assert replay.insert_all(rows([7, 8, 9]), stopping.is_set, poll_s=0.05) == 0
    stopping.clear()
    replay.close()
    assert replay.insert_all(rows([7]), stopping.is_set, poll_s=0.05) == 0


def test_rate_limiter_blocks_samples_below_min_size():
    replay = Replay(ReplayConfig(capacity=64, min_size=4), rows([0]), batch_size=2)
    replay.insert(rows([1, 2, 3]), timeout=1)
    assert replay.sample(timeout=0.05) is None
    replay.insert(rows([4]), timeout=1)
    assert replay.sample(timeout=1) is not None


def test_rate_limiter_ratio_by_hand():
    limiter = RateLimiter(samples_per_insert=2.0, min_size=1, error_buffer=3.0)
    # min_diff = 1*2 - 3 = -1, max_diff = 1*2 + 3 = 5
    assert limiter.can_insert(1)  # below min_size
    limiter.inserts = 2  # diff 4
    assert not limiter.can_insert(1)  # 4 + 2 > 5
    assert limiter.room() == 0
    limiter.samples = 3  # diff 1: (5 - 1) / 2 = 2 more fit
    assert limiter.room() == 2
    limiter.samples = 0
    assert limiter.can_sample(4, size=2)  # 4 - 4 = 0 >= -1
    assert not limiter.can_sample(6, size=2)  # 4 - 6 = -2 < -1


def test_a_chunk_larger_than_the_ring_keeps_its_newest_rows():
    replay = Replay(ReplayConfig(capacity=4, sampler="uniform", samples_per_insert=0.5, min_size=1, error_buffer=100),
                    rows([0]), batch_size=4)
    assert replay.insert(rows(list(range(10))), timeout=1) == 10
    assert replay.size == 4
    assert set(sampled_ids(replay.sample(timeout=1))) <= {6, 7, 8, 9}


def test_close_wakes_a_blocked_sampler():
    replay = Replay(ReplayConfig(capacity=8), rows([0]), batch_size=2)
    result = []
    thread = threading.Thread(target=lambda: result.append(replay.sample()))
    thread.start()
    replay.close()
    thread.join(5)
    assert result == [None]


def test_bad_configs_name_the_problem():
    with pytest.raises(ValueError, match="fifo sampler"):
        ReplayConfig(sampler="fifo", samples_per_insert=2.0)
    with pytest.raises(ValueError, match="below the learner batch size"):
        Replay(ReplayConfig(capacity=2), rows([0]), batch_size=4)


def test_a_slack_too_narrow_to_go_on_is_refused_before_the_run_starts():
    """With batches of 8 at one sample per insert, inserts stop at diff 8 + slack and a sample needs diff 16 - slack:
    at 0.5 both would wait for ever. The narrowest slack allowed, (8 + 1) / 2, keeps both going."""
    from seedleague.host.config import HostConfig

    narrow = ReplayConfig(capacity=64, error_buffer=0.5)
    for make in (lambda: Replay(narrow, rows([0]), batch_size=8), lambda: HostConfig(batch_size=8, replay=narrow)):
        with pytest.raises(ValueError, match=r"error_buffer 0.5 is too narrow .* at least 4.5 .* or 0 for the default "
                                             r"\(8\)"):
            make()
    replay = Replay(ReplayConfig(capacity=64, error_buffer=4.5), rows([0]), batch_size=8)
    inserted = sampled = 0
    for _ in range(40):  # one unroll at a time, as a worker's finish; the learner takes a batch whenever it may
        inserted += replay.insert(rows([inserted]), timeout=0)
        sampled += 8 * (replay.sample(timeout=0) is not None)
    assert sampled >= 24 and inserted - sampled <= 8 + 4.5  # it went on, and no further ahead than the slack lets
