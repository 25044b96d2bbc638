"""The model pool: every league snapshot as an orbax checkpoint under the run directory.

Layout: `<root>/<player>/<step>/{state,meta}`, i.e. each player's directory is a
`Checkpointer` directory whose steps are that player's snapshots, in the same
format as the learner's own checkpoints (so `seedleague serve --checkpoint
<root>/<player>` serves the newest one, and `seedleague.api.load_policy` reads
any of them). Snapshot "main:000512" is `<root>/main`, step 512.

The root may be object storage (`s3://bucket/run/pool`, seedleague.object_store): each snapshot is then
uploaded once it has verified, listed by other hosts only once whole, and copied to this machine's cache
of the URL the first time it is read. A run whose pool is not `<run_dir>/pool` records the pool's place
in `<run_dir>/pool.url` (`record_root`), and commands that read a run's snapshots find it with `root_of`
(both in seedleague.league.pool_paths, which loads no jax).

Hosts load opponents through `ParamsCache`, an LRU of device params, so a
second or restarted host sees the same pool and only keeps the opponents it is
currently playing in memory.
"""

from __future__ import annotations

import collections
import collections.abc
import logging
import os
import threading
import time
from typing import Any, Callable

from seedleague import object_store
from seedleague.checkpoint import Checkpointer
from seedleague.checkpoint_config import CheckpointConfig
# Where a run's pool is, re-exported: its callers name them as the model pool's.
from seedleague.league.pool_paths import player_dir_of, record_root, root_of
from seedleague.league.types import parse_key, snapshot_key

log = logging.getLogger(__name__)

_KEEP_ALL = 2**31 - 1  # snapshots are never rotated away: the league refers to every one


class ModelPool:
    """Saves and loads snapshots keyed "player:step" under one root directory or object-storage URL."""

    def __init__(self, root: str):
        self.remote = object_store.is_url(root)
        problem = object_store.url_problem(root) if self.remote else None
        if problem:
            raise ValueError(f"the model pool {problem}")
        self.root = root.rstrip("/") if self.remote else os.path.abspath(root)
        self._checkpointers: dict[str, Checkpointer] = {}
        self._written: set[str] = set()  # players this process saves snapshots of
        self._lock = threading.Lock()

    def player_dir(self, player: str) -> str:
        return object_store.join(self.root, player) if self.remote else os.path.join(self.root, player)

    def save(self, player: str, state: Any, meta: dict) -> str:
        """Freeze `state` (a TrainState) as snapshot player:<state.step>; returns its key."""
        step = int(state.step)
        if player not in self._written:  # its one writer: unfinished saves of an earlier process go
            self._checkpointer(player).remove_unfinished()
            self._written.add(player)
        self._checkpointer(player).save(step, state, meta)
        return snapshot_key(player, step)

    def restore(self, key: str, template: Any) -> tuple[Any, dict]:
        """(state, meta) of snapshot `key`, shaped like `template` (a TrainState of the same network)."""
        player, step = parse_key(key)
        if step is None:
            raise ValueError(f"{key!r} names a live player, not a snapshot: expected 'player:step'")
        if not self.remote and not os.path.isdir(self.player_dir(player)):
            raise FileNotFoundError(f"the model pool {self.root} has no player {player!r}")
        return self._checkpointer(player).restore(step, template)

    def meta(self, key: str) -> dict:
        """Snapshot `key`'s meta (env_steps, wall_s, env spec, ...) without reading its params."""
        player, step = parse_key(key)
        if step is None:
            raise ValueError(f"{key!r} names a live player, not a snapshot: expected 'player:step'")
        if not self.remote and not os.path.isdir(self.player_dir(player)):
            raise FileNotFoundError(f"the model pool {self.root} has no player {player!r}")
        return self._checkpointer(player).restore_meta(step)

    def keys(self, player: str) -> list[str]:
        if not self.remote and not os.path.isdir(self.player_dir(player)):
            return []
        return [snapshot_key(player, s) for s in self._checkpointer(player).steps()]

    def players(self) -> list[str]:
        """The players with a folder in the pool, sorted."""
        if self.remote:
            return object_store.folders(self.root)
        return sorted(os.listdir(self.root)) if os.path.isdir(self.root) else []

    def close(self) -> None:
        with self._lock:
            for checkpointer in self._checkpointers.values():
                checkpointer.close()
            self._checkpointers.clear()

    def _checkpointer(self, player: str) -> Checkpointer:
        with self._lock:
            if player not in self._checkpointers:
                config = CheckpointConfig(directory=self.player_dir(player), max_to_keep=_KEEP_ALL)
                self._checkpointers[player] = Checkpointer(config)
            return self._checkpointers[player]


WARN_BYTES = 2**30  # opponents' params kept beyond the cache's capacity that make a warning (device memory)


def nbytes(tree: Any) -> int:
    """The bytes of the arrays in a pytree of dicts, lists and tuples (leaves without `nbytes` count 0)."""
    if isinstance(tree, collections.abc.Mapping):
        return sum(nbytes(value) for value in tree.values())
    if isinstance(tree, (list, tuple)):
        return sum(nbytes(value) for value in tree)
    return int(getattr(tree, "nbytes", 0))


class ParamsCache:
    """LRU of opponent params on the device, loaded on first use by `load(key)`. Not thread-safe:
    its user holds a lock (see host.league_link).

    `capacity` is soft: an entry used within the last `keep_s` seconds is never
    evicted, because it belongs to an opponent seated now. With more opponents in
    play than `capacity` (PFSP over many snapshots, 128 envs), a hard LRU would
    evict one seated opponent to load another on every inference batch and reload
    it from disk on the next: one connect_four host fell from 9K to 130 env
    steps/s once its league held more than 16 snapshots. The cache grows to the
    opponents in play instead (logged once) and shrinks back as they leave; a
    league drawing from a large pool does so in every run, so only params in play
    beyond `warn_bytes` (device memory a user may miss) make it a warning.
    """

    def __init__(self, load: Callable[[str], Any], capacity: int = 8, keep_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic, warn_bytes: int = WARN_BYTES):
        if capacity < 1:
            raise ValueError(f"the opponent params cache needs capacity >= 1, got {capacity}")
        self._load = load
        self.capacity = capacity
        self.keep_s = keep_s
        self.warn_bytes = warn_bytes
        self._clock = clock
        self._entries: collections.OrderedDict[str, Any] = collections.OrderedDict()  # least recently used first
        self._last_used: dict[str, float] = {}
        self._bytes: dict[str, int] = {}  # each entry's params, in bytes
        self._told_over = self._warned_bytes = False
        self.loads = 0

    def get(self, key: str) -> Any:
        if key in self._entries:
            self._entries.move_to_end(key)
            self._last_used[key] = self._clock()
            self._evict_idle(self._last_used[key])
            return self._entries[key]
        params = self._load(key)
        self.put(key, params)
        return params

    def put(self, key: str, params: Any) -> None:
        """Insert params loaded elsewhere (e.g. by a prefetch thread), evicting what has not been used lately."""
        self.loads += 1
        self._entries[key] = params
        self._bytes[key] = nbytes(params)
        self._entries.move_to_end(key)
        self._last_used[key] = self._clock()
        self._evict_idle(self._last_used[key])
        if len(self._entries) > self.capacity:  # only a new entry can grow the opponents in play past it
            self._tell_over()

    def _evict_idle(self, now: float) -> None:
        """Least recently used first, while over capacity, stopping at the first entry in play."""
        while len(self._entries) > self.capacity:
            oldest = next(iter(self._entries))
            if now - self._last_used[oldest] < self.keep_s:  # in LRU order: every other entry is in use too
                break
            del self._entries[oldest], self._last_used[oldest], self._bytes[oldest]
            log.debug("evicted opponent %s from the params cache", oldest)

    def _tell_over(self) -> None:
        """Once: the opponents in play outnumber the capacity (info). Once: they hold more than `warn_bytes`."""
        held = sum(self._bytes.values())
        if self._warned_bytes or (self._told_over and held <= self.warn_bytes):
            return
        text = (f"{len(self._entries)} opponents in play ({held / 2**20:.1f} MiB of params) exceed the params cache's "
                f"capacity {self.capacity}: every opponent seated in the last {self.keep_s:g} s is kept")
        if not self._told_over:
            self._told_over = True
            log.info("%s", text)
        if held > self.warn_bytes:
            self._warned_bytes = True
            log.warning("%s, more than %.1f GiB on the device; a shorter --league.cache-keep-s keeps fewer",
                        text, self.warn_bytes / 2**30)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)
