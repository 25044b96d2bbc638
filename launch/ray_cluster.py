"""Cluster launcher on Ray: the league service, the learner host and the env workers as Ray actors.

    pip install -e '.[ray]'
    ray start --head                                   # on one node; `ray start --address HEAD:6379` on the others
    seedleague ray-launch --env CartPole-v1 --workers 4 --envs-per-worker 16 --address auto --max-seconds 300
    python -m launch.ray_cluster ...                   # the same command

Each process of a run is the command `launch.local` would start, run by a
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
import os
import shlex
import signal
import subprocess
import sys
import time
from collections import deque
from typing import Any, Optional, Sequence

from seedleague.security import TOKEN_ENV_VAR  # the token travels in the environment, never on a command line

log = logging.getLogger(__name__)

HOST_READY = "seedleague host listening on "  # printed by launch.local once the host's server is up
LEAGUE_READY = "league serving on "  # printed by `seedleague league serve`
NODE_IP = "{node_ip}"  # in a command: replaced by the IP Ray reports for the node the actor runs on

# Run before the real command in every child: ask Linux to SIGTERM the child when
# its actor process dies (ray.kill, a lost node, a killed driver), so no process
# outlives the actor that placed it. The signal survives the exec; a parent that
# died before prctl ran is caught by the getppid check.
_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    "parent = int(sys.argv[1])\n"
    "try:\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG\n"
    "except (OSError, AttributeError):\n"
    "    pass  # not Linux: teardown still stops the child through ProcessRunner.stop\n"
    "if os.getppid() != parent:\n"
    "    sys.exit(143)\n"
    "os.execv(sys.executable, [sys.executable] + sys.argv[2:])\n"
)


# ------------------------------------------------------------------ config --
@dataclasses.dataclass(frozen=True)
class RayLaunchConfig:
    """A run on a Ray cluster: what to train, how many workers, what each process may use.

    ray_address: "auto" (the cluster this node belongs to), "HOST:PORT" of a head
        node, or None to start a one-node Ray on this machine.
    host_args: `seedleague host` flags besides --env/--run-dir/--address: the
        budget and any HostConfig flag (`--learner.learning_rate 1e-3`).
    host_gpus: GPUs for the host actor; None gives it 1 when the cluster has any.
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
    worker_cpus: float = 1.0
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
            if getattr(self, name) < 0:
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
    """The env worker of `config.env_id` (as launch.local starts it), pointed at the host."""
    from launch.local import worker_command

    command = worker_command(config.env_id, config.envs_per_worker)[1:]  # drop the driver's interpreter
    return [*command, "--address", host_address, "--seed", str(1000 * index)]


def ready_address(line: str, prefix: str) -> Optional[str]:
    """"seedleague host listening on 10.0.0.5:41234; run directory ..." -> "10.0.0.5:41234"."""
    if not line.startswith(prefix):
        return None
    return line[len(prefix):].split(";", 1)[0].strip() or None


# ------------------------------------------------------------------ actor --
class ProcessRunner:
    """One command as a child process of this (actor) process; its output in a log file on this node.

    Plain Python: `launch` wraps it with `ray.remote`. The constructor starts the
    child, so an actor that Ray restarts after a node failure starts it again.

        runner = ProcessRunner(["-m", "seedleague.cli", "host", "--address", NODE_IP + ":0", ...], "/runs/x/host.log")
        runner.poll()          # None while running, else the exit status
        runner.restart()       # a fresh child (same command)
        runner.stop(10.0)      # SIGTERM the child's process group, SIGKILL after 10 s
    """

    def __init__(self, args: Sequence[str], log_path: str, env: Optional[dict] = None):
        ip = self.node()["ip"]
        self.args = [arg.replace(NODE_IP, ip) for arg in args]  # a server binds its own node's IP
        self.log_path = log_path
        self._env = dict(os.environ, **(env or {}))
        self._proc: Optional[subprocess.Popen] = None
        self._log_offset = 0
        self.starts = 0
        self.start()

    def start(self) -> int:
        os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
        # The log is appended to (restarts, --resume): only lines after this offset are this child's.
        self._log_offset = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        command = [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()), *self.args]
        with open(self.log_path, "ab") as out:
            self._proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True, env=self._env)
        self.starts += 1
        return self._proc.pid

    def node(self) -> dict:
        """Where this runs: the node IP and id Ray reports (loopback outside Ray)."""
        ray = sys.modules.get("ray")  # imported by the Ray worker process this actor runs in
        if ray is None or not ray.is_initialized():
            return dict(ip="127.0.0.1", node_id="local")
        return dict(ip=ray.util.get_node_ip_address(), node_id=ray.get_runtime_context().get_node_id())

    def poll(self) -> Optional[int]:
        return None if self._proc is None else self._proc.poll()

    def restart(self) -> int:
        self.stop()
        return self.start()

    def wait_for_line(self, prefix: str, timeout_s: float) -> str:
        """The first log line starting with `prefix`, as soon as it appears; RuntimeError if the child exits first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with open(self.log_path, errors="replace") as f:
                f.seek(self._log_offset)
                for line in f:
                    if line.startswith(prefix):
                        return line.strip()
            if self.poll() is not None:
                raise RuntimeError(f"`python {shlex.join(self.args)[:200]}` exited with status {self.poll()} "
                                   f"before printing {prefix!r}; its log {self.log_path}:\n{self.tail(30)}")
            time.sleep(0.1)
        raise RuntimeError(f"no {prefix!r} line within {timeout_s:g} s; log {self.log_path}:\n{self.tail(30)}")

    def tail(self, lines: int = 1) -> str:
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
        proc = self._proc
        if proc is None:
            return None
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
        _signal_group(proc, signal.SIGKILL)  # anything the child left behind in its group
        return proc.returncode


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# ----------------------------------------------------------------- wiring --
@dataclasses.dataclass
class _Placed:
    """An actor this launch placed: its role, handle and the node it runs on."""

    name: str
    actor: Any
    node: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _Run:
    """What `launch` has placed so far, so teardown finds all of it however the run ends."""

    placed: list[_Placed] = dataclasses.field(default_factory=list)
    host: Optional[_Placed] = None
    worker_restarts: int = 0
    reason: str = "interrupted"


class _Interrupted(Exception):
    pass


def _interrupt(signum, frame):
    raise _Interrupted(f"signal {signum}")


def launch(config: RayLaunchConfig) -> dict:
    """Place league, host and workers on the Ray cluster, watch them until the host ends, stop them all.

    Returns the host's summary.json (with `reason`, env and learner steps, wall_s)
    plus `launcher_reason`, `placement` (role -> node) and `worker_restarts`.
    """
    import ray

    ray.init(address=config.ray_address, log_to_driver=False, logging_level=logging.WARNING)
    old_handlers = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    run = _Run()
    try:
        _wire(ray, config, run)
    except _Interrupted:
        run.reason = "interrupted"
    finally:
        for sig in old_handlers:  # teardown is bounded by stop_timeout_s; a second Ctrl-C must not cut it short
            signal.signal(sig, signal.SIG_IGN)
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
    gpus = host_gpus(config, ray.cluster_resources())
    # 1. The league (two-player games): the host asks it for opponents from its first step on.
    league_address = None
    if _is_multiplayer(config.env_id):
        league = _place(runner, "league", league_args(config), os.path.join(config.run_dir, "league", "league.log"),
                        env, dict(num_cpus=config.league_cpus), run)
        _await_nodes(ray, [league], config.start_timeout_s)
        league_address = _wait_ready(league, LEAGUE_READY, config)
    # 2. The host, bound to the node IP Ray reports, so workers on other nodes can reach it.
    run.host = _place(runner, "host", host_args(config, league_address), os.path.join(config.run_dir, "host.log"),
                      env, dict(num_cpus=config.host_cpus, num_gpus=gpus), run)
    _await_nodes(ray, [run.host], config.start_timeout_s)
    address = _wait_ready(run.host, HOST_READY, config)
    print(f"ray-launch: host serving on {address} with {gpus:g} GPU; run directory {config.run_dir} "
          f"on node {run.host.node['ip']}", flush=True)
    # 3. The workers, spread over the nodes; Ray restarts an actor whose node dies (its
    # constructor starts the worker again), the watch loop a worker process that exits.
    workers = [_place(runner, f"worker-{i}", worker_args(config, i, address),
                      os.path.join(config.run_dir, "logs", f"ray-worker-{i}.log"), env,
                      dict(num_cpus=config.worker_cpus, scheduling_strategy="SPREAD",
                           max_restarts=config.max_restarts), run)
               for i in range(config.workers)]
    _await_nodes(ray, workers, config.start_timeout_s)
    _print_placement(run.placed)
    _watch(ray, run, workers, config)


def _is_multiplayer(env_id: str) -> bool:
    from seedleague import presets

    return presets.is_multiplayer(env_id)


def _place(runner, name: str, args: list[str], log_path: str, env: dict, options: dict, run: _Run) -> _Placed:
    """Create one ProcessRunner actor with Ray `options` (resources, scheduling, max_restarts)."""
    item = _Placed(name, runner.options(**options).remote(args, log_path, env))
    run.placed.append(item)
    return item


def _await_nodes(ray, items: Sequence[_Placed], timeout_s: float) -> None:
    """Wait until every actor in `items` runs (its child started) and note its node."""
    refs = [item.actor.node.remote() for item in items]
    ready, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    if pending:
        missing = [item.name for item, ref in zip(items, refs) if ref in pending]
        raise RuntimeError(f"could not place {', '.join(missing)} within {timeout_s:g} s: the cluster has "
                           f"{ray.available_resources()} free of {ray.cluster_resources()}; "
                           f"lower --worker-cpus/--host-cpus or add nodes")
    for item, node in zip(items, ray.get(refs)):
        item.node = node


def _wait_ready(item: _Placed, prefix: str, config: RayLaunchConfig) -> str:
    import ray

    line = ray.get(item.actor.wait_for_line.remote(prefix, config.start_timeout_s))
    address = ready_address(line, prefix)
    if address is None:
        raise RuntimeError(f"{item.name}: could not read an address from {line!r}")
    return address


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
        status = ray.get(run.host.actor.poll.remote())
        if status is not None:
            run.reason = f"host exited with status {status}"
            return
        polls = [(item, item.actor.poll.remote()) for item in workers]  # all in flight at once
        for item, ref in polls:
            run.worker_restarts += _revive(ray, item, ref, run.worker_restarts, config)
        if time.monotonic() - last_report >= config.report_interval_s:
            last_report = time.monotonic()
            line = ray.get(run.host.actor.tail.remote(1)).strip()
            if line:
                print(f"ray-launch: host: {line}", flush=True)
        time.sleep(config.poll_interval_s)


def _revive(ray, item: _Placed, poll_ref, restarts: int, config: RayLaunchConfig) -> int:
    """1 if `item` needed a restart (its process exited, or its actor died and Ray restarts it), else 0."""
    try:
        status = ray.get(poll_ref, timeout=30)
    except ray.exceptions.GetTimeoutError:
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
    if restarts >= config.max_restarts:
        raise RuntimeError(f"workers were restarted {restarts} times; {item.name} exited with status {status}, "
                           f"its log:\n{ray.get(item.actor.tail.remote(20))}")
    print(f"ray-launch: {item.name} exited with status {status}; restarting it", flush=True)
    ray.get(item.actor.restart.remote())
    return 1


def _teardown(ray, run: _Run, config: RayLaunchConfig) -> dict:
    """Stop every child, workers and host first, then the league; read the host's summary; kill the actors.

    SIGTERM lets the host write its final checkpoint and summary.json. An actor
    that is already gone took its child with it (PR_SET_PDEATHSIG).
    """
    league = [item for item in run.placed if item.name == "league"]
    for group in ([item for item in run.placed if item.name != "league"], league):
        try:
            ray.get([item.actor.stop.remote(config.stop_timeout_s) for item in group], timeout=config.stop_timeout_s + 30)
        except Exception as error:
            log.warning("stopping %s: %s", [item.name for item in group], error)
    summary: dict = {}
    if run.host is not None:
        try:
            summary = ray.get(run.host.actor.read_json.remote(os.path.join(config.run_dir, "summary.json")),
                              timeout=30) or {}
        except Exception as error:
            log.warning("could not read the host's summary.json: %s", error)
    for item in run.placed:
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
    resources.add_argument("--worker-cpus", type=float, default=1.0, help="(default: %(default)s)")
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
    run_dir = args.run_dir or os.path.join(
        "runs", f"{args.env.replace('/', '_').replace(':', '_')}-{datetime.datetime.now():%Y%m%d-%H%M%S}-ray")
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
    except (RuntimeError, ray.exceptions.RayError) as error:  # what could not start, and why
        print(f"seedleague ray-launch: {error}", file=sys.stderr)
        return 1
    print_summary(summary)
    if summary["launcher_reason"] == "interrupted":
        return 130
    return 0 if summary["launcher_reason"] == "host exited with status 0" else 1


if __name__ == "__main__":
    sys.exit(main())
