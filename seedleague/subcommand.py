"""What every `seedleague` subcommand module shares (`tools.fake_host`, `tools.check_worker`, `league.cli`):
its place on the `seedleague` command line and its own `python -m MODULE` entry point, both built from the
module's `add_arguments(parser)`, `run(args) -> exit status` and docstring (whose first paragraph is the
description). A command whose run loads jax keeps `add_arguments`, `add_parser` and that docstring in a jax-free
module beside it (`eval.exploit_args` beside `eval.exploit`, which also holds `python -m seedleague.eval.exploit_args`),
so that `seedleague --help` needs no jax.

    def add_parser(subparsers):
        return subcommand.register(subparsers, "fake-host", "serve random legal actions ...", __doc__, add_arguments)

    def main(argv=None) -> int:
        return subcommand.standalone_main("fake-host", __doc__, add_arguments, run, argv)
"""

from __future__ import annotations

import argparse
from typing import Any, Callable, Optional, Sequence


def register(subparsers: Any, name: str, help: str, doc: str,
             add_arguments: Callable[[argparse.ArgumentParser], None], **parser_kwargs: Any) -> argparse.ArgumentParser:
    """Add subcommand `name` to an argparse subparsers object, with `add_arguments`' flags."""
    parser = subparsers.add_parser(name, help=help, description=doc.split("\n\n")[0], **parser_kwargs)
    add_arguments(parser)
    return parser


def standalone_main(name: str, doc: str, add_arguments: Callable[[argparse.ArgumentParser], None],
                    run: Callable[[argparse.Namespace], int], argv: Optional[Sequence[str]]) -> int:
    """`seedleague NAME` without the seedleague CLI: parse `argv` with `add_arguments`' flags and `run` them."""
    parser = argparse.ArgumentParser(prog=f"seedleague {name}", description=doc.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))
