"""Plain-text tables of the league for logs and the CLI: the leaderboard and the payoff matrix.

    print(standings_table(league.standings(), top=20))
    print(payoff_table(league.payoff()))
"""

from __future__ import annotations

from typing import Sequence

from seedleague.league.types import PayoffMatrix, Role, Standing


def standings_table(standings: Sequence[Standing], top: int = 20) -> str:
    """The `top` rows (best Elo first, as given): key, role, Elo, TrueSkill mu±sigma, games, win rate."""
    header = f"{'#':>3}  {'key':<28} {'role':<16} {'elo':>7}  {'trueskill':>13}  {'games':>8}  {'win rate':>8}"
    lines = [header, "-" * len(header)]
    for rank, row in enumerate(standings[:top], start=1):
        role = Role(row.role).value
        trueskill = f"{row.trueskill_mu:.1f}±{row.trueskill_sigma:.1f}"
        lines.append(
            f"{rank:>3}  {row.key:<28} {role:<16} {row.elo:>7.1f}  {trueskill:>13}  {row.games:>8.1f}  {row.win_rate:>8.3f}"
        )
    if len(standings) > top:
        lines.append(f"... {len(standings) - top} more")
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
