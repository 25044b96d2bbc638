"""A trained protocol v2 policy outside seedleague: named observations in, one action per head out.

`seedleague.artifacts.load.load_policy` (and so `seedleague.api.load_trained`) returns a
`NamedPolicy` for a checkpoint whose meta records a protocol v2 spec:

    policy = load_trained("runs/pendulum")
    policy.act({"observation": obs})               # {"action": float32 [B, 1]}, sampled
    policy.act({"observation": obs}, greedy=True)  # every head's mode
    policy.value({"observation": obs})             # [B] float32

Observations are a dict over `policy.spec.observation.arrays()` (entity masks
included), each `[B, *shape]` or unbatched `shape`; `legal_mask` a dict over the
discrete heads that declare one. Feed-forward networks only, as seedleague.artifacts.policy.
"""

from __future__ import annotations

from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from seedleague.artifacts.networks import named_network_for
from seedleague.artifacts.policy import recurrent_error
from seedleague.buckets import pad_dict, power_of_two
from seedleague.protocol.named import NamedEnvSpec
from seedleague.rl import xla_cpu
from seedleague.rl.network_config import NetworkConfig
from seedleague.rl.named_network import NamedNetwork, act, all_legal


def _act_rows(network: NamedNetwork, params: Any, observation: dict, legal: dict, rng: jax.Array, greedy: bool):
    first = jnp.ones(next(iter(observation.values())).shape[:1], bool)
    action, _, _ = act(network, params, observation, first, (), legal, rng, greedy)
    return action


def _value_rows(network: NamedNetwork, params: Any, observation: dict):
    first = jnp.ones(next(iter(observation.values())).shape[:1] + (1,), bool)
    _, value, _ = network.apply(params, {k: x[:, None] for k, x in observation.items()}, first, ())
    return value[:, 0]


_act = xla_cpu.jit_choosing_fusions(_act_rows, static_argnames=("network", "greedy"))
_value = xla_cpu.jit_choosing_fusions(_value_rows, static_argnames=("network",))


class NamedPolicy:
    """A feed-forward named policy with its params: batched, jitted queries on dicts of numpy arrays.
    `continuous` is the Gaussian of its continuous heads: "squashed" (what hosts train) or "clipped"."""

    def __init__(self, network_config: NetworkConfig, params: Any, spec: NamedEnvSpec, step: int = 0,
                 meta: Optional[dict] = None, source: str = "", seed: int = 0, continuous: str = "squashed"):
        if network_config.lstm_size:  # as Policy refuses a flat one (load_policy refuses before reading params)
            raise recurrent_error(source, network_config.lstm_size)
        self.spec = spec
        self.step = int(step)
        self.meta = dict(meta or {})
        self.source = source
        self.network_config = network_config
        self.network = named_network_for(network_config, spec, continuous)
        self.params = jax.tree.map(jnp.asarray, params)
        self._rng = jax.random.key(seed)

    def __repr__(self) -> str:
        return f"NamedPolicy({self.spec.env_name!r}, step={self.step}, source={self.source!r})"

    @property
    def model_spec(self) -> NamedEnvSpec:
        """The spec a host builds this policy's network for: its own."""
        return self.spec

    def act(self, observation: dict, legal_mask: Optional[dict] = None, greedy: bool = False) -> dict:
        """{head: [B] int32 or [B, d] float32} (no batch axis for one unbatched observation)."""
        observation, batch, single = self._batch(observation)
        size = power_of_two(batch)
        legal = all_legal(self.spec.action, (batch,))
        for name, mask in (legal_mask or {}).items():
            if name not in legal:
                raise ValueError(f"legal_mask names {name!r}, which is no discrete head with a legal mask "
                                 f"({sorted(legal)})")
            legal[name] = np.asarray(mask, bool).reshape(legal[name].shape)
        self._rng, rng = jax.random.split(self._rng)
        action = _act(self.network, self.params, pad_dict(observation, size), pad_dict(legal, size), rng, greedy)
        return {k: np.asarray(v)[0] if single else np.asarray(v)[:batch] for k, v in action.items()}

    def value(self, observation: dict) -> np.ndarray:
        """[B] float32 value estimates (a float for one unbatched observation)."""
        observation, batch, single = self._batch(observation)
        value = np.asarray(_value(self.network, self.params, pad_dict(observation, power_of_two(batch))))[:batch]
        return float(value[0]) if single else value

    def _batch(self, observation: dict) -> tuple[dict, int, bool]:
        """The observation as [B, *shape] arrays of the spec's dtypes, B, and whether it came unbatched."""
        arrays = self.spec.observation.arrays()
        if sorted(observation) != sorted(arrays):
            raise ValueError(f"observation must hold exactly {sorted(arrays)}, got {sorted(observation)}")
        key, (shape, _) = next(iter(arrays.items()))
        single = np.shape(observation[key]) == shape
        out = {}
        for name, (shape, dtype) in arrays.items():
            x = np.asarray(observation[name], dtype)
            x = x[None] if single else x
            if x.shape[1:] != shape:
                raise ValueError(f"observation {name!r} must be shaped {shape} or [B, *{shape}], got "
                                 f"{np.shape(observation[name])}")
            out[name] = x
        batches = {x.shape[0] for x in out.values()}
        if len(batches) != 1:
            raise ValueError(f"every observation tensor needs the same batch size, got {sorted(batches)}")
        return out, batches.pop(), single
