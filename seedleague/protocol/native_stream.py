"""The native stream: a Python worker's lockstep exchange done in C++ (native_stream.cc), one thread, no GIL.

grpcio's blocking stream passes each message through three threads (the caller, the request iterator's
consumer, the channel's poller): on a busy machine those hand-overs cost a worker more CPU per round trip
than stepping 64 CartPole envs (benchmarks/README.md, "The native stream"). `make native-stream` builds
build/native/libseedleague_stream.so; `WorkerClient` then exchanges each step through it (ClientConfig's
`native_stream`: "auto" where it is built, "on" to require it, "off" for grpcio). The handshake stays on
grpcio; messages are still built and parsed in Python, so both clients send the same bytes.

`ClientConfig.native_stream_library` (a worker's `--native-stream-library`, whose default is the
SEEDLEAGUE_NATIVE_STREAM environment variable) points at the library elsewhere.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from pathlib import Path
from typing import Any, Optional, Sequence

import grpc

log = logging.getLogger(__name__)

LIBRARY_ENV = "SEEDLEAGUE_NATIVE_STREAM"  # read by the workers' command line, never here
DEFAULT_LIBRARY = Path(__file__).resolve().parents[2] / "build" / "native" / "libseedleague_stream.so"
BUILD_HINT = "build it with `make native-stream` (needs `make cpp-deps`), or use native_stream='off' (--native-stream off)"
MODES = ("auto", "on", "off")
_DETAILS_BYTES = 1024
_ANSWERED, _ENDED, _WAITING = 0, 1, 2  # sls_send's and sls_wait's results
WAIT_SLICE_MS = 50  # the longest a wait stays in C: signal handlers (a worker's SIGTERM) run between slices
_STATUS_CODES = {code.value[0]: code for code in grpc.StatusCode}


class NativeStreamUnavailable(RuntimeError):
    """native_stream='on' but the library is missing or does not load."""


class NativeStreamError(grpc.RpcError):
    """The native stream ended with a non-OK status: the same `code()` and `details()` as grpcio's errors, so
    `classify_rpc_error` sorts it into ConnectionLost or HostRefused alike."""

    def __init__(self, code: grpc.StatusCode, details: str):
        super().__init__(f"{code.name}: {details}")
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


_libraries: dict[Path, ctypes.CDLL | str] = {}  # path -> the loaded library, or why it is unavailable
_libraries_lock = threading.Lock()


def library_path(path: str = "") -> Path:
    """`path`, or where `make native-stream` builds the library in this checkout."""
    return Path(path) if path else DEFAULT_LIBRARY


def load_library(path: str = "") -> ctypes.CDLL | str:
    """The native stream library at `path` (default: `DEFAULT_LIBRARY`), or why it is unavailable (not built,
    does not load); loaded once per path."""
    where = library_path(path)
    with _libraries_lock:
        if where not in _libraries:
            if not where.exists():
                _libraries[where] = f"{where} is not built"
            else:
                try:
                    _libraries[where] = _declare(ctypes.CDLL(str(where)))
                except (OSError, AttributeError) as error:
                    _libraries[where] = f"{where} does not load: {error}"
        return _libraries[where]


def wanted(mode: str, path: str = "") -> bool:
    """Whether a client in `mode` exchanges through the native stream (the library at `path`);
    NativeStreamUnavailable for 'on' without it."""
    if mode == "off":
        return False
    library = load_library(path)
    if not isinstance(library, str):
        return True
    if mode == "on":
        raise NativeStreamUnavailable(f"native_stream='on' but {library}: {BUILD_HINT}")
    return False


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    c_str_array = ctypes.POINTER(ctypes.c_char_p)
    lib.sls_open.restype = ctypes.c_void_p
    lib.sls_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, c_str_array, c_str_array,
                             ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
    lib.sls_send.restype = ctypes.c_int
    lib.sls_send.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.sls_wait.restype = ctypes.c_int
    lib.sls_wait.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                             ctypes.POINTER(ctypes.c_size_t)]
    lib.sls_status.restype = ctypes.c_int
    lib.sls_status.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.sls_cancel.restype = None
    lib.sls_cancel.argtypes = [ctypes.c_void_p]
    lib.sls_close.restype = None
    lib.sls_close.argtypes = [ctypes.c_void_p]
    return lib


class NativeStream:
    """One open stream: `exchange` a request message for its answer (the calling thread waits without the GIL,
    coming back to the interpreter every WAIT_SLICE_MS); `cancel` from any thread ends it (a waiting exchange
    raises CANCELLED). Not for two stepping threads."""

    kind = "native stream"

    def __init__(self, target: str, method: str, answer_type: Any, metadata: Sequence[tuple[str, str]] = (),
                 root_certificates: Optional[bytes] = None, max_message_bytes: int = 64 * 2**20, library: str = ""):
        lib = load_library(library)
        if isinstance(lib, str):
            raise NativeStreamUnavailable(f"{lib}: {BUILD_HINT}")
        self._lib, self._answer_type = lib, answer_type
        keys = (ctypes.c_char_p * max(1, len(metadata)))(*[k.encode() for k, _ in metadata])
        values = (ctypes.c_char_p * max(1, len(metadata)))(*[v.encode() for _, v in metadata])
        error = ctypes.create_string_buffer(_DETAILS_BYTES)
        self._handle = lib.sls_open(target.encode(), root_certificates or b"", method.encode(), keys, values,
                                    len(metadata), max_message_bytes, error, _DETAILS_BYTES)
        if not self._handle:
            raise NativeStreamError(grpc.StatusCode.UNAVAILABLE, error.value.decode(errors="replace"))
        self._answer, self._answer_len = ctypes.c_void_p(), ctypes.c_size_t()  # where sls_wait puts the answer
        self._answer_refs = (ctypes.byref(self._answer), ctypes.byref(self._answer_len))

    def exchange(self, message: Any) -> Any:
        """Send `message`, return the host's answer parsed as `answer_type`. NativeStreamError if the stream
        failed, StopIteration if the host ended it with OK (as grpcio's response iterator does)."""
        request = message.SerializeToString()
        lib, handle = self._lib, self._handle
        answer, answer_len = self._answer_refs
        state = lib.sls_send(handle, request, len(request))
        while state == _WAITING:
            state = lib.sls_wait(handle, WAIT_SLICE_MS, answer, answer_len)
        if state == _ENDED:
            details = ctypes.create_string_buffer(_DETAILS_BYTES)
            code = _STATUS_CODES.get(lib.sls_status(handle, details, _DETAILS_BYTES), grpc.StatusCode.UNKNOWN)
            if code == grpc.StatusCode.OK:
                raise StopIteration
            raise NativeStreamError(code, details.value.decode(errors="replace"))
        return self._answer_type.FromString(ctypes.string_at(self._answer, self._answer_len.value))

    def cancel(self) -> None:
        if self._handle:
            self._lib.sls_cancel(self._handle)

    def __del__(self):
        handle, self._handle = getattr(self, "_handle", None), None
        if handle:
            self._lib.sls_close(handle)
