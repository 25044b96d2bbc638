"""The inference side of the model: a jitted act function and the params it uses.

`InferencePolicy.act` runs one forward pass over a padded batch of agents and
samples legal actions; `act_stacked` does the same for K policies of the same
network at once (a league's opponent snapshots, params stacked by `stack_params`). A
named network (protocol v2) acts with dicts: one observation array per named tensor,
one action and one set of behaviour params per head, in every one of these passes (its league
opponents' too); `values` gives V(s) for bootstrapping.
The learner publishes new params with `publish`; the next forward pass picks them
up, and every action is tagged with the version
(learner step) of the params that chose it. Given a device (the host's
inference device, seedleague.rl.sharding), it keeps its params and key there, so
every forward pass runs on that device.
"""

from __future__ import annotations

import functools
import threading
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from seedleague.host.transfers import Transfers
from seedleague.rl.action_heads import sample_legal
from seedleague.rl.networks import Network
from seedleague.rl.named_network import NamedNetwork
from seedleague.rl.named_network import act as named_act


class Actions(NamedTuple):
    """What one forward pass returns, as numpy arrays over the padded batch."""

    action: Any  # [N] int32 (a named network: {head: [N] int32 or [N, d] float32})
    logits: Any  # [N, A] float32, before legal masking (named: the behaviour params {head: [N, P]})
    core_state: Any  # pytree of [N, ...]
    policy_version: int


def explored_logits(logits: jax.Array, legal_mask: jax.Array, explore: float) -> jax.Array:
    """Logits [N, A] of the behaviour policy (1 - explore) * pi + explore * uniform(legal actions).

    Legal actions get the log of their mixture probability (finite, since explore > 0), so a
    softmax over the legal actions gives the mixture back and the learner's importance ratios
    pi / mu correct for the exploration; illegal actions keep their raw logits (always masked).
    """
    legal = legal_mask.astype(logits.dtype)
    pi = jax.nn.softmax(jnp.where(legal_mask, logits, jnp.finfo(logits.dtype).min), axis=-1)
    mixture = (1.0 - explore) * pi + explore * legal / jnp.maximum(jnp.sum(legal, -1, keepdims=True), 1.0)
    return jnp.where(legal_mask, jnp.log(jnp.where(legal_mask, mixture, 1.0)), logits)


def _sample(network: Network | NamedNetwork, params, observation, first, core_state, legal_mask, rng,
            greedy: bool, explore: float = 0.0):
    """Actions, behaviour logits (params) and the next core state of one step of N agents. A named network
    takes and gives dicts (seedleague.rl.named_network.act) and has no exploration mixture."""
    if isinstance(network, NamedNetwork):
        return named_act(network, params, observation, first, core_state, legal_mask, rng, greedy)
    logits, _, core_state = network.apply(params, observation[:, None], first[:, None], core_state)
    logits = logits[:, 0]
    if explore:
        logits = explored_logits(logits, legal_mask, explore)
    return sample_legal(logits, legal_mask, rng, greedy), logits, core_state


# The forward passes, each `(on_device, inputs, **settings) -> (outputs, rng)` for `Transfers.call`: `on_device`
# the params (or stacked table) and key already on the device, `inputs` the batch from the host, `outputs` what
# goes back to it. `Transfers.call` jits them, with the copies of `inputs` and `outputs` in the same call.

def _act(on_device, inputs, network: Network, greedy: bool = False, explore: float = 0.0):
    params, rng = on_device
    rng, sample_rng = jax.random.split(rng)
    return _sample(network, params, *inputs, sample_rng, greedy, explore), rng


def _act_stacked(on_device, inputs, network: Network, greedy: bool = False):
    """_act for K policies in one call: the params and every input carry a leading [K] axis."""
    params, rng = on_device
    rng, sample_rng = jax.random.split(rng)
    keys = jax.random.split(sample_rng, jax.tree.leaves(inputs[0])[0].shape[0])  # K (observation: array or dict)
    sample = functools.partial(_sample, network, greedy=greedy)
    return jax.vmap(sample)(params, *inputs, keys), rng


def _sample_slots(network: Network, table, slots, observation, first, core_state, legal_mask, rng, greedy: bool):
    """_sample for the K policies at `slots` of a stacked params `table` over inputs [K, W, ...]: the K param
    trees are gathered on the device and the pass is vmapped over them, so its compile time does not grow with K
    as an unrolled loop's did, which stalled a league run's inference each time a batch first seated that many
    opponents (benchmarks/README.md, "Opponent passes that stalled a run")."""
    keys = jax.random.split(rng, slots.shape[0])
    params = jax.tree.map(lambda stacked: stacked[slots], table)
    sample = functools.partial(_sample, network, greedy=greedy)
    return jax.vmap(sample)(params, observation, first, core_state, legal_mask, keys)


def _act_table(on_device, inputs, network: Network, greedy: bool = False):
    """_act_stacked for the K policies at `slots` (the first input) of a stacked params table, gathered on the
    device."""
    table, rng = on_device
    rng, sample_rng = jax.random.split(rng)
    return _sample_slots(network, table, *inputs, sample_rng, greedy), rng


def _act_with_table(on_device, inputs, network: Network, greedy: bool = False, explore: float = 0.0,
                    learner_greedy: bool = False):
    """_act on the learner's rows and _act_table on the opponents' rows, in one call (one dispatch, one
    transfer each way): `inputs` = (slots, learner_inputs, table_inputs), `learner_inputs` = (observation,
    first, core_state, legal_mask) over [N] rows, `table_inputs` the same over [K, W]. `learner_greedy`: the
    learner's rows act greedily whatever `greedy` says of the opponents'."""
    params, table, rng = on_device
    slots, learner_inputs, table_inputs = inputs
    rng, learner_rng, table_rng = jax.random.split(rng, 3)
    learner = _sample(network, params, *learner_inputs, learner_rng, greedy or learner_greedy, explore)
    return (learner, _sample_slots(network, table, slots, *table_inputs, table_rng, greedy)), rng


def _values(on_device, inputs, network: Network | NamedNetwork):
    """V(s) [N] of one step of N agents (observation [N, ...] or a dict of them) from `core_state`; no key."""
    params, = on_device
    observation, first, core_state = inputs
    lift = lambda x: x[:, None]
    observation = jax.tree.map(lift, observation)
    _, value, _ = network.apply(params, observation, lift(first), core_state)
    return value[:, 0], ()


def stack_params(params: list[Any]) -> Any:
    """K param trees of one network as one tree with a leading [K] axis (for `act_stacked`)."""
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *params)


class InferencePolicy:
    """Holds the latest published params and runs batched forward passes."""

    def __init__(self, network: Network, params: Any, version: int, seed: int, greedy: bool = False,
                 device: Optional[jax.Device] = None, explore: float = 0.0):
        """`device`: where forward passes run (None: wherever `params` are, the default device).
        `explore`: `act` with the published params draws a uniformly random legal action with this
        probability and returns the logits of that mixture (`explored_logits`) as the behaviour's;
        an opponent's params, and `act_stacked`, never explore."""
        if not 0.0 <= explore < 1.0:
            raise ValueError(f"explore must be a probability in [0, 1), got {explore}")
        self.network = network
        self.greedy = greedy
        self.learner_greedy = False  # the published params act greedily, opponents' as `greedy` says (`read_out`)
        self.explore = float(explore)
        self.device = device
        self._lock = threading.Lock()
        self._params = params if device is None else jax.device_put(params, device)
        self._version = version
        rng = jax.random.key(seed)
        self._rng = rng if device is None else jax.device_put(rng, device)  # only the batcher thread acts, so no lock
        self.transfers = Transfers(device)  # each pass: one copy of its inputs in, one of its outputs out

    @property
    def version(self) -> int:
        return self._version

    def publish(self, params: Any, version: int) -> None:
        """Make `params` (owned by the caller, never donated later, on `device`) the acting params."""
        with self._lock:
            self._params, self._version = params, version

    def read_out(self) -> None:
        """From now on the published params act greedily and never explore; an opponent's params keep sampling
        (a best response's read-out, seedleague.host.exploit)."""
        self.learner_greedy, self.explore = True, 0.0

    def current(self) -> tuple[Any, int]:
        with self._lock:
            return self._params, self._version

    def act(self, observation: np.ndarray, first: np.ndarray, core_state: Any, legal_mask: np.ndarray,
            params: Any = None) -> Actions:
        """Sample actions with the published params, or with `params` (an opponent's; same network, on `device`)."""
        explore, greedy = self.explore, self.greedy
        if params is None:
            params, version = self.current()
            greedy = greedy or self.learner_greedy
        else:
            version, explore = self._version, 0.0
        if isinstance(self.network, NamedNetwork):  # protocol v2: dicts in and out; no exploration mixture
            explore = 0.0
        outputs, self._rng = self.transfers.call(
            _act, (params, self._rng), (observation, first, core_state, legal_mask),
            network=self.network, greedy=greedy, explore=explore)
        return Actions(*outputs, version)

    def values(self, observation: Any, first: np.ndarray, core_state: Any) -> np.ndarray:
        """V(s) [N] with the published params for one step of N agents from their `core_state` (the host bootstraps
        a truncated episode from its final observation with it)."""
        params, _ = self.current()
        return self.transfers.call(_values, (params,), (observation, first, core_state), network=self.network)[0]

    def act_table(self, table: Any, slots: np.ndarray, observation: np.ndarray, first: np.ndarray, core_state: Any,
                  legal_mask: np.ndarray) -> Actions:
        """`act_stacked` for the policies at `slots` [K] of `table` (stacked params on `device`, see
        seedleague.host.opponents): the gather happens on the device, in the same call."""
        outputs, self._rng = self.transfers.call(
            _act_table, (table, self._rng), (slots, observation, first, core_state, legal_mask),
            network=self.network, greedy=self.greedy)
        return Actions(*outputs, self._version)

    def act_with_table(self, learner_inputs: tuple, table: Any, slots: np.ndarray, table_inputs: tuple
                       ) -> tuple[Actions, Actions]:
        """`act` with the published params on `learner_inputs` and `act_table` on `table_inputs`, in one
        jitted call: a batch that seats league opponents costs one dispatch, like a self-play batch."""
        params, version = self.current()
        (learner, opponents), self._rng = self.transfers.call(
            _act_with_table, (params, table, self._rng), (slots, learner_inputs, table_inputs),
            network=self.network, greedy=self.greedy, explore=self.explore, learner_greedy=self.learner_greedy)
        return Actions(*learner, version), Actions(*opponents, self._version)

    def act_stacked(self, params: Any, observation: np.ndarray, first: np.ndarray, core_state: Any,
                    legal_mask: np.ndarray) -> Actions:
        """One forward pass for K policies of this network at once (a league's opponent snapshots):
        `params` from `stack_params` (on `device`), inputs shaped [K, G, ...], outputs [K, G, ...]."""
        outputs, self._rng = self.transfers.call(
            _act_stacked, (params, self._rng), (observation, first, core_state, legal_mask),
            network=self.network, greedy=self.greedy)
        return Actions(*outputs, self._version)
