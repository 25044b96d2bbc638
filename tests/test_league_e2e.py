"""A whole league run as real processes: league service, two learning players' hosts (main agent and
main exploiter), OpenSpiel workers; then serving one of its snapshots to an unchanged worker."""

import os
import signal
import subprocess

import numpy as np

from conftest import RawWorker
from seedleague import progress
from seedleague.league.config import LeagueConfig
from seedleague.league.service import League
from seedleague.protocol.specs import EnvSpec
from test_e2e import SEEDLEAGUE, run_cli, run_worker, serving, summary

SMALL = ["--unroll_length", "4", "--batch_size", "8", "--network.hidden_sizes", "16", "--replay.capacity", "64",
         "--checkpoint.interval_s", "2", "--envs-per-worker", "16", "--league.check_in_interval_s", "0.5"]


def _both_players_snapshot(pool: str) -> bool:
    return all(os.path.isdir(os.path.join(pool, player)) and os.listdir(os.path.join(pool, player))
               for player in ("main", "exploiter"))


def test_two_players_train_against_one_league_then_a_snapshot_is_served(tmp_path):
    run_dir = str(tmp_path / "league-run")
    pool = os.path.join(run_dir, "pool")
    # Runs until both players have frozen a snapshot, main's learner has updated and the league has rated games
    # (asked at each console line; the progress file's tick is written before its line), then gets Ctrl-C;
    # --max-seconds is a safety cap only. A player's first snapshot holds its initial params (step 0), so
    # snapshots alone do not say that main has stepped: on a loaded machine Ctrl-C once came before its first update.
    run = subprocess.Popen(SEEDLEAGUE + ["train", "--env", "openspiel:kuhn_poker", "--run-dir", run_dir,
                                         "--max-seconds", "180", "--players", "main,exploiter:main_exploiter",
                                         "--league_config.mode", "alphastar",
                                         "--league_config.snapshot_interval_steps", "20",
                                         "--league_config.exploiter_min_steps", "20",
                                         "--league_config.main_exploiter_timeout_steps", "60"] + SMALL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in run.stdout:
        seen.append(line)
        ticks = progress.read(run_dir)
        if (_both_players_snapshot(pool) and any(tick.get("league_games") for tick in ticks)
                and any(tick.get("learner_step", 0) > 0 for tick in ticks)):
            run.send_signal(signal.SIGINT)
            break
    rest, _ = run.communicate(timeout=120)
    output = "".join(seen) + rest
    assert run.returncode == 0, output[-4000:]
    result = summary(run_dir)
    assert result["learner_step"] > 0 and result["episodes"] > 0
    keys = {s["key"] for s in result["standings"]}
    assert {"main", "exploiter"} <= keys, keys  # both learning players appear in the standings
    assert "exploitability" in output  # the run ends by printing its evaluation

    # Both hosts froze snapshots into the shared pool, registered with the league.
    assert sorted(os.listdir(pool)) == ["exploiter", "main"]
    with League(LeagueConfig(), os.path.join(run_dir, "league", "league.sqlite")) as league:
        snapshots = league.snapshots()
        assert {s.player for s in snapshots} == {"main", "exploiter"}
        payoff = league.payoff()
        played = sum(sum(row) for row in payoff.games)
        assert played > 0  # results against snapshots reached the league and count in the payoff
    assert os.path.exists(os.path.join(run_dir, "players", "exploiter", "summary.json"))
    # Each host loaded the other's snapshots as they appeared (orbax's cached step list once hid every
    # snapshot written after a host first opened that player's directory, so the exploiter met only main:0).
    exploiter_log = open(os.path.join(run_dir, "players", "exploiter", "player.log")).read()
    for log_text in (output, exploiter_log):
        assert "no checkpoint" not in log_text, [line for line in log_text.splitlines() if "no checkpoint" in line][:3]

    # serve one of main's snapshots: the unchanged OpenSpiel worker plays against it
    key = next(s.key for s in snapshots if s.player == "main")
    with serving(["--checkpoint", run_dir, "--snapshot", key, "--run-dir", str(tmp_path / "serve")],
                 tmp_path) as address:
        run_worker(address, "envs.openspiel_worker", "--game", "kuhn_poker", "--num-envs", "4", "--max-steps", "200")
        spec = EnvSpec("openspiel:kuhn_poker", (11,), np.float32, 2, 1, num_seats=2, has_legal_mask=True)
        raw = RawWorker(address, spec)
        step = int(key.split(":")[1])
        assert raw.step().policy_version == step  # the answers come from that snapshot's params
        raw.close()


def test_serve_refuses_an_unknown_snapshot(tmp_path):
    result = subprocess.run(SEEDLEAGUE + ["serve", "--checkpoint", str(tmp_path), "--snapshot", "main:000007"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "no snapshot 'main:000007'" in result.stderr


def test_two_player_atari_pong_trains_through_the_host(tmp_path):
    """PettingZoo pong_v3 (ROM from ale-py, nothing downloaded) with the conv net, in self-play."""
    run_dir = str(tmp_path / "pong")
    run_cli(["train", "--env", "pettingzoo:pong_v3", "--run-dir", run_dir, "--workers", "1", "--envs-per-worker", "1",
             "--unroll_length", "4", "--batch_size", "2", "--replay.capacity", "8", "--network.hidden_sizes", "32",
             "--learner.epochs", "1", "--learner.minibatches", "1", "--max-learner-steps", "2", "--max-seconds", "150",
             "--no-eval"], timeout=240)
    result = summary(run_dir)
    assert result["learner_step"] >= 2 and result["env_steps"] > 0
    assert os.listdir(os.path.join(run_dir, "pool", "main"))  # its first snapshot reached the pool
