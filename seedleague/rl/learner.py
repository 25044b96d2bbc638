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

import dataclasses
import functools
import math
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from seedleague.rl import losses, sharding, named_losses, xla_cpu
from seedleague.rl.networks import Network
from seedleague.rl.named_network import NamedNetwork
from seedleague.rl.named_spec import is_v1_shaped
from seedleague.rl.types import NamedUnroll, Unroll

_LOSSES = ("vtrace", "ppo", "mmd")


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
    """Loss and optimiser settings for one learner.

    Which loss: "vtrace" with one Adam step per batch for the asynchronous,
    high-throughput setting (many envs, cheap env steps, a learner that should
    never hold the actors up): V-trace corrects the policy lag of replayed,
    several-updates-old data, and each batch costs one gradient step. "ppo" with
    epochs x minibatches, fixed_targets and a FIFO replay at one sample per insert
    when env steps are the cost (a slow simulator, a real engine): each batch is
    fresh (lag of a few updates at most, the replay's rate limiter holds the actors
    while the learner trains) and is reused for several Adam steps inside one
    update. On CartPole-v1 the second needs a fraction of the first's env steps
    (benchmarks/README.md, "Time to solve CartPole-v1").

    loss: "vtrace" (IMPALA actor-critic), "ppo" (clipped surrogate with
        V-trace advantages) or "mmd" (magnetic mirror descent: PPO's surrogate
        plus an entropy bonus and kl_cost * KL(pi || the policy that acted));
        see seedleague.rl.losses.
    epochs, minibatches: each update passes `epochs` times over the batch, in
        `minibatches` shuffled parts of whole unrolls, one Adam step per part
        (PPO's sample reuse; 1 and 1: one step on the whole batch). The batch size
        must be a multiple of `minibatches`. Advantages are recomputed for every
        part with the current value function unless fixed_targets. The policy
        version still counts updates (one per batch); the learning-rate anneal
        counts updates too.
    normalize_advantages: PPO and MMD normalise advantages over each (mini)batch.
    fixed_targets: PPO and MMD compute the advantages and value targets once per
        update, from the params the update starts from, and hold them over its
        epochs, as the standard implementations do (Schulman et al. 2017; OpenAI
        baselines ppo2 and CleanRL compute GAE once per rollout; Huang et al. 2022,
        "The 37 implementation details of PPO"). False: every minibatch recomputes
        them with the current value function.
    value_clip_epsilon: when > 0 (needs fixed_targets), PPO's clipped value loss
        around the values the targets were computed with (baselines ppo2, CleanRL
        clip_vloss; `seedleague.rl.losses.clipped_value_loss`). 0: plain squared error.
    reward_scale: rewards are multiplied by this before the loss, so values and returns are
        learnt in its units (the game presets set it from the return bound a worker's spec
        declares, `seedleague.presets.scale_for_bound`); the console and episode stats keep the env's units.
    kl_cost: MMD's proximal weight 1 / eta on KL(pi || mu) (loss "mmd" only).
    lookahead_interval, lookahead_rate: Lookahead (Zhang et al. 2019) over updates, as Lookahead-minmax uses it
        against the rotation of simultaneous gradient play in zero-sum games (Chavdarova et al., ICLR 2021):
        the learner keeps slow params; every lookahead_interval updates they step lookahead_rate of the way
        to the params the updates reached, and the params restart from there (the optimiser's state kept).
        A cycle of the iterates inside the interval is averaged away rather than followed. 0: off.
    lookahead_average: the slow params step towards the mean of the params over the interval's updates instead
        of the last of them; with lookahead_rate 1 every interval restarts at its average iterate, as restarted
        averaged primal-dual methods do for last-iterate convergence in bilinear saddle problems (Applegate,
        Hinder, Lu & Lubin, "Faster first-order primal-dual methods for linear programming using restarts and
        sharpness", Math. Programming 2023): over a whole turn of a rotation the average is its centre, while
        the last iterate is anywhere on the circle.
    kl_follows_entropy: the proximal weight at each update is kl_cost x entropy_cost / alpha (alpha the
        annealed entropy cost then), so MMD's step eta stays proportional to alpha as alpha anneals: MMD's
        linear convergence to the regularised game's equilibrium needs eta <= alpha / L^2 (Sokota et al.
        2023, Theorem 3.4), and a step held fixed while alpha falls leaves that bound. Needs an entropy cost
        that stays above 0 (entropy_cost_final > 0 with an anneal).
    learning_rate, adam_eps: Adam (Kingma & Ba 2015). The default 2e-3 suits one
        step per batch (no PPO epochs); with several epochs use less (PPO's usual
        3e-4 to 1e-3), and about 3e-4 for Atari-sized conv networks. eps 1e-5
        rather than 1e-8 keeps steps bounded when gradients are tiny.
    adam_b1: Adam's first-moment decay (its momentum). 0.9 is the usual choice for a
        fixed objective; in a game, where each player's gradient turns with the other's
        policy, positive momentum spirals simultaneous play away from the equilibrium
        (Gidel et al., "Negative momentum for improved game dynamics", AISTATS 2019), so
        self-play's iterates circle instead of settling; 0 (RMSProp's step) removes it.
    optimism: > 0 makes the step optimistic (Daskalakis, Ilyas, Syrgkanis & Zeng,
        "Training GANs with optimism", ICLR 2018): u_t = -r_t - optimism * (r_t - r_{t-1}),
        r_t Adam's normalised step; it anticipates the turn of the other player's
        gradient, which gives last-iterate convergence in bilinear games.
    max_grad_norm: clip the global gradient norm to this (0.5 as in OpenAI
        baselines' and CleanRL's PPO); it bounds the step on outlier batches.
        None: no clipping (Adam alone scales the steps).
    discount: gamma.
    lambda_: trace-cutting lambda of V-trace (c_i = lambda * min(1, rho_i)); with
        on-policy data the advantages are then GAE(lambda). 0.95 trades a little
        bias for much lower variance (Schulman et al. 2016).
    entropy_cost, baseline_cost: weights of the entropy bonus and value loss.
    clip_rho_threshold, clip_pg_rho_threshold: V-trace's rho-bar and the pg
        advantage's ratio clip (1.0 as in IMPALA).
    ppo_clip_epsilon: PPO's ratio clip (used only with loss="ppo").
    anneal_steps, learning_rate_final, entropy_cost_final: when anneal_steps > 0,
        the learning rate and the entropy cost move linearly from their initial
        values to the *_final ones (None: stay constant) over that many updates,
        then stay there.
    entropy_decay_steps: when > 0, the entropy cost follows the update count n instead
        of the anneal: entropy_cost * sqrt(n0 / (n0 + n)) with n0 = entropy_decay_steps,
        never below entropy_cost_final (0 when None). Converging to the quantal-response
        equilibrium at temperature alpha takes on the order of 1 / alpha^2 updates (MMD's
        linear rate, contraction 1 / (1 + eta * alpha) per step, with a step eta that must
        shrink with alpha to stay stable; benchmarks/qre_floor.py measures it), so alpha
        falling as 1 / sqrt(n) keeps it as low as the updates made so far can follow:
        lower on a faster machine or a longer budget, higher on a loaded one.
    anneal_seconds: when > 0, the anneal follows the learner's trained seconds
        (counted across --resume) instead of its updates, so a run annealed over
        its time budget ends annealed on a fast machine and a slow one alike.
    average_tail: when > 0, keep the param average (as average_from) over the
        last this fraction of the anneal, whichever kind. In self-play on zero-sum games a large entropy cost keeps
        the policies from collapsing early (the entropy-regularised game has a
        quantal-response equilibrium that gradient play approaches instead of
        cycling, Sokota et al. 2023); annealing it lowers that equilibrium's
        distance from a Nash equilibrium.
    magnet_cost, magnet_rate: when magnet_cost > 0, the loss adds
        magnet_cost * KL(pi(.|s) || rho(.|s)) over legal actions, where rho is a
        "magnet" policy: a copy of the params that follows the learner's as an
        exponential moving average, magnet <- magnet + magnet_rate * (params -
        magnet) after every update (magnet_rate 0: the initial params, a near-
        uniform policy, like an entropy bonus). magnet_interval N > 0 instead
        replaces the magnet with the params after every N updates: R-NaD's outer
        loop (Perolat et al. 2022), a proximal-point iteration whose stages each
        converge to the equilibrium of the game regularised towards the last
        stage's policy, and whose sequence of stages approaches a Nash
        equilibrium with the regulariser held fixed. magnet_rate > 0 alone moves the
        magnet a little after every update instead; that trailing magnet gives the
        regularised game no fixed point to converge to, and did worse than an
        annealed entropy cost on Leduc (benchmarks/README.md). Both together: a
        target network follows the params at magnet_rate and replaces the magnet
        every magnet_interval updates, as R-NaD's reference code does. For MMD itself use
        loss "mmd" (its proximal term) with the entropy cost as the uniform magnet.
    magnet_in_returns: also take magnet_cost * KL(pi || magnet) at each next
        state from the rewards (R-NaD's reward transform for the learner's own
        states, `seedleague.rl.losses.magnet_rewards`), so returns and values are
        those of the game regularised towards the magnet; with PPO and MMD's
        normalised advantages the cost is scaled by the advantages' spread.
    entropy_in_returns: also put the (annealed) entropy cost into every step's
        reward, r + entropy_cost * gamma * H(pi(.|s')), so returns and values are
        those of the entropy-regularised game (soft returns; see
        `seedleague.rl.losses.soft_rewards`).
    neurd_bound: None for the softmax policy gradient; a logit bound (R-NaD uses
        2) for NeuRD's policy term instead (`seedleague.rl.losses.neurd_policy_loss`,
        loss "vtrace" only).
    average_from: when set, the learner also keeps the running mean of its params
        over every update from this step on (Polyak-Ruppert tail averaging):
        `state.average.params`, saved with every checkpoint and loadable with
        `seedleague.api.load_policy(..., average=True)`. Self-play by policy gradient
        in a zero-sum game does not settle on an equilibrium; its iterates circle and
        jitter around one, and their mean is nearer it than any one of them (Leduc
        numbers in benchmarks/README.md). The params that act and learn are
        unchanged; the average is an output.
    """

    loss: str = "vtrace"
    learning_rate: float = 2e-3
    adam_eps: float = 1e-5
    adam_b1: float = 0.9
    optimism: float = 0.0
    max_grad_norm: Optional[float] = 0.5
    discount: float = 0.99
    lambda_: float = 0.95
    entropy_cost: float = 0.01
    baseline_cost: float = 0.5
    clip_rho_threshold: float = 1.0
    clip_pg_rho_threshold: float = 1.0
    ppo_clip_epsilon: float = 0.2
    anneal_steps: int = 0
    learning_rate_final: Optional[float] = None
    entropy_cost_final: Optional[float] = None
    entropy_decay_steps: int = 0  # > 0: alpha = entropy_cost * sqrt(n0 / (n0 + updates)) instead of the anneal
    magnet_cost: float = 0.0  # weight of KL(pi || magnet) in the loss (0: no magnet)
    magnet_rate: float = 0.0  # rate per update of the moving average the magnet follows (or, with an interval, is replaced by)
    magnet_interval: int = 0  # replace the magnet with the params every this many updates (R-NaD's outer loop)
    magnet_in_returns: bool = False  # also take the magnet's KL at each next state from the rewards (R-NaD)
    average_from: Optional[int] = None
    entropy_in_returns: bool = False
    neurd_bound: Optional[float] = None
    anneal_seconds: float = 0.0
    average_tail: float = 0.0
    epochs: int = 1
    minibatches: int = 1
    normalize_advantages: bool = True
    kl_cost: float = 0.0
    kl_follows_entropy: bool = False  # kl_cost x entropy_cost / alpha: MMD's step eta = 1 / kl_cost shrinks with alpha
    lookahead_interval: int = 0  # > 0: Lookahead's k, in updates: the params move to slow + rate * (params - slow)
    lookahead_rate: float = 0.5  # Lookahead's alpha (the slow params' step towards the fast ones)
    lookahead_average: bool = False  # step towards the interval's mean params, not its last (rate 1: restart there)
    fixed_targets: bool = False
    value_clip_epsilon: float = 0.0
    reward_scale: float = 1.0

    @property
    def replaces_magnet_by_average(self) -> bool:
        """Whether the magnet is replaced, every magnet_interval updates, by a moving average of the params
        (R-NaD's target network) rather than by the params themselves."""
        return self.magnet_cost > 0 and self.magnet_interval > 0 and self.magnet_rate > 0

    @property
    def keeps_average(self) -> bool:
        """Whether the train state carries a param average (average_from or average_tail set)."""
        return self.average_from is not None or self.average_tail > 0

    @property
    def steps_per_update(self) -> int:
        """Adam steps per update: epochs x minibatches."""
        return self.epochs * self.minibatches

    def __post_init__(self):
        problems = []
        if not self.anneal_seconds >= 0:
            problems.append(f"anneal_seconds must be >= 0 (0: anneal over anneal_steps updates), got {self.anneal_seconds}")
        if not 0 <= self.average_tail < 1:
            problems.append(f"average_tail must be a fraction of the anneal in [0, 1), got {self.average_tail}")
        for name in ("epochs", "minibatches"):
            if not getattr(self, name) >= 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.loss == "mmd" and not self.kl_cost > 0:
            problems.append(f"loss 'mmd' needs kl_cost > 0 (its proximal weight 1 / eta), got {self.kl_cost}")
        if self.kl_follows_entropy and not (self.entropy_cost > 0 and (self.entropy_cost_final is None
                                                                       or self.entropy_cost_final > 0)):
            problems.append("kl_follows_entropy divides kl_cost by the annealed entropy cost, which must stay above 0: "
                            f"got entropy_cost {self.entropy_cost}, entropy_cost_final {self.entropy_cost_final}")
        if self.lookahead_interval < 0 or not 0 < self.lookahead_rate <= 1:
            problems.append(f"lookahead_interval must be >= 0 (0: off) and lookahead_rate in (0, 1], got "
                            f"{self.lookahead_interval} and {self.lookahead_rate}")
        if self.lookahead_average and not self.lookahead_interval > 0:
            problems.append("lookahead_average averages over Lookahead's interval: set --learner.lookahead-interval "
                            "> 0 with it")
        if self.kl_cost and self.loss != "mmd":
            problems.append(f"kl_cost applies to loss 'mmd' only; loss is {self.loss!r} (set --learner.loss mmd)")
        if self.anneal_steps < 0:
            problems.append(f"anneal_steps must be >= 0, got {self.anneal_steps}")
        if self.entropy_decay_steps < 0:
            problems.append(f"entropy_decay_steps must be >= 0 (0: the entropy cost follows the anneal), "
                            f"got {self.entropy_decay_steps}")
        if self.learning_rate_final is not None and not self.learning_rate_final > 0:
            problems.append(f"learning_rate_final must be > 0 (or None), got {self.learning_rate_final}")
        if self.entropy_cost_final is not None and not self.entropy_cost_final >= 0:
            problems.append(f"entropy_cost_final must be >= 0 (or None), got {self.entropy_cost_final}")
        if self.loss not in _LOSSES:
            problems.append(f"loss must be one of {_LOSSES}, got {self.loss!r}")
        for name in ("learning_rate", "adam_eps", "clip_rho_threshold", "clip_pg_rho_threshold", "ppo_clip_epsilon"):
            if not getattr(self, name) > 0:
                problems.append(f"{name} must be > 0, got {getattr(self, name)}")
        if not (math.isfinite(self.reward_scale) and self.reward_scale > 0):
            problems.append(f"reward_scale must be a finite number > 0 (1: rewards as the env gives them), "
                            f"got {self.reward_scale}")
        if not 0 <= self.adam_b1 < 1:
            problems.append(f"adam_b1 must be in [0, 1) (0: no momentum), got {self.adam_b1}")
        if not self.optimism >= 0:
            problems.append(f"optimism must be >= 0 (0: Adam's plain step), got {self.optimism}")
        if self.max_grad_norm is not None and not self.max_grad_norm > 0:
            problems.append(f"max_grad_norm must be > 0 (or None: no clipping), got {self.max_grad_norm}")
        for name in ("discount", "lambda_"):
            if not 0 <= getattr(self, name) <= 1:
                problems.append(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.neurd_bound is not None and not self.neurd_bound > 0:
            problems.append(f"neurd_bound must be > 0 (or None: the softmax policy gradient), got {self.neurd_bound}")
        if self.neurd_bound is not None and self.loss != "vtrace":
            problems.append(f"neurd_bound replaces the policy term of the vtrace loss; loss is {self.loss!r}")
        if self.average_from is not None and not self.average_from >= 0:
            problems.append(f"average_from must be a learner step >= 0 (or None), got {self.average_from}")
        if self.magnet_interval < 0:
            problems.append(f"magnet_interval must be >= 0 (0: the magnet is never replaced), got {self.magnet_interval}")
        if self.magnet_in_returns and not self.magnet_cost > 0:
            problems.append("magnet_in_returns puts the magnet's KL into the rewards: set --learner.magnet-cost > 0 "
                            "as well (it weighs the KL)")
        if not 0 <= self.magnet_rate <= 1:
            problems.append(f"magnet_rate must be in [0, 1], got {self.magnet_rate}")
        for name in ("entropy_cost", "baseline_cost", "magnet_cost", "kl_cost"):
            if not getattr(self, name) >= 0:
                problems.append(f"{name} must be >= 0, got {getattr(self, name)}")
        problems += self._ppo_problems()
        if problems:
            raise ValueError("bad LearnerConfig: " + "; ".join(problems))

    def _ppo_problems(self) -> list[str]:
        problems = []
        if not self.value_clip_epsilon >= 0:
            problems.append(f"value_clip_epsilon must be >= 0 (0: no value clipping), got {self.value_clip_epsilon}")
        if self.value_clip_epsilon > 0 and not self.fixed_targets:
            problems.append("value_clip_epsilon clips around the values the targets were computed with: set "
                            "--learner.fixed-targets true as well")
        if self.fixed_targets and self.loss not in ("ppo", "mmd"):
            problems.append(f"fixed_targets applies to losses 'ppo' and 'mmd'; loss is {self.loss!r} (with "
                            "--learner.loss vtrace set --learner.fixed-targets false too: the classic-control "
                            "and image presets set it)")
        return problems


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
    """v1's loss inputs for an `Unroll`; the joint (summed over heads) ones for a `NamedUnroll`. Rewards
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
            and not is_v1_shaped(network.observation_spec, network.heads.spec)):
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
