"""Atari games for the gym worker: the standard DQN-style preprocessing.

`make_atari_env("ALE/Pong-v5")` returns one env whose observations are the last 4
preprocessed frames, HWC uint8 [84, 84, 4] (the host's conv torso expects HWC):
no-op starts (up to 30), frame skip 4 with max-pooling, 84x84 grayscale, no
terminal on life loss, sticky actions at ALE v5's default probability.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

FRAME_STACK = 4
SCREEN_SIZE = 84


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


def make_atari_env(env_id: str) -> gym.Env:
    """One preprocessed Atari env: observations [84, 84, 4] uint8, Discrete actions."""
    import ale_py  # Imported here so non-Atari workers never load the emulator.

    gym.register_envs(ale_py)
    env = gym.make(env_id, frameskip=1)  # AtariPreprocessing does the frame skipping.
    env = AtariPreprocessing(
        env,
        noop_max=30,
        frame_skip=4,
        screen_size=SCREEN_SIZE,
        terminal_on_life_loss=False,
        grayscale_obs=True,
    )
    env = FrameStackObservation(env, stack_size=FRAME_STACK)
    return ChannelsLast(env)
