"""A worker's step waiting in the batcher for its actions (a batcher Request's payload).

The stream's coroutine awaits the future on its event loop; the batcher thread answers a batch's
steps with `answer_all`, which crosses threads with one `call_soon_threadsafe` per event loop: one
wake-up of the loop (a write to its self-pipe) for the whole batch, however many streams it answers.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Iterable, Optional

from seedleague.host.sessions import AgentStep


@dataclasses.dataclass
class PendingStep:
    """A worker step waiting in the batcher (a Request's payload): its agents, and the stream to answer."""

    agents: AgentStep
    sequence: int
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop


def answer_all(answers: Iterable[tuple[PendingStep, Any, Optional[BaseException]]]) -> None:
    """Hand each (step, value, error) to the stream waiting on its event loop (called from the batcher thread)."""
    by_loop: dict[asyncio.AbstractEventLoop, list] = {}
    for pending, value, error in answers:
        by_loop.setdefault(pending.loop, []).append((pending.future, value, error))
    for loop, results in by_loop.items():
        try:
            loop.call_soon_threadsafe(_resolve_all, results)
        except RuntimeError:  # the loop is closed: the server is gone, and so are the streams that asked
            pass


def _resolve_all(results: list[tuple[asyncio.Future, Any, Optional[BaseException]]]) -> None:
    for future, value, error in results:
        if future.done():  # the stream was cancelled while its request was in flight
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)
