"""Encoders for named observation tensors, chosen by each tensor's spec.

This file owns the rule that picks an encoder from a `TensorSpec` and the
encoders themselves (flax.linen modules over [N, *shape] inputs, N = batch x time):

- a masked tensor, an entity list [E, F] with a bool mask [E]: `EntityEncoder`,
  one masked self-attention layer over the entities and a masked mean and max pool
  (permutation-invariant; masked-out slots cannot change the output);
- a rank-3 tensor, an image: `ImageEncoder`, convolutions over [H, W, C] or
  [C, H, W] (channels first when the first side is smaller than both others);
- anything else: flattened as it is (a vector), for the torso's dense layers.

    kind = encoder_kind(tensor_spec)       # "entities", "image" or "vector"
    features = ObservationEncoders(observation_spec, hidden_sizes=(64, 64))(observation)  # [N, F]
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from seedleague.rl.networks import (_BOARD_CONVS, _MIN_VALID_SIDE, _NATURE_CONVS, _dense_layers,
                                    _hidden_init, _to_float)
from seedleague.rl.named_spec import ObservationSpec, TensorSpec, mask_key


def encoder_kind(tensor: TensorSpec) -> str:
    """"entities" for a masked entity list, "image" for rank 3, "vector" otherwise (flattened)."""
    if tensor.masked:
        return "entities"
    return "image" if len(tensor.shape) == 3 else "vector"


def image_layout(shape: tuple[int, ...]) -> str:
    """"CHW" when the first side is smaller than both others (OpenSpiel's board planes, [3, 6, 7]), else
    "HWC" (frames, [84, 84, 4])."""
    return "CHW" if shape[0] < min(shape[1], shape[2]) else "HWC"


class ImageEncoder(nn.Module):
    """Convolutions over [N, H, W, C] (or [N, C, H, W] with layout "CHW"), flattened to [N, F].

    Frames whose smaller side fits them get the Nature CNN's strided convolutions
    (Mnih et al. 2015); smaller ones, boards, get 3x3 stride-1 convolutions that keep
    every square's features (as the flat network's board torso).
    """

    layout: str

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        if self.layout == "CHW":
            x = jnp.transpose(x, (0, 2, 3, 1))
        if min(x.shape[1:3]) >= _MIN_VALID_SIDE:
            for features, kernel, stride in _NATURE_CONVS:
                x = nn.relu(nn.Conv(features, (kernel, kernel), (stride, stride), padding="VALID",
                                    kernel_init=_hidden_init())(x))
        else:
            for features, kernel in _BOARD_CONVS:
                x = nn.relu(nn.Conv(features, (kernel, kernel), padding="SAME", kernel_init=_hidden_init())(x))
        return x.reshape((x.shape[0], -1))


class EntityEncoder(nn.Module):
    """A set of entities [N, E, F] with a mask [N, E] to [N, 2 * features].

    Each entity is embedded (relu dense), one multi-head self-attention layer lets
    it read the valid entities (residual, Vaswani et al. 2017; AlphaStar's entity
    encoder is a deeper version), a relu dense layer follows, and the valid
    entities are pooled by mean and by max (Deep Sets, Zaheer et al. 2017).
    Masked-out slots are zeroed on the way in, are no attention key, and are left
    out of both pools, so nothing in them reaches the output; with no valid entity
    the output is 0.
    """

    features: int = 64
    num_heads: int = 2

    @nn.compact
    def __call__(self, entities: jax.Array, mask: jax.Array) -> jax.Array:
        mask = mask.astype(bool)
        x = jnp.where(mask[..., None], entities, 0.0)
        x = nn.relu(nn.Dense(self.features, kernel_init=_hidden_init())(x))
        attend = mask[:, None, None, :]  # [N, heads, queries, keys]: only valid keys
        x = x + nn.MultiHeadDotProductAttention(num_heads=self.num_heads, qkv_features=self.features)(
            x, x, mask=attend)
        x = nn.relu(nn.Dense(self.features, kernel_init=_hidden_init())(x))  # >= 0, so 0 is a neutral max
        valid = mask[..., None].astype(x.dtype)
        count = jnp.maximum(jnp.sum(valid, axis=1), 1.0)
        mean = jnp.sum(x * valid, axis=1) / count
        peak = jnp.max(x * valid, axis=1)
        return jnp.concatenate([mean, peak], axis=-1)


class ObservationEncoders(nn.Module):
    """One encoder per named tensor, their features concatenated in spec order, then dense layers.

    The dense layers are tanh when every tensor is a vector (as the flat network's MLP
    torso) and relu otherwise (as its conv torsos).
    """

    observation_spec: ObservationSpec
    hidden_sizes: tuple[int, ...]
    entity_features: int = 64
    entity_heads: int = 2
    squash_inputs: bool = False  # NetworkConfig.squash_inputs, for every tensor but uint8 frames

    @nn.compact
    def __call__(self, observation: dict) -> jax.Array:
        parts = []
        for tensor in self.observation_spec.tensors:
            x = _to_float(observation[tensor.name], self.squash_inputs)
            kind = encoder_kind(tensor)
            if kind == "entities":
                encoder = EntityEncoder(self.entity_features, self.entity_heads, name=f"entities_{tensor.name}")
                parts.append(encoder(x, observation[mask_key(tensor.name)]))
            elif kind == "image":
                parts.append(ImageEncoder(image_layout(tensor.shape), name=f"image_{tensor.name}")(x))
            else:
                parts.append(x.reshape((x.shape[0], -1)))
        all_vectors = all(encoder_kind(t) == "vector" for t in self.observation_spec.tensors)
        return _dense_layers(jnp.concatenate(parts, axis=-1), self.hidden_sizes,
                             jnp.tanh if all_vectors else nn.relu)
