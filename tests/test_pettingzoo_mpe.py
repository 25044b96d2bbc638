"""PettingZoo MPE games by name (envs.pettingzoo_mpe on envs.pettingzoo_parallel): the spec and every step checked
against the same mpe2 env stepped directly (cooperative simple_spread, adversarial simple_tag), truncation with
its final observation, padding, role one-hots and legal masks, continuous actions, refusals of names and keyword
arguments on the console, `check-worker` on the worker process, and short training runs through the host over
a real socket (by name, and from the worker's spec with --worker-cmd)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from envs.pettingzoo_worker import UnsupportedGame, make_vector_game
from seedleague import presets
from seedleague.api import load_policy
from seedleague.protocol.named import ContinuousHead, DiscreteHead, check_named_step, NamedStepBatch
from seedleague.tools import check_worker as cw
from conftest import seedleague_here
from test_e2e import run_cli, summary

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = ["--unroll_length", "5", "--batch_size", "4", "--replay.capacity", "16", "--network.hidden_sizes", "16",
        "--learner.epochs", "1", "--max-learner-steps", "3", "--max-seconds", "150"]


def reference_envs(module_name: str, num_envs: int, seed: int, **kwargs):
    import importlib

    module = importlib.import_module(f"mpe2.{module_name}")
    envs = [module.parallel_env(**kwargs) for _ in range(num_envs)]
    first = [env.reset(seed=seed + e)[0] for e, env in enumerate(envs)]
    return envs, first


def as_named(step, spec) -> NamedStepBatch:
    """The GameStep as the message the host checks (a copy)."""
    return NamedStepBatch("s", 1, {k: v.copy() for k, v in step.observation.items()}, step.reward.copy(),
                          step.terminated.copy(), step.truncated.copy(),
                               {k: v.copy() for k, v in (step.legal_mask or {}).items()}, None,
                               {k: v.copy() for k, v in (step.final_observation or {}).items()},
                               {k: v.copy() for k, v in (step.episode_stats or {}).items()})


def test_a_cooperative_game_is_one_team_and_steps_as_the_env_itself():
    game = make_vector_game("mpe/simple_spread_v3", num_envs=2, seed=5)
    spec = game.spec
    assert (spec.env_name, spec.num_seats, spec.seat_team, spec.episode_stats) == (
        "pettingzoo:mpe/simple_spread_v3", 3, (0, 0, 0), ())
    assert [(t.name, t.shape) for t in spec.observation.tensors] == [("observation", (18,))]
    assert spec.action.heads == (DiscreteHead("action", 5),)  # the same 5 moves everywhere: no mask, no role
    envs, first = reference_envs("simple_spread_v3", 2, seed=5)
    agents = envs[0].possible_agents
    step = game.reset()
    for e in range(2):
        assert np.array_equal(step.observation["observation"][e], np.stack([first[e][a] for a in agents]))
    rng = np.random.default_rng(0)
    for t in range(30):  # max_cycles 25: the 25th step truncates, sends its last observations and restarts
        actions = rng.integers(5, size=(2, 3)).astype(np.int32)
        step = game.step({"action": actions})
        check_named_step(spec, as_named(step, spec))
        expected = [env.step({a: int(actions[e, s]) for s, a in enumerate(agents)}) for e, env in enumerate(envs)]
        for e, (obs, rew, _, trunc, _) in enumerate(expected):
            assert step.reward[e].tolist() == pytest.approx([rew[a] for a in agents])
            assert bool(step.truncated[e]) == all(trunc.values()) == (t == 24) and not step.terminated[e]
            last = np.stack([obs[a] for a in agents])
            if t == 24:
                assert np.array_equal(step.final_observation["observation"][e], last)
                obs = envs[e].reset()[0]  # the episode that follows continues each env's random stream
                last = np.stack([obs[a] for a in agents])
            else:
                assert step.final_observation is None
            assert np.array_equal(step.observation["observation"][e], last)
    assert game.episodes == 2


def test_an_adversarial_game_has_two_teams_padded_observations_roles_and_team_returns():
    game = make_vector_game("mpe/simple_tag_v3(max_cycles=4)", num_envs=1, seed=2)
    spec = game.spec
    assert spec.seat_team == (0, 0, 0, 1) and game.team_names == ["adversary", "good"]
    assert spec.episode_stats == ("return_adversary", "return_good")
    assert spec.observation.tensors[0].shape == (16 + 2,)  # the largest agent's 16, then roles adversary, agent
    envs, first = reference_envs("simple_tag_v3", 1, seed=2, max_cycles=4)
    agents = envs[0].possible_agents
    observation = game.reset().observation["observation"][0]
    assert np.array_equal(observation[3, :14], first[0]["agent_0"]) and not observation[3, 14:16].any()
    assert observation[:, 16:].tolist() == [[1, 0]] * 3 + [[0, 1]]
    returns, rng = np.zeros(4), np.random.default_rng(1)
    for t in range(4):
        actions = rng.integers(5, size=(1, 4)).astype(np.int32)
        step = game.step({"action": actions})
        check_named_step(spec, as_named(step, spec))
        _, rewards, _, _, _ = envs[0].step({a: int(actions[0, s]) for s, a in enumerate(agents)})
        assert step.reward[0].tolist() == pytest.approx([rewards[a] for a in agents])
        returns += step.reward[0]
        if t < 3:
            assert not step.truncated[0] and not step.episode_stats["return_good"].any()
    assert step.truncated[0] and step.final_observation["observation"].shape == (1, 4, 18)
    assert step.episode_stats["return_adversary"][0] == pytest.approx([returns[:3].mean()] * 4)
    assert step.episode_stats["return_good"][0] == pytest.approx([returns[3]] * 4)


def test_different_action_counts_share_one_head_with_a_legal_mask():
    game = make_vector_game("mpe/simple_speaker_listener_v4", num_envs=2)
    assert game.spec.action.heads == (DiscreteHead("action", 5, has_legal_mask=True),)
    mask = game.reset().legal_mask["action"]
    assert mask[:, 0].tolist() == [[True] * 3 + [False] * 2] * 2 and mask[:, 1].all()  # speaker 3, listener 5
    assert game.spec.observation.tensors[0].shape == (11 + 2,) and game.spec.seat_team == (0, 0)


def test_continuous_actions_are_one_box_head():
    game = make_vector_game("mpe/simple_spread_v3(continuous_actions=True,N=2)", num_envs=2)
    assert game.spec.action.heads == (ContinuousHead("action", (0.0,) * 5, (1.0,) * 5),)
    game.reset()
    step = game.step({"action": np.full((2, 2, 5), 0.5, np.float32)})
    assert step.reward.shape == (2, 2) and np.isfinite(step.observation["observation"]).all()


@pytest.mark.parametrize("name, message", [
    ("mpe/simple_nope_v3", "unsupported PettingZoo game 'mpe/simple_nope_v3': no such MPE game (mpe2 has: "),
    ("mpe/simple_tag_v3(speed=2)", "'mpe/simple_tag_v3' has no keyword 'speed'; it takes num_good,"),
    ("mpe/simple_tag_v3(render_mode='human')", "keyword 'render_mode' is refused: the worker draws nothing"),
    ("mpe/simple_spread_v3(N=", "bad MPE game name 'mpe/simple_spread_v3(N=': give keyword arguments as"),
    ("mpe/simple_spread_v3(local_ratio=2.0)", "refused its keyword arguments {'local_ratio': 2.0}: local_ratio"),
    ("mpe/simple_speaker_listener_v4(continuous_actions=True)", "do not fit one action head"),
])
def test_unusable_names_and_keywords_are_refused_by_name(name, message):
    with pytest.raises(UnsupportedGame) as error:
        make_vector_game(name, num_envs=1)
    assert message in str(error.value)


def test_the_worker_process_refuses_before_connecting():
    command = [sys.executable, "-m", "envs.pettingzoo_worker", "--address", "127.0.0.1:1", "--game",
               "mpe/simple_tag_v3(speed=2)"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "has no keyword 'speed'" in done.stderr and "connected" not in done.stderr


@pytest.mark.parametrize("game, message", [
    ("mpe/simple_nope_v3", "unsupported PettingZoo game 'mpe/simple_nope_v3': no such MPE game"),
    ("mpe/simple_tag_v3(curriculum=True)", "keyword 'curriculum' is refused: the worker never advances"),
])
def test_train_refuses_an_unknown_mpe_game_or_keyword_before_starting_anything(tmp_path, capsys, game, message):
    done = seedleague_here(capsys, "train", "--env", f"pettingzoo:{game}", "--run-dir", str(tmp_path / "run"))
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"--env pettingzoo:{game} is refused: " in done.stderr and message in done.stderr, done.stderr[-2000:]
    assert not os.path.exists(tmp_path / "run" / "logs")


def test_the_mpe_worker_passes_every_check():
    command = [sys.executable, "-m", "envs.pettingzoo_worker", "--address", "{address}", "--game",
               "mpe/simple_adversary_v3(max_cycles=10)", "--num-envs", "3", "--backoff-initial", "0.05",
               "--backoff-max", "0.3"]
    report = cw.check_worker(command, cw.CheckConfig(steps=25, timeout_s=30.0, shutdown_timeout_s=5.0))
    assert report.passed, report.format()
    assert report.spec.seat_team == (0, 1, 1) and report.spec.has_legal_mask is False


def test_team_structure_picks_the_run_kind():
    one_team = make_vector_game("mpe/simple_spread_v3", num_envs=1).spec
    two_teams = make_vector_game("mpe/simple_tag_v3", num_envs=1).spec
    assert not presets.plays_in_league(one_team) and presets.plays_in_league(two_teams)
    assert presets.preset_for_spec(one_team).host == presets.shared_seats(one_team).host  # no league, every seat
    assert not presets.is_multiplayer("pettingzoo:mpe/simple_tag_v3")  # general-sum: outside the league
    assert presets.is_multiplayer("pettingzoo:classic/tictactoe_v3")


def test_an_adversarial_game_trains_by_name_with_team_returns(tmp_path):
    run_dir = str(tmp_path / "tag")
    out = run_cli(["train", "--env", "pettingzoo:mpe/simple_tag_v3(max_cycles=5)", "--run-dir", run_dir,
                   "--workers", "1", "--envs-per-worker", "4"] + TINY, timeout=240)
    result = summary(run_dir)
    assert result["learner_step"] >= 3 and result["episodes"] > 0, out.stdout[-2000:]
    assert not os.path.exists(os.path.join(run_dir, "pool"))  # general-sum: no league
    with open(os.path.join(run_dir, "progress.jsonl")) as f:
        ticks = [json.loads(line) for line in f]
    assert any("episode_stats/return_adversary" in tick and "episode_stats/return_good" in tick for tick in ticks)


def test_a_one_team_worker_spec_trains_every_seat_without_a_league(tmp_path):
    run_dir = str(tmp_path / "spread")
    worker = (f"{sys.executable} -m envs.pettingzoo_worker --address {{address}} --seed {{seed}} "
              "--game mpe/simple_spread_v3(max_cycles=5) --num-envs 4")
    out = run_cli(["train", "--worker-cmd", worker, "--run-dir", run_dir] + TINY, timeout=240)
    result = summary(run_dir)
    assert result["learner_step"] >= 3 and result["episodes"] > 0, out.stdout[-2000:]
    assert "games" not in result and not os.path.exists(os.path.join(run_dir, "pool"))


def test_a_continuous_action_game_trains_by_name_with_the_continuous_preset(tmp_path):
    name = "pettingzoo:mpe/simple_spread_v3(max_cycles=5,N=2,continuous_actions=True)"
    assert presets.preset_for(name).host == presets.shared_seats(make_vector_game(name.partition(":")[2], 1).spec).host
    run_dir = str(tmp_path / "spread-continuous")
    out = run_cli(["train", "--env", name, "--run-dir", run_dir, "--workers", "1", "--envs-per-worker", "4"] + TINY,
                  timeout=240)
    result = summary(run_dir)
    assert result["learner_step"] >= 3 and result["episodes"] > 0, out.stdout[-2000:]
    policy = load_policy(run_dir)  # the trained network acts in the Box on every seat
    actions = policy.act(policy.spec.observation.zeros((3,)))
    assert policy.spec.action.heads == (ContinuousHead("action", (0.0,) * 5, (1.0,) * 5),)
    assert ((actions["action"] >= 0.0) & (actions["action"] <= 1.0)).all() and actions["action"].shape == (3, 5)
