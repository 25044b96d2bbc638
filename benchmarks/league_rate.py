"""How many match results a second the league takes: the ceiling on episodes/s of all its hosts together.

    .venv/bin/python -m benchmarks.league_rate                 # in process and through gRPC, batches of 256
    .venv/bin/python -m benchmarks.league_rate --batch 1024 --repeats 7

Each repeat reports `--batches` batches of `--batch` new results (ids never seen, as
a host's are) of an AlphaStar league of a main agent, a main exploiter and 10 main
snapshots, into a fresh SQLite league: `League.report_results` called directly, then
`LeagueClient.report_results` against `seedleague league serve` in a child process
(the launcher's arrangement: the service has a process to itself), and how fast a
restarted league replays them (the same per-result maths). Prints results/s
of each repeat and their median. Short games make this matter: a Kuhn poker host
finishes 5-10K episodes a second, and every one is stored, rated and counted in the
payoff table before it is acknowledged.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

from seedleague.league.client import LeagueClient
from seedleague.league.config import LeagueConfig
from seedleague.league.service import League
from seedleague.league.types import MatchResult, Role


def populate(league) -> list[str]:
    """A main agent with 10 snapshots and a main exploiter; returns the opponents the exploiter meets."""
    league.register_player("main", Role.MAIN)
    league.register_player("exploiter", Role.MAIN_EXPLOITER)
    for step in range(100, 1100, 100):
        league.add_snapshot("main", step, f"/pool/main/{step}")
    return [s.key for s in league.snapshots("main")]


def batches(opponents: list[str], count: int, size: int) -> list[list[MatchResult]]:
    outcomes = (1.0, 0.0, 1.0, 0.5, 0.0)
    return [[MatchResult(uuid.uuid4().hex, "exploiter", opponents[i % len(opponents)], outcomes[i % 5], 7)
             for i in range(size)] for _ in range(count)]


def results_per_second(report, work: list[list[MatchResult]]) -> float:
    start = time.perf_counter()
    for batch in work:
        assert report(batch) == len(batch)
    return sum(map(len, work)) / (time.perf_counter() - start)


def in_process(args) -> list[float]:
    rates = []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as run_dir:
            league = League(LeagueConfig(mode="alphastar"), os.path.join(run_dir, "league.sqlite"))
            rates.append(results_per_second(league.report_results, batches(populate(league), args.batches, args.batch)))
            league.close()
    return rates


def restart_replay(args) -> list[float]:
    """Results/s a restarted league replays (payoff, Elo, TrueSkill rebuilt in commit order) before serving."""
    rates = []
    with tempfile.TemporaryDirectory() as run_dir:
        path, config = os.path.join(run_dir, "league.sqlite"), LeagueConfig(mode="alphastar")
        with League(config, path) as league:
            for batch in batches(populate(league), args.batches, args.batch):
                league.report_results(batch)
        for _ in range(args.repeats):
            start = time.perf_counter()
            League(config, path).close()
            rates.append(args.batches * args.batch / (time.perf_counter() - start))
    return rates


def through_grpc(args) -> list[float]:
    rates = []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as run_dir:
            log = open(os.path.join(run_dir, "serve.log"), "w")
            server = subprocess.Popen([sys.executable, "-m", "seedleague.cli", "league", "serve", "--run-dir", run_dir,
                                       "--address", "127.0.0.1:0", "--mode", "alphastar"], stdout=log, stderr=log)
            try:
                client = LeagueClient(_wait_for_address(os.path.join(run_dir, "serve.log")))
                work = batches(populate(client), args.batches, args.batch)
                rates.append(results_per_second(client.report_results, work))
                client.close()
            finally:
                server.terminate()
                server.wait(30)
    return rates


def _wait_for_address(log_path: str, timeout_s: float = 60.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in open(log_path):
            if "serving on " in line:
                return line.split("serving on ")[1].split()[0]
        time.sleep(0.1)
    raise TimeoutError(f"the league service did not start: {open(log_path).read()[-2000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256, help="results per call (a host's league.report_batch)")
    parser.add_argument("--batches", type=int, default=100, help="calls per repeat")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    for name, measure in (("in process", in_process), ("through gRPC", through_grpc), ("restart replay", restart_replay)):
        rates = measure(args)
        print(f"{name:14s} batch {args.batch}: median {statistics.median(rates):8.0f} results/s  "
              f"(repeats: {', '.join(f'{r:.0f}' for r in rates)})", flush=True)


if __name__ == "__main__":
    main()
