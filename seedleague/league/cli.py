"""`seedleague league`: serve the league, or print its standings or payoff matrix.

    seedleague league serve --run-dir runs/x --address 127.0.0.1:50060 [--mode pfsp ...] [--token ...]
                            [--page.address 127.0.0.1:8765 | --no-page]
    seedleague league standings --address 127.0.0.1:50060 [--top 20]
    seedleague league payoff --address 127.0.0.1:50060

`serve` keeps its state in <run-dir>/league.sqlite (restarting with the same run
dir continues the league), prints "league serving on HOST:PORT" once listening
(with port 0 the line tells a launcher which port was picked), logs the
leaderboard while it changes, serves the live league page (docs/league_page.md) and prints
"league page on http://HOST:PORT/" unless --no-page, and stops cleanly on SIGINT or SIGTERM (exit 0).
Every LeagueConfig field is a flag (`--pfsp-weighting variance`); with none given, a run dir
that holds league_config.json serves with that saved config. This module owns those commands.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
from typing import Optional, Sequence

from seedleague import config_flags, subcommand
from seedleague.league import tables
from seedleague.league.client import LeagueClient, LeagueUnavailable
from seedleague.league.config import LeagueConfig
from seedleague.league.page import PageConfig
from seedleague.league.store import StoreError
from seedleague.protocol.errors import ProtocolError
from seedleague.security import add_security_flags, client_security_from_args, server_security_from_args

DEFAULT_ADDRESS = "127.0.0.1:50060"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `league` subcommands: serve, standings, payoff."""
    commands = parser.add_subparsers(dest="league_command", metavar="{serve,standings,payoff}", required=True)
    serve = commands.add_parser("serve", help="serve the league over gRPC; state in <run-dir>/league.sqlite")
    serve.add_argument("--run-dir", required=True, help="the run directory; league.sqlite lives here")
    serve.add_argument("--address", default=DEFAULT_ADDRESS, help="host:port (default %(default)s; port 0 picks one)")
    serve.add_argument("--log-every-s", type=float, default=60.0, help="leaderboard log interval (default %(default)s)")
    serve.add_argument("--no-page", action="store_true",
                       help="serve no live league page (default: one on --page.address; docs/league_page.md)")
    add_security_flags(serve, "server")
    config_flags.add_flags(serve.add_argument_group("live league page (PageConfig)"), PageConfig, prefix="page.")
    config_flags.add_flags(serve.add_argument_group("league config (LeagueConfig)"), LeagueConfig)
    for name, what in (("standings", "print the leaderboard"), ("payoff", "print the payoff (win-rate) matrix")):
        command = commands.add_parser(name, help=what)
        command.add_argument("--address", default=DEFAULT_ADDRESS, help="the league's host:port (default %(default)s)")
        command.add_argument("--timeout-s", type=float, default=10.0, help="give up after this long (default %(default)s)")
        if name == "standings":
            command.add_argument("--top", type=int, default=20, help="rows to print (default %(default)s)")
        add_security_flags(command, "client")


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register the `league` subcommand on an argparse subparsers object."""
    return subcommand.register(
        subparsers, "league", "the league: serve it, print standings or payoff", __doc__, add_arguments,
        epilog="Hosts on any machine join a served league with `seedleague host --league.address ADDRESS "
               "--league.player NAME --league.pool-dir SHARED_DIR`; without --env each host takes its game from its "
               "first worker's spec (docs/protocol.md section 12).")


def run(args: argparse.Namespace) -> int:
    """0 on success; 2 for a bad flag, an unusable database or an address in use; 1 if the league is unreachable."""
    try:
        if args.league_command == "serve":
            return _serve(args)
        return _query(args)
    except (ValueError, StoreError) as error:
        print(f"seedleague league: {error}", file=sys.stderr)
        return 2
    except (LeagueUnavailable, ProtocolError) as error:
        print(f"seedleague league: {error}", file=sys.stderr)
        return 1


def _serve(args: argparse.Namespace) -> int:
    from seedleague.league.server import serve

    config = config_flags.build(LeagueConfig, args, _saved_config(args))
    page = None if args.no_page else config_flags.build(PageConfig, args, prefix="page.")
    security = server_security_from_args(args)
    read_fd, write_fd = os.pipe()
    previous = {signum: signal.signal(signum, lambda signum, frame: os.write(write_fd, bytes([signum])))
                for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        serve(config, args.run_dir, args.address, security, read_fd, args.log_every_s, page=page)
    except RuntimeError as error:  # grpc raises RuntimeError for an address in use or unparsable
        print(f"seedleague league: cannot serve on {args.address}: {error}", file=sys.stderr)
        return 2
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        os.close(read_fd)
        os.close(write_fd)
    return 0


def _saved_config(args: argparse.Namespace) -> Optional[LeagueConfig]:
    """The config the run dir's league last served with, when no LeagueConfig flag is given (so serving a
    finished run's league again, e.g. for its page, rates it as it was rated); None otherwise."""
    from seedleague.league.server import CONFIG_NAME, load_config

    given = any(getattr(args, f.name, config_flags.NOT_GIVEN) is not config_flags.NOT_GIVEN
                for f in dataclasses.fields(LeagueConfig))
    if given or not os.path.exists(os.path.join(args.run_dir, CONFIG_NAME)):
        return None
    return load_config(args.run_dir)


def _query(args: argparse.Namespace) -> int:
    client = LeagueClient(args.address, client_security_from_args(args), timeout_s=args.timeout_s,
                          retry_deadline_s=args.timeout_s)
    try:
        if args.league_command == "standings":
            print(client.leaderboard_text(args.top))
        else:
            print(tables.payoff_table(client.payoff()))
    finally:
        client.close()
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`python -m seedleague.league.cli`, the same commands without the seedleague CLI."""
    return subcommand.standalone_main("league", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
