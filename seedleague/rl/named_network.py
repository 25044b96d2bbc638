"""The actor-critic network for named specs: named observations in, one output per action head.

This file owns the model for protocol v2's specs (seedleague.rl.named_spec).
Like `seedleague.rl.networks` it hands out pure functions and holds no params:

    network = make_named_network(NamedNetworkConfig(), observation_spec, action_spec)
    params = network.init(jax.random.key(0))
    core = network.initial_state(batch_size)
    outputs, value, core = network.apply(params, observation, first, core)
    #   observation {key: [B, T, *shape]} over observation_spec.arrays(), first [B, T] bool
    #   ->  outputs {head: [B, T, P_head]} (network.heads' distribution params), value [B, T]
    action, behaviour, core = act(network, params, observation_t, first_t, core, legal, rng)  # inference, T = 1

The model: one encoder per named observation (seedleague.rl.encoders),
concatenated, the dense torso, the optional LSTM core, then one dense layer per
action head and the value head. A spec of the flat shape (one unmasked tensor,
one discrete head: `is_flat_shaped`) builds the flat network itself
(`seedleague.rl.networks.make_network`): the same params, so the flat model's
checkpoints load, and the same outputs, under the names of the spec.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from seedleague.rl.action_heads import ActionHeads
from seedleague.rl.encoders import ObservationEncoders, encoder_kind
from seedleague.rl.networks import CoreState, Params, _initial_state, _ScannedLSTM, make_network
from seedleague.rl.network_config import NetworkConfig
from seedleague.rl.named_spec import ActionSpec, ObservationSpec, is_flat_shaped


@dataclasses.dataclass(frozen=True)
class NamedNetworkConfig:
    """The named network's shape.

    network: torso sizes, LSTM core and torso sharing as for the flat network (NetworkConfig);
        its `torso` must stay "auto" unless the spec has the flat shape (each tensor's
        encoder follows from its spec).
    continuous: "squashed" (tanh) or "clipped" Gaussian for continuous heads
        (seedleague.rl.action_heads).
    entity_features, entity_heads: width and attention heads of entity encoders.
    """

    network: NetworkConfig = NetworkConfig()
    continuous: str = "squashed"
    entity_features: int = 64
    entity_heads: int = 2

    def __post_init__(self):
        problems = []
        if self.continuous not in ("squashed", "clipped"):
            problems.append(f"continuous must be 'squashed' or 'clipped', got {self.continuous!r}")
        if not self.entity_features >= 1 or not self.entity_heads >= 1:
            problems.append(f"entity_features and entity_heads must be >= 1, got {self.entity_features} and "
                            f"{self.entity_heads}")
        elif self.entity_features % self.entity_heads:
            problems.append(f"entity_features ({self.entity_features}) must be a multiple of entity_heads "
                            f"({self.entity_heads})")
        if problems:
            raise ValueError("bad NamedNetworkConfig: " + "; ".join(problems))


class NamedNetwork(NamedTuple):
    """Pure functions of one model (see the module docstring), its action heads and observation spec."""

    init: Callable[[jax.Array], Params]
    apply: Callable[[Params, dict, jax.Array, CoreState], tuple[dict, jax.Array, CoreState]]
    initial_state: Callable[[int], CoreState]
    heads: ActionHeads
    observation_spec: ObservationSpec


class _NamedActorCritic(nn.Module):
    """Encoders and torso over [B*T], optional LSTM over T, then one dense layer per head and the value."""

    observation_spec: ObservationSpec
    heads: ActionHeads
    hidden_sizes: tuple[int, ...]
    lstm_size: int
    shared_torso: bool
    entity_features: int
    entity_heads: int
    squash_inputs: bool = False

    @nn.compact
    def __call__(self, observation: dict, first: jax.Array, core_state: CoreState):
        batch, time = first.shape
        flat = {key: x.reshape((batch * time,) + x.shape[2:]) for key, x in observation.items()}

        def features(name: str) -> jax.Array:
            x = ObservationEncoders(self.observation_spec, self.hidden_sizes, self.entity_features,
                                    self.entity_heads, self.squash_inputs, name=name)(flat)
            return x.reshape((batch, time, x.shape[-1]))

        x = features("torso")
        if self.lstm_size:
            core_state, x = _ScannedLSTM(self.lstm_size, name="lstm")(core_state, (x, first))
        value_x = x if self.shared_torso else features("value_torso")
        # Heads start near uniform / near mean 0, log_std 0 (100x smaller weights, as the flat network's policy head).
        outputs = {
            head.name: nn.Dense(self.heads.num_params(head.name), kernel_init=nn.initializers.orthogonal(0.01),
                                name=f"policy_head_{head.name}")(x).astype(jnp.float32)
            for head in self.heads.spec.heads
        }
        value = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0), name="value_head")(value_x)
        return outputs, value[..., 0].astype(jnp.float32), core_state


def check_observation(observation_spec: ObservationSpec, observation: dict, first: jax.Array) -> None:
    """Raise ValueError naming the tensor unless `observation` holds exactly the spec's arrays as [B, T, *shape]
    with B, T from `first`."""
    expected = observation_spec.arrays()
    if set(observation) != set(expected):
        missing, extra = sorted(set(expected) - set(observation)), sorted(set(observation) - set(expected))
        raise ValueError(f"observation keys must be {sorted(expected)}: missing {missing}, extra {extra}")
    for key, (shape, _) in expected.items():
        got = tuple(np.shape(observation[key]))  # np: jnp.shape turns a symbolic dimension (ONNX export) into a tracer
        if got != tuple(first.shape) + shape:
            raise ValueError(f"observation {key!r} must be [B, T, *{shape}] with [B, T] = {tuple(first.shape)}, "
                             f"got shape {got}")


def _init(module: _NamedActorCritic, observation_spec: ObservationSpec, lstm_size: int,
          rng: jax.Array) -> Params:
    observation = observation_spec.zeros((1, 1))
    return module.init(rng, observation, jnp.ones((1, 1), bool), _initial_state(lstm_size, 1))


def _apply(module: _NamedActorCritic, observation_spec: ObservationSpec, params: Params, observation: dict,
           first: jax.Array, core_state: CoreState):
    first = jnp.asarray(first)
    check_observation(observation_spec, observation, first)
    return module.apply(params, dict(observation), first.astype(bool), core_state)


def _apply_flat(flat_apply: Callable, observation_name: str, head_name: str, observation_spec: ObservationSpec,
                params: Params, observation: dict, first: jax.Array, core_state: CoreState):
    check_observation(observation_spec, observation, jnp.asarray(first))
    logits, value, core_state = flat_apply(params, observation[observation_name], first, core_state)
    return {head_name: logits}, value, core_state


def _flat_network(config: NamedNetworkConfig, observation_spec: ObservationSpec,
                  heads: ActionHeads) -> NamedNetwork:
    """The flat network (seedleague.rl.networks) under the spec's names."""
    tensor, head = observation_spec.tensors[0], heads.spec.heads[0]
    flat = make_network(config.network, tensor.shape, tensor.dtype, head.num_actions)
    return NamedNetwork(
        init=flat.init,
        apply=functools.partial(_apply_flat, flat.apply, tensor.name, head.name, observation_spec),
        initial_state=flat.initial_state,
        heads=heads,
        observation_spec=observation_spec,
    )


def make_named_network(config: NamedNetworkConfig, observation_spec: ObservationSpec,
                       action_spec: ActionSpec) -> NamedNetwork:
    """Build the actor-critic `NamedNetwork` for one observation spec and action spec."""
    heads = ActionHeads(action_spec, config.continuous)
    if is_flat_shaped(observation_spec, action_spec):
        return _flat_network(config, observation_spec, heads)
    if config.network.torso != "auto":
        raise ValueError(f"NetworkConfig.torso={config.network.torso!r} applies to one observation tensor only; "
                         "with several named tensors (or a masked one) each tensor's encoder follows from its spec: "
                         "use torso='auto'")
    all_vectors = all(encoder_kind(t) == "vector" for t in observation_spec.tensors)
    module = _NamedActorCritic(
        observation_spec=observation_spec, heads=heads, hidden_sizes=config.network.hidden_sizes,
        lstm_size=config.network.lstm_size,
        shared_torso=config.network.shares_torso("mlp" if all_vectors else "conv"),
        entity_features=config.entity_features, entity_heads=config.entity_heads,
        squash_inputs=config.network.squash_inputs)
    return NamedNetwork(
        init=jax.jit(functools.partial(_init, module, observation_spec, config.network.lstm_size)),
        apply=jax.jit(functools.partial(_apply, module, observation_spec)),
        initial_state=functools.partial(_initial_state, config.network.lstm_size),
        heads=heads,
        observation_spec=observation_spec,
    )


def act(network: NamedNetwork, params: Params, observation: dict, first: jax.Array, core_state: CoreState,
        legal: dict, rng: jax.Array, greedy: bool = False) -> tuple[dict, dict, CoreState]:
    """One inference step for N agents (what seedleague.host.policy does for the flat network): observation
    {key: [N, *shape]}, first [N], legal {discrete head: [N, n]} -> (actions {head: [N] or [N, d]}, the
    distribution params that acted {head: [N, P]}, the next core state). Greedy takes every head's mode. Jit it
    with `network` and `greedy` static."""
    outputs, _, core_state = network.apply(params, {key: x[:, None] for key, x in observation.items()},
                                           jnp.asarray(first)[:, None], core_state)
    outputs = {name: x[:, 0] for name, x in outputs.items()}
    action = network.heads.mode(outputs, legal) if greedy else network.heads.sample(outputs, legal, rng)
    return action, outputs, core_state


def all_legal(action_spec: ActionSpec, batch_shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    """All-legal masks [*batch_shape, n] for the discrete heads that have a legal mask."""
    return {h.name: np.ones(tuple(batch_shape) + (h.num_actions,), bool)
            for h in action_spec.discrete if h.has_legal_mask}

