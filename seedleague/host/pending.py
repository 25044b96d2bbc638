"""A worker's step waiting in the batcher for its actions (a batcher Request's payload).

The stream's coroutine awaits the future on its event loop; the batcher thread answers it
with `PendingStep.answer`, which crosses threads with `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, Optional

from seedleague.host.sessions import AgentStep


@dataclasses.dataclass
class PendingStep:
    """A worker step waiting in the batcher (a Request's payload): its agents, and the stream to answer."""

    agents: AgentStep
    sequence: int
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop

    def answer(self, value: Any, error: Optional[BaseException]) -> None:
        """Hand the result to the stream waiting on its event loop (called from the batcher thread)."""
        try:
            self.loop.call_soon_threadsafe(_resolve, self.future, value, error)
        except RuntimeError:  # the loop is closed: the server is gone, and so is the stream that asked
            pass


def _resolve(future: asyncio.Future, value: Any, error: Optional[BaseException]) -> None:
    if future.done():  # the stream was cancelled while its request was in flight
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
