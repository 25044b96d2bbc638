"""Built-in workers fitted to the machine: on an accelerator every usable CPU but the host's 2 runs a worker (at
least the preset's count); on a CPU-only machine, a given --workers or a --worker-cmd the count stays as it was."""

import argparse
import os
import sys

import numpy as np
import pytest

from seedleague import cli, presets
from seedleague.launch import league as league_launch
from seedleague.launch import local
from seedleague.launch.league import LeagueSpec, PlayerProcesses, PlayerSpec
from seedleague.protocol.named import named_of_v1
from seedleague.protocol.specs import EnvSpec
from seedleague.launch.run_config import Budget, Machine, RunConfig, WorkerSpec, machine_share

GPU_16, GPU_2, CPU_16 = Machine("gpu", 16), Machine("gpu", 2), Machine("cpu", 16)


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the run directories the command lines name are created here


def _run_config(*flags, env=("--env", "ALE/Pong-v5", "--run-dir", "unused")):
    parser = argparse.ArgumentParser()
    cli._add_run_flags(parser, with_workers=True, shows_help=False)
    args = parser.parse_args([*env, *flags])
    return cli._run_config(args, with_workers=True, argv=[*env, *flags])


def test_the_share_of_a_machine_is_every_cpu_but_the_hosts_on_an_accelerator_only():
    assert machine_share(2, GPU_16) == 14
    assert machine_share(2, Machine("tpu", 16)) == 14
    assert machine_share(2, GPU_2) == 2  # no CPU to spare: the preset's
    assert machine_share(2, CPU_16) == 2  # the learner and inference share these cores: the preset's
    assert machine_share(20, GPU_16) == 20  # never fewer than the preset's
    assert machine_share(2, GPU_16, hosts=3) == 3  # (16 - 3 x 2) // 3 for each of three hosts
    assert machine_share(2, CPU_16, hosts=3) == 2


def test_pong_with_no_workers_given_gets_14_workers_on_a_gpu_with_16_cpus_and_says_why():
    spec = _run_config().workers
    preset = presets.preset_for("ALE/Pong-v5")
    assert spec.fit_machine and spec.count == preset.workers
    fitted, line = spec.fitted(GPU_16)
    assert fitted.count == 14 and not fitted.fit_machine and fitted.command == spec.command
    assert line.startswith("env workers: 14 (") and "16 usable CPUs less 2" in line and "gpu" in line
    assert line.endswith("--workers N sets the count")


@pytest.mark.parametrize("machine, why", [(GPU_2, "leave no more"), (CPU_16, "run on this machine's CPUs")])
def test_a_gpu_with_2_cpus_and_a_cpu_only_machine_keep_the_presets_count(machine, why):
    spec = _run_config().workers
    fitted, line = spec.fitted(machine)
    assert fitted.count == presets.preset_for("ALE/Pong-v5").workers
    assert line.startswith(f"env workers: {fitted.count} (the preset's") and why in line and "--workers N" in line


def test_a_given_worker_count_is_kept_on_an_accelerator():
    given = _run_config("--workers", "3").workers
    assert given.count == 3 and not given.fit_machine and given.fitted(GPU_16) == (given, "")


def test_a_worker_cmd_run_keeps_its_count_on_an_accelerator(monkeypatch, tmp_path):
    probed = []

    def read_spec(args, workers):  # stands in for starting worker 0 to read its spec (seedleague.launch.probe)
        probed.append(workers)
        spec = named_of_v1(EnvSpec("my game", (20,), np.float32, 4, 16, num_seats=2, has_legal_mask=True))
        return presets.preset_for_spec(spec), spec

    monkeypatch.setattr(cli, "_spec_preset", read_spec)
    config = _run_config("--worker-cmd", "./my_worker --address {address}", "--workers", "2",
                         env=("--run-dir", str(tmp_path / "run")))
    assert probed == [config.workers] and config.workers.count == 2 and config.workers.templates
    assert not config.workers.fit_machine and config.workers.fitted(GPU_16) == (config.workers, "")
    assert config.league.player_workers == 0  # its extra players run the --worker-cmd given, as many as given
    with pytest.raises(ValueError, match="only built-in workers are fitted"):
        WorkerSpec(2, templates=(("./w",),), fit_machine=True)


def test_several_hosts_on_one_machine_share_its_cpus_and_say_so():
    fitted, line = WorkerSpec(2, ("w",), fit_machine=True).fitted(GPU_16, hosts=3)
    assert fitted.count == 3 and "each of the 3 hosts" in line


def test_extra_players_are_started_with_their_share_of_the_machine(tmp_path, monkeypatch):
    started = []

    class RecordedChild:  # stands in for the player's `seedleague train` process
        def __init__(self, command, log_path, name, env):
            self.command = command

        def start(self):
            started.append(self.command)

    monkeypatch.setattr(league_launch, "Child", RecordedChild)
    spec = LeagueSpec(players=(PlayerSpec("main"), PlayerSpec("a"), PlayerSpec("b")), player_workers=2)
    players = PlayerProcesses(str(tmp_path), "openspiel:kuhn_poker", spec, "127.0.0.1:1", str(tmp_path / "pool"))
    players.start(spec.players[1:], machine_share(spec.player_workers, GPU_16, hosts=3))
    players.start(spec.players[1:])  # 0: the player's own command line decides (a --worker-cmd's)
    flags = [command[command.index("--workers") + 1] if "--workers" in command else None for command in started]
    assert flags == ["3", "3", None, None]


def test_a_league_run_names_the_presets_count_for_its_extra_players_and_a_worker_cmd_run_none():
    config = _run_config("--players", "main,b", env=("--env", "openspiel:kuhn_poker", "--run-dir", "unused"))
    assert config.league.player_workers == presets.preset_for("openspiel:kuhn_poker").workers
    assert config.workers.fit_machine


@pytest.mark.parametrize("machine, count", [(GPU_16, 14), (CPU_16, 2)])
def test_a_run_starts_as_many_built_in_workers_as_its_machine_fits(machine, count, tmp_path, capsys, monkeypatch):
    import signal

    monkeypatch.setattr(local.sys, "setswitchinterval", lambda seconds: None)  # keep the test process's own
    before = signal.getsignal(signal.SIGTERM)
    waiting = (sys.executable, "-c", "import time; time.sleep(60)")  # a built-in worker's place: it only waits
    config = RunConfig(run_dir=str(tmp_path / "run"), workers=WorkerSpec(2, waiting, fit_machine=True),
                       budget=Budget(max_seconds=0.2))
    try:
        summary = local.run(config, machine=machine)
    finally:
        signal.signal(signal.SIGTERM, before)
    logs = sorted(os.listdir(tmp_path / "run" / "logs"))
    assert logs == sorted(f"worker-{i}.log" for i in range(count)) and summary["worker_restarts"] == 0
    said = [line for line in capsys.readouterr().out.splitlines() if line.startswith("env workers: ")]
    assert len(said) == 1 and said[0].startswith(f"env workers: {count} (") and "--workers N" in said[0]


def test_seedleague_train_on_the_cpu_keeps_the_presets_workers_and_says_so(tmp_path):
    import subprocess

    run_dir = tmp_path / "run"
    env = dict(os.environ, JAX_PLATFORMS="cpu")  # the host on the CPU, whatever this machine has
    result = subprocess.run([sys.executable, "-m", "seedleague.cli", "train", "--env", "CartPole-v1",
                             "--max-seconds", "0.5", "--run-dir", str(run_dir)],
                            capture_output=True, text=True, timeout=180, env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    count = presets.preset_for("CartPole-v1").workers
    said = [line for line in result.stdout.splitlines() if line.startswith("env workers: ")]
    assert len(said) == 1 and said[0].startswith(f"env workers: {count} (the preset's: "), result.stdout
    assert "--workers N sets the count" in said[0]
    assert sorted(os.listdir(run_dir / "logs")) == sorted(f"worker-{i}.log" for i in range(count))
