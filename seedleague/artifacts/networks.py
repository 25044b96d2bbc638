"""The network a spec and a NetworkConfig build: the flat one-array network or the named one.

    network = build(config, spec)                             # what a host trains for `spec` (a fresh object)
    network = shared_network(config, shape, dtype, actions)   # one per architecture: loaded policies share compiles
    network = named_network_for(config, spec)                 # likewise for the named network
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Union

import numpy as np

from seedleague.protocol.named import NamedEnvSpec, flat_model
from seedleague.rl.encoders import encoder_kind
from seedleague.rl.networks import Network, make_network
from seedleague.rl.network_config import NetworkConfig
from seedleague.rl.named_network import NamedNetwork, NamedNetworkConfig, make_named_network


def named_torso(network: NetworkConfig, spec: NamedEnvSpec) -> NetworkConfig:
    """The network config a named spec builds with: torso "mlp" (the classic-control settings) is what "auto"
    picks for every vector tensor, so a spec of vectors only takes it as "auto"; any other torso is left for
    make_named_network to refuse with what to change."""
    vectors = all(encoder_kind(t) == "vector" for t in spec.observation.tensors)
    if network.torso == "mlp" and vectors and not flat_model(spec):
        return dataclasses.replace(network, torso="auto")
    return network


def build(config: NetworkConfig, spec: NamedEnvSpec) -> Union[Network, NamedNetwork]:
    """The flat network (one observation array in, one categorical out) for a spec of the flat model
    (`seedleague.protocol.named.flat_model`); the named network (one encoder per named tensor, one head per action
    head) for any other."""
    if flat_model(spec):
        tensor, head = spec.observation.tensors[0], spec.action.heads[0]
        return make_network(config, tensor.shape, tensor.dtype, head.num_actions)
    return make_named_network(NamedNetworkConfig(network=named_torso(config, spec)), spec.observation, spec.action)


@functools.lru_cache(maxsize=32)
def shared_network(config: NetworkConfig, observation_shape: tuple[int, ...], observation_dtype: np.dtype,
                   num_actions: int) -> Network:
    """One Network per architecture, so policies of the same shape (a league's snapshots) share compiles."""
    return make_network(config, observation_shape, observation_dtype, num_actions)


@functools.lru_cache(maxsize=32)
def named_network_for(config: NetworkConfig, spec: NamedEnvSpec,
                      continuous: str = "squashed") -> NamedNetwork:
    """The network a host built for `spec` with `config` (`build`'s choice), one per architecture; `continuous`
    picks the Gaussian of continuous heads (NamedNetworkConfig.continuous; hosts build "squashed")."""
    return make_named_network(NamedNetworkConfig(network=named_torso(config, spec),
                                                 continuous=continuous), spec.observation, spec.action)
