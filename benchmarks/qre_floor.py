"""How close to a Nash equilibrium an entropy-regularised learner can get on a game: the exact
exploitability of the game's logit agent quantal-response equilibrium (QRE) at given temperatures.

    python -m benchmarks.qre_floor leduc_poker --temperatures 0.64,0.32,0.16,0.08
    python -m benchmarks.qre_floor leduc_poker --run-dir RUN     # also: the run's own final temperature

A policy-gradient learner with an entropy bonus (the game recipe's MMD with its uniform magnet,
Sokota et al., ICLR 2023) converges at best to the agent QRE of its temperature tau: at every
information state s, pi(s) = softmax(Q_pi(s, .) / tau), with Q_pi the expected return of each
action given s. That equilibrium's exploitability is a floor under the run's last iterate, however
long it trains at that temperature.

The recipe weighs its entropy cost alpha against advantages normalised to unit spread, so in the
game's reward units its temperature is tau = alpha * spread, the spread of the advantages. The value
loss the learner logs, 0.5 * mean((return - V)^2), gives it as sqrt(2 * value_loss). `--run-dir`
reads the median value loss of the run's last tenth (progress.jsonl) and its final alpha
(checkpoint meta), and solves the QRE at that temperature as well.

The QRE is found by MMD's behavioural-form update with a uniform magnet (Sokota et al. 2023, the
closed form of their eq. 7 with the negative entropy as mirror map), from the uniform policy:

    pi_{t+1}(s)  propto  (pi_t(s) * exp(eta * q_t(s, .))) ** (1 / (1 + eta * tau))

with q_t the exact action values (OpenSpiel's TreeWalkCalculator). Its rest point is the agent QRE.
A step eta too large for the temperature oscillates instead of converging (behavioural-form MMD's
guarantee needs a small step); the solve stops when the fixed-point residual
max_s |softmax(q_t(s) / tau) - pi_t(s)| is below `tol`, and the table reports the residual, so an
answer that did not converge says so (then lower --step-size: Kuhn converges at 0.1 down to tau 0.05,
Leduc needs about 0.02 at tau 0.16). Measurements: benchmarks/README.md ("the temperature's
floor").
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from typing import Optional, Sequence

import numpy as np
import pyspiel
from open_spiel.python import policy as openspiel_policy
from open_spiel.python.algorithms import action_value
from open_spiel.python.algorithms import exploitability as openspiel_exploitability



@dataclasses.dataclass(frozen=True)
class Equilibrium:
    temperature: float
    policy: openspiel_policy.TabularPolicy
    residual: float  # max over information states of |softmax(Q / tau) - pi|: 0 at the exact QRE
    steps: int


def _masked_softmax(logits: np.ndarray, legal: np.ndarray) -> np.ndarray:
    z = np.where(legal, logits, -np.inf)
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z) * legal
    return p / p.sum(axis=1, keepdims=True)


def mmd_step(probs: np.ndarray, q: np.ndarray, legal: np.ndarray, step_size: float, temperature: float) -> np.ndarray:
    """One behavioural-form MMD step with a uniform magnet at every row (information state)."""
    log_probs = np.log(np.where(legal, np.maximum(probs, 1e-300), 1.0))
    return _masked_softmax((log_probs + step_size * q) / (1.0 + step_size * temperature), legal)


def agent_qre(game: pyspiel.Game, temperature: float, step_size: float = 0.05, tol: float = 1e-4,
              max_steps: int = 5000) -> Equilibrium:
    """The logit agent QRE of a two-player game at `temperature` (reward units), by MMD from uniform."""
    if temperature <= 0:
        raise ValueError(f"the temperature must be > 0 (the QRE at 0 is a Nash equilibrium: solve that with CFR), "
                         f"got {temperature}")
    calculator = action_value.TreeWalkCalculator(game)
    tabular = openspiel_policy.TabularPolicy(game)
    legal = tabular.legal_actions_mask.astype(bool)
    residual, step = np.inf, 0
    for step in range(1, max_steps + 1):
        q = np.asarray(calculator(policies=[tabular, tabular], tabular_policy=tabular).action_values)
        residual = float(np.abs(_masked_softmax(q / temperature, legal) - tabular.action_probability_array).max())
        if residual < tol:
            break
        tabular.action_probability_array = mmd_step(tabular.action_probability_array, q, legal, step_size, temperature)
    return Equilibrium(temperature, tabular, residual, step)


def temperature(learner, value_losses: Sequence[float]) -> tuple[float, float, float]:
    """(alpha, advantage spread, tau = alpha * spread) of a learner config at the end of its anneal, the spread
    from the median of the newest tenth of its logged value losses (1 where the entropy cost is in reward units)."""
    alpha = learner.entropy_cost if learner.entropy_cost_final is None else learner.entropy_cost_final
    if not value_losses:
        raise ValueError("no value loss was logged: the run made no learner update yet")
    spread = 1.0  # V-trace and unnormalised advantages: the entropy cost is already in reward units
    if learner.normalize_advantages and learner.loss in ("ppo", "mmd"):
        spread = float(np.sqrt(2.0 * statistics.median(value_losses[-max(1, len(value_losses) // 10):])))
    return alpha, spread, alpha * spread


def run_temperature(run_dir: str) -> tuple[float, float, float]:
    """`temperature` of a run: its newest checkpoint's learner config and the value losses in progress.jsonl."""
    from seedleague import checkpoint_meta, progress

    learner = checkpoint_meta.read(f"{run_dir}/checkpoints").learner
    if learner is None:
        raise ValueError(f"{run_dir}'s checkpoint predates recording its learner config: give --temperatures only")
    return temperature(learner, [t["value_loss"] for t in progress.read(run_dir) if t.get("value_loss") is not None])


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("game", help="an OpenSpiel game, e.g. leduc_poker or 'kuhn_poker(players=2)'")
    parser.add_argument("--temperatures", default="0.64,0.32,0.16,0.08", help="comma-separated, in reward units")
    parser.add_argument("--run-dir", help="also solve at this run's final temperature (alpha x advantage spread)")
    parser.add_argument("--step-size", type=float, default=0.05, help="MMD's eta (lower it where a residual stays high)")
    parser.add_argument("--tol", type=float, default=1e-4)
    parser.add_argument("--max-steps", type=int, default=5000)
    args = parser.parse_args(argv)
    from seedleague.games.openspiel import load_game

    game = load_game(args.game)
    temperatures = [float(t) for t in args.temperatures.split(",") if t]
    if args.run_dir:
        try:
            alpha, spread, tau = run_temperature(args.run_dir)
        except ValueError as error:
            parser.error(f"{args.run_dir}: {error}")
        print(f"{args.run_dir}: final alpha {alpha:g} x advantage spread {spread:.3f} = temperature {tau:.4f}")
        temperatures.append(round(tau, 4))
    print(f"{game}, step size {args.step_size}")
    print("| temperature | exploitability of the QRE | residual | steps |")
    print("|---:|---:|---:|---:|")
    for temperature in temperatures:
        qre = agent_qre(game, temperature, args.step_size, args.tol, args.max_steps)
        score = openspiel_exploitability.exploitability(game, qre.policy)
        print(f"| {temperature:g} | {score:.4f} | {qre.residual:.1e} | {qre.steps} |", flush=True)


if __name__ == "__main__":
    main()
