"""Action distributions, one per action head, and their joint over a composite action.

This file owns the maths between a head's distribution parameters (what the
network outputs, [..., P] per head) and an action: sample, mode, log-probability,
entropy and KL. Pure functions of arrays:

    heads = ActionHeads(action_spec, continuous="squashed")
    params = {"move": logits [..., 5], "aim": mean_and_log_std [..., 4]}   # heads.num_params(name) each
    action = heads.sample(params, legal, rng)        # {"move": int32 [...], "aim": float32 [..., 2]}
    log_pi = heads.log_prob(params, action, legal)   # [...]: the sum over heads
    entropy = heads.entropy(params, legal)           # [...]: the sum over heads
    action = sample_legal(logits, legal_mask, rng)   # one discrete head from its logits and mask: int32 [...]

`legal` maps a discrete head's name to its bool mask [..., n]; a head missing from
it (or `legal=None`) has every action legal. The heads of one action are
independent given the state, so the joint log-probability, entropy and KL are
sums over heads.

Discrete heads are categorical over the legal actions (`seedleague.rl.losses`'
masked maths, so a single discrete head gives the flat model's numbers exactly). A
continuous head over a Box [low, high]^d is a diagonal Gaussian, either

- "squashed": u ~ N(mean, std), a = centre + half * tanh(u) (Haarnoja et al.
  2018, SAC, appendix C), with the change-of-variables log-density; or
- "clipped": a = clip(x, low, high), x ~ N(centre + half * mean, half * std),
  whose law has point masses at the bounds; its log-probability is that of the
  clipped action itself (Fujita & Maeda 2018, "Clipped Action Policy Gradient"),
  so only the action sent to the env needs storing, as for the squashed head.

Both are parameterised in units of the Box (mean 0, log_std 0 cover the Box the
same way for any bounds), by a [..., 2d] vector: mean, then log_std clipped to
[LOG_STD_MIN, LOG_STD_MAX].
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr

from seedleague.rl import losses
from seedleague.rl.named_spec import ActionSpec, ContinuousHead, DiscreteHead

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
# A squashed action within this of a bound is read as tanh(u) = +-(1 - _SQUASH_EPS) (|u| <= 7.25):
# float32 tanh rounds to exactly +-1 beyond |u| ~ 9, where atanh would be infinite.
_SQUASH_EPS = 1e-6
_HALF_LOG_2_PI = 0.5 * math.log(2.0 * math.pi)
_CONTINUOUS = ("squashed", "clipped")


def _gaussian_log_density(x: jax.Array, mean: jax.Array, log_std: jax.Array) -> jax.Array:
    """Elementwise log N(x; mean, exp(log_std)^2)."""
    return -0.5 * jnp.square((x - mean) * jnp.exp(-log_std)) - log_std - _HALF_LOG_2_PI


def _gaussian_entropy(log_std: jax.Array) -> jax.Array:
    """Elementwise entropy of N(., exp(log_std)^2): 0.5 * log(2 pi e) + log_std."""
    return log_std + _HALF_LOG_2_PI + 0.5


def _gaussian_kl(mean_p, log_std_p, mean_q, log_std_q) -> jax.Array:
    """Elementwise KL(N_p || N_q)."""
    var_ratio = jnp.exp(2.0 * (log_std_p - log_std_q))
    return 0.5 * (var_ratio + jnp.square((mean_p - mean_q) * jnp.exp(-log_std_q)) - 1.0) - (log_std_p - log_std_q)


def log_one_minus_tanh_squared(u: jax.Array) -> jax.Array:
    """log(1 - tanh(u)^2) = 2 * (log 2 - u - softplus(-2u)), finite for every finite u
    (the direct form is log(0) = -inf once tanh(u) rounds to +-1)."""
    return 2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u))


def sample_legal(logits: jax.Array, legal: jax.Array, rng: Optional[jax.Array], greedy: bool = False) -> jax.Array:
    """int32 actions [...] from logits [..., A] and a bool mask `legal` [..., A] (True where legal): drawn from
    the softmax over the legal actions with `rng`, or, greedy, the legal argmax (lowest index on ties; `rng`
    unused). An illegal action is never chosen while its row has a legal one. The one sampling step of every
    discrete policy: `Categorical.sample` and `mode` here, and seedleague.host.policy's flat forward pass."""
    masked = jnp.where(legal, logits, jnp.finfo(logits.dtype).min)
    action = jnp.argmax(masked, axis=-1) if greedy else jax.random.categorical(rng, masked)
    return action.astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class Categorical:
    """A discrete head: softmax over the legal actions of `num_params` = n logits."""

    spec: DiscreteHead

    @property
    def num_params(self) -> int:
        return self.spec.num_actions

    def _legal(self, logits: jax.Array, legal: Optional[jax.Array]) -> jax.Array:
        return jnp.ones(logits.shape, bool) if legal is None else jnp.asarray(legal, bool)

    def log_prob(self, logits, action, legal=None) -> jax.Array:
        return losses.masked_log_prob(logits, action, self._legal(logits, legal))

    def entropy(self, logits, legal=None) -> jax.Array:
        return losses.masked_entropy(logits, self._legal(logits, legal))

    def kl(self, logits, other_logits, legal=None) -> jax.Array:
        return losses.masked_kl(logits, other_logits, self._legal(logits, legal))

    def sample(self, logits, legal, rng) -> jax.Array:
        return sample_legal(logits, self._legal(logits, legal), rng)

    def mode(self, logits, legal=None) -> jax.Array:
        return sample_legal(logits, self._legal(logits, legal), None, greedy=True)


@dataclasses.dataclass(frozen=True)
class _BoxGaussian:
    """What both Gaussian heads share: the Box's centre and half-width, and the split of the params."""

    spec: ContinuousHead

    @property
    def num_params(self) -> int:
        return 2 * self.spec.size

    @property
    def centre(self) -> np.ndarray:
        return (np.asarray(self.spec.high, np.float32) + np.asarray(self.spec.low, np.float32)) / 2

    @property
    def half(self) -> np.ndarray:
        return (np.asarray(self.spec.high, np.float32) - np.asarray(self.spec.low, np.float32)) / 2

    def split(self, params: jax.Array) -> tuple[jax.Array, jax.Array]:
        """mean [..., d] and clipped log_std [..., d] from params [..., 2d]."""
        if params.shape[-1] != self.num_params:
            raise ValueError(f"continuous head {self.spec.name!r} needs [..., {self.num_params}] params "
                             f"(mean and log_std of {self.spec.size} dims), got shape {params.shape}")
        mean, log_std = jnp.split(params.astype(jnp.float32), 2, axis=-1)
        return mean, jnp.clip(log_std, LOG_STD_MIN, LOG_STD_MAX)

    def _clip(self, action: jax.Array) -> jax.Array:
        return jnp.clip(action, np.asarray(self.spec.low, np.float32), np.asarray(self.spec.high, np.float32))

    def kl(self, params, other_params, legal=None) -> jax.Array:
        """KL of the underlying Gaussians: exact for the squashed head (a bijection keeps KL), an upper bound
        for the clipped one (clipping can only lose information)."""
        return jnp.sum(_gaussian_kl(*self.split(params), *self.split(other_params)), axis=-1)


class SquashedGaussian(_BoxGaussian):
    """a = centre + half * tanh(u), u ~ N(mean, exp(log_std)^2), per dimension."""

    def pre_squash(self, action: jax.Array) -> jax.Array:
        """u = atanh(y) for y = (a - centre) / half, y clipped to +-(1 - _SQUASH_EPS)."""
        y = (jnp.asarray(action, jnp.float32) - self.centre) / self.half
        return jnp.arctanh(jnp.clip(y, -1.0 + _SQUASH_EPS, 1.0 - _SQUASH_EPS))

    def log_prob(self, params, action, legal=None) -> jax.Array:
        """log p(a) = sum_d [log N(u_d; mean_d, std_d) - log half_d - log(1 - tanh(u_d)^2)]."""
        mean, log_std = self.split(params)
        u = self.pre_squash(action)
        log_det = np.log(self.half) + log_one_minus_tanh_squared(u)
        return jnp.sum(_gaussian_log_density(u, mean, log_std) - log_det, axis=-1)

    def entropy(self, params, legal=None) -> jax.Array:
        """sum_d [H(N(mean_d, std_d)) + log half_d]: the entropy the head would have if tanh were the identity
        near the mean. The squashed law has no closed-form entropy; since |tanh'| <= 1 this is an upper bound on
        it (the gap is E[-log(1 - tanh(u)^2)], small while the mass of u stays within about +-1), and its
        gradient raises std as an entropy bonus should. KL is exact (`kl`)."""
        _, log_std = self.split(params)
        return jnp.sum(_gaussian_entropy(log_std) + np.log(self.half), axis=-1)

    def sample(self, params, legal, rng) -> jax.Array:
        mean, log_std = self.split(params)
        u = mean + jnp.exp(log_std) * jax.random.normal(rng, mean.shape)
        return self._clip(self.centre + self.half * jnp.tanh(u))

    def mode(self, params, legal=None) -> jax.Array:
        """centre + half * tanh(mean): the image of the Gaussian's mode (the squashed law's median)."""
        mean, _ = self.split(params)
        return self._clip(self.centre + self.half * jnp.tanh(mean))


class ClippedGaussian(_BoxGaussian):
    """a = clip(x, low, high), x ~ N(centre + half * mean, (half * exp(log_std))^2), per dimension."""

    def _action_units(self, params) -> tuple[jax.Array, jax.Array]:
        mean, log_std = self.split(params)
        return self.centre + self.half * mean, log_std + np.log(self.half)

    def log_prob(self, params, action, legal=None) -> jax.Array:
        """Per dimension: log P(x <= low) at a = low, log P(x >= high) at a = high, log N(a) between."""
        loc, log_scale = self._action_units(params)
        action = jnp.asarray(action, jnp.float32)
        low, high = np.asarray(self.spec.low, np.float32), np.asarray(self.spec.high, np.float32)
        inv_scale = jnp.exp(-log_scale)
        at_low = log_ndtr((low - loc) * inv_scale)
        at_high = log_ndtr((loc - high) * inv_scale)
        inside = _gaussian_log_density(action, loc, log_scale)
        return jnp.sum(jnp.where(action <= low, at_low, jnp.where(action >= high, at_high, inside)), axis=-1)

    def entropy(self, params, legal=None) -> jax.Array:
        """Entropy of the Gaussian before clipping (the clipped law mixes point masses and a density, so it has
        no entropy against one base measure); analytic."""
        _, log_scale = self._action_units(params)
        return jnp.sum(_gaussian_entropy(log_scale), axis=-1)

    def sample(self, params, legal, rng) -> jax.Array:
        loc, log_scale = self._action_units(params)
        return self._clip(loc + jnp.exp(log_scale) * jax.random.normal(rng, loc.shape))

    def mode(self, params, legal=None) -> jax.Array:
        loc, _ = self._action_units(params)
        return self._clip(loc)


Distribution = Union[Categorical, SquashedGaussian, ClippedGaussian]


def head_distribution(head: Union[DiscreteHead, ContinuousHead], continuous: str = "squashed") -> Distribution:
    """The distribution of one head spec; `continuous` picks "squashed" or "clipped" for a Box."""
    if continuous not in _CONTINUOUS:
        raise ValueError(f"continuous must be one of {_CONTINUOUS}, got {continuous!r}")
    if isinstance(head, DiscreteHead):
        return Categorical(head)
    return SquashedGaussian(head) if continuous == "squashed" else ClippedGaussian(head)


@dataclasses.dataclass(frozen=True)
class ActionHeads:
    """The joint distribution of a composite action: independent heads, so log-probabilities, entropies and
    KLs add up. Hashable (a static argument of jitted functions)."""

    spec: ActionSpec
    continuous: str = "squashed"

    def __post_init__(self):
        if self.continuous not in _CONTINUOUS:
            raise ValueError(f"ActionHeads.continuous must be one of {_CONTINUOUS}, got {self.continuous!r}")

    @property
    def distributions(self) -> dict[str, Distribution]:
        return {h.name: head_distribution(h, self.continuous) for h in self.spec.heads}

    def num_params(self, name: str) -> int:
        return self.distributions[name].num_params

    def _legal(self, legal: Optional[dict], name: str) -> Any:
        return None if legal is None else legal.get(name)

    def _sum(self, per_head: list[jax.Array]) -> jax.Array:
        total = per_head[0]
        for term in per_head[1:]:
            total = total + term
        return total

    def log_prob(self, params: dict, action: dict, legal: Optional[dict] = None) -> jax.Array:
        return self._sum([d.log_prob(params[n], action[n], self._legal(legal, n))
                          for n, d in self.distributions.items()])

    def entropy(self, params: dict, legal: Optional[dict] = None) -> jax.Array:
        return self._sum([d.entropy(params[n], self._legal(legal, n)) for n, d in self.distributions.items()])

    def kl(self, params: dict, other_params: dict, legal: Optional[dict] = None) -> jax.Array:
        return self._sum([d.kl(params[n], other_params[n], self._legal(legal, n))
                          for n, d in self.distributions.items()])

    def sample(self, params: dict, legal: Optional[dict], rng: jax.Array) -> dict:
        keys = jax.random.split(rng, len(self.spec.heads))
        return {n: d.sample(params[n], self._legal(legal, n), k)
                for (n, d), k in zip(self.distributions.items(), keys)}

    def mode(self, params: dict, legal: Optional[dict] = None) -> dict:
        return {n: d.mode(params[n], self._legal(legal, n)) for n, d in self.distributions.items()}
