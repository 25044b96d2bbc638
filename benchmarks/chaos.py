"""Chaos soak: a Kuhn poker league run whose env workers, host and league service are killed
with SIGKILL at random moments, N times each, whose disk fills up and whose newest checkpoint
is damaged; then a table of what survived.

    python -m benchmarks.chaos                                   # `make chaos`: 10 minutes, 10 kills of each, 2 storage faults of each
    python -m benchmarks.chaos --minutes 3 --kills 4 --seed 1    # shorter
    python -m benchmarks.chaos --league-kills 20 --host-kills 5   # per kind (the others: --kills)
    python -m benchmarks.chaos --disk-faults 0                   # without the full disk (it needs root, for a tmpfs)
    python -m benchmarks.chaos --run-dir runs/chaos               # where the run goes (default runs/chaos-<time>)

The run is the three kinds of process a distributed deployment has, started and,
after each kill, started again by this script as a supervisor would:

    league   python -m seedleague.league.cli serve --run-dir RUN/league --address 127.0.0.1:L --mode pfsp
    host     seedleague --log-level INFO host --env openspiel:kuhn_poker --address 127.0.0.1:H
                 --league.address 127.0.0.1:L --league.pool_dir RUN/pool --run-dir RUN [--resume-or-start]
    workers  python -m envs.openspiel_worker --game kuhn_poker --address 127.0.0.1:H   (W of them)

Faults, one at a time, each at a random moment after the previous one has recovered:
- **worker**: one worker is killed and a new process takes its place at once;
- **league**: killed, then started again on the same address and run dir after
  `league_down_s`; recovered when the host's acknowledged-results count grows again;
- **host**: killed, then `seedleague host --resume` on the same run dir and address;
  the surviving workers reconnect by themselves; recovered when every worker has a
  session on the new host.
- **disk**: the run's filesystem (a tmpfs of `disk_mb` the script mounts, as root, under
  RUN/data) is filled with a file. The host must stop by itself with one console line naming
  the full disk and no traceback (after `disk_stop_s` it gets SIGTERM, and after `GRACE_S`
  more SIGKILL: either counts as a failure). The file is removed `disk_full_s` later and the
  host is started again with `--resume-or-start`, as a supervisor would; the league service is
  started again only if it died.
- **checkpoint**: the host is killed, junk is written inside its newest checkpoint's largest
  state file (same size), and the host is started again: it must say it passes over that checkpoint
  and resume from the one before it, the newest good one.

Accounting (one host at a time plays, so every stored result between two host
kills is that host lifetime's): after each host kill the script waits a second and
counts the rows of league.sqlite. A host logs the running total of results the
league acknowledged after every report (`seedleague.host.league_link`); a lifetime
ended by SIGTERM reports it exactly in summary.json. Per lifetime, **lost** =
acknowledged but not stored (must be 0) and **ack in flight** = stored while its
reply had not reached the host when it was killed (≥ 0; the league kept them once).
**Duplicates** = rows minus distinct result ids. Results a killed host had not yet
delivered (those of the last report interval, 0.5 s, plus any backlog left from a
league outage) were never acknowledged and die with it, as its memory does; they
are listed ("unacknowledged results that died"), not counted as lost.

No host may be refused a snapshot ("snapshot steps of 'main' must increase") after any of
these resumes.

Learner steps and env steps/s come from the run's progress file, RUN/progress.jsonl
(`seedleague.progress`), which every host lifetime appends to: a lifetime's ticks are
those written after it started, and its first tick names the checkpoint step it resumed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from typing import Callable, Optional

from seedleague.launch.child import Child
from seedleague import progress

# The host's log line after every report the league acknowledged (seedleague.host.league_link): exact at each
# report (every 0.5 s), which the progress file's ticks (every 2 s) are not.
ACKED = re.compile(r"league acknowledged \d+ results \(\d+ new\): (\d+) acknowledged in all, (\d+) pending")
KINDS = ("worker", "league", "host", "disk", "checkpoint")
GRACE_S = 30.0  # a host stopping on a full disk must be gone this long after its SIGTERM
REFUSED_SNAPSHOT = "must increase"  # the league's refusal of a snapshot step at or below the last one


@dataclasses.dataclass(frozen=True)
class ChaosConfig:
    """One chaos run: how long, how many kills of each kind, and the processes' settings."""

    run_dir: str
    seconds: float = 600.0  # faults are spread over this long (the run overruns it while the last one recovers)
    kills: int = 10  # of each kind: worker, league, host (unless given below)
    worker_kills: Optional[int] = None
    league_kills: Optional[int] = None
    host_kills: Optional[int] = None
    disk_faults: int = 2  # the run's disk filled up (needs root: a tmpfs is mounted for the run's data)
    checkpoint_faults: int = 2  # the host killed and its newest checkpoint junk-filled before its --resume
    disk_mb: int = 512  # the tmpfs's size
    disk_full_s: float = 5.0  # how long the disk stays full after the host stopped
    disk_stop_s: float = 60.0  # a host still running this long after the disk filled gets SIGTERM (a failure)
    workers: int = 2
    envs_per_worker: int = 8  # Kuhn poker ends an episode every ~2.5 steps: ~1K results/s from 2 x 8 envs
    league_down_s: float = 3.0  # a killed league stays away this long before it is started again
    settle_s: float = 10.0  # after the last fault, before the final SIGTERM
    seed: int = 0
    recover_timeout_s: float = 180.0
    worker_backoff_max_s: float = 5.0  # the workers' reconnect backoff cap (their default)
    host_flags: tuple[str, ...] = ("--checkpoint.interval_s", "5", "--league.check_in_interval_s", "1")
    league_flags: tuple[str, ...] = ("--mode", "pfsp", "--snapshot_interval_steps", "200")

    def __post_init__(self):
        if self.seconds <= 0 or min(self.counts().values()) < 0 or self.workers < 1 or self.envs_per_worker < 1:
            raise ValueError("chaos needs seconds > 0, kills >= 0, workers >= 1 and envs_per_worker >= 1")

    def counts(self) -> dict[str, int]:
        """Kills of each kind."""
        given = {"worker": self.worker_kills, "league": self.league_kills, "host": self.host_kills}
        counts = {kind: self.kills if count is None else count for kind, count in given.items()}
        return dict(counts, disk=self.disk_faults, checkpoint=self.checkpoint_faults)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_child(command: list[str], log_path: str, name: str) -> Child:
    """One process of the run, in a process group of its own, its output in `log_path` (one file per start)."""
    child = Child(command, log_path, name=name)
    child.start()
    return child


@dataclasses.dataclass
class Lifetime:
    """One host process from its start to its kill (or final SIGTERM)."""

    index: int
    started_at: float  # Unix time just before its process started: its progress ticks are the later ones
    resumed_step: Optional[int] = None  # learner step it resumed at (None: started fresh)
    checkpoint_before: Optional[int] = None  # newest checkpoint on disk when it started
    acknowledged: int = 0  # results the league acknowledged to it (exact: its log / summary)
    pending_at_end: int = 0  # its last logged pending results (a killed host's die with it)
    stored: int = 0  # rows added to league.sqlite during its life
    last_learner_step: Optional[int] = None  # the run's learner step in its last progress tick
    killed: bool = False  # ended by a fault (SIGKILL, or its own stop on a full disk), not the final SIGTERM


@dataclasses.dataclass
class DiskStop:
    """What the host did when its disk filled."""

    seconds: float  # from the disk filling to the host's exit
    status: Optional[int]  # its exit status (1: it stopped itself on the fault)
    signalled: bool  # it needed SIGTERM (or SIGKILL) to stop: a failure
    line: str  # its one console line ("seedleague: ..."), "" if none
    lines: int  # console lines starting "seedleague:" (must be 1)
    traceback: bool

    @property
    def ok(self) -> bool:
        return (self.status == 1 and not self.signalled and self.lines == 1 and not self.traceback
                and "full" in self.line)


@dataclasses.dataclass
class Fallback:
    """A resume after the newest checkpoint was damaged."""

    damaged: int  # the damaged checkpoint's step
    good: int  # the newest good one
    resumed: Optional[int]  # where the host resumed
    named: bool  # its console line named both

    @property
    def ok(self) -> bool:
        return self.named and self.resumed == self.good


@dataclasses.dataclass
class ChaosReport:
    faults: dict
    duration_s: float
    acknowledged: int
    stored: int
    duplicates: int
    lost: int
    ack_in_flight: int
    dropped_unacknowledged: int
    continuity_ok: bool
    learner_steps_lost: list
    resumed_steps: list
    worker_reconnects: int
    expected_reconnects: int
    worker_restarts: int
    league_outages_s: list
    league_starts: list
    steps_during_outages: list
    final_learner_step: Optional[int]
    final_env_steps: Optional[int]
    host_exit_status: Optional[int]
    lifetimes: list
    disk_stops: list = dataclasses.field(default_factory=list)
    fallbacks: list = dataclasses.field(default_factory=list)
    snapshot_refusals: int = 0

    @property
    def ok(self) -> bool:
        """Nothing acknowledged was lost or doubled, every restart resumed its newest checkpoint, every
        worker reconnected, and the last host (stopped cleanly) delivered everything: exactly what is stored."""
        final = self.lifetimes[-1]
        return (self.lost == 0 and self.duplicates == 0 and self.continuity_ok and self.host_exit_status == 0
                and self.worker_reconnects >= self.expected_reconnects
                and final["stored"] == final["acknowledged"] and final["pending_at_end"] == 0
                and all(DiskStop(**stop).ok for stop in self.disk_stops)
                and all(Fallback(**fallback).ok for fallback in self.fallbacks) and self.snapshot_refusals == 0)

    def table(self) -> str:
        f, final, resumed = self.faults, self.lifetimes[-1], self.lifetimes[1:]
        outages, playing = self.league_outages_s, self.steps_during_outages
        stops = [DiskStop(**stop) for stop in self.disk_stops]
        fallbacks = [Fallback(**fallback) for fallback in self.fallbacks]
        rows = [
            ("faults injected", f"SIGKILL worker {f['worker']}, league {f['league']}, host {f['host']}; disk full "
                                f"{f['disk']}; newest checkpoint damaged {f['checkpoint']}; in {self.duration_s:.0f} s"),
            ("results acknowledged / stored", f"{self.acknowledged} / {self.stored}"),
            ("lost (acknowledged, not stored)", str(self.lost)),
            ("duplicated (rows - distinct ids)", str(self.duplicates)),
            ("acks in flight at a host kill (stored once)", str(self.ack_in_flight)),
            ("unacknowledged results that died with killed hosts", f"~{self.dropped_unacknowledged}"),
            ("last host (SIGTERM): acknowledged / stored / pending",
             f"{final['acknowledged']} / {final['stored']} / {final['pending_at_end']}"),
            ("host restarts resumed at the newest checkpoint",
             f"{sum(1 for life in resumed if life['resumed_step'] == life['checkpoint_before'])} of "
             f"{len(resumed)} ({'ok' if self.continuity_ok else 'BROKEN'}); steps "
             + " -> ".join(str(step) for step in self.resumed_steps)),
            ("learner steps redone per host kill (at least)", _spread(self.learner_steps_lost)),
            ("worker reconnects after host kills", f"{self.worker_reconnects} (expected {self.expected_reconnects})"),
            ("worker restarts", str(self.worker_restarts)),
            ("league down until the host's next ack (s)", _spread(outages, "{:.1f}")),
            ("league restart until serving (s) / results it replayed",
             _spread([seconds for _, seconds in self.league_starts], "{:.1f}")
             + (f"; largest {max(self.league_starts)[0]} results in {max(self.league_starts)[1]:.1f} s"
                if self.league_starts else "")),
            ("host env steps/s while the league was down", _spread([r for r in playing if r], "{:.0f}")
             + f"; kept playing in {sum(1 for r in playing if r)} of {len(playing)} outages"),
            ("disk full: host stopped by itself, one line, no traceback",
             f"{sum(stop.ok for stop in stops)} of {len(stops)}; exit "
             + ", ".join(str(stop.status) for stop in stops) + "; "
             + _spread([stop.seconds for stop in stops], "{:.1f} s") + " after the disk filled"),
            ("disk full: its line", stops[0].line[:160] + ("..." if len(stops[0].line) > 160 else "") if stops else "-"),
            ("damaged newest checkpoint: resumed from the one before, named",
             f"{sum(fallback.ok for fallback in fallbacks)} of {len(fallbacks)}"
             + "".join(f"; {fb.damaged} -> {fb.resumed}" for fb in fallbacks)),
            ("snapshots refused after a resume ('must increase')", str(self.snapshot_refusals)),
            ("final learner step / env steps", f"{self.final_learner_step} / {self.final_env_steps}"),
            ("final host exit status (SIGTERM)", str(self.host_exit_status)),
        ]
        width = max(len(name) for name, _ in rows)
        lines = [f"| {'':<{width}} | result |", f"|{'-' * (width + 2)}|---|"]
        lines += [f"| {name:<{width}} | {value} |" for name, value in rows]
        return "\n".join(lines)


def _connects(worker: Optional[Child]) -> int:
    """Sessions a worker process has started (its log says "connected to" after each handshake + stream)."""
    return 0 if worker is None else worker.output().count("connected to ")


def _spread(values: list, fmt: str = "{}") -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    return f"median {fmt.format(ordered[len(ordered) // 2])}, max {fmt.format(ordered[-1])} (n={len(values)})"


class ChaosRun:
    """The league, the host and the workers of one run, with the faults and the bookkeeping."""

    def __init__(self, config: ChaosConfig, say: Callable[[str], None] = print):
        self.config = config
        self.say = say
        self.run_dir = os.path.abspath(config.run_dir)
        self.logs = os.path.join(self.run_dir, "chaos-logs")  # on the machine's disk: the processes' output
        self.data_dir = os.path.join(self.run_dir, "data")  # the run's files (a tmpfs when the disk is filled)
        os.makedirs(self.logs, exist_ok=True)
        os.makedirs(self.data_dir, exist_ok=True)
        self.mounted = False
        self.db_path = os.path.join(self.data_dir, "league", "league.sqlite")
        self.host_address = f"127.0.0.1:{free_port()}"
        self.league_address = f"127.0.0.1:{free_port()}"
        self.rng = random.Random(config.seed)
        self.league: Optional[Child] = None
        self.host: Optional[Child] = None
        self.workers: list[Optional[Child]] = [None] * config.workers
        self.worker_procs: list[Child] = []
        self.lifetimes: list[Lifetime] = []
        self.faults = {kind: 0 for kind in KINDS}
        self.generation = {kind: 0 for kind in KINDS}
        self.league_outages: list[float] = []
        self.league_starts: list[tuple[int, float]] = []  # (stored results, seconds until serving) per restart
        self.steps_during_outages: list[Optional[float]] = []  # host env steps/s printed while the league was down
        self.stored_at_last_boundary = 0
        self._sessions_before: list[int] = []
        self.disk_stops: list[DiskStop] = []
        self.fallbacks: list[Fallback] = []
        self.host_logs: list[Child] = []  # every host start, for the snapshot refusals

    # -- processes -------------------------------------------------------------------------------

    def _log(self, kind: str) -> str:
        self.generation[kind] += 1
        return os.path.join(self.logs, f"{kind}-{self.generation[kind]}.log")

    def start_league(self) -> None:
        command = [sys.executable, "-m", "seedleague.league.cli", "serve", "--run-dir",
                   os.path.join(self.data_dir, "league"), "--address", self.league_address, "--log-every-s", "30",
                   *self.config.league_flags]
        rows = self.stored_results()[0] if os.path.exists(self.db_path) else 0
        started = time.monotonic()
        self.league = start_child(command, self._log("league"), "the league service")
        self._wait(lambda: "league serving on" in self.league.output(), "the league to serve", self.league)
        if rows:  # a restart: it replays every stored result before it serves
            self.league_starts.append((rows, time.monotonic() - started))

    def start_host(self, newest_good: Optional[int] = None) -> None:
        """`newest_good`: the checkpoint it must resume from (default: the newest on disk)."""
        resume = bool(self.lifetimes)
        newest_good = self.newest_checkpoint() if newest_good is None else newest_good
        lifetime = Lifetime(len(self.lifetimes), time.time(), checkpoint_before=newest_good)
        command = [sys.executable, "-m", "seedleague.cli", "--log-level", "INFO", "host", "--env",
                   "openspiel:kuhn_poker", "--address", self.host_address, "--run-dir", self.data_dir,
                   "--league.address", self.league_address, "--league.pool_dir", os.path.join(self.data_dir, "pool"),
                   "--max-seconds", "0", "--no-eval", *self.config.host_flags, *(["--resume-or-start"] if resume else [])]
        self.host = start_child(command, self._log("host"), "the host")
        self.host_logs.append(self.host)
        self.lifetimes.append(lifetime)
        self._sessions_before = [_connects(proc) for proc in self.workers]

    def start_worker(self, slot: int) -> Child:
        command = [sys.executable, "-m", "envs.openspiel_worker", "--game", "kuhn_poker", "--address",
                   self.host_address, "--num-envs", str(self.config.envs_per_worker), "--seed",
                   str(1000 * slot + self.generation["worker"]), "--backoff-max", str(self.config.worker_backoff_max_s)]
        proc = start_child(command, self._log("worker"), f"worker {slot}")
        self.workers[slot] = proc
        self.worker_procs.append(proc)
        return proc

    def wait_host_serving(self) -> None:
        """Every worker has connected to the current host (a new session), the league acknowledged results and
        the host wrote a progress tick (whose `resumed_from` is the lifetime's resumed step)."""
        host, before, lifetime = self.host, self._sessions_before, self.lifetimes[-1]

        def serving() -> bool:
            reconnected = all(_connects(proc) > count for proc, count in zip(self.workers, before))
            return reconnected and ACKED.search(host.output()) is not None and bool(self.ticks(lifetime.started_at))

        self._wait(serving, "every worker to connect to the host, a first acknowledgement and progress tick", host)
        lifetime.resumed_step = self.ticks(lifetime.started_at)[0]["resumed_from"]

    def start(self) -> None:
        """League, host, workers; returns once results flow."""
        self.say(f"chaos run in {self.run_dir}: host {self.host_address}, league {self.league_address}")
        if self.config.counts()["disk"]:
            self.mount_disk()
        self.start_league()
        self.start_host()
        for slot in range(self.config.workers):
            self.start_worker(slot)
        self.wait_host_serving()

    # -- faults ----------------------------------------------------------------------------------

    def kill_worker(self) -> None:
        slot = self.rng.randrange(self.config.workers)
        self.workers[slot].kill()
        proc = self.start_worker(slot)
        self._wait(lambda: "connected to" in proc.output(), "the new worker to connect", proc)

    def kill_league(self) -> None:
        self.league.kill()
        down, killed_at = time.monotonic(), time.time()
        acked_before = self.acknowledged_so_far()
        time.sleep(self.config.league_down_s)
        rates = [tick["env_steps_per_s"] for tick in self.ticks(killed_at)]
        self.steps_during_outages.append(max(rates) if rates else None)
        self.start_league()
        self._wait(lambda: self.acknowledged_so_far() > acked_before, "the host to deliver results again", self.host)
        self.league_outages.append(time.monotonic() - down)

    def kill_host(self) -> None:
        lifetime = self.lifetimes[-1]
        self.host.kill()
        self._end_lifetime(lifetime, killed=True)
        self.start_host()
        self.wait_host_serving()

    def fill_disk(self) -> None:
        """Fill the run's disk; the host must stop by itself, in one line; then free it and resume the host."""
        lifetime, filler = self.lifetimes[-1], os.path.join(self.data_dir, "filler")
        filled = time.monotonic()
        fill(filler)
        signalled = self.host.wait(self.config.disk_stop_s) is None
        if signalled:  # a hang: what the issue saw
            self.host.send_signal(signal.SIGTERM)
            if self.host.wait(GRACE_S) is None:
                self.host.kill()
        seconds = time.monotonic() - filled
        text = self.host.output()
        lines = [line for line in text.splitlines() if line.startswith("seedleague:")]
        self.disk_stops.append(DiskStop(seconds, self.host.returncode, signalled, lines[-1] if lines else "",
                                        len(lines), "Traceback" in text))
        time.sleep(self.config.disk_full_s)  # the league and the workers meet the full disk meanwhile
        os.remove(filler)
        self._end_lifetime(lifetime, killed=True)
        if not self.league.running():
            self.start_league()
        self.start_host()
        self.wait_host_serving()

    def damage_checkpoint(self) -> None:
        """Kill the host once it has saved a checkpoint of its own, junk-fill the newest, and resume: from the one
        before it."""
        lifetime = self.lifetimes[-1]
        self._wait(lambda: len(self.checkpoint_steps()) >= 2 and self.checkpoint_steps()[-1] > (lifetime.resumed_step or 0),
                   "a checkpoint newer than the one the host resumed from", self.host)
        self.host.kill()
        self._end_lifetime(lifetime, killed=True)
        *_, good, newest = self.checkpoint_steps()
        junk_fill(os.path.join(self.data_dir, "checkpoints", str(newest)), self.rng.randrange(2**32))
        self.start_host(newest_good=good)
        self.wait_host_serving()
        named = f"resuming from checkpoint {good}, the newest good one" in self.host.output()
        self.fallbacks.append(Fallback(newest, good, self.lifetimes[-1].resumed_step, named))

    def fault(self, kind: str) -> None:
        self.say(f"{time.strftime('%H:%M:%S')} {kind if kind in ('disk', 'checkpoint') else 'kill -9'} {kind}")
        {"worker": self.kill_worker, "league": self.kill_league, "host": self.kill_host, "disk": self.fill_disk,
         "checkpoint": self.damage_checkpoint}[kind]()
        self.faults[kind] += 1

    def run_faults(self) -> float:
        """Every fault at a random moment over `config.seconds`; returns the seconds it took."""
        kinds = [kind for kind, count in self.config.counts().items() for _ in range(count)]
        self.rng.shuffle(kinds)
        start = time.monotonic()
        moments = sorted(self.rng.uniform(0, self.config.seconds) for _ in kinds)
        for kind, moment in zip(kinds, moments):
            time.sleep(max(0.0, start + moment - time.monotonic()))
            self.fault(kind)
        time.sleep(max(0.0, start + self.config.seconds - time.monotonic()) + self.config.settle_s)
        return time.monotonic() - start

    # -- accounting ------------------------------------------------------------------------------

    def acknowledged_so_far(self) -> int:
        found = ACKED.findall(self.host.output())
        return int(found[-1][0]) if found else 0

    def ticks(self, since: float) -> list[dict]:
        """The host's progress ticks written at or after Unix time `since` (seedleague.progress)."""
        return [tick for tick in progress.read(self.data_dir) if tick["time"] >= since]

    def checkpoint_steps(self) -> list[int]:
        directory = os.path.join(self.data_dir, "checkpoints")
        return sorted(int(name) for name in os.listdir(directory) if name.isdigit()) if os.path.isdir(directory) else []

    def newest_checkpoint(self) -> Optional[int]:
        steps = self.checkpoint_steps()
        return steps[-1] if steps else None

    def stored_results(self) -> tuple[int, int]:
        """(rows, distinct result ids) in league.sqlite, read-only."""
        db = sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True)
        try:
            return db.execute("SELECT COUNT(*), COUNT(DISTINCT result_id) FROM results").fetchone()
        finally:
            db.close()

    def _end_lifetime(self, lifetime: Lifetime, killed: bool) -> None:
        time.sleep(1.0)  # a report the league was committing when the host died finishes first
        text = self.host.output()
        found = ACKED.findall(text)
        if found:
            lifetime.acknowledged, lifetime.pending_at_end = int(found[-1][0]), int(found[-1][1])
        ticks = self.ticks(lifetime.started_at)
        if ticks:
            lifetime.last_learner_step = ticks[-1]["learner_step"]
        rows = self.stored_results()[0]
        lifetime.stored = rows - self.stored_at_last_boundary
        self.stored_at_last_boundary = rows
        lifetime.killed = killed

    def finish(self, duration_s: float) -> ChaosReport:
        """SIGTERM the host (it delivers what is pending and writes summary.json), then the rest."""
        status = self.host.stop(120)
        lifetime = self.lifetimes[-1]
        self._end_lifetime(lifetime, killed=False)
        summary = {}
        summary_path = os.path.join(self.data_dir, "summary.json")
        if os.path.exists(summary_path):
            with open(summary_path) as f:
                summary = json.load(f)
            delivered = summary.get("league_results", {})
            lifetime.acknowledged = delivered.get("acknowledged", lifetime.acknowledged)
            lifetime.pending_at_end = delivered.get("pending", lifetime.pending_at_end)
        for proc in self.workers:
            proc.stop(30)
        rows, distinct = self.stored_results()
        self.league.stop(30)
        return self._report(duration_s, summary, status, rows, distinct)

    def _report(self, duration_s: float, summary: dict, status: Optional[int], rows: int, distinct: int) -> ChaosReport:
        lives = self.lifetimes
        steps = [life.resumed_step or 0 for life in lives]
        continuity = all(life.resumed_step == life.checkpoint_before for life in lives[1:])
        continuity = continuity and all(b >= a for a, b in zip(steps, steps[1:]))
        redone = [prev.last_learner_step - (nxt.resumed_step or 0) for prev, nxt in zip(lives, lives[1:])
                  if prev.last_learner_step is not None]
        connects = sum(_connects(p) for p in self.worker_procs)
        host_kills = self.faults["host"] + self.faults["disk"] + self.faults["checkpoint"]  # each starts a new host
        return ChaosReport(
            faults=dict(self.faults), duration_s=duration_s,
            acknowledged=sum(life.acknowledged for life in lives), stored=rows, duplicates=rows - distinct,
            lost=sum(max(0, life.acknowledged - life.stored) for life in lives),
            ack_in_flight=sum(max(0, life.stored - life.acknowledged) for life in lives if life.killed),
            dropped_unacknowledged=sum(life.pending_at_end for life in lives if life.killed),
            continuity_ok=continuity, learner_steps_lost=redone, resumed_steps=steps,
            worker_reconnects=connects - len(self.worker_procs), expected_reconnects=host_kills * self.config.workers,
            worker_restarts=self.faults["worker"], league_outages_s=self.league_outages,
            steps_during_outages=self.steps_during_outages, league_starts=self.league_starts,
            final_learner_step=summary.get("learner_step"), final_env_steps=summary.get("env_steps"),
            host_exit_status=status, lifetimes=[dataclasses.asdict(l) for l in lives],
            disk_stops=[dataclasses.asdict(stop) for stop in self.disk_stops],
            fallbacks=[dataclasses.asdict(fallback) for fallback in self.fallbacks],
            snapshot_refusals=sum(host.output().count(REFUSED_SNAPSHOT) for host in self.host_logs),
        )

    def kill_everything(self) -> None:
        for proc in [self.host, self.league, *self.worker_procs]:
            if proc is not None:
                proc.kill()
        self.unmount_disk()

    # -- the disk --------------------------------------------------------------------------------

    def mount_disk(self) -> None:
        """A tmpfs of `disk_mb` for the run's data, so filling it fills no one else's disk."""
        if os.geteuid() != 0:
            raise SystemExit("chaos: the disk fault mounts a tmpfs and needs root; run as root or pass --disk-faults 0")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.config.disk_mb}m", "tmpfs", self.data_dir],
                              capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"chaos: cannot mount a tmpfs on {self.data_dir} ({done.stderr.strip()}); "
                             "pass --disk-faults 0")
        self.mounted = True

    def unmount_disk(self) -> None:
        """Copy the run's data off the tmpfs into RUN/data (the filler, if any, left behind), then unmount it."""
        if not self.mounted:
            return
        kept = self.data_dir + ".kept"
        shutil.copytree(self.data_dir, kept, ignore=shutil.ignore_patterns("filler"), dirs_exist_ok=True)
        subprocess.run(["umount", "-l", self.data_dir], check=False)
        os.rmdir(self.data_dir)
        os.rename(kept, self.data_dir)
        self.mounted = False

    # -- helpers ---------------------------------------------------------------------------------

    def _wait(self, predicate: Callable[[], bool], what: str, child: Child) -> None:
        """Until `predicate()`; ChildExited / ChildNotReady (naming the process, with its log tail) if it exits first
        or `recover_timeout_s` passes."""
        child.wait_until(lambda: True if predicate() else None, self.config.recover_timeout_s, what)


def fill(path: str) -> None:
    """Write zeros to `path` until its filesystem is full."""
    with open(path, "ab", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 2**20)
        except OSError:
            pass


def junk_fill(step_dir: str, seed: int) -> None:
    """Junk in the middle of the largest data file of checkpoint `step_dir`'s state, its size kept: damage nothing
    reports."""
    files = [os.path.join(d, name) for d, _, names in os.walk(os.path.join(step_dir, "state")) for name in names]
    path = max(files, key=os.path.getsize)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.seek(size // 4)
        f.write(random.Random(seed).randbytes(max(1, min(4096, size - size // 4))))


def run_chaos(config: ChaosConfig, say: Callable[[str], None] = print) -> ChaosReport:
    """Start the run, inject the faults, stop it, and account for every result."""
    run = ChaosRun(config, say)
    try:
        run.start()
        duration = run.run_faults()
        report = run.finish(duration)
    finally:
        run.kill_everything()
    with open(os.path.join(run.run_dir, "chaos.json"), "w") as f:
        json.dump(dataclasses.asdict(report), f, indent=1)
    return report


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="faults are spread over this long (default 10)")
    parser.add_argument("--kills", type=int, default=10, help="kills of each kind: worker, league, host (default 10)")
    for kind in KINDS[:3]:
        parser.add_argument(f"--{kind}-kills", type=int, default=None, help=f"kills of the {kind} (default --kills)")
    parser.add_argument("--disk-faults", type=int, default=ChaosConfig.disk_faults,
                        help="times the run's disk (a tmpfs mounted as root) fills up (default %(default)s)")
    parser.add_argument("--checkpoint-faults", type=int, default=ChaosConfig.checkpoint_faults,
                        help="times the newest checkpoint is junk-filled before a --resume (default %(default)s)")
    parser.add_argument("--workers", type=int, default=ChaosConfig.workers)
    parser.add_argument("--envs-per-worker", type=int, default=ChaosConfig.envs_per_worker)
    parser.add_argument("--league-down-s", type=float, default=ChaosConfig.league_down_s,
                        help="how long a killed league stays away (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run-dir", default=None,
                        help="a new directory (default runs/chaos-<time>); logs in RUN/chaos-logs")
    args = parser.parse_args(argv)
    run_dir = args.run_dir or os.path.join("runs", f"chaos-{time.strftime('%Y%m%d-%H%M%S')}")
    if os.path.exists(os.path.join(run_dir, "chaos-logs")):
        parser.error(f"{run_dir} already holds a run: give a new --run-dir")
    config = ChaosConfig(run_dir=run_dir, seconds=60 * args.minutes, kills=args.kills, worker_kills=args.worker_kills,
                         league_kills=args.league_kills, host_kills=args.host_kills, disk_faults=args.disk_faults,
                         checkpoint_faults=args.checkpoint_faults, workers=args.workers,
                         envs_per_worker=args.envs_per_worker, league_down_s=args.league_down_s, seed=args.seed)
    kills = ", ".join(f"{count} {kind}" for kind, count in config.counts().items())
    print(f"chaos: {args.minutes:g} minutes, faults: {kills} "
          f"(python -m benchmarks.chaos {' '.join(argv if argv is not None else sys.argv[1:])})", flush=True)
    signal.signal(signal.SIGTERM, _interrupt)  # so the processes it started are killed on the way out
    report = run_chaos(config)
    print(report.table())
    print(f"\n{'PASS' if report.ok else 'FAIL'}; details in {run_dir}/chaos.json and {run_dir}/chaos-logs/")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
