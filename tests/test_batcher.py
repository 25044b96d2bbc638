"""Batcher: a batch runs when every attached worker is waiting, at the size limit, or at the timeout; its
answers go back to the event loop in one wake-up."""

import asyncio
import threading
import time

import pytest

from seedleague.host.batcher import Batcher, BatcherConfig, Request
from seedleague.host.pending import PendingStep, answer_all


def make_batcher(expected: int, timeout_ms: float = 50.0, max_batch_size: int = 64) -> Batcher:
    return Batcher(BatcherConfig(max_batch_size=max_batch_size, timeout_ms=timeout_ms), lambda batch: None, lambda: expected)


def test_full_batch_runs_without_waiting_for_the_timeout():
    batcher = make_batcher(expected=3, timeout_ms=3.6e6)  # were it to wait for the timeout, the test would hang
    for size in (4, 8, 2):
        batcher.submit(Request(size, None))
    batch = batcher.next_batch()
    assert [r.size for r in batch] == [4, 8, 2]
    assert batcher.timeouts == 0


def test_partial_batch_runs_once_the_first_requests_deadline_has_passed():
    batcher = make_batcher(expected=3, timeout_ms=50)
    past = time.perf_counter() - 1.0  # the first request arrived a second ago: its 50 ms deadline has passed
    batcher.submit(Request(4, "a", arrived=past))
    batcher.submit(Request(4, "b", arrived=past))
    assert [r.payload for r in batcher.next_batch()] == ["a", "b"]  # the third worker is not waited for
    assert batcher.timeouts == 1


def test_a_request_arriving_before_the_deadline_joins_the_batch():
    batcher = make_batcher(expected=2, timeout_ms=3.6e6)
    batcher.submit(Request(4, "a"))
    late = threading.Thread(target=lambda: batcher.submit(Request(4, "b")))
    late.start()
    assert [r.payload for r in batcher.next_batch()] == ["a", "b"]  # next_batch blocks until b, not the timeout
    late.join()
    assert batcher.timeouts == 0


def test_size_limit_splits_batches_and_keeps_order():
    batcher = make_batcher(expected=3, timeout_ms=5000, max_batch_size=10)
    for name in "abc":
        batcher.submit(Request(6, name))
    assert [r.payload for r in batcher.next_batch()] == ["a"]
    assert [r.payload for r in batcher.next_batch()] == ["b"]


def test_request_larger_than_any_batch_is_refused():
    batcher = make_batcher(expected=1, max_batch_size=8)
    with pytest.raises(ValueError, match="exceeds max_batch_size 8"):
        batcher.submit(Request(9, None))


def test_thread_hands_batches_to_run_batch():
    seen, done = [], threading.Event()

    def run_batch(batch):
        seen.append([r.payload for r in batch])
        done.set()

    batcher = Batcher(BatcherConfig(timeout_ms=5000), run_batch, lambda: 2)
    batcher.start()
    try:
        batcher.submit(Request(1, "x"))
        batcher.submit(Request(1, "y"))
        assert done.wait(5)
        assert seen == [["x", "y"]]
    finally:
        batcher.stop()


def test_bucket_sizes_are_powers_of_two_from_min_bucket():
    config = BatcherConfig(min_bucket=8)
    assert [config.bucket(n) for n in (1, 8, 9, 64, 65)] == [8, 8, 16, 64, 128]


def test_a_batch_is_answered_with_one_wake_up_of_the_event_loop():
    """seedleague.host.pending.answer_all: every stream of a batch gets its own result (value, error, or nothing
    for one cancelled meanwhile) from one call_soon_threadsafe, not one per stream; a closed loop is no error."""
    loop = asyncio.new_event_loop()
    calls = []
    real = loop.call_soon_threadsafe
    loop.call_soon_threadsafe = lambda *args: calls.append(args) or real(*args)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        futures = [asyncio.run_coroutine_threadsafe(_make_future(), loop).result(5) for _ in range(4)]
        loop.call_soon_threadsafe(futures[3].cancel)
        steps = [PendingStep(agents=None, sequence=i, future=future, loop=loop) for i, future in enumerate(futures)]
        calls.clear()
        answer_all([(steps[0], "a", None), (steps[1], "b", None), (steps[2], None, ValueError("bad step")),
                    (steps[3], "late", None)])
        wake_ups = len(calls)
        outcomes = asyncio.run_coroutine_threadsafe(_outcomes(futures), loop).result(5)
        assert wake_ups == 1
        assert outcomes[:2] == ["a", "b"]
        assert isinstance(outcomes[2], ValueError) and isinstance(outcomes[3], asyncio.CancelledError)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
    answer_all([(steps[0], "after the server is gone", None)])  # the loop is closed: nothing to answer, no error


async def _make_future() -> asyncio.Future:
    return asyncio.get_running_loop().create_future()


async def _outcomes(futures) -> list:
    return await asyncio.gather(*futures, return_exceptions=True)
