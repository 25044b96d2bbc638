"""Storage faults with real files (issue 52): a full filesystem (a small tmpfs, mounted by the test as root; the
tests that need one are skipped otherwise), a read-only one, damaged checkpoints, a truncated league.sqlite and a NaN
in the learner. Each fault must end in one line that names the path and the fix, never a hang or a traceback."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks import chaos
from seedleague import storage
from seedleague.checkpoint import Checkpointer, DamagedCheckpoint, NonFiniteState
from seedleague.checkpoint_config import CheckpointConfig
from seedleague.host import restore
from seedleague.host.config import HostConfig
from seedleague.host.learner_loop import LearnerLoop, NonFiniteUpdate
from seedleague.league.config import LeagueConfig
from seedleague.league.service import League
from seedleague.league.store import LeagueStore, StoreWriteError
from seedleague.league.types import MatchResult, Role
from seedleague.metrics import Metrics
from seedleague.protocol.errors import INTERNAL, ProtocolError
from seedleague.storage import StorageError
from seedleague.api import load_policy, load_trained
from seedleague.artifacts.networks import shared_network as _network
from seedleague.rl.learner_config import LearnerConfig
from conftest import seedleague_here
from test_api import SMALL, save_checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _mount(path: str, options: str) -> None:
    os.makedirs(path, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", path], capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs; `fill()` takes all of its free space, `free()` gives it back."""
    path = str(tmp_path / "disk")
    _mount(path, "size=4m")

    class Disk:
        root = path
        filler = os.path.join(path, "filler")

        def fill(self) -> None:
            chaos.fill(self.filler)

        def free(self) -> None:
            os.remove(self.filler)

    yield Disk()
    subprocess.run(["umount", "-l", path], check=False)


def _results(n: int, player: str = "main") -> list[MatchResult]:
    return [MatchResult(str(uuid.uuid4()), player, player, 1.0, 0) for _ in range(n)]  # self-play results


def test_a_full_disk_rolls_the_league_back_and_acknowledges_nothing_unstored(small_disk):
    db = os.path.join(small_disk.root, "league.sqlite")
    league = League(LeagueConfig(), db)
    league.register_player("main", Role.MAIN)
    assert league.report_results(_results(10)) == 10
    small_disk.fill()
    unstored = _results(5000)
    with pytest.raises(ProtocolError) as refused:
        league.report_results(unstored)
    assert refused.value.code == INTERNAL
    assert db in refused.value.message and "full" in refused.value.message
    assert "cannot rollback" not in refused.value.message
    small_disk.free()
    assert league.report_results(unstored) == 5000  # the same ids, retried: none was kept by the refused call
    league.close()
    with sqlite3.connect(db) as check:
        assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert check.execute("SELECT COUNT(*) FROM results").fetchone() == (5010,)


def test_the_store_gives_back_its_sequence_numbers_after_a_refused_write(small_disk):
    store = LeagueStore(os.path.join(small_disk.root, "league.sqlite"))
    store.add_player("main", Role.MAIN)
    small_disk.fill()
    with pytest.raises(StoreWriteError, match="nothing of this call was stored"):
        store.add_results(_results(5000))
    small_disk.free()
    assert len(store.add_results(_results(3))) == 3
    seqs = [event for event in store.events()]
    assert len(seqs) == 4  # the player and three results, one sequence with no gap
    store.close()


def test_tensorboard_on_a_full_disk_raises_one_storage_error_and_never_blocks(small_disk):
    logdir = os.path.join(small_disk.root, "tensorboard")
    metrics = Metrics(logdir)
    metrics.record_steps(10, 10)
    metrics.report()
    small_disk.fill()
    errors = []

    def report_many():  # tensorboardX's writer thread blocked the caller for ever here
        for _ in range(50):
            metrics.record(total_loss=1.0)
            try:
                metrics.report()
            except StorageError as error:
                errors.append(error)

    thread = threading.Thread(target=report_many, daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert len(errors) == 1 and logdir in str(errors[0]) and "full" in str(errors[0])
    metrics.close()


def test_a_checkpoint_on_a_full_disk_raises_storage_error_and_leaves_no_unfinished_folder(small_disk):
    directory = os.path.join(small_disk.root, "checkpoints")
    checkpointer = Checkpointer(CheckpointConfig(directory=directory), writer=True)
    state = {"w": np.ones((64, 1024), np.float32)}  # 256 KiB
    checkpointer.save(1, state, {"n": 1})
    small_disk.fill()
    with pytest.raises(StorageError, match="full"):
        checkpointer.save(2, state, {"n": 2})
    assert not [name for name in os.listdir(directory) if name.endswith(".orbax-checkpoint-tmp")]
    small_disk.free()
    assert checkpointer.steps() == [1]
    checkpointer.close()


TENSORSTORE_FULL = ValueError('RESOURCE_EXHAUSTED: Error writing local file "ckpt/_sharding": Failed to write 4625 '
                              "bytes to file 25: No space left on device [os_error_code='28']")


def test_orbax_array_writers_full_disk_is_a_storage_error_in_one_line_without_thread_tracebacks(tmp_path, caplog):
    # a disk that filled while orbax's tensorstore threads wrote a step: a ValueError naming the OS's error reached the
    # learner as "the learner failed" with pages of tracebacks, not the one line a full disk gets
    assert storage.is_storage_failure(ValueError("RESOURCE_EXHAUSTED: quota")) is None
    found = storage.is_storage_failure(TENSORSTORE_FULL)
    assert isinstance(found, OSError) and found.errno == errno.ENOSPC
    checkpointer = Checkpointer(CheckpointConfig(directory=str(tmp_path / "checkpoints")), writer=True)
    state = {"w": np.ones((4, 4), np.float32)}
    checkpointer.save(1, state, {"n": 1})

    def full(*args, **kwargs):
        raise TENSORSTORE_FULL

    checkpointer._manager.save = full
    with pytest.raises(StorageError, match="the disk holding .* is full"):
        checkpointer.save(2, state, {"n": 2})
    assert checkpointer.steps() == [1]
    checkpointer.close()
    try:
        raise TENSORSTORE_FULL
    except ValueError:
        logging.getLogger("absl").exception("[process=0][thread=t][operation_id=1] _SignalingThread.run() raised an "
                                            "exception: %s", TENSORSTORE_FULL)
    (record,) = [r for r in caplog.records if r.name == "absl"]
    assert record.exc_info is None and "Traceback" not in caplog.text and "No space left" in caplog.text


def test_a_state_with_nan_is_never_saved(tmp_path):
    checkpointer = Checkpointer(CheckpointConfig(directory=str(tmp_path), max_to_keep=1), writer=True)
    checkpointer.save(1, {"w": np.ones(3, np.float32)}, {})
    with pytest.raises(NonFiniteState, match="NaN or inf"):
        checkpointer.save(2, {"w": np.array([1.0, np.nan, 0.0], np.float32)}, {})
    assert checkpointer.steps() == [1]  # max_to_keep 1: the good one was not rotated away
    checkpointer.close()


def _random_state(seed: int) -> dict:
    return {"w": np.random.default_rng(seed).standard_normal((64, 1024)).astype(np.float32)}


def test_a_checkpoint_that_does_not_read_back_as_written_is_set_aside_and_rotation_keeps_the_good_one(tmp_path):
    checkpointer = Checkpointer(CheckpointConfig(directory=str(tmp_path), max_to_keep=1), writer=True)
    checkpointer.save(1, _random_state(1), {"n": 1})
    written = checkpointer._manager.save

    def save_on_a_failing_disk(step, **kwargs):  # the bytes on disk are not those written (a failing disk)
        done = written(step, **kwargs)
        _damage(str(tmp_path / str(step)), "junk")
        return done

    checkpointer._manager.save = save_on_a_failing_disk
    with pytest.raises(StorageError, match=f"{tmp_path}/2 did not read back as written") as refused:
        checkpointer.save(2, _random_state(2), {"n": 2})
    assert "damaged-2" in str(refused.value) and "no older checkpoint was deleted" in str(refused.value)
    assert checkpointer.steps() == [1]  # max_to_keep 1, yet the last verified checkpoint stays
    checkpointer._manager.save = written
    checkpointer.save(3, _random_state(3), {"n": 3})
    assert checkpointer.steps() == [3]  # verified: now the older one goes
    checkpointer.close()


def test_a_checkpoint_whose_files_changed_into_other_valid_values_fails_its_checksum(tmp_path):
    """Junk that decodes to finite numbers: checkpoint 5's state files replaced by another state's, whole and
    readable; only the checksum recorded at save can tell."""
    save_checkpoint(tmp_path / "run", step=3, network=SMALL)
    save_checkpoint(tmp_path / "run", step=5, network=SMALL, seed=1)
    save_checkpoint(tmp_path / "other", step=5, network=SMALL, seed=2)
    shutil.rmtree(tmp_path / "run" / "5" / "state")
    shutil.copytree(tmp_path / "other" / "5" / "state", tmp_path / "run" / "5" / "state")
    checkpointer = Checkpointer(CheckpointConfig(directory=str(tmp_path / "run")), writer=True)
    config = HostConfig(network=SMALL, checkpoint=CheckpointConfig(directory=str(tmp_path / "run")))
    try:
        restored = restore.from_checkpoint(config, checkpointer)
        assert int(restored.state.step) == 3
        assert "does not match the checksum recorded when it was saved" in restored.note
        assert "state_sha256" not in restored.meta  # the checksum is the checkpointer's, not the run's counters
    finally:
        checkpointer.close()


def test_unfinished_orbax_folders_are_removed_by_the_writer_only(tmp_path):
    os.makedirs(tmp_path / "7.orbax-checkpoint-tmp")
    Checkpointer(CheckpointConfig(directory=str(tmp_path))).close()
    assert os.path.isdir(tmp_path / "7.orbax-checkpoint-tmp")  # a reader: another process may be saving it
    Checkpointer(CheckpointConfig(directory=str(tmp_path)), writer=True).close()
    assert not os.path.exists(tmp_path / "7.orbax-checkpoint-tmp")


def _biggest_file(directory: str) -> str:
    files = [os.path.join(d, f) for d, _, names in os.walk(directory) for f in names]
    return max(files, key=os.path.getsize)


def _damage(step_dir: str, how: str) -> None:
    if how == "meta":
        path = _biggest_file(os.path.join(step_dir, "meta"))
        with open(path, "r+b") as f:
            f.write(b"\x84" * os.path.getsize(path))
        return
    if how == "junk":  # junk of the same size, as make chaos damages a checkpoint
        chaos.junk_fill(step_dir, seed=0)
        return
    path = _biggest_file(os.path.join(step_dir, "state"))
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


@pytest.mark.parametrize("how", ["junk", "truncated", "meta"])
def test_a_damaged_newest_checkpoint_is_passed_over_for_the_newest_good_one(tmp_path, how):
    save_checkpoint(tmp_path, step=3, network=SMALL)
    save_checkpoint(tmp_path, step=5, network=SMALL, seed=1)
    _damage(str(tmp_path / "5"), how)
    checkpointer = Checkpointer(CheckpointConfig(directory=str(tmp_path)), writer=True)
    config = HostConfig(network=SMALL, checkpoint=CheckpointConfig(directory=str(tmp_path)))
    try:
        restored = restore.from_checkpoint(config, checkpointer)
        assert int(restored.state.step) == 3
        assert "checkpoint 3" in restored.note and f"{tmp_path}/5" in restored.note and "damaged-5" in restored.note
        assert checkpointer.steps() == [3]  # set aside: a resumed run saves step 5 afresh
        _damage(str(tmp_path / "3"), "meta")
        with pytest.raises(DamagedCheckpoint, match="no checkpoint .* can be used"):
            restore.from_checkpoint(config, checkpointer)
    finally:
        checkpointer.close()


@pytest.mark.parametrize("how", ["junk", "truncated", "meta"])
def test_the_api_never_loads_a_damaged_checkpoint_and_names_the_newest_good_step(tmp_path, how, caplog):
    """load_policy reads only the params (not the whole state the checkpointer's checksum covers): they are checked
    against their own checksum, recorded at save, so junk that decodes is refused like a file that does not."""
    run = tmp_path / "run"
    kept = save_checkpoint(run / "checkpoints", step=3, network=SMALL, learner=AVERAGING,
                           average=(_params_like(SMALL, 4), 2))
    save_checkpoint(run / "checkpoints", step=5, network=SMALL, seed=1, learner=AVERAGING,
                    average=(_params_like(SMALL, 5), 2))
    newest = f"{run}/checkpoints/5"
    _damage(newest, how)
    with caplog.at_level("WARNING", logger="seedleague.api"):
        policy = load_policy(str(run))  # no step: the newest good one, with a warning naming both
    assert policy.step == 3 and "state_sha256" not in policy.meta and "part_sha256" not in policy.meta
    chex_equal(policy.params, kept.params)
    assert newest in caplog.text and "loaded checkpoint 3, the newest good one" in caplog.text
    for load in (lambda: load_policy(str(run), step=5), lambda: load_policy(str(run), step=5, average=True),
                 lambda: load_trained(str(run))):  # the run's output (final): its newest checkpoint, refused
        with pytest.raises(DamagedCheckpoint) as refused:
            load()
        message = str(refused.value)
        assert newest in message and "step=3" in message and "\n" not in message, message
    assert int(load_policy(str(run), average=True).meta["average"]["count"]) == 2
    if how == "junk":  # the command that loads a run's output says the same in one line
        done = _seedleague("export", "--run-dir", str(run), "--out", str(tmp_path / "policy.onnx"))
        line = _one_line(done)
        assert done.returncode == 2 and newest in line and "step=3" in line, done.stderr
        assert not os.path.exists(tmp_path / "policy.onnx")
    _damage(f"{run}/checkpoints/3", "junk")
    with pytest.raises(DamagedCheckpoint, match="no older checkpoint"):
        load_policy(str(run))


AVERAGING = LearnerConfig(average_from=0)


def _params_like(network, seed: int):
    return _network(network, (11,), np.dtype(np.float32), 2).init(jax.random.key(seed))


def chex_equal(a, b) -> None:
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


class _State(NamedTuple):
    params: Any
    step: Any


class _Replay:
    closed = False

    def sample(self, timeout=None):
        return jnp.ones(())

    def close(self):
        self.closed = True


class _Policy:
    def __init__(self):
        self.versions = []

    def publish(self, params, version):
        self.versions.append(version)


def _update_nan_at_3(state, batch, clock, scales):
    step = state.step + 1
    poisoned = step >= 3
    params = jnp.where(poisoned, jnp.nan, state.params * 1.0)
    return _State(params, step), {"total_loss": jnp.where(poisoned, jnp.nan, 0.5)}


def test_a_nan_loss_stops_the_learner_before_publishing_saving_or_snapshotting(tmp_path):
    checkpointer = Checkpointer(CheckpointConfig(directory=str(tmp_path)), writer=True)
    checkpointer.save(1, _State(jnp.ones(4), jnp.asarray(1, jnp.int32)), {})
    policy = _Policy()
    loop = LearnerLoop(jax.jit(_update_nan_at_3), _State(jnp.ones(4), jnp.asarray(1, jnp.int32)), _Replay(), policy,
                       Metrics(), checkpointer, checkpoint_interval_s=1e9)
    loop.start()
    loop._thread.join(timeout=60)
    assert isinstance(loop.error, NonFiniteUpdate)
    assert "total_loss nan" in str(loop.error) and f"{tmp_path}/1" in str(loop.error)
    assert policy.versions == [2]  # update 3 was never published
    with pytest.raises(NonFiniteUpdate):
        loop.call(lambda state: None)  # a snapshot asked for now is refused
    loop.stop()  # no final checkpoint of the NaN state
    assert checkpointer.steps() == [1]
    checkpointer.close()


def _seedleague(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "seedleague.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def _one_line(done: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("seedleague")]
    assert len(lines) == 1, done.stderr
    return lines[0]


def test_bad_budget_file_run_dir_and_read_only_run_dir_are_refused_in_one_line(tmp_path, capsys):
    a_file = tmp_path / "file"
    a_file.write_text("")
    done = seedleague_here(capsys, "train", "--env", "openspiel:kuhn_poker", "--max-seconds", "-5", "--run-dir",
                           str(tmp_path / "r"))
    assert done.returncode == 2 and "--max-seconds must be >= 0" in _one_line(done)
    done = seedleague_here(capsys, "train", "--env", "openspiel:kuhn_poker", "--run-dir", str(a_file))
    assert done.returncode == 2 and f"--run-dir {a_file} is a file" in _one_line(done)
    read_only = str(tmp_path / "ro")
    _mount(read_only, "size=1m,ro")
    try:
        done = seedleague_here(capsys, "train", "--env", "openspiel:kuhn_poker", "--run-dir", f"{read_only}/run")
        assert done.returncode == 2 and "read-only" in _one_line(done) and f"{read_only}/run" in _one_line(done)
    finally:
        subprocess.run(["umount", "-l", read_only], check=False)


def test_workers_0_says_it_waits_for_workers_from_elsewhere_and_that_none_came(tmp_path):
    done = _seedleague("train", "--env", "openspiel:kuhn_poker", "--workers", "0", "--no-eval", "--max-seconds", "2",
                       "--run-dir", str(tmp_path / "run"))
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "this run starts no env workers: it waits for workers from elsewhere to connect" in done.stdout
    assert "no env worker connected to" in done.stdout.split("run ended:")[1]


def test_resume_without_a_checkpoint_and_a_truncated_league_database_are_refused_in_one_line(tmp_path, capsys):
    done = seedleague_here(capsys, "train", "--env", "openspiel:kuhn_poker", "--resume", "--run-dir",
                           str(tmp_path / "empty"), "--max-seconds", "5")
    assert done.returncode == 2 and "holds no checkpoint" in _one_line(done) and "--resume-or-start" in done.stderr
    os.makedirs(tmp_path / "torn" / "league")
    (tmp_path / "torn" / "league" / "league.sqlite").write_bytes(np.random.default_rng(0).bytes(3000))
    done = seedleague_here(capsys, "train", "--env", "openspiel:kuhn_poker", "--resume-or-start", "--run-dir",
                           str(tmp_path / "torn"), "--max-seconds", "5")
    assert done.returncode == 2 and "not a usable league database" in done.stderr
    assert "Traceback" not in done.stderr
    db = str(tmp_path / "cut" / "league" / "league.sqlite")  # a real league database, its last 40% cut off
    os.makedirs(os.path.dirname(db))
    league = League(LeagueConfig(), db)
    league.register_player("main", Role.MAIN)
    league.report_results(_results(5000))
    league.close()
    os.truncate(db, os.path.getsize(db) * 6 // 10)
    done = seedleague_here(capsys, "train", "--env", "openspiel:kuhn_poker", "--resume-or-start", "--run-dir",
                           str(tmp_path / "cut"), "--max-seconds", "5")
    line = _one_line(done)
    assert done.returncode == 2 and "not a usable league database" in line and db in line, done.stderr
    assert "malformed" in line and "--run-dir" in line


def test_a_full_disk_stops_a_real_league_run_with_one_line(small_disk):
    run_dir = os.path.join(small_disk.root, "run")
    os.makedirs(run_dir)
    with open(os.path.join(small_disk.root, "filler"), "wb") as f:  # leaves ~1 MiB: enough to start, not to run
        f.write(b"\0" * (3 * 2**20))
    process = subprocess.Popen([sys.executable, "-m", "seedleague.cli", "train", "--env", "openspiel:kuhn_poker",
                                "--max-seconds", "60", "--run-dir", run_dir, "--no-eval"], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = process.communicate(timeout=60 + 60)  # the budget plus start-up and a grace: never a hang
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        raise
    done = subprocess.CompletedProcess(process.args, process.returncode, out, err)
    line = _one_line(done)
    assert process.returncode in (1, 2) and run_dir in line and "full" in line, err
    db = os.path.join(run_dir, "league", "league.sqlite")
    if os.path.exists(db):
        with sqlite3.connect(db) as check:
            assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_learner_resumed_behind_its_last_snapshot_is_not_refused_its_next_snapshots(tmp_path):
    """Snapshots at 0 and 100; the league decided one at 200 and the host died before adding it; --resume passed
    over damaged checkpoints back to step 50. Before: the league repeated its step-200 answer, the host saved
    step 50 and every add was refused ("snapshot steps of 'main' must increase") until the learner passed 100."""
    league = League(LeagueConfig(snapshot_interval_steps=100), str(tmp_path / "league.sqlite"))
    league.register_player("main", Role.MAIN)
    for step in (0, 100):
        assert league.check_in("main", step).snapshot
        league.add_snapshot("main", step, "pool/main")
    assert league.check_in("main", 200).snapshot  # decided; never added: the host was killed
    added = []
    for step in (50, 120, 150, 199, 200, 260):  # the resumed learner checks in as it goes
        decision = league.check_in("main", step)
        if decision.snapshot:
            league.add_snapshot("main", step, "pool/main")  # refused before the fix
            added.append(step)
        elif step <= 100:
            assert "snapshots continue after it" in decision.reason
    assert added == [200]  # 100 steps after the last snapshot, as for any learner
    league.close()
    reopened = League(LeagueConfig(snapshot_interval_steps=100), str(tmp_path / "league.sqlite"))
    assert [s.step for s in reopened.snapshots("main")] == [0, 100, 200]
    reopened.close()


# --- whole runs: the fault, SIGTERM during it, then --resume once it is mended ---------------------------------

GRACE_S = 30  # a run ends within its budget plus this (its start-up, JAX import and compiles, not counted)
START_S = 240  # at most this long to start serving on two loaded cores, or the test fails (no hang)
# One Adam step an update (the game recipe takes 4 x 4): these runs check faults, checkpoints and resumes, not
# learning, and each update's steps are compiled and run on two loaded cores.
RUN_FLAGS = ("--no-eval", "--checkpoint.interval-s", "2", "--league.check-in-interval-s", "0.5",
             "--league-config.snapshot-interval-steps", "20", "--learner.epochs", "1", "--learner.minibatches", "1")
KUHN_RUN = ("--env", "openspiel:kuhn_poker", *RUN_FLAGS)
ACKED = re.compile(r"league acknowledged \d+ results \(\d+ new\): (\d+) acknowledged in all")


class _Run:
    """One `seedleague train` process, its console in files read while it runs."""

    def __init__(self, logs, name: str, *args: str):
        self.out, self.err = logs / f"{name}.out", logs / f"{name}.err"
        with open(self.out, "w") as out, open(self.err, "w") as err:
            self.process = subprocess.Popen([sys.executable, "-m", "seedleague.cli", "--log-level", "INFO", "train",
                                             *args], cwd=ROOT, stdout=out, stderr=err)

    def stdout(self) -> str:
        return self.out.read_text()

    def stderr(self) -> str:
        return self.err.read_text()

    def wait_for(self, predicate, what: str, timeout: float = START_S) -> float:
        """Until `predicate()`; fails if the process exits first or `timeout` passes. Returns the monotonic time."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if self.process.poll() is not None:
                pytest.fail(f"the run exited ({self.process.returncode}) before {what}:\n{self.stderr()[-3000:]}")
            if time.monotonic() > deadline:
                self.process.kill()
                pytest.fail(f"no {what} after {timeout} s:\n{self.stderr()[-3000:]}")
            time.sleep(0.2)
        return time.monotonic()

    def exit_within(self, seconds: float) -> subprocess.CompletedProcess:
        """The finished process; fails (after SIGKILL) if it is still running `seconds` from now: a hang."""
        try:
            self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"the run did not exit within {seconds:.0f} s:\n{self.stderr()[-3000:]}")
        return subprocess.CompletedProcess(self.process.args, self.process.returncode, self.stdout(), self.stderr())

    def acknowledged(self) -> int:
        """Results the league acknowledged to this run, from the host's log line after each report."""
        found = ACKED.findall(self.stderr())
        return int(found[-1]) if found else 0


def _steps(directory: str) -> list[int]:
    return sorted(int(name) for name in os.listdir(directory) if name.isdigit()) if os.path.isdir(directory) else []


def _league_rows(run_dir: str) -> int:
    """Result rows in the run's league.sqlite, after `PRAGMA integrity_check` says ok (closed after: sqlite3's own
    `with` only commits, and an open file keeps its filesystem from being remounted read-only)."""
    with contextlib.closing(sqlite3.connect(os.path.join(run_dir, "league", "league.sqlite"))) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        rows, distinct = db.execute("SELECT COUNT(*), COUNT(DISTINCT result_id) FROM results").fetchone()
    assert rows == distinct
    return rows


def _trained_past(run_dir: str, step: int):
    """A stop_when for _resume_continues: the resumed run saved a checkpoint after `step` and the league acknowledged
    results to it (what the checks after its stop need; waiting for a budget to run out would add only time)."""
    return lambda run: run.acknowledged() > 0 and _steps(os.path.join(run_dir, "checkpoints"))[-1] > step


def _resume_continues(logs, run_dir: str, newest_good: int, stop_when=None, run_args: tuple = KUHN_RUN) -> _Run:
    """`--resume` on `run_dir`: it says it continues from checkpoint `newest_good`, trains past it and stops cleanly
    by SIGTERM once `stop_when(run)` (default: `_trained_past(run_dir, newest_good)`); every result the league
    acknowledged to it is stored (none doubled) and no snapshot of it is refused."""
    stop_when = stop_when or _trained_past(run_dir, newest_good)
    rows_before = _league_rows(run_dir) if os.path.exists(os.path.join(run_dir, "league", "league.sqlite")) else 0
    run = _Run(logs, "resumed", *run_args, "--resume", "--run-dir", run_dir, "--max-seconds", "600")
    run.wait_for(lambda: "resumed from checkpoint" in run.stdout(), "resume line")
    assert f"resumed from checkpoint {newest_good}:" in run.stdout(), run.stdout()
    run.wait_for(lambda: stop_when(run), "the event to stop at")
    run.process.send_signal(signal.SIGTERM)
    done = run.exit_within(GRACE_S)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "must increase" not in done.stderr
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    assert summary["learner_step"] > newest_good
    delivered = summary["league_results"]
    assert delivered["pending"] == 0 and _league_rows(run_dir) - rows_before == delivered["acknowledged"] > 0
    return run


def test_sigterm_on_a_full_disk_stops_cleanly_resume_is_refused_read_only_then_continues_freed_and_writable(tmp_path):
    """SIGTERM while the run's disk is full: a clean stop. Then the run dir's filesystem mounted read-only (as Linux
    does after disk errors; a filesystem with files open for writing cannot be remounted so, hence after the run
    stopped): --resume is refused in one line naming the path; writable again and with space, --resume continues
    from the newest checkpoint. (One run and one resume serve both faults: each resume is a whole run.)"""
    disk = str(tmp_path / "disk")
    _mount(disk, "size=64m")
    logs = tmp_path / "logs"
    logs.mkdir()
    try:
        run_dir = os.path.join(disk, "run")
        run = _Run(logs, "full", *KUHN_RUN, "--run-dir", run_dir, "--max-seconds", "600")
        run.wait_for(lambda: _steps(os.path.join(run_dir, "checkpoints")) and run.acknowledged() > 0,
                     "first checkpoint and acknowledged results")
        filler = os.path.join(disk, "filler")
        with open(filler, "ab", buffering=0) as f:
            with pytest.raises(OSError):
                while True:
                    f.write(b"\0" * 65536)
        run.process.send_signal(signal.SIGTERM)  # while the disk is full: the run's writers meet it as it stops
        done = run.exit_within(GRACE_S)
        assert done.returncode in (0, 1), done.stderr[-3000:]
        if done.returncode == 1:  # its final checkpoint met the full disk: one line says so
            line = _one_line(done)
            assert "full" in line and run_dir in line, line
        else:  # the learner had not moved past its newest checkpoint: nothing left to write, a clean stop
            assert "Traceback" not in done.stderr and "Traceback" not in done.stdout, done.stderr[-3000:]
        assert not [n for n in os.listdir(os.path.join(run_dir, "checkpoints")) if n.endswith("checkpoint-tmp")]
        assert _league_rows(run_dir) >= run.acknowledged()  # every acknowledged result stored
        os.remove(filler)
        newest = _steps(os.path.join(run_dir, "checkpoints"))[-1]
        subprocess.run(["mount", "-o", "remount,ro", disk], check=True)
        done = _seedleague("train", *KUHN_RUN, "--resume", "--run-dir", run_dir, "--max-seconds", "5")
        line = _one_line(done)
        assert done.returncode == 2 and "read-only" in line and run_dir in line, done.stderr[-3000:]
        subprocess.run(["mount", "-o", "remount,rw", disk], check=True)
        _resume_continues(logs, run_dir, newest)
    finally:
        subprocess.run(["umount", "-l", disk], check=False)


SNAPSHOT_ADDED = re.compile(r"snapshot main:(\d+) added to the league")


def _last_snapshot(run_dir: str) -> int:
    with contextlib.closing(sqlite3.connect(os.path.join(run_dir, "league", "league.sqlite"))) as db:
        return db.execute("SELECT MAX(step) FROM snapshots WHERE player = 'main'").fetchone()[0]


def test_damaged_newest_checkpoints_of_a_real_run_resume_from_the_newest_good_one_and_its_league_goes_on(tmp_path):
    """The newest checkpoints junk-filled, truncated and with junk meta, all newer than the league's last snapshot of
    the player: --resume names each and continues from the newest good one, and its own snapshots are added."""
    logs = tmp_path / "logs"
    logs.mkdir()
    run_dir = str(tmp_path / "run")
    checkpoints = os.path.join(run_dir, "checkpoints")
    # a checkpoint every second (the last flag of a name wins): the four it waits for come in half the time, and the
    # resume has that much less to train back
    run = _Run(logs, "first", *KUHN_RUN, "--checkpoint.interval-s", "1", "--checkpoint.max-to-keep", "100", "--run-dir",
               run_dir, "--max-seconds", "600")

    def snapshot_after_four_checkpoints() -> bool:  # four before the stop: its own may repeat the newest step
        snapshots = [int(step) for step in SNAPSHOT_ADDED.findall(run.stderr())]
        steps = _steps(checkpoints)
        return len(steps) >= 4 and bool(snapshots) and max(snapshots) > steps[0]

    run.wait_for(snapshot_after_four_checkpoints, "four checkpoints and a league snapshot newer than the first")
    run.process.send_signal(signal.SIGTERM)
    assert run.exit_within(GRACE_S).returncode == 0, run.stderr()[-3000:]
    with open(os.path.join(run_dir, "summary.json")) as f:
        assert _league_rows(run_dir) == json.load(f)["league_results"]["acknowledged"]
    steps, last_snapshot = _steps(checkpoints), _last_snapshot(run_dir)
    good, damaged = steps[0], steps[1:]  # the final checkpoint and at least two before it
    assert good < last_snapshot and len(damaged) >= 3
    for step, how in zip(reversed(damaged), ["junk", "truncated", "meta"] * len(damaged)):
        _damage(os.path.join(checkpoints, str(step)), how)

    def own_snapshot(resumed: _Run) -> bool:
        return any(int(step) > last_snapshot for step in SNAPSHOT_ADDED.findall(resumed.stderr()))

    resumed = _resume_continues(logs, run_dir, good, stop_when=own_snapshot)
    note = resumed.stdout().split("resumed from checkpoint")[0]
    assert f"resuming from checkpoint {good}, the newest good one" in note
    for step in damaged:
        assert f"{checkpoints}/{step}" in note and os.path.isdir(os.path.join(checkpoints, f"damaged-{step}"))
    assert "Traceback" not in resumed.stdout()


NON_FINITE = re.compile(r"the learner's update (\d+) gave (total_loss|grad_norm) (nan|inf)")


def test_huge_rewards_from_a_worker_stop_a_real_run_before_its_nan_is_saved_and_resume_continues(tmp_path):
    """A worker whose rewards turn 1e30 mid-run (finite: the protocol takes them): the learner's loss overflows at
    update N. The run stops with one line naming the newest good checkpoint, SIGTERM during it is honoured, no
    checkpoint or snapshot of update N or later exists, the league kept every acknowledged result, and --resume
    (the worker mended) continues from that checkpoint."""
    logs = tmp_path / "logs"
    logs.mkdir()
    run_dir, trigger = str(tmp_path / "run"), str(tmp_path / "huge-rewards")
    worker = (f"{sys.executable} {ROOT}/tests/huge_reward_worker.py --game kuhn_poker --num-envs 64 --seed {{seed}} "
              f"--address {{address}} --huge-rewards-while {trigger}")
    args = (*RUN_FLAGS, "--worker-cmd", worker)
    run = _Run(logs, "nan", *args, "--run-dir", run_dir, "--max-seconds", "600")
    checkpoints, pool = os.path.join(run_dir, "checkpoints"), os.path.join(run_dir, "pool", "main")
    run.wait_for(lambda: _steps(checkpoints) and SNAPSHOT_ADDED.search(run.stderr()) and run.acknowledged() > 0,
                 "a checkpoint, a league snapshot and acknowledged results")
    open(trigger, "w").close()  # the worker's rewards turn huge from its next step
    run.wait_for(lambda: "learner stopped" in run.stderr(), "the learner stopping at a non-finite update")
    run.process.send_signal(signal.SIGTERM)  # while the run stops for its fault
    done = run.exit_within(GRACE_S)
    line = _one_line(done)
    found = NON_FINITE.search(line)
    assert done.returncode == 1 and found and "was not published, saved or snapshotted" in line, done.stderr[-3000:]
    bad_update, saved = int(found.group(1)), _steps(checkpoints)
    newest = saved[-1]
    assert f"{checkpoints}/{newest}, is untouched: --resume continues from it" in line
    assert newest < bad_update and all(load_policy(checkpoints, step=s).step == s for s in saved)  # finite, verified
    snapshots = _steps(pool)
    assert snapshots and max(snapshots) < bad_update and _last_snapshot(run_dir) < bad_update
    assert all(load_policy(pool, step=s).step == s for s in snapshots)
    assert _league_rows(run_dir) >= run.acknowledged() > 0  # integrity_check ok, every acknowledged result stored
    os.remove(trigger)  # the worker mended
    _resume_continues(logs, run_dir, newest, run_args=args)


def test_a_truncated_league_database_renamed_as_its_line_says_lets_resume_continue_from_the_newest_checkpoint(
        tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    run_dir = str(tmp_path / "run")
    save_checkpoint(os.path.join(run_dir, "checkpoints"), step=7, network=SMALL)
    league_dir = os.path.join(run_dir, "league")
    db = os.path.join(league_dir, "league.sqlite")
    os.makedirs(league_dir)
    league = League(LeagueConfig(), db)
    league.register_player("main", Role.MAIN)
    league.report_results(_results(5000))
    league.close()
    os.truncate(db, os.path.getsize(db) * 6 // 10)
    done = _seedleague("train", *KUHN_RUN, "--resume", "--run-dir", run_dir, "--max-seconds", "5")
    line = _one_line(done)
    assert done.returncode == 2 and db in line and "--resume continues from the run's newest checkpoint" in line
    for name in os.listdir(league_dir):  # as the line says
        if name.startswith("league.sqlite"):
            os.rename(os.path.join(league_dir, name), os.path.join(league_dir, f"damaged-{name}"))
    _resume_continues(logs, run_dir, 7)
