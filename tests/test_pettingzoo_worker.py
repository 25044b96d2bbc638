"""The PettingZoo worker: its vector game on a scripted fake env (frame skip, rewards,
game over, autoreset) and on real two-player Pong, `check-worker` on the real
process, and unsupported game names."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import gymnasium
import numpy as np
import pytest

from envs import pettingzoo_worker as pzw
from envs.pettingzoo_worker import FRAME_SKIP, PettingZooVectorGame
from seedleague.protocol.named import v1_of_named
from seedleague.tools import check_worker as cw

ROOT = pathlib.Path(__file__).resolve().parents[1]
AGENTS = ["first_0", "second_0"]


class FakeParallelEnv:
    """A two-agent PettingZoo parallel env whose frame k of an episode is filled with k.

    Agent `first_0` scores 1 (and `second_0` loses 1) on every frame where both play
    action 2; the game is over after `game_over_frame` frames.
    """

    def __init__(self, game_over_frame: int):
        self.possible_agents = list(AGENTS)
        self.agents: list[str] = []
        self.game_over_frame = game_over_frame
        self.frame = 0
        self.resets = 0

    def action_space(self, agent):
        return gymnasium.spaces.Discrete(6)

    def _observe(self):
        screen = np.full((210, 160, 1), self.frame, np.uint8)
        screen[:, :80] = 0  # a dark left half, so a mirrored view differs
        return dict.fromkeys(self.agents, screen)

    def reset(self, seed=None):
        self.agents, self.frame = list(AGENTS), 0
        self.resets += 1
        return self._observe(), {agent: {} for agent in self.agents}

    def step(self, actions):
        assert set(actions) == set(self.agents), actions
        self.frame += 1
        scored = float(actions["first_0"] == 2 and actions["second_0"] == 2)
        over = self.frame >= self.game_over_frame
        observations = self._observe()
        rewards = {"first_0": scored, "second_0": -scored}
        done = dict.fromkeys(self.agents, over)
        if over:
            self.agents = []
        return observations, rewards, done, dict.fromkeys(done, False), {a: {} for a in done}

    def close(self):
        pass


@pytest.fixture
def fake_game(monkeypatch):
    """A PettingZooVectorGame over FakeParallelEnvs with no no-op starts; game over after 10 frames."""
    made = []

    def make(game_name, max_frames):
        made.append(FakeParallelEnv(game_over_frame=10))
        return made[-1]

    monkeypatch.setattr(pzw, "make_parallel_env", make)
    monkeypatch.setattr(pzw, "NOOP_MAX", 0)
    game = PettingZooVectorGame("fake_v0", num_envs=2, seed=0, max_cycles=100)
    yield game, made
    game.close()


def test_frames_are_skipped_pooled_stacked_and_rewards_summed(fake_game):
    game, envs = fake_game
    step = game.reset()
    assert (step.observation["observation"][:, 0, :, 80:] == 0).all()  # frame 0 in every channel
    step = game.step({"action": np.array([[2, 2], [2, 0]], np.int32)})
    assert [env.frame for env in envs] == [FRAME_SKIP] * 2
    assert step.reward.tolist() == [[FRAME_SKIP, -FRAME_SKIP], [0, 0]] and step.reward.dtype == np.float32
    stacks = step.observation["observation"]
    right = stacks[0, 0, 42, 60]  # a pixel on the right half: [frame 0, 0, 0, max(3, 4)]
    assert right.tolist() == [0, 0, 0, 4] and (stacks[0, 0, :, :30] == 0).all()
    np.testing.assert_array_equal(stacks[:, 1], stacks[:, 0, :, ::-1])  # seat 1 mirrored
    step = game.step({"action": np.zeros((2, 2), np.int32)})
    assert step.observation["observation"][0, 0, 42, 60].tolist() == [0, 0, 4, 8] and not step.terminated.any()
    assert step.acting.all() and step.legal_mask is None


def test_game_over_terminates_and_restarts_in_the_same_step(fake_game):
    game, envs = fake_game
    game.reset()
    game.step({"action": np.zeros((2, 2), np.int32)})
    game.step({"action": np.zeros((2, 2), np.int32)})  # 8 frames
    step = game.step({"action": np.full((2, 2), 2, np.int32)})  # frames 9 and 10 score, then the game is over
    assert step.terminated.tolist() == [True, True] and not step.truncated.any()
    assert step.reward.tolist() == [[2, -2], [2, -2]]
    stacks = step.observation["observation"]
    assert [env.resets for env in envs] == [2, 2] and (stacks[:, :, :, 80:] == 0).all()  # fresh frame 0
    assert game.episodes == 2 and not game.step({"action": np.zeros((2, 2), np.int32)}).terminated.any()


def test_max_cycles_truncates(monkeypatch):
    monkeypatch.setattr(pzw, "make_parallel_env", lambda name, frames: FakeParallelEnv(game_over_frame=1000))
    game = PettingZooVectorGame("fake_v0", num_envs=1, seed=0, max_cycles=3, mirror=False)
    step = game.reset()
    flags = []
    for _ in range(7):
        step = game.step({"action": np.zeros((1, 2), np.int32)})
        flags.append((bool(step.terminated[0]), bool(step.truncated[0])))
    assert flags == [(False, False), (False, False), (False, True)] * 2 + [(False, False)]
    stacks = step.observation["observation"]
    np.testing.assert_array_equal(stacks[0, 1], stacks[0, 0])  # same frame for both seats


def test_actions_outside_the_action_space_are_refused(fake_game):
    game, _ = fake_game
    game.reset()
    with pytest.raises(ValueError, match=r"actions must be in \[0, 6\)"):
        game.step({"action": np.array([[0, 6], [0, 0]])})


def test_real_pong_steps_both_seats_and_truncates():
    game = PettingZooVectorGame("pong_v3", num_envs=1, seed=0, max_cycles=6)
    try:
        spec = v1_of_named(game.spec)  # named, and of v1's form: v1 carries it on the wire
        assert (spec.env_name, spec.observation_shape, spec.observation_dtype) == ("pettingzoo:pong_v3", (84, 84, 4), np.uint8)
        assert (spec.num_actions, spec.num_seats, spec.has_legal_mask) == (6, 2, False)
        step = game.reset(seed=0)
        assert set(step.observation) == {"observation"}
        assert step.observation["observation"].shape == (1, 2, 84, 84, 4) and step.observation["observation"].any()
        rng = np.random.default_rng(0)
        for number in range(1, 7):
            step = game.step({"action": rng.integers(0, 6, (1, 2))})
            assert step.truncated[0] == (number == 6) and not step.terminated[0]
        stack = step.observation["observation"][0, 0]
        assert all((stack[..., k] == stack[..., 0]).all() for k in range(4))  # a fresh episode's first frame
        np.testing.assert_array_equal(step.observation["observation"][0, 1], stack[:, ::-1])
    finally:
        game.close()


def test_pong_worker_passes_every_check():
    command = [
        sys.executable, "-m", "envs.pettingzoo_worker", "--address", "{address}", "--game", "pong_v3",
        "--num-envs", "1", "--max-cycles", "10", "--backoff-initial", "0.05", "--backoff-max", "0.3",
    ]
    report = cw.check_worker(command, cw.CheckConfig(steps=20, timeout_s=30.0, shutdown_timeout_s=5.0))
    assert report.passed, report.format()
    assert "protocol v1," in report.format()  # named inside the worker, v1 on the wire as it always was
    spec = v1_of_named(report.spec)  # the fake host keeps the named spec; these games are v1's
    assert (spec.env_name, spec.observation_shape, spec.num_actions, spec.num_seats) == ("pettingzoo:pong_v3", (84, 84, 4), 6, 2)
    assert "ended at step 10" in report.result(cw.EPISODES).detail


@pytest.mark.parametrize("game, message", [
    ("chess_v6", "unsupported PettingZoo game 'chess_v6': the PettingZoo worker runs two-player pettingzoo.atari"),
    ("quadrapong_v4", "unsupported PettingZoo game 'quadrapong_v4': it has agents"),
    ("classic/nope_v1", "unsupported PettingZoo game 'classic/nope_v1': no such classic game"),
    ("classic/rps_v2", "unsupported PettingZoo game 'classic/rps_v2': the worker steps games of 2 agents"),
    ("butterfly/pistonball_v6", "unsupported PettingZoo game 'butterfly/pistonball_v6': the PettingZoo worker runs "
                                "the families"),
])
def test_a_game_it_cannot_play_exits_2_naming_it_before_connecting(game, message, caplog):
    """Atari and classic games alike: exit 2 with the reason logged, before connecting to the (absent) host. The
    worker's main in this process; that the reason reaches the console of a worker process is checked below."""
    assert pzw.main(["--address", "127.0.0.1:1", "--game", game]) == 2
    assert message in caplog.text and "connected" not in caplog.text, caplog.text
    if game.startswith("classic/"):
        assert ("the classic games that work here: connect_four_v3, go_v5, leduc_holdem_v4, texas_holdem_no_limit_v6, "
                "texas_holdem_v4, tictactoe_v3") in caplog.text


def test_a_refusal_reaches_the_console_of_a_worker_process():
    command = [sys.executable, "-m", "envs.pettingzoo_worker", "--address", "127.0.0.1:1", "--game", "classic/nope_v1"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "unsupported PettingZoo game 'classic/nope_v1': no such classic game" in done.stderr, done.stderr
    assert "connected" not in done.stderr, done.stderr
