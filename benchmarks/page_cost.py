"""What the live league page costs the league: its result intake with the page open and refreshing, against the same
league with no page, in one sitting.

    .venv/bin/python -m benchmarks.page_cost                      # 5 pairs, 4 tabs, 1000 batches of 256 each
    .venv/bin/python -m benchmarks.page_cost --repeats 7 --tabs 8

The load is `benchmarks.league_rate`'s through gRPC (the league intake of docs/reliability.md): a fresh
`seedleague league serve` in a child process (AlphaStar mode, a main agent with 10 snapshots and a main
exploiter), `--batches` calls of `--batch` new results each, as fast as the service acknowledges them. With the
page on (its defaults: a sample every 2 s), `--tabs` simulated browser tabs in another process poll
`/api/state` every 2 s, as the page's script does, and reload the whole page (HTML, script, plotly.min.js: a
cold cache, the worst case) every `--reload-s` seconds, all through the run. With it off, `--no-page`. The two
alternate, starting with the other one each pair, so drift on a shared machine falls on both. Per run it checks
that no result was lost (every call acknowledged all its results as new, and the league's database holds every
one after the service stopped) and prints results/s; at the end the medians and their ratio, and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from benchmarks.league_rate import batches, populate, results_per_second
from seedleague.league.client import LeagueClient

PAGE_PATHS = ("/", "/page.js", "/plotly.min.js", "/api/state")


def serve(run_dir: str, page: bool) -> tuple[subprocess.Popen, str, str]:
    """A league service in a child process; (process, gRPC address, page URL or "")."""
    flags = ["--page.address", "127.0.0.1:0"] if page else ["--no-page"]
    proc = subprocess.Popen([sys.executable, "-m", "seedleague.cli", "league", "serve", "--run-dir", run_dir,
                             "--address", "127.0.0.1:0", "--mode", "alphastar", "--log-every-s", "3600", *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    address, url = "", ""
    while not address or (page and not url):
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"league serve exited {proc.wait()} before it served")
        if line.startswith("league serving on "):
            address = line.split()[-1]
        elif line.startswith("league page on "):
            url = line.split()[3]
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # drain its console
    return proc, address, url


def tabs_main(url: str, tabs: int, reload_s: float) -> None:
    """`tabs` browser tabs on `url` until SIGTERM: each polls api/state every 2 s and reloads the whole page every
    `reload_s`; then prints one JSON line of the requests made, failed and the bytes read."""
    counts = dict(requests=0, failed=0, bytes=0)
    lock, stop = threading.Lock(), threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def fetch(path: str) -> None:
        try:
            with urllib.request.urlopen(url.rstrip("/") + path, timeout=10) as response:
                size, ok = len(response.read()), response.status == 200
        except OSError:
            size, ok = 0, False
        with lock:
            counts["requests"] += 1
            counts["failed"] += not ok
            counts["bytes"] += size

    def tab(offset: float) -> None:
        stop.wait(offset)
        next_reload = time.monotonic()
        while not stop.is_set():
            if time.monotonic() >= next_reload:
                for path in PAGE_PATHS:
                    fetch(path)
                next_reload += reload_s
            else:
                fetch("/api/state")
            stop.wait(2.0)

    threads = [threading.Thread(target=tab, args=(2.0 * i / tabs,)) for i in range(tabs)]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        for thread in threads:
            thread.join(0.2)
    print(json.dumps(counts), flush=True)


def one_run(args, page: bool) -> dict:
    """Results/s into a fresh league with its page on (and tabs open) or off; raises if a result was lost."""
    with tempfile.TemporaryDirectory() as run_dir:
        proc, address, url = serve(run_dir, page)
        tabs = None
        try:
            client = LeagueClient(address)
            work = batches(populate(client), args.batches, args.batch)
            if page:
                tabs = subprocess.Popen([sys.executable, "-m", "benchmarks.page_cost", "--tab-url", url, "--tabs",
                                         str(args.tabs), "--reload-s", str(args.reload_s)],
                                        stdout=subprocess.PIPE, text=True)
                time.sleep(1.0)  # every tab has loaded the page once
            rate = results_per_second(client.report_results, work)  # asserts each call took all its results as new
            client.close()
        finally:
            requests = {}
            if tabs is not None:
                tabs.terminate()
                requests = json.loads(tabs.communicate(timeout=30)[0].strip().splitlines()[-1] or "{}")
            proc.terminate()
            proc.wait(30)
        with sqlite3.connect(os.path.join(run_dir, "league.sqlite")) as db:
            stored = db.execute("SELECT COUNT(*) FROM results").fetchone()[0]
    sent = args.batches * args.batch
    if stored != sent:
        raise AssertionError(f"lost results: sent {sent}, the league stored {stored}")
    if requests.get("failed"):
        raise AssertionError(f"the page failed {requests['failed']} of its {requests['requests']} requests")
    return dict(page=page, results_per_s=rate, sent=sent, stored=stored, requests=requests.get("requests", 0),
                mib=requests.get("bytes", 0) / 2**20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256, help="results per call (a host's league.report_batch)")
    parser.add_argument("--batches", type=int, default=1000, help="calls per run")
    parser.add_argument("--repeats", type=int, default=5, help="pairs of runs, page on and off")
    parser.add_argument("--tabs", type=int, default=4, help="browser tabs on the page while it is on")
    parser.add_argument("--reload-s", type=float, default=10.0, help="each tab reloads the whole page this often")
    parser.add_argument("--tab-url", default="", help=argparse.SUPPRESS)  # the tabs' own process
    args = parser.parse_args()
    if args.tab_url:
        return tabs_main(args.tab_url, args.tabs, args.reload_s)
    rates: dict[bool, list[float]] = {True: [], False: []}
    for repeat in range(args.repeats):
        for page in ((True, False) if repeat % 2 == 0 else (False, True)):
            run = one_run(args, page)
            rates[page].append(run["results_per_s"])
            tabs = f", the tabs' {run['requests']} requests ({run['mib']:.0f} MiB) all answered" if page else ""
            print(f"repeat {repeat + 1}: page {'on ' if page else 'off'} {run['results_per_s']:8.0f} results/s, "
                  f"{run['stored']} of {run['sent']} stored{tabs}", flush=True)
    on, off = statistics.median(rates[True]), statistics.median(rates[False])
    print(f"median results/s: page on {on:.0f}, page off {off:.0f}: on/off {on / off:.3f} "
          f"({args.tabs} tabs, reload every {args.reload_s:g} s; {args.repeats} pairs of {args.batches} x {args.batch})")
    print(json.dumps(dict(on=rates[True], off=rates[False], median_on=on, median_off=off, ratio=on / off,
                          tabs=args.tabs, batches=args.batches, batch=args.batch)))


if __name__ == "__main__":
    main()
