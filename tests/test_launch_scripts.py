"""The launch commands in launch/ (the user's entry points on a GPU box and across machines): each refusal is one
line on the console with what to do, and each command reaches the program it names with the arguments it was
given. Ray and the seedleague command are stood in for by scripts that print how they were called."""

import os
import shutil
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _fake_venv(tmp_path):
    """A virtualenv whose `ray` and `seedleague` print their name and arguments."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("ray", "seedleague"):
        script = bin_dir / name
        script.write_text(f'#!/usr/bin/env bash\necho "{name} $*"\n')
        script.chmod(0o755)
    return str(tmp_path / "venv")


def _run(script, args, env):
    return subprocess.run(["bash", os.path.join(ROOT, "launch", script), *args], env=env, capture_output=True,
                          text=True, timeout=60)


def test_the_cluster_commands_reach_ray_and_ray_launch_with_their_arguments(tmp_path):
    env = dict(os.environ, VENV=_fake_venv(tmp_path))
    assert _run("cluster.sh", ["head"], env).stdout.strip() == "ray start --head --port 6379"
    assert _run("cluster.sh", ["join", "10.0.0.1:6379"], env).stdout.strip() == "ray start --address 10.0.0.1:6379"
    ran = _run("cluster.sh", ["run", "--env", "CartPole-v1", "--workers", "4"], env)
    assert ran.returncode == 0 and ran.stdout.strip() == "seedleague ray-launch --address auto --env CartPole-v1 --workers 4"
    assert _run("cluster.sh", ["stop"], env).stdout.strip() == "ray stop"


def test_the_cluster_commands_refuse_in_one_line(tmp_path):
    env = dict(os.environ, VENV=_fake_venv(tmp_path))
    for args, message in ((["bogus"], "unknown command 'bogus'; usage: launch/cluster.sh head"),
                          (["join"], "give the head's address")):
        refused = _run("cluster.sh", args, env)
        assert refused.returncode == 2 and refused.stdout == "" and message in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
    (tmp_path / "empty").mkdir()
    refused = _run("cluster.sh", ["head"], dict(os.environ, VENV=str(tmp_path / "empty")))
    assert refused.returncode == 2 and "no Ray in" in refused.stderr and "pip install -e .[ray]" in refused.stderr


def test_the_gpu_box_command_refuses_a_box_without_an_nvidia_driver_before_installing_anything(tmp_path):
    tools = tmp_path / "tools"  # a PATH with the shell and dirname only: no nvidia-smi, and no make to install with
    tools.mkdir()
    for name in ("bash", "dirname"):
        os.symlink(shutil.which(name), tools / name)
    venv = tmp_path / "venv"
    refused = subprocess.run([shutil.which("bash"), os.path.join(ROOT, "launch", "gpu_box.sh"), "--max-seconds", "5"],
                             env=dict(PATH=str(tools), VENV=str(venv)), capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2, refused.stderr
    assert "no nvidia-smi on PATH" in refused.stderr and "make run" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and not venv.exists()
