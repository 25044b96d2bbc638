"""Serving the league: `LeagueServer` (a League behind the real gRPC server, on its own
thread) and `serve` (the `seedleague league serve` process: run dir, signals, logging).

    with LeagueServer(League(config, "runs/x/league.sqlite"), "127.0.0.1:0") as server:
        client = LeagueClient(server.address)

The server is built by `seedleague.grpc_server.start_server`, so health checking,
reflection, the message-size limit and security (token, TLS) are the ones every
seedleague server has.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import select
import threading
import time
from typing import Optional

import grpc

from seedleague.grpc_server import start_server
from seedleague.league.client import DEFAULT_MAX_MESSAGE_BYTES
from seedleague.league.config import LeagueConfig
from seedleague.league.service import League
from seedleague.league.servicer import SERVICE_NAME, LeagueServicer
from seedleague.security import ServerSecurity

DB_NAME = "league.sqlite"


class LeagueServer:
    """A LeagueService server on its own thread and event loop; restartable on the same port."""

    def __init__(
        self,
        league: League,
        address: str = "127.0.0.1:0",
        security: ServerSecurity = ServerSecurity(),
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ):
        if not address.rpartition(":")[0]:
            raise ValueError(f"address must be 'host:port' (port 0 picks a free one), got {address!r}")
        self.league = league
        self._address = address
        self._host = address.rpartition(":")[0]
        self._security = security
        self._max_message_bytes = max_message_bytes
        self._port: Optional[int] = None
        self._running: Optional[tuple[asyncio.AbstractEventLoop, threading.Thread, grpc.aio.Server]] = None

    @property
    def address(self) -> str:
        """"host:port" with the bound port, for clients."""
        if self._port is None:
            raise RuntimeError("server was never started")
        return f"{self._host}:{self._port}"

    def start(self, timeout_s: float = 10.0) -> "LeagueServer":
        """Bind (the same port as before, after a stop) and serve; returns self."""
        if self._running is not None:
            raise RuntimeError("server is already running")
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="seedleague-league-server", daemon=True)
        thread.start()
        address = self._address if self._port is None else f"{self._host}:{self._port}"
        servicer = LeagueServicer(self.league)
        starting = start_server(address, [servicer.register], [SERVICE_NAME], self._max_message_bytes, self._security)
        try:
            server, port = asyncio.run_coroutine_threadsafe(starting, loop).result(timeout_s)
        except BaseException:
            _stop_loop(loop, thread)
            raise
        self._running, self._port = (loop, thread, server), port
        return self

    def stop(self, grace: Optional[float] = 1.0, timeout_s: float = 10.0) -> None:
        """Stop serving: calls in flight get `grace` seconds, then are cancelled. Idempotent; the League stays open."""
        if self._running is None:
            return
        loop, thread, server = self._running
        self._running = None
        try:
            asyncio.run_coroutine_threadsafe(server.stop(grace), loop).result(timeout_s)
        finally:
            _stop_loop(loop, thread)

    def __enter__(self) -> "LeagueServer":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


def _stop_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    loop.close()


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
) -> None:
    """Serve the league of `run_dir` (db `<run_dir>/league.sqlite`) until a byte arrives on `stop_fd`.

    Prints "league serving on HOST:PORT" once listening (a launcher reads the
    port from it), then the leaderboard every `log_every_s` seconds when it
    changed. On stop: the server drains for a second, then the database closes.
    """
    os.makedirs(run_dir, exist_ok=True)
    league = League(config, os.path.join(run_dir, DB_NAME))
    save_config(config, run_dir)
    try:
        server = LeagueServer(league, address, security).start()
    except BaseException:
        league.close()
        raise
    try:
        print(f"league serving on {server.address}", flush=True)
        _log_until_stopped(league, stop_fd, log_every_s, top)
    finally:
        server.stop(grace=1.0)
        league.close()
        say("league stopped; database closed")


def _log_until_stopped(league: League, stop_fd: int, log_every_s: float, top: int) -> None:
    """Print the leaderboard every `log_every_s` s while it changes; return once `stop_fd` is readable."""
    last = None
    while not select.select([stop_fd], [], [], log_every_s)[0]:
        standings = league.standings()
        if standings != last:
            say(f"league leaderboard ({len(standings)} keys)\n{league.leaderboard_text(top)}")
            last = standings
