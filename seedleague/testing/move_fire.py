"""MoveFire: a small gymnasium game with a Dict observation and a two-head Dict action, for protocol v2 tests.

    import seedleague.testing.move_fire     # registers "seedleague/MoveFire-v0"
    env = gymnasium.make("seedleague/MoveFire-v0")

An agent and a target sit on a track of `TRACK` cells. The observation is
{"agent": one-hot float32[TRACK], "target": one-hot float32[TRACK]}; the action is
{"move": Discrete(3) (left, stay, right), "fire": Discrete(2)}. Each step moves the
agent, then, if it fires, pays +1 when it stands on the target (the target then
jumps to a random other cell) and -0.2 when it does not. Episodes are cut off
(truncated) after `LENGTH` steps. Scoring needs both heads: moving to the target
and firing there. A uniformly random policy earns about +0.2 an episode; walking
to the target and firing on arrival earns about 3.
"""

from __future__ import annotations

from typing import Optional

import gymnasium as gym
import numpy as np

TRACK = 5
LENGTH = 8
ENV_ID = "seedleague/MoveFire-v0"


class MoveFire(gym.Env):
    """One MoveFire game (module docstring)."""

    metadata = {"render_modes": []}

    def __init__(self):
        cell = gym.spaces.Box(0.0, 1.0, (TRACK,), np.float32)
        self.observation_space = gym.spaces.Dict({"agent": cell, "target": cell})
        self.action_space = gym.spaces.Dict({"move": gym.spaces.Discrete(3), "fire": gym.spaces.Discrete(2)})
        self._agent = self._target = 0

    def _observation(self) -> dict:
        eye = np.eye(TRACK, dtype=np.float32)
        return {"agent": eye[self._agent], "target": eye[self._target]}

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self._agent, self._target = self.np_random.choice(TRACK, 2, replace=False)
        return self._observation(), {}

    def step(self, action: dict):
        self._agent = int(np.clip(self._agent + int(action["move"]) - 1, 0, TRACK - 1))
        reward = 0.0
        if int(action["fire"]):
            if self._agent == self._target:
                reward = 1.0
                self._target = int((self._target + self.np_random.integers(1, TRACK)) % TRACK)
            else:
                reward = -0.2
        return self._observation(), reward, False, False, {}


if ENV_ID not in gym.registry:  # by import path, so subprocess vector envs can make it too
    gym.register(ENV_ID, entry_point="seedleague.testing.move_fire:MoveFire", max_episode_steps=LENGTH)
