"""The flags of `seedleague eval` and `seedleague report`: evaluate a trained policy; write the league report.

    seedleague eval --run-dir D [--snapshot KEY | --checkpoint PATH] [--step N] [--games N]
                    [--mcts-sims 100,1000] [--mcts-games N] [--match-seconds S] [--greedy] [--vs KEY_OR_PATH]
                    [--mixture KEY=W,KEY=W,...] [--nash] [--average FRACTION] [--json OUT] [--seed S]
    seedleague report --run-dir D [--out DIR]

The game comes from the checkpoint's env spec ("openspiel:<game>"). Imperfect-
information games (poker) get exact exploitability (and that of a `--mixture`, and of
the learner's param average where the checkpoint keeps one);
perfect-information games get win/draw/loss against uniform random and against
MCTS at each `--mcts-sims`; `--vs` adds a head-to-head match in any OpenSpiel
game. Every evaluation is printed as a table and appended as one JSON line to
`<run_dir>/eval/history.jsonl`, which `seedleague report` plots.

Kept apart from seedleague.eval.cli, which runs the two commands and loads jax, with what is wrong with a command
line that needs no policy to see (`refusal`: its flags, and a run whose file names show there is no policy to
load), so that `seedleague --help`, `seedleague eval --help` and a refused command line need no jax.
"""

from __future__ import annotations

import argparse
import os
from typing import Optional

from seedleague.artifacts import run_files
from seedleague.eval.eval_config import EvalConfig, check_average_fraction


def _sims(text: str) -> tuple[int, ...]:
    try:
        sims = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--mcts-sims must be comma-separated integers like 100,1000, got {text!r}") from None
    return sims


def add_parser(sub) -> None:
    """Register `eval` and `report` on an argparse subparsers object."""
    parser = sub.add_parser("eval", help="evaluate a trained policy: exploitability, vs random/MCTS, head-to-head",
                            description=__doc__.split("\n\n")[2])
    parser.add_argument("--run-dir", required=True, metavar="DIR", help="the run directory (history goes to <run-dir>/eval/)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--snapshot", default=None, metavar="KEY", help="evaluate league snapshot KEY (player:step) from <run-dir>/pool")
    which.add_argument("--checkpoint", default=None, metavar="PATH",
                       help="evaluate the checkpoint in PATH (run, checkpoints or pool player directory)")
    parser.add_argument("--step", type=int, default=None, metavar="N", help="checkpoint step (default: newest); not with --snapshot")
    parser.add_argument("--games", type=int, default=100, metavar="N", help="games against random and head-to-head (default 100)")
    parser.add_argument("--mcts-sims", type=_sims, default=(100,), metavar="SIMS", help="MCTS simulation counts, e.g. 100,1000 (default 100)")
    parser.add_argument("--mcts-games", type=int, default=None, metavar="N", help="games against each MCTS (default: --games)")
    parser.add_argument("--match-seconds", type=float, default=None, metavar="S",
                        help="each match (against random, each MCTS, head-to-head) begins no game after S seconds and "
                             "reports the games it finished (default: every game; large games' MCTS games are slow)")
    parser.add_argument("--uct-c", type=float, default=2.0, metavar="C", help="MCTS exploration constant (default 2)")
    parser.add_argument("--greedy", action="store_true", help="play the most probable legal action instead of sampling")
    parser.add_argument("--vs", default=None, metavar="KEY_OR_PATH", help="head-to-head against a snapshot KEY or a checkpoint PATH")
    parser.add_argument("--mixture", default=None, metavar="KEY=W,...", help="exploitability of the mixture KEY=W,KEY=W,... (poker games)")
    parser.add_argument("--nash", action="store_true",
                        help="also the exploitability of the league's Nash mixture over its snapshots (poker games)")
    parser.add_argument("--average", type=float, default=None, metavar="FRACTION",
                        help="also the exploitability of the average policy of the newest FRACTION of the league's "
                             "snapshots, e.g. 0.33 (poker games; the end of training reports 1/3)")
    parser.add_argument("--json", default=None, metavar="OUT", help="also write the results to this JSON file")
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="seed of chance, sampling and MCTS (default 0)")
    report = sub.add_parser("report", help="write the league report (leaderboard, heatmap, rating and exploitability plots)",
                            description="Write leaderboard.md, payoff_heatmap.png, ratings.png, exploitability.png and "
                                        "report.md from the run's league and eval history.")
    report.add_argument("--run-dir", required=True, metavar="DIR", help="the run directory")
    report.add_argument("--out", default=None, metavar="DIR", help="output directory (default <run-dir>/report)")


def eval_config(args: argparse.Namespace) -> EvalConfig:
    """The EvalConfig of an `eval` command line (ValueError naming the flag whose value is wrong)."""
    return EvalConfig(args.games, args.mcts_sims, args.mcts_games, args.uct_c, args.greedy, args.seed,
                      args.match_seconds)


def parse_mixture(text: str) -> list[tuple[str, float]]:
    """[("main:000512", 0.7), ...] from "main:000512=0.7,main:001024=0.3"."""
    pairs = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, _, weight = item.rpartition("=")
        try:
            pairs.append((key.strip(), float(weight)))
        except ValueError:
            key = ""
        if not key:
            raise ValueError(f"--mixture items must be KEY=WEIGHT (e.g. main:000512=0.7), got {item!r}")
    if not pairs:
        raise ValueError("--mixture needs at least one KEY=WEIGHT")
    return pairs


def refusal(args: argparse.Namespace) -> Optional[str]:
    """What is wrong with an `eval` or `report` command line that no policy is needed to see, or None: checked by
    seedleague.cli before seedleague.eval.cli (which loads jax) is imported."""
    if args.command == "report":
        return None if os.path.isdir(args.run_dir) else f"no such run directory: {args.run_dir!r}"
    try:
        eval_config(args)
        if args.mixture:
            parse_mixture(args.mixture)
        if args.average is not None:
            check_average_fraction(args.average)
    except ValueError as error:
        return str(error)
    if args.snapshot and args.step is not None:
        return "--step applies to --run-dir or --checkpoint; a snapshot key names its own step"
    return _policy_problem(args)


def _policy_problem(args: argparse.Namespace) -> Optional[str]:
    """What loading the policy to evaluate would refuse first (seedleague.artifacts.load: load_snapshot, load_policy),
    where the run's file names show it (seedleague.artifacts.run_files), or None."""
    try:
        path = run_files.snapshot_dir(args.run_dir, args.snapshot)[0] if args.snapshot else None
    except (ValueError, FileNotFoundError) as error:
        return str(error)
    return run_files.checkpoint_problem(path or args.checkpoint or args.run_dir)
