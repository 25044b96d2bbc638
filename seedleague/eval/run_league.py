"""A finished (or running) run's league, read from its database: what `seedleague report`, the `selected` and
`league_nash` outputs and the end-of-run evaluation read standings, payoffs and ratings from.

    league = league_of("runs/kuhn")   # None when the run has no league database
    league.standings(), league.payoff(), league.elo_history()
"""

from __future__ import annotations

import os

from seedleague.league.server import load_config
from seedleague.league.service import League


def league_of(run_dir: str):
    """THE place a run's league is opened from (anything with `standings()`, `payoff()` and `elo_history()` works):
    the in-process League over `<run_dir>/league/league.sqlite`, opened with the config the league service last saved
    beside it (payoff decay, Elo settings); None when there is no league database."""
    path = os.path.join(run_dir, "league", "league.sqlite")
    if not os.path.exists(path):
        return None
    return League(load_config(os.path.dirname(path)), path)
