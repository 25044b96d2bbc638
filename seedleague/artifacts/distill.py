"""One network that plays as a mixture of networks does: supervised learning on the mixture's own play.

A mixture that draws member k with weight w_k for a whole game is realization-equivalent to one behaviour policy,

    pi(a | s) = sum_k w_k rho_k(s) pi_k(a | s) / sum_k w_k rho_k(s),

rho_k(s) being member k's own reach of information state s (Heinrich, Lanctot & Silver 2015, Theorem 7). Given
states s_n and the targets pi(. | s_n) (seedleague.host.population_samples computes them from games where every
member scored every move), the network that minimises the mean cross-entropy to the targets plays pi at the states
sampled. Two ways of sampling give the same minimiser: the mixture's own games with each state's target the policy
of the member that game drew (a member's share of a state is then w_k rho_k(s) times what chance and the other
seats contribute, the same for every member), or any games that reach the states with the exact targets. NFSP's
average-policy network (Heinrich & Silver 2016) and Deep CFR's (Brown et al. 2019) are trained this way, by
supervised learning on recorded play.

    samples = Samples(observation, legal, probs)          # [N, ...], [N, A] bool, [N, A] (each row sums to 1)
    fitted = fit(network, params, samples, steps=4000)   # Fitted: params, held-out cross-entropy and entropy

A network of named tensors and heads (protocol v2) is fitted the same way, head by head: its observation is
{tensor: [N, ...]}, its legal and probs {head: [N, A]}, each head's target the mixture's marginal of that head
(the heads of one network act independently, so the loss is the sum of the heads' cross-entropies).

`fit` starts from `params` (the run's param average, whose play is close), holds out one sample in ten, and
reports on them the mean cross-entropy and the targets' own entropy: with exact targets their difference is the
mean KL from the mixture's policy to the fitted network's, 0 for a perfect fit.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax


HELD_OUT = 10  # one sample in this many is scored by `fit` and never trained on
LEARNING_RATE = 1e-3  # Adam's, cosine-annealed to 0 over the fit's progress (`fit`)
BATCH = 512


@dataclasses.dataclass(frozen=True)
class Samples:
    """States the mixture played and the policy it played there: observation [N, ...], legal [N, A] bool, probs
    [N, A] (0 off the legal actions, each row summing to 1); for a network of named tensors and heads the
    observation is {tensor: [N, ...]} and legal and probs are {head: [N, A]}, a head's probs its marginal."""

    observation: Any
    legal: Any
    probs: Any

    def __post_init__(self):
        count = len(self)
        legal, probs = _heads(self.legal), _heads(self.probs)
        shapes = lambda tree: {name: np.shape(x) for name, x in tree.items()}
        lengths = {len(x) for x in jax.tree.leaves(self.observation)}
        if lengths != {count} or shapes(legal) != shapes(probs) or any(len(x) != count for x in legal.values()):
            raise ValueError(f"samples need one legal mask and one policy per observation and head, got "
                             f"observation {jax.tree.map(np.shape, self.observation)}, legal {shapes(legal)}, "
                             f"probs {shapes(probs)}")
        if count and any((probs[h][~legal[h].astype(bool)] > 1e-6).any() for h in probs):
            raise ValueError("the recorded policies put probability on illegal actions: record the masked policy")

    def __len__(self) -> int:
        return len(jax.tree.leaves(self.observation)[0])


def _heads(tree: Any) -> dict:
    """{head: x} of a named network's per-head dict; {None: x} for a flat network's one array."""
    return tree if isinstance(tree, dict) else {None: tree}


@dataclasses.dataclass(frozen=True)
class Fitted:
    params: Any
    cross_entropy: float  # on the held-out samples, nats per sample
    target_entropy: float  # the held-out targets' own mean entropy: cross_entropy minus this is their mean KL
    samples: int  # trained on
    steps: int  # Adam steps taken: `fit`'s steps, or fewer where its max_seconds ran out first


def _logits(network: Any, params: Any, observation: Any) -> dict:
    """{head: logits [B, A]} of a batch of single states ({None: ...} for a flat network)."""
    leading = jax.tree.leaves(observation)[0].shape[0]
    first = jnp.ones((leading, 1), bool)
    if isinstance(observation, dict):
        outputs, _, _ = network.apply(params, {k: x[:, None] for k, x in observation.items()}, first, ())
        return {head: x[:, 0] for head, x in outputs.items()}
    logits, _, _ = network.apply(params, observation[:, None], first, ())
    return {None: logits[:, 0]}


def _cross_entropy(network: Any, params, observation, legal, probs):
    """The batch's mean cross-entropy to the targets, summed over the heads (which act independently)."""
    logits, legal = _logits(network, params, observation), _heads(legal)
    total = 0.0
    for head, target in _heads(probs).items():
        log_probs = jax.nn.log_softmax(jnp.where(legal[head], logits[head], -1e9), axis=-1)
        total = total + -(target * jnp.where(legal[head], log_probs, 0.0)).sum(-1).mean()
    return total


def fit(network: Any, params: Any, samples: Samples, steps: int = 4000, seed: int = 0,
        max_seconds: Optional[float] = None) -> Fitted:
    """`network`'s params (a flat Network or a NamedNetwork) fitted to `samples` by Adam on the cross-entropy, from
    `params` (see the module docstring); ValueError with fewer than 20 samples (no held-out score to trust).

    The learning rate follows a cosine from LEARNING_RATE to 0 over the fit's progress: the larger of the steps taken
    over `steps` and, with `max_seconds`, the seconds spent (compiling included) over `max_seconds`; the fit ends at
    progress 1, so a large network on a slow machine still ends annealed, within its time, after at least one step."""
    if len(samples) < 20:
        raise ValueError(f"distilling a mixture needs at least 20 recorded states, got {len(samples)}: play more "
                         "games of the mixture")
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if max_seconds is not None and not max_seconds > 0:
        raise ValueError(f"max_seconds must be > 0, got {max_seconds}")
    start = time.monotonic()
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(samples))
    cut = max(1, len(samples) // HELD_OUT)
    held, train = order[:cut], order[cut:]
    optimizer = optax.scale_by_adam()
    loss = functools.partial(_cross_entropy, network)

    @jax.jit
    def step(params, state, learning_rate, observation, legal, probs):
        value, grads = jax.value_and_grad(loss)(params, observation, legal, probs)
        direction, state = optimizer.update(grads, state, params)
        return jax.tree.map(lambda p, d: p - learning_rate * d, params, direction), state, value

    def progress(taken: int) -> float:
        by_time = (time.monotonic() - start) / max_seconds if max_seconds is not None else 0.0
        return max(taken / steps, by_time)

    params = jax.tree.map(jnp.asarray, params)
    state = optimizer.init(params)
    rows = lambda tree, index: jax.tree.map(lambda x: x[index], tree)
    observation = samples.observation
    legal = jax.tree.map(lambda x: x.astype(bool), samples.legal)
    probs = jax.tree.map(lambda x: x.astype(np.float32), samples.probs)
    taken = 0
    while taken == 0 or progress(taken) < 1.0:
        learning_rate = LEARNING_RATE * 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress(taken))))
        batch = train[rng.integers(0, len(train), BATCH)]
        params, state, _ = step(params, state, np.float32(learning_rate), rows(observation, batch),
                                rows(legal, batch), rows(probs, batch))
        taken += 1
    cross_entropy = float(loss(params, rows(observation, held), rows(legal, held), rows(probs, held)))
    entropy = sum(float(-(p * np.log(np.where(p > 0, p, 1.0))).sum(-1).mean())
                  for p in _heads(rows(probs, held)).values())
    return Fitted(params, cross_entropy, entropy, len(train), taken)
