"""`seedleague export`: write a run's trained policy as a file another program runs (in-game inference).

    seedleague export --run-dir runs/kuhn --format onnx --out policy.onnx
    seedleague export --run-dir runs/kuhn --snapshot main:000512 --out main512.onnx

Without --snapshot it exports the run's output as seedleague.output.resolve and
seedleague.api.load_trained define it. One network (sources final, param_average, distilled: the population's
Nash mixture fitted into one network by the output choice) becomes OUT and OUT.json. A mixture (average_policy,
league_nash, population_nash: one member played per whole episode) becomes one
file per member, OUT with ".onnx" replaced by ".member0.onnx", ".member1.onnx", ... (each with its
own .json), and OUT.json lists the members, their files, keys and weights (and each seat's weights,
where the output mixes its networks per seat); OUT itself is not written. A flat policy's graph (one
observation tensor, one discrete action) takes one observation and legal mask; a named one's takes one input per
named observation tensor (and entity and legal masks) and answers per action head. Recurrent (LSTM) policies are
refused.

Kept apart from seedleague.export.cli, which exports and loads jax, with what is wrong with a command line that
needs no policy to see (`refusal`), so that `seedleague --help`, `seedleague export --help` and a refused command
line need no jax.
"""

from __future__ import annotations

import argparse
import os
from typing import Optional

from seedleague.artifacts import run_files
from seedleague.league.types import parse_key

FORMATS = {"onnx": ".onnx"}  # --format -> the file extension --out must have


def add_parser(sub) -> None:
    """Register `export` on an argparse subparsers object."""
    parser = sub.add_parser("export", help="write a run's trained policy as an ONNX file for in-game inference "
                                           "(see docs/export.md)",
                            description="\n\n".join(__doc__.split("\n\n")[:3]),
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", required=True, metavar="DIR", help="the run directory of `seedleague train`")
    parser.add_argument("--snapshot", default=None, metavar="KEY",
                        help="export league snapshot KEY (player:step, e.g. main:000512) from <run-dir>/pool instead "
                             "of the run's output")
    parser.add_argument("--format", default="onnx", metavar="FORMAT",
                        help=f"file format: {', '.join(FORMATS)} (default: %(default)s)")
    parser.add_argument("--out", required=True, metavar="FILE",
                        help="the file to write, e.g. policy.onnx; its sidecar FILE.json says how to feed it. A "
                             "mixture output writes FILE's members as <name>.member0.onnx, ... instead")


def out_problem(out: str, format: str) -> Optional[str]:
    """What is wrong with --out for --format, or None."""
    if format not in FORMATS:
        return (f"--format {format!r} is not supported: seedleague export writes {', '.join(FORMATS)} "
                "(pass --format onnx)")
    if not out.endswith(FORMATS[format]) or out == FORMATS[format]:
        return (f"--out {out!r} must name a {FORMATS[format]} file for --format {format}, "
                f"e.g. policy{FORMATS[format]}")
    if os.path.isdir(out):
        return f"--out {out!r} is a directory: name the file to write, e.g. {os.path.join(out, 'policy.onnx')}"
    return None


def run_dir_problem(run_dir: str) -> Optional[str]:
    """What is wrong with --run-dir before anything in it is read, or None."""
    if os.path.isdir(run_dir):
        return None
    return (f"no such run directory: {run_dir!r}: pass --run-dir the directory a `seedleague train --run-dir` wrote "
            "(it holds checkpoints/ and output.json)")


def snapshot_problem(key: str) -> Optional[str]:
    """What is wrong with a --snapshot key before the pool is read, or None."""
    try:
        _, step = parse_key(key)
    except ValueError as error:
        return f"--snapshot: {error}, e.g. main:000512"
    if step is None:
        return (f"--snapshot {key!r} names a player, not a snapshot: pass player:step, e.g. {key}:000512 "
                "(or leave --snapshot out to export the run's output)")
    return None


def refusal(args: argparse.Namespace) -> Optional[str]:
    """What is wrong with an `export` command line that no policy is needed to see (its flags, and a run whose file
    names show there is nothing to export: seedleague.artifacts.run_files), or None: checked by seedleague.cli
    before seedleague.export.cli (which loads jax) is imported, in the order `export` meets them."""
    if args.snapshot:
        return (out_problem(args.out, args.format) or run_dir_problem(args.run_dir) or snapshot_problem(args.snapshot)
                or snapshot_dir_problem(args.run_dir, args.snapshot))
    return (out_problem(args.out, args.format) or run_dir_problem(args.run_dir)
            or run_files.output_problem(args.run_dir))  # seedleague.output.resolve's "no output yet"


def snapshot_dir_problem(run_dir: str, key: str) -> Optional[str]:
    """What is wrong with a valid --snapshot key in `run_dir`'s pool that its file names show (no such player, or a
    player without a snapshot), or None."""
    player, _ = parse_key(key)
    pool = os.path.join(run_dir, "pool")
    player_dir = os.path.join(pool, player)
    if not os.path.isdir(player_dir):
        players = sorted(os.listdir(pool)) if os.path.isdir(pool) else []
        return (f"--snapshot {key!r}: {run_dir!r} has no league snapshots of player {player!r} (its pool has players "
                f"{players}): pick a snapshot of one of them, or leave --snapshot out to export the run's output")
    return missing_snapshot(key, player_dir, []) if run_files.holds_no_step(player_dir) else None


def missing_snapshot(key: str, player_dir: str, steps: list[int]) -> str:
    """The refusal of a --snapshot key whose step is not among the player's `steps`."""
    player, _ = parse_key(key)
    known = ", ".join(f"{player}:{s:06d}" for s in steps[-5:]) or "none"
    return (f"--snapshot {key!r}: no such snapshot in {player_dir!r} ({len(steps)} snapshots of {player}, the "
            f"newest: {known}): pass one of those to --snapshot")
