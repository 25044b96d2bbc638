"""Plain-text tables of the league for logs and the CLI: the leaderboard and the payoff matrix,
and which leaderboard rows to show (`rated_first`, also used by the Markdown report).

    print(standings_table(league.standings(), top=20))
    print(payoff_table(league.payoff()))
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from seedleague.league.types import PayoffMatrix, Role, Standing


@dataclasses.dataclass(frozen=True)
class Leaderboard:
    """The rows a leaderboard shows and what it leaves out (see `rated_first`)."""

    rows: list[Standing]
    more_rated: int  # rated rows beyond `top`, left out
    unrated_left_out: int  # rows with no games (Elo still at its start), left out

    def notes(self) -> list[str]:
        """One line per kind of row left out, e.g. "... 140 unrated (no games yet) left out"."""
        lines = [f"... {self.more_rated} more rated"] if self.more_rated else []
        if self.unrated_left_out:
            lines.append(f"... {self.unrated_left_out} unrated (no games yet, Elo at its start) left out")
        return lines


def rated_first(standings: Sequence[Standing], top: Optional[int] = 20) -> Leaderboard:
    """Rated rows (games > 0) first, best Elo first, then unrated ones in the order given.

    Every row is kept when they all fit in `top` (or `top` is None); otherwise only rated
    rows are shown (at most `top`), and the unrated ones, which would be hundreds of
    snapshots at the starting Elo with 0 games in a long run, are counted instead.
    """
    rated = sorted((row for row in standings if row.games > 0), key=lambda row: -row.elo)
    unrated = [row for row in standings if not row.games > 0]
    if top is None or len(standings) <= top:
        return Leaderboard(rated + unrated, 0, 0)
    return Leaderboard(rated[:top], max(0, len(rated) - top), len(unrated))


def standings_table(standings: Sequence[Standing], top: int = 20) -> str:
    """Key, role, Elo, TrueSkill mu±sigma, games and win rate of the rows `rated_first` keeps."""
    header = f"{'#':>3}  {'key':<28} {'role':<16} {'elo':>7}  {'trueskill':>13}  {'games':>8}  {'win rate':>8}"
    lines = [header, "-" * len(header)]
    board = rated_first(standings, top)
    for rank, row in enumerate(board.rows, start=1):
        role = Role(row.role).value
        trueskill = f"{row.trueskill_mu:.1f}±{row.trueskill_sigma:.1f}"
        lines.append(
            f"{rank:>3}  {row.key:<28} {role:<16} {row.elo:>7.1f}  {trueskill:>13}  {row.games:>8.1f}  {row.win_rate:>8.3f}"
        )
    lines += board.notes()
    members = [row for row in standings if row.pbt]
    if members:
        lines.append("population-based training (docs/pbt.md): each member's settings and newest copy")
        lines += [f"     {row.key:<28} {row.pbt}" for row in members]
    if not standings:
        lines.append("(no players yet)")
    elif not any(row.games > 0 for row in standings):
        lines.append("(no rated games yet: ratings count games against other snapshots or players; "
                     "in plain self-play the learner only meets itself, so compare snapshots with "
                     "`seedleague eval --snapshot A --vs B` or train with another league mode)")
    return "\n".join(lines)


def payoff_table(matrix: PayoffMatrix, width: int = 7) -> str:
    """Win rate of each row key against each column key (columns numbered as the rows), and row games."""
    if not matrix.keys:
        return "(no players yet)"
    name_width = max(len("P[row beats column]"), *(len(key) for key in matrix.keys))
    columns = "".join(f"{j:>{width}}" for j in range(len(matrix.keys)))
    lines = [f"{'':>3}  {'P[row beats column]':<{name_width}} {columns}  {'games':>8}"]
    for i, key in enumerate(matrix.keys):
        cells = "".join(f"{p:>{width}.2f}" for p in matrix.win_rate[i])
        lines.append(f"{i:>3}  {key:<{name_width}} {cells}  {sum(matrix.games[i]):>8.1f}")
    return "\n".join(lines)
