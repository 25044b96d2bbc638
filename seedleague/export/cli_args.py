"""`seedleague export`: write a run's trained policy as a file another program runs (in-game inference).

    seedleague export --run-dir runs/kuhn --format onnx --out policy.onnx
    seedleague export --run-dir runs/kuhn --snapshot main:000512 --out main512.onnx

Without --snapshot it exports the run's output as seedleague.output.resolve and
seedleague.api.load_trained define it. One network (sources final, param_average) becomes OUT and
OUT.json. A mixture (average_policy, league_nash: one member played per whole episode) becomes one
file per member, OUT with ".onnx" replaced by ".member0.onnx", ".member1.onnx", ... (each with its
own .json), and OUT.json lists the members, their files, keys and weights (and each seat's weights,
where the output mixes its networks per seat); OUT itself is not written. A protocol v1 policy's graph takes one observation and legal mask; a protocol v2 one's
takes one input per named observation tensor (and entity and legal masks) and answers per action
head. Recurrent (LSTM) policies are refused.

Kept apart from seedleague.export.cli, which exports and loads jax, so that `seedleague --help`, `seedleague
export --help` and a refused flag need no jax.
"""

from __future__ import annotations

import argparse

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
