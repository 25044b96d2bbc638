"""The model pool and checkpoints on S3-compatible object storage, against a real S3 server on loopback.

The fixtures start moto's standalone server (`python -m moto.server`, the one s3fs's own tests use) as a
child process and point the standard variables (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...) at it; the code
under test is given only `s3://` URLs. A store that answers nothing but errors is a 20-line HTTP server.
"""

import http.server
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto")

from seedleague.checkpoint import Checkpointer  # noqa: E402
from seedleague.checkpoint_config import CheckpointConfig
from seedleague.league.model_pool import ModelPool  # noqa: E402
from seedleague.storage import StorageError  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECRET = "s3cr3t-never-printed"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    """moto's S3 server as a child process on a loopback port."""

    def __init__(self, tmp, auth: bool = False):
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, **({"INITIAL_NO_AUTH_ACTION_COUNT": "0"} if auth else {}))
        self.log = open(os.path.join(tmp, f"moto-{self.port}.log"), "w")
        self.process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                        stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 60
        while True:  # until it accepts connections (or died)
            assert self.process.poll() is None, open(self.log.name).read()
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "moto's S3 server did not start"
                time.sleep(0.1)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.log.close()


def _env(endpoint: str, cache: str) -> dict:
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_DEFAULT_REGION": "us-east-1", "AWS_MAX_ATTEMPTS": "2", "XDG_CACHE_HOME": cache}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One S3 server for the module, with bucket "pool" made; the environment points at it."""
    tmp = str(tmp_path_factory.mktemp("s3"))
    server = S3Server(tmp)
    env = _env(server.endpoint, os.path.join(tmp, "cache"))
    saved = {name: os.environ.get(name) for name in env}  # only these: other modules' tests share the process
    os.environ.update(env)
    import s3fs

    s3fs.S3FileSystem(skip_instance_cache=True).mkdir("pool")
    yield server
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    server.stop()


def _fs():
    import s3fs

    return s3fs.S3FileSystem(skip_instance_cache=True)


class State(NamedTuple):
    """A train state's shape as the pool sees it: arrays and a learner step."""

    w: Any
    step: Any


def _state(seed: int, size: int = 16) -> State:
    rng = np.random.default_rng(seed)
    return State(jnp.asarray(rng.normal(size=(size, size)), jnp.float32), jnp.asarray(seed, jnp.int32))


def _other_host_cache(tmp_path, monkeypatch) -> None:
    """What follows runs as another machine would: its own empty cache of the store."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "other-cache"))


def test_a_snapshot_written_by_one_host_is_read_by_another_and_then_from_its_cache(store, tmp_path, monkeypatch):
    url = "s3://pool/round-trip/pool"
    writer = ModelPool(url)
    assert writer.save("main", _state(3), {"env_steps": 30}) == "main:000003"
    writer.save("main", _state(5), {"env_steps": 50})
    writer.close()

    _other_host_cache(tmp_path, monkeypatch)
    reader = ModelPool(url)
    assert reader.keys("main") == ["main:000003", "main:000005"]
    state, meta = reader.restore("main:000005", _state(0))
    np.testing.assert_array_equal(state.w, _state(5).w)
    assert meta["env_steps"] == 50 and reader.meta("main:000003")["env_steps"] == 30
    # Cached: with the step's files gone from the store (its marker kept), this host still reads it.
    _fs().rm(f"{url}/main/5", recursive=True)
    again, _ = reader.restore("main:000005", _state(0))
    np.testing.assert_array_equal(again.w, _state(5).w)
    assert os.path.isdir(tmp_path / "other-cache" / "seedleague" / "objects" / "s3" / "pool" / "round-trip" / "pool"
                         / "main" / "5")
    with pytest.raises(FileNotFoundError, match="no checkpoint 7"):
        reader.restore("main:000007", _state(0))
    reader.close()


def test_checkpoints_in_the_store_rotate_and_restore_the_newest(store, tmp_path, monkeypatch):
    url = "s3://pool/rotate/checkpoints"
    checkpointer = Checkpointer(CheckpointConfig(directory=url, max_to_keep=2), writer=True)
    for step in (1, 2, 3):
        checkpointer.save(step, _state(step), {"env_steps": step})
    assert checkpointer.steps() == [2, 3]
    assert not _fs().exists(f"{url}/1") and not _fs().exists(f"{url}/1.complete")
    _other_host_cache(tmp_path, monkeypatch)
    reader = Checkpointer(CheckpointConfig(directory=url))
    state, meta = reader.restore(reader.latest_step(), _state(0))
    np.testing.assert_array_equal(state.w, _state(3).w)


WRITER = textwrap.dedent("""
    # A host saving snapshot main:2 whose upload stops after two files (the store is slow); killed by the test.
    import asyncio, sys
    import s3fs
    sys.path.insert(0, sys.argv[2])
    from test_object_store import _state as state
    from seedleague.league.model_pool import ModelPool

    put_file = s3fs.S3FileSystem._put_file
    started = []

    async def slow_put_file(self, lpath, rpath, *args, **kwargs):
        if "/main/2/" in rpath:
            started.append(rpath)
            if len(started) > 2:  # every later file of main:2 waits (the test kills this process meanwhile)
                print("stalled", flush=True)
                await asyncio.sleep(600)
        await put_file(self, lpath, rpath, *args, **kwargs)
        if "/main/2/" in rpath:
            print("uploaded", rpath, flush=True)

    s3fs.S3FileSystem._put_file = slow_put_file
    pool = ModelPool(sys.argv[1])
    pool.save("main", state(1), {"env_steps": 1})
    print("saved main:1", flush=True)
    pool.save("main", state(2), {"env_steps": 2})
""")


def test_a_writer_killed_mid_upload_leaves_no_snapshot_that_is_listed_or_read(store, tmp_path, monkeypatch):
    url = "s3://pool/killed/pool"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    writer = subprocess.Popen([sys.executable, str(script), url, os.path.join(ROOT, "tests")], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              env=dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "writer-cache")))
    _other_host_cache(tmp_path, monkeypatch)
    reader = ModelPool(url)
    lines = []
    for line in writer.stdout:
        lines.append(line)
        if line.startswith("uploaded"):  # mid-upload: main:2 is partly in the store and must not be listed
            assert reader.keys("main") == ["main:000001"]
        if sum(seen.startswith("uploaded") for seen in lines) == 2 and any(s.startswith("stalled") for s in lines):
            break
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    assert sum(line.startswith("uploaded") for line in lines) == 2, "".join(lines)
    assert any("/killed/pool/main/2/" in key for key in _fs().find(url))  # the half-written snapshot is there
    assert reader.keys("main") == ["main:000001"]
    with pytest.raises(FileNotFoundError):
        reader.restore("main:000002", _state(0))

    # The player's next process removes the half-written upload and saves main:2 whole; readers then see it.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "writer-cache"))
    restarted = ModelPool(url)
    restarted.save("main", _state(2), {"env_steps": 2})
    _other_host_cache(tmp_path, monkeypatch)
    assert reader.keys("main") == ["main:000001", "main:000002"]
    state, _ = reader.restore("main:000002", _state(0))
    np.testing.assert_array_equal(state.w, _state(2).w)


def _one_line_naming(error: StorageError, url: str, fix: str) -> str:
    message = str(error)
    assert "\n" not in message and url in message and fix in message, message
    assert SECRET not in message
    return message


def test_a_stopped_store_a_missing_bucket_and_refused_credentials_are_each_one_line(store, tmp_path, monkeypatch,
                                                                                   caplog):
    # no bucket
    with pytest.raises(StorageError) as missing:
        Checkpointer(CheckpointConfig(directory="s3://no-such-bucket/run/checkpoints")).steps()
    _one_line_naming(missing.value, "s3://no-such-bucket/run/checkpoints", "has no bucket 'no-such-bucket'")

    # credentials refused: a server that checks them, and this key is not one it knows
    checking = S3Server(str(tmp_path), auth=True)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", checking.endpoint)
        with pytest.raises(StorageError) as refused:
            ModelPool("s3://pool/auth/pool").save("main", _state(1), {})
        _one_line_naming(refused.value, "s3://pool/auth/pool/main", "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
    finally:
        checking.stop()

    # a store that stops while a run uses it: the snapshot saved before it stopped stays the newest listed
    stopping = S3Server(str(tmp_path))
    monkeypatch.setenv("AWS_ENDPOINT_URL", stopping.endpoint)
    _fs().mkdir("pool")
    pool = ModelPool("s3://pool/stopping/pool")
    pool.save("main", _state(1), {})
    stopping.stop()
    with caplog.at_level("DEBUG"), pytest.raises(StorageError) as stopped:
        pool.save("main", _state(2), {})
    message = _one_line_naming(stopped.value, "s3://pool/stopping/pool/main", "no answer from the object store at "
                               f"{stopping.endpoint}: start it, or set AWS_ENDPOINT_URL")
    assert message.startswith("could not ")
    assert SECRET not in caplog.text


class _ErrorsOnly(http.server.BaseHTTPRequestHandler):
    """An S3 endpoint that answers every request with 500 InternalError."""

    def _error(self):
        body = (b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>InternalError</Code>"
                b"<Message>We encountered an internal error. Please try again.</Message></Error>")
        self.send_response(500)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _error

    def log_message(self, *args):
        pass


def test_a_store_answering_errors_is_one_line_and_nothing_is_listed_as_saved(store, monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ErrorsOnly)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
        with pytest.raises(StorageError) as answered:
            Checkpointer(CheckpointConfig(directory="s3://pool/errors/checkpoints"), writer=True)
        _one_line_naming(answered.value, "s3://pool/errors/checkpoints",
                         f"the object store at {endpoint} answered with an error")
    finally:
        server.shutdown()


def test_a_bad_url_is_refused_with_what_to_give_instead():
    with pytest.raises(ValueError, match="give s3://<bucket>/<folder>"):
        ModelPool("s3://only-a-bucket").save("main", _state(1), {})
    with pytest.raises(ValueError, match="gs:// is not supported"):
        Checkpointer(CheckpointConfig(directory="gs://bucket/run"))


def _wait_for(condition, timeout_s: float, what: str, run: subprocess.Popen, log_path) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert run.poll() is None, f"the run ended waiting for {what}:\n{open(log_path).read()[-4000:]}"
        assert time.monotonic() < deadline, f"no {what} in {timeout_s} s:\n{open(log_path).read()[-4000:]}"
        time.sleep(0.5)


def test_a_league_run_keeps_its_pool_in_the_store_and_stops_in_one_line_when_the_store_stops(store, tmp_path,
                                                                                             monkeypatch):
    from test_chaos import LEAGUE_RUN, stored_results
    from test_e2e import SEEDLEAGUE

    from seedleague.api import load_policy, load_snapshot
    from seedleague.output import average_policy
    from seedleague.league.config import LeagueConfig
    from seedleague.league.service import League

    import s3fs

    server = S3Server(str(tmp_path))  # its own: this test stops it mid-run
    fs = s3fs.S3FileSystem(endpoint_url=server.endpoint, skip_instance_cache=True)
    fs.mkdir("runs")
    url = "s3://runs/kuhn/pool"
    run_dir, log_path = str(tmp_path / "run"), str(tmp_path / "train.log")
    env = dict(os.environ, **_env(server.endpoint, str(tmp_path / "run-cache")))
    run = subprocess.Popen(SEEDLEAGUE + ["--log-level", "INFO", "train", "--env", "openspiel:kuhn_poker",
                                         "--run-dir", run_dir, "--max-seconds", "300", "--league.pool-dir", url,
                                         "--players", "main,exploiter:main_exploiter",
                                         "--league_config.exploiter_min_steps", "20"] + LEAGUE_RUN,
                           cwd=ROOT, env=env, stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
    try:
        def snapshots(player: str) -> list[str]:
            fs.invalidate_cache()  # s3fs remembers listings; the run adds snapshots
            return sorted(fs.glob(f"{url}/{player}/*.complete"), key=lambda key: int(key.rsplit("/", 1)[-1][:-9]))

        acks = lambda: re.findall(r"(\d+) acknowledged in all", open(log_path).read())
        _wait_for(lambda: snapshots("main") and snapshots("exploiter") and acks(), 150,
                  "snapshots of both players in the store and acknowledged results", run, log_path)
        # Another machine (its own cache, nothing shared but the store) reads one of main's snapshots.
        monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "other-machine"))
        step = int(snapshots("main")[-1].rsplit("/", 1)[-1][:-len(".complete")])
        policy = load_policy(f"{url}/main", step)
        assert policy.step == step
        assert not os.path.exists(os.path.join(run_dir, "pool"))  # the pool is in the store only
        # What reads a run's snapshots finds them through the URL the run recorded in pool.url.
        assert load_snapshot(run_dir, f"main:{step:06d}").step == step
        assert average_policy(run_dir, 1.0, "main", param_average=False).load(0)

        server.stop()  # the store goes away while the run uses it
        run.wait(180)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        server.stop()
    output = open(log_path).read()
    assert run.returncode == 1, output[-4000:]
    faults = [line for line in output.splitlines() if "no answer from the object store" in line]
    assert faults and re.search(rf"could not .* {url}/\S+: .*no answer from the object store at {server.endpoint}: "
                                "start it, or set AWS_ENDPOINT_URL", faults[0]), output[-4000:]
    assert "Traceback" not in output.split("no answer from the object store")[0][-2000:]
    # Every result the league acknowledged is in its database; its snapshots name the store.
    db = os.path.join(run_dir, "league", "league.sqlite")
    assert stored_results(db, "main")[1] >= max(int(n) for n in acks())
    with League(LeagueConfig(), db) as league:
        assert {s.player for s in league.snapshots()} == {"main", "exploiter"}
    with open(os.path.join(run_dir, "pool.url")) as f:
        assert f.read().strip() == url
