"""`seedleague train --worker-cmd`: any worker binary as the env, its spec choosing the settings, and the
refusals that stop a run at once (a worker's exit status 2, an untrainable spec) with the reason on the console."""

import dataclasses
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from seedleague.launch.run_config import WorkerSpec
from seedleague import presets, progress
from seedleague.league.config import LeagueConfig
from seedleague.league.service import League
from seedleague.protocol.named import named_of_v1
from seedleague.protocol.specs import EnvSpec
from test_e2e import SEEDLEAGUE, summary

SMALL = ["--unroll_length", "4", "--batch_size", "8", "--network.hidden_sizes", "16", "--replay.capacity", "64",
         "--league.check_in_interval_s", "0.5"]
KUHN_WORKER = f"{sys.executable} -m envs.openspiel_worker --game kuhn_poker --address {{address}} --seed {{seed}}"


def train(args, timeout=120):
    return subprocess.run(SEEDLEAGUE + ["train"] + args, capture_output=True, text=True, timeout=timeout)


def test_a_worker_command_trains_a_league_with_the_game_recipe_until_ctrl_c(tmp_path):
    run_dir = str(tmp_path / "run")
    # Runs until its progress file counts games against league snapshots (asked at each line it prints: the file's
    # tick is written before its console line), then gets Ctrl-C; --max-seconds is only a safety cap.
    run = subprocess.Popen(SEEDLEAGUE + ["train", "--worker-cmd", KUHN_WORKER + " --num-envs 32", "--run-dir", run_dir,
                                         "--max-seconds", "90", "--league_config.mode", "pfsp",
                                         "--league_config.snapshot_interval_steps", "3", "--no-eval"] + SMALL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in run.stdout:
        seen.append(line)
        if any(tick.get("league_games") for tick in progress.read(run_dir)):
            run.send_signal(signal.SIGINT)
            break
    rest, _ = run.communicate(timeout=60)
    output = "".join(seen) + rest
    assert run.returncode == 0, output[-4000:]
    assert "32 envs x 2 seats" in output  # the spec, read from the first worker's handshake, was shown
    result = summary(run_dir)
    assert result["reason"] == "interrupted", output[-4000:]
    assert result["worker_restarts"] == 0
    assert len(result["standings"]) >= 2
    with League(LeagueConfig(), os.path.join(run_dir, "league", "league.sqlite")) as league:
        assert len(league.snapshots()) >= 1  # snapshots were frozen into the pool
        assert sum(map(sum, league.payoff().games)) > 0  # ... and rated games were played against them
    assert os.listdir(os.path.join(run_dir, "pool", "main"))
    assert "connected to" in open(os.path.join(run_dir, "logs", "worker-0.log")).read()


# gymnasium keeps MuJoCo's v3 envs registered but raises ImportError on making one (they moved to
# gymnasium-robotics): an env that cannot be made whatever is installed. Its traceback once restarted the workers
# until the run died; the worker now refuses it in one line, as it does an env whose package is missing.
UNMAKEABLE = "Swimmer-v3"


def test_a_refusing_worker_is_not_restarted_and_its_reason_reaches_the_console(tmp_path):
    out = train(["--env", UNMAKEABLE, "--run-dir", str(tmp_path / "run"), "--max-seconds", "60"])
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert f"cannot make '{UNMAKEABLE}'" in out.stderr  # the worker's own reason, from the tail of its log
    assert "died" not in out.stderr and "Traceback" not in out.stderr
    log_text = open(tmp_path / "run" / "logs" / "worker-0.log").read()
    assert log_text.count(f"cannot make '{UNMAKEABLE}'") == 1  # started once, never restarted


def test_a_worker_command_that_refuses_before_its_handshake_stops_the_run(tmp_path):
    command = f"{sys.executable} -m envs.gym_worker --env {UNMAKEABLE} --address {{address}}"
    out = train(["--worker-cmd", command, "--run-dir", str(tmp_path / "run")])
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert "refused to go on (exit status 2)" in out.stderr and f"cannot make '{UNMAKEABLE}'" in out.stderr


def test_an_untrainable_spec_is_refused_by_name_with_what_to_change(tmp_path):
    # 3000 envs x 2 seats = 6000 agents: more than one forward pass holds (4096)
    out = train(["--worker-cmd", KUHN_WORKER + " --num-envs 3000", "--run-dir", str(tmp_path / "run")])
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert "'openspiel:kuhn_poker' cannot be trained" in out.stderr and "fewer envs" in out.stderr


def test_untrainable_specs_name_the_problem():
    with pytest.raises(presets.UntrainableSpec, match="6000 agents.*fewer envs"):
        presets.check_trainable(named_of_v1(EnvSpec("big", (3,), np.float32, 2, 3000, num_seats=2)))
    presets.check_trainable(named_of_v1(EnvSpec("fine", (3,), np.float32, 2, 2048, num_seats=2)))
    frames = named_of_v1(EnvSpec("frames", (210, 160, 3), np.uint8, 6, 1024))  # 1024 x 100800 bytes > 64 MiB
    with pytest.raises(presets.UntrainableSpec, match="'frames'.*at least 103.*--max-message-bytes"):
        presets.check_trainable(frames)
    presets.check_trainable(frames, max_message_bytes=1 << 30)


def test_the_preset_comes_from_the_spec_alone():  # a v1 worker's spec, as the host reads its handshake: named
    game = presets.preset_for_spec(named_of_v1(EnvSpec("any name", (84,), np.float32, 7, 16, num_seats=2)))
    assert game.host.learner == presets.GAME_RECIPE and game.league.mode == presets.Mode.PSRO
    assert game.host.network.torso == "mlp"
    board = presets.preset_for_spec(named_of_v1(EnvSpec("x", (2, 6, 7), np.float32, 7, 16, num_seats=2)))
    assert board.host.network.torso == "board" and board.host.learner == presets.GAME_RECIPE
    kuhn = presets.preset_for("openspiel:kuhn_poker")  # measurable by name, so its output mixes the networks
    kuhn_host = dataclasses.replace(kuhn.host, learner=presets.GAME_RECIPE)
    assert (game.host, game.league, game.output) == (kuhn_host, kuhn.league, kuhn.output)
    solo = presets.preset_for_spec(named_of_v1(EnvSpec("CartPole-v1", (4,), np.float32, 2, 8)))
    assert solo.host == presets.preset_for("CartPole-v1").host and solo.target_return is None  # no target by name
    frames = presets.preset_for_spec(named_of_v1(EnvSpec("x", (84, 84, 4), np.uint8, 6, 8)))
    assert frames.host.network.torso == "conv"


def test_protocol_v2_specs_get_the_continuous_control_preset_for_a_box_head_and_v1_settings_when_v1_shaped():
    from seedleague.protocol.named import (ActionSpec, ContinuousHead, DiscreteHead, ObservationSpec,
                                           NamedEnvSpec, TensorSpec)

    observation = ObservationSpec((TensorSpec("obs", (3,), np.float32),))
    box = NamedEnvSpec("any name", observation, ActionSpec((ContinuousHead("u", (-2.0,), (2.0,)),)), 8)
    assert presets.preset_for_spec(box).host == presets.preset_for("Pendulum-v1").host  # by its spaces, not name
    assert presets.preset_for_spec(box).host.learner.epochs == 10
    v1_shaped = NamedEnvSpec("x", observation, ActionSpec((DiscreteHead("a", 2),)), 8, num_seats=2)
    assert presets.preset_for_spec(v1_shaped).host.learner == presets.GAME_RECIPE  # a v1 game, in the league
    hybrid = NamedEnvSpec("x", ObservationSpec(observation.tensors + (TensorSpec("image", (4, 4, 1), np.uint8),)),
                          ActionSpec((DiscreteHead("a", 2), ContinuousHead("u", (-1.0,), (1.0,)))), 8,
                          num_seats=2)
    game, kuhn = presets.preset_for_spec(hybrid), presets.preset_for("openspiel:kuhn_poker")
    assert game.host.learner == presets.GAME_RECIPE and (game.league, game.output) == (kuhn.league, kuhn.output)
    assert game.host.network.torso == "auto"  # one encoder per named tensor, the image's a conv


def test_worker_command_templates_get_the_address_and_a_seed():
    spec = WorkerSpec(2, templates=(("./w", "--host={address}", "--seed", "{seed}"),))
    assert spec.argv(1, "127.0.0.1:5", 1003) == ["./w", "--host=127.0.0.1:5", "--seed", "1003"]
    built_in = WorkerSpec(1, command=("w",))
    assert built_in.argv(0, "a:1", 7) == ["w", "--address", "a:1", "--seed", "7"]
    with pytest.raises(ValueError, match="need a command"):
        WorkerSpec(1)


@pytest.mark.parametrize("flags, problem", [
    (["--env", "CartPole-v1"], "--env CartPole-v1 and --worker-cmd: choose one"),
    (["--worker-cmd", "./other", "--workers", "3"], "repeat --worker-cmd once per worker"),
    (["--envs-per-worker", "8"], "in its own command"),
])
def test_worker_command_flags_that_conflict_are_refused_before_anything_starts(flags, problem, capsys):
    from seedleague import cli

    assert cli.main(["train", "--worker-cmd", "./worker --address {address}"] + flags) == 2
    assert problem in capsys.readouterr().err


def test_a_host_without_env_waits_for_any_worker_and_sends_it_back_to_reconnect():
    import threading

    import grpc

    from seedleague.launch.probe import await_spec
    from seedleague.protocol import codec
    from seedleague.protocol.channel import channel_options
    from seedleague.protocol.named import named_of_v1
    from seedleague.v1 import env_pb2_grpc
    from test_e2e import free_port

    address, got = f"127.0.0.1:{free_port()}", {}
    waiting = threading.Thread(target=lambda: got.update(result=await_spec(address)), daemon=True)
    waiting.start()
    spec = EnvSpec("nim", (5,), np.float32, 3, 4, num_seats=2, has_legal_mask=True)
    with grpc.insecure_channel(address, options=channel_options(1 << 20)) as channel:
        grpc.channel_ready_future(channel).result(timeout=30)
        with pytest.raises(grpc.RpcError) as answer:
            env_pb2_grpc.EnvServiceStub(channel).Handshake(codec.encode_handshake(spec, "remote"), timeout=30)
    assert answer.value.code() == grpc.StatusCode.UNAVAILABLE  # "reconnect": the real host takes the same port next
    waiting.join(timeout=30)
    assert got["result"] == (named_of_v1(spec), address)  # as the host sees every spec: named
