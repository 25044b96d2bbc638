"""The host's side of the league: opponents in, results out, snapshots on the league's schedule.

    link = LeagueLink(config, league, pool, learner_calls)   # league: any types.LeagueAPI
    link.start()
    matches = link.draw(n)            # batcher thread: never blocks, never calls the league
    link.report(result)               # batcher thread: queued, sent in batches
    params = link.opponent_params(key)

Three background threads keep the league off the inference path:
- *prefetch* asks the league for opponents in batches and loads their params
  from the model pool into an LRU (`ParamsCache`) before handing them out
  (an opponent missing from the pool is skipped, not the batch around it);
  when the league is away, `draw` keeps replaying recently fetched matches
  (the last known opponent distribution), and plays self-play before any.
- *report* sends finished-episode results in batches and retries them, with
  their ids, until the league acknowledges them (so a lost reply never counts
  a result twice and a league outage loses none).
- *check-in* tells the league the learner's step every few seconds; when the
  league says so it saves a snapshot into the pool (on the learner thread,
  between two updates), registers it, and resets the learner if asked.

A league that is away or refuses a call is retried. A fault that retrying cannot mend stops
the thread and is left in `error` for the host to stop the run with: a snapshot the disk
refuses (`StorageError`) or that holds NaN (`NonFiniteState`), and a league that answers
INTERNAL because it could not store a call in its database (nothing of that call was kept,
and its results stay pending here).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import random
import threading
import time
from typing import Any, Callable

from seedleague.checkpoint import NonFiniteState
from seedleague.league.model_pool import ParamsCache
from seedleague.league.types import LeagueAPI, Match, MatchResult, PbtAnswer, Role
from seedleague.protocol.errors import INTERNAL, ProtocolError
from seedleague.storage import StorageError
from seedleague.host.league_link_config import LeagueLinkConfig

log = logging.getLogger(__name__)


@dataclasses.dataclass
class LinkStats:
    """Counters for the progress line and tests."""

    fetched: int = 0
    reported: int = 0
    new_results: int = 0
    acknowledged: int = 0  # results the league has acknowledged (stored), each counted once, new or a retry
    pending: int = 0
    dropped: int = 0
    skipped: int = 0  # matches fetched but not played: their opponent's snapshot was not in the pool
    snapshots: int = 0
    resets: int = 0
    pbt_copies: int = 0  # population-based training: snapshots of another member taken over
    failures: int = 0
    last_error: str = ""


class LeagueLink:
    """Keeps opponents, results and snapshots flowing between one learning player's host and the league."""

    def __init__(
        self,
        config: LeagueLinkConfig,
        league: LeagueAPI,
        load_params: Callable[[str], Any],
        snapshot: Callable[[], tuple[int, str]],
        reset: Callable[[], None],
        learner_step: Callable[[], int],
        seed: int = 0,
    ):
        """`load_params(key)` reads a snapshot's params; `snapshot()` saves the learner into the pool and
        returns (step, path); `reset()` puts the learner back to its initial params; `learner_step()` is its step."""
        self.config = config
        self.league = league
        self.stats = LinkStats()
        self._load_params = load_params
        self._cache = ParamsCache(load_params, config.cache_size, config.cache_keep_s)
        self._cache_lock = threading.Lock()
        self._snapshot, self._reset, self._learner_step = snapshot, reset, learner_step
        self._ready: collections.deque[Match] = collections.deque()
        self._missing: set[str] = set()  # opponents found missing from the pool (warned once each)
        self._recent: collections.deque[Match] = collections.deque(maxlen=config.prefetch)
        self._results: collections.deque[MatchResult] = collections.deque()
        self._lock = threading.Lock()
        self._report_lock = threading.Lock()  # one report call at a time: the report thread's or stop()'s flush
        self._registered = threading.Event()
        self._rng = random.Random(seed)
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._loop, args=(self._prefetch_once, 0.0), name="league-prefetch", daemon=True),
            threading.Thread(target=self._loop, args=(self._report_once, config.report_interval_s), name="league-report", daemon=True),
            threading.Thread(target=self._loop, args=(self._check_in_once, config.check_in_interval_s), name="league-check-in", daemon=True),
        ]
        self._self_play = Match(config.player, True)
        # Population-based training: called with the league's PbtAnswer at check-ins (seedleague.host.pbt_member);
        # an answer that comes before it is set waits for it, so no copy is lost.
        self.pbt_handler: Callable[[PbtAnswer], None] | None = None
        self._pbt_waiting: PbtAnswer | None = None
        self._pbt_applied: PbtAnswer | None = None
        self.error: Exception | None = None  # a fault retrying cannot mend (see the module docstring)

    def start(self) -> None:
        """Register the player and start the threads; a league that is away now is registered with later."""
        try:
            self._register()
        except ConnectionError as error:  # LeagueUnavailable: play on, the threads register once it is back
            log.warning("league unreachable at start (%s); registering once it answers", error)
        for thread in self._threads:
            thread.start()

    def stop(self, flush_timeout_s: float = 5.0) -> None:
        """Stop the threads after one last attempt to deliver every pending result."""
        deadline = time.monotonic() + flush_timeout_s
        try:
            while self.error is None and self._results and time.monotonic() < deadline and self._report_once():
                pass
        except Exception as error:  # the league is away: what is left is counted below, shutdown goes on
            log.warning("last delivery of league results failed: %s: %s", type(error).__name__, error)
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=max(0.1, deadline - time.monotonic()))
        if self._results:  # after a fault that stopped the run, the summary's league_results.pending says it
            (log.info if self.error else log.warning)("%d results were not delivered to the league before shutdown",
                                                      len(self._results))

    # -- batcher thread -------------------------------------------------------------------------

    def draw(self, count: int) -> list[Match]:
        """`count` opponents for new episodes, without waiting for the league."""
        matches = []
        with self._lock:
            for _ in range(count):
                if self._ready:
                    matches.append(self._ready.popleft())
                elif self._recent:
                    matches.append(self._rng.choice(self._recent))
                else:
                    matches.append(self._self_play)
        return matches

    def report(self, result: MatchResult) -> None:
        with self._lock:
            self._results.append(result)
            if len(self._results) > self.config.max_pending_results:
                self._results.popleft()
                self.stats.dropped += 1
                if self.stats.dropped == 1 or self.stats.dropped % 10000 == 0:
                    log.warning("league unreachable or slower than this host's episodes: dropped %d oldest "
                                "unreported results (%d pending; league.max_pending_results)", self.stats.dropped,
                                len(self._results))
            self.stats.pending = len(self._results)

    def opponent_params(self, key: str) -> Any:
        with self._cache_lock:
            return self._cache.get(key)

    # -- background threads ---------------------------------------------------------------------

    def _register(self) -> None:
        if not self._registered.is_set():
            self.league.register_player(self.config.player, Role(self.config.role))
            self._registered.set()

    def _loop(self, once: Callable[[], bool], interval_s: float) -> None:
        while not self._stop.is_set():
            try:
                self._register()
                once()
                wait = interval_s
            except Exception as error:
                if _is_fatal(error):
                    self.error = self.error or error
                    log.info("league link stopped: %s", error)
                    return
                # the league is away or refused: keep playing, try again later
                self.stats.failures += 1
                self.stats.last_error = f"{type(error).__name__}: {error}"
                log.warning("league call failed (%s); retrying in %.1f s", self.stats.last_error, self.config.retry_s)
                wait = max(interval_s, self.config.retry_s)
            self._stop.wait(wait)

    def _prefetch_once(self) -> bool:
        if len(self._ready) >= self.config.prefetch:
            self._stop.wait(0.05)
            return False
        matches = self.league.get_opponents(self.config.player, self.config.prefetch)
        missing = {key for key in {m.opponent for m in matches if not m.self_play} if not self._load_into_cache(key)}
        if missing:
            kept = [m for m in matches if m.opponent not in missing]
            self.stats.skipped += len(matches) - len(kept)
            matches = kept
            if not matches:  # nothing playable in this batch: do not spin on the league
                self._stop.wait(self.config.retry_s)
        with self._lock:
            self._ready.extend(matches)
            self._recent.extend(matches)
        self.stats.fetched += len(matches)
        return True

    def _load_into_cache(self, key: str) -> bool:
        """Load `key`'s params before its matches are handed out, so inference never waits on the disk.
        False when the pool lacks the snapshot (another host's pool not shared, or not written yet): only
        that opponent's matches are skipped, and the league offers it again in a later batch."""
        if key in self._cache:
            return True
        try:
            params = self._load_params(key)
        except FileNotFoundError as error:
            if key not in self._missing:
                self._missing.add(key)
                log.warning("opponent %s is not in the model pool; skipping its matches until it is (%s)", key, error)
            return False
        with self._cache_lock:
            self._cache.put(key, params)
        return True

    def _report_once(self) -> bool:
        """Deliver every pending result, `report_batch` per call; True if any was delivered.

        All of them, not one batch per `report_interval_s`: short games (Kuhn poker) finish
        thousands of episodes a second, more than a batch per interval can carry."""
        delivered = False
        while not self._stop.is_set() and self._report_batch():
            delivered = True
        return delivered

    def _report_batch(self) -> bool:
        with self._report_lock:
            with self._lock:
                batch = [self._results[i] for i in range(min(len(self._results), self.config.report_batch))]
            if not batch:
                return False
            new = self.league.report_results(batch)
            sent = {r.result_id for r in batch}
            acknowledged = 0
            with self._lock:
                while self._results and self._results[0].result_id in sent:
                    self._results.popleft()
                    acknowledged += 1
                self.stats.pending = len(self._results)
            self.stats.reported += len(batch)
            self.stats.new_results += new
            self.stats.acknowledged += acknowledged
            # a line per acknowledged batch: after a kill -9 the log still says how many the league acknowledged
            log.info("league acknowledged %d results (%d new): %d acknowledged in all, %d pending",
                     acknowledged, new, self.stats.acknowledged, self.stats.pending)
        return True

    def _check_in_once(self) -> bool:
        step = self._learner_step()
        decision = self.league.check_in(self.config.player, step)
        if decision.pbt is not None:
            self._pbt(decision.pbt)
        if not decision.snapshot:
            return False
        key_step, path = self._snapshot()
        info = self.league.add_snapshot(self.config.player, key_step, path)
        self.stats.snapshots += 1
        log.info("snapshot %s added to the league (%s)", info.key, decision.reason)
        if decision.reset:
            self._reset()
            self.stats.resets += 1
            log.info("%s reset to its initial params after snapshot %s", self.config.player, info.key)
        return True


    def _pbt(self, answer: PbtAnswer) -> None:
        """Apply a PBT answer that copies or changes the settings; one with a copy waits for `pbt_handler`."""
        waiting = self._pbt_waiting
        if waiting is not None and waiting.copy_from and not answer.copy_from:  # the copy still waits: keep it
            answer = dataclasses.replace(answer, copy_from=waiting.copy_from, note=waiting.note)
        self._pbt_waiting = answer
        if self.pbt_handler is None:
            return
        if answer.copy_from or self._pbt_applied is None or _settings(answer) != _settings(self._pbt_applied):
            self.pbt_handler(answer)
            self.stats.pbt_copies += bool(answer.copy_from)
        self._pbt_applied, self._pbt_waiting = answer, None


def _settings(answer: PbtAnswer) -> tuple[float, float, float]:
    return answer.entropy_cost, answer.learning_rate, answer.kl_cost


def _is_fatal(error: Exception) -> bool:
    """Whether retrying cannot mend `error`: a disk that refused a snapshot, a NaN snapshot, or a league that
    could not store the call (INTERNAL)."""
    if isinstance(error, (StorageError, NonFiniteState)):
        return True
    return isinstance(error, ProtocolError) and error.code == INTERNAL
