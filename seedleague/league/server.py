"""Serving the league: `LeagueServer` (a League behind the real gRPC server, on its own
thread) and `serve` (the `seedleague league serve` process: run dir, signals, logging).

    with LeagueServer(League(config, "runs/x/league.sqlite"), "127.0.0.1:0") as server:
        client = LeagueClient(server.address)

The server is built by `seedleague.grpc_server.start_server`, so health checking,
reflection, the message-size limit and security (token, TLS) are the ones every
seedleague server has.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import select
import time
from typing import Optional

from seedleague import storage
from seedleague.grpc_server import ThreadedServer
from seedleague.league.client import DEFAULT_MAX_MESSAGE_BYTES
from seedleague.league.config import LeagueConfig, anchor_member
from seedleague.league.page import PAGE_FAILED, PAGE_READY, LeaguePage, PageConfig
from seedleague.league.service import League
from seedleague.league.servicer import SERVICE_NAME, LeagueServicer
from seedleague.league.types import UNIFORM_ANCHOR
from seedleague.protocol.errors import ProtocolError
from seedleague.security import ServerSecurity

DB_NAME = "league.sqlite"


class LeagueServer(ThreadedServer):
    """A LeagueService server on its own thread and event loop; restartable on the same port."""

    def __init__(
        self,
        league: League,
        address: str = "127.0.0.1:0",
        security: ServerSecurity = ServerSecurity(),
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ):
        super().__init__(address, lambda: [LeagueServicer(league).register], [SERVICE_NAME], max_message_bytes,
                         security, thread_name="seedleague-league-server")
        self.league = league

    def stop(self, grace: Optional[float] = 1.0, timeout_s: float = 10.0) -> None:
        """Stop serving: calls in flight get `grace` seconds, then are cancelled. Idempotent; the League stays open."""
        super().stop(grace, timeout_s)


CONFIG_NAME = "league_config.json"


def save_config(config: LeagueConfig, run_dir: str) -> None:
    """The config the league last served with, so reports recompute the same payoff and ratings."""
    with open(os.path.join(run_dir, CONFIG_NAME), "w") as f:
        json.dump({k: getattr(v, "value", v) for k, v in dataclasses.asdict(config).items()}, f, indent=1)


def load_config(run_dir: str) -> LeagueConfig:
    """The config saved by `save_config` in `run_dir` (defaults if there is none)."""
    path = os.path.join(run_dir, CONFIG_NAME)
    if not os.path.exists(path):
        return LeagueConfig()
    with open(path) as f:
        data = json.load(f)
    fields = {f.name for f in dataclasses.fields(LeagueConfig)}
    return LeagueConfig(**{k: v for k, v in data.items() if k in fields})


def add_anchors(league: League, anchors) -> None:
    """Each of `anchors` (LeagueConfig.anchors entries) joins `league`, or is found there unchanged (a restart);
    ValueError naming the entry for a path that is not a directory or a name taken by another path."""
    for spec in anchors:
        name, path = anchor_member(spec)
        if path != UNIFORM_ANCHOR:
            path = os.path.abspath(path)
            if not os.path.isdir(path):
                raise ValueError(f"anchor {spec!r}: {path} is not a directory: give a run directory (its output "
                                 "plays) or a checkpoint directory")
        try:
            league.add_anchor(name, path)
        except ProtocolError as error:
            raise ValueError(f"anchor {spec!r}: {error.message}") from None


SERVING_NAME = "league.serving"  # {"pid", "address"} while a service serves the run dir: its database's one writer


def _write_marker(path: str, address: str) -> None:
    """Say which process serves this league and where (`seedleague play` reports its games there)."""
    try:
        storage.write_json(path, dict(pid=os.getpid(), address=address))
    except OSError as error:  # a read-only run dir is refused elsewhere; the marker is only a convenience
        say(f"could not write {path} ({error.strerror}); seedleague play will need --league {address}")


def serving(run_dir: str) -> Optional[dict]:
    """{"pid", "address"} of the league service serving `run_dir` now, or None (none, or it died)."""
    try:
        with open(os.path.join(run_dir, SERVING_NAME)) as f:
            marker = json.load(f)
        os.kill(int(marker["pid"]), 0)
        return dict(pid=int(marker["pid"]), address=str(marker["address"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def say(message: str) -> None:
    """A timestamped line on stdout, flushed at once."""
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def serve(
    config: LeagueConfig,
    run_dir: str,
    address: str,
    security: ServerSecurity,
    stop_fd: int,
    log_every_s: float = 60.0,
    top: int = 20,
    page: Optional[PageConfig] = None,
) -> None:
    """Serve the league of `run_dir` (db `<run_dir>/league.sqlite`) until a byte arrives on `stop_fd`.

    Prints "league serving on HOST:PORT" once listening (a launcher reads the port from
    it). With `page`, then serves the live league page (`seedleague.league.page`, behind
    the same token) and prints "league page on http://HOST:PORT/", or "league page: cannot
    ..." and serves without it. Then the leaderboard every `log_every_s` seconds when it
    changed. On stop: the page stops, the server drains
    for a second, then the database closes.
    """
    os.makedirs(run_dir, exist_ok=True)
    league = League(config, os.path.join(run_dir, DB_NAME))
    try:
        add_anchors(league, config.anchors)
    except BaseException:
        league.close()
        raise
    save_config(config, run_dir)
    try:
        server = LeagueServer(league, address, security).start()
    except BaseException:
        league.close()
        raise
    viewer = None
    marker = os.path.join(run_dir, SERVING_NAME)
    try:
        _write_marker(marker, server.address)  # before the address is announced: who reads one finds the other
        print(f"league serving on {server.address}", flush=True)
        viewer = _start_page(league, page, security, run_dir) if page is not None else None
        _log_until_stopped(league, stop_fd, log_every_s, top)
    finally:
        if viewer is not None:
            viewer.stop()
        server.stop(grace=1.0)
        league.close()
        with contextlib.suppress(OSError):
            os.unlink(marker)
        say("league stopped; database closed")


def _start_page(league: League, config: PageConfig, security: ServerSecurity, run_dir: str) -> Optional[LeaguePage]:
    """The live page, started, or None (said on the console) when it cannot serve: the league matters more."""
    try:
        viewer = LeaguePage(league, config, security.token, say=say, run_dir=run_dir).start()
    except ValueError as error:
        print(f"{PAGE_FAILED}{error}; the league serves without its page", flush=True)
        return None
    needs = " (the run's token: open it with ?token=<token>)" if security.token else ""
    print(f"{PAGE_READY}{viewer.url}{needs}", flush=True)
    return viewer


def _log_until_stopped(league: League, stop_fd: int, log_every_s: float, top: int) -> None:
    """Print the leaderboard every `log_every_s` s while it changes; return once `stop_fd` is readable."""
    last = None
    while not select.select([stop_fd], [], [], log_every_s)[0]:
        standings = league.standings()
        if standings != last:
            say(f"league leaderboard ({len(standings)} keys)\n{league.leaderboard_text(top)}")
            last = standings
