"""seedleague.metrics: game and league win-rate counters, and the console progress line built from a report."""

import numpy as np

from seedleague.metrics import Metrics, progress_line

BASE = dict(wall_s=12.0, env_steps=5000, env_steps_per_s=400.0, episodes=800, learner_steps=30,
            learner_steps_per_s=2.5)


def test_a_single_agent_line_shows_the_mean_return():
    line = progress_line(dict(BASE, mean_return=21.5))
    assert "episodes 800" in line and "return(100) 21.5" in line
    assert "games" not in line and "win rate" not in line


def test_a_league_run_shows_games_and_the_win_rate_instead_of_a_zero_return():
    line = progress_line(dict(BASE, mean_return=0.0, games=400, league_games=380, league_win_rate=0.625))
    assert "games 400 (380 vs league)" in line and "win rate vs league(100) 0.625" in line
    assert "return(100)" not in line


def test_self_play_with_seats_shows_games_and_keeps_the_return():
    line = progress_line(dict(BASE, mean_return=0.0, games=400, league_games=0))
    assert "games 400 |" in line and "vs league" not in line and "return(100) 0.0" in line


def test_a_best_response_shows_its_return_against_the_output_and_no_league():
    line = progress_line(dict(BASE, mean_return=0.2, games=400, league_games=0, best_response_return=0.15123))
    assert "games 400 | best response's return +0.1512 | return(100) 0.2" in line and "vs league" not in line


def test_a_v2_workers_episode_stats_show_by_name_after_the_return():
    line = progress_line(dict(BASE, mean_return=3.0, **{"episode_stats/win": 0.4987, "episode_stats/moves": 17.25}))
    assert "return(100) 3.0 | moves 17.2 win 0.499 | learner" in line


def test_metrics_count_games_and_a_window_of_league_outcomes():
    metrics = Metrics(return_window=4)
    assert "games" not in metrics.report() and "league_win_rate" not in metrics.report()
    metrics.record_episodes(np.array([1.0, -1.0]), np.array([3, 3]))  # both seats of one self-play game
    metrics.record_games(1)
    report = metrics.report()
    assert (report["episodes"], report["games"], report["league_games"]) == (2, 1, 0)
    assert "league_win_rate" not in report
    metrics.record_games(3, [1.0, 0.5, 0.0])
    metrics.record_games(2, [0.0, 0.0])  # the window keeps the last 4: 0.5, 0, 0, 0... after the 1.0 falls out
    report = metrics.report()
    assert (report["games"], report["league_games"]) == (6, 5)
    assert report["league_win_rate"] == (0.5 + 0.0 + 0.0 + 0.0) / 4
    assert "win rate vs league(100) 0.125" in progress_line(report)
