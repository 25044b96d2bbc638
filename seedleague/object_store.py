"""Checkpoint directories on S3-compatible object storage, named by URL (`s3://bucket/run/pool/main`).

Orbax reads and writes a local directory: orbax-checkpoint 0.11's tensorstore path builder knows gs:// but
not s3:// ("Checkpoint path should be absolute. Got s3:/bucket/..."), and an object store cannot rename a
folder in one step. So a `Checkpointer` given a URL saves and verifies each step in a local mirror (this
machine's cache of the URL) and `RemoteSteps` moves whole steps between the mirror and the store through
fsspec's s3fs, the backend etils.epath (orbax's own path library) uses for s3://. There is no S3 client here.

Layout under the URL, for each step:

    <url>/<step>/...            the orbax step folder, file for file
    <url>/<step>.complete       written last: JSON with the step's file count and bytes

A step exists for readers only once its `.complete` marker does, and the marker is put only after the
store has acknowledged every file of the step: an upload killed midway is never listed, never read. Its
one writer removes such leftovers when it opens the URL (`remove_unfinished`).

Credentials and endpoint come from where botocore looks for them, never from flags: AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_PROFILE / ~/.aws, AWS_ENDPOINT_URL (or AWS_ENDPOINT_URL_S3)
for a store other than AWS, AWS_DEFAULT_REGION, AWS_MAX_ATTEMPTS. A fault of the store (no answer, an error
answered, credentials refused, no such bucket) is a `StorageError` whose one line names the URL and the fix
(`seedleague.storage.object_store_error`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from typing import Any, Callable, TypeVar

from seedleague.storage import StorageError, object_store_error

log = logging.getLogger(__name__)

MARKER_SUFFIX = ".complete"  # <url>/<step>.complete: the step is whole in the store
_DOWNLOAD_SUFFIX = ".download"  # a step being copied into the local mirror (renamed when whole)
_BACKENDS = {"s3": "s3fs"}  # URL scheme -> the fsspec backend package that serves it

T = TypeVar("T")


def is_url(path: "str | os.PathLike") -> bool:
    """Whether `path` names object storage (`scheme://...`) rather than a local directory (a path object never
    does: the public API takes `pathlib.Path` run directories too)."""
    if not isinstance(path, str):
        return False
    scheme, sep, _ = path.partition("://")
    return bool(sep) and scheme not in ("", "file") and scheme.isidentifier()


def url_problem(url: str) -> str | None:
    """Why `url` cannot hold checkpoints (an unknown scheme, no bucket, its backend not installed), or None."""
    scheme, _, rest = url.partition("://")
    if scheme not in _BACKENDS:
        return (f"{url!r}: object storage by {scheme}:// is not supported; give an s3:// URL (any S3-compatible "
                "store, its address in AWS_ENDPOINT_URL) or a local directory")
    if not rest.strip("/") or "/" not in rest.strip("/"):
        return f"{url!r} names no folder in a bucket: give s3://<bucket>/<folder>, e.g. s3://my-bucket/runs/kuhn/pool"
    try:
        __import__(_BACKENDS[scheme])
    except ImportError:
        return (f"{url!r} needs the {_BACKENDS[scheme]} package, which is not installed: "
                "pip install 'seedleague[s3]'")
    return None


def join(url: str, *parts: str) -> str:
    return "/".join([url.rstrip("/"), *parts])


def cache_dir(url: str) -> str:
    """This machine's mirror of `url`: $XDG_CACHE_HOME (default ~/.cache)/seedleague/objects/<scheme>/<bucket>/<key>.
    Steps read from the store stay there, so a host reads each snapshot from the store once."""
    scheme, _, rest = url.partition("://")
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "seedleague", "objects", scheme, *[p for p in rest.split("/") if p not in ("", ".", "..")])


def mirror(url: str) -> str:
    """This machine's mirror of checkpoint directory `url` with every complete step of the store in it (the
    ones already there are not copied again): for readers that open a local directory with orbax themselves."""
    remote = RemoteSteps(url)
    local = cache_dir(remote.url)
    os.makedirs(local, exist_ok=True)
    for step in remote.steps():
        remote.download(step, local)
    return local


def folders(url: str) -> list[str]:
    """The names of the folders directly under `url` (a pool's players), sorted; [] when there are none."""
    remote = RemoteSteps(url)
    names = remote._call("list", remote.url, remote._names, reading=True)
    return sorted(name for name in names if not name.endswith(MARKER_SUFFIX))


def _filesystem(url: str) -> Any:
    """The fsspec filesystem for `url`; a fresh instance, so credentials and endpoint are read from the
    environment now (fsspec otherwise caches instances across the process's life)."""
    import fsspec  # an optional dependency: only object storage needs it

    return fsspec.filesystem(url.partition("://")[0], skip_instance_cache=True)


class RemoteSteps:
    """The steps of one checkpoint directory in object storage: list, upload, download, delete."""

    def __init__(self, url: str):
        problem = url_problem(url)
        if problem:
            raise ValueError(f"checkpoint directory {problem}")
        self.url = url.rstrip("/")
        self._fs = _filesystem(self.url)

    def steps(self) -> list[int]:
        """Every step whose `.complete` marker is in the store, ascending."""
        names = self._call("list the checkpoints in", self.url, self._names, reading=True)
        found = [name[:-len(MARKER_SUFFIX)] for name in names if name.endswith(MARKER_SUFFIX)]
        return sorted(int(stem) for stem in found if stem.isdigit())

    def has(self, step: int) -> bool:
        return step in self.steps()

    def upload(self, step: int, local_step_dir: str) -> int:
        """Copy the local step folder to `<url>/<step>/`, then put its marker; returns the bytes uploaded."""
        files = sorted(os.path.relpath(os.path.join(d, f), local_step_dir)
                       for d, _, names in os.walk(local_step_dir) for f in names)
        size = sum(os.path.getsize(os.path.join(local_step_dir, f)) for f in files)
        target = join(self.url, str(step))
        marker = json.dumps({"step": step, "files": len(files), "bytes": size}).encode()

        def put() -> None:
            self._fs.put([os.path.join(local_step_dir, f) for f in files], [join(target, f) for f in files])
            self._fs.pipe_file(join(self.url, f"{step}{MARKER_SUFFIX}"), marker)  # last: the step is now visible

        self._call("write a checkpoint to", target, put)
        return size

    def download(self, step: int, local_dir: str) -> str:
        """`<local_dir>/<step>`, copied from the store unless it is already there; FileNotFoundError if the
        store has no complete step `step`."""
        final = os.path.join(local_dir, str(step))
        if os.path.isdir(final):
            return final
        source = join(self.url, str(step))
        marker = self._call("read a checkpoint from", source, lambda: self._read_marker(step), reading=True)
        partial = os.path.join(local_dir, f"{step}{_DOWNLOAD_SUFFIX}-{uuid.uuid4().hex[:8]}")
        try:
            self._call("read a checkpoint from", source, lambda: self._get(source, partial), reading=True)
            count = sum(len(names) for _, _, names in os.walk(partial))
            if count != marker["files"]:
                raise StorageError(f"checkpoint {source} in the store has {count} files, its marker says "
                                   f"{marker['files']}: its files changed after it was written", source)
            try:
                os.rename(partial, final)
            except OSError:  # another process on this machine copied it first: keep theirs
                if not os.path.isdir(final):
                    raise
        finally:
            shutil.rmtree(partial, ignore_errors=True)
        return final

    def delete(self, step: int) -> None:
        """Remove step `step` from the store: its marker first, so no reader starts on what is being deleted."""
        target = join(self.url, str(step))

        def remove() -> None:
            self._fs.rm_file(join(self.url, f"{step}{MARKER_SUFFIX}"))
            if self._fs.exists(target):
                self._fs.rm(target, recursive=True)

        self._call("delete a checkpoint from", target, remove)

    def delete_marker(self, step: int) -> None:
        """Unlist step `step` (a damaged one): its files stay in the store for a look."""
        self._call("set aside a checkpoint in", join(self.url, str(step)),
                   lambda: self._fs.rm_file(join(self.url, f"{step}{MARKER_SUFFIX}")))

    def remove_unfinished(self) -> None:
        """Delete step folders without a marker (uploads killed midway); only the URL's one writer may call this."""
        names = self._call("list the checkpoints in", self.url, self._names, reading=True)
        complete = {name for name in names if name.endswith(MARKER_SUFFIX)}
        for name in names:
            if name.isdigit() and f"{name}{MARKER_SUFFIX}" not in complete:
                log.warning("removing the unfinished checkpoint %s (an upload that did not complete)",
                            join(self.url, name))
                self._call("delete a checkpoint from", join(self.url, name),
                           lambda: self._fs.rm(join(self.url, name), recursive=True))

    def _names(self) -> list[str]:
        self._fs.invalidate_cache(self.url)  # other hosts add steps: list the store, not s3fs's memory of it
        try:
            entries = self._fs.ls(self.url, detail=False)
        except FileNotFoundError:  # nothing written under the URL yet (a bucket that is missing says so below)
            self._fs.ls(self.url.partition("://")[2].split("/")[0], detail=False)
            return []
        return [entry.rstrip("/").rsplit("/", 1)[-1] for entry in entries]

    def _read_marker(self, step: int) -> dict:
        try:
            return json.loads(self._fs.cat_file(join(self.url, f"{step}{MARKER_SUFFIX}")))
        except FileNotFoundError:
            raise FileNotFoundError(f"no checkpoint {step} in {self.url}") from None

    def _get(self, source: str, partial: str) -> None:
        self._fs.invalidate_cache(source)
        self._fs.get(source + "/", partial + "/", recursive=True)

    def _call(self, what: str, target: str, action: Callable[[], T], reading: bool = False) -> T:
        """`action()`, its store faults as one StorageError naming `target` and the fix; a missing step stays
        FileNotFoundError (the caller decides what missing means)."""
        try:
            return action()
        except (StorageError, ValueError):
            raise
        except FileNotFoundError as error:
            if "bucket" in str(error).lower():
                raise object_store_error(error, target, what) from None
            raise
        except Exception as error:  # s3fs, aiobotocore and aiohttp raise many kinds for one fault
            raise object_store_error(error, target, what) from None
