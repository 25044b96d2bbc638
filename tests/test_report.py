"""seedleague.eval.report and `seedleague report`: Markdown and valid PNGs from league data and eval history."""

import io
import logging
import os
import sys

import numpy as np
import pytest

from seedleague import cli
from seedleague.eval import measure
from seedleague.eval import report as report_module
from seedleague.eval.report import write_report
from seedleague.league.types import PayoffMatrix, Role, Standing

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
KEYS = ["main", "main:000100", "main:000000"]


def standings():
    return [Standing("main", Role.MAIN, 1260.5, 40.0, 0.7, 27.1, 2.0),
            Standing("main:000100", Role.MAIN, 1201.0, 30.0, 0.5),
            Standing("main:000000", Role.MAIN, 1138.5, 30.0, 0.3)]


def payoff():
    win_rate = [[0.5, 0.6, 0.9], [0.4, 0.5, 0.7], [0.1, 0.3, 0.5]]
    return PayoffMatrix(KEYS, win_rate, [[0, 10, 10], [10, 0, 5], [10, 5, 0]])


def elo_history():
    return {"main": [(10, 1210.0), (20, 1240.0), (30, 1260.5)], "main:000000": [(10, 1190.0), (30, 1138.5)],
            "main:000100": []}


def eval_history():
    return [
        dict(time=1000.0, step=10, env_steps=1000, wall_s=5.0, results={"exploitability": 0.45}),
        dict(time=1060.0, step=20, env_steps=2000, wall_s=65.0, results={"exploitability": 0.2, "mixture_exploitability": 0.15}),
        dict(time=1100.0, step=30, env_steps=None, wall_s=None, results={"vs_random": {"games": 10}}),  # no exploitability
    ]


def assert_png(path):
    assert os.path.getsize(path) > 1000
    with open(path, "rb") as f:
        assert f.read(8) == PNG_MAGIC


def test_write_report_writes_every_file_and_links_them(tmp_path):
    paths = write_report(str(tmp_path / "report"), standings(), payoff(), elo_history(), eval_history())
    names = [os.path.basename(p) for p in paths]
    assert names == ["leaderboard.md", "payoff_heatmap.png", "ratings.png", "exploitability.png", "report.md"]
    for path in paths:
        assert os.path.exists(path)
        if path.endswith(".png"):
            assert_png(path)
    leaderboard = open(paths[0]).read()
    assert "| 1 | `main` | main | 1260.5 | 27.1 ± 2.0 | 40.0 | 0.700 |" in leaderboard
    report = open(paths[-1]).read()
    for name in ("leaderboard.md", "payoff_heatmap.png", "ratings.png", "exploitability.png"):
        assert f"({name})" in report


def test_empty_league_and_history_leave_the_plots_out(tmp_path):
    paths = write_report(str(tmp_path), [], PayoffMatrix([], [], []), {}, [])
    assert [os.path.basename(p) for p in paths] == ["leaderboard.md", "report.md"]
    report = open(paths[-1]).read()
    assert "no players yet" in report and "no exploitability evaluations yet" in report


def test_exploitability_without_env_steps_or_wall_clock_still_plots(tmp_path):
    history = [dict(time=50.0 + i, step=i, results={"exploitability": 0.5 / (i + 1)}) for i in range(3)]
    paths = write_report(str(tmp_path), [], PayoffMatrix([], [], []), {}, history)
    assert os.path.join(str(tmp_path), "exploitability.png") in paths
    assert_png(os.path.join(str(tmp_path), "exploitability.png"))


def test_every_exploitability_an_entry_carries_gets_a_curve_and_a_summary(tmp_path):
    results = {"exploitability": 0.5, "param_average_exploitability": 0.12, "average_exploitability": 0.13,
               "nash_mixture_exploitability": 0.2, "output_exploitability": 0.004}
    history = [dict(time=1.0, step=1, env_steps=10, wall_s=1.0, results=results)]
    series = report_module._exploitability_points(history)
    assert {name: [p["value"] for p in points] for name, points in series.items()} == {
        "policy": [0.5], "param average": [0.12], "average policy": [0.13], "league Nash mixture": [0.2],
        "the run's output": [0.004]}
    paths = write_report(str(tmp_path), [], PayoffMatrix([], [], []), {}, history)
    text = open(paths[-1]).read()
    assert "param average exploitability 0.12" in text and "league Nash mixture exploitability 0.2" in text
    assert "the run's output exploitability 0.004" in text  # what load_trained gives, at the run's end


def test_a_large_payoff_matrix_renders_without_annotations(tmp_path):
    keys = [f"main:{i:06d}" for i in range(30)]
    matrix = PayoffMatrix(keys, [[0.5] * 30 for _ in keys], [[1.0] * 30 for _ in keys])
    paths = write_report(str(tmp_path), [], matrix, {}, [])
    assert os.path.join(str(tmp_path), "payoff_heatmap.png") in paths
    assert_png(os.path.join(str(tmp_path), "payoff_heatmap.png"))


class FakeLeagueSource:
    """Anything with standings(), payoff() and elo_history() feeds the report."""

    def standings(self):
        return standings()

    def payoff(self):
        return payoff()

    def elo_history(self):
        return elo_history()


def test_run_report_reads_the_run_dirs_eval_history(tmp_path):
    run = str(tmp_path)
    for entry in eval_history():
        measure.append_history(run, entry)
    with open(os.path.join(run, "eval", "history.jsonl"), "a") as f:
        f.write('{"cut short')  # a line a crash left half-written is skipped
    assert len(measure.read_history(run)) == 3
    paths = report_module.run_report(run, FakeLeagueSource())
    assert os.path.dirname(paths[0]) == os.path.join(run, "report")
    assert "exploitability.png" in [os.path.basename(p) for p in paths]


def test_report_cli_without_a_league_database(tmp_path, capsys):
    measure.append_history(str(tmp_path), eval_history()[0])
    assert cli.main(["report", "--run-dir", str(tmp_path), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "no league database" in out and "exploitability.png" in out
    assert_png(str(tmp_path / "out" / "exploitability.png"))
    assert cli.main(["report", "--run-dir", str(tmp_path / "missing")]) == 2
    assert "no such run directory" in capsys.readouterr().err


def test_cli_logging_writes_to_the_stderr_of_the_moment_not_the_one_main_saw(tmp_path, monkeypatch, capsys):
    # A captured stderr that main() logged to is closed later; the root logger must not keep it.
    assert cli.main(["report", "--run-dir", str(tmp_path / "missing")]) == 2
    swapped = io.StringIO()
    monkeypatch.setattr(sys, "stderr", swapped)
    logging.getLogger("seedleague.test").warning("logged after main returned")
    assert "logged after main returned" in swapped.getvalue()


def test_report_cli_opens_the_league_database(tmp_path, capsys):
    service = pytest.importorskip("seedleague.league.service")
    from seedleague.league.config import LeagueConfig

    os.makedirs(tmp_path / "league")
    league = service.League(LeagueConfig(), str(tmp_path / "league" / "league.sqlite"))
    league.register_player("main", Role.MAIN)
    league.close()
    assert cli.main(["report", "--run-dir", str(tmp_path)]) == 0, capsys.readouterr()
    assert "`main`" in open(tmp_path / "report" / "leaderboard.md").read()


def test_a_none_exploitability_is_left_out_of_the_summary(tmp_path):
    # A run without a param average records the field as None; the report must not crash on it.
    results = {"exploitability": 0.3, "param_average_exploitability": None, "vs_random": None}
    assert report_module._summary(results) == "policy exploitability 0.3"
    assert report_module._summary({"exploitability": None}) == "(no results)"
    history = [dict(time=1.0, step=1, env_steps=10, wall_s=1.0, results=results)]
    paths = write_report(str(tmp_path), [], PayoffMatrix([], [], []), {}, history)
    assert "policy exploitability 0.3" in open(paths[-1]).read()


def big_league(n=300):
    """`n` snapshots (given out of step order) and the live player: few games, most cells empty.

    Snapshots 50 and 51 are a rock-paper-scissors core with 53 (the Nash support: each beats one
    of the others 0.9 to 0.1 and everyone else 0.8); 7 and 9 played the most games."""
    steps = list(range(n))[::-1]
    keys = [f"main:{s:06d}" for s in steps] + ["main"]
    k = len(keys)
    win = np.full((k, k), 0.5)
    games = np.zeros((k, k))
    at = {s: i for i, s in enumerate(steps)}
    for a, b in ((50, 51), (51, 53), (53, 50)):
        win[at[a], at[b]], win[at[b], at[a]] = 0.9, 0.1
        games[at[a], at[b]] = games[at[b], at[a]] = 4
    for core in (50, 51, 53):
        for other in range(n):
            if other not in (50, 51, 53):
                win[at[core], at[other]], win[at[other], at[core]] = 0.8, 0.2
    for heavy, count in ((7, 500), (9, 300)):
        games[at[heavy], at[heavy + 1]] = games[at[heavy + 1], at[heavy]] = count
    for s in range(0, n, 3):  # a game here and there
        games[at[s], -1] = games[-1, at[s]] = 1
    return PayoffMatrix(keys, win.tolist(), games.tolist())


def test_a_big_payoff_matrix_shows_the_nash_support_most_played_and_most_recent_keys():
    from seedleague.eval.heatmap_keys import NASH, PLAYED, RECENT, pick_keys

    matrix = big_league()
    subset = pick_keys(matrix)
    shown = [matrix.keys[i] for i in subset.indices]
    assert len(shown) == 24 and not subset.complete
    nash = {matrix.keys[i] for i, why in subset.reasons.items() if NASH in why}
    assert nash == {"main:000050", "main:000051", "main:000053"}
    played = {matrix.keys[i] for i, why in subset.reasons.items() if PLAYED in why}
    assert {"main:000007", "main:000008", "main:000009", "main:000010"} <= played
    recent = [matrix.keys[i] for i, why in subset.reasons.items() if RECENT in why]
    assert "main" in recent and "main:000299" in recent and "main:000200" not in shown
    assert shown[-1] == "main" and shown[:-1] == sorted(shown[:-1])  # step order, the live player last
    text = subset.describe()
    assert "24 of 301 keys" in text and "Nash support" in text and "3 keys" in text and "hatched" in text


def test_a_big_payoff_heatmap_draws_the_subset_and_the_report_says_which(tmp_path):
    paths = write_report(str(tmp_path), [], big_league(), {}, [])
    assert_png(os.path.join(str(tmp_path), "payoff_heatmap.png"))
    report = open(paths[-1]).read()
    assert "24 of 301 keys are shown" in report and "most played" in report


def test_a_small_payoff_matrix_shows_every_key_in_step_order():
    from seedleague.eval.heatmap_keys import pick_keys

    subset = pick_keys(payoff())
    assert [KEYS[i] for i in subset.indices] == ["main:000000", "main:000100", "main"]
    assert subset.complete and subset.describe() == "All 3 keys are shown."
