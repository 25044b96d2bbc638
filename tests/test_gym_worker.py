"""The gym worker's VectorGame: episode boundaries in every gymnasium autoreset mode and
vector env kind, and how "auto" chooses native, sync or async from what it measures."""

from __future__ import annotations

import functools
import importlib.util
import time

import gymnasium as gym
import numpy as np
import pytest

from envs import gym_vector
from envs.atari import make_atari_env, make_atari_vector_env
from envs.gym_vector import UnsupportedEnv, VectorChoice, choose_mode, make_vector_env, probe_step_seconds
from envs.gym_worker import GymVectorGame

SAME, NEXT, DISABLED = (gym.vector.AutoresetMode.SAME_STEP, gym.vector.AutoresetMode.NEXT_STEP,
                        gym.vector.AutoresetMode.DISABLED)
NUM_ENVS, SEED, MESSAGES = 3, 7, 120
X_LIMIT, THETA_LIMIT = 2.4, 12 * 2 * np.pi / 360  # CartPole terminates beyond these


def policy(observation: np.ndarray) -> int:
    """A deterministic function of the observation, so equal observations get equal actions in every mode."""
    return int(abs(observation[1] * 1e4)) % 2


def play(game: GymVectorGame, messages: int = MESSAGES) -> list[tuple]:
    """What the host receives: one (observation, reward, terminated, truncated, acting) per message, copied."""
    received, step = [], game.reset(SEED)
    for index in range(messages):
        if index:
            step = game.step({"action": np.array([[policy(o)] for o in step.observation["observation"][:, 0]])})
        acting = np.ones(NUM_ENVS, bool) if step.acting is None else step.acting[:, 0].copy()
        received.append((step.observation["observation"][:, 0].copy(), step.reward[:, 0].copy(), step.terminated.copy(),
                         step.truncated.copy(), acting))
    return received


def host_view(received: list[tuple]) -> list[list[dict]]:
    """Finished episodes per env as the host assembles them: the observations acted on, the
    return, the end flags, and the final observation where the worker could send one."""
    episodes = [[] for _ in range(NUM_ENVS)]
    current = [dict(observations=[], ret=0.0) for _ in range(NUM_ENVS)]
    for index, (observation, reward, terminated, truncated, acting) in enumerate(received):
        for env in range(NUM_ENVS):
            episode = current[env]
            if index > 0:
                episode["ret"] += float(reward[env])
                if terminated[env] or truncated[env]:
                    final = None if acting[env] else observation[env]
                    episodes[env].append(dict(episode, terminated=bool(terminated[env]),
                                              truncated=bool(truncated[env]), final=final))
                    episode = current[env] = dict(observations=[], ret=0.0)
            if acting[env]:
                episode["observations"].append(observation[env])
    return episodes


def reference_episodes(count: int) -> list[list[dict]]:
    """The same episodes from one plain `gym.make` env per env (env e seeded SEED + e), stepped by hand."""
    episodes = []
    for env_index in range(NUM_ENVS):
        env, found = gym.make("CartPole-v1"), []
        observation, _ = env.reset(seed=SEED + env_index)
        episode = dict(observations=[], ret=0.0)
        while len(found) < count:
            episode["observations"].append(observation)
            observation, reward, terminated, truncated, _ = env.step(policy(observation))
            episode["ret"] += reward
            if terminated or truncated:
                found.append(dict(episode, terminated=terminated, truncated=truncated, final=observation))
                observation, _ = env.reset()
                episode = dict(observations=[], ret=0.0)
        episodes.append(found)
        env.close()
    return episodes


def check_cartpole_episodes(episodes: list[list[dict]]) -> None:
    """Boundaries a correct worker gives in any mode: fresh starts, one reward per action, every action
    applied to the observation it was chosen for (CartPole's own dynamics), final observations past the limits."""
    physics = gym.make("CartPole-v1").unwrapped
    physics.reset(seed=0)
    for env_episodes in episodes:
        assert len(env_episodes) >= 3, "too few episodes to check"
        for episode in env_episodes:
            observations = episode["observations"]
            assert np.abs(observations[0]).max() <= 0.05, "an episode does not start from a fresh reset"
            assert episode["ret"] == len(observations), "not exactly one reward of 1 per action"
            for before, after in zip(observations, observations[1:]):
                physics.state = before.astype(np.float64)
                expected, *_ = physics.step(policy(before))
                np.testing.assert_allclose(after, expected, atol=1e-4, err_msg="an action went to the wrong step")
            final = episode["final"]
            if final is not None and episode["terminated"]:
                assert abs(final[0]) > X_LIMIT or abs(final[2]) > THETA_LIMIT, "the final observation is not final"


def sync_cartpole(mode: gym.vector.AutoresetMode) -> gym.vector.VectorEnv:
    return gym.vector.SyncVectorEnv([functools.partial(gym.make, "CartPole-v1")] * NUM_ENVS, copy=False,
                                    autoreset_mode=mode)


def async_cartpole(mode: gym.vector.AutoresetMode) -> gym.vector.VectorEnv:
    return gym.vector.AsyncVectorEnv([functools.partial(gym.make, "CartPole-v1")] * NUM_ENVS, copy=False,
                                     autoreset_mode=mode, context="forkserver")


@pytest.mark.parametrize(
    "make, mode",
    [(sync_cartpole, SAME), (sync_cartpole, NEXT), (sync_cartpole, DISABLED), (async_cartpole, SAME),
     (async_cartpole, NEXT)],
    ids=["sync-same-step", "sync-next-step", "sync-disabled", "async-same-step", "async-next-step"],
)
def test_every_autoreset_mode_gives_the_episodes_of_plain_envs(make, mode):
    game = GymVectorGame("CartPole-v1", make(mode))
    try:
        received = play(game)
    finally:
        game.close()
    episodes = host_view(received)
    check_cartpole_episodes(episodes)
    count = min(len(found) for found in episodes)
    for env_index, expected in enumerate(reference_episodes(count)):
        for got, want in zip(episodes[env_index][:count], expected):
            np.testing.assert_array_equal(np.stack(got["observations"]), np.stack(want["observations"]))
            assert (got["ret"], got["terminated"], got["truncated"]) == (want["ret"], want["terminated"],
                                                                        want["truncated"])
            if mode == NEXT:  # only next-step sends the final observation (in the restart row)
                np.testing.assert_array_equal(got["final"], want["final"])
    assert game.episodes == sum(len(found) for found in episodes)


def test_native_cartpole_next_step_autoreset_reaches_the_host_as_a_restart_row():
    envs, choice = make_vector_env("CartPole-v1", NUM_ENVS)
    game = GymVectorGame("CartPole-v1", envs, choice)
    try:
        assert choice.mode == "native" and game.autoreset == NEXT and type(envs.unwrapped).__name__ == "CartPoleVectorEnv"
        received = play(game, 200)
    finally:
        game.close()
    for previous, message in zip(received, received[1:]):
        ended, acting, acted, reward = message[2] | message[3], message[4], previous[4], message[1]
        assert (acting == ~ended).all(), "an env that ended must restart without an action, and only then"
        assert (reward[~acted] == 0).all() and not (ended & ~acted).any(), "the restart step has no reward or end"
    episodes = host_view(received)
    check_cartpole_episodes(episodes)
    assert all(episode["final"] is not None for found in episodes for episode in found)


def test_reset_reseeds_and_a_second_reset_starts_fresh_episodes():
    game = GymVectorGame("CartPole-v1", sync_cartpole(SAME))
    try:
        first = game.reset(SEED).observation["observation"].copy()
        game.step({"action": np.zeros((NUM_ENVS, 1), np.int64)})
        again = game.reset(SEED)
        np.testing.assert_array_equal(again.observation["observation"], first)
        assert not again.terminated.any() and not again.reward.any()
        assert again.observation["observation"].shape == (NUM_ENVS, 1, 4)
        with pytest.raises(ValueError, match=r"actions\['action'\] have shape \(3,\), expected \(3, 1\)"):
            game.step({"action": np.zeros(NUM_ENVS, np.int64)})
    finally:
        game.close()


@pytest.mark.skipif(
    importlib.util.find_spec("ale_py") is None or importlib.util.find_spec("cv2") is None,
    reason="Atari needs ale-py and opencv-python-headless",
)
def test_native_atari_vector_env_shows_the_wrapped_envs_frames():
    # No no-op starts and no sticky actions, so both play the same game from the same seed.
    native = make_atari_vector_env("ALE/Pong-v5", 2, num_threads=1, noop_max=0, repeat_action_probability=0.0)
    wrapped = [make_atari_env("ALE/Pong-v5", noop_max=0, repeat_action_probability=0.0) for _ in range(2)]
    try:
        assert native.single_observation_space.shape == (84, 84, 4) and native.metadata["autoreset_mode"] == SAME
        frames, _ = native.reset(seed=3)
        expected = [env.reset(seed=3 + index)[0] for index, env in enumerate(wrapped)]
        np.testing.assert_array_equal(frames[:, :, :, -1], np.stack(expected)[:, :, :, -1])
        for step in range(12):
            actions = np.array([step % 6, (step + 3) % 6])
            frames, rewards, *_ = native.step(actions)
            expected = [env.step(int(action))[0] for env, action in zip(wrapped, actions)]
            newest = slice(None) if step >= 3 else slice(-1 - step, None)  # ALE pads a new stack with black frames
            np.testing.assert_array_equal(frames[..., newest], np.stack(expected)[..., newest])
    finally:
        native.close()
        for env in wrapped:
            env.close()


# --- how "auto" chooses ---------------------------------------------------------------------------


def test_auto_prefers_the_native_vector_env_without_probing():
    def probe():
        raise AssertionError("a native env needs no probe")

    assert choose_mode(64, native=True, step_seconds=probe, cores=2).mode == "native"


@pytest.mark.parametrize(
    "step_s, cores, num_envs, mode",
    [(1e-3, 2, 8, "async"), (1e-3, 16, 8, "async"), (1e-5, 2, 64, "sync"), (1e-3, 1, 8, "sync"),
     (1e-3, 2, 1, "sync"), (1.5e-4, 2, 8, "sync"), (3e-4, 2, 8, "async")],
)
def test_auto_uses_subprocesses_when_the_measured_step_pays_for_them(step_s, cores, num_envs, mode):
    choice = choose_mode(num_envs, native=False, step_seconds=lambda: step_s, cores=cores)
    assert choice.mode == mode and f"{cores} usable cores" in choice.reason


class _SlowEnv(gym.Env):
    """A Discrete env whose step computes for at least 2 ms of CPU time (a stand-in for an emulator)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        start = time.thread_time()
        while time.thread_time() - start < 0.002:
            pass
        return np.zeros(2, np.float32), 0.0, False, False, {}


def test_the_probe_measures_a_slow_step_and_auto_makes_it_async(monkeypatch):
    assert probe_step_seconds(_SlowEnv, seconds=0.05) >= 0.002
    monkeypatch.setattr(gym_vector, "make_one_fn", lambda env_id: _SlowEnv)
    monkeypatch.setattr(gym_vector, "usable_cores", lambda: 2)
    monkeypatch.setattr(gym_vector, "_build", lambda env_id, num_envs, mode, make_one: mode)
    built, choice = make_vector_env("Slow-v0", 4)
    assert built == "async" and choice.mode == "async" and "4 envs: subprocesses save" in choice.reason
    assert make_vector_env("Slow-v0", 4, "sync")[1] == VectorChoice("sync", "forced by the vector mode flag")


def test_forced_and_bad_modes_name_the_problem():
    with pytest.raises(UnsupportedEnv, match="Acrobot-v1 has no native vector env.*--vector sync or async"):
        make_vector_env("Acrobot-v1", 2, "native")
    with pytest.raises(UnsupportedEnv, match="unknown vector mode 'fast'"):
        make_vector_env("CartPole-v1", 2, "fast")
    envs, choice = make_vector_env("CartPole-v1", 2, "sync")
    assert isinstance(envs, gym.vector.SyncVectorEnv) and choice.mode == "sync"
    envs.close()
