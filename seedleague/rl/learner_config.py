"""LearnerConfig: the learner's loss and optimiser settings, checked when made.

Kept apart from seedleague.rl.learner, which owns the jitted update, so that building the command line (`seedleague
train --help`, a refused flag) and reading a checkpoint's metadata need no jax.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

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
    step_control, kl_target: "schedule" (the default): the learning rate is the anneal's; "kl" (loss "mmd" only):
        the anneal's rate times a factor steered after every update so that its measured KL to the acting policy
        follows kl_target * (alpha / alpha_0) ** 2, MMD's step shrinking with alpha (seedleague.rl.kl_step);
        kl_target 0: the median KL of the run's first updates.
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
    step_control: str = "schedule"  # "kl": the rate steered by each update's measured KL (seedleague.rl.kl_step)
    kl_target: float = 0.0  # with step_control "kl": the KL an update is steered to at alpha_0 (0: calibrated)
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
        if self.step_control not in ("schedule", "kl"):
            problems.append(f"step_control must be 'schedule' or 'kl', got {self.step_control!r}")
        if self.step_control == "kl" and not (self.loss == "mmd" and self.entropy_cost > 0):
            problems.append("step_control 'kl' steers the rate by the KL that loss 'mmd' measures, towards a target "
                            "that follows its entropy cost: it needs --learner.loss mmd and --learner.entropy-cost > 0")
        if not self.kl_target >= 0 or (self.kl_target and self.step_control != "kl"):
            problems.append(f"kl_target must be >= 0 (0: calibrated from the first updates) and needs "
                            f"--learner.step-control kl, got {self.kl_target} with {self.step_control!r}")
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
