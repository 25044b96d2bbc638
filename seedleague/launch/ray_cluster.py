"""Cluster launcher on Ray: the league service, one learner host per player and the env workers as Ray actors.

    pip install -e '.[ray]'
    ray start --head                                   # on one node; `ray start --address HEAD:6379` on the others
    seedleague ray-launch --env CartPole-v1 --workers 4 --envs-per-worker 16 --address auto --max-seconds 300
    seedleague ray-launch --env openspiel:kuhn_poker --players main,exploiter:main_exploiter \
        --pool-url s3://bucket/runs/kuhn/pool --place main=node_a --place exploiter=node_b --address auto
    python -m seedleague.launch.ray_cluster ...        # the same command

Each process of a run is the command `seedleague.launch.local` would start, run by a
`ProcessRunner` actor as its child process (one code path for one machine and
for a cluster). Data path, in the order `launch` wires it:

    league service actor   `seedleague.league.cli serve`, on the launcher's node (its SQLite lives there)
          ▲ opponents, results, snapshots            model pool: --pool-url s3://... (object storage)
    host actor per player  `seedleague host --address NODE_IP:0`, 1 GPU when the cluster has one per player,
          ▲                  else spread over the nodes; --place NAME=RESOURCE pins it to a node
          ▲ StepBatch ⇄ ActionBatch over gRPC, to the node IP Ray reports for the host's node
    worker actors          `envs.gym_worker` / `envs.openspiel_worker`, spread over the nodes

No path is shared between nodes: without --run-dir each process writes under its own
node's Ray temporary directory (`ray start --temp-dir`), `<temp>/seedleague/<run>/`;
with --pool-url the snapshots and each host's checkpoints live in object storage, so
a host that Ray restarts on another node (its node died) resumes from its newest
checkpoint there, and the launcher points that player's workers at its new address.

The run ends when the first player's host ends (its budget: --max-seconds,
--max-learner-steps, --max-steps, --target-return), on Ctrl-C or SIGTERM; the
league's standings are printed, then every actor placed and every child process
is stopped. A worker process that exits is restarted by the watch loop, a worker
or host actor whose node dies is restarted by Ray (max_restarts); worker restarts
count against --max-restarts. Ray is optional (`.[ray]`); this module imports it
only inside `launch`.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import logging
import math
import os
import re
import shlex
import signal
import sys
import threading
import time
from collections import deque
from typing import Any, Optional, Sequence

from seedleague import games
from seedleague.launch.child import Child
from seedleague.launch.league import LEAGUE_READY, PlayerSpec
from seedleague.security import TOKEN_ENV_VAR  # the token travels in the environment, never on a command line

log = logging.getLogger(__name__)

HOST_READY = "seedleague host listening on "  # printed by seedleague.launch.local once the host's server is up
NODE_IP = "{node_ip}"  # in a command: replaced by the IP Ray reports for the node the actor runs on
NODE_TMP = "{node_tmp}"  # in a command, path or variable: replaced by the Ray temporary directory of that node
# The standard variables botocore reads: the launcher's reach each host through its environment (never argv).
STORE_ENV_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL",
                  "AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_MAX_ATTEMPTS")


# ------------------------------------------------------------------ config --
@dataclasses.dataclass(frozen=True)
class RayLaunchConfig:
    """A run on a Ray cluster: what to train, who plays, where each process goes, what each may use.

    run_dir: "" (each process writes under its own node's Ray temporary directory,
        `<temp>/seedleague/<run_name>`: no path shared between nodes) or an absolute
        path that every node writes under (a shared file system to see it in one place).
    players: the learning players (two-player games), one host each; the first one's
        host ends the run.
    pool_url: the model pool in object storage (`s3://bucket/folder`); each player's
        checkpoints then go beside it, to `<pool_url>-checkpoints/<player>`, so a host
        restarted on another node resumes. "" keeps both in the host's run directory.
    placement: (player, Ray resource) pairs: that player's host asks for a sliver of the
        custom resource, so it runs only on a node started with it (`ray start --resources`).
    ray_address: "auto" (the cluster this node belongs to), "HOST:PORT" of a head
        node, or None to start a one-node Ray on this machine.
    host_args: `seedleague host` flags besides --env/--run-dir/--address: the
        budget and any HostConfig flag (`--learner.learning_rate 1e-3`).
    host_gpus: GPUs for each host actor; None gives each 1 when the cluster has one per player.
    worker_cpus: CPUs for each worker actor; None gives each 1, or an equal share
        of the cluster's CPUs left by the hosts and league when that is less.
    workers: env workers per player.
    max_restarts: worker restarts allowed in all (process exits and actor deaths).
    """

    env_id: str
    run_dir: str
    workers: int
    envs_per_worker: int
    run_name: str = "run"
    players: tuple[PlayerSpec, ...] = (PlayerSpec("main"),)
    pool_url: str = ""
    placement: tuple[tuple[str, str], ...] = ()
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
        for name in ("host_args", "league_args", "players", "placement"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        problems = []
        if self.run_dir and not os.path.isabs(self.run_dir):
            problems.append(f"run_dir must be absolute (every node writes under the same path), got {self.run_dir!r}")
        if self.workers < 0 or self.envs_per_worker < 1:
            problems.append(f"workers must be >= 0 and envs_per_worker >= 1, got {self.workers} and {self.envs_per_worker}")
        names = [player.name for player in self.players]
        if not names or len(set(names)) != len(names) or not all(names):
            problems.append(f"players must be one or more distinct names, got {names}")
        unknown = sorted({player for player, _ in self.placement} - set(names))
        if unknown:
            problems.append(f"--place names {unknown}, which are not among the players {names}")
        if len(names) > 1 and not self.pool_url and not self.run_dir:
            problems.append("players on different nodes share their snapshots through object storage: give "
                            "--pool-url s3://BUCKET/FOLDER (or a --run-dir that every node mounts)")
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

    @property
    def node_dir(self) -> str:
        """The run's directory on whichever node a process runs (NODE_TMP is resolved there)."""
        return self.run_dir or f"{NODE_TMP}/seedleague/{self.run_name}"

    def player_dir(self, player: str) -> str:
        """A player's host writes here: the run directory itself when it is the only player."""
        return self.node_dir if len(self.players) == 1 else os.path.join(self.node_dir, "players", player)


def host_gpus(config: RayLaunchConfig, cluster_resources: dict) -> float:
    """GPUs each host actor asks for: the configured number, else 1 when the cluster has one for every player."""
    if config.host_gpus is not None:
        return config.host_gpus
    return 1.0 if cluster_resources.get("GPU", 0) >= len(config.players) else 0.0


def placement_problem(config: RayLaunchConfig, cluster_resources: dict) -> Optional[str]:
    """Why a --place cannot be met (no node of the cluster has its resource), or None."""
    for player, resource in config.placement:
        if cluster_resources.get(resource, 0) <= 0:
            return (f"--place {player}={resource}: no node of the Ray cluster has the resource {resource!r} "
                    f"(`ray status`), so Ray would never place player {player}'s host: start that node with "
                    f"`ray start --address HEAD:PORT --resources '{{\"{resource}\": 1}}'`, or fix --place")
    return None


def checkpoint_url(pool_url: str, player: str) -> str:
    """Where a player's host keeps its checkpoints when the pool is in object storage (beside the pool)."""
    return f"{pool_url.rstrip('/')}-checkpoints/{player}"


def store_problem(pool_url: str) -> Optional[str]:
    """Why the launcher cannot use `pool_url` (a bad URL, no credentials, the store refusing or away), or None.
    Checked from the launcher before anything is placed; the hosts get the launcher's AWS_* variables."""
    from seedleague import object_store
    from seedleague.storage import StorageError

    problem = object_store.url_problem(pool_url)
    if problem:
        return f"--pool-url {problem}"
    import botocore.session  # s3fs's dependency: where every process of the run will look for credentials

    if botocore.session.get_session().get_credentials() is None:
        return (f"--pool-url {pool_url}: no credentials for the object store: set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the launcher's environment; they reach every host through "
                "its environment, never a command line")
    try:
        object_store.folders(pool_url)
    except StorageError as error:
        return f"--pool-url: {error}"
    return None


# ---------------------------------------------------------------- commands --
# Commands are argv without the interpreter: each actor runs them with its own
# node's sys.executable (the driver's path need not exist on other nodes).
def league_args(config: RayLaunchConfig) -> list[str]:
    """`seedleague league serve` on port 0 of its node's IP, with the game preset's league config."""
    from seedleague import presets

    flags = presets.league_flags(presets.preset_for(config.env_id).league)
    return ["-m", "seedleague.league.cli", "serve", "--run-dir", os.path.join(config.node_dir, "league"),
            "--address", f"{NODE_IP}:0", *flags, *config.league_args]


def host_args(config: RayLaunchConfig, league_address: Optional[str], player: PlayerSpec = PlayerSpec("main"),
              index: int = 0) -> list[str]:
    """`seedleague host` on port 0 of its node's IP; in a league as `player`, the pool at --pool-url (or in its
    run dir), its checkpoints beside the pool when that is in object storage."""
    # In a league the host logs (INFO) the running total of results the league acknowledged after each report:
    # after a lost node its log, on that node's disk, still says how many the league must hold.
    level = ["--log-level", "INFO"] if league_address else []
    args = ["-m", "seedleague.cli", *level, "host", "--env", config.env_id, "--run-dir", config.player_dir(player.name),
            "--address", f"{NODE_IP}:0"]
    if league_address:
        pool = config.pool_url or os.path.join(config.node_dir, "pool")
        args += ["--league.address", league_address, "--league.player", player.name, "--league.role", player.role.value,
                 "--league.pool_dir", pool]
    if config.pool_url:
        args += ["--checkpoint.directory", checkpoint_url(config.pool_url, player.name)]
    if index:
        args += ["--seed", str(index * 7919)]  # as seedleague train seeds its extra players
    return args + list(config.host_args)


def host_env(config: RayLaunchConfig) -> dict:
    """What a host's environment adds: the token, the launcher's AWS_* variables, and (no --run-dir) its node's own
    cache for the object store's mirror and the compile cache (XDG_CACHE_HOME)."""
    env = {name: os.environ[name] for name in (TOKEN_ENV_VAR, *STORE_ENV_VARS) if os.environ.get(name)}
    if not config.run_dir:
        env["XDG_CACHE_HOME"] = f"{NODE_TMP}/seedleague/cache"
    return env


def worker_args(config: RayLaunchConfig, index: int, host_address: str) -> list[str]:
    """The env worker of `config.env_id` (as seedleague.launch.local starts it), pointed at the host."""
    command = games.worker_command(config.env_id, config.envs_per_worker)[1:]  # drop the driver's interpreter
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

    def __init__(self, args: Sequence[str], log_path: str, env: Optional[dict] = None, name: str = "",
                 restart_args: Sequence[str] = ()):
        """`restart_args` are added when Ray restarts this actor (its node died): a host's `--resume-or-start`."""
        self.where = self.node()
        self.env, self.name = dict(env or {}), name
        ray = sys.modules.get("ray")
        self.reconstructed = bool(ray and ray.is_initialized() and ray.get_runtime_context().was_current_actor_reconstructed)
        self.log_template = log_path
        self._launch(list(args) + (list(restart_args) if self.reconstructed else []), template=list(args))

    def _resolve(self, text: str) -> str:
        """A server binds its own node's IP; outputs go under its own node's temporary directory."""
        return text.replace(NODE_IP, self.where["ip"]).replace(NODE_TMP, self.where["temp_dir"])

    def _launch(self, args: list[str], template: list[str]) -> None:
        self.template = template  # the command as the launcher gave it (placeholders unresolved)
        self.args = [self._resolve(arg) for arg in args]
        command = [sys.executable, *self.args]  # seedleague.launch.child starts it to die with this actor (PR_SET_PDEATHSIG)
        env = dict(os.environ, **{key: self._resolve(value) for key, value in self.env.items()})
        self.child = Child(command, self._resolve(self.log_template), env=env,
                           name=self.name or f"`python {shlex.join(self.args)[:200]}`")
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
        """Where this runs: the node IP, id and temporary directory Ray reports (loopback and the system's temporary
        directory outside Ray), and whether Ray restarted this actor."""
        ray = sys.modules.get("ray")  # imported by the Ray worker process this actor runs in
        if ray is None or not ray.is_initialized():
            import tempfile

            return dict(ip="127.0.0.1", node_id="local", temp_dir=tempfile.gettempdir(), restarted=False)
        context = ray.get_runtime_context()
        return dict(ip=ray.util.get_node_ip_address(), node_id=context.get_node_id(), temp_dir=context.get_temp_dir(),
                    restarted=getattr(self, "reconstructed", False))

    def poll(self, args: Optional[Sequence[str]] = None) -> Optional[int]:
        """None while the child runs, else its exit status. Given `args` that differ from its command (a worker
        whose host moved), the child is started again with them first."""
        if args is not None and list(args) != self.template:
            self.child.stop(10.0)
            self._launch(list(args), template=list(args))
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
            with open(self._resolve(path)) as f:
                return json.load(f)
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def stop(self, timeout_s: float = 10.0) -> Optional[int]:
        """SIGTERM the child's process group, SIGKILL it after `timeout_s`; returns the exit status."""
        return self.child.stop(timeout_s)


# ----------------------------------------------------------------- wiring --
@dataclasses.dataclass
class _Placed:
    """An actor this launch placed: its role, handle, the node it runs on and (a worker) the command it should run."""

    name: str
    actor: Any
    log_path: str  # as given: NODE_TMP resolved on its node
    node: dict = dataclasses.field(default_factory=dict)
    args: Optional[list] = None  # a worker's command now: it follows its host when Ray restarts that elsewhere
    index: int = 0
    down: bool = False  # its actor died and Ray has not yet brought it back (counted once)

    def log_place(self) -> str:
        """Where its log is: the node's IP and the path there."""
        path = self.log_path.replace(NODE_TMP, self.node.get("temp_dir", NODE_TMP))
        return f"{self.node.get('ip', '(not placed)')}:{path}"


@dataclasses.dataclass
class _Run:
    """What `launch` has placed so far, so teardown finds all of it however the run ends.

    `stopping` is set by SIGINT and SIGTERM: every wait of the launcher is a loop of short Ray
    calls that checks it, so a signal never interrupts Ray's own code (a Python exception raised
    inside `ray.wait` surfaces as a SystemError) and the run stops within a poll interval."""

    placed: list[_Placed] = dataclasses.field(default_factory=list)
    hosts: dict[str, _Placed] = dataclasses.field(default_factory=dict)  # player -> host; the first ends the run
    workers: dict[str, list[_Placed]] = dataclasses.field(default_factory=dict)  # player -> its workers
    addresses: dict[str, str] = dataclasses.field(default_factory=dict)  # player -> its host's address now
    league_address: Optional[str] = None
    worker_restarts: int = 0
    host_restarts: int = 0
    reason: str = "interrupted"
    stopping: threading.Event = dataclasses.field(default_factory=threading.Event)

    @property
    def host(self) -> Optional[_Placed]:
        return next(iter(self.hosts.values()), None)

    def check(self) -> None:
        if self.stopping.is_set():
            raise _Interrupted()

    def pause(self, seconds: float) -> None:
        if self.stopping.wait(seconds):
            raise _Interrupted()


class _Interrupted(Exception):
    """SIGTERM or Ctrl-C reached the launcher: every wait loop ends and the launch tears down."""


def launch(config: RayLaunchConfig) -> dict:
    """Place league, hosts and workers on the Ray cluster, watch them until the first host ends, stop them all.

    Returns the first host's summary.json (with `reason`, env and learner steps, wall_s)
    plus `launcher_reason`, `placement` (role -> node), `worker_restarts`, `host_restarts`.
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
    host = run.host
    run_dir = config.player_dir(config.players[0].name)
    if host is not None and host.node:
        run_dir = run_dir.replace(NODE_TMP, host.node["temp_dir"])
    summary.update(launcher_reason=run.reason, worker_restarts=run.worker_restarts, host_restarts=run.host_restarts,
                   placement={p.name: p.node for p in run.placed}, run_dir=run_dir,
                   host_ip=host.node.get("ip") if host is not None else None)
    return summary


def _wire(ray, config: RayLaunchConfig, run: _Run) -> None:
    """Start league, hosts and workers in the order the data path needs them, then watch until the first host ends."""
    runner = ray.remote(ProcessRunner)
    env = {TOKEN_ENV_VAR: os.environ[TOKEN_ENV_VAR]} if os.environ.get(TOKEN_ENV_VAR) else {}
    multiplayer = _is_multiplayer(config.env_id)
    resources = ray.cluster_resources()
    problem = placement_problem(config, resources)
    if problem:
        raise ValueError(problem)
    gpus = host_gpus(config, resources)
    cpus = worker_cpus(config, resources, multiplayer)
    # 1. The league (two-player games), on the launcher's node, where its SQLite stays: the hosts ask it for
    # opponents from their first step on.
    if multiplayer:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        league = _place(runner, "league", league_args(config), os.path.join(config.node_dir, "league", "league.log"),
                        env, dict(num_cpus=config.league_cpus, scheduling_strategy=here), run)
        _await_nodes(ray, [league], config, run)
        run.league_address = _wait_ready(ray, league, LEAGUE_READY, config, run)
    # 2. A host per player, bound to the node IP Ray reports, so workers on other nodes can reach it. Pinned by
    # --place, else spread; with the pool in object storage Ray restarts it on a node that has room (--resume-or-start).
    pinned = dict(config.placement)
    for index, player in enumerate(config.players):
        options = dict(num_cpus=config.host_cpus, num_gpus=gpus, max_restarts=config.max_restarts if config.pool_url else 0)
        if player.name in pinned:
            options["resources"] = {pinned[player.name]: 0.001}
        else:
            options["scheduling_strategy"] = "SPREAD"
        name = "host" if len(config.players) == 1 else f"host-{player.name}"
        run.hosts[player.name] = _place(runner, name, host_args(config, run.league_address, player, index),
                                        os.path.join(config.player_dir(player.name), "host.log"), {**env, **host_env(config)},
                                        options, run, restart_args=["--resume-or-start"])
    _await_nodes(ray, list(run.hosts.values()), config, run)
    for player, host in run.hosts.items():
        run.addresses[player] = _wait_ready(ray, host, HOST_READY, config, run)
        print(f"ray-launch: {host.name} serving on {run.addresses[player]} with {gpus:g} GPU; run directory "
              f"{config.player_dir(player).replace(NODE_TMP, host.node['temp_dir'])} on node {host.node['ip']}", flush=True)
    # 3. The workers, spread over the nodes; Ray restarts an actor whose node dies (its
    # constructor starts the worker again), the watch loop a worker process that exits.
    for number, player in enumerate(config.players):
        run.workers[player.name] = []
        for i in range(config.workers):
            index = number * config.workers + i
            name = f"worker-{i}" if len(config.players) == 1 else f"worker-{player.name}-{i}"
            args = worker_args(config, index, run.addresses[player.name])
            item = _place(runner, name, args, os.path.join(config.player_dir(player.name), "logs", f"ray-worker-{i}.log"),
                          env, dict(num_cpus=cpus, scheduling_strategy="SPREAD", max_restarts=config.max_restarts), run)
            item.args, item.index = args, index
            run.workers[player.name].append(item)
    _await_nodes(ray, [item for items in run.workers.values() for item in items], config, run)
    _print_placement(run.placed)
    _watch(ray, run, config)


def worker_cpus(config: RayLaunchConfig, cluster_resources: dict, multiplayer: bool) -> float:
    """CPUs each worker actor asks for: the configured number, else 1, or an equal share of the CPUs the hosts and
    league leave when that is less (a one-node `ray start --head` on 2 cores). ValueError, naming the flags to
    change, when the run cannot fit the cluster's CPUs: Ray would keep the actors waiting, placed nowhere."""
    total = float(cluster_resources.get("CPU", 0.0))
    hosts = len(config.players)
    servers = hosts * config.host_cpus + (config.league_cpus if multiplayer else 0.0)
    workers = hosts * config.workers
    if config.worker_cpus is not None:
        cpus = config.worker_cpus
    elif workers:
        cpus = min(1.0, math.floor(100 * (total - servers) / workers) / 100)
    else:
        cpus = 1.0
    need = servers + workers * cpus
    if cpus < 0.01 or need > total + 1e-9:
        league = f" + league {config.league_cpus:g}" if multiplayer else ""
        host = f"{hosts} hosts x {config.host_cpus:g}" if hosts > 1 else f"host {config.host_cpus:g}"
        raise ValueError(
            f"the run needs {need:g} CPUs ({host}{league} + {workers} workers x "
            f"{max(cpus, 0.0):g}) and the Ray cluster has {total:g} in all (`ray status`), so Ray would never place "
            f"it: give fewer --workers, a smaller --worker-cpus (fractions work: Ray's CPUs are logical), "
            f"--host-cpus or --league-cpus, or add nodes")
    return cpus


def _is_multiplayer(env_id: str) -> bool:
    from seedleague import presets

    return presets.is_multiplayer(env_id)


def _place(runner, name: str, args: list[str], log_path: str, env: dict, options: dict, run: _Run,
           restart_args: Sequence[str] = ()) -> _Placed:
    """Create one ProcessRunner actor with Ray `options` (resources, scheduling, max_restarts)."""
    item = _Placed(name, runner.options(**options).remote(args, log_path, env, name, restart_args), log_path)
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


def _watch(ray, run: _Run, config: RayLaunchConfig) -> None:
    """Until the first host exits: bring back hosts Ray restarts, restart workers that exit, print progress now and
    then."""
    last_report = time.monotonic()
    first = next(iter(run.hosts))
    ended: set[str] = set()  # players whose own budget ended before the first one's
    while True:
        for player, host in run.hosts.items():
            if player in ended:
                continue
            status = _host_status(ray, run, player, config)
            if status is None:
                continue
            if player == first:
                run.reason = f"host exited with status {status}"
                return
            if status != 0:
                tail = _get(ray, host.actor.tail.remote(20), run, host)
                raise RuntimeError(f"{host.name} exited with status {status}; the end of its log {host.log_place()}:\n{tail}")
            ended.add(player)
        polls = [(item, item.actor.poll.remote(item.args)) for items in run.workers.values() for item in items]
        for item, ref in polls:  # all in flight at once
            run.worker_restarts += _revive(ray, item, ref, run, config)
        if time.monotonic() - last_report >= config.report_interval_s:
            last_report = time.monotonic()
            try:
                line = _progress_line(_get(ray, run.host.actor.tail.remote(20), run, run.host))
            except (RuntimeError, ray.exceptions.RayActorError):  # the next poll finds out what happened to it
                line = ""
            if line:
                print(f"ray-launch: {run.host.name}: {line}", flush=True)
        run.pause(config.poll_interval_s)


def _progress_line(tail: str) -> str:
    """The host's newest progress line in the end of its log (not a logging record: "2026-... INFO name: ...")."""
    lines = [line.strip() for line in tail.splitlines()
             if line.strip() and not re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\S* [A-Z]+ ", line)]
    return lines[-1] if lines else ""


def _host_status(ray, run: _Run, player: str, config: RayLaunchConfig) -> Optional[int]:
    """The exit status of `player`'s host process, or None while it runs (or its actor is being brought back)."""
    host = run.hosts[player]
    try:
        return _get(ray, host.actor.poll.remote(), run, host, timeout_s=30)
    except RuntimeError:  # no answer in time: its node is busy or being declared dead; the next poll asks again
        return None
    except ray.exceptions.RayActorError as error:
        if not config.pool_url:  # its checkpoints were on the lost node: a restart elsewhere could not resume
            raise RuntimeError(f"{host.name}'s Ray actor died ({error}); with its checkpoints on that node it is not "
                               "restarted: give --pool-url for a run that outlives a node") from None
        _host_back(ray, run, player, config, error)
        return None


def _host_back(ray, run: _Run, player: str, config: RayLaunchConfig, error: Exception) -> None:
    """Wait for Ray to restart `player`'s host (its actor died with its node), then point its workers at its new
    address. The restarted host resumes from its newest checkpoint in object storage (--resume-or-start)."""
    host = run.hosts[player]
    pin = dict(config.placement).get(player)
    needs = f" on a node with the resource {pin!r}" if pin else ""
    print(f"ray-launch: {host.name}'s actor died ({type(error).__name__}: its process or node is gone); waiting for "
          f"Ray to restart it{needs}", flush=True)
    died = time.monotonic()
    notice = died + config.report_interval_s
    while True:
        run.check()
        try:
            node = _get(ray, host.actor.node.remote(), run, host, timeout_s=config.report_interval_s)
            if node.get("restarted"):
                break
        except (RuntimeError, ray.exceptions.RayActorError):  # not back yet (or its call was lost with it)
            pass
        now = time.monotonic()
        if now - died >= config.start_timeout_s:
            raise RuntimeError(f"Ray did not restart {host.name} within {config.start_timeout_s:g} s (--start-timeout)"
                               f"{needs}: the cluster has {ray.available_resources()} free")
        if now >= notice:
            notice = now + config.report_interval_s
            print(f"ray-launch: still waiting for Ray to restart {host.name}{needs}; free now: "
                  f"{ray.available_resources()}", flush=True)
        run.pause(config.poll_interval_s)
    host.node = node
    address = run.addresses[player] = _wait_ready(ray, host, HOST_READY, config, run)
    run.host_restarts += 1
    for item in run.workers.get(player, []):
        item.args = worker_args(config, item.index, address)  # each worker restarts on it at its next poll
    print(f"ray-launch: {host.name} is back on node {node['ip']} ({node['node_id'][:8]}) at {address}, "
          f"{time.monotonic() - died:.1f} s after its actor died; its workers follow it", flush=True)


def _revive(ray, item: _Placed, poll_ref, run: _Run, config: RayLaunchConfig) -> int:
    """1 if `item` needed a restart (its process exited, or its actor died and Ray restarts it), else 0."""
    restarts = run.worker_restarts
    try:
        status = _get(ray, poll_ref, run, item, timeout_s=30)
    except RuntimeError:  # no answer in time: its node is busy; the next poll asks again
        return 0
    except ray.exceptions.RayActorError as error:
        # The actor's process or node died. Ray restarts it (its constructor starts the
        # worker again, and the next poll gives it its host's address now) until max_restarts.
        if item.down:  # still coming back: counted when it died
            return 0
        if restarts >= config.max_restarts:
            raise RuntimeError(f"workers were restarted {restarts} times; {item.name}'s actor died: {error}") from None
        print(f"ray-launch: {item.name}'s actor died ({type(error).__name__}); Ray restarts it", flush=True)
        item.down = True
        return 1
    item.down = False
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
    """Stop every child, workers and hosts first, print the league's standings, then stop the league; read the first
    host's summary; kill the actors.

    SIGTERM lets each host deliver its results and write its final checkpoint and summary.json. An actor Ray
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
        if group is league:
            _print_standings(run.league_address)
        print(f"ray-launch: stopping {_names(group)}", flush=True)
        refs = [item.actor.stop.remote(config.stop_timeout_s) for item in group]
        _, late = ray.wait(refs, num_returns=len(refs), timeout=config.stop_timeout_s + 10)
        if late:
            log.warning("%s did not answer the stop within %g s; killing their actors (and so their processes)",
                        _names(item for item, ref in zip(group, refs) if ref in late), config.stop_timeout_s + 10)
    summary: dict = {}
    host = run.host
    if host is not None and host.node:
        ref = host.actor.read_json.remote(os.path.join(config.player_dir(config.players[0].name), "summary.json"))
        if ray.wait([ref], timeout=30)[0]:
            try:
                summary = ray.get(ref) or {}
            except ray.exceptions.RayError as error:
                log.warning("could not read the host's summary.json: %s", error)
    for item in placed:
        ray.kill(item.actor, no_restart=True)
    return summary


def _print_standings(address: Optional[str]) -> None:
    """The league's leaderboard, read from the running service (it is on this node) before it stops."""
    if not address:
        return
    from seedleague.league.client import LeagueClient
    from seedleague.security import ClientSecurity

    client = LeagueClient(address, ClientSecurity(token=os.environ.get(TOKEN_ENV_VAR, "")), timeout_s=10,
                          retry_deadline_s=10)
    try:
        print(f"ray-launch: league standings ({address}):\n{client.leaderboard_text()}", flush=True)
    except Exception as error:  # the run's result does not depend on the league answering now
        print(f"ray-launch: could not read the league standings from {address}: {error}", flush=True)
    finally:
        client.close()


# -------------------------------------------------------------------- CLI --
def add_arguments(parser: argparse.ArgumentParser) -> None:
    from seedleague import presets

    parser.add_argument("--env", default=presets.DEFAULT_ENV, help="env id, as for `seedleague train` (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=None, help="env worker processes (default: the preset's)")
    parser.add_argument("--envs-per-worker", type=int, default=None, help="envs each worker steps (default: the preset's)")
    parser.add_argument("--address", default=None,
                        help="Ray cluster: 'auto', or the head's HOST:PORT (default: start a one-node Ray here)")
    parser.add_argument("--run-dir", default=None,
                        help="outputs, the same absolute path on every node (default: each node's own Ray temporary "
                             "directory, <temp>/seedleague/<env>-<time>-ray: no path shared between nodes)")
    parser.add_argument("--players", default=None,
                        help="learning players, NAME[:ROLE],... (two-player games; one host each, the first ends the "
                             "run; default: main)")
    parser.add_argument("--pool-url", default="",
                        help="the model pool in object storage, s3://BUCKET/FOLDER; each player's checkpoints go to "
                             "FOLDER-checkpoints/<player>, so a host restarted on another node resumes. Credentials "
                             "and address from the AWS_* variables (default: the pool in the host's run directory)")
    parser.add_argument("--place", action="append", default=[], metavar="PLAYER=RESOURCE",
                        help="run PLAYER's host only on a node started with the Ray resource RESOURCE "
                             "(`ray start --resources '{\"RESOURCE\": 1}'`); repeat per player")
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
    from seedleague.checkpoint_config import path_problem, safe_path_part

    preset = presets.preset_for(args.env)
    budget = []
    for flag, value in (("--max-seconds", args.max_seconds), ("--max-learner-steps", args.max_learner_steps),
                        ("--max-steps", args.max_steps), ("--target-return", args.target_return)):
        if value is not None:
            budget += [flag, str(value)]
    run_name = f"{safe_path_part(args.env.replace(':', '_'))}-{datetime.datetime.now():%Y%m%d-%H%M%S}-ray"
    problem = path_problem(args.run_dir) if args.run_dir else None
    if problem:
        raise ValueError(f"--run-dir {problem}")
    players = tuple(PlayerSpec.parse(text) for text in (args.players or "main").split(","))
    if len(players) > 1 and not presets.is_multiplayer(args.env):
        raise ValueError(f"--players: {args.env} is not a two-player game, so it trains one player; drop --players")
    placement = []
    for text in args.place:
        player, sep, resource = text.partition("=")
        if not sep or not player.strip() or not resource.strip():
            raise ValueError(f"--place {text!r}: expected PLAYER=RESOURCE, e.g. --place main=node_a")
        placement.append((player.strip(), resource.strip()))
    return RayLaunchConfig(
        env_id=args.env, run_dir=os.path.abspath(args.run_dir) if args.run_dir else "", run_name=run_name,
        workers=preset.workers if args.workers is None else args.workers,
        envs_per_worker=preset.envs_per_worker if args.envs_per_worker is None else args.envs_per_worker,
        players=players, pool_url=args.pool_url, placement=tuple(placement),
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
          f"{wall} s, {rate}worker restarts {summary.get('worker_restarts')}, host restarts {summary.get('host_restarts')}\n"
          f"  outputs: {summary.get('run_dir')} on node {summary.get('host_ip')}",
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
        problem = store_problem(config.pool_url) if config.pool_url else None
    except ValueError as error:
        problem = str(error)
    if problem:
        print(f"seedleague ray-launch: {problem}", file=sys.stderr)
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
