"""Where a run's policy is off the quantal-response equilibrium (QRE) of its temperature, and how far a
share of training episodes against a fixed opponent moves that equilibrium.

    python -m benchmarks.iterate_gap leduc_poker --run-dir RUN                      # where the policy is off
    python -m benchmarks.iterate_gap leduc_poker --run-dir RUN --opponent-share 0.1  # the share's pull
    python -m benchmarks.iterate_gap leduc_poker --run-dir RUN --snapshots 40        # how the iterates move

The recipe's iterates can at best settle on the agent QRE of their final temperature
(benchmarks/qre_floor.py). This measures what stands between a run's policy and that floor, two ways:

- **Where.** The information states are ranked by how often the policy's own self-play reaches them
  (chance and both seats). For each fraction f, two hybrids are scored exactly: the policy with its
  rarest f of states replaced by the QRE, and the QRE with the policy kept on only those states. A
  policy wrong where play happens improves in the first little and is fixed by the second; one wrong
  only where play seldom goes, the other way round.
- **The opponent share.** With a share of episodes against a fixed opponent sigma (the recipe's PSRO
  draws), the data's action values at an information state s are those of self-play and of play
  against sigma, each weighted by how often its opponent (and chance) let the learner reach s:

      q(s, a) = ((1 - share) c_pi(s) q_pi(s, a) + share c_sigma(s) q_sigma(s, a))
                / ((1 - share) c_pi(s) + share c_sigma(s))

  with c the counterfactual reach probabilities. The same MMD step as qre_floor's, started from the
  self-play QRE, then follows where that pulls the policy. Run it with --opponent-share 0 as the
  control: a step too large for the temperature drifts with no opponent at all.
- **How the iterates move.** With --snapshots N, the newest N league snapshots of the run's main
  player, oldest first: each one's exploitability, its visit-weighted distance to the QRE, and its
  visit-weighted distance to the snapshot before it (visits of the newer one's self-play). Iterates
  that have settled away from the QRE (lag, bias) barely move from one snapshot to the next; iterates
  that fluctuate (gradient noise, cycling) move about as far between snapshots as they are from the
  QRE. Then the snapshots' mixture: each information state's action probabilities averaged over the
  snapshots weighted by the acting player's own reach probability under each (the behaviour policy
  that plays like the uniform mixture of the snapshots, Kuhn's theorem), scored the same way. Its
  distance to the QRE is the offset of the centre the snapshots scatter around, which no average
  of them removes.

"Where" examines the run's final params and its param average. With --opponent-share the fixed
opponent is the final params (usually the most exploitable of the run's candidates, so the pull is an
upper bound on that of its PSRO draws, which follow the snapshots' Nash mixture). Measurements:
benchmarks/README.md ("Where the iterates go wrong").
"""

from __future__ import annotations

import argparse
import os
from typing import Iterator, Optional, Sequence

import numpy as np
import pyspiel
from open_spiel.python import policy as openspiel_policy
from open_spiel.python.algorithms import action_value
from open_spiel.python.algorithms import exploitability as openspiel_exploitability

from benchmarks.qre_floor import agent_qre, mmd_step, run_temperature

FRACTIONS = (0.25, 0.5, 0.75, 0.9)


def self_play_visits(game: pyspiel.Game, tabular: openspiel_policy.TabularPolicy, probs: np.ndarray) -> np.ndarray:
    """[S] probability that self-play with `probs` [S, A] (both seats) reaches each information state."""
    visits = np.zeros(len(probs))

    def walk(state: pyspiel.State, reach: float) -> None:
        if state.is_terminal() or reach == 0.0:
            return
        if state.is_chance_node():
            for action, p in state.chance_outcomes():
                walk(state.child(action), reach * p)
            return
        index = tabular.state_index(state)
        visits[index] += reach
        for action in state.legal_actions():
            walk(state.child(action), reach * probs[index, action])

    walk(game.new_initial_state(), 1.0)
    return visits


def visit_weighted_distance(visits: np.ndarray, probs: np.ndarray, qre: np.ndarray) -> float:
    """Total-variation distance between `probs` and `qre` [S, A], averaged over states weighted by `visits`."""
    return float(np.sum(visits * 0.5 * np.abs(probs - qre).sum(axis=1)) / visits.sum())


def _exploitability(game: pyspiel.Game, tabular: openspiel_policy.TabularPolicy, probs: np.ndarray) -> float:
    tabular.action_probability_array = probs
    return float(openspiel_exploitability.exploitability(game, tabular))


def split_by_visits(game: pyspiel.Game, tabular: openspiel_policy.TabularPolicy, probs: np.ndarray, qre: np.ndarray,
                    fractions: Sequence[float] = FRACTIONS) -> list[dict]:
    """Per fraction f: the share of visits its rarest f of states get, and the exploitability of `probs` with
    those states set to `qre` ("rare_to_qre") and of `qre` with `probs` kept on them only ("rest_to_qre").
    `tabular` is scratch: its table holds the last hybrid scored afterwards."""
    visits = self_play_visits(game, tabular, probs)
    order = np.argsort(visits, kind="stable")
    rows = []
    for fraction in fractions:
        rare = order[: int(fraction * len(order))]
        rare_to_qre, rest_to_qre = probs.copy(), qre.copy()
        rare_to_qre[rare], rest_to_qre[rare] = qre[rare], probs[rare]
        rows.append(dict(fraction=fraction, visit_share=float(visits[rare].sum() / visits.sum()),
                         rare_to_qre=_exploitability(game, tabular, rare_to_qre),
                         rest_to_qre=_exploitability(game, tabular, rest_to_qre)))
    return rows


def snapshot_moves(game: pyspiel.Game, tabular: openspiel_policy.TabularPolicy, snapshots: Sequence[np.ndarray],
                   qre: np.ndarray) -> list[dict]:
    """Per snapshot [S, A] in order: its exploitability, its visit-weighted distance to `qre` and to the
    snapshot before it (None for the first), both weighted by its own self-play visits."""
    rows, previous = [], None
    for probs in snapshots:
        visits = self_play_visits(game, tabular, probs)
        rows.append(dict(exploitability=_exploitability(game, tabular, probs),
                         to_qre=visit_weighted_distance(visits, probs, qre),
                         moved=None if previous is None else visit_weighted_distance(visits, probs, previous)))
        previous = probs
    return rows


def own_reach(game: pyspiel.Game, tabular: openspiel_policy.TabularPolicy, probs: np.ndarray) -> np.ndarray:
    """[S] the acting player's own reach probability of each information state under `probs`: the product of
    that player's action probabilities on the way there (well defined with perfect recall)."""
    reach = np.zeros(len(probs))

    def walk(state: pyspiel.State, mine: tuple[float, ...]) -> None:
        if state.is_terminal():
            return
        if state.is_chance_node():
            for action, _ in state.chance_outcomes():
                walk(state.child(action), mine)
            return
        index, player = tabular.state_index(state), state.current_player()
        reach[index] = mine[player]
        for action in state.legal_actions():
            walk(state.child(action), mine[:player] + (mine[player] * probs[index, action],) + mine[player + 1:])

    walk(game.new_initial_state(), (1.0,) * game.num_players())
    return reach


def snapshot_mixture(game: pyspiel.Game, tabular: openspiel_policy.TabularPolicy,
                     snapshots: Sequence[np.ndarray]) -> np.ndarray:
    """[S, A] the behaviour policy of the uniform mixture of `snapshots`: each state's rows averaged with
    the acting player's own reach under each snapshot as weights (the plain mean where no snapshot reaches it)."""
    weights = np.array([own_reach(game, tabular, probs) for probs in snapshots])  # [K, S]
    weighted = np.einsum("ks,ksa->sa", weights, np.asarray(snapshots))
    total = weights.sum(axis=0)[:, None]
    return np.where(total > 0, weighted / np.where(total > 0, total, 1.0), np.mean(snapshots, axis=0))


def mixed_action_values(calculator: action_value.TreeWalkCalculator, pi: openspiel_policy.TabularPolicy,
                        sigma: openspiel_policy.TabularPolicy, seats: np.ndarray, share: float) -> np.ndarray:
    """[S, A] action values of `pi`'s data when `share` of its episodes meet `sigma` (module docstring);
    `seats` [S] is the acting seat of each information state."""
    own = calculator(policies=[pi, pi], tabular_policy=pi)
    as_seat = [calculator(policies=[pi, sigma], tabular_policy=pi), calculator(policies=[sigma, pi], tabular_policy=pi)]
    seat_one = (seats == 1)[:, None]
    q_sigma = np.where(seat_one, as_seat[1].action_values, as_seat[0].action_values)
    c_sigma = np.where(seats == 1, as_seat[1].counterfactual_reach_probs, as_seat[0].counterfactual_reach_probs)
    w_pi = (1.0 - share) * np.asarray(own.counterfactual_reach_probs)
    w_sigma = share * np.asarray(c_sigma)
    total = w_pi + w_sigma
    mixed = (w_pi[:, None] * np.asarray(own.action_values) + w_sigma[:, None] * q_sigma) / np.where(total > 0, total, 1.0)[:, None]
    return np.where((total > 0)[:, None], mixed, np.asarray(own.action_values))


def opponent_share_solve(game: pyspiel.Game, temperature: float, share: float, sigma: openspiel_policy.TabularPolicy,
                         start: np.ndarray, step_size: float, steps: int, every: int) -> Iterator[tuple[int, float]]:
    """(step, exploitability) every `every` MMD steps from `start` with the action values of
    `mixed_action_values`, up to `steps`."""
    calculator = action_value.TreeWalkCalculator(game)
    pi = openspiel_policy.TabularPolicy(game)
    legal = pi.legal_actions_mask.astype(bool)
    seats = np.array([state.current_player() for state in pi.states])
    pi.action_probability_array = start.copy()
    for step in range(steps + 1):
        if step % every == 0:
            yield step, float(openspiel_exploitability.exploitability(game, pi))
        if step < steps:
            q = mixed_action_values(calculator, pi, sigma, seats, share)
            pi.action_probability_array = mmd_step(pi.action_probability_array, q, legal, step_size, temperature)


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("game", help="the run's OpenSpiel game, e.g. leduc_poker")
    parser.add_argument("--run-dir", required=True, help="a run of that game (its final params and param average)")
    parser.add_argument("--temperature", type=float, help="the QRE's (default: the run's final temperature)")
    parser.add_argument("--step-size", type=float, default=0.02, help="MMD's eta (Leduc needs about 0.02 at tau 0.16)")
    parser.add_argument("--qre-steps", type=int, default=3000, help="steps of the QRE solve")
    parser.add_argument("--opponent-share", type=float, help="follow the pull of this share against the final params")
    parser.add_argument("--steps", type=int, default=600, help="--opponent-share: MMD steps to follow it")
    parser.add_argument("--snapshots", type=int, help="how the newest this many snapshots of the main player move")
    args = parser.parse_args(argv)
    if args.opponent_share is not None and not 0.0 <= args.opponent_share <= 1.0:
        parser.error(f"--opponent-share is a share of episodes in [0, 1], got {args.opponent_share}")
    from seedleague.games.openspiel import load_game
    from seedleague.api import load_policy
    from seedleague.eval.openspiel_eval import tabular_policy

    game = load_game(args.game)
    temperature = args.temperature or run_temperature(args.run_dir)[2]
    qre = agent_qre(game, temperature, args.step_size, max_steps=args.qre_steps)
    qre_probs = qre.policy.action_probability_array.copy()
    print(f"{game}: QRE at temperature {temperature:.4f}: exploitability "
          f"{openspiel_exploitability.exploitability(game, qre.policy):.4f} (residual {qre.residual:.2g})", flush=True)
    final = tabular_policy(game, load_policy(f"{args.run_dir}/checkpoints"))
    if args.opponent_share is not None:
        print(f"opponent share {args.opponent_share} against the final params "
              f"(exploitability {openspiel_exploitability.exploitability(game, final):.4f}), step {args.step_size}:")
        for step, score in opponent_share_solve(game, temperature, args.opponent_share, final, qre_probs,
                                                args.step_size, args.steps, every=max(1, args.steps // 6)):
            print(f"  step {step}: exploitability {score:.4f}", flush=True)
        return
    if args.snapshots is not None:
        _print_snapshot_moves(game, args.run_dir, args.snapshots, qre_probs)
        return
    print("| policy | exploitability | fraction f | visits to the rarest f | rarest f set to the QRE | only the rarest f kept |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, average in (("final params", False), ("param average", True)):
        tabular = tabular_policy(game, load_policy(f"{args.run_dir}/checkpoints", average=average))
        probs = tabular.action_probability_array.copy()
        score = _exploitability(game, tabular, probs)
        distance = visit_weighted_distance(self_play_visits(game, tabular, probs), probs, qre_probs)
        print(f"{name}: visit-weighted total-variation distance to the QRE {distance:.4f}", flush=True)
        for row in split_by_visits(game, tabular, probs, qre_probs):
            print(f"| {name} | {score:.4f} | {row['fraction']:.0%} | {row['visit_share']:.1%} | "
                  f"{row['rare_to_qre']:.4f} | {row['rest_to_qre']:.4f} |", flush=True)


def _print_snapshot_moves(game: pyspiel.Game, run_dir: str, count: int, qre: np.ndarray) -> None:
    from seedleague.api import load_policies
    from seedleague.eval.openspiel_eval import tabular_policy

    directory = os.path.join(run_dir, "pool", "main")
    steps = sorted(int(name) for name in os.listdir(directory) if name.isdigit())[-count:]
    tables = [tabular_policy(game, policy) for policy in load_policies(directory, steps)]
    snapshots = [table.action_probability_array.copy() for table in tables]
    rows = snapshot_moves(game, tables[0], snapshots, qre)
    print("| snapshot (learner step) | exploitability | distance to the QRE | moved since the one before |")
    print("|---:|---:|---:|---:|")
    for step, row in zip(steps, rows):
        moved = "-" if row["moved"] is None else f"{row['moved']:.4f}"
        print(f"| {step} | {row['exploitability']:.4f} | {row['to_qre']:.4f} | {moved} |", flush=True)
    moves = [row["moved"] for row in rows[1:]]
    print(f"medians: exploitability {np.median([row['exploitability'] for row in rows]):.4f}, distance to the QRE "
          f"{np.median([row['to_qre'] for row in rows]):.4f}, moved {np.median(moves) if moves else float('nan'):.4f}")
    mixture = snapshot_mixture(game, tables[0], snapshots)
    visits = self_play_visits(game, tables[0], mixture)
    print(f"their mixture: exploitability {_exploitability(game, tables[0], mixture):.4f}, distance to the QRE "
          f"{visit_weighted_distance(visits, mixture, qre):.4f}")


if __name__ == "__main__":
    main()
