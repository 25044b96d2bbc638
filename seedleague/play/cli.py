"""`seedleague play`: play a run's trained output yourself, in the browser; each game is a league result.

    seedleague play --run-dir runs/kuhn [--address 127.0.0.1:8766] [--greedy] [--member human]
                    [--league HOST:PORT] [--token ...]

Loads the run's output (`seedleague.api.load_trained`: what `--output` named when it trained), serves
a page (loopback only unless told otherwise, behind the run's token when one is set) where you pick a
seat, play the legal moves as buttons (OpenSpiel's games and PettingZoo's classic ones), and see the agent's reply with its action probabilities
and a running score. Every finished game is a result in the run's league of the human member against
the output, an anchor member named `output-<step>`, so it shows in the standings and on the league
page: sent over gRPC to the league service serving the run now (a run still training; --league names
another), else written to `RUN/league/league.sqlite`. Prints "play page on http://HOST:PORT/" once it
serves; stops on SIGINT or SIGTERM. docs/play.md is the guide.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from typing import Optional, Sequence

from seedleague import config_flags, subcommand
from seedleague.league.store import StoreError
from seedleague.security import add_security_flags, client_security_from_args, token_from_args


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from seedleague.play.server import PlayConfig

    parser.add_argument("--run-dir", required=True, help="the run whose output you play (its league records the games)")
    parser.add_argument("--member", default="human",
                        help="the league member you play as (default %(default)s; 1 to 64 chars, no ':' or spaces)")
    parser.add_argument("--league", default="", metavar="HOST:PORT",
                        help="the league service to record games in (default: the one serving the run now, found "
                             "in RUN/league/league.serving, else the run's league database)")
    add_security_flags(parser, "client")
    config_flags.add_flags(parser.add_argument_group("play page (PlayConfig)"), PlayConfig)


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register the `play` subcommand on an argparse subparsers object."""
    return subcommand.register(subparsers, "play", "play a run's trained output in the browser (docs/play.md)",
                               __doc__, add_arguments)


def run(args: argparse.Namespace) -> int:
    """0 after a clean stop; 2 for a bad flag, a run with no output, a game it cannot serve, a busy league."""
    try:
        page = _page(args)
    except (ValueError, OSError, RuntimeError, NotImplementedError, StoreError) as error:
        print(f"seedleague play: {str(error).splitlines()[0]}", file=sys.stderr)
        return 2
    stop, link = threading.Event(), ""
    previous = {signum: signal.signal(signum, lambda *_: stop.set()) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        page.start()
        needs = " (the run's token: open it with ?token=<token>)" if page.token else ""
        print(f"play page on {page.url}{needs}", flush=True)
        where = page.results.where()
        print(f"games are recorded in {'the league service at ' + where if where else page.results.league_dir}",
              flush=True)
        link = _advertise(args.run_dir, page.url)
        stop.wait()
    except ValueError as error:
        print(f"seedleague play: {error}", file=sys.stderr)
        return 2
    finally:
        page.stop()
        if link:
            with contextlib.suppress(OSError):
                os.unlink(link)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 0


def _advertise(run_dir: str, url: str) -> str:
    """Leave the page's address where the run's league page shows a link to it; the file's path ("" if not)."""
    from seedleague.league.page import PLAY_URL_FILE

    path = os.path.join(run_dir, "league", PLAY_URL_FILE)
    try:
        with open(path, "w") as f:
            f.write(url + "\n")
    except OSError:
        return ""
    return path


def _page(args: argparse.Namespace):
    """The play page of `args.run_dir`'s output, its human member and output anchor already in the league."""
    from seedleague import output
    from seedleague.api import load_trained
    from seedleague.league.service import _check_name
    from seedleague.play.results import LeagueResults
    from seedleague.play.server import PlayConfig, PlayPage
    from seedleague.protocol.errors import ProtocolError

    config = config_flags.build(PlayConfig, args)
    run_dir = os.path.abspath(args.run_dir)
    if not os.path.isdir(run_dir):
        raise ValueError(f"--run-dir {args.run_dir}: no such directory: give a run directory that trained")
    try:
        _check_name(args.member)
    except ProtocolError as error:
        raise ValueError(f"--member: {error.message}") from None
    resolved = output.resolve(run_dir)
    agent = load_trained(run_dir, seed=config.seed)
    game = _game(run_dir, agent.spec.env_name)
    if not os.path.isdir(os.path.join(run_dir, "league")):
        raise ValueError(f"{run_dir} has no league (league/): play records games in the run's league, which a "
                         "two-player `seedleague train` run has")
    results = LeagueResults(os.path.join(run_dir, "league"), args.member, f"output-{resolved.step}", run_dir,
                            args.league, client_security_from_args(args))
    try:
        results.join()
    except ProtocolError as error:
        raise ValueError(f"the league refused the players of this game: {error.message}") from None
    describe = dict(run_dir=run_dir, output=resolved.describe(), member=args.member, anchor=results.anchor,
                    env_name=agent.spec.env_name)
    return PlayPage(game, agent, results, config, token_from_args(args), describe=describe)


def _game(run_dir: str, env_name: str):
    """The rules of the run's game for the play page: OpenSpiel's or PettingZoo classic's; ValueError for others."""
    from seedleague.games import openspiel, pettingzoo_classic

    if openspiel.game_name(env_name) is not None:
        from seedleague.play.session import OpenSpielGame

        return OpenSpielGame(openspiel.load_game(openspiel.game_name(env_name)))
    if pettingzoo_classic.game_name(env_name) is not None:
        from seedleague.play.classic import ClassicGame

        return ClassicGame(pettingzoo_classic.game_name(env_name))
    raise ValueError(f"{run_dir} trained {env_name}: seedleague play serves OpenSpiel games (openspiel:NAME) and "
                     "PettingZoo's classic games (pettingzoo:classic/NAME)")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`python -m seedleague.play.cli`, the same command without the seedleague CLI."""
    return subcommand.standalone_main("play", __doc__, add_arguments, run, argv)


if __name__ == "__main__":
    sys.exit(main())
