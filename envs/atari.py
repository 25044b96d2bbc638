"""Atari games for the gym worker: the standard DQN-style preprocessing.

`make_atari_env("ALE/Pong-v5")` returns one env whose observations are the last 4
preprocessed frames, HWC uint8 [84, 84, 4] (the host's conv torso expects HWC):
no-op starts (up to 30), frame skip 4 with max-pooling, 84x84 grayscale, no
terminal on life loss, sticky actions at ALE v5's default probability.
`make_atari_vector_env("ALE/Pong-v5", n)` is ale_py's native vector env (C++,
its own threads) set to the same preprocessing, channels moved last, same-step
autoreset; its frames equal the wrapped env's (tests/test_gym_worker.py) except
the first three stacks of an episode, which ALE pads with black frames where
gymnasium's frame stack repeats the first frame.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

FRAME_STACK = 4
SCREEN_SIZE = 84
FRAME_SKIP = 4
NOOP_MAX = 30


def is_atari(env_id: str) -> bool:
    """True for ids served by ale-py ("ALE/Pong-v5")."""
    return env_id.startswith("ALE/")


class ChannelsLast(gym.ObservationWrapper):
    """[C, H, W] -> [H, W, C], e.g. 4 stacked frames into an image's channels."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        space = env.observation_space
        self.observation_space = gym.spaces.Box(
            low=np.moveaxis(space.low, 0, -1), high=np.moveaxis(space.high, 0, -1), dtype=space.dtype
        )

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.moveaxis(observation, 0, -1)


def make_atari_env(env_id: str, noop_max: int = NOOP_MAX, **make_kwargs) -> gym.Env:
    """One preprocessed Atari env: observations [84, 84, 4] uint8, Discrete actions.

    `make_kwargs` go to `gym.make` (tests turn sticky actions off to compare frames).
    """
    import ale_py  # Imported here so non-Atari workers never load the emulator.

    gym.register_envs(ale_py)
    env = gym.make(env_id, frameskip=1, **make_kwargs)  # AtariPreprocessing does the frame skipping.
    env = AtariPreprocessing(
        env,
        noop_max=noop_max,
        frame_skip=FRAME_SKIP,
        screen_size=SCREEN_SIZE,
        terminal_on_life_loss=False,
        grayscale_obs=True,
    )
    env = FrameStackObservation(env, stack_size=FRAME_STACK)
    return ChannelsLast(env)


def make_atari_vector_env(env_id: str, num_envs: int, num_threads: int = 0, **overrides) -> gym.vector.VectorEnv:
    """ale_py's vector env of `num_envs` copies with `make_atari_env`'s preprocessing: [E, 84, 84, 4] uint8.

    `num_threads` 0 lets ALE choose; `overrides` replace its settings (tests turn
    off no-ops and sticky actions to compare frames).
    """
    import ale_py

    gym.register_envs(ale_py)
    settings = dict(
        noop_max=NOOP_MAX, frameskip=FRAME_SKIP, img_height=SCREEN_SIZE, img_width=SCREEN_SIZE, grayscale=True,
        stack_num=FRAME_STACK, maxpool=True, episodic_life=False, reward_clipping=False, use_fire_reset=False,
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP, num_threads=num_threads,
    )
    envs = gym.make_vec(env_id, num_envs, vectorization_mode="vector_entry_point", **{**settings, **overrides})
    return ChannelsLastVector(envs)


class ChannelsLastVector(gym.vector.VectorWrapper):
    """[E, C, H, W] -> [E, H, W, C] for a vector env in any autoreset mode (a view, no copy).

    gymnasium's vector observation wrappers refuse same-step autoreset envs.
    """

    def __init__(self, envs: gym.vector.VectorEnv):
        super().__init__(envs)
        space = envs.single_observation_space
        self.single_observation_space = gym.spaces.Box(
            low=np.moveaxis(space.low, 0, -1), high=np.moveaxis(space.high, 0, -1), dtype=space.dtype
        )
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, envs.num_envs)

    def reset(self, **kwargs):
        observation, info = self.env.reset(**kwargs)
        return np.moveaxis(observation, 1, -1), info

    def step(self, actions):
        observation, reward, terminated, truncated, info = self.env.step(actions)
        return np.moveaxis(observation, 1, -1), reward, terminated, truncated, info
