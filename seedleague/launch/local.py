"""One-machine launcher: the host in this process, N env-worker processes beside it.

Data path: worker processes --gRPC--> EnvServicer --> Host (batcher -> policy ->
unroll store -> replay -> learner). `run` starts the server, the workers and a
progress loop, and stops every process it started when the budget ends, on
Ctrl-C or SIGTERM, then prints where logs and checkpoints went. Each progress line
also goes to <run_dir>/progress.jsonl as JSON (`seedleague.progress`). The workers are
the built-in ones or any binary (`WorkerSpec.templates`, `train --worker-cmd`);
one that dies is restarted, one that exits with status 2 (it refuses its game)
stops the run with the end of its log (`WorkerRefused`). What it runs, a `RunConfig`, is
seedleague.launch.run_config's (jax-free, so a command line is refused before the host loads).

A fault of a background writer (`RUN_FAULTS`: a disk that refuses the TensorBoard scalars,
progress.jsonl, a checkpoint or a snapshot; a NaN update; a league that cannot store results)
stops the run as its budget would, except that no final checkpoint is written over the last
good one; summary.json records it where the disk allows, and `run` raises it: `seedleague`
prints it as one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import math
import os
import shlex
import signal
import sys
import time
from typing import Optional

from seedleague import grpc_server, output, progress, storage
from seedleague.checkpoint import DamagedCheckpoint, NonFiniteState
from seedleague.host import exploit, population_samples
from seedleague.host.host import Host, HostConfig
from seedleague.league.client import LeagueClient
from seedleague.host.learner_loop import NonFiniteUpdate
from seedleague.host.servicer import SERVICE_NAMES, EnvServicer
from seedleague.metrics import Metrics, progress_line
from seedleague.output import OutputConfig
from seedleague.protocol.errors import ProtocolError
from seedleague.security import TOKEN_ENV_VAR, ClientSecurity, ServerSecurity
from seedleague.launch import ADDRESS_ENV
from seedleague.launch.child import Child, ChildExited, log_tail, stop_all
from seedleague.launch.league import LeagueProcess, PlayerProcesses
from seedleague.launch.cpus import usable_cpus
from seedleague.launch.run_config import Machine, RunConfig, WorkerSpec, machine_share
from seedleague.league.model_pool import record_root

log = logging.getLogger(__name__)


REFUSED_STATUS = 2  # a worker exits with this when it refuses its game or the host refused it: never restarted


class WorkerRefused(ValueError):
    """A worker exited with status 2 (it refuses its game, or the host refused it) or could not start.
    Restarting it would only repeat that, so the run stops and shows the worker's own reason (a
    ValueError: `seedleague` prints it to the console and exits 2)."""


class WorkerProcesses:
    """Starts, watches and stops the worker processes; logs go to <run_dir>/logs/worker-<i>.log."""

    def __init__(self, spec: WorkerSpec, address: str, log_dir: str, security: ServerSecurity = ServerSecurity()):
        self.spec, self.address, self.log_dir = spec, address, log_dir
        self._env = dict(os.environ, **{ADDRESS_ENV: address})
        # Built-in workers take the certificate as a flag; a --worker-cmd names its own flags.
        self._tls = ["--tls-ca", security.tls_cert] if security.tls and not spec.templates else []
        if security.token:  # through the environment: a token on a command line is visible to every user
            self._env[TOKEN_ENV_VAR] = security.token
        self.restarts = 0
        self._children: list[Optional[Child]] = [None] * spec.count
        os.makedirs(log_dir, exist_ok=True)

    def start(self) -> None:
        for i in range(self.spec.count):
            self._start(i)

    def process(self, i: int) -> Optional[Child]:
        return self._children[i]

    def log_path(self, i: int) -> str:
        return os.path.join(self.log_dir, f"worker-{i}.log")

    def _start(self, i: int) -> None:
        command = self.spec.argv(i, self.address, 1000 * i + self.restarts) + self._tls
        self._children[i] = Child(command, self.log_path(i), name=f"worker {i}", env=self._env)
        try:
            self._children[i].start()
        except OSError as error:  # e.g. a --worker-cmd naming no executable file
            raise WorkerRefused(f"worker {i} could not start: {error}; its command: {shlex.join(command)}") from None

    def watch(self) -> None:
        """Restart workers that died; give up after max_restarts in total. A worker that exits with
        status 2 (it refuses its game, or the host refused it) is not restarted: WorkerRefused."""
        for i, child in enumerate(self._children):
            if child is not None and child.poll() is not None:
                log.warning("worker %d exited with status %s (log: %s)", i, child.returncode, self.log_path(i))
                if child.returncode == REFUSED_STATUS:
                    raise WorkerRefused(f"worker {i} refused to go on (exit status {REFUSED_STATUS}); the end of its "
                                        f"log {self.log_path(i)}:\n{log_tail(self.log_path(i))}")
                if self.restarts >= self.spec.max_restarts:
                    raise RuntimeError(f"workers died {self.restarts} times; see {self.log_dir}. The end of "
                                       f"{self.log_path(i)}:\n{log_tail(self.log_path(i))}")
                self.restarts += 1
                self._start(i)

    def stop(self, timeout: float = 5.0) -> None:
        stop_all(self._children, timeout)


def interrupt(signum, frame):
    """A signal handler: the signal raises KeyboardInterrupt, so `finally` blocks stop what was started."""
    raise KeyboardInterrupt(f"signal {signum}")


_STOPPING_NOTICE = (b"SIGTERM while stopping: the run is already stopping and still writes its final checkpoint "
                    b"and summary (SIGKILL ends it at once)\n")


def _already_stopping(signum, frame):
    """SIGTERM once the run is stopping: it already does what SIGTERM asks, so let it finish.

    Closing the serving event loop puts SIGTERM back to its default, which would kill the
    process in the middle of its final checkpoint and leave no summary and, because they run
    in sessions of their own, the league service and extra players running. A supervisor
    that stops a run whose budget just ended (the main player stopping the other players'
    hosts) sends exactly that SIGTERM."""
    with contextlib.suppress(OSError):
        os.write(2, _STOPPING_NOTICE)


def run(config: RunConfig, machine: Optional[Machine] = None) -> dict:
    """Run the host (and workers) until the budget ends; returns the run summary.

    Built-in workers whose count nobody gave (`WorkerSpec.fit_machine`) are fitted to `machine`, by
    default this process's: the platform of its host's devices and its usable CPUs.

    SIGTERM during start-up (model restore, compiles) raises KeyboardInterrupt so
    everything started so far is still stopped; once serving, SIGINT and SIGTERM
    end the run cleanly with reason "interrupted"; once stopping, a further SIGTERM
    is noted and the final checkpoint and summary are still written. Once it returns (or raises), SIGTERM is handled
    as it was before the call: a caller that goes on (choosing the run's output) says what a signal does then.
    """
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        return _run(config, machine)
    finally:
        if previous is not None:  # None: a handler not installed from Python, which Python cannot put back
            signal.signal(signal.SIGTERM, previous)


def _run(config: RunConfig, machine: Optional[Machine]) -> dict:
    # The event loop, batcher and learner threads hand work to each other on every
    # step; Python's default 5 ms GIL switch interval would add up to that much to
    # each hand-off.
    sys.setswitchinterval(config.switch_interval_ms / 1000)
    run_dir = os.path.abspath(config.run_dir)
    storage.check_writable(run_dir)
    if config.output is not None:  # first: a run killed at any later moment still names its output
        output.record(run_dir, config.output)
    host_config = config.host
    if not host_config.checkpoint.directory:  # by default a run keeps its checkpoints inside its directory
        host_config = dataclasses.replace(
            host_config, checkpoint=dataclasses.replace(host_config.checkpoint, directory=os.path.join(run_dir, "checkpoints"))
        )
    metrics = Metrics(os.path.join(run_dir, "tensorboard"))
    league = _League(config, run_dir)
    host = None
    try:
        host_config = league.start(host_config)
        host = Host(host_config, metrics, resume=config.resume, league=league.client,
                    start_if_none=config.start_if_none)
        _say_resumed(host, metrics)
        machine = machine or Machine(host.layout.inference_device.platform, usable_cpus())
        config = _fit_workers(config, machine, league.hosts_here())
        league.start_players(machine)
        summary, fault = asyncio.run(_serve(config, host, metrics, run_dir, league))
        summary.update(league.summary())
    finally:
        signal.signal(signal.SIGTERM, _already_stopping)
        try:
            if host is not None:
                host.stop()  # its final checkpoint can take seconds
        finally:
            league.stop()  # ... and must not leave the league service process running
            metrics.close()
    summary.update(league.delivery(host))  # after host.stop(): its last delivery of results counts
    summary.update(learner_step=_learner_step(host))  # ... and its last update, the one the final checkpoint holds
    if host is not None and host.pipeline is not None and host.pipeline.target is not None:  # seedleague exploit
        summary.update(exploit=host.pipeline.target.summary(exploit.WINDOW_SHARE))
    games = host.pipeline.population if host is not None and host.pipeline is not None else None
    if games is not None:  # evaluation games
        summary.update(population=games.summary())
        if games.samples is not None and len(games.samples):
            games.samples.save(os.path.join(run_dir, population_samples.FILE))
    summary.update(run_dir=run_dir, checkpoints=host_config.checkpoint.directory,
                   tensorboard=os.path.join(run_dir, "tensorboard"), logs=os.path.join(run_dir, "logs"))
    fault = fault or _fault(host)  # a final checkpoint the disk refused
    if config.output is not None and fault is None:
        summary.update(output=_describe_output(run_dir, config.output))
    _write_summary(run_dir, summary, quiet=fault is not None)
    if fault is not None:
        raise fault
    return summary


# Faults that stop a run with one console line: `run` raises them once every process it started is stopped.
RUN_FAULTS = (storage.StorageError, NonFiniteUpdate, NonFiniteState, DamagedCheckpoint, ProtocolError)


def _fit_workers(config: RunConfig, machine: Machine, hosts: int) -> RunConfig:
    """`config` with its built-in workers fitted to `machine` (one of `hosts` hosts on it), said in one line."""
    workers, line = config.workers.fitted(machine, hosts)
    if line:
        print(line, flush=True)
    return dataclasses.replace(config, workers=workers)


def _fault(host: Optional[Host]) -> Optional[Exception]:
    """The first fault of the host's learner or league link (RUN_FAULTS, else a RuntimeError), or None."""
    pipeline = host.pipeline if host is not None else None
    if pipeline is None:
        return None
    for part in (pipeline.learner, pipeline.league):
        error = getattr(part, "error", None)
        if isinstance(error, RUN_FAULTS):
            return error
        if error is not None:
            failed = RuntimeError("the learner failed; see the log above")
            failed.__cause__ = error
            return failed
    return None


def _write_summary(run_dir: str, summary: dict, quiet: bool) -> None:
    """<run_dir>/summary.json; a disk that refuses it raises StorageError, unless a fault was already reported."""
    path = os.path.join(run_dir, "summary.json")
    try:
        with open(path, "w") as f:
            json.dump(summary, f, indent=2)
    except OSError as error:
        if not quiet:
            raise storage.storage_error(error, path, "the run summary") from None


def _describe_output(run_dir: str, config: OutputConfig) -> dict:
    """summary.json's "output": what seedleague.api.load_trained gives for this run now, or why nothing yet.

    Choosing a `selected` output measures its candidates (up to minutes); the final checkpoint is written
    by then, so SIGINT or SIGTERM here skips the choice, which `load_trained` makes later."""
    kind = "mixture" if config.source in output.MIXTURES else "policy"
    previous = signal.signal(signal.SIGTERM, interrupt)
    started = time.perf_counter()
    if config.source == "selected":
        print("\nchoosing the run's output: the exact exploitability of each candidate (its final and averaged "
              "params, mixtures of its snapshots); Ctrl-C skips this, and load_trained chooses when first asked",
              flush=True)
    try:
        return dict(output.resolve(run_dir).describe(), seconds=round(time.perf_counter() - started, 1))
    except (FileNotFoundError, ValueError) as error:
        return dict(source=config.source, kind=kind, error=str(error))
    except KeyboardInterrupt:
        note = ("interrupted while choosing the output; the checkpoints are written, and seedleague.api.load_trained "
                "(or serve, export, report) chooses it when first asked")
        print(f"\n{note}", file=sys.stderr, flush=True)
        return dict(source=config.source, kind=kind, note=note)
    finally:
        signal.signal(signal.SIGTERM, previous)


class _League:
    """The league side of a run: its own service process or an existing league, and the extra players."""

    def __init__(self, config: RunConfig, run_dir: str):
        self.config, self.run_dir = config, run_dir
        self.process: Optional[LeagueProcess] = None
        self.players: Optional[PlayerProcesses] = None
        self.client = None
        self.pool_dir = os.path.join(run_dir, "pool")

    def start(self, host_config: HostConfig) -> HostConfig:
        """Start or join the league; returns the host config pointing at it (unchanged without a league)."""
        spec = self.config.league
        link = host_config.league
        if spec is None and not link.enabled:
            return host_config
        address = link.address or (spec.address if spec else "")
        if not address:
            self.process = LeagueProcess(self.run_dir, spec, self.config.security)
            try:
                address = self.process.start()
            except ChildExited as error:  # it refused its database or address: its own reason, in one line
                raise ValueError(_refusal(error)) from None
            print(f"league service on {address}; its log: {self.process.log_path}", flush=True)
            if self.process.page_url:
                needs = "?token=<the run's token>" if self.config.security.token else ""
                print(f"league page: {self.process.page_url}{needs} (live standings, ratings and payoff; "
                      "docs/league_page.md)", flush=True)
        pool_dir = link.pool_dir or os.path.join(self.run_dir, "pool")
        self.pool_dir = pool_dir  # the extra players' too: a pool in object storage is shared by URL
        record_root(self.run_dir, pool_dir)  # where the run's output and `seedleague eval` find its snapshots
        player = spec.players[0] if spec and not link.address else None
        link = dataclasses.replace(link, address=address, pool_dir=pool_dir,
                                   **(dict(player=player.name, role=player.role) if player else {}))
        security = self.config.security
        client_security = ClientSecurity(token=security.token, tls_ca=security.tls_cert if security.tls else "")
        self.client = LeagueClient(address, client_security, retry_deadline_s=5.0)
        return dataclasses.replace(host_config, league=link)

    def hosts_here(self) -> int:
        """Hosts this run starts on this machine: its own and one per extra player."""
        spec = self.config.league
        return len(spec.players) if spec is not None and spec.players else 1

    def start_players(self, machine: Machine) -> None:
        """The extra players' hosts, each with its share of `machine`'s workers when they are built-in."""
        spec = self.config.league
        if spec is None or len(spec.players) < 2 or self.client is None:
            return
        self.players = PlayerProcesses(self.run_dir, self.config.env_id, spec, self.client.address,
                                       self.pool_dir, self.config.security)
        workers = machine_share(spec.player_workers, machine, self.hosts_here()) if spec.player_workers else 0
        self.players.start(spec.players[1:], workers)

    def check(self) -> None:
        """Restart the league service if it died (same address and run dir; the host keeps retrying meanwhile);
        fail the run if an extra player's process failed or the service died more than its restart limit."""
        if self.process is not None and self.process.restart_if_dead():
            print(f"league service restarted on {self.process.address} (restart {self.process.restarts}); "
                  f"its log: {self.process.log_path}", flush=True)
        if self.players is not None and self.players.failed():
            raise RuntimeError(self.players.failed())

    def delivery(self, host: Optional[Host]) -> dict:
        """How this run's host's results reached the league, and the service's restarts.

        `acknowledged` counts results the league acknowledged, each once (whether it
        stored them at the first try or recognised a retry); with nothing pending it
        equals this player's rows in <run_dir>/league/league.sqlite."""
        out = {} if self.process is None else dict(league_restarts=self.process.restarts)
        link = host.pipeline.league if host is not None and host.pipeline is not None else None
        if link is not None:
            stats = link.stats
            out["league_results"] = dict(acknowledged=stats.acknowledged, new=stats.new_results,
                                         pending=stats.pending, dropped=stats.dropped,
                                         failed_calls=stats.failures, snapshots=stats.snapshots)
        return out

    def summary(self) -> dict:
        if self.client is None:
            return {}
        try:
            return dict(league=self.client.address, standings=[dataclasses.asdict(s) for s in self.client.standings()])
        except Exception as error:  # the run's result does not depend on the league answering now
            log.warning("could not read the league standings: %s", error)
            return dict(league=self.client.address)

    def stop(self) -> None:
        if self.players is not None:
            self.players.stop()
        if self.client is not None:
            self.client.close()
        if self.process is not None:
            self.process.stop()


async def _serve(config: RunConfig, host: Host, metrics: Metrics, run_dir: str,
                 league: _League) -> tuple[dict, Optional[Exception]]:
    """Serve until the budget, a signal or a fault (RUN_FAULTS) ends the run: (summary, that fault or None)."""
    resumed_from = _learner_step(host) if host.pipeline is not None else None  # before any handshake: restored
    servicer = EnvServicer(host)
    server, port = await grpc_server.start_server(
        config.host.address, [servicer.register], SERVICE_NAMES, config.host.max_message_bytes, config.security
    )
    address = f"{config.host.address.rsplit(':', 1)[0]}:{port}"
    print(f"seedleague host listening on {address}; run directory {run_dir}", flush=True)
    if not config.workers.count:
        print(f"this run starts no env workers: it waits for workers from elsewhere to connect to {address} "
              "(`seedleague worker`, or any worker of docs/protocol.md)", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    workers = WorkerProcesses(config.workers, address, os.path.join(run_dir, "logs"), config.security)
    workers.start()
    start = time.perf_counter()
    reason = "interrupted"
    budget_reached = False  # the run's budget ended it (not a fault, an interruption or a finished read-out)
    fault = None
    ticks = _progress_file(run_dir, resumed_from)
    try:
        next_report = start + config.report_interval_s
        while not stop.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), min(config.budget_check_interval_s, config.report_interval_s))
            if time.perf_counter() >= next_report:
                next_report += config.report_interval_s
                _report(host, metrics, ticks)
                workers.watch()
                league.check()
            fault = _fault(host)
            if isinstance(fault, RuntimeError) and not isinstance(fault, NonFiniteUpdate):
                raise fault
            spent = None if fault else config.budget.reached(metrics, _learner_step(host), time.perf_counter() - start)
            ended = f"stopped by a fault: {fault}" if fault else (spent or host.finished())
            if ended:
                reason, budget_reached = ended, spent is not None
                break
        if fault is None:
            _report(host, metrics, ticks)  # the counts at the stop: a run shorter than one interval has a tick too
    except storage.StorageError as error:  # the TensorBoard scalars or progress.jsonl
        fault, reason = error, f"stopped by a fault: {error}"
    finally:
        with contextlib.suppress(OSError):  # a full disk was reported already
            ticks.close()
        workers.stop()
        await servicer.drain(timeout_s=1.0)  # workers elsewhere are told to reconnect, not cut off mid-call
        await server.stop(grace=1.0)
        host.stop_serving()  # no inference may still be waiting to answer once this loop closes
    elapsed = time.perf_counter() - start
    if not config.workers.count and not metrics.env_steps:
        reason += f"; no env worker connected to {address} (this run starts none)"
    return dict(
        reason=reason,
        budget_reached=budget_reached,
        wall_s=round(elapsed, 2),
        env_steps=metrics.env_steps,
        episodes=metrics.episodes,
        learner_steps=metrics.learner_steps,
        learner_step=_learner_step(host),
        mean_return=None if math.isnan(metrics.mean_return()) else round(metrics.mean_return(), 2),
        worker_restarts=workers.restarts,
        **_game_counts(metrics),
    ), fault


def _refusal(error: ChildExited) -> str:
    """A child's own one-line refusal ("seedleague league: <reason>", the last line of its log) as the first line,
    its log named after it; else the error with its log tail."""
    lines = [line for line in log_tail(error.child.log_path, 3).splitlines() if line.strip()]
    last = lines[-1].strip() if lines else ""
    if not last.startswith("seedleague") or ": " not in last:
        return str(error)
    return f"{error.child.name} refused to start: {last.split(': ', 1)[1]} (its log: {error.child.log_path})"


def _progress_file(run_dir: str, resumed_from: Optional[int]) -> progress.ProgressFile:
    try:
        return progress.ProgressFile(run_dir, resumed_from)
    except OSError as error:
        raise storage.storage_error(error, progress.path(run_dir), "the progress file") from None


def _game_counts(metrics: Metrics) -> dict:
    """A seated (two-player) run's games, league games and recent win rate against the league; {} otherwise.
    (Its episodes count each learning seat, and a zero-sum game's mean return is about 0 over both seats.)"""
    if not metrics.games:
        return {}
    out = dict(games=metrics.games, league_games=metrics.league_games)
    if metrics.league_outcomes:
        out["league_win_rate"] = round(float(sum(metrics.league_outcomes) / len(metrics.league_outcomes)), 3)
    return out


def _say_resumed(host: Host, metrics: Metrics) -> None:
    """Name the checkpoint a --resume continues from; the progress lines count this process's updates only."""
    if host.resumed_note:
        print(host.resumed_note, flush=True)
    if host.pipeline is None or host.pipeline.learner is None or not host.pipeline.learner.step:
        return
    print(f"resumed from checkpoint {_learner_step(host)}: {metrics.env_steps} env steps, {metrics.episodes} "
          "episodes so far (the progress lines' learner count starts again at 0)", flush=True)


def _learner_step(host: Host) -> int:
    """Updates of the train state so far, including those before a resume."""
    pipeline = host.pipeline
    return pipeline.learner.step if pipeline is not None and pipeline.learner is not None else 0


def _report(host: Host, metrics: Metrics, ticks: progress.ProgressFile) -> None:
    """One progress tick: the console line, and the same numbers as a line of <run_dir>/progress.jsonl."""
    report = metrics.report()
    if host.pipeline is not None and host.pipeline.replay is not None:
        report["replay_size"] = host.pipeline.replay.size
    try:
        ticks.append(report, _learner_step(host))
    except OSError as error:
        raise storage.storage_error(error, ticks.path, "the progress file") from None
    print(progress_line(report), flush=True)
