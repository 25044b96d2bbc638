"""Cluster launcher on Ray: the league service, the learner host and the env workers as Ray actors.

    pip install -e '.[ray]'
    ray start --head                                   # on one node; `ray start --address HEAD:6379` on the others
    seedleague ray-launch --env CartPole-v1 --workers 4 --envs-per-worker 16 --address auto --max-seconds 300
    python -m seedleague.launch.ray_cluster ...        # the same command

Each process of a run is the command `seedleague.launch.local` would start, run by a
`ProcessRunner` actor as its child process (one code path for one machine and
for a cluster). Data path, in the order `launch` wires it:

    league service actor   `seedleague.league.cli serve`   (two-player games only)
          ▲ opponents, results, snapshots
    host actor             `seedleague host --address NODE_IP:0`, 1 GPU when the cluster has one
          ▲ StepBatch ⇄ ActionBatch over gRPC, to the node IP Ray reports for the host's node
    worker actors          `envs.gym_worker` / `envs.openspiel_worker`, spread over the nodes

The run ends when the host ends (its budget: --max-seconds, --max-learner-steps,
--max-steps, --target-return), on Ctrl-C or SIGTERM; every actor placed and every
child process is then stopped. A worker process that exits is restarted by the
watch loop, a worker actor whose node dies is restarted by Ray (max_restarts);
both count against --max-restarts. Outputs lie on the node of the process that
wrote them, under the same absolute --run-dir: the host's checkpoints,
tensorboard, summary.json and host.log on the host's node, logs/ray-worker-<i>.log
on each worker's node. Ray is optional (`.[ray]`); this module imports it only
inside `launch`.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import logging
import math
import os
import shlex
import signal
import sys
import threading
import time
from collections import deque
from typing import Any, Optional, Sequence

from seedleague.launch.child import Child
from seedleague.launch.league import LEAGUE_READY
from seedleague.security import TOKEN_ENV_VAR  # the token travels in the environment, never on a command line

log = logging.getLogger(__name__)

HOST_READY = "seedleague host listening on "  # printed by seedleague.launch.local once the host's server is up
NODE_IP = "{node_ip}"  # in a command: replaced by the IP Ray reports for the node the actor runs on


# ------------------------------------------------------------------ config --
@dataclasses.dataclass(frozen=True)
class RayLaunchConfig:
    """A run on a Ray cluster: what to train, how many workers, what each process may use.

    ray_address: "auto" (the cluster this node belongs to), "HOST:PORT" of a head
        node, or None to start a one-node Ray on this machine.
    host_args: `seedleague host` flags besides --env/--run-dir/--address: the
        budget and any HostConfig flag (`--learner.learning_rate 1e-3`).
    host_gpus: GPUs for the host actor; None gives it 1 when the cluster has any.
    worker_cpus: CPUs for each worker actor; None gives each 1, or an equal share
        of the cluster's CPUs left by the host and league when that is less.
    max_restarts: worker restarts allowed in all (process exits and actor deaths).
    """

    env_id: str
    run_dir: str
    workers: int
    envs_per_worker: int
    ray_address: Optional[str] = None
    host_args: tuple[str, ...] = ()
    league_args: tuple[str, ...] = ()
    host_cpus: float = 1.0
    host_gpus: Optional[float] = None
    worker_cpus: Optional[float] = None
    league_cpus: float = 0.5
    max_restarts: int = 10
    start_timeout_s: float = 300.0
    poll_interval_s: float = 1.0
    report_interval_s: float = 10.0
    stop_timeout_s: float = 60.0

    def __post_init__(self):
        object.__setattr__(self, "host_args", tuple(self.host_args))
        object.__setattr__(self, "league_args", tuple(self.league_args))
        problems = []
        if not os.path.isabs(self.run_dir):
            problems.append(f"run_dir must be absolute (every node writes under the same path), got {self.run_dir!r}")
        if self.workers < 0 or self.envs_per_worker < 1:
            problems.append(f"workers must be >= 0 and envs_per_worker >= 1, got {self.workers} and {self.envs_per_worker}")
        for name in ("host_cpus", "worker_cpus", "league_cpus"):
            if (getattr(self, name) or 0) < 0:
                problems.append(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.host_gpus is not None and self.host_gpus < 0:
            problems.append(f"host_gpus must be >= 0 (or None: 1 when the cluster has a GPU), got {self.host_gpus}")
        if self.max_restarts < 0:
            problems.append(f"max_restarts must be >= 0, got {self.max_restarts}")
        for name in ("start_timeout_s", "poll_interval_s", "report_interval_s", "stop_timeout_s"):
            if not getattr(self, name) > 0:
                problems.append(f"{name} must be > 0, got {getattr(self, name)}")
        if problems:
            raise ValueError("bad RayLaunchConfig: " + "; ".join(problems))


def host_gpus(config: RayLaunchConfig, cluster_resources: dict) -> float:
    """GPUs the host actor asks for: the configured number, else 1 when the cluster has a GPU."""
    if config.host_gpus is not None:
        return config.host_gpus
    return 1.0 if cluster_resources.get("GPU", 0) >= 1 else 0.0


# ---------------------------------------------------------------- commands --
# Commands are argv without the interpreter: each actor runs them with its own
# node's sys.executable (the driver's path need not exist on other nodes).
def league_args(config: RayLaunchConfig) -> list[str]:
    """`seedleague league serve` on port 0 of its node's IP, with the game preset's league config."""
    from seedleague import presets

    flags = presets.league_flags(presets.preset_for(config.env_id).league)
    return ["-m", "seedleague.league.cli", "serve", "--run-dir", os.path.join(config.run_dir, "league"),
            "--address", f"{NODE_IP}:0", *flags, *config.league_args]


def host_args(config: RayLaunchConfig, league_address: Optional[str]) -> list[str]:
    """`seedleague host` on port 0 of its node's IP; in a league as player "main", the pool in the run dir."""
    args = ["-m", "seedleague.cli", "host", "--env", config.env_id, "--run-dir", config.run_dir,
            "--address", f"{NODE_IP}:0"]
    if league_address:
        args += ["--league.address", league_address, "--league.player", "main", "--league.role", "main",
                 "--league.pool_dir", os.path.join(config.run_dir, "pool")]
    return args + list(config.host_args)


def worker_args(config: RayLaunchConfig, index: int, host_address: str) -> list[str]:
    """The env worker of `config.env_id` (as seedleague.launch.local starts it), pointed at the host."""
    from seedleague.launch.local import worker_command

    command = worker_command(config.env_id, config.envs_per_worker)[1:]  # drop the driver's interpreter
    return [*command, "--address", host_address, "--seed", str(1000 * index)]


def ready_address(line: str, prefix: str) -> Optional[str]:
    """"seedleague host listening on 10.0.0.5:41234; run directory ..." -> "10.0.0.5:41234"."""
    if not line.startswith(prefix):
        return None
    return line[len(prefix):].split(";", 1)[0].strip() or None


# ------------------------------------------------------------------ actor --
class ProcessRunner:
    """One command as a child process (`seedleague.launch.child.Child`) of this (actor) process, its log on this node.

    Plain Python: `launch` wraps it with `ray.remote`. The constructor starts the
    child, so an actor that Ray restarts after a node failure starts it again. No
    method blocks for long (a Ray actor runs one call at a time, so a blocking call
    would hold up `stop`): the driver polls `ready_line` until the child is ready.

        runner = ProcessRunner(["-m", "seedleague.cli", "host", "--address", NODE_IP + ":0", ...], "/runs/x/host.log")
        runner.ready_line(HOST_READY)   # (the line or None, the exit status or None, the log tail once it exited)
        runner.poll()                   # None while running, else the exit status
        runner.restart()                # a fresh child (same command)
        runner.stop(10.0)               # SIGTERM the child's process group, SIGKILL after 10 s
    """

    def __init__(self, args: Sequence[str], log_path: str, env: Optional[dict] = None, name: str = ""):
        ip = self.node()["ip"]
        self.args = [arg.replace(NODE_IP, ip) for arg in args]  # a server binds its own node's IP
        command = [sys.executable, *self.args]  # seedleague.launch.child starts it to die with this actor (PR_SET_PDEATHSIG)
        self.child = Child(command, log_path, name=name or f"`python {shlex.join(self.args)[:200]}`",
                           env=dict(os.environ, **(env or {})))
        self.child.start()

    @property
    def log_path(self) -> str:
        return self.child.log_path

    @property
    def starts(self) -> int:
        return self.child.starts

    def start(self) -> int:
        return self.child.start()

    def node(self) -> dict:
        """Where this runs: the node IP and id Ray reports (loopback outside Ray)."""
        ray = sys.modules.get("ray")  # imported by the Ray worker process this actor runs in
        if ray is None or not ray.is_initialized():
            return dict(ip="127.0.0.1", node_id="local")
        return dict(ip=ray.util.get_node_ip_address(), node_id=ray.get_runtime_context().get_node_id())

    def poll(self) -> Optional[int]:
        return self.child.poll()

    def restart(self) -> int:
        self.stop()
        return self.start()

    def ready_line(self, prefix: str) -> tuple[Optional[str], Optional[int], str]:
        """At once: (the first line of this start starting with `prefix` or None, the exit status or None,
        the end of the log when the child has exited without that line, else "")."""
        line = self.child.ready_line(prefix)
        status = self.child.poll()
        return line, status, self.child.tail(30) if line is None and status is not None else ""

    def wait_for_line(self, prefix: str, timeout_s: float) -> str:
        """Blocks: the first log line starting with `prefix`; `seedleague.launch.child.ChildFailed` (a RuntimeError naming the
        child, with its log tail) if it exits first or stays silent for `timeout_s`. For use outside an actor."""
        return self.child.wait_for_line(prefix, timeout_s)

    def tail(self, lines: int = 1) -> str:
        """The last `lines` lines of the log, as written ("" before it has any)."""
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(deque(f, maxlen=lines))
        except FileNotFoundError:
            return ""

    def read_json(self, path: str) -> Optional[dict]:
        """A JSON file on this node (the host's summary.json), or None."""
        try:
            with open(path) as f:
                return json.load(f)
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def stop(self, timeout_s: float = 10.0) -> Optional[int]:
        """SIGTERM the child's process group, SIGKILL it after `timeout_s`; returns the exit status."""
        return self.child.stop(timeout_s)


# ----------------------------------------------------------------- wiring --
@dataclasses.dataclass
class _Placed:
    """An actor this launch placed: its role, handle and the node it runs on."""

    name: str
    actor: Any
    log_path: str
    node: dict = dataclasses.field(default_factory=dict)

    def log_place(self) -> str:
        """Where its log is: the node's IP and the path there."""
        return f"{self.node.get('ip', '(not placed)')}:{self.log_path}"


@dataclasses.dataclass
class _Run:
    """What `launch` has placed so far, so teardown finds all of it however the run ends.

    `stopping` is set by SIGINT and SIGTERM: every wait of the launcher is a loop of short Ray
    calls that checks it, so a signal never interrupts Ray's own code (a Python exception raised
    inside `ray.wait` surfaces as a SystemError) and the run stops within a poll interval."""

    placed: list[_Placed] = dataclasses.field(default_factory=list)
    host: Optional[_Placed] = None
    worker_restarts: int = 0
    reason: str = "interrupted"
    stopping: threading.Event = dataclasses.field(default_factory=threading.Event)

    def check(self) -> None:
        if self.stopping.is_set():
            raise _Interrupted()

    def pause(self, seconds: float) -> None:
        if self.stopping.wait(seconds):
            raise _Interrupted()


class _Interrupted(Exception):
    """SIGTERM or Ctrl-C reached the launcher: every wait loop ends and the launch tears down."""


def launch(config: RayLaunchConfig) -> dict:
    """Place league, host and workers on the Ray cluster, watch them until the host ends, stop them all.

    Returns the host's summary.json (with `reason`, env and learner steps, wall_s)
    plus `launcher_reason`, `placement` (role -> node) and `worker_restarts`.
    """
    import ray

    ray.init(address=config.ray_address, log_to_driver=False, logging_level=logging.WARNING)
    run = _Run()
    old_handlers = {sig: signal.signal(sig, lambda signum, frame: run.stopping.set())
                    for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        _wire(ray, config, run)
    except _Interrupted:
        run.reason = "interrupted"
    finally:
        # Teardown is bounded by stop_timeout_s; a second Ctrl-C must not cut it short (the handler only sets the flag).
        summary = _teardown(ray, run, config)
        ray.shutdown()
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)
    summary.update(launcher_reason=run.reason, worker_restarts=run.worker_restarts,
                   placement={p.name: p.node for p in run.placed}, run_dir=config.run_dir)
    return summary


def _wire(ray, config: RayLaunchConfig, run: _Run) -> None:
    """Start league, host and workers in the order the data path needs them, then watch until the host ends."""
    runner = ray.remote(ProcessRunner)
    env = {TOKEN_ENV_VAR: os.environ[TOKEN_ENV_VAR]} if os.environ.get(TOKEN_ENV_VAR) else {}
    multiplayer = _is_multiplayer(config.env_id)
    resources = ray.cluster_resources()
    gpus = host_gpus(config, resources)
    cpus = worker_cpus(config, resources, multiplayer)
    # 1. The league (two-player games): the host asks it for opponents from its first step on.
    league_address = None
    if multiplayer:
        league = _place(runner, "league", league_args(config), os.path.join(config.run_dir, "league", "league.log"),
                        env, dict(num_cpus=config.league_cpus), run)
        _await_nodes(ray, [league], config, run)
        league_address = _wait_ready(ray, league, LEAGUE_READY, config, run)
    # 2. The host, bound to the node IP Ray reports, so workers on other nodes can reach it.
    run.host = _place(runner, "host", host_args(config, league_address), os.path.join(config.run_dir, "host.log"),
                      env, dict(num_cpus=config.host_cpus, num_gpus=gpus), run)
    _await_nodes(ray, [run.host], config, run)
    address = _wait_ready(ray, run.host, HOST_READY, config, run)
    print(f"ray-launch: host serving on {address} with {gpus:g} GPU; run directory {config.run_dir} "
          f"on node {run.host.node['ip']}", flush=True)
    # 3. The workers, spread over the nodes; Ray restarts an actor whose node dies (its
    # constructor starts the worker again), the watch loop a worker process that exits.
    workers = [_place(runner, f"worker-{i}", worker_args(config, i, address),
                      os.path.join(config.run_dir, "logs", f"ray-worker-{i}.log"), env,
                      dict(num_cpus=cpus, scheduling_strategy="SPREAD", max_restarts=config.max_restarts), run)
               for i in range(config.workers)]
    _await_nodes(ray, workers, config, run)
    _print_placement(run.placed)
    _watch(ray, run, workers, config)


def worker_cpus(config: RayLaunchConfig, cluster_resources: dict, multiplayer: bool) -> float:
    """CPUs each worker actor asks for: the configured number, else 1, or an equal share of the CPUs the host and
    league leave when that is less (a one-node `ray start --head` on 2 cores). ValueError, naming the flags to
    change, when the run cannot fit the cluster's CPUs: Ray would keep the actors waiting, placed nowhere."""
    total = float(cluster_resources.get("CPU", 0.0))
    servers = config.host_cpus + (config.league_cpus if multiplayer else 0.0)
    if config.worker_cpus is not None:
        cpus = config.worker_cpus
    elif config.workers:
        cpus = min(1.0, math.floor(100 * (total - servers) / config.workers) / 100)
    else:
        cpus = 1.0
    need = servers + config.workers * cpus
    if cpus < 0.01 or need > total + 1e-9:
        league = f" + league {config.league_cpus:g}" if multiplayer else ""
        raise ValueError(
            f"the run needs {need:g} CPUs (host {config.host_cpus:g}{league} + {config.workers} workers x "
            f"{max(cpus, 0.0):g}) and the Ray cluster has {total:g} in all (`ray status`), so Ray would never place "
            f"it: give fewer --workers, a smaller --worker-cpus (fractions work: Ray's CPUs are logical), "
            f"--host-cpus or --league-cpus, or add nodes")
    return cpus


def _is_multiplayer(env_id: str) -> bool:
    from seedleague import presets

    return presets.is_multiplayer(env_id)


def _place(runner, name: str, args: list[str], log_path: str, env: dict, options: dict, run: _Run) -> _Placed:
    """Create one ProcessRunner actor with Ray `options` (resources, scheduling, max_restarts)."""
    item = _Placed(name, runner.options(**options).remote(args, log_path, env, name), log_path)
    run.placed.append(item)
    return item


def _await_nodes(ray, items: Sequence[_Placed], config: RayLaunchConfig, run: _Run) -> None:
    """Wait until every actor in `items` runs (its child started) and note its node; every `report_interval_s`
    say which are still waiting. RuntimeError naming each actor that was not placed within `start_timeout_s`."""
    waiting = {item.actor.node.remote(): item for item in items}
    deadline = time.monotonic() + config.start_timeout_s
    notice = time.monotonic() + config.report_interval_s
    while waiting:
        run.check()
        ready, _ = ray.wait(list(waiting), num_returns=len(waiting), timeout=min(config.poll_interval_s, 0.5))
        for ref in ready:
            item = waiting.pop(ref)
            try:
                item.node = ray.get(ref)
            except ray.exceptions.RayError as error:
                raise RuntimeError(f"{item.name}'s Ray actor failed to start: {error}") from None
        now = time.monotonic()
        if waiting and now >= deadline:
            raise RuntimeError(f"Ray placed no node for {_names(waiting.values())} within {config.start_timeout_s:g} s: "
                               f"the cluster has {ray.available_resources()} free of {ray.cluster_resources()}; "
                               f"lower --worker-cpus/--host-cpus or add nodes")
        if waiting and now >= notice:
            notice = now + config.report_interval_s
            print(f"ray-launch: waiting for Ray to place {_names(waiting.values())}; free now: "
                  f"{ray.available_resources()}", flush=True)


def _names(items) -> str:
    return ", ".join(item.name for item in items)


def _wait_ready(ray, item: _Placed, prefix: str, config: RayLaunchConfig, run: _Run) -> str:
    """The address in `item`'s ready line (`prefix` ...); RuntimeError naming it, with its log tail, if its process
    exits first or prints no such line within `start_timeout_s`."""
    deadline = time.monotonic() + config.start_timeout_s
    while True:
        line, status, tail = _get(ray, item.actor.ready_line.remote(prefix), run, item)
        if line is not None:
            address = ready_address(line, prefix)
            if address is None:
                raise RuntimeError(f"{item.name}: could not read an address from {line!r}")
            return address
        where = f"its log {item.log_place()}"
        if status is not None:
            raise RuntimeError(f"{item.name} exited with status {status} before it printed {prefix.strip()!r}; "
                               f"the end of {where}:\n{tail}")
        if time.monotonic() >= deadline:
            tail = _get(ray, item.actor.tail.remote(30), run, item)
            raise RuntimeError(f"{item.name} did not print {prefix.strip()!r} within {config.start_timeout_s:g} s "
                               f"(--start-timeout); the end of {where}:\n{tail}")
        run.pause(min(config.poll_interval_s, 0.2))


def _get(ray, ref, run: _Run, item: _Placed, timeout_s: float = 60.0):
    """`ray.get(ref)` in short waits that notice a stop signal; RuntimeError naming `item` if its actor does not
    answer within `timeout_s` (its node is overloaded or gone)."""
    deadline = time.monotonic() + timeout_s
    while not ray.wait([ref], timeout=0.2)[0]:
        run.check()
        if time.monotonic() >= deadline:
            raise RuntimeError(f"{item.name}'s Ray actor did not answer within {timeout_s:g} s")
    return ray.get(ref)


def _print_placement(placed: Sequence[_Placed]) -> None:
    nodes: dict[str, list[str]] = {}
    for item in placed:
        nodes.setdefault(f"{item.node['ip']} ({item.node['node_id'][:8]})", []).append(item.name)
    for node, names in nodes.items():
        print(f"ray-launch: node {node}: {', '.join(names)}", flush=True)


def _watch(ray, run: _Run, workers: list[_Placed], config: RayLaunchConfig) -> None:
    """Until the host exits: restart workers that exit, print the host's progress line now and then."""
    last_report = time.monotonic()
    while True:
        status = _get(ray, run.host.actor.poll.remote(), run, run.host)
        if status is not None:
            run.reason = f"host exited with status {status}"
            return
        polls = [(item, item.actor.poll.remote()) for item in workers]  # all in flight at once
        for item, ref in polls:
            run.worker_restarts += _revive(ray, item, ref, run, config)
        if time.monotonic() - last_report >= config.report_interval_s:
            last_report = time.monotonic()
            line = _get(ray, run.host.actor.tail.remote(1), run, run.host).strip()
            if line:
                print(f"ray-launch: host: {line}", flush=True)
        run.pause(config.poll_interval_s)


def _revive(ray, item: _Placed, poll_ref, run: _Run, config: RayLaunchConfig) -> int:
    """1 if `item` needed a restart (its process exited, or its actor died and Ray restarts it), else 0."""
    restarts = run.worker_restarts
    try:
        status = _get(ray, poll_ref, run, item, timeout_s=30)
    except RuntimeError:  # no answer in time: its node is busy; the next poll asks again
        return 0
    except ray.exceptions.RayActorError as error:
        # The actor's process or node died. Ray restarts it (its constructor starts the
        # worker again) until max_restarts; an actor gone for good fails here every poll.
        if restarts >= config.max_restarts:
            raise RuntimeError(f"workers were restarted {restarts} times; {item.name}'s actor died: {error}") from None
        print(f"ray-launch: {item.name}'s actor died ({type(error).__name__}); Ray restarts it", flush=True)
        return 1
    if status is None:
        return 0
    from seedleague.launch.local import REFUSED_STATUS  # a worker that refuses its game: restarting it repeats the refusal

    tail = _get(ray, item.actor.tail.remote(20), run, item)
    where = item.log_place()
    if status == REFUSED_STATUS:
        raise RuntimeError(f"{item.name} refused to go on (exit status {REFUSED_STATUS}); the end of its log "
                           f"{where}:\n{tail}")
    if restarts >= config.max_restarts:
        raise RuntimeError(f"workers were restarted {restarts} times; {item.name} exited with status {status}, "
                           f"the end of its log {where}:\n{tail}")
    print(f"ray-launch: {item.name} exited with status {status}; restarting it. The end of its log {where}:\n"
          f"{tail}", flush=True)
    _get(ray, item.actor.restart.remote(), run, item)
    return 1


def _teardown(ray, run: _Run, config: RayLaunchConfig) -> dict:
    """Stop every child, workers and host first, then the league; read the host's summary; kill the actors.

    SIGTERM lets the host write its final checkpoint and summary.json. An actor Ray
    never placed has no child: it is killed without waiting. An actor that is
    already gone took its child with it (PR_SET_PDEATHSIG).
    """
    placed = [item for item in run.placed if item.node]
    for item in run.placed:
        if not item.node:
            ray.kill(item.actor, no_restart=True)
    league = [item for item in placed if item.name == "league"]
    for group in ([item for item in placed if item.name != "league"], league):
        if not group:
            continue
        print(f"ray-launch: stopping {_names(group)}", flush=True)
        refs = [item.actor.stop.remote(config.stop_timeout_s) for item in group]
        _, late = ray.wait(refs, num_returns=len(refs), timeout=config.stop_timeout_s + 10)
        if late:
            log.warning("%s did not answer the stop within %g s; killing their actors (and so their processes)",
                        _names(item for item, ref in zip(group, refs) if ref in late), config.stop_timeout_s + 10)
    summary: dict = {}
    if run.host is not None and run.host.node:
        ref = run.host.actor.read_json.remote(os.path.join(config.run_dir, "summary.json"))
        if ray.wait([ref], timeout=30)[0]:
            try:
                summary = ray.get(ref) or {}
            except ray.exceptions.RayError as error:
                log.warning("could not read the host's summary.json: %s", error)
    for item in placed:
        ray.kill(item.actor, no_restart=True)
    return summary


# -------------------------------------------------------------------- CLI --
def add_arguments(parser: argparse.ArgumentParser) -> None:
    from seedleague import presets

    parser.add_argument("--env", default=presets.DEFAULT_ENV, help="env id, as for `seedleague train` (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=None, help="env worker processes (default: the preset's)")
    parser.add_argument("--envs-per-worker", type=int, default=None, help="envs each worker steps (default: the preset's)")
    parser.add_argument("--address", default=None,
                        help="Ray cluster: 'auto', or the head's HOST:PORT (default: start a one-node Ray here)")
    parser.add_argument("--run-dir", default=None, help="outputs, same absolute path on every node (default: runs/<env>-<time>-ray)")
    budget = parser.add_argument_group("budget (passed to the host; the run ends when the host ends)")
    budget.add_argument("--max-seconds", type=float, default=None, help="stop after this many seconds (default: the preset's)")
    budget.add_argument("--max-learner-steps", type=int, default=None, help="stop after this many learner updates")
    budget.add_argument("--max-steps", type=int, default=None, help="stop after this many env steps")
    budget.add_argument("--target-return", type=float, default=None, help="stop when the mean return of 100 episodes reaches this")
    resources = parser.add_argument_group("resources per process (Ray logical resources)")
    resources.add_argument("--host-cpus", type=float, default=1.0, help="(default: %(default)s)")
    resources.add_argument("--host-gpus", type=float, default=None, help="(default: 1 when the cluster has a GPU, else 0)")
    resources.add_argument("--worker-cpus", type=float, default=None,
                           help="(default: 1, or an equal share of the CPUs the host and league leave, when less)")
    resources.add_argument("--league-cpus", type=float, default=0.5, help="(default: %(default)s)")
    parser.add_argument("--max-restarts", type=int, default=10, help="worker restarts allowed in all (default: %(default)s)")
    parser.add_argument("--league-args", default="", help="extra `seedleague league serve` flags, one quoted string")
    parser.add_argument("--start-timeout", type=float, default=300.0, help="seconds for each server to start (default: %(default)s)")


def config_from_args(args: argparse.Namespace, host_extra: Sequence[str]) -> RayLaunchConfig:
    """RayLaunchConfig from `add_arguments` flags; `host_extra` are further `seedleague host` flags."""
    from seedleague import presets

    preset = presets.preset_for(args.env)
    budget = []
    for flag, value in (("--max-seconds", args.max_seconds), ("--max-learner-steps", args.max_learner_steps),
                        ("--max-steps", args.max_steps), ("--target-return", args.target_return)):
        if value is not None:
            budget += [flag, str(value)]
    from seedleague.checkpoint import path_problem, safe_path_part

    run_dir = args.run_dir or os.path.join(
        "runs", f"{safe_path_part(args.env.replace(':', '_'))}-{datetime.datetime.now():%Y%m%d-%H%M%S}-ray")
    problem = path_problem(run_dir)
    if problem:
        raise ValueError(f"--run-dir {problem}")
    return RayLaunchConfig(
        env_id=args.env, run_dir=os.path.abspath(run_dir),
        workers=preset.workers if args.workers is None else args.workers,
        envs_per_worker=preset.envs_per_worker if args.envs_per_worker is None else args.envs_per_worker,
        ray_address=args.address, host_args=(*budget, *host_extra), league_args=tuple(shlex.split(args.league_args)),
        host_cpus=args.host_cpus, host_gpus=args.host_gpus, worker_cpus=args.worker_cpus,
        league_cpus=args.league_cpus, max_restarts=args.max_restarts, start_timeout_s=args.start_timeout,
    )


def print_summary(summary: dict) -> None:
    """The end of a run, as `seedleague train` prints it, plus the rate and where the outputs are."""
    wall = summary.get("wall_s") or 0.0
    fresh = summary.get("learner_steps") == summary.get("learner_step")  # after --resume env steps count from before
    rate = f"{summary.get('env_steps', 0) / wall:,.0f} env steps/s, " if wall and fresh else ""
    print(f"\nray run ended: {summary.get('reason', summary.get('launcher_reason'))}\n"
          f"  env steps {summary.get('env_steps')}, learner steps {summary.get('learner_step')}, "
          f"episodes {summary.get('episodes')}, mean return (last 100) {summary.get('mean_return')}, "
          f"{wall} s, {rate}worker restarts {summary.get('worker_restarts')}\n"
          f"  outputs: {summary.get('run_dir')} on node {summary.get('placement', {}).get('host', {}).get('ip')}",
          flush=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="seedleague ray-launch",
        description="Train on a Ray cluster: league, host and env workers as Ray actors. "
                    "Flags not listed here go to `seedleague host` (e.g. --learner.learning_rate 1e-3).")
    add_arguments(parser)
    args, host_extra = parser.parse_known_args(argv)
    try:
        import ray
    except ImportError:
        print("seedleague ray-launch needs Ray: pip install -e '.[ray]'", file=sys.stderr)
        return 2
    try:
        config = config_from_args(args, host_extra)
    except ValueError as error:
        print(f"seedleague ray-launch: {error}", file=sys.stderr)
        return 2
    try:
        summary = launch(config)
    except (RuntimeError, ValueError, ray.exceptions.RayError) as error:  # what could not start, and why
        print(f"seedleague ray-launch: {error}", file=sys.stderr)
        return 1
    print_summary(summary)
    if summary["launcher_reason"] == "interrupted":
        return 130
    return 0 if summary["launcher_reason"] == "host exited with status 0" else 1


if __name__ == "__main__":
    sys.exit(main())
