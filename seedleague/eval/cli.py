"""`seedleague eval` and `seedleague report`: evaluate a trained policy; write the league report.

Their flags, and what each command does, are in seedleague.eval.cli_args (jax-free, so that `--help` and a refused
flag load no jax); this module runs them and prints.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Optional

from seedleague.artifacts.load import load_policy, load_snapshot
from seedleague.eval import measure
from seedleague.eval.cli_args import eval_config, parse_mixture, refusal
from seedleague.eval.curve import load_param_average
from seedleague.eval.eval_config import QUICK, EvalConfig
from seedleague.eval.measure import append_history, evaluate
from seedleague.eval.report import run_report
from seedleague.eval.run_league import league_of


def evaluate_run(run_dir: str, quick: bool = False, config: Optional[EvalConfig] = None) -> Optional[dict]:
    """Evaluate the run's newest learner checkpoint (seedleague.eval.measure.evaluate_run), print the table and
    append it to the run's history; returns the entry. When nothing applies it prints why and returns None, so a
    finished training run never fails here."""
    entry, why = measure.evaluate_run(run_dir, config or (QUICK if quick else EvalConfig()))
    if entry is None:
        print(f"  no evaluation: {why}")
        return None
    print(format_entry(entry))
    print(f"appended to {append_history(run_dir, entry)}")
    return entry


# -- output -------------------------------------------------------------------------------------


def _stats_row(label: str, stats: dict) -> str:
    seats = "  ".join(f"{s['wins']}/{s['draws']}/{s['losses']}".rjust(11) for s in stats["per_seat"])
    return (f"  {label:<22}{stats['games']:>6}  {stats['win_rate']:>5.2f}  {stats['draw_rate']:>5.2f}  "
            f"{stats['loss_rate']:>5.2f}  {seats}  {stats['mean_return']:>7.3f}  {stats['games_per_s']:>8.1f}")


def format_entry(entry: dict) -> str:
    """The readable table `seedleague eval` prints."""
    results = entry["results"]
    steps = f", env steps {entry['env_steps']}" if entry.get("env_steps") is not None else ""
    lines = [f"{entry['env_name']}: {entry['policy']} (step {entry['step']}{steps})"]
    if "exploitability" in results:
        lines.append(f"  exploitability          {results['exploitability']:.6f}   "
                     f"({results['exploitability_seconds']:.2f} s; NashConv/2, 0 at a Nash equilibrium)")
    if "exploitability_note" in results:
        lines.append(f"  exploitability: {results['exploitability_note']}")
    if "param_average_exploitability" in results:
        span = results["param_average"]
        lines.append(f"  param average           {results['param_average_exploitability']:.6f}   "
                     f"(one network: the mean of the learner's params over {span['count']} updates "
                     + (f"from step {span['from']})" if span.get("from") is not None else "at the end of its anneal)"))
    if "mixture_exploitability" in results:
        lines.append(f"  mixture exploitability  {results['mixture_exploitability']:.6f}   {results['mixture']}")
    if "mixture_note" in results:
        lines.append(f"  mixture: {results['mixture_note']}")
    if "average_exploitability" in results:
        first, last, count = results["average_snapshots"]
        lines.append(f"  average policy          {results['average_exploitability']:.6f}   "
                     f"(uniform mixture of the newest {count} snapshots, {first} .. {last})")
    if "average_and_params_exploitability" in results:
        lines.append(f"  average + param average {results['average_and_params_exploitability']:.6f}   "
                     "(the two averages above mixed half and half: the param average in half the games)")
    if "average_note" in results:
        lines.append(f"  average policy: {results['average_note']}")
    for field, mixture, label in (("nash_mixture_exploitability", "nash_mixture", "league Nash mixture"),
                                  ("league_table_nash_exploitability", "league_table_nash", "  from win rates")):
        if field in results:
            support = results[mixture]
            top = ", ".join(f"{k}={w:.2f}" for k, w in sorted(support.items(), key=lambda kv: -kv[1])[:3])
            lines.append(f"  {label:<22}  {results[field]:.6f}   "
                         f"({len(support)} snapshots in its support: {top}{', ...' if len(support) > 3 else ''})")
    if "output" in results:
        described = results["output"]
        shown = f"{described['source']}, step {described['step']}"
        if described["kind"] == "mixture":
            shown += f", {len(described['members'])} snapshots mixed"
        if "output_exploitability" in results:
            lines.append(f"  output                  {results['output_exploitability']:.6f}   ({shown}: what "
                         "load_trained and serve give)")
    if "output_note" in results:
        lines.append(f"  output: {results['output_note']}")
    if "nash_note" in results:
        lines.append(f"  league Nash mixture: {results['nash_note']}")
    matches = [("vs random", results.get("vs_random")), ("output vs random", results.get("output_vs_random"))]
    matches += [(f"vs mcts {sims} sims", s) for sims, s in results.get("vs_mcts", {}).items()]
    matches += [(f"vs {results['head_to_head']['opponent']}", results["head_to_head"])] if "head_to_head" in results else []
    matches = [(label, s) for label, s in matches if s]
    if matches:
        lines.append(f"  {'opponent':<22}{'games':>6}  {'win':>5}  {'draw':>5}  {'loss':>5}  {'seat0 W/D/L':>11}  "
                     f"{'seat1 W/D/L':>11}  {'return':>7}  {'games/s':>8}")
        lines += [_stats_row(label, s) for label, s in matches]
    return "\n".join(lines)


# -- report -------------------------------------------------------------------------------------


# -- commands -----------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    """Run `eval` or `report`; 0 on success, 2 with a message for bad input or nothing to evaluate."""
    try:
        problem = refusal(args)  # seedleague.cli has checked before loading jax; a caller of this function may not
        if problem:
            raise ValueError(problem)
        if args.command == "report":
            return _report(args)
        return _eval(args)
    except (ValueError, FileNotFoundError, NotADirectoryError, NotImplementedError) as error:
        print(f"seedleague {args.command}: {error}", file=sys.stderr)
        return 2


def _eval(args: argparse.Namespace) -> int:
    config = eval_config(args)
    mixture = parse_mixture(args.mixture) if args.mixture else None
    if args.snapshot:
        policy, param_average = load_snapshot(args.run_dir, args.snapshot, seed=args.seed), None
    else:
        policy = load_policy(args.checkpoint or args.run_dir, args.step, seed=args.seed)
        param_average = load_param_average(args.checkpoint or args.run_dir, policy.step, args.seed)
    entry = evaluate(args.run_dir, policy, config, args.vs, mixture, args.nash, args.average, param_average)
    print(format_entry(entry))
    path = append_history(args.run_dir, entry)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(entry, f, indent=2)
    print(f"appended to {path}" + (f"; wrote {args.json}" if args.json else ""))
    return 0


def _report(args: argparse.Namespace) -> int:
    league = league_of(args.run_dir)
    try:
        paths = run_report(args.run_dir, league, args.out)
    finally:
        if league is not None and hasattr(league, "close"):
            league.close()
    if league is None:
        print(f"no league database in {os.path.join(args.run_dir, 'league')}: leaderboard and payoff are empty")
    print("wrote " + "\n      ".join(paths))
    return 0
