"""Faults with real processes and SIGKILL: a worker killed mid-unroll, the league service killed
(and restarted by the launcher, or by hand on the same address), the host killed and resumed.

The long version is `make chaos` (benchmarks/chaos.py); these are the bounded ones.
"""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest

from benchmarks.chaos import ChaosConfig, ChaosRun
from seedleague.launch.league import LeagueProcess, LeagueSpec
from seedleague.league.client import LeagueClient
from seedleague.league.types import Role
from seedleague.testing.fakes import FakeLeague
from test_e2e import SEEDLEAGUE
from test_host_league import SPEC, duel_steps, league_host, play  # noqa: F401 (league_host is a fixture)
from tests.conftest import RawWorker, wait_for

# A worker process whose observations say who sent them: [marker, step of its session, env].
# It steps only when told ("N" on stdin: N more steps, then prints how many in all), so a test can
# SIGKILL it at an exact point of an unroll.
MARKED_WORKER = r"""
import sys
import time
import numpy as np
from seedleague.protocol.client import ClientConfig, ConnectionLost, WorkerClient
from seedleague.protocol.specs import EnvSpec

address, marker = sys.argv[1], float(sys.argv[2])
client = WorkerClient(ClientConfig(address=address), EnvSpec("vector", (3,), np.float32, 2, 2))
for attempt in range(60):  # the first handshake builds the host's model, which may outlast one deadline
    try:
        client.connect()
        break
    except ConnectionLost:
        time.sleep(0.5)
sent = 0
for line in sys.stdin:
    for _ in range(int(line)):
        observation = np.zeros((2, 1, 3), np.float32)
        observation[..., 0], observation[..., 1], observation[:, 0, 2] = marker, sent, np.arange(2)
        client.step(observation, np.zeros((2, 1), np.float32), np.zeros(2, bool), np.zeros(2, bool))
        sent += 1
    print(sent, flush=True)
"""


class MarkedWorker:
    def __init__(self, address: str, marker: float):
        self.proc = subprocess.Popen([sys.executable, "-c", MARKED_WORKER, address, str(marker)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def steps(self, count: int) -> int:
        self.proc.stdin.write(f"{count}\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


def test_worker_killed_mid_unroll_leaves_no_unroll_that_spans_its_sessions(host_server):
    """SIGKILL a worker process 3 rows into an unroll; its replacement's unrolls start fresh, and no
    unroll in replay holds rows of two sessions or the dead session's partial rows."""
    host, server = host_server
    unrolls = []  # what reaches replay: observation [n, T+1, 3] and first [n, T+1] of every insert
    insert = host._insert
    host._insert = lambda rows: unrolls.append((np.array(rows.observation), np.array(rows.first))) or insert(rows)
    length = host.config.unroll_length  # 4: rows 0..4, the last row starts the next unroll

    first = MarkedWorker(server.address, 1.0)
    try:
        assert first.steps(2 * length + 3) == 11  # unrolls over steps 0-4 and 4-8 complete; 8, 9, 10 are partial
        first.kill9()
        wait_for(lambda: host.sessions.attached_count() == 0, 20, "the host to close the killed worker's session")
    finally:
        first.proc.kill()
    second = MarkedWorker(server.address, 2.0)  # its replacement: a new session
    try:
        assert second.steps(2 * length + 1) == 9
    finally:
        second.kill9()

    observation = np.concatenate([o for o, _ in unrolls])
    first_flags = np.concatenate([f for _, f in unrolls])
    marker, step, env = observation[..., 0], observation[..., 1], observation[..., 2]
    assert (marker == marker[:, :1]).all(), "an unroll mixes rows of two sessions"
    assert (np.diff(step, axis=1) == 1).all() and (env == env[:, :1]).all(), "an unroll skips or mixes steps"
    for value in (1.0, 2.0):
        mine = marker[:, 0] == value
        assert sorted(step[mine, 0].tolist()) == [0, 0, 4, 4]  # two whole unrolls per env, nothing partial
        assert first_flags[mine & (step[:, 0] == 0), 0].all()  # each session's first row starts an episode
    assert step[marker[:, 0] == 1.0].max() == 2 * length  # steps 9 and 10 of the killed session never arrive


def test_host_starts_while_the_league_is_away_and_stops_while_it_is_away_again(league_host):
    """The host registers with a league that was away at its start once it answers, and a shutdown
    during an outage keeps the undelivered results counted instead of failing (no final checkpoint)."""
    league = FakeLeague()  # self-play until the first snapshot is added
    league.available = False
    host, server = league_host(league)
    worker = RawWorker(server.address, SPEC)  # the handshake builds the model and starts the league link
    steps = duel_steps(worker.session_id)
    play(worker, steps, 3 * 5)  # self-play meanwhile
    assert "p" not in league.registered
    league.available = True
    link = host.pipeline.league
    assert wait_for(lambda: "p" in league.registered and league.added)
    league.opponents = [league.added[0].key]  # from now on every match is against that snapshot
    play(worker, steps, 3 * 20)
    assert wait_for(lambda: league.results and link.stats.pending == 0)
    assert link.stats.acknowledged == len(league.results)
    league.available = False
    play(worker, steps, 3 * 20)
    pending = link.stats.pending
    assert pending > 0
    link.stop(flush_timeout_s=0.5)  # raised ConnectionError before, skipping the learner's final checkpoint
    assert link.stats.pending == pending and link.stats.acknowledged == len(league.results)
    worker.close()


def child_pids(parent: int, needle: str) -> list[int]:
    """Pids of `parent`'s children whose command line contains `needle`."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if ppid == parent and needle in command:
            found.append(int(entry))
    return found


def stored_results(db_path: str, player: str) -> tuple[int, int]:
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return db.execute("SELECT COUNT(*), COUNT(DISTINCT result_id) FROM results WHERE player = ?",
                          (player,)).fetchone()
    finally:
        db.close()


# Tiny and fast: no rate limit between acting and learning, so results flow while the learner compiles; one Adam step
# an update (the game recipe takes 4 x 4): these runs check faults and recovery, not learning, and every restarted
# host compiles its update again.
TINY_HOST = ("--unroll_length", "4", "--batch_size", "8", "--network.hidden_sizes", "16", "--replay.capacity", "64",
             "--replay.error_buffer", "100000", "--league.check_in_interval_s", "0.5", "--learner.epochs", "1",
             "--learner.minibatches", "1")
LEAGUE_RUN = [*TINY_HOST, "--checkpoint.interval_s", "2", "--envs-per-worker", "16", "--league_config.mode", "pfsp",
              "--league_config.snapshot_interval_steps", "50", "--no-eval"]


def test_launcher_restarts_a_killed_league_on_its_address_and_every_result_is_stored_once(tmp_path):
    run_dir = str(tmp_path / "run")
    log_path = tmp_path / "train.log"
    train = subprocess.Popen(SEEDLEAGUE + ["--log-level", "INFO", "train", "--env", "openspiel:kuhn_poker",
                                           "--run-dir", run_dir, "--max-seconds", "300"] + LEAGUE_RUN,
                             stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
    acks = lambda: log_path.read_text().count("acknowledged in all")
    try:
        wait_for(lambda: acks() > 0, 120, "the first acknowledged results")
        (league,) = child_pids(train.pid, "seedleague.league.cli")
        os.kill(league, signal.SIGKILL)
        wait_for(lambda: "league service restarted" in log_path.read_text(), 30, "the launcher to restart the league")
        after_restart = acks()
        wait_for(lambda: acks() > after_restart + 2, 60, "results acknowledged by the restarted league")
        train.send_signal(signal.SIGTERM)  # a clean end: the host delivers what is pending, summary.json
        assert train.wait(120) == 0, log_path.read_text()[-3000:]
    finally:
        if train.poll() is None:
            train.kill()
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    assert summary["league_restarts"] == 1
    league_log = open(os.path.join(run_dir, "league", "league.log")).read()
    served = [line for line in league_log.splitlines() if line.startswith("league serving on ")]
    assert len(served) == 2 and served[0] == served[1]  # the same address both times
    delivered = summary["league_results"]
    rows, distinct = stored_results(os.path.join(run_dir, "league", "league.sqlite"), "main")
    assert delivered["pending"] == 0 and delivered["acknowledged"] > 0
    assert rows == distinct == delivered["acknowledged"]  # every acknowledged result stored, none twice
    assert summary["standings"]  # the restarted league answered at the end


def test_league_process_restarts_on_the_same_address_and_database_until_its_limit(tmp_path):
    process = LeagueProcess(str(tmp_path), LeagueSpec(max_restarts=1))
    address = process.start()
    client = LeagueClient(address, retry_deadline_s=30.0)
    try:
        client.register_player("main", Role.MAIN)
        assert not process.restart_if_dead()  # alive: nothing to do
        os.kill(process.pid, signal.SIGKILL)
        wait_for(lambda: not process.alive(), 10, "the league to die")
        assert process.restart_if_dead() and process.restarts == 1 and process.address == address
        assert [p.name for p in client.players()] == ["main"]  # same address (the client retries), same database
        os.kill(process.pid, signal.SIGKILL)
        wait_for(lambda: not process.alive(), 10, "the league to die again")
        with pytest.raises(RuntimeError, match="max_restarts"):
            process.restart_if_dead()
    finally:
        client.close()
        process.stop()


def test_a_league_left_running_by_a_killed_launcher_is_stopped_before_a_resumed_run_starts_one(tmp_path):
    stale = LeagueProcess(str(tmp_path), LeagueSpec())  # its launcher was SIGKILLed: nobody stopped it
    stale.start()
    fresh = LeagueProcess(str(tmp_path), LeagueSpec())  # `seedleague train --resume` of the same run dir
    try:
        fresh.start()
        wait_for(lambda: not stale.alive(), 10, "the stale league to stop")
        assert stale.returncode == 0 and fresh.alive()  # a clean SIGTERM stop; one league per database
    finally:
        fresh.stop()
        stale.stop()


AS_ROOT = os.geteuid() == 0  # the disk fault mounts a tmpfs, which needs root


@pytest.fixture(scope="module")
def chaos_run(tmp_path_factory):
    """One short `make chaos` run against real processes (started once: three tests read its report), one fault of
    each kind in turn: the league killed and back on its address after 3 s, a worker killed and replaced, the host
    killed and resumed from its checkpoint with --resume while its worker reconnects by itself; then, as root, the
    run's disk (a 64 MiB tmpfs) filled until the host stops by itself and resumes once space is freed; last, the host
    killed and its newest checkpoint junk-filled, so that it resumes from the one before. (run, report)."""
    config = ChaosConfig(
        run_dir=str(tmp_path_factory.mktemp("chaos") / "run"), seconds=1.0, kills=1, workers=1, envs_per_worker=16,
        league_down_s=3.0, settle_s=2.0, recover_timeout_s=120.0, worker_backoff_max_s=1.0,
        disk_faults=1 if AS_ROOT else 0, checkpoint_faults=1, disk_mb=64, disk_full_s=2.0,
        host_flags=(*TINY_HOST, "--checkpoint.interval_s", "1"),
        league_flags=("--mode", "pfsp", "--snapshot_interval_steps", "50"),
    )
    run = ChaosRun(config, say=lambda message: None)
    try:
        run.start()
        run.fault("league")
        run.fault("worker")
        wait_for(lambda: run.newest_checkpoint() is not None, 60, "the host's first checkpoint")
        run.fault("host")
        if AS_ROOT:
            run.fault("disk")
        run.fault("checkpoint")
        time.sleep(config.settle_s)
        report = run.finish(duration_s=0.0)
    finally:
        run.kill_everything()
    return run, report


def test_worker_league_and_host_killed_then_resumed_without_losing_or_doubling_a_result(chaos_run):
    """Results, steps and sessions are accounted for across every fault of the run."""
    _, report = chaos_run
    assert report.faults == {"worker": 1, "league": 1, "host": 1, "disk": int(AS_ROOT), "checkpoint": 1}
    assert report.steps_during_outages[0] > 0  # the host kept playing its cached opponents while the league was down
    assert report.duplicates == 0 and report.lost == 0, report.lifetimes
    killed, final = report.lifetimes[0], report.lifetimes[-1]  # the first host was SIGKILLed; the last stopped cleanly
    assert killed["killed"] and killed["acknowledged"] > 0 and final["acknowledged"] > 0
    assert killed["acknowledged"] <= killed["stored"] <= killed["acknowledged"] + 256  # at most one ack in flight
    assert final["stored"] == final["acknowledged"]  # exact for a host that shut down cleanly
    assert final["resumed_step"] is not None and final["resumed_step"] == final["checkpoint_before"] > 0
    assert report.continuity_ok and report.host_exit_status == 0
    assert report.worker_reconnects >= report.expected_reconnects == 2 + AS_ROOT  # one per host (re)start
    assert report.snapshot_refusals == 0
    assert report.ok


def test_a_damaged_newest_checkpoint_resumes_from_the_newest_good_one(chaos_run):
    _, report = chaos_run
    (fallback,) = report.fallbacks
    assert fallback["resumed"] == fallback["good"] < fallback["damaged"] and fallback["named"], fallback


@pytest.mark.skipif(not AS_ROOT, reason="the disk fault mounts a tmpfs, which needs root")
def test_a_full_disk_stops_the_host_in_one_line_and_it_resumes_once_space_is_freed(chaos_run):
    run, report = chaos_run
    assert not run.mounted and os.path.exists(run.db_path)  # the data copied off the tmpfs, which is unmounted
    (stop,) = report.disk_stops
    assert stop["status"] == 1 and not stop["signalled"] and not stop["traceback"], stop
    assert stop["lines"] == 1 and "full" in stop["line"] and run.data_dir in stop["line"], stop
