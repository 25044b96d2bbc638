"""What a run says when its disk lets it down: one line naming the path and the fix.

Every writer of a run (TensorBoard scalars, checkpoints, league snapshots, summary.json) turns the
OSError it meets into a `StorageError` with `storage_error`, and the run stops on the first one:

    try:
        write(path)
    except OSError as error:
        raise storage_error(error, path, "the TensorBoard scalars") from None

`seedleague` prints a StorageError as one console line and exits 1. `check_writable` refuses a
run directory that cannot be written before anything starts. Object storage (seedleague.object_store) has
its own faults, and `object_store_error` says each in the same one line.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import uuid
from typing import Optional


class StorageError(Exception):
    """A run's file could not be written or read back; the message names the path and what to change."""

    def __init__(self, message: str, path: str = ""):
        super().__init__(message)
        self.path = path


def _free_space(path: str) -> str:
    """Free bytes on the filesystem holding `path`, as text ("" if unknown)."""
    directory = path
    while directory and not os.path.exists(directory):
        directory = os.path.dirname(directory)
    try:
        free = shutil.disk_usage(directory or ".").free
    except OSError:
        return ""
    return f" ({free / 2**20:.1f} MiB free)"


def fix_for(error: OSError, path: str) -> str:
    """What the user should change after `error` writing `path`."""
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return (f"the disk holding {path} is full{_free_space(path)}: free space there, or give a --run-dir on "
                "another disk (then --resume continues from the newest checkpoint)")
    if error.errno == errno.EROFS:
        return f"{path} is on a read-only filesystem: give a --run-dir you can write to"
    if error.errno in (errno.EACCES, errno.EPERM):
        return f"no permission to write {path}: give a --run-dir you can write to, or change its permissions"
    return f"check the disk holding {path}"


def storage_error(error: OSError, path: str, what: str) -> StorageError:
    """`error` (met writing `what` to `path`) as a StorageError with one line naming the path and the fix."""
    reason = error.strerror or str(error)
    return StorageError(f"could not write {what} to {path}: {reason}; {fix_for(error, path)}", path)


def check_writable(directory: str, flag: str = "--run-dir") -> None:
    """ValueError naming `flag` if `directory` is a file or cannot be created or written to."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise ValueError(f"{flag} {directory} is a file, not a directory: give a directory (it is created if missing)")
    try:
        os.makedirs(directory, exist_ok=True)
        probe = os.path.join(directory, f".write-test-{uuid.uuid4().hex[:8]}")
        with open(probe, "w") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as error:
        raise ValueError(f"{flag} {directory} cannot be written ({error.strerror or error}): "
                         f"{fix_for(error, directory)}") from None


_DISK_REFUSALS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO)
# tensorstore (orbax's array writer) reports the OS's refusal inside a ValueError's text, not as an OSError
_TENSORSTORE_OS_ERROR = re.compile(r"os_error_code='(\d+)'")


def is_storage_failure(error: BaseException) -> Optional[OSError]:
    """The OSError behind `error` (itself, or its cause or context; or the one a tensorstore error names in its text)
    when a disk refused, else None."""
    for link in _chain(error):
        if isinstance(link, OSError) and link.errno in _DISK_REFUSALS:
            return link
        found = _TENSORSTORE_OS_ERROR.search(str(link)) if isinstance(link, ValueError) else None
        if found and int(found.group(1)) in _DISK_REFUSALS:
            code = int(found.group(1))
            return OSError(code, os.strerror(code))
    return None


def _endpoint() -> str:
    """Where the object store is, as the environment tells botocore (AWS itself when it does not say)."""
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or "AWS S3"


def _one_line(error: BaseException) -> str:
    text = re.sub(r"\?[^\s\"']*", "", " ".join(str(error).split())) or type(error).__name__  # no request's query
    return text if len(text) <= 200 else text[:197] + "..."


def object_store_error(error: BaseException, url: str, what: str) -> StorageError:
    """`error` (met when trying to `what` `url`, e.g. "write a checkpoint to") as one line naming the URL, the
    store's address and the fix. Credentials are never in it: only the names of the variables that hold them."""
    endpoint = _endpoint()
    reason = _one_line(error)
    names = {type(e).__name__ for e in _chain(error)}
    if isinstance(error, PermissionError) or any(n in reason for n in ("AccessDenied", "InvalidAccessKeyId",
                                                                      "SignatureDoesNotMatch", "security token")):
        fix = ("the store refused this machine's credentials: check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
               "(and AWS_SESSION_TOKEN) in the environment of every process of the run")
    elif isinstance(error, FileNotFoundError) and "bucket" in reason.lower():
        bucket = url.partition("://")[2].split("/")[0]
        fix = f"the store at {endpoint} has no bucket {bucket!r}: create it, or give a URL in a bucket that exists"
    elif names & {"EndpointConnectionError", "ConnectionError", "ConnectionRefusedError", "ClientConnectorError",
                  "ConnectTimeoutError", "ServerDisconnectedError", "ClientOSError", "ReadTimeoutError"}:
        fix = (f"no answer from the object store at {endpoint}: start it, or set AWS_ENDPOINT_URL to where it "
               "runs (then --resume continues from the newest checkpoint)")
    else:
        fix = (f"the object store at {endpoint} answered with an error: check the store (its status and logs), "
               "then --resume continues from the newest checkpoint")
    return StorageError(f"could not {what} {url}: {reason}; {fix}", url)


def _chain(error: BaseException) -> list[BaseException]:
    chain, seen = [], 0
    while error is not None and seen < 8:
        chain.append(error)
        error = error.__cause__ or error.__context__
        seen += 1
    return chain


def write_json(path: str, data: dict, indent: Optional[int] = None) -> None:
    """`data` as JSON at `path`, atomically: written beside it and renamed, so a reader never sees half a file."""
    with open(path + ".tmp", "w") as f:
        json.dump(data, f, indent=indent)
        f.write("\n")
    os.replace(path + ".tmp", path)
