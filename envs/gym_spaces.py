"""Gymnasium spaces as protocol v2 specs: named observation tensors from a Box or Dict observation space, action
heads from Discrete, MultiDiscrete, Box, Tuple and Dict action spaces, and the conversions each step needs.

    spaces = NamedSpaces.of("Pendulum-v1", envs)      # or None: a Box + Discrete env speaks v1 unchanged
    spaces.spec                                            # NamedEnvSpec: "observation" float32[3], head
                                                           #   "action" continuous [-2, 2]
    spaces.observation(obs)                                # {name: [E, 1, ...]}
    spaces.env_action({"action": a})                       # what envs.step takes, a: [E, 1, 1]

Observation leaves: Box (float64 travels as float32), Discrete (one-hot float32 [n]),
MultiBinary; nested Dict keys are joined with ".", a Tuple's elements are "<name>_<i>"
(Blackjack-v1's Tuple(Discrete(32), Discrete(11), Discrete(2)): observation_0, _1, _2). Action leaves: Discrete (n,
start), MultiDiscrete (one head per entry, "<name>_<i>"), Box with finite bounds
(one continuous head of its flattened size), and Tuple ("<name>_<i>") or Dict
("<key>") of those. Anything else raises UnsupportedEnv saying which wrapper to
use. Never imports jax.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable, Optional

import gymnasium as gym
import numpy as np

from envs.gym_vector import UnsupportedEnv
from seedleague.protocol import codec
from seedleague.protocol.errors import ProtocolError
from seedleague.protocol.named import (ActionSpec, ContinuousHead, DiscreteHead, ObservationSpec,
                                       NamedEnvSpec, TensorSpec)

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\Z")


def protocol_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype observations travel as: float64 becomes float32, others must exist in the protocol."""
    dtype = np.dtype(dtype)
    if dtype == np.float64:
        return np.dtype(np.float32)
    try:
        codec.dtype_to_enum(dtype)
    except ProtocolError as error:
        raise UnsupportedEnv(error.message) from None
    return dtype


def _name(env_id: str, name: str) -> str:
    if not _NAME.match(name) or len(name) > 64:
        raise UnsupportedEnv(f"{env_id}: space key {name!r} cannot name a tensor or head (letters, digits, _ . -, "
                             "at most 64 chars): rename it with a wrapper")
    return name


@dataclasses.dataclass(frozen=True)
class _ObservationLeaf:
    """One observation tensor: its spec and how to read it out of a batched observation."""

    spec: TensorSpec
    path: tuple  # keys into nested Dict observations, indices into Tuple ones
    one_hot: int = 0  # a Discrete(n) leaf: n (sent as one-hot float32 [n])

    def read(self, observation: Any) -> np.ndarray:
        """[rows, *shape] of this leaf from a batched observation (numpy arrays, or dicts of them)."""
        return self.convert(_pick(observation, self.path))

    def convert(self, x: Any) -> np.ndarray:
        """[rows, *shape] in the protocol's dtype from this leaf's batched values."""
        x = np.asarray(x)
        if self.one_hot:
            return np.eye(self.one_hot, dtype=np.float32)[x.reshape(-1)]
        return x.astype(self.spec.dtype, copy=False).reshape((len(x),) + self.spec.shape)


def _observation_leaves(env_id: str, space: gym.Space, path: tuple, name: str = "observation") -> list[_ObservationLeaf]:
    """The leaves of an observation `space` found at `path` (Dict keys, Tuple indices) and named `name`."""
    if isinstance(space, gym.spaces.Dict):
        return [leaf for key, sub in space.spaces.items()
                for leaf in _observation_leaves(env_id, sub, path + (key,), f"{name}.{key}" if path else key)]
    if isinstance(space, gym.spaces.Tuple):
        return [leaf for i, sub in enumerate(space.spaces)
                for leaf in _observation_leaves(env_id, sub, path + (i,), f"{name}_{i}")]
    name = _name(env_id, name)
    if isinstance(space, gym.spaces.Discrete):
        return [_ObservationLeaf(TensorSpec(name, (int(space.n),), np.float32), path, one_hot=int(space.n))]
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)) and space.shape:
        return [_ObservationLeaf(TensorSpec(name, space.shape, protocol_dtype(space.dtype)), path)]
    raise UnsupportedEnv(f"{env_id}: observation space {space} is not a Box, Discrete, MultiBinary or a Dict or Tuple "
                         "of them; wrap it in gymnasium.wrappers.FlattenObservation")


# An action leaf: its heads and how their [E, 1, ...] arrays become the leaf's batched env action.
_ActionLeaf = tuple[list, Callable[[dict], Any]]


def _action_leaf(env_id: str, space: gym.Space, name: str) -> _ActionLeaf:
    name = _name(env_id, name)
    if isinstance(space, gym.spaces.Discrete):
        start = int(space.start)
        return [DiscreteHead(name, int(space.n))], lambda actions: actions[name][:, 0] + start
    if isinstance(space, gym.spaces.MultiDiscrete) and len(space.shape) == 1:
        names = [f"{name}_{i}" for i in range(space.shape[0])]
        heads = [DiscreteHead(n, int(k)) for n, k in zip(names, space.nvec)]
        start = np.asarray(space.start)
        return heads, lambda actions: np.stack([actions[n][:, 0] for n in names], -1) + start
    if isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating):
        if not (np.isfinite(space.low).all() and np.isfinite(space.high).all()):
            raise UnsupportedEnv(f"{env_id}: action space {space} is unbounded; give it finite bounds with "
                                 "gymnasium.wrappers.ClipAction or RescaleAction")
        shape, dtype = space.shape, space.dtype
        head = ContinuousHead(name, tuple(space.low.reshape(-1)), tuple(space.high.reshape(-1)))
        return [head], lambda actions: actions[name][:, 0].reshape((-1,) + shape).astype(dtype, copy=False)
    if isinstance(space, (gym.spaces.Tuple, gym.spaces.Dict)):
        items = (space.spaces.items() if isinstance(space, gym.spaces.Dict)
                 else ((f"{name}_{i}", sub) for i, sub in enumerate(space.spaces)))
        leaves = [(key, _action_leaf(env_id, sub, key)) for key, sub in items]
        heads = [head for _, (sub_heads, _) in leaves for head in sub_heads]
        if isinstance(space, gym.spaces.Dict):
            return heads, lambda actions: {key: decode(actions) for key, (_, decode) in leaves}
        return heads, lambda actions: tuple(decode(actions) for _, (_, decode) in leaves)
    raise UnsupportedEnv(f"{env_id}: action space {space} is not a Discrete, MultiDiscrete, float Box, Tuple or Dict "
                         "of them")


class NamedSpaces:
    """A vector env's spaces as a protocol v2 spec, and the per-step conversions (module docstring)."""

    def __init__(self, spec: NamedEnvSpec, leaves: list[_ObservationLeaf], decode: Callable[[dict], Any]):
        self.spec = spec
        self._leaves = leaves
        self._decode = decode

    @classmethod
    def of(cls, env_id: str, envs: gym.vector.VectorEnv, force: bool = False) -> Optional["NamedSpaces"]:
        """None for a Box observation with a Discrete action (v1 carries those unchanged) unless `force`; else the
        v2 spaces. Raises UnsupportedEnv for spaces neither version carries."""
        observation_space, action_space = envs.single_observation_space, envs.single_action_space
        v1 = isinstance(observation_space, gym.spaces.Box) and isinstance(action_space, gym.spaces.Discrete)
        if v1 and not force:
            return None
        leaves = _observation_leaves(env_id, observation_space, ())
        heads, decode = _action_leaf(env_id, action_space, "action")
        try:
            spec = NamedEnvSpec(env_id, ObservationSpec(tuple(leaf.spec for leaf in leaves)),
                                ActionSpec(tuple(heads)), envs.num_envs)
        except (ProtocolError, ValueError) as error:
            raise UnsupportedEnv(f"{env_id}: {getattr(error, 'message', error)}") from None
        return cls(spec, leaves, decode)

    def observation(self, observation: Any) -> dict:
        """{name: [E, 1, *shape]} of a batched observation."""
        return {leaf.spec.name: leaf.read(observation)[:, None] for leaf in self._leaves}

    def final_observation(self, finals: list) -> dict:
        """{name: [K, 1, *shape]} of K single (unbatched) final observations, in env order."""
        stacked = [leaf.convert(np.stack([np.asarray(_pick(o, leaf.path)) for o in finals])) for leaf in self._leaves]
        return {leaf.spec.name: x[:, None] for leaf, x in zip(self._leaves, stacked)}

    def env_action(self, actions: dict) -> Any:
        """The vector env's batched action from the host's {head: [E, 1] or [E, 1, d]}."""
        return self._decode(actions)


def _pick(observation: Any, path: tuple) -> Any:
    for key in path:
        observation = observation[key]
    return observation
