"""The Ray launcher: its process runner and commands without Ray, then a real two-node Ray cluster
on this machine (loopback only) trained by the one documented command, and docs/cluster.md's
one-machine `ray start --head` recipe; the Ray tests skip where Ray is not installed (CI)."""

import argparse
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys

import pytest

from seedleague.launch import ray_cluster
from seedleague.launch.ray_cluster import HOST_READY, NODE_IP, ProcessRunner, RayLaunchConfig
from tests.conftest import wait_for

PY = sys.executable


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


def _pids_with(text: str) -> list[int]:
    """Live processes whose command line contains `text`."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if text.encode() in f.read() and _alive(int(name)):
                    pids.append(int(name))
        except OSError:
            pass
    return pids


# ------------------------------------------------------------ without Ray --
def test_process_runner_reads_the_ready_line_and_stops_its_child(tmp_path):
    log_path = str(tmp_path / "logs" / "child.log")
    script = "import time; print('ready at {node_ip}:1', flush=True); time.sleep(60)"
    runner = ProcessRunner(["-c", script], log_path)
    line = runner.wait_for_line("ready at ", timeout_s=20)
    assert line == "ready at 127.0.0.1:1"  # outside Ray the node IP is loopback
    assert runner.poll() is None
    assert runner.stop(timeout_s=5) == -signal.SIGTERM
    runner.restart()
    assert runner.starts == 2 and runner.poll() is None
    runner.stop(timeout_s=5)


def test_process_runner_reports_a_child_that_exits_before_it_is_ready(tmp_path):
    runner = ProcessRunner(["-c", "import sys; print('bad flag'); sys.exit(3)"], str(tmp_path / "c.log"))
    with pytest.raises(RuntimeError, match="(?s)status 3.*bad flag"):
        runner.wait_for_line("ready", timeout_s=20)


def test_the_child_dies_with_the_actor_process(tmp_path):
    """A SIGKILLed actor (ray.kill, a lost node) takes its child along: no orphaned servers."""
    marker = f"orphan-check-{os.getpid()}"
    parent = subprocess.Popen([PY, "-c", (
        "import sys, time\n"
        "from seedleague.launch.ray_cluster import ProcessRunner\n"
        f"ProcessRunner(['-c', 'import time; time.sleep(60)', '{marker}'], sys.argv[1])\n"
        "print('started', flush=True); time.sleep(60)\n"), str(tmp_path / "child.log")], stdout=subprocess.PIPE)
    assert parent.stdout.readline().strip() == b"started"
    wait_for(lambda: _pids_with(marker), 10, "the child")
    parent.kill()
    parent.wait()
    wait_for(lambda: not _pids_with(marker), 10, "the child to exit after its parent")


def test_commands_for_a_two_player_game_join_the_league_and_bind_the_node_ip():
    config = RayLaunchConfig("openspiel:kuhn_poker", "/runs/k", workers=2, envs_per_worker=8,
                             host_args=("--max-seconds", "30"))
    league = ray_cluster.league_args(config)
    assert league[:3] == ["-m", "seedleague.league.cli", "serve"] and f"{NODE_IP}:0" in league
    host = ray_cluster.host_args(config, "10.0.0.5:4000")
    assert host[host.index("--league.address") + 1] == "10.0.0.5:4000"
    assert host[host.index("--address") + 1] == f"{NODE_IP}:0" and host[-2:] == ["--max-seconds", "30"]
    worker = ray_cluster.worker_args(config, 1, "10.0.0.5:5000")
    assert worker[:2] == ["-m", "envs.openspiel_worker"] and "--seed" in worker
    assert worker[worker.index("--address") + 1] == "10.0.0.5:5000"
    assert ray_cluster.ready_address(HOST_READY + "10.0.0.5:5000; run directory /runs/k", HOST_READY) == "10.0.0.5:5000"


def test_config_errors_say_what_to_change():
    with pytest.raises(ValueError, match="run_dir must be absolute"):
        RayLaunchConfig("CartPole-v1", "runs/x", workers=1, envs_per_worker=1)
    with pytest.raises(ValueError, match="worker_cpus must be >= 0"):
        RayLaunchConfig("CartPole-v1", "/runs/x", workers=1, envs_per_worker=1, worker_cpus=-1)
    parser = argparse.ArgumentParser()
    ray_cluster.add_arguments(parser)
    with pytest.raises(ValueError, match=r"--run-dir .*contains '\[' and '\]'.*could not be read back"):
        ray_cluster.config_from_args(parser.parse_args(["--env", "CartPole-v1", "--run-dir", "/runs/x[1]"]), [])
    game = "openspiel:battleship(ship_sizes=[1],ship_values=[1])"  # its default run dir leaves out the brackets
    assert "ship_sizes=_1_" in ray_cluster.config_from_args(parser.parse_args(["--env", game]), []).run_dir
    config = RayLaunchConfig("CartPole-v1", "/runs/x", workers=1, envs_per_worker=1)
    assert ray_cluster.host_gpus(config, {"CPU": 2.0, "GPU": 1.0}) == 1.0
    assert ray_cluster.host_gpus(config, {"CPU": 2.0}) == 0.0


# --------------------------------------------------------------- with Ray --
# Ray replaces 127.0.0.1 with the machine's outward IP unless this is "0" (despite its
# name it only means "keep localhost local" on Linux); the test stays on loopback.
LOOPBACK_ENV = dict(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0")

# Two Ray nodes on this machine, both on 127.0.0.1, until SIGTERM (ray.cluster_utils
# runs a head and a second raylet as separate processes, as `ray start` twice would).
CLUSTER_SCRIPT = """
import signal, sys, time
from ray.cluster_utils import Cluster
node = dict(num_cpus=float(sys.argv[1]), num_gpus=0, node_ip_address="127.0.0.1", include_dashboard=False)
cluster = Cluster(initialize_head=True, head_node_args=node)
cluster.add_node(**node)
cluster.wait_for_nodes()
print("cluster address", cluster.address, flush=True)
signal.signal(signal.SIGTERM, lambda *args: sys.exit(0))
try:
    while True:
        time.sleep(1)
finally:
    cluster.shutdown()
"""


@pytest.fixture
def two_node_cluster(tmp_path):
    """The GCS address of a two-node Ray cluster, 1 CPU per node, loopback only."""
    pytest.importorskip("ray", reason="Ray is an optional extra (pip install -e '.[ray]'); the base install has none")
    log_path = tmp_path / "cluster.log"
    with open(log_path, "w") as out:
        proc = subprocess.Popen([PY, "-c", CLUSTER_SCRIPT, "1"], stdout=out, stderr=subprocess.STDOUT,
                                env=dict(os.environ, **LOOPBACK_ENV))
    try:
        wait_for(lambda: "cluster address" in log_path.read_text() or proc.poll() is not None, 120, "the Ray cluster")
        match = re.search(r"cluster address (\S+)", log_path.read_text())
        assert match, log_path.read_text()[-3000:]
        yield match.group(1)
    finally:
        _end(proc)


def _end(proc: subprocess.Popen) -> None:
    """SIGTERM: the cluster shuts its processes down; SIGKILL if it takes over a minute."""
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _trained(command: list[str], env: dict, run_dir: str, learner_steps: int) -> str:
    """Run a ray-launch command to its learner-step budget; its output, once its summary shows training."""
    result = subprocess.run(command, capture_output=True, text=True, timeout=280, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert f"reached {learner_steps} learner steps" in output, output[-4000:]
    with open(os.path.join(run_dir, "summary.json")) as f:
        summary = json.load(f)
    assert summary["learner_step"] >= learner_steps and summary["env_steps"] > 0
    return output


@contextlib.contextmanager
def _launched(command: list[str], log_path, env: dict):
    """The launcher as a process writing to `log_path`; SIGKILLed on the way out if a check failed first."""
    with open(log_path, "w") as out:
        launcher = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        yield launcher
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


def _interrupted(launcher: subprocess.Popen, log_path) -> str:
    """SIGTERM the launcher; its output, once it has exited with 130 (interrupted)."""
    launcher.send_signal(signal.SIGTERM)
    assert launcher.wait(120) == 130, log_path.read_text()[-4000:]
    return log_path.read_text()


TINY = ["--unroll_length", "8", "--batch_size", "4", "--network.hidden_sizes", "16", "--replay.capacity", "64"]


def test_one_command_trains_cartpole_on_two_ray_nodes_and_leaves_no_process(tmp_path, two_node_cluster):
    run_dir = str(tmp_path / "run")
    # The host takes a whole 1-CPU node, so both half-CPU workers must go to the other node.
    command = [PY, "-m", "seedleague.cli", "ray-launch", "--address", two_node_cluster, "--env", "CartPole-v1",
               "--workers", "2", "--envs-per-worker", "8", "--host-cpus", "1", "--worker-cpus", "0.5",
               "--run-dir", run_dir, "--max-learner-steps", "20", "--max-seconds", "90", *TINY]
    # A token in the launcher's environment must reach the host and every worker (else they are refused).
    env = dict(os.environ, SEEDLEAGUE_TOKEN="ray-test-token", **LOOPBACK_ENV)
    output = _trained(command, env, run_dir, 20)
    nodes = dict(re.findall(r"ray-launch: node \S+ \((\w+)\): (.*)", output))
    assert len(nodes) == 2, output  # two nodes, the host alone on one and the workers on the other
    assert sorted(nodes.values()) == ["host", "worker-0, worker-1"], nodes
    address = re.search(r"host serving on (\S+)", output).group(1)
    assert address.startswith("127.0.0.1:")
    wait_for(lambda: not _pids_with(run_dir) and not _pids_with(address), 20, "every placed process to exit")


@pytest.mark.slow  # `make test-slow`; with the test above, `make test` keeps one Ray run (about 45 s)
def test_sigterm_tears_down_everything_it_placed_and_restarts_a_dead_worker(tmp_path, two_node_cluster):
    run_dir = str(tmp_path / "run")
    log_path = tmp_path / "launch.log"
    command = [PY, "-m", "seedleague.launch.ray_cluster", "--address", two_node_cluster, "--env", "CartPole-v1",
               "--workers", "1", "--envs-per-worker", "4", "--worker-cpus", "0.5", "--run-dir", run_dir,
               "--max-seconds", "200", *TINY]
    with _launched(command, log_path, dict(os.environ, **LOOPBACK_ENV)) as launcher:
        wait_for(lambda: "node " in log_path.read_text() and "worker-0" in log_path.read_text(), 150, "the placement")
        address = re.search(r"host serving on (\S+)", log_path.read_text()).group(1)
        wait_for(lambda: _pids_with(address), 30, "the worker process")
        workers = _pids_with(address)
        os.kill(workers[0], signal.SIGKILL)  # the watch loop starts it again
        wait_for(lambda: "worker-0 exited" in log_path.read_text(), 30, "the restart")
        wait_for(lambda: _pids_with(address), 30, "the restarted worker")
        text = _interrupted(launcher, log_path)
    assert "worker restarts 1" in text, text[-3000:]
    with open(os.path.join(run_dir, "summary.json")) as f:
        assert json.load(f)["reason"] == "interrupted"  # the host stopped cleanly and wrote its summary
    wait_for(lambda: not _pids_with(run_dir) and not _pids_with(address), 20, "every placed process to exit")


# ------------------------------------------------ one `ray start --head` node --
@pytest.fixture
def one_node_head(tmp_path):
    """`ray start --head` on 127.0.0.1 with 2 CPUs, as docs/cluster.md's one-machine recipe: the environment in
    which `ray-launch --address auto` finds it (RAY_ADDRESS: `auto` reads it before Ray's global address file)."""
    pytest.importorskip("ray", reason="Ray is an optional extra (pip install -e '.[ray]'); the base install has none")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log_path = tmp_path / "ray-head.log"
    env = dict(os.environ, **LOOPBACK_ENV)
    command = [os.path.join(os.path.dirname(PY), "ray"), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
               "--port", str(port), "--num-cpus", "2", "--num-gpus", "0", "--include-dashboard=false"]
    with open(log_path, "w") as out:
        head = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    address = f"127.0.0.1:{port}"
    try:
        wait_for(lambda: "Ray runtime started" in log_path.read_text() or head.poll() is not None, 120, "ray start")
        assert head.poll() is None, log_path.read_text()[-3000:]
        yield dict(env, RAY_ADDRESS=address)
    finally:
        _end(head)  # --block: ray start stops the processes it started


def test_a_league_game_trains_on_one_ray_start_head_node_and_stops_on_sigterm(tmp_path, one_node_head):
    """docs/cluster.md's one-machine recipe with the default resources: league (0.5 CPU) + host (1 CPU) + a worker
    used to ask for 2.5 of the node's 2 CPUs, so Ray never placed the worker and the launcher waited silently."""
    run_dir = str(tmp_path / "run")
    command = [PY, "-m", "seedleague.cli", "ray-launch", "--address", "auto", "--env", "openspiel:kuhn_poker",
               "--workers", "1", "--envs-per-worker", "16", "--run-dir", run_dir, "--max-learner-steps", "3",
               "--max-seconds", "150", "--no-eval", *TINY]
    output = _trained(command, one_node_head, run_dir, 3)
    assert re.search(r"ray-launch: node 127\.0\.0\.1 \(\w+\): league, host, worker-0", output), output[-4000:]
    wait_for(lambda: not _pids_with(run_dir), 30, "every placed process to exit")

    # A host that exits before it serves (a bad flag) is named, with the end of its log: its own reason.
    bad = [*command[:command.index("--run-dir")], "--run-dir", str(tmp_path / "bad"), "--no-eval", "--bogus-flag", "1"]
    result = subprocess.run(bad, capture_output=True, text=True, timeout=280, env=one_node_head)
    assert result.returncode == 1, result.stdout + result.stderr
    assert re.search(r"host exited with status \d+ before it printed 'seedleague host listening on'; the end of "
                     r"its log 127\.0\.0\.1:\S+host\.log:\n(.|\n)*bogus-flag", result.stderr), result.stderr[-3000:]

    # SIGTERM while the host is still starting (placed, not yet serving): the launcher stops at once and cleanly.
    run_dir = str(tmp_path / "stopped")
    log_path = tmp_path / "stopped.log"
    command[command.index("--run-dir") + 1] = run_dir
    with _launched(command, log_path, one_node_head) as launcher:
        wait_for(lambda: os.path.exists(os.path.join(run_dir, "host.log")), 120, "the host's start")
        text = _interrupted(launcher, log_path)
    assert "ray run ended: interrupted" in text and "Traceback" not in text, text[-4000:]
    wait_for(lambda: not _pids_with(run_dir), 30, "every placed process to exit")


def test_resources_that_cannot_fit_the_cluster_are_refused_naming_the_flags():
    config = RayLaunchConfig("openspiel:kuhn_poker", "/runs/k", workers=2, envs_per_worker=8)
    assert ray_cluster.worker_cpus(config, {"CPU": 2.0}, multiplayer=True) == 0.25  # (2 - 1 - 0.5) / 2
    assert ray_cluster.worker_cpus(config, {"CPU": 8.0}, multiplayer=True) == 1.0
    explicit = RayLaunchConfig("openspiel:kuhn_poker", "/runs/k", workers=2, envs_per_worker=8, worker_cpus=1.0)
    with pytest.raises(ValueError, match=r"needs 3.5 CPUs \(host 1 \+ league 0.5 \+ 2 workers x 1\).* has 2 in all"
                                         r".*--worker-cpus"):
        ray_cluster.worker_cpus(explicit, {"CPU": 2.0}, multiplayer=True)
    with pytest.raises(ValueError, match="needs .* CPUs"):
        ray_cluster.worker_cpus(config, {"CPU": 1.0}, multiplayer=True)  # nothing left for the workers
