"""The learner update: one optimiser step on a batch of unrolls.

This file owns the training state (params, optimiser state, policy version) and
the jitted `update(state, batch) -> (state, metrics)`. It holds no state between
calls and does no I/O; the host owns the loop, the replay and the params it
serves for inference:

    network = make_network(NetworkConfig(), obs_shape, obs_dtype, num_actions)
    config = LearnerConfig(loss="vtrace")
    state = init_train_state(config, network, jax.random.key(0))
    update = make_update(config, network)
    state, metrics = update(state, batch)   # `state` passed in is donated: use the new one

`make_sharded_update(config, network, mesh)` is the same update, data-parallel
over the devices of a mesh (seedleague.rl.sharding).

A named network (named observations, several action heads;
seedleague.rl.named_network) trains the same way on a `NamedUnroll`:
the losses see the joint log-probabilities, entropies and KLs of its heads
(seedleague.rl.named_losses).

`state.step` is the policy version: the number of updates applied to the params.
Actors tag their unrolls with the version that acted, so `policy_lag` in the
metrics is how many updates old the data was (Cleanba, Huang et al. 2023).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from seedleague.rl import losses, sharding, named_losses, xla_cpu
from seedleague.rl.networks import Network
from seedleague.rl.named_network import NamedNetwork
from seedleague.rl.named_spec import is_flat_shaped
from seedleague.rl.types import NamedUnroll, Unroll
from seedleague.rl.learner_config import LearnerConfig

class ParamAverage(NamedTuple):
    """The mean of the params over `count` updates (see LearnerConfig.average_from)."""

    params: Any
    count: jax.Array  # int32 scalar: updates averaged so far; 0 means `params` are still the initial ones


class TrainState(NamedTuple):
    """Everything an update reads and writes."""

    params: Any
    opt_state: optax.OptState
    step: jax.Array  # int32 scalar: updates applied so far = the params' policy version
    rng: jax.Array  # key carried for stochastic losses; the current losses do not use it
    magnet: Any = ()  # the magnet policy's params when LearnerConfig.magnet_cost > 0, else ()
    magnet_target: Any = ()  # the moving average the magnet is replaced by (magnet_interval with magnet_rate), else ()
    average: Any = ()  # a ParamAverage when LearnerConfig.average_from is set, else ()


def anneal_progress(config: LearnerConfig, step: Any, seconds: Any = 0.0) -> jax.Array:
    """How far the anneal has come, in [0, 1]: trained seconds over `anneal_seconds` when that is
    set, else updates over `anneal_steps`; 0 without an anneal."""
    if config.anneal_seconds > 0:
        return jnp.clip(jnp.asarray(seconds, jnp.float32) / config.anneal_seconds, 0.0, 1.0)
    if config.anneal_steps > 0:
        return jnp.clip(jnp.asarray(step, jnp.float32) / config.anneal_steps, 0.0, 1.0)
    return jnp.zeros((), jnp.float32)


class Anneal(NamedTuple):
    """Where an update stands in its schedules: computed once per update (`schedule`), read by every loss term."""

    progress: jax.Array  # the anneal's, in [0, 1] (`anneal_progress`)
    entropy_cost: jax.Array  # alpha at this update
    learning_rate: jax.Array  # the optimiser's step size at this update
    kl_cost: Any = 0.0  # MMD's proximal weight at this update


class Scales(NamedTuple):
    """Multipliers on the configured entropy cost (its schedule, initial and final), learning rate (likewise)
    and kl_cost, passed to the update as traced float32 scalars, so they change between updates without a
    recompile: population-based training's settings (seedleague.league.pbt). All 1: the configured values."""

    entropy_cost: Any = 1.0
    learning_rate: Any = 1.0
    kl_cost: Any = 1.0


def schedule(config: LearnerConfig, step: Any, seconds: Any = 0.0, scales: Scales = Scales()) -> Anneal:
    """The anneal's progress, the entropy cost, the learning rate and kl_cost at update `step` (and trained
    `seconds`), each times its `scales` multiplier."""
    progress = anneal_progress(config, step, seconds)
    learning_rate = annealed(config.learning_rate, config.learning_rate_final, progress) * scales.learning_rate
    kl_cost = config.kl_cost * scales.kl_cost
    if config.entropy_decay_steps > 0:
        n0 = jnp.float32(config.entropy_decay_steps)
        alpha = config.entropy_cost * jnp.sqrt(n0 / (n0 + jnp.asarray(step, jnp.float32)))
        alpha = jnp.maximum(alpha, config.entropy_cost_final or 0.0)
    else:
        alpha = annealed(config.entropy_cost, config.entropy_cost_final, progress)
    if config.kl_follows_entropy:
        kl_cost = kl_cost * config.entropy_cost / alpha
    return Anneal(progress, alpha * scales.entropy_cost, learning_rate, kl_cost)


def annealed(initial: float, final: Optional[float], progress: jax.Array) -> jax.Array:
    """`initial` moved linearly to `final` by `progress` in [0, 1] (None: constant)."""
    if final is None:
        return jnp.asarray(initial, jnp.float32)
    return initial + (final - initial) * progress


def _optimizer(config: LearnerConfig) -> optax.GradientTransformation:
    """Adam (optimistic with `optimism` > 0) at unit rate; `_gradient_step` scales its steps by the annealed
    learning rate."""
    clip = optax.identity() if config.max_grad_norm is None else optax.clip_by_global_norm(config.max_grad_norm)
    if config.optimism > 0:  # its state also keeps the last step
        return optax.chain(clip, optax.optimistic_adam(1.0, optimism=config.optimism, b1=config.adam_b1,
                                                       eps=config.adam_eps, nesterov=False))
    return optax.chain(clip, optax.adam(1.0, b1=config.adam_b1, eps=config.adam_eps))  # same state either way: a run resumes with the other


def init_train_state(config: LearnerConfig, network: Network, rng: jax.Array) -> TrainState:
    """Fresh params from `network.init`, a fresh optimiser state, step 0."""
    init_rng, rng = jax.random.split(rng)
    params = network.init(init_rng)
    return TrainState(
        params=params,
        opt_state=_optimizer_state(config, params),
        step=jnp.zeros((), jnp.int32),
        rng=rng,
        magnet=jax.tree.map(jnp.copy, params) if config.magnet_cost > 0 else (),
        magnet_target=jax.tree.map(jnp.copy, params) if config.replaces_magnet_by_average else (),
        average=(ParamAverage(jax.tree.map(jnp.copy, params), jnp.zeros((), jnp.int32))
                 if config.keeps_average else ()),
    )


def _averaged(config: LearnerConfig, average: Any, step: jax.Array, progress: jax.Array, params: Any) -> Any:
    """`average` with the params of update `step` (the result of it) taken into the running mean."""
    if not config.keeps_average:
        return average
    take = jnp.zeros((), bool)
    if config.average_from is not None:
        take = take | (step >= config.average_from)
    if config.average_tail > 0:
        take = take | (progress >= 1.0 - config.average_tail)
    count = average.count + take.astype(jnp.int32)
    weight = jnp.where(take, 1.0 / jnp.maximum(count, 1), 0.0)
    return ParamAverage(_toward(average.params, params, weight), count)


def _toward(mean: Any, params: Any, weight: jax.Array) -> Any:
    """`mean` moved `weight` of the way to `params`, in the mean's dtypes: a running mean's step, 1 / count."""
    return jax.tree.map(lambda m, p: m + (weight * (p - m)).astype(m.dtype), mean, params)


def _loss_inputs(network: Network | NamedNetwork, outputs: Any, values: jax.Array,
                 batch: Unroll | NamedUnroll, config: LearnerConfig) -> losses.LossInputs:
    """The flat loss inputs for an `Unroll`; the joint (summed over heads) ones for a `NamedUnroll`. Rewards
    are multiplied by `config.reward_scale` first, so values and returns are learnt in its units."""
    if config.reward_scale != 1.0:
        batch = batch._replace(reward=batch.reward * config.reward_scale)
    if isinstance(batch, NamedUnroll):
        return named_losses.named_loss_inputs(network.heads, outputs, values, batch, config.discount)
    return losses.loss_inputs(outputs, values, batch, config.discount)


def _magnet_kl_rows(network: Network | NamedNetwork, outputs: Any, magnet_outputs: Any,
                    batch: Unroll | NamedUnroll) -> jax.Array:
    """KL(pi || magnet) at every row of the unroll, [B, T+1] (no gradient into the magnet)."""
    magnet_outputs = jax.lax.stop_gradient(magnet_outputs)
    if isinstance(batch, NamedUnroll):
        return network.heads.kl(outputs, magnet_outputs, batch.legal_mask)
    return losses.masked_kl(outputs, magnet_outputs, batch.legal_mask)


def _in_returns(config: LearnerConfig, inputs: losses.LossInputs, kl_rows: jax.Array,
                anneal: Anneal) -> losses.LossInputs:
    """`inputs` with the magnet's KL at each next state in the rewards (`losses.magnet_rewards`).

    PPO and MMD weigh the loss's own KL term against advantages normalised to unit spread, so the
    returns' KL is weighed against the same spread: magnet_cost times the standard deviation of the
    batch's advantages (taken before the KL enters them), which keeps the two terms in one ratio
    whatever the game's reward scale."""
    scale = 1.0
    if config.normalize_advantages and config.loss in ("ppo", "mmd"):
        plain = losses.ppo_targets(inputs, lambda_=config.lambda_, clip_rho_threshold=config.clip_rho_threshold,
                                   entropy_cost=anneal.entropy_cost,
                                   entropy_in_returns=config.entropy_in_returns)
        scale = jax.lax.stop_gradient(jnp.std(plain.advantage))
    return losses.magnet_rewards(inputs, config.magnet_cost * scale, kl_rows[:, 1:])


def _magnet_terms(config: LearnerConfig, network: Network | NamedNetwork, outputs: Any, magnet: Any,
                  batch: Unroll | NamedUnroll, inputs: losses.LossInputs,
                  anneal: Anneal) -> tuple[losses.LossInputs, jax.Array]:
    """(inputs, mean KL(pi || magnet) over rows 0..T-1): the inputs carry the magnet's KL in their
    rewards when `magnet_in_returns`."""
    magnet_outputs, _, _ = network.apply(magnet, batch.observation, batch.first, batch.core_state)
    kl_rows = _magnet_kl_rows(network, outputs, magnet_outputs, batch)
    if config.magnet_in_returns:
        inputs = _in_returns(config, inputs, kl_rows, anneal)
    return inputs, jnp.mean(kl_rows[:, :-1])


def _fixed_targets(config: LearnerConfig, network: Network | NamedNetwork, params: Any,
                   batch: Unroll | NamedUnroll, anneal: Anneal,
                   magnet: Any = ()) -> Optional[losses.PPOTargets]:
    """PPO's advantages and value targets under `params` (the update's starting ones) when
    `fixed_targets` holds them over the epochs; None: each minibatch recomputes its own."""
    if not config.fixed_targets:
        return None
    logits, values, _ = network.apply(params, batch.observation, batch.first, batch.core_state)
    inputs = _loss_inputs(network, logits, values, batch, config)
    if config.magnet_in_returns:
        inputs, _ = _magnet_terms(config, network, logits, magnet, batch, inputs, anneal)
    return losses.ppo_targets(inputs, lambda_=config.lambda_, clip_rho_threshold=config.clip_rho_threshold,
                              entropy_cost=anneal.entropy_cost,
                              entropy_in_returns=config.entropy_in_returns)


def _loss(config: LearnerConfig, network: Network | NamedNetwork, params: Any, batch: Unroll | NamedUnroll,
          anneal: Anneal, magnet: Any, targets: Optional[losses.PPOTargets] = None):
    """Scalar loss and its metrics for one batch under `params`, at `anneal`."""
    logits, values, _ = network.apply(params, batch.observation, batch.first, batch.core_state)
    inputs = _loss_inputs(network, logits, values, batch, config)
    if config.magnet_cost > 0:
        inputs, magnet_kl = _magnet_terms(config, network, logits, magnet, batch, inputs, anneal)
    common = dict(
        lambda_=config.lambda_,
        clip_rho_threshold=config.clip_rho_threshold,
        entropy_cost=anneal.entropy_cost,
        baseline_cost=config.baseline_cost,
        entropy_in_returns=config.entropy_in_returns,
    )
    ppo = dict(clip_epsilon=config.ppo_clip_epsilon, normalize_advantages=config.normalize_advantages,
               targets=targets, value_clip_epsilon=config.value_clip_epsilon)
    if config.loss == "ppo":
        loss, metrics = losses.ppo_loss(inputs, **ppo, **common)
    elif config.loss == "mmd":
        loss, metrics = losses.mmd_loss(inputs, kl_cost=anneal.kl_cost, **ppo, **common)
    else:
        loss, metrics = losses.vtrace_loss(inputs, clip_pg_rho_threshold=config.clip_pg_rho_threshold,
                                           neurd_bound=config.neurd_bound, **common)
    if config.magnet_cost > 0:
        loss, metrics = loss + config.magnet_cost * magnet_kl, dict(metrics, magnet_kl=magnet_kl)
    return loss, metrics


def _gradient_step(config: LearnerConfig, network: Network, state: TrainState, anneal: Anneal, params: Any,
                   opt_state: Any, batch: Unroll,
                   targets: Optional[losses.PPOTargets] = None) -> tuple[Any, Any, dict[str, jax.Array]]:
    """One Adam step on `batch` from (params, opt_state): the new pair and the step's metrics."""
    grad_fn = jax.value_and_grad(functools.partial(_loss, config, network), has_aux=True)
    (loss, metrics), grads = grad_fn(params, batch, anneal, state.magnet, targets)
    updates, opt_state = _optimizer(config).update(grads, opt_state, params)
    params = optax.apply_updates(params, jax.tree.map(lambda u: (anneal.learning_rate * u).astype(u.dtype), updates))
    return params, opt_state, dict(metrics, total_loss=loss, grad_norm=optax.tree.norm(grads))


def _minibatch_rows(config: LearnerConfig, batch_size: int, rng: jax.Array) -> jax.Array:
    """[epochs * minibatches, batch_size // minibatches] unroll indices: each epoch a fresh shuffle."""
    if batch_size % config.minibatches:
        raise ValueError(f"a batch of {batch_size} unrolls does not split into {config.minibatches} minibatches; "
                         "make the batch size a multiple of --learner.minibatches")
    keys = jax.random.split(rng, config.epochs)
    order = jax.vmap(lambda key: jax.random.permutation(key, batch_size))(keys)
    return order.reshape(config.steps_per_update, batch_size // config.minibatches)


def _epochs(config: LearnerConfig, network: Network, state: TrainState, anneal: Anneal, batch: Unroll,
            targets: Optional[losses.PPOTargets]) -> tuple[Any, Any, jax.Array, dict[str, jax.Array]]:
    """`epochs` passes over `batch` (and its fixed `targets`, if any) in minibatches:
    (params, opt_state, rng, mean metrics over the steps)."""
    rng, shuffle = jax.random.split(state.rng)
    rows = _minibatch_rows(config, batch.first.shape[0], shuffle)

    def step(carry, ids):
        params, opt_state = carry
        minibatch, minibatch_targets = jax.tree.map(lambda x: x[ids], (batch, targets))
        params, opt_state, metrics = _gradient_step(config, network, state, anneal, params, opt_state, minibatch,
                                                    minibatch_targets)
        return (params, opt_state), metrics

    unroll = jax.default_backend() == "cpu" and _convolves(network, state.params, batch)
    (params, opt_state), metrics = jax.lax.scan(step, (state.params, state.opt_state), rows, unroll=unroll)
    return params, opt_state, rng, jax.tree.map(jnp.mean, metrics)


def _convolves(network: Network | NamedNetwork, params: Any, batch: Unroll | NamedUnroll) -> bool:
    """Whether the network's forward pass has a convolution. XLA:CPU runs a convolution inside a loop
    several times slower than the same convolution outside one (benchmarks/README.md, "Convolutions inside the
    minibatch loop"), so on CPU the minibatch steps of such a network are unrolled, at the cost of a longer
    compile."""
    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype),
                          (params, batch.observation, batch.first, batch.core_state))
    return xla_cpu.convolves(network.apply, *shapes)


def _moved_magnet(config: LearnerConfig, state: TrainState, params: Any) -> tuple[Any, Any]:
    """(magnet, magnet_target) after an update that produced `params`.

    magnet_rate alone: the magnet follows the params as a moving average. magnet_interval alone: the
    magnet is replaced by the params every that many updates. Both: R-NaD's outer loop as its reference
    code runs it (Perolat et al. 2022): a target network follows the params at magnet_rate, and the
    magnet is replaced by the target every magnet_interval updates, so a stage's noise in the params
    does not become the next stage's regulariser."""
    magnet, target = state.magnet, state.magnet_target
    if not config.magnet_cost > 0:
        return magnet, target
    if config.replaces_magnet_by_average:
        target = optax.incremental_update(params, target, config.magnet_rate)
    elif config.magnet_rate > 0:
        magnet = optax.incremental_update(params, magnet, config.magnet_rate)
    if config.magnet_interval > 0:
        replace = (state.step + 1) % config.magnet_interval == 0
        source = target if config.replaces_magnet_by_average else params
        magnet = jax.tree.map(lambda p, m: jnp.where(replace, p, m), source, magnet)
    return magnet, target


class LookaheadState(NamedTuple):
    """The optimiser state with Lookahead on: Adam's, the slow params (kept there, not in TrainState, so a
    checkpoint of a run without Lookahead has the shape it always had) and, with lookahead_average, the mean of
    the params over the interval's updates so far (else ())."""

    inner: Any
    slow: Any
    mean: Any = ()


def _optimizer_state(config: LearnerConfig, params: Any) -> Any:
    """A fresh optimiser state for `params`: Adam's, wrapped with the slow params when Lookahead is on."""
    inner = _optimizer(config).init(params)
    if not config.lookahead_interval > 0:
        return inner
    mean = jax.tree.map(jnp.copy, params) if config.lookahead_average else ()
    return LookaheadState(inner, jax.tree.map(jnp.copy, params), mean)


def _lookahead(config: LearnerConfig, step: jax.Array, params: Any, opt_state: Any,
               lookahead: LookaheadState) -> tuple[Any, Any]:
    """(params, opt_state) after update `step` produced `params` and Adam's `opt_state`: every lookahead_interval
    updates the params and the slow ones both become slow + lookahead_rate * (target - slow), the target being
    the params (or, with lookahead_average, their mean over the interval's updates); between those, the params
    as they are and the slow ones kept."""
    if not config.lookahead_interval > 0:
        return params, opt_state
    slow, mean = lookahead.slow, lookahead.mean
    position = step % config.lookahead_interval  # 0 at the interval's first update
    if config.lookahead_average:
        mean = _toward(mean, params, 1.0 / (position + 1).astype(jnp.float32))
    sync = position == config.lookahead_interval - 1
    stepped = optax.incremental_update(mean if config.lookahead_average else params, slow, config.lookahead_rate)
    slow = jax.tree.map(lambda new, old: jnp.where(sync, new, old), stepped, slow)
    params = jax.tree.map(lambda new, fast: jnp.where(sync, new, fast), stepped, params)
    return params, LookaheadState(opt_state, slow, mean)


def _update(config: LearnerConfig, network: Network, state: TrainState, batch: Unroll,
            seconds: Any = 0.0, scales: Scales = Scales()) -> tuple[TrainState, dict[str, jax.Array]]:
    """One update: a gradient step, or `epochs` passes of minibatch steps; see `make_update`."""
    anneal = schedule(config, state.step, seconds, scales)
    lookahead = state.opt_state if config.lookahead_interval > 0 else None
    if config.lookahead_interval > 0:
        state = state._replace(opt_state=state.opt_state.inner)
    targets = _fixed_targets(config, network, state.params, batch, anneal, state.magnet)
    if config.steps_per_update == 1:
        params, opt_state, metrics = _gradient_step(config, network, state, anneal, state.params,
                                                    state.opt_state, batch, targets)
        rng = state.rng
    else:
        params, opt_state, rng, metrics = _epochs(config, network, state, anneal, batch, targets)
    magnet, target = _moved_magnet(config, state, params)
    params, opt_state = _lookahead(config, state.step, params, opt_state, lookahead)
    behaviour_version = batch.policy_version[:, :-1].astype(jnp.float32)
    metrics = dict(metrics, policy_lag=jnp.mean(state.step.astype(jnp.float32) - behaviour_version),
                   anneal_progress=anneal.progress, entropy_cost=anneal.entropy_cost)
    if config.loss == "mmd":
        metrics["kl_cost"] = jnp.asarray(anneal.kl_cost, jnp.float32)
    new_state = TrainState(params=params, opt_state=opt_state, step=state.step + 1, rng=rng, magnet=magnet,
                           magnet_target=target,
                           average=_averaged(config, state.average, state.step, anneal.progress, params))
    return new_state, metrics


def make_update(
    config: LearnerConfig, network: Network
) -> Callable[[TrainState, Unroll], tuple[TrainState, dict[str, jax.Array]]]:
    """The jitted `update(state, batch, seconds=0.0) -> (state, metrics)`.

    `seconds`: the learner's trained seconds so far, which the anneal follows when
    `LearnerConfig.anneal_seconds` is set (otherwise unused). `update(state, batch, seconds, scales)`:
    `Scales` multipliers on the entropy cost, learning rate and kl_cost (traced: a new value is no recompile).

    Recomputes logits and values over the whole unroll from `batch.core_state`,
    takes one Adam step on the configured loss (global-norm clipped), or
    `epochs` x `minibatches` of them, and increments `step` once. The input state is donated: its buffers, `state.params`
    included, are deleted and reused for the new state. Keep only the returned
    state, and serve inference from the returned params (or a copy), never from
    a state already passed to `update`. Metrics are float32 scalars:
    total_loss, policy_loss, value_loss, entropy, grad_norm (before clipping),
    importance_ratio (mean pi/mu over rows 0..T-1), policy_lag (mean over rows
    0..T-1 of step - batch.policy_version, before the increment), for PPO and
    MMD clip_fraction, for MMD kl; with several steps per update, each is the
    mean over the steps.
    """
    _check_network(config, network)
    return _jit_update(config, network)


def _check_network(config: LearnerConfig, network: Network | NamedNetwork) -> None:
    """Refuse settings the network's action spec cannot support."""
    if (config.neurd_bound is not None and isinstance(network, NamedNetwork)
            and not is_flat_shaped(network.observation_spec, network.heads.spec)):
        raise ValueError("neurd_bound (NeuRD) is defined for a single discrete action head; this network has heads "
                         f"{[h.name for h in network.heads.spec.heads]}: leave neurd_bound unset")


def _jit_update(config: LearnerConfig, network: Network | NamedNetwork, **jit_settings: Any) -> Callable:
    """`_update` jitted as `update(state, batch, seconds=0.0)`: seconds is always passed as a float32 scalar, so
    both forms share one compile (and a sharded jit sees all three inputs); a `seconds` already on the device
    (the host's learner loop copies it there) is passed as it is. Called on its own with a network that
    convolves, it compiles with XLA:CPU's library fusions off (seedleague.rl.xla_cpu); otherwise, and inside a
    caller's jit (which alone may set compile options), it compiles as XLA chooses."""
    update_fn = functools.partial(_update, config, network)
    default = jax.jit(update_fn, donate_argnums=0, **jit_settings)
    top_level: Optional[Callable] = None  # chosen at the first call (the network is known here, its inputs not)

    def update(state: TrainState, batch: Unroll, seconds: Any = 0.0,
               scales: Scales = Scales()) -> tuple[TrainState, dict[str, jax.Array]]:
        nonlocal top_level
        if top_level is None and not isinstance(state.step, jax.core.Tracer):
            options = xla_cpu.library_fusions_off() if _convolves(network, state.params, batch) else {}
            top_level = jax.jit(update_fn, donate_argnums=0, compiler_options=options, **jit_settings) if options \
                else default
        jitted = default if isinstance(state.step, jax.core.Tracer) else top_level
        scales = Scales(*(s if isinstance(s, jax.Array) else np.float32(s) for s in scales))
        return jitted(state, batch, seconds if isinstance(seconds, jax.Array) else np.float32(seconds), scales)

    return update


def make_sharded_update(
    config: LearnerConfig, network: Network, mesh: jax.sharding.Mesh
) -> Callable[[TrainState, Unroll], tuple[TrainState, dict[str, jax.Array]]]:
    """`make_update`, data-parallel over `mesh` (one axis; see seedleague.rl.sharding).

    The state is replicated on every device of the mesh and the batch's leading
    axis is split over them; the result is the single-device update on the whole
    (global) batch: every loss is a mean over all B x T steps, so XLA averages the
    per-device gradients with an all-reduce, and global statistics (PPO's
    advantage normalisation, the gradient norm) span the global batch. The batch
    size must be a multiple of `mesh.size`. Metrics come back replicated. On a
    one-device mesh this is `make_update`.
    """
    if mesh.size == 1:
        return make_update(config, network)
    _check_network(config, network)
    state_sharding, batch_sharding = sharding.replicated(mesh), sharding.batch_sharded(mesh)
    return _jit_update(config, network, in_shardings=(state_sharding, batch_sharding, state_sharding,
                                                         state_sharding),
                       out_shardings=(state_sharding, state_sharding))
