"""The page of `seedleague play`: a person plays a run's trained output in the browser.

    page = PlayPage(OpenSpielGame(game), agent, results, PlayConfig(address="127.0.0.1:0"), token="").start()
    print(page.url)
    ...
    page.stop()

This module owns the play page's routes and its tables (one per browser tab: the current game and the
running score); the rules are `session.PlaySession` (OpenSpiel) or `classic.ClassicSession` (PettingZoo's classic
games), the league side is `results.LeagueResults`, and the
HTTP server, its token, Host check and refusals are the league page's (`seedleague.league.page.WebPage`).
Reads are GETs (`/`, `/play.js`, `/api/info`, `/api/standings`); a new game and a move are POSTs of a small
JSON object (`/api/new`, `/api/move`), so a link on another site cannot play. docs/play.md is the guide.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import secrets
import threading
from typing import Any, Callable, Optional

import numpy as np

from seedleague.league.page import WebPage, split_address

STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
PLAY_READY = "play page on "  # printed by `seedleague play` once it serves


@dataclasses.dataclass(frozen=True)
class PlayConfig:
    """The play page of `seedleague play` (docs/play.md)."""

    address: str = "127.0.0.1:0"  # host:port of the page (port 0 picks a free one); a non-loopback host shows it to the network
    greedy: bool = False  # the agent's default: its most probable move (True) or a move sampled from its policy
    max_tables: int = 64  # games kept at once (one per open tab); the oldest is dropped beyond
    max_connections: int = 16  # connections served at once; more are refused with 503
    request_timeout_s: float = 10.0  # a connection that sends no complete request in this time is closed
    seed: int = 0  # of the chance moves, the agent's sampled moves and a mixture's draws

    def __post_init__(self):
        split_address(self.address)  # ValueError naming the fix
        for name in ("max_tables", "max_connections"):
            if not getattr(self, name) >= 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.request_timeout_s > 0:
            raise ValueError(f"request_timeout_s must be > 0 seconds, got {self.request_timeout_s}")


@dataclasses.dataclass
class _Table:
    """One tab's games: the current one and the running score (from the person's side)."""

    session: Any  # session.PlaySession or classic.ClassicSession
    games: int = 0
    wins: int = 0
    draws: int = 0
    losses: int = 0
    total_return: float = 0.0
    recorded: str = ""  # the last finished game's league record, or why it was not recorded

    def score(self) -> dict:
        return dict(games=self.games, wins=self.wins, draws=self.draws, losses=self.losses,
                    total_return=round(self.total_return, 4))


class PlayPage(WebPage):
    """The play page: GET the page, its script, the game's description and the standings; POST games and moves."""

    name = "play page"
    address_fix = "give another --address"

    def __init__(self, game: Any, agent: Any, results: Any, config: PlayConfig = PlayConfig(), token: str = "",
                 say: Callable[[str], None] = print, describe: Optional[dict] = None):
        """`game`: `name` and `session(agent, seat, greedy, rng)` (session.OpenSpielGame, classic.ClassicGame);
        `results`: `record(outcome) -> str` (what was recorded) and `standings() -> list[dict]`."""
        super().__init__(config, token, say)
        self.game, self.agent, self.results = game, agent, results
        self.describe = dict(describe or {})
        self._tables: "collections.OrderedDict[str, _Table]" = collections.OrderedDict()
        self._lock = threading.Lock()  # the tables, and one move at a time (the agent's forward pass is cheap)
        self._rng = np.random.default_rng(config.seed)

    def route(self, path: str):
        routes = {
            "/": lambda: (_static("play.html"), "text/html; charset=utf-8", "no-cache"),
            "/play.js": lambda: (_static("play.js"), "text/javascript; charset=utf-8", "no-cache"),
            "/api/info": lambda: (_json(self.info()), "application/json", "no-store"),
            "/api/standings": lambda: (_json(self.standings()), "application/json", "no-store"),
            "/favicon.ico": lambda: (b"", "image/x-icon", "max-age=86400"),
        }
        return routes.get(path)

    def post_route(self, path: str):
        return {"/api/new": self.new_game, "/api/move": self.move}.get(path)

    def standings(self) -> dict:
        """The league's standings, or why they cannot be read now (the page shows that line instead)."""
        try:
            return dict(standings=self.results.standings())
        except Exception as error:
            return dict(standings=[], error=str(error))

    def info(self) -> dict:
        return dict(self.describe, game=self.game.name, players=2, greedy=self.config.greedy)

    def new_game(self, request: dict) -> dict:
        """{"seat": 0 | 1, "greedy": bool, "table": id of this tab's table (optional)} -> the table's view."""
        seat = request.get("seat", 0)
        if seat not in (0, 1) or isinstance(seat, bool):
            raise ValueError(f"seat must be 0 or 1, got {seat!r}")
        greedy = request.get("greedy", self.config.greedy)
        if not isinstance(greedy, bool):
            raise ValueError(f"greedy must be true or false, got {greedy!r}")
        with self._lock:
            session = self.game.session(self.agent, seat, greedy, self._rng)
            table_id = request.get("table")
            table = self._tables.get(table_id) if isinstance(table_id, str) else None
            if table is None:
                table_id, table = secrets.token_hex(8), _Table(session)
                self._tables[table_id] = table
                while len(self._tables) > self.config.max_tables:
                    self._tables.popitem(last=False)
            table.session, table.recorded = session, ""
            self._tables.move_to_end(table_id)
            self._finish_if_over(table)
            return self._view(table_id, table)

    def move(self, request: dict) -> dict:
        """{"table": id, "action": an action id from the view's legal moves} -> the table's view."""
        with self._lock:
            table_id = request.get("table")
            table = self._tables.get(table_id) if isinstance(table_id, str) else None
            if table is None:
                raise ValueError(f"no game {str(table_id)[:40]!r} here (this page restarted, or it is old): "
                                 "start a new game")
            table.session.move(request.get("action"))
            self._finish_if_over(table)
            return self._view(table_id, table)

    def _finish_if_over(self, table: _Table) -> None:
        """Count a finished game into the table's score and record it in the league, once."""
        session = table.session
        if not session.finished or table.recorded:
            return
        outcome = session.outcome()
        table.games += 1
        table.wins += outcome == 1.0
        table.draws += outcome == 0.5
        table.losses += outcome == 0.0
        table.total_return += session.returns()[session.seat]
        try:
            table.recorded = self.results.record(outcome)
        except Exception as error:  # the league refused or is away: the person is told, the game still counts here
            table.recorded = f"not recorded in the league: {error}"

    @staticmethod
    def _view(table_id: str, table: _Table) -> dict:
        return dict(table=table_id, view=table.session.view(), score=table.score(), recorded=table.recorded)


def _static(name: str) -> bytes:
    with open(os.path.join(STATIC_DIR, name), "rb") as f:
        return f.read()


def _json(value: Any) -> bytes:
    import json

    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()
