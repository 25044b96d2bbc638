"""The Ray launcher: its process runner and commands without Ray, then a real two-node Ray cluster on this
machine (two `ray start` on loopback, each node with its own --temp-dir and resource, as docs/cluster.md's
two-machine recipe) shared by the module: two league players pinned to different nodes with the pool on an
S3 server (moto's, on loopback), one node SIGKILLed mid-run and replaced; CartPole trained by the one
documented command. Ray is in the `dev` extra, so CI runs them; they skip where Ray is not installed."""

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time

import pytest

from seedleague.launch import ray_cluster
from seedleague.launch.league import PlayerSpec
from seedleague.launch.ray_cluster import HOST_READY, NODE_IP, NODE_TMP, ProcessRunner, RayLaunchConfig
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


def test_players_with_a_pool_in_object_storage_keep_no_path_or_secret_on_their_command_lines(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "never-on-argv")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    players = (PlayerSpec("main"), PlayerSpec.parse("exploiter:main_exploiter"))
    config = RayLaunchConfig("openspiel:kuhn_poker", "", workers=1, envs_per_worker=8, players=players,
                             pool_url="s3://bucket/run/pool", placement=(("exploiter", "node_b"),))
    host = ray_cluster.host_args(config, "10.0.0.5:4000", players[1], 1)
    assert host[host.index("--run-dir") + 1] == f"{NODE_TMP}/seedleague/run/players/exploiter"  # on its own node
    assert host[host.index("--league.pool_dir") + 1] == "s3://bucket/run/pool"
    assert host[host.index("--checkpoint.directory") + 1] == "s3://bucket/run/pool-checkpoints/exploiter"
    assert host[host.index("--league.role") + 1] == "main_exploiter" and "never-on-argv" not in " ".join(host)
    env = ray_cluster.host_env(config)
    assert env["AWS_SECRET_ACCESS_KEY"] == "never-on-argv" and env["XDG_CACHE_HOME"] == f"{NODE_TMP}/seedleague/cache"
    assert ray_cluster.league_args(config)[4] == f"{NODE_TMP}/seedleague/run/league"
    assert "node_b" in ray_cluster.placement_problem(config, {"CPU": 8.0, "node_a": 1.0})
    assert ray_cluster.placement_problem(config, {"CPU": 8.0, "node_b": 1.0}) is None
    assert ray_cluster.host_gpus(config, {"GPU": 1.0}) == 0.0 and ray_cluster.host_gpus(config, {"GPU": 2.0}) == 1.0


def test_process_runner_puts_outputs_under_its_nodes_temp_dir_and_follows_new_args(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # outside Ray the node's temporary directory is the system's
    script = "import sys, time; print('ready', sys.argv[1], flush=True); time.sleep(60)"
    runner = ProcessRunner(["-c", script, "first"], f"{NODE_TMP}/logs/w.log", env={"OUT": f"{NODE_TMP}/out"})
    assert runner.wait_for_line("ready", timeout_s=20) == "ready first"
    assert runner.log_path == str(tmp_path / "logs" / "w.log")
    assert runner.poll(["-c", script, "first"]) is None and runner.starts == 1  # the same command: left alone
    assert runner.poll(["-c", script, "second"]) is None  # a new command (its host moved): started again with it
    assert runner.wait_for_line("ready", timeout_s=20) == "ready second"
    runner.stop(timeout_s=5)


def test_config_errors_say_what_to_change():
    with pytest.raises(ValueError, match="run_dir must be absolute"):
        RayLaunchConfig("CartPole-v1", "runs/x", workers=1, envs_per_worker=1)
    with pytest.raises(ValueError, match="worker_cpus must be >= 0"):
        RayLaunchConfig("CartPole-v1", "/runs/x", workers=1, envs_per_worker=1, worker_cpus=-1)
    parser = argparse.ArgumentParser()
    ray_cluster.add_arguments(parser)
    with pytest.raises(ValueError, match=r"--run-dir .*contains '\[' and '\]'.*could not be read back"):
        ray_cluster.config_from_args(parser.parse_args(["--env", "CartPole-v1", "--run-dir", "/runs/x[1]"]), [])
    game = "openspiel:battleship(ship_sizes=[1],ship_values=[1])"  # its default run name leaves out the brackets
    assert "ship_sizes=_1_" in ray_cluster.config_from_args(parser.parse_args(["--env", game]), []).run_name
    with pytest.raises(ValueError, match="--place 'main': expected PLAYER=RESOURCE"):
        ray_cluster.config_from_args(parser.parse_args(["--env", "openspiel:kuhn_poker", "--place", "main"]), [])
    with pytest.raises(ValueError, match="--players: CartPole-v1 is not a two-player game"):
        ray_cluster.config_from_args(parser.parse_args(["--env", "CartPole-v1", "--players", "a,b"]), [])
    with pytest.raises(ValueError, match="give --pool-url s3://BUCKET/FOLDER"):
        RayLaunchConfig("openspiel:kuhn_poker", "", workers=1, envs_per_worker=1,
                        players=(PlayerSpec("a"), PlayerSpec("b")))
    with pytest.raises(ValueError, match=r"--place names \['c'\]"):
        RayLaunchConfig("openspiel:kuhn_poker", "", workers=1, envs_per_worker=1, pool_url="s3://b/p",
                        players=(PlayerSpec("a"), PlayerSpec("b")), placement=(("c", "node_c"),))
    config = RayLaunchConfig("CartPole-v1", "/runs/x", workers=1, envs_per_worker=1)
    assert ray_cluster.host_gpus(config, {"CPU": 2.0, "GPU": 1.0}) == 1.0
    assert ray_cluster.host_gpus(config, {"CPU": 2.0}) == 0.0


# --------------------------------------------------------------- with Ray --
# Nodes on 127.0.0.2: loopback, but not an address Ray rewrites (with more than one node it replaces
# 127.0.0.1 and localhost by the machine's outward IP). Node deaths are noticed within ~3 s.
LOOPBACK = "127.0.0.2"
RAY_ENV = dict(RAY_USAGE_STATS_ENABLED="0", RAY_health_check_period_ms="1000", RAY_health_check_timeout_ms="1000",
               RAY_health_check_failure_threshold="3")
RAY = os.path.join(os.path.dirname(PY), "ray")


def _descendants(pid: int) -> list[int]:
    """`pid` and every process below it (what a `ray start --block` started: raylet, workers, their children)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(name))
            except (OSError, IndexError):
                pass
    found, stack = [], [pid]
    while stack:
        found.append(stack.pop())
        stack += children.get(found[-1], [])
    return found


class RayNodes:
    """Ray nodes on this machine, each `ray start --block` with its own --temp-dir and a resource named after it
    (the commands of docs/cluster.md's two-machine recipe, on loopback)."""

    def __init__(self, env: dict):
        with socket.socket() as s:
            s.bind((LOOPBACK, 0))
            self.port = s.getsockname()[1]
        self.address = f"{LOOPBACK}:{self.port}"
        self.env = env
        self.nodes: dict[str, subprocess.Popen] = {}
        self.temp_dirs: list[str] = []  # every node's, in start order (a replaced node's too)

    def start(self, name: str, head: bool = False) -> str:
        """Start node `name` (resource `name`, 4 logical CPUs); returns its temporary directory once it runs."""
        temp = tempfile.mkdtemp(prefix=f"ray-{name}-", dir="/tmp")  # short: Ray's unix sockets live under it
        self.temp_dirs.append(temp)
        where = ["--head", "--port", str(self.port), "--include-dashboard=false"] if head else ["--address", self.address]
        command = [RAY, "start", "--block", *where, "--node-ip-address", LOOPBACK, "--num-cpus", "4", "--num-gpus", "0",
                   "--temp-dir", temp, "--resources", json.dumps({name: 1})]
        log_path = os.path.join(temp, "ray-start.log")
        with open(log_path, "w") as out:
            node = self.nodes[name] = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=self.env)
        wait_for(lambda: "Ray runtime started" in open(log_path).read() or node.poll() is not None, 120, f"node {name}")
        assert node.poll() is None, open(log_path).read()[-3000:]
        return temp

    def kill(self, name: str) -> None:
        """SIGKILL every process of node `name` at once, as a machine that loses power."""
        node = self.nodes.pop(name)
        pids = _descendants(node.pid)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        node.wait()
        wait_for(lambda: not [pid for pid in pids if _alive(pid)], 30, f"node {name}'s processes to die")

    def stop(self) -> None:
        for node in reversed(list(self.nodes.values())):  # the head last
            _end(node)
        for temp in self.temp_dirs:
            shutil.rmtree(temp, ignore_errors=True)


def _end(proc: subprocess.Popen) -> None:
    """SIGTERM (`ray start --block` stops what it started); SIGKILL if it takes over a minute."""
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _without_store_vars(env: dict) -> dict:
    return {key: value for key, value in env.items() if not key.startswith("AWS_")}


@pytest.fixture(scope="module")
def cluster():
    """Two Ray nodes for the module: node_a (the head) and node_b, neither with the store's variables."""
    pytest.importorskip("ray", reason="Ray is in the dev extra (pip install -e '.[dev]')")
    nodes = RayNodes(_without_store_vars(dict(os.environ, **RAY_ENV)))
    try:
        nodes.start("node_a", head=True)
        nodes.start("node_b")
        yield nodes
    finally:
        nodes.stop()


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """moto's S3 server on loopback with bucket "pool"; the AWS_* variables that point at it (for the launcher only)."""
    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    from tests.test_object_store import S3Server, _env

    tmp = str(tmp_path_factory.mktemp("s3"))
    server = S3Server(tmp)
    env = _env(server.endpoint, os.path.join(tmp, "cache"))
    saved = {name: os.environ.get(name) for name in env}  # as tests/test_object_store.py makes its bucket
    try:
        os.environ.update(env)
        import s3fs

        s3fs.S3FileSystem(skip_instance_cache=True).mkdir("pool")
        _restore(saved)  # only the launcher gets them: other modules' tests share this process
        yield env
    finally:
        _restore(saved)
        server.stop()


def _restore(saved: dict) -> None:
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _fs(env: dict):
    import s3fs

    return s3fs.S3FileSystem(key=env["AWS_ACCESS_KEY_ID"], secret=env["AWS_SECRET_ACCESS_KEY"], skip_instance_cache=True,
                             endpoint_url=env["AWS_ENDPOINT_URL"])


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
    assert launcher.wait(180) == 130, log_path.read_text()[-4000:]
    return log_path.read_text()


TINY = ["--unroll_length", "8", "--batch_size", "4", "--network.hidden_sizes", "16", "--replay.capacity", "64"]
# For the two-node Kuhn league run: one Adam step an update (the game recipe takes 4 x 4). It checks placement, the
# store, a lost node and results, not learning, and each host (and the one restarted) compiles its update.
ONE_ADAM_STEP = ["--learner.epochs", "1", "--learner.minibatches", "1"]


def _acknowledged(host_log: str) -> list[int]:
    """The running totals a host logs after each acknowledged report ("... N acknowledged in all ...")."""
    try:
        with open(host_log) as f:
            return [int(n) for n in re.findall(r"(\d+) acknowledged in all", f.read())]
    except FileNotFoundError:
        return []


def _stored(league_db: str, player: str) -> int:
    """Results of `player` committed in the league's database (read-only, beside the running service)."""
    with contextlib.closing(sqlite3.connect(f"file:{league_db}?mode=ro", uri=True, timeout=30)) as db:
        return db.execute("SELECT COUNT(*) FROM results WHERE player = ?", (player,)).fetchone()[0]


def _checkpoints(fs, url: str) -> list[int]:
    """Complete checkpoint steps under `url` in the store (each has its `.complete` marker)."""
    try:
        names = [path.rsplit("/", 1)[-1] for path in fs.ls(url, refresh=True)]
    except FileNotFoundError:
        return []
    return sorted(int(name.split(".")[0]) for name in names if name.endswith(".complete"))


def test_two_players_on_two_nodes_share_a_pool_in_s3_and_a_killed_node_loses_no_acknowledged_result(
        tmp_path, cluster, s3):
    node_a, node_b = cluster.temp_dirs[:2]
    pool = f"s3://pool/{tmp_path.name}/pool"
    command = [PY, "-m", "seedleague.cli", "ray-launch", "--address", cluster.address, "--env", "openspiel:kuhn_poker",
               "--players", "main,exploiter:main_exploiter", "--pool-url", pool,
               "--place", "main=node_a", "--place", "exploiter=node_b", "--workers", "1", "--envs-per-worker", "16",
               "--worker-cpus", "0.5", "--max-seconds", "600", "--no-eval", "--checkpoint.interval-s", "2",
               "--league-args", "--snapshot-interval-steps 5", *TINY, *ONE_ADAM_STEP]
    log_path = tmp_path / "launch.log"
    env = dict(os.environ, **s3)  # the store's variables: the launcher's environment only, not the nodes'
    fs = _fs(s3)
    with _launched(command, log_path, env) as launcher:
        wait_for(lambda: "ray-launch: node " in log_path.read_text() or launcher.poll() is not None, 240, "the placement")
        text = log_path.read_text()
        dirs = dict(re.findall(r"ray-launch: (host-\w+) serving on \S+ with 0 GPU; run directory (\S+)", text))
        assert dirs["host-main"].startswith(node_a + "/") and dirs["host-exploiter"].startswith(node_b + "/"), text
        run = os.path.dirname(os.path.dirname(dirs["host-main"]))[len(node_a):]  # /seedleague/<run name>
        exploiter_log = os.path.join(dirs["host-exploiter"], "host.log")
        # The exploiter has played (results acknowledged) and left a checkpoint in the store: kill its node.
        wait_for(lambda: _acknowledged(exploiter_log) and _checkpoints(fs, f"{pool}-checkpoints/exploiter"), 240,
                 lambda: f"the exploiter's results and checkpoint; its log: {open(exploiter_log).read()[-2000:]}")
        saved = _checkpoints(fs, f"{pool}-checkpoints/exploiter")[-1]
        cluster.kill("node_b")
        killed = time.monotonic()
        acknowledged = _acknowledged(exploiter_log)[-1]  # the last total its host logged before it died
        league_db = node_a + run + "/league/league.sqlite"
        assert _stored(league_db, "exploiter") >= acknowledged > 0  # every acknowledged result is in the league
        # The node comes back as a new machine (a fresh temporary directory); the player resumes there.
        node_b2 = cluster.start("node_b")
        wait_for(lambda: "host-exploiter is back on node" in log_path.read_text() or launcher.poll() is not None,
                 240, "the exploiter's host to be restarted")
        back_log = node_b2 + run + "/players/exploiter/host.log"
        wait_for(lambda: _acknowledged(back_log) or launcher.poll() is not None, 240, "the restarted exploiter to play")
        back_s = time.monotonic() - killed
        resumed = re.search(r"resumed from checkpoint (\d+)", open(back_log).read())
        assert resumed and int(resumed.group(1)) >= saved > 0, open(back_log).read()[-3000:]
        assert _stored(league_db, "exploiter") >= acknowledged
        text = _interrupted(launcher, log_path)
    restarted = re.search(r"host-exploiter is back on node \S+ \(\w+\) at \S+, ([\d.]+) s after its actor died", text)
    print(f"\nexploiter: {acknowledged} results acknowledged before the kill; host restarted "
          f"{restarted.group(1) if restarted else '?'} s after Ray saw its actor die; results acknowledged again "
          f"{back_s:.1f} s after the SIGKILL (node replaced in between); resumed at checkpoint {resumed.group(1)} "
          f"(newest seen in the store {saved})")
    standings = text[text.index("ray-launch: league standings"):]
    for player in ("main", "exploiter"):  # both rated: the player or a snapshot of it (the table shows the top 20)
        row = re.search(rf"^\s*\d+\s+{player}(?::\d+)?\s+\S+\s+(\S+)\s+\S+\s+(\S+)", standings, re.M)
        assert row and float(row.group(2)) > 0, standings
    # No shared path: each node's temporary directory is its own, and holds only its own processes' files (the
    # workers, spread, log under their player's folder on whichever node they ran).
    assert len({node_a, node_b, node_b2}) == 3
    assert os.path.exists(node_a + run + "/league/league.sqlite") and os.path.exists(node_a + run + "/players/main/host.log")
    for temp in (node_b, node_b2):
        assert os.path.exists(temp + run + "/players/exploiter/host.log")
        assert not os.path.exists(temp + run + "/league") and not os.path.exists(temp + run + "/players/main/host.log")
    assert not os.path.exists(node_a + run + "/players/exploiter/host.log")
    secret = s3["AWS_SECRET_ACCESS_KEY"]
    for path in [log_path, node_a + run + "/league/league.log", node_a + run + "/players/main/host.log", back_log]:
        assert secret not in open(path).read(), path
    wait_for(lambda: not _pids_with(run), 30, "every placed process to exit")


def test_a_pool_url_without_credentials_or_a_missing_node_is_one_line(tmp_path, cluster, s3):
    base = [PY, "-m", "seedleague.cli", "ray-launch", "--address", cluster.address, "--env", "openspiel:kuhn_poker",
            "--players", "main,exploiter:main_exploiter", "--pool-url", "s3://pool/x/pool", "--workers", "1"]
    bare = dict(_without_store_vars(os.environ), HOME=str(tmp_path))  # no variables, no ~/.aws
    result = subprocess.run(base, capture_output=True, text=True, timeout=120, env=bare)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [
        "seedleague ray-launch: --pool-url s3://pool/x/pool: no credentials for the object store: set AWS_ACCESS_KEY_ID "
        "and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the launcher's environment; they reach every host through its "
        "environment, never a command line"]
    result = subprocess.run([*base, "--place", "exploiter=node_z"], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, **s3))
    assert result.returncode == 1, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("seedleague ray-launch:")]
    assert len(lines) == 1 and "--place exploiter=node_z: no node of the Ray cluster has the resource 'node_z'" in lines[0]
    assert "Traceback" not in result.stderr


def test_one_command_trains_cartpole_on_two_ray_nodes_and_leaves_no_process(tmp_path, cluster):
    run_dir = str(tmp_path / "run")
    # The host takes a whole 4-CPU node, so both workers (2 CPUs each) must go to the other node.
    command = [PY, "-m", "seedleague.cli", "ray-launch", "--address", cluster.address, "--env", "CartPole-v1",
               "--workers", "2", "--envs-per-worker", "8", "--host-cpus", "4", "--worker-cpus", "2",
               "--run-dir", run_dir, "--max-learner-steps", "20", "--max-seconds", "90", *TINY]
    # A token in the launcher's environment must reach the host and every worker (else they are refused).
    env = dict(os.environ, SEEDLEAGUE_TOKEN="ray-test-token")
    output = _trained(command, env, run_dir, 20)
    nodes = dict(re.findall(r"ray-launch: node \S+ \((\w+)\): (.*)", output))
    assert len(nodes) == 2, output  # two nodes, the host alone on one and the workers on the other
    assert sorted(nodes.values()) == ["host", "worker-0, worker-1"], nodes
    address = re.search(r"host serving on (\S+)", output).group(1)
    assert address.startswith(LOOPBACK + ":")
    wait_for(lambda: not _pids_with(run_dir) and not _pids_with(address), 20, "every placed process to exit")


@pytest.mark.slow  # `make test-slow`
def test_sigterm_tears_down_everything_it_placed_and_restarts_a_dead_worker(tmp_path, cluster):
    run_dir = str(tmp_path / "run")
    log_path = tmp_path / "launch.log"
    command = [PY, "-m", "seedleague.launch.ray_cluster", "--address", cluster.address, "--env", "CartPole-v1",
               "--workers", "1", "--envs-per-worker", "4", "--worker-cpus", "0.5", "--run-dir", run_dir,
               "--max-seconds", "200", *TINY]
    with _launched(command, log_path, dict(os.environ)) as launcher:
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
LOOPBACK_ENV = dict(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0")  # one node: keep 127.0.0.1


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


@pytest.mark.slow  # a cluster of its own: `make test-slow`
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
