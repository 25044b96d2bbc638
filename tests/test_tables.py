"""seedleague.league.tables: which leaderboard rows a long league shows (rated first) and how the rest is counted."""

from seedleague.eval.report import leaderboard_markdown
from seedleague.league.tables import rated_first, standings_table
from seedleague.league.types import Role, Standing


def long_league(unrated=300):
    """Three rated rows given in the wrong order among `unrated` snapshots at Elo 1200 with 0 games."""
    rows = [Standing(f"main:{i:06d}", Role.MAIN, 1200.0, 0.0, 0.0) for i in range(unrated)]
    rows.insert(5, Standing("main:000900", Role.MAIN, 1150.0, 12.0, 0.4))
    rows.insert(50, Standing("main", Role.MAIN, 1290.0, 30.0, 0.7))
    rows.append(Standing("main:000950", Role.MAIN, 1230.0, 8.0, 0.6))
    return rows


def test_rated_rows_come_first_best_elo_first_and_unrated_ones_are_counted():
    board = rated_first(long_league(), top=20)
    assert [row.key for row in board.rows] == ["main", "main:000950", "main:000900"]
    assert (board.more_rated, board.unrated_left_out) == (0, 300)
    assert board.notes() == ["... 300 unrated (no games yet, Elo at its start) left out"]


def test_more_rated_rows_than_top_are_cut_and_counted():
    rows = [Standing(f"main:{i:06d}", Role.MAIN, 1000.0 + i, 1.0, 0.5) for i in range(30)] + long_league(5)[:2]
    board = rated_first(rows, top=10)
    assert [row.elo for row in board.rows] == [1029.0 - i for i in range(10)]
    assert (board.more_rated, board.unrated_left_out) == (20, 2)


def test_a_small_league_keeps_every_row_rated_first():
    rows = long_league(2)
    board = rated_first(rows, top=20)
    assert [row.key for row in board.rows] == ["main", "main:000950", "main:000900", "main:000000", "main:000001"]
    assert board.notes() == []
    assert len(rated_first(long_league(), top=None).rows) == 303


def test_standings_table_and_markdown_say_what_they_left_out():
    text = standings_table(long_league(), top=20)
    lines = text.splitlines()
    assert lines[2].split()[:2] == ["1", "main"] and len(lines) == 2 + 3 + 1
    assert "300 unrated" in lines[-1]
    markdown = leaderboard_markdown(long_league(), top=20)
    assert "| 1 | `main` | main | 1290.0 |" in markdown
    assert "main:000000" not in markdown and "300 unrated" in markdown
    assert markdown.count("\n| ") == 3  # the three rated rows (the separator line starts "|---")
