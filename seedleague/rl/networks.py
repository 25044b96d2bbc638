"""Actor-critic networks: a torso, an optional LSTM core, policy and value heads.

This file owns the model the host runs for inference and the learner trains. It
hands out a `Network` of three pure functions and holds no parameters itself:

    network = make_network(NetworkConfig(), observation_shape=(4,),
                           observation_dtype=np.float32, num_actions=2)
    params = network.init(jax.random.key(0))
    core = network.initial_state(batch_size)                 # () without an LSTM
    logits, value, core = network.apply(params, obs, first, core)
    #   obs [B, T, *obs_shape], first [B, T] bool  ->  logits [B, T, A], value [B, T]

Inference calls `apply` with T = 1 and carries `core` between calls; the learner
calls it over a whole unroll (T + 1 rows) starting from the unroll's core state.
`init` and `apply` are already jitted (one compile per input shape).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from seedleague.rl.network_config import NetworkConfig

Params = Any
CoreState = Any

# The "Nature" DQN convolutions (Mnih et al. 2015), also IMPALA's shallow model:
# (features, kernel, stride).
_NATURE_CONVS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
# Smallest frame side the Nature convolutions fit with VALID padding; smaller
# frames use SAME padding so that any HWC size works.
_MIN_VALID_SIDE = 36
# The board torso: stride-1 SAME 3x3 convolutions, (features, kernel), so every
# square keeps its own features (a 6x7 board stays 6x7).
_BOARD_CONVS = ((32, 3), (32, 3))


class Network(NamedTuple):
    """Pure functions of one model; see the module docstring for how to call them."""

    init: Callable[[jax.Array], Params]
    apply: Callable[
        [Params, jax.Array, jax.Array, CoreState], tuple[jax.Array, jax.Array, CoreState]
    ]
    initial_state: Callable[[int], CoreState]


def _hidden_init() -> Callable:
    """Orthogonal sqrt(2) for relu/tanh layers (Saxe et al. 2014; as in CleanRL's PPO)."""
    return nn.initializers.orthogonal(math.sqrt(2.0))


def _dense_layers(x: jax.Array, hidden_sizes: tuple[int, ...], activation) -> jax.Array:
    """Flatten [N, ...] to [N, -1], then one dense layer per size; call inside a torso's compact
    __call__ (the layers are named Dense_0, Dense_1, ... in the calling module)."""
    x = x.reshape((x.shape[0], -1))
    for size in hidden_sizes:
        x = activation(nn.Dense(size, kernel_init=_hidden_init())(x))
    return x


class _MlpTorso(nn.Module):
    """Flatten, then tanh dense layers.

    tanh rather than relu: Andrychowicz et al. 2021 ("What Matters in On-Policy
    RL") found tanh MLPs learn better with PPO-style losses; with orthogonal
    init it is the usual setting of PPO implementations for classic control
    (it learns CartPole-v1 quickly here), and its bounded activations tolerate
    unnormalised observations.
    """

    hidden_sizes: tuple[int, ...]

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return _dense_layers(x, self.hidden_sizes, jnp.tanh)


class _ConvTorso(nn.Module):
    """Nature CNN (Mnih et al. 2015) on [N, H, W, C] frames, then relu dense layers."""

    hidden_sizes: tuple[int, ...]

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        padding = "VALID" if min(x.shape[1:3]) >= _MIN_VALID_SIDE else "SAME"
        for features, kernel, stride in _NATURE_CONVS:
            x = nn.Conv(features, (kernel, kernel), (stride, stride), padding=padding,
                        kernel_init=_hidden_init())(x)
            x = nn.relu(x)
        return _dense_layers(x, self.hidden_sizes, nn.relu)


class _BoardTorso(nn.Module):
    """3x3 stride-1 convolutions over [N, C, H, W] board planes, then relu dense layers.

    A line of four is the same pattern wherever it lies on the board; convolutions
    share what they learn across squares, where an MLP must learn every square's
    version of a pattern apart.
    """

    hidden_sizes: tuple[int, ...]

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = jnp.transpose(x, (0, 2, 3, 1))  # [N, C, H, W] -> [N, H, W, C]
        for features, kernel in _BOARD_CONVS:
            x = nn.relu(nn.Conv(features, (kernel, kernel), padding="SAME", kernel_init=_hidden_init())(x))
        return _dense_layers(x, self.hidden_sizes, nn.relu)


_TORSO_MODULES = {"mlp": _MlpTorso, "conv": _ConvTorso, "board": _BoardTorso}


class _ResettingLSTMCell(nn.Module):
    """One LSTM step that first zeroes the carry of rows starting an episode."""

    features: int

    @nn.compact
    def __call__(self, carry: CoreState, inputs: tuple[jax.Array, jax.Array]):
        x_t, first_t = inputs
        carry = jax.tree.map(lambda c: jnp.where(first_t[:, None], jnp.zeros_like(c), c), carry)
        return nn.OptimizedLSTMCell(self.features)(carry, x_t)


# Scan the cell over axis 1 (time) of batch-major [B, T, ...] inputs, sharing params.
_ScannedLSTM = nn.scan(
    _ResettingLSTMCell,
    variable_broadcast="params",
    split_rngs={"params": False},
    in_axes=1,
    out_axes=1,
)


class _ActorCritic(nn.Module):
    """Torso over [B*T], optional LSTM over T, then policy and value heads."""

    torso: str  # resolved: "mlp", "conv" or "board"
    hidden_sizes: tuple[int, ...]
    lstm_size: int
    shared_torso: bool
    num_actions: int
    squash_inputs: bool = False

    @nn.compact
    def __call__(self, observation: jax.Array, first: jax.Array, core_state: CoreState):
        batch, time = first.shape
        flat = _to_float(observation.reshape((batch * time,) + observation.shape[2:]), self.squash_inputs)
        torso = _TORSO_MODULES[self.torso]

        def features(name: str) -> jax.Array:
            x = torso(self.hidden_sizes, name=name)(flat)
            return x.reshape((batch, time, x.shape[-1]))

        x = features("torso")
        if self.lstm_size:
            core_state, x = _ScannedLSTM(self.lstm_size, name="lstm")(core_state, (x, first))
        value_x = x if self.shared_torso else features("value_torso")
        # A policy head with 100x smaller weights starts near uniform (Andrychowicz
        # et al. 2021, "What Matters in On-Policy RL").
        logits = nn.Dense(
            self.num_actions, kernel_init=nn.initializers.orthogonal(0.01), name="policy_head"
        )(x)
        value = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0), name="value_head")(value_x)
        return logits.astype(jnp.float32), value[..., 0].astype(jnp.float32), core_state


def _to_float(observation: jax.Array, squash: bool = False) -> jax.Array:
    """Cast any numeric observation to float32; uint8 pixels are scaled to [0, 1]; with `squash`, other inputs
    pass through `squash_beyond_unit`."""
    if observation.dtype == jnp.uint8:
        return observation.astype(jnp.float32) / 255.0
    x = observation.astype(jnp.float32)
    return squash_beyond_unit(x) if squash else x


def squash_beyond_unit(x: jax.Array) -> jax.Array:
    """x where |x| <= 1, sign(x) (1 + ln|x|) beyond: continuous, with slope 1 at +-1, and logarithmic growth
    (NetworkConfig.squash_inputs)."""
    magnitude = jnp.abs(x)
    return jnp.where(magnitude > 1.0, jnp.sign(x) * (1.0 + jnp.log(jnp.maximum(magnitude, 1.0))), x)


def _resolve_torso(torso: str, observation_shape: tuple[int, ...]) -> str:
    if torso == "auto":
        return "conv" if len(observation_shape) == 3 else "mlp"
    if torso in ("conv", "board") and len(observation_shape) != 3:
        layout = "[H, W, C]" if torso == "conv" else "[C, H, W]"
        raise ValueError(
            f"torso={torso!r} needs {layout} observations, got shape {observation_shape}; "
            "use torso='mlp' or 'auto'"
        )
    return torso


def _initial_state(lstm_size: int, batch_size: int) -> CoreState:
    """Zero core state for `batch_size` rows: an LSTM (c, h) pair, or ()."""
    if not lstm_size:
        return ()
    zeros = np.zeros((batch_size, lstm_size), np.float32)
    return (zeros, zeros.copy())


def _init(module: _ActorCritic, observation_shape: tuple[int, ...], observation_dtype: np.dtype,
          lstm_size: int, rng: jax.Array) -> Params:
    observation = jnp.zeros((1, 1) + observation_shape, observation_dtype)
    first = jnp.ones((1, 1), bool)
    return module.init(rng, observation, first, _initial_state(lstm_size, 1))


def _apply(module: _ActorCritic, observation_shape: tuple[int, ...], params: Params,
           observation: jax.Array, first: jax.Array, core_state: CoreState):
    observation, first = jnp.asarray(observation), jnp.asarray(first)
    if observation.ndim < 2 or tuple(observation.shape[2:]) != observation_shape:
        raise ValueError(
            f"observation must be [B, T, *{observation_shape}], got shape {observation.shape}"
        )
    if first.shape != observation.shape[:2]:
        raise ValueError(
            f"first must be [B, T] = {observation.shape[:2]} to match the observation, "
            f"got shape {first.shape}"
        )
    return module.apply(params, observation, first.astype(bool), core_state)


def make_network(
    config: NetworkConfig,
    observation_shape: tuple[int, ...],
    observation_dtype: Any,
    num_actions: int,
) -> Network:
    """Build the actor-critic `Network` for one observation and action space."""
    observation_shape = tuple(int(d) for d in observation_shape)
    if num_actions < 1:
        raise ValueError(f"num_actions must be >= 1, got {num_actions}")
    observation_dtype = np.dtype(observation_dtype)
    if not (np.issubdtype(observation_dtype, np.number) or observation_dtype == bool):
        raise ValueError(f"observation_dtype must be numeric or bool, got {observation_dtype}")
    torso = _resolve_torso(config.torso, observation_shape)
    module = _ActorCritic(torso=torso, hidden_sizes=config.hidden_sizes,
                          lstm_size=config.lstm_size, shared_torso=config.shares_torso(torso),
                          num_actions=int(num_actions), squash_inputs=config.squash_inputs)
    return Network(
        # Both jitted: run eagerly, flax dispatches (and compiles) op by op, which
        # costs seconds; inside a caller's jit they are simply inlined.
        init=jax.jit(
            functools.partial(_init, module, observation_shape, observation_dtype, config.lstm_size)
        ),
        apply=jax.jit(functools.partial(_apply, module, observation_shape)),
        initial_state=functools.partial(_initial_state, config.lstm_size),
    )
