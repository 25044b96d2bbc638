"""One policy network over one observation array (the flat shape) with its params: batched, jitted queries.

    policy = Policy(network_config, params, PolicySpec("openspiel:kuhn_poker", (11,), np.float32, 2))
    probs = policy.action_probabilities(observation, legal_mask)   # [B, A]; illegal exactly 0
    action = policy.act(observation, legal_mask, greedy=True)      # [B] int

`sample_legal` is the one function that samples a legal action from a policy's probabilities: `Policy.act`
draws with it, and a `PolicyMixture` (seedleague.artifacts.mixture) acts through the member it draws.
Feed-forward networks only: a recurrent one is refused with `RecurrentPolicyError`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Union

import jax
import jax.numpy as jnp
import numpy as np

from seedleague.artifacts.networks import shared_network
from seedleague.buckets import pad, power_of_two
from seedleague.protocol.named import NamedEnvSpec, flat_spec
from seedleague.rl import xla_cpu
from seedleague.rl.networks import Network
from seedleague.rl.network_config import NetworkConfig

Rng = Union[np.random.Generator, int, None]


class RecurrentPolicyError(NotImplementedError):
    """The checkpoint's network has an LSTM core; this API answers feed-forward policies only."""


@dataclasses.dataclass(frozen=True)
class PolicySpec:
    """What a policy was trained on: the env worker's declared spaces."""

    env_name: str  # e.g. "openspiel:kuhn_poker" or "CartPole-v1"
    observation_shape: tuple[int, ...]
    observation_dtype: np.dtype
    num_actions: int

    def __post_init__(self):
        object.__setattr__(self, "observation_shape", tuple(int(d) for d in self.observation_shape))
        object.__setattr__(self, "observation_dtype", np.dtype(self.observation_dtype))
        object.__setattr__(self, "num_actions", int(self.num_actions))
        if self.num_actions < 1:
            raise ValueError(f"PolicySpec.num_actions must be >= 1, got {self.num_actions}")

    @classmethod
    def from_json(cls, data: dict) -> "PolicySpec":
        """From a checkpoint meta's `spec` entry."""
        return cls(str(data["env_name"]), data["observation_shape"], data["observation_dtype"], data["num_actions"])


def _forward_rows(network: Network, params: Any, observation: jax.Array, legal_mask: jax.Array):
    """Masked logits (illegal = -inf), legal-only probabilities and values over [B] rows."""
    first = jnp.ones((observation.shape[0], 1), bool)
    logits, value, _ = network.apply(params, observation[:, None], first, ())
    logits_t = logits[:, 0]
    masked_t = jnp.where(legal_mask, logits_t, -jnp.inf)
    probs_t = jax.nn.softmax(masked_t, axis=-1)  # exp(-inf) = 0: illegal actions get exactly 0
    return logits_t, masked_t, probs_t, value[:, 0]


_forward = xla_cpu.jit_choosing_fusions(_forward_rows, static_argnames=("network",))


def sample_legal(probs: np.ndarray, generator: np.random.Generator) -> np.ndarray:
    """One action per row of `probs` [..., A] (a policy's probabilities, illegal actions exactly 0) by inverse CDF;
    actions of probability 0 are never chosen."""
    cdf = np.cumsum(probs, axis=-1)
    u = generator.random(cdf.shape[:-1])[..., None] * cdf[..., -1:]
    above = cdf > u  # illegal actions add 0 to the cdf, so the first index above u is legal
    last_possible = probs.shape[-1] - 1 - np.argmax(probs[..., ::-1] > 0, axis=-1)  # if rounding put u at the top
    return np.where(above.any(axis=-1), np.argmax(above, axis=-1), last_possible)


def recurrent_error(source: str, lstm_size: int) -> RecurrentPolicyError:
    """The one-line refusal of a recurrent network (`source`: where it was loaded from)."""
    return RecurrentPolicyError(
        f"{source or 'this policy'} has an LSTM core (lstm_size={lstm_size}); recurrent policies need a "
        "state-carrying API (initial_state / state passing), which seedleague.api does not offer yet: "
        "evaluate it through `seedleague serve` with your env worker instead"
    )


class Policy:
    """A feed-forward policy with its params: batched, jitted queries on numpy inputs.

    Every query takes `observation` shaped `[B, *spec.observation_shape]`, or one
    unbatched observation shaped `spec.observation_shape` (the answer then has no
    batch axis), and an optional `legal_mask` `[B, A]` (or `[A]`) of bools, True
    where an action is legal; without a mask every action is legal.
    """

    def __init__(self, network_config: NetworkConfig, params: Any, spec: PolicySpec, step: int = 0,
                 meta: Optional[dict] = None, source: str = "", seed: int = 0):
        if network_config.lstm_size:
            raise recurrent_error(source, network_config.lstm_size)
        self.spec = spec
        self.step = int(step)  # learner step (policy version) of the params
        self.meta = dict(meta or {})  # the checkpoint's JSON sidecar: run counters, network, ...
        self.source = source  # where it was loaded from, for messages and reports
        self.network_config = network_config
        self.network = shared_network(network_config, spec.observation_shape, spec.observation_dtype, spec.num_actions)
        self.params = jax.tree.map(jnp.asarray, params)
        self._rng = np.random.default_rng(seed)

    def __repr__(self) -> str:
        return f"Policy({self.spec.env_name!r}, step={self.step}, source={self.source!r})"

    @property
    def model_spec(self) -> NamedEnvSpec:
        """The spec a host builds this policy's network for: one tensor "observation", one discrete head "action"
        (the flat model's, seedleague.protocol.named.flat_model), one env and seat."""
        spec = self.spec
        return flat_spec(spec.env_name, spec.observation_shape, spec.observation_dtype, spec.num_actions)

    # -- queries ------------------------------------------------------------------------------

    def logits(self, observation: np.ndarray, legal_mask: Optional[np.ndarray] = None) -> np.ndarray:
        """[B, A] float32 logits; with a mask, illegal actions are -inf."""
        raw, masked, _, _ = self._run(observation, legal_mask)
        return raw if legal_mask is None else masked

    def action_probabilities(self, observation: np.ndarray, legal_mask: Optional[np.ndarray] = None) -> np.ndarray:
        """[B, A] float32: softmax over the legal actions only; illegal actions are exactly 0."""
        return self._run(observation, legal_mask)[2]

    def value(self, observation: np.ndarray) -> np.ndarray:
        """[B] float32 value estimates (a float for one unbatched observation)."""
        value = self._run(observation, None)[3]
        return float(value) if np.ndim(value) == 0 else value

    def act(self, observation: np.ndarray, legal_mask: Optional[np.ndarray] = None, greedy: bool = False,
            rng: Rng = None) -> np.ndarray:
        """[B] int32 legal actions (an int for one unbatched observation).

        greedy: the most probable legal action (lowest index on ties); else sampled.
        rng: a numpy Generator or an int seed for the sampling; None uses the policy's
            own generator (seeded at load, so runs are reproducible).
        """
        probs = self._run(observation, legal_mask)[2]
        if greedy:
            action = np.argmax(probs, axis=-1)
        else:
            generator = self._rng if rng is None else np.random.default_rng(rng)
            action = sample_legal(probs, generator)
        action = action.astype(np.int32)
        return int(action) if action.ndim == 0 else action

    # -- input checks -------------------------------------------------------------------------

    def _run(self, observation: Any, legal_mask: Any):
        observation, single = self._check_observation(observation)
        batch = observation.shape[0]
        mask = self._check_mask(legal_mask, batch, single)
        size = power_of_two(batch)  # padded rows: zeros, every action legal (no NaN), dropped below
        outputs = _forward(self.network, self.params, pad(observation, size), pad(mask, size, True))
        outputs = [np.asarray(x)[:batch] for x in outputs]
        return [x[0] for x in outputs] if single else outputs

    def _check_observation(self, observation: Any) -> tuple[np.ndarray, bool]:
        shape, dtype = self.spec.observation_shape, self.spec.observation_dtype
        observation = np.asarray(observation)
        if observation.shape == shape:
            single, observation = True, observation[None]
        elif observation.ndim == len(shape) + 1 and observation.shape[1:] == shape:
            single = False
        else:
            raise ValueError(
                f"observation must be shaped {shape} (one) or [B, *{shape}] (a batch) for {self.spec.env_name!r}, "
                f"got {observation.shape}"
            )
        if observation.shape[0] == 0:
            raise ValueError("observation batch is empty: pass at least one row")
        if np.issubdtype(observation.dtype, np.inexact) and not np.isfinite(observation).all():
            rows = np.flatnonzero(~np.isfinite(observation.reshape(len(observation), -1)).all(axis=1))
            raise ValueError(f"observation has NaN or infinite values in row(s) {rows[:10].tolist()}")
        if observation.dtype != dtype:
            if not np.can_cast(observation.dtype, dtype, casting="same_kind"):
                raise ValueError(
                    f"observation dtype {observation.dtype} does not fit the policy's {dtype} "
                    f"(for {self.spec.env_name!r}); convert it the way the env worker does"
                )
            observation = observation.astype(dtype)
        return observation, single

    def _check_mask(self, legal_mask: Any, batch: int, single: bool) -> np.ndarray:
        num_actions = self.spec.num_actions
        if legal_mask is None:
            return np.ones((batch, num_actions), bool)
        mask = np.asarray(legal_mask)
        expected = (num_actions,) if single else (batch, num_actions)
        if mask.shape != expected:
            raise ValueError(f"legal_mask must be shaped {expected} to match the observation, got {mask.shape}")
        if mask.dtype != bool:
            if not np.isin(mask, (0, 1)).all():
                raise ValueError(f"legal_mask must be bools (or 0/1), got dtype {mask.dtype} with other values")
            mask = mask.astype(bool)
        mask = mask.reshape(batch, num_actions)
        empty = np.flatnonzero(~mask.any(axis=-1))
        if empty.size:
            raise ValueError(f"legal_mask has no legal action in row(s) {empty[:10].tolist()}: every row needs one")
        return mask
