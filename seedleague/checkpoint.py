"""Orbax checkpoints of the full training state, with a JSON sidecar of run counters.

`Checkpointer.save(step, state, meta)` writes `<dir>/<step>/{state,meta}`;
`restore(latest_step(), template)` reads the newest complete one back into the
structure of `template`. Typed PRNG keys are stored as their raw key data.

Several processes may share a directory (the league's model pool: each host writes
its own player's snapshots and reads the others'), so a step this process has not
seen is looked for on disk again before it is called missing.

Verification: every save records a checksum of the state's values (`state_checksum`, in the
meta as `state_sha256`), reads the checkpoint back and compares; every restore compares again.
Each top-level field of the state (its params, optimiser state, ...) gets its own checksum too
(`part_sha256`), so a reader of one part (seedleague.artifacts.load reads only the params) can check that part.
So junk that still decodes to finite numbers is found, and a checkpoint is only counted once
it has read back as written. Rotation (`max_to_keep`) is done here, not by orbax, and only
after the new checkpoint has verified: the last verified-good checkpoint is never deleted.

Faults: a state with a NaN or inf is refused before it is written (`NonFiniteState`); a write
the disk refuses, or that does not read back as written, raises `StorageError` naming the
path (the bad step is set aside, nothing is rotated away); a checkpoint that cannot be read
back, does not match its checksum, or reads back non-finite raises `DamagedCheckpoint`, and
`set_aside` moves it out of the steps (to `damaged-<step>`) so a resumed run neither reads it
again nor keeps it as its own. Orbax's unfinished `*.orbax-checkpoint-tmp` folders, left by a
process killed while saving, are removed when a Checkpointer opens the directory.

Object storage: a directory given as a URL (`s3://bucket/run/checkpoints`) is saved and verified in this
machine's mirror of it (`object_store.cache_dir`) and then uploaded, step by step, by
`seedleague.object_store.RemoteSteps`; its steps are the store's complete ones, and a step restored is
copied into the mirror once and read from there after.

Read-only access (`open_read_only`, `read_meta`, `read_state`, `read_state_metadata`): what
`seedleague.artifacts.load` reads a policy with, one part of one step, without a Checkpointer's
bookkeeping. This is the one module that restores orbax checkpoints.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import threading
import warnings
from typing import TYPE_CHECKING, Any, Optional

import jax
import numpy as np

from seedleague import object_store
from seedleague.storage import StorageError, is_storage_failure, storage_error
from seedleague.checkpoint_config import CheckpointConfig, path_problem

if TYPE_CHECKING:  # the annotations' name only; `_orbax` loads the module
    import orbax.checkpoint as ocp

log = logging.getLogger(__name__)

_TMP_SUFFIX = ".orbax-checkpoint-tmp"  # orbax writes a step here and renames it when complete
CHECKSUM_KEY = "state_sha256"  # the meta key holding `state_checksum` of the saved state
PARTS_KEY = "part_sha256"  # the meta key holding `part_checksums` of the saved state
_RECORDED = (CHECKSUM_KEY, PARTS_KEY)  # the checkpointer's own meta keys, not the caller's


class _OrbaxReadsLeftFailing(logging.Filter):
    """Drops asyncio's report of the sibling reads orbax leaves failing when one read of a damaged checkpoint fails:
    thousands of lines of tracebacks at ERROR for what `DamagedCheckpoint` says in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (message.startswith("unhandled exception during asyncio.run() shutdown")
                    and "/orbax/checkpoint/" in message)


logging.getLogger("asyncio").addFilter(_OrbaxReadsLeftFailing())


class _OrbaxThreadsOnAFullDisk(logging.Filter):
    """Keeps to one line orbax's report of a writer thread that a full (or refusing) disk stopped: the save that
    waited on it raises the same error, and the host stops with one line naming the disk and the fix; the
    threads' tracebacks only buried it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and "_SignalingThread.run() raised" in str(record.msg) and is_storage_failure(
                record.exc_info[1]) is not None:
            record.exc_info, record.exc_text = None, None
        return True


logging.getLogger("absl").addFilter(_OrbaxThreadsOnAFullDisk())


def _orbax():
    """orbax.checkpoint, loaded when a checkpoint is first opened: a `seedleague` command that refuses its flags,
    and every process that never reads or writes a checkpoint, skip its import (a third of a second)."""
    import orbax.checkpoint as ocp  # optional-heavy: orbax loads only when a checkpoint is opened

    return ocp


def _first_cause(error: BaseException) -> str:
    """The innermost cause of `error` in one short line (tensorstore's own reason, not its spec dump)."""
    while error.__cause__ is not None:
        error = error.__cause__
    reason = " ".join(str(error).split(" See full TensorStore details")[0].split())
    return f"{type(error).__name__}: {reason[:240]}"


class DamagedCheckpoint(ValueError):
    """A checkpoint on disk could not be read back, or holds non-finite values."""


class NonFiniteState(ValueError):
    """A state to save holds NaN or inf: saving it would replace a good checkpoint with a poisoned one."""


def non_finite_leaves(state: Any) -> list[str]:
    """Paths of the floating-point leaves of `state` holding a NaN or inf (empty: every value finite)."""
    bad = []
    for path, leaf in jax.tree_util.tree_leaves_with_path(state):
        if _is_key(leaf):
            continue
        array = np.asarray(leaf)
        if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all():
            bad.append(jax.tree_util.keystr(path))
    return bad


def state_checksum(state: Any) -> str:
    """sha256 over every leaf's dtype, shape and bytes, in tree order. Leaves are taken as JAX arrays first, so a
    Python int and the int32 it is restored as hash alike."""
    digest = hashlib.sha256()
    for leaf in jax.tree.leaves(_to_savable(state)):
        array = np.ascontiguousarray(np.asarray(jax.numpy.asarray(leaf)))
        digest.update(f"{array.dtype.str}{array.shape};".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def part_checksums(state: Any) -> dict[str, str]:
    """`state_checksum` of each top-level field of a NamedTuple or dict state (empty for any other state)."""
    fields = state._asdict() if hasattr(state, "_asdict") else state if isinstance(state, dict) else {}
    return {str(name): state_checksum(value) for name, value in fields.items()}


def read_failure(directory: str, step: int, error: BaseException) -> "DamagedCheckpoint":
    """The DamagedCheckpoint for checkpoint `step` of `directory` that orbax failed to read with `error`."""
    return DamagedCheckpoint(f"checkpoint {directory}/{step} cannot be read ({_first_cause(error)})")


def _is_key(x: Any) -> bool:
    return isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _to_savable(state: Any) -> Any:
    return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, state)


def _from_savable(restored: Any, template: Any) -> Any:
    return jax.tree.map(lambda r, t: jax.random.wrap_key_data(r, impl=jax.random.key_impl(t)) if _is_key(t) else r, restored, template)


class Checkpointer:
    """Saves and restores (state, meta) pairs under one directory."""

    def __init__(self, config: CheckpointConfig, writer: bool = False):
        """`writer`: this process is the directory's only writer, so orbax's unfinished folders in it are left
        over from an earlier process and removed now (a reader leaves them: another process may be saving)."""
        problem = path_problem(config.directory)
        if problem:
            raise ValueError(f"checkpoint directory {problem}")
        self.config = config
        # remote: the object store holding the steps, when the directory is a URL; orbax then works in _mirror
        self.remote = object_store.RemoteSteps(config.directory) if object_store.is_url(config.directory) else None
        self.directory = self.remote.url if self.remote else os.path.abspath(config.directory)
        self._mirror = object_store.cache_dir(self.directory) if self.remote else self.directory
        self._in_store: set[int] = set()  # steps seen complete in the store (they stay so until deleted here)
        try:
            os.makedirs(self._mirror, exist_ok=True)
        except OSError as error:
            raise storage_error(error, self._mirror, "checkpoints") from None
        if writer:
            self.remove_unfinished()
        # max_to_keep is applied by `_rotate` once a new checkpoint has verified, never by orbax before
        ocp = _orbax()
        options = ocp.CheckpointManagerOptions(max_to_keep=None, enable_async_checkpointing=False)
        self._manager = ocp.CheckpointManager(self._mirror, options=options, item_names=("state", "meta"))
        # One caller at a time: a host's prefetch thread restores opponents while its learner saves.
        self._lock = threading.RLock()

    def save(self, step: int, state: Any, meta: dict) -> None:
        """Save `state` as `step`, read it back and compare checksums, then delete the oldest steps beyond
        max_to_keep; a step already on disk holds the same state and is kept as is. NonFiniteState (nothing
        written) if `state` holds NaN or inf; StorageError if the disk refuses or the checkpoint does not read
        back as written (it is set aside, and nothing is deleted)."""
        bad = non_finite_leaves(state)
        if bad:
            raise NonFiniteState(f"not saving step {step} to {self.directory}: {len(bad)} of its arrays hold NaN or "
                                 f"inf ({', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''})")
        savable = _to_savable(state)
        checksum = state_checksum(savable)
        meta = dict(meta, **{CHECKSUM_KEY: checksum, PARTS_KEY: part_checksums(savable)})
        with self._lock:
            if self._has(step):
                log.info("checkpoint %d already saved; keeping it", step)
                return
            if self.remote:  # a mirror copy the store never got (its upload was cut short) is saved again
                shutil.rmtree(os.path.join(self._mirror, str(step)), ignore_errors=True)
                self._manager.reload()
            ocp = _orbax()
            args = ocp.args.Composite(state=ocp.args.StandardSave(savable), meta=ocp.args.JsonSave(meta))
            try:
                self._manager.save(step, args=args, force=True)
                self._manager.wait_until_finished()
            except Exception as error:  # an OSError, or orbax's array writer's ValueError naming the OS's error
                refused = is_storage_failure(error)
                if refused is None and not isinstance(error, OSError):
                    raise
                remove_unfinished(self._mirror, quiet=True)  # what orbax began: it only holds the disk's last bytes
                raise storage_error(refused or error, f"{self._mirror}/{step}", "a checkpoint") from None
            self._verify(step, savable, checksum)
            if self.remote:  # verified in the mirror: now into the store, where other hosts see it once whole
                self.remote.upload(step, os.path.join(self._mirror, str(step)))
                self._in_store.add(step)
            self._rotate(step)
        log.info("saved checkpoint %s/%d (verified)", self.directory, step)

    def _verify(self, step: int, savable: Any, checksum: str) -> None:
        """StorageError, with `step` set aside, unless checkpoint `step` reads back with `checksum`."""
        ocp = _orbax()
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, savable)
        try:
            restored = self._read(step, ocp.args.Composite(state=ocp.args.StandardRestore(abstract)))
            found = "a different checksum" if state_checksum(restored["state"]) != checksum else ""
        except (DamagedCheckpoint, OSError) as error:
            found = str(error)
        if found:
            where = self.set_aside(step)
            raise StorageError(f"checkpoint {self.directory}/{step} did not read back as written ({found}); it was "
                               f"moved to {where} and no older checkpoint was deleted. Check the disk holding "
                               f"{self.directory}, or give a --run-dir on another disk (then --resume continues from "
                               "the newest good checkpoint)", where)

    def _rotate(self, kept: int) -> None:
        """Delete the oldest steps beyond max_to_keep, never `kept` (the checkpoint that has just verified)."""
        steps = self.remote.steps() if self.remote else sorted(self._manager.all_steps())
        excess = len(steps) - self.config.max_to_keep
        for old in [s for s in steps if s != kept][:max(0, excess)]:
            if self.remote:
                self.remote.delete(old)
                self._in_store.discard(old)
            if old in self._manager.all_steps():
                self._manager.delete(old)

    def latest_step(self) -> Optional[int]:
        steps = self.steps()
        return steps[-1] if steps else None

    def steps(self) -> list[int]:
        """Every complete checkpoint in the directory, read from disk (another process may have added some)."""
        with self._lock:
            if self.remote:
                self._in_store = set(self.remote.steps())
                return sorted(self._in_store)
            self._manager.reload()
            return sorted(self._manager.all_steps())

    def restore(self, step: int, template: Any) -> tuple[Any, dict]:
        """(state, meta) of checkpoint `step`, shaped like `template`; DamagedCheckpoint if it cannot be
        read back or holds NaN or inf."""
        ocp = _orbax()
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, _to_savable(template))
        args = ocp.args.Composite(state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore())
        with self._lock:
            self._require(step)
            restored = self._read(step, args)
        meta = dict(restored["meta"])
        recorded = meta.pop(CHECKSUM_KEY, None)  # None: saved before checksums were recorded
        meta.pop(PARTS_KEY, None)
        if recorded is not None and state_checksum(restored["state"]) != recorded:
            raise DamagedCheckpoint(f"checkpoint {self.directory}/{step} does not match the checksum recorded when "
                                    "it was saved: its files changed on disk")
        state = _from_savable(restored["state"], template)
        bad = non_finite_leaves(state)
        if bad:
            raise DamagedCheckpoint(f"checkpoint {self.directory}/{step} holds NaN or inf in {len(bad)} arrays "
                                    f"({', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''})")
        return state, meta

    def restore_meta(self, step: Optional[int] = None) -> Optional[dict]:
        """Only the JSON sidecar of checkpoint `step` (default: the newest): run counters, env spec, config.
        DamagedCheckpoint if it cannot be read."""
        with self._lock:
            step = self.latest_step() if step is None else step
            if step is None:
                return None
            self._require(step)
            ocp = _orbax()
            restored = self._read(step, ocp.args.Composite(meta=ocp.args.JsonRestore()))
        meta = restored["meta"]
        if not isinstance(meta, dict):
            raise DamagedCheckpoint(f"checkpoint {self.directory}/{step} has no readable meta (found {type(meta).__name__})")
        return {k: v for k, v in meta.items() if k not in _RECORDED}

    def set_aside(self, step: int) -> str:
        """Move damaged checkpoint `step` to `damaged-<step>` beside the others (kept for a look, never read
        as a step again); returns its new path."""
        with self._lock:
            source = os.path.join(self._mirror, str(step))
            target = os.path.join(self._mirror, f"damaged-{step}")
            suffix = 1
            while os.path.exists(target):
                suffix += 1
                target = os.path.join(self._mirror, f"damaged-{step}.{suffix}")
            if os.path.exists(source):
                os.rename(source, target)
            self._manager.reload()
            if self.remote:  # its marker goes: no host lists it again; its files stay in the store for a look
                self.remote.delete_marker(step)
                self._in_store.discard(step)
                return f"{target} (and {self.directory}/{step} is no longer listed)"
        return target

    def _read(self, step: int, args: Any) -> Any:
        """Orbax's restore; any failure to read a step that exists (truncated or junk files) is DamagedCheckpoint."""
        if self.remote and not os.path.isdir(os.path.join(self._mirror, str(step))):
            self.remote.download(step, self._mirror)  # once: later reads of this step come from the mirror
            self._manager.reload()
        try:
            return self._manager.restore(step, args=args)
        except FileNotFoundError:
            raise
        except Exception as error:  # orbax, tensorstore and json raise many kinds for damaged bytes
            raise read_failure(self.directory, step, error) from None

    def _has(self, step: int) -> bool:
        """Whether `step` is complete on disk (in the store, for a URL); the cached list is re-read once when it
        lacks it."""
        if self.remote:
            return step in self._in_store or step in self.steps()
        if step in self._manager.all_steps():
            return True
        self._manager.reload()
        return step in self._manager.all_steps()

    def _require(self, step: int) -> None:
        if not self._has(step):
            raise FileNotFoundError(f"no checkpoint {step} in {self.directory}; it holds {self.steps()}")

    def remove_unfinished(self) -> None:
        """Delete what a save or upload cut short left (orbax's tmp folders; store steps without their marker);
        only the directory's one writer may call this."""
        remove_unfinished(self._mirror)
        if self.remote:
            self.remote.remove_unfinished()

    def close(self) -> None:
        with self._lock:
            self._manager.close()


def remove_unfinished(directory: str, quiet: bool = False) -> None:
    """Delete orbax's unfinished step folders in `directory` (a save killed or refused by the disk midway);
    only its one writer may call this."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if name.endswith(_TMP_SUFFIX):
            (log.info if quiet else log.warning)("removing the unfinished checkpoint %s (a save that did not complete)", os.path.join(directory, name))
            shutil.rmtree(os.path.join(directory, name), ignore_errors=True)


# -- read-only access: one part of one step (seedleague.artifacts.load) ------------------------------------------


@contextlib.contextmanager
def _quiet_orbax():
    """Silence orbax's notices that are expected when reading: a warning each time a directory is
    opened read-only, and one that sharding is read from the file (params come back as numpy)."""
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Sharding info not provided when restoring")
            yield
    finally:
        logger.setLevel(level)


def open_read_only(directory: str) -> ocp.CheckpointManager:
    """An orbax manager reading the steps of `directory` (a local directory: a URL's mirror), creating nothing;
    the caller closes it."""
    ocp = _orbax()
    handlers = {"state": ocp.PyTreeCheckpointHandler(), "meta": ocp.JsonCheckpointHandler()}
    with _quiet_orbax():
        options = ocp.CheckpointManagerOptions(read_only=True, create=False)
        return ocp.CheckpointManager(directory, options=options, item_handlers=handlers)


def _read_only(manager: ocp.CheckpointManager, step: int, args: Any) -> Any:
    """Orbax's restore of checkpoint `step` (which exists); any failure to read its files (truncated, junk, a
    missing file) is a one-line DamagedCheckpoint naming it."""
    try:
        with _quiet_orbax():
            return manager.restore(step, args=args)
    except Exception as error:  # orbax, tensorstore and json raise many kinds for damaged bytes
        raise read_failure(str(manager.directory), step, error) from None


def read_meta(manager: ocp.CheckpointManager, step: int) -> Any:
    """The JSON sidecar of checkpoint `step` as saved (the checkpointer's checksums included)."""
    ocp = _orbax()
    return _read_only(manager, step, ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]


def read_state(manager: ocp.CheckpointManager, step: int, subtrees: Optional[dict]) -> Any:
    """The state of checkpoint `step`: only `subtrees` (a dict of the state's metadata subtrees, as numpy
    arrays) when given, else everything without a template."""
    ocp = _orbax()
    if subtrees is not None:
        abstract = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype), subtrees)
        restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), abstract)
        args = ocp.args.PyTreeRestore(item=abstract, restore_args=restore_args, partial_restore=True)
    else:
        args = ocp.args.PyTreeRestore()
    return _read_only(manager, step, ocp.args.Composite(state=args))["state"]


def read_state_metadata(manager: ocp.CheckpointManager, step: int) -> Any:
    """Orbax's tree metadata of checkpoint `step`'s state; DamagedCheckpoint when its file cannot be read."""
    try:
        with _quiet_orbax():
            return manager.item_metadata(step)["state"]
    except Exception as error:  # truncated or junk JSON, a missing file
        raise read_failure(str(manager.directory), step, error) from None
