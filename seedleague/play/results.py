"""Where `seedleague play` records each finished game: the run's league, as a result of a human member.

    results = LeagueResults(league_dir, member="human", anchor="output-61", plays=run_dir)
    results.join()                 # once: the human and the output it plays join the league (idempotent)
    results.record(1.0)            # "recorded: human beat output-61 (human Elo 1216.0)"
    results.standings()            # rows for the page

The output a person plays is an anchor of the league (a fixed member, `League.add_anchor`) named after its
learner step, so the human's results rate it on the league's scale and a later output is another member.
The games go to the run's league service over gRPC when one serves the run (its `league.serving`
marker names its address; `address` overrides), else to its database directly, opened for each write
and closed after it. A service the marker does not name (one started by an older seedleague, found by
the launcher's league.pid) is refused in one line naming `--league`: two writers would break the
database's event order.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from typing import Iterator, Optional

from seedleague.league import tables
from seedleague.league.types import MatchResult, Role
from seedleague.security import ClientSecurity


class LeagueBusy(RuntimeError):
    """The run's league service is running: its database has one writer."""


def serving_pid(league_dir: str) -> Optional[int]:
    """The pid of a `seedleague league serve` of `league_dir` that is running now (its league.pid), else None."""
    try:
        with open(os.path.join(league_dir, "league.pid")) as f:
            pid = int(f.read().split()[0])
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            command = f.read().split(b"\0")
    except (OSError, ValueError, IndexError):
        return None
    if b"seedleague.league.cli" in command and os.path.abspath(league_dir).encode() in command:
        return pid
    return None


class LeagueResults:
    """The league a person's games are recorded in; see the module docstring."""

    def __init__(self, league_dir: str, member: str, anchor: str, plays: str, address: str = "",
                 security: ClientSecurity = ClientSecurity()):
        self.league_dir, self.member, self.anchor, self.plays = os.path.abspath(league_dir), member, anchor, plays
        self.address, self.security = address, security

    def where(self) -> str:
        """Where the next game is recorded: the address of a service serving the league, else "" (its database)."""
        from seedleague.league.server import serving

        if self.address:
            return self.address
        marker = serving(self.league_dir)
        return marker["address"] if marker else ""

    @contextlib.contextmanager
    def _league(self) -> Iterator:
        address = self.where()
        if address:
            from seedleague.league.client import LeagueClient

            client = LeagueClient(address, self.security, timeout_s=10.0, retry_deadline_s=10.0)
            try:
                yield client
            finally:
                client.close()
            return
        from seedleague.league.server import DB_NAME, load_config
        from seedleague.league.service import League

        pid = serving_pid(self.league_dir)
        if pid is not None:
            raise LeagueBusy(f"the run's league service is running (pid {pid}) and its database takes one writer: "
                             f"give --league HOST:PORT, its address (in {self.league_dir}/league.log), or play once "
                             "the run has ended")
        with League(load_config(self.league_dir), os.path.join(self.league_dir, DB_NAME)) as league:
            yield league

    def join(self) -> None:
        """The human member and the anchor of the output it plays join the league (unchanged if they are in it)."""
        with self._league() as league:
            league.register_player(self.member, Role.HUMAN)
            league.register_player(self.anchor, Role.ANCHOR)
            league.add_snapshot(self.anchor, 0, self.plays)

    def record(self, outcome: float) -> str:
        """Report one finished game (`outcome` from the person's side); returns what the league now says."""
        with self._league() as league:
            league.report_results([MatchResult(uuid.uuid4().hex, self.member, self.anchor, outcome)])
            elo = {row.key: row.elo for row in league.standings()}
        verb = {1.0: "beat", 0.5: "drew with", 0.0: "lost to"}[outcome]
        return (f"recorded in the league: {self.member} {verb} {self.anchor} ({self.member} Elo "
                f"{elo.get(self.member, float('nan')):.1f}, {self.anchor} {elo.get(self.anchor, float('nan')):.1f})")

    def standings(self) -> list[dict]:
        with self._league() as league:
            rows = tables.rated_first(league.standings(), 40).rows
        return [dict(key=r.key, role=r.role.value, elo=round(r.elo, 1), games=round(r.games, 2),
                     win_rate=round(r.win_rate, 3)) for r in rows]
