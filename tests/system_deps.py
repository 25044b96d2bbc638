"""Which system packages the native builds need, so that their tests skip with one reason where they are absent.

`make deps` (root, apt-get) installs them; `make test` as a user without them builds nothing native and says so."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

import filelock
import pytest

from seedleague.protocol import native_stream

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CPP_TOOLS = ("g++", "pkg-config", "protoc", "grpc_cpp_plugin")


def missing_cpp_toolchain() -> str:
    """What of the C++ gRPC toolchain (`make cpp-deps`) is missing, or "" when everything is there."""
    missing = [tool for tool in CPP_TOOLS if shutil.which(tool) is None]
    if "pkg-config" not in missing:
        for package in ("grpc++", "protobuf"):
            if subprocess.run(["pkg-config", "--exists", package]).returncode != 0:
                missing.append(f"{package} (pkg-config)")
    return ", ".join(missing)


def cpp_skip_reason() -> str:
    """A test's skip reason when the toolchain is missing, or "" when the native builds can run."""
    missing = missing_cpp_toolchain()
    return f"no C++ gRPC toolchain ({missing} missing): `make deps` as root installs it" if missing else ""


@functools.cache  # once a process: a skip or a failure raises, so only a finished build is remembered
def build_native_stream() -> None:
    """Skip without the toolchain; else `make native-stream` (nothing to do where `make test` built it) and fail the
    test with the build's output where it does not build. Both pytest processes may ask at once: one builds."""
    if cpp_skip_reason():
        pytest.skip(cpp_skip_reason())
    os.makedirs(os.path.join(ROOT, "build"), exist_ok=True)
    with filelock.FileLock(os.path.join(ROOT, "build", ".native-stream.lock")):
        result = subprocess.run(["make", "native-stream"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    native_stream._libraries.pop(native_stream.DEFAULT_LIBRARY, None)  # asked before the build: ask again
    library = native_stream.load_library()
    if result.returncode != 0 or isinstance(library, str):
        pytest.fail("`make native-stream` failed (run `make cpp-deps` as root for gRPC):\n"
                    + result.stdout[-4000:] + result.stderr[-4000:] + str(library), pytrace=False)
