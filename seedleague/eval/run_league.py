"""A finished (or running) run's league, read from its database: what `seedleague report`, the `selected` and
`league_nash` outputs and the end-of-run evaluation read standings, payoffs and ratings from.

    league = league_of("runs/kuhn")   # None when the run has no league database
    league.standings(), league.payoff(), league.elo_history()
"""

from __future__ import annotations

import functools
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


def pbt_output(run_dir: str, player: str):
    """(member, why): the population-based training member that is the run's output in place of `player`, the
    best by the league's own evidence (`League.pbt_output`, docs/pbt.md); None when the run trains no population
    of `player` (read from the league's saved config first, so other runs do not replay their league)."""
    population = _pbt_population(run_dir, player)
    return population[0] if population else None


def pbt_members(run_dir: str, player: str) -> tuple[str, ...]:
    """The members of the population-based training `player` belongs to in `run_dir`, in join order; () when the
    run trains no population of `player`."""
    population = _pbt_population(run_dir, player)
    return population[1] if population else ()


def _pbt_population(run_dir: str, player: str):
    """(`pbt_output`, `pbt_members`), or None without population-based training. Opening the league replays its
    results (seconds for a 10-minute run), so the answer is kept while the database's files are unchanged: an
    output choice asks for it tens of times."""
    directory = os.path.join(run_dir, "league")
    path = os.path.join(directory, "league.sqlite")
    if not os.path.exists(path) or load_config(directory).pbt_interval == 0:
        return None
    return _read_pbt(os.path.abspath(run_dir), player, _file_state(path), _file_state(path + "-wal"))


def _file_state(path: str) -> tuple[int, int]:
    """(modification time in ns, size) of `path`; (0, 0) where it does not exist."""
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return 0, 0
    return stat.st_mtime_ns, stat.st_size


@functools.lru_cache(maxsize=16)
def _read_pbt(run_dir: str, player: str, *database_state):
    """`_pbt_population` from the league as it is while its files are in `database_state` (the cache's key)."""
    league = league_of(run_dir)
    try:
        best = league.pbt_output(player)
        return None if best is None else (best, tuple(league.pbt_members(player)))
    finally:
        league.close()
