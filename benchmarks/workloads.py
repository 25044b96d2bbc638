"""The games the benchmarks measure, as shapes: what one agent observes and can do, and the preset's model.

    workload = WORKLOADS["atari"]
    network = workload.network()                      # the preset's network for these shapes
    spec = workload.spec(num_envs=64)                 # the EnvSpec a worker of this game declares
"""

from __future__ import annotations

import dataclasses

import numpy as np

from seedleague.host.host import HostConfig
from seedleague.presets import preset_for
from seedleague.protocol.specs import EnvSpec
from seedleague.rl.networks import Network, make_network


@dataclasses.dataclass(frozen=True)
class Workload:
    """One game's per-agent shapes, as its worker declares them, and the env id whose preset it uses."""

    name: str
    env_id: str
    observation_shape: tuple[int, ...]
    observation_dtype: str
    num_actions: int
    num_seats: int = 1
    has_legal_mask: bool = False

    def host(self) -> HostConfig:
        return preset_for(self.env_id).host

    def network(self) -> Network:
        return make_network(self.host().network, self.observation_shape, np.dtype(self.observation_dtype),
                            self.num_actions)

    def spec(self, num_envs: int) -> EnvSpec:
        return EnvSpec(self.env_id, self.observation_shape, np.dtype(self.observation_dtype), self.num_actions,
                       num_envs, self.num_seats, self.has_legal_mask)


WORKLOADS = {
    # gymnasium CartPole-v1: 4 floats, 2 actions; the MLP preset.
    "cartpole": Workload("CartPole-v1", "CartPole-v1", (4,), "float32", 2),
    # OpenSpiel Kuhn poker: information state tensor of 11 floats, pass/bet, two seats with legal masks.
    "kuhn": Workload("Kuhn poker", "openspiel:kuhn_poker", (11,), "float32", 2, num_seats=2, has_legal_mask=True),
    # OpenSpiel connect_four: 3 board planes and 2 seat planes of 6x7, 7 columns, two seats; the board torso.
    "connect_four": Workload("connect_four", "openspiel:connect_four", (5, 6, 7), "float32", 7, num_seats=2,
                             has_legal_mask=True),
    # ALE Pong-v5 after envs/atari.py: 4 stacked 84x84 grayscale frames (uint8, HWC), 6 actions; Nature CNN.
    "atari": Workload("Atari Pong", "ALE/Pong-v5", (84, 84, 4), "uint8", 6),
}
