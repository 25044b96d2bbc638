"""seedleague.compile_cache: where the persistent compilation cache lives, and that a second process reuses it."""

import os
import subprocess
import sys

from seedleague import compile_cache


def test_the_cache_directory_follows_the_environment(tmp_path):
    home = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    assert compile_cache.directory(home) == str(tmp_path / "xdg" / "seedleague" / "jax")
    assert compile_cache.directory({**home, "SEEDLEAGUE_COMPILE_CACHE": str(tmp_path / "mine")}) == str(tmp_path / "mine")
    assert compile_cache.directory({**home, "SEEDLEAGUE_COMPILE_CACHE": "off"}) is None
    # JAX's own variable wins, so the test suite's per-run cache is the one a `seedleague train` child uses
    assert compile_cache.directory({"JAX_COMPILATION_CACHE_DIR": "/x", "SEEDLEAGUE_COMPILE_CACHE": "off"}) == "/x"


COMPILE = """
import sys
import jax, jax.numpy as jnp
from seedleague import compile_cache
print(compile_cache.enable())
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.jit(lambda x: jnp.tanh(x @ x.T).sum())(jnp.ones((8, 8))).block_until_ready()
"""


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _run(env) -> str:
    done = subprocess.run([sys.executable, "-c", COMPILE], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_second_process_finds_what_the_first_compiled(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env["SEEDLEAGUE_COMPILE_CACHE"] = str(tmp_path / "cache")
    assert _run(env) == str(tmp_path / "cache")
    entries = sorted(os.listdir(tmp_path / "cache"))
    assert entries, "the first process wrote nothing to the cache"
    executables = [name for name in entries if name.endswith("-cache")]
    for name in executables:  # zstd's frame, not zlib's: JAX compresses with zstandard, a dependency, where installed
        with open(tmp_path / "cache" / name, "rb") as f:
            assert f.read(4) == ZSTD_MAGIC, name
    _run(env)
    assert sorted(os.listdir(tmp_path / "cache")) == entries  # the same computation: found, not written again


def test_off_turns_nothing_on_and_creates_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    monkeypatch.setenv("SEEDLEAGUE_COMPILE_CACHE", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert compile_cache.enable() is None
    assert "JAX_COMPILATION_CACHE_DIR" not in os.environ and not (tmp_path / "seedleague").exists()


def test_an_unusable_directory_leaves_the_cache_off_and_says_why(tmp_path, monkeypatch, caplog):
    (tmp_path / "file").write_text("")
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)
    monkeypatch.setenv("SEEDLEAGUE_COMPILE_CACHE", str(tmp_path / "file" / "cache"))  # under a file: cannot exist
    assert compile_cache.enable() is None
    assert "no compilation cache" in caplog.text and "SEEDLEAGUE_COMPILE_CACHE" in caplog.text


def test_an_entry_left_half_written_by_a_killed_process_is_removed_so_later_writes_work(tmp_path):
    """JAX writes an entry's executable, then its access time; a process killed between the two left an entry that
    made every later write on the machine fail with a FileNotFoundError warning (its eviction reads every access
    time first)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "jit_x-deadbeef-cache").write_bytes(b"half")  # no jit_x-deadbeef-atime
    (cache / "jit_y-feed-cache").write_bytes(b"whole")
    (cache / "jit_y-feed-atime").write_bytes(b"\0" * 8)
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    env["SEEDLEAGUE_COMPILE_CACHE"] = str(cache)
    done = subprocess.run([sys.executable, "-c", COMPILE], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Error writing persistent compilation cache" not in done.stderr, done.stderr
    names = set(os.listdir(cache))
    assert "jit_x-deadbeef-cache" not in names and {"jit_y-feed-cache", "jit_y-feed-atime"} <= names
    assert any(n.startswith("jit__lambda") and n.endswith("-atime") for n in names)  # the compile was kept
    assert compile_cache.repair(str(cache)) == 0
