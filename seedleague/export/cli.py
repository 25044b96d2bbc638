"""`seedleague export`: write a run's trained policy as a file another program runs (in-game inference).

What it writes, and its flags, are in seedleague.export.cli_args (jax-free, so that `--help` and a refused flag
load no jax). This file owns choosing what to export and where its files go; seedleague.export.onnx_policy (the flat
model's) and seedleague.export.onnx_named (the named network's) own the graphs and what their sidecars say. See
docs/export.md.
"""

from __future__ import annotations

import argparse
import os
import sys

from seedleague import output
from seedleague.artifacts.load import checkpoint_dir, checkpoint_steps
from seedleague.artifacts.policy import RecurrentPolicyError
from seedleague.artifacts.named import NamedPolicy
from seedleague.checkpoint import Checkpointer
from seedleague.checkpoint_config import CheckpointConfig
from seedleague.export import onnx_policy, onnx_named
from seedleague.export.cli_args import (FORMATS, missing_snapshot, out_problem, run_dir_problem, snapshot_dir_problem,
                                       snapshot_problem)
from seedleague.league.types import parse_key


class ExportError(ValueError):
    """Bad input to `seedleague export`; the message says what is wrong and what to change."""


def run(args: argparse.Namespace) -> int:
    """Run `export`; 0 on success, 2 with a message for bad input or nothing to export."""
    try:
        for path in export(args.run_dir, args.out, args.format, args.snapshot):
            print(f"wrote {path}")
        return 0
    except (ValueError, FileNotFoundError, NotADirectoryError, NotImplementedError) as error:
        print(f"seedleague export: {error}", file=sys.stderr)
        return 2


def export(run_dir: str, out: str, format: str = "onnx", snapshot: str | None = None) -> list[str]:
    """Export `run_dir`'s output (or its league `snapshot`) to `out`; returns the paths written.

    Raises ExportError (a ValueError) for a bad format, --out or snapshot key, FileNotFoundError
    for a missing run directory, snapshot or output, RecurrentPolicyError for an LSTM policy and
    onnx_named.UnsupportedPolicyError (a ValueError) for a protocol v2 network it cannot write."""
    problem = out_problem(out, format)
    if problem:
        raise ExportError(problem)
    problem = run_dir_problem(run_dir)
    if problem:
        raise FileNotFoundError(problem)
    resolved = _snapshot(run_dir, snapshot) if snapshot else output.resolve(run_dir)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    if resolved.kind == "policy":
        policy = _load(resolved.members[0], snapshot)
        _writer(policy).write(policy, out, dict(kind="policy", output=resolved.describe()))
        return [out, out + ".json"]
    return _export_mixture(resolved, out)


def _snapshot(run_dir: str, key: str) -> output.Output:
    """League snapshot `key` of `run_dir` as a one-member Output; ExportError/FileNotFoundError name what exists."""
    problem = snapshot_problem(key)
    if problem:
        raise ExportError(problem)
    problem = snapshot_dir_problem(run_dir, key)
    if problem:
        raise FileNotFoundError(problem)
    player, step = parse_key(key)
    player_dir = os.path.join(run_dir, "pool", player)
    steps = checkpoint_steps(player_dir)
    if step not in steps:
        raise FileNotFoundError(missing_snapshot(key, player_dir, steps))
    return output.Output("snapshot", (output.Member(f"{player}:{step:06d}", 1.0, player_dir, step),))


def _writer(policy):
    """The module that writes `policy`'s graph: onnx_named for a NamedPolicy, else onnx_policy (a flat Policy)."""
    return onnx_named if isinstance(policy, NamedPolicy) else onnx_policy


def _load(member: output.Member, snapshot: str | None):
    """The member's Policy or NamedPolicy; a recurrent one is refused, saying what export supports."""
    try:
        return member.load()
    except RecurrentPolicyError:
        which = f"snapshot {snapshot}" if snapshot else f"{member.key} ({member.path})"
        lstm = _lstm_size(member)
        raise RecurrentPolicyError(
            f"{which} has an LSTM core (network.lstm_size={lstm}): seedleague export writes feed-forward policies "
            "only (torso mlp, conv or board with --network.lstm-size 0), whose graph needs no state carried between "
            "calls; serve a recurrent policy with `seedleague serve` instead, or train with --network.lstm-size 0"
        ) from None


def _lstm_size(member: output.Member) -> int:
    """The LSTM size in the member's checkpoint meta (read through seedleague.artifacts.load's directory rule)."""
    checkpointer = Checkpointer(CheckpointConfig(directory=checkpoint_dir(member.path)))
    try:
        return int((checkpointer.restore_meta(member.step).get("network") or {}).get("lstm_size", 0))
    finally:
        checkpointer.close()


def _export_mixture(resolved: output.Output, out: str) -> list[str]:
    """Each member to OUT's .member<i>.onnx (and .json), then OUT.json listing them with their weights.
    An OUT left by an earlier export of one network is removed: it is not this output."""
    stem = out[: -len(FORMATS["onnx"])]
    written, members, shared = [], [], None
    for i, member in enumerate(resolved.members):
        path = f"{stem}.member{i}.onnx"
        entry = dict(file=os.path.basename(path), **member.entry(), step=member.step)
        policy = _load(member, None)
        writer = _writer(policy)
        sidecar = writer.write(policy, path, dict(kind="member", member=entry, mixture=os.path.basename(out) + ".json"))
        shared = shared or {k: sidecar[k] for k in writer.MIXTURE_KEYS}
        written += [path, path + ".json"]
        members.append(entry)
    index = dict(shared)
    per_seat = resolved.seat_weights() is not None
    index.update(kind="mixture", output=resolved.describe(), members=members, how_to_play=(
        "a strategy over whole episodes: at each episode start draw one member with probability its weight "
        + ("in the seat you play (seat_weights[seat]; weight is their mean, for a caller that does not know its seat) "
           if per_seat else "")
        + "and act with that member's file until the episode ends (every member has the inputs and outputs above); "
        "averaging the members' probabilities per step would be a different strategy"))
    onnx_policy.write_json(out + ".json", index)
    if os.path.exists(out):
        os.remove(out)
    return written + [out + ".json"]
