"""Which system packages the native builds need, so that their tests skip with one reason where they are absent.

`make deps` (root, apt-get) installs them; `make test` as a user without them builds nothing native and says so."""

from __future__ import annotations

import shutil
import subprocess

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
