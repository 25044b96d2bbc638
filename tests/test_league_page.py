"""The live league page (seedleague/league/page.py) over real sockets: what its JSON shows, the
Wilson interval by hand, env steps and exploitability read from a run's files (page_files.py), every
refusal on its port (and that nothing changes after one), the `league serve` flags, and, in a real
headless Chromium, a page that renders standings, rating curves (over env steps), the payoff heatmap
and the exploitability curves of a real `seedleague league serve` and redraws them as results arrive."""

from __future__ import annotations

import http.client
import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import urllib.request
import uuid

import numpy as np
import pytest

from seedleague import cli
from seedleague.league import pbt, tables
from seedleague.league.client import LeagueClient
from seedleague.league.config import LeagueConfig
from seedleague.league.page import PAGE_READY, LeaguePage, PageConfig, WallClock, thinned
from seedleague.league.page_files import HostProgress, RunFiles
from seedleague.league.payoff import wilson_interval
from seedleague.league.server import load_config
from seedleague.league.service import League
from seedleague.league.types import MatchResult, Mode, Role
from seedleague.security import ClientSecurity
from tests.conftest import wait_for

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOKEN = "page-token-0123"
CONFIG = LeagueConfig(mode=Mode.PFSP, payoff_decay=1.0, min_games=0)


def result(player: str, opponent: str, outcome: float = 1.0) -> MatchResult:
    return MatchResult(uuid.uuid4().hex, player, opponent, outcome, learner_step=3)


def fill(league) -> None:
    """Two players, two snapshots each, and results between them (`league`: a League or a LeagueClient)."""
    league.register_player("main", Role.MAIN)
    league.register_player("x", Role.MAIN_EXPLOITER)
    for step in (0, 100):
        league.check_in("main", step)
        league.add_snapshot("main", step, f"/pool/main/{step}")
        league.add_snapshot("x", step, f"/pool/x/{step}")
    league.report_results([result("main", "x:000000", 1.0)] * 1 + [result("main", "x:000100", o) for o in (1, 0, 0.5)]
                          + [result("x", "main:000100", 0.0) for _ in range(4)])


@pytest.fixture
def page(tmp_path):
    league = League(CONFIG, str(tmp_path / "league.sqlite"))
    fill(league)
    said: list[str] = []
    config = PageConfig(sample_every_s=3600, max_connections=3, request_timeout_s=1.0)
    with LeaguePage(league, config, token=TOKEN, say=said.append) as served:
        yield served, league, said
    league.close()


def get(page: LeaguePage, path: str, headers: dict = None, method: str = "GET") -> tuple[int, dict, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", page.port, timeout=10)
    try:
        connection.request(method, path, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def raw(page: LeaguePage, data: bytes) -> bytes:
    """Send `data` on a fresh connection and read everything the page answers until it closes."""
    with socket.create_connection(("127.0.0.1", page.port), timeout=10) as sock:
        try:
            sock.sendall(data)
        except OSError:  # the page may close while we still send a huge request: its answer is read below
            pass
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_wilson_interval_by_hand():
    low, high = wilson_interval(np.array([0.5, 1.0, 0.3]), np.array([4.0, 10.0, 0.0]))
    # p=0.5, n=4, z=1.96: centre 0.5, half 1.96*sqrt(0.0625 + 3.8416/64)/1.9604 = 0.34997
    np.testing.assert_allclose(low, [0.15004, 0.72246, 0.0], atol=1e-5)
    # p=1, n=10: centre (1 + 0.19208)/1.38416 = 0.86123, half 0.19208/1.38416 = 0.13877 -> high 1.0
    np.testing.assert_allclose(high, [0.84996, 1.0, 1.0], atol=1e-5)


def test_state_shows_standings_payoff_curves_and_draws(page):
    served, league, _ = page
    status, headers, body = get(served, "/api/state", {"Authorization": f"Bearer {TOKEN}"})
    assert status == 200 and headers["Content-Type"] == "application/json"
    state = json.loads(body)
    assert state["results"] == league.results_counted() == 8
    assert [row["key"] for row in state["standings"]] == [s.key for s in tables.rated_first(league.standings()).rows]
    assert {p["name"]: p["learner_step"] for p in state["players"]} == {"main": 100, "x": 0}
    assert [s["key"] for s in state["snapshots"]] == ["main:000000", "x:000000", "main:000100", "x:000100"]
    p = state["payoff"]
    i, j = p["keys"].index("main"), p["keys"].index("x:000100")  # results: the live player against snapshots
    assert p["games"][i][j] == 3.0 and p["win_rate"][i][j] == 0.5  # win, loss, draw
    assert p["low"][i][j] < 0.5 < p["high"][i][j]
    assert p["low"][0][0] == 0.0 and p["high"][0][0] == 1.0  # no games: [0, 1]
    assert set(state["elo_history"]) >= {"main", "x:000100"} and state["wall"]["t"]
    for player in ("main", "x"):
        shares = state["draws"][player]
        assert shares and abs(sum(d["share"] for d in shares) - 1.0) < 0.02


def test_anchors_and_humans_are_shown_apart_from_the_learners(tmp_path):
    league = League(CONFIG, str(tmp_path / "league.sqlite"))
    fill(league)
    league.add_anchor("uniform", "uniform")
    league.register_player("human", Role.HUMAN)
    league.report_results([result("main", "uniform", 1.0), result("human", "uniform", 0.5)])
    with LeaguePage(league, PageConfig(sample_every_s=3600), token=TOKEN, say=lambda line: None) as served:
        state = json.loads(get(served, "/api/state", AUTH)[2])
    league.close()
    assert state["fixed"] == [dict(key="uniform", role="anchor", plays="uniform"),
                              dict(key="human", role="human", plays="a person, through seedleague play")]
    assert [p["name"] for p in state["players"]] == ["main", "x"] and set(state["draws"]) == {"main", "x"}
    roles = {row["key"]: row["role"] for row in state["standings"]}
    assert roles["uniform"] == "anchor" and roles["human"] == "human"
    assert {"uniform", "human"} <= set(state["payoff"]["keys"]) and "uniform" in state["wall"]["elo"]


def test_the_standings_show_each_pbt_members_current_settings(tmp_path):
    config = LeagueConfig(mode=Mode.PFSP, payoff_decay=1.0, min_games=0, snapshot_interval_steps=5, pbt_interval=10,
                          pbt_min_games=20)
    league = League(config, str(tmp_path / "league.sqlite"))
    for name in ("main", "main-1"):
        league.register_player(name, Role.MAIN)
        league.check_in(name, 0)
        league.add_snapshot(name, 0, f"/pool/{name}/0")
    first = ("main:000000", "main-1:000000")
    league.report_results([result("main-1", key, 1.0) for key in first for _ in range(30)]
                          + [result("main", key, 0.0) for key in first for _ in range(30)])
    league.check_in("main", 10)
    league.check_in("main-1", 10)  # the round: main copies main-1, its settings perturbed
    copied = next(row for row in league.pbt_history() if row.kind == pbt.EXPLOIT)
    assert (copied.member, copied.source_key) == ("main", "main-1:000000") and copied.new != copied.old
    with LeaguePage(league, PageConfig(sample_every_s=3600), token=TOKEN, say=lambda line: None) as served:
        state = json.loads(get(served, "/api/state", AUTH)[2])
    league.close()
    shown = {row["key"]: row["pbt"] for row in state["standings"]}
    assert shown["main"] == f"{copied.new.text()}, copied main-1:000000 at round 1"  # its current settings
    joined = pbt.initial_settings(1, np.random.default_rng([0, 1])).text()  # as it joined, and the best member
    assert shown["main-1"] == f"{joined}; the run's output"
    assert shown["main:000000"] == shown["main-1:000000"] == ""  # snapshots are not members


def test_the_page_links_to_a_play_page_while_one_serves(tmp_path):
    league_dir = tmp_path / "run" / "league"
    league_dir.mkdir(parents=True)
    league = League(CONFIG, str(league_dir / "league.sqlite"))
    shown = []
    for content in (None, "http://127.0.0.1:40213/\n", "javascript:alert(1)"):
        if content is not None:
            (league_dir / "play.url").write_text(content)
        with LeaguePage(league, PageConfig(sample_every_s=3600), say=lambda line: None, run_dir=str(league_dir)) as p:
            shown.append(json.loads(get(p, "/api/state")[2])["play"])
    league.close()
    command = f"seedleague play --run-dir {tmp_path / 'run'}"
    assert shown == [dict(command=command, url=""), dict(command=command, url="http://127.0.0.1:40213/"),
                     dict(command=command, url="")]  # none serving, one serving, a file that is no address


def test_draw_preview_leaves_the_leagues_own_draws_alone(tmp_path):
    first, second = (League(CONFIG, str(tmp_path / f"{name}.sqlite")) for name in ("a", "b"))
    for league in (first, second):
        fill(league)
    first.draw_preview("main", 500)
    assert first.get_opponents("main", 50) == second.get_opponents("main", 50)
    first.close()
    second.close()


def test_page_and_its_scripts_are_served_with_the_token_in_a_cookie(page):
    served, _, _ = page
    status, headers, body = get(served, f"/?token={TOKEN}")
    assert status == 200 and b'src="plotly.min.js"' in body and b'src="page.js"' in body
    cookie = headers["Set-Cookie"].split(";")[0]
    assert "HttpOnly" in headers["Set-Cookie"]
    status, _, script = get(served, "/plotly.min.js", {"Cookie": cookie})
    assert status == 200 and len(script) > 1_000_000 and b"plotly" in script[:2000].lower()
    assert get(served, "/page.js", {"Cookie": cookie})[0] == 200
    assert get(served, "/api/state", {"Cookie": cookie})[0] == 200


def _status(answer: bytes) -> tuple[int, bytes]:
    """(status, whole answer) of a raw HTTP answer."""
    return int(answer.split(b" ", 2)[1]), answer


def _get(path: str, headers: dict, method: str = "GET"):
    return lambda served: get(served, path, headers, method)[::2]


AUTH = {"Authorization": f"Bearer {TOKEN}"}
BAD_INPUT = {  # each kind of bad input: served -> (status, body) of the page's answer
    "no token": _get("/api/state", {}),
    "wrong token": _get("/api/state", {"Authorization": "Bearer not-it"}),
    "wrong token in the query": _get("/api/state?token=nope", {}),
    "wrong host": _get("/", {"Host": "evil.example:80", **AUTH}),
    "unknown path": _get("/../etc/passwd", AUTH),
    "a POST": _get("/api/state", {"Content-Length": "99999999", **AUTH}, "POST"),
    "too many query fields": _get("/?" + "&".join(f"a{i}=1" for i in range(50)), AUTH),
    "junk bytes": lambda served: _status(raw(served, b"\x00\xff\xfe junk \x01\r\n\r\n")),
    "a huge request line": lambda served: _status(raw(served, b"GET /" + b"a" * 200_000 + b" HTTP/1.1\r\n\r\n")),
    "a long path": lambda served: _status(raw(served, b"GET /" + b"a" * 5000 + b" HTTP/1.1\r\n\r\n")),
    "too many headers": lambda served: _status(raw(served, b"GET / HTTP/1.1\r\n" + b"X-A: b\r\n" * 200 + b"\r\n")),
    "a huge header": lambda served: _status(raw(served, b"GET / HTTP/1.1\r\nX-A: " + b"a" * 100_000 + b"\r\n\r\n")),
    "wrong token in a cookie": _get("/api/state", {"Cookie": "seedleague_page_token=nope"}),
    "a huge body": lambda served: _status(raw(served, b"POST /api/state HTTP/1.1\r\nAuthorization: Bearer " +
                                              TOKEN.encode() + b"\r\nContent-Length: 4000000\r\n\r\n" + b"x" * 4_000_000)),
    "a TLS handshake": lambda served: _status(raw(served, bytes.fromhex("16030102000100") + bytes(range(256)) * 2)),
    "HTTP/2": lambda served: _status(raw(served, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")),
}


@pytest.mark.parametrize("name, code, says", [
    ("no token", 401, b"?token="), ("wrong token", 401, b"Bearer"), ("wrong token in the query", 401, b"token"),
    ("wrong host", 403, b"open http://127.0.0.1:"), ("unknown path", 404, b"open http://"),
    ("a POST", 405, b"read-only"), ("junk bytes", 400, b"HTTP"), ("a huge request line", 414, b"short"),
    ("a long path", 414, b"short"), ("too many headers", 431, b"fewer"), ("too many query fields", 400, b"token"),
    ("a huge header", 431, b"shorter"), ("wrong token in a cookie", 401, b"?token="), ("a huge body", 405, b"read-only"),
    ("a TLS handshake", 400, b"with http://"), ("HTTP/2", 505, b"not HTTP/2"),
])
def test_bad_input_gets_a_reason_and_changes_nothing(page, name, code, says):
    served, league, said = page
    before = (league.standings(), league.payoff(), league.results_counted(), served.recorder.document())
    status, body = BAD_INPUT[name](served)
    assert status == code, body
    assert says in body, body
    assert (league.standings(), league.payoff(), league.results_counted(), served.recorder.document()) == before
    assert get(served, "/api/state", {"Authorization": f"Bearer {TOKEN}"})[0] == 200  # still serving
    assert any(f"refused {code}" in line for line in said)  # the console was told


def test_connections_beyond_the_limit_get_503_and_idle_ones_are_closed(page):
    served, _, said = page
    idle = [socket.create_connection(("127.0.0.1", served.port), timeout=10) for _ in range(3)]
    try:
        wait_for(lambda: served._server is not None and served._server._slots._value == 0, 10, "3 connections held")
        answer = raw(served, b"GET / HTTP/1.1\r\n\r\n")
        assert answer.startswith(b"HTTP/1.0 503") and b"max-connections" in answer
        for sock in idle:  # request_timeout_s = 1: the page closes each idle connection
            assert sock.recv(65536) == b""
    finally:
        for sock in idle:
            sock.close()
    wait_for(lambda: served._server._slots._value == 3, 10, "the slots back")
    assert get(served, "/api/state", {"Authorization": f"Bearer {TOKEN}"})[0] == 200


def test_thinned_curves_keep_their_ends():
    assert thinned(list(range(10)), 4) == [0, 3, 6, 9]
    assert thinned([1, 2], 4) == [1, 2]


def test_wall_clock_series_stay_bounded_and_keep_their_span():
    wall = WallClock(max_points=4)
    for t in range(10):
        wall.add(float(t), dict(results=t, players=[dict(name="main", learner_step=10 * t)],
                                standings=[dict(key="main", elo=1200.0 + t)], snapshot_elo={}, snapshots=[]))
    assert len(wall.t) < 4 and wall.t[0] == 0.0
    assert len(wall.elo["main"]) == len(wall.steps["main"]) == len(wall.t)
    assert wall.steps["main"][-1] == 10 * wall.t[-1]


def tick(t: float, step: int, env_steps: int, **extra) -> str:
    """One progress tick as a host writes it (seedleague.progress)."""
    return json.dumps(dict(time=t, wall_s=t - 1000.0, env_steps=env_steps, learner_step=step, resumed_from=None,
                           **extra)) + "\n"


def write_run_files(run_dir: pathlib.Path) -> None:
    """What the hosts, `seedleague eval` and `seedleague exploit` leave in a run of players main and x (`fill`)."""
    (run_dir / "players" / "x").mkdir(parents=True)
    # main (the first host): 10 env steps per learner step; x: 5 per step, started 10 s later
    (run_dir / "progress.jsonl").write_text("".join(tick(1000.0 + t, 10 * t, 100 * t) for t in (1, 5, 10, 20)))
    (run_dir / "players" / "x" / "progress.jsonl").write_text(tick(1020.0, 100, 500) + '{"torn')
    (run_dir / "eval").mkdir()
    (run_dir / "eval" / "history.jsonl").write_text("".join(json.dumps(dict(
        time=2000.0 + i, step=100 * i, env_steps=1000 * i, wall_s=10.0 * i, policy=f"main:{i}",
        results=dict(exploitability=0.5 / (i + 1), param_average_exploitability=0.25 / (i + 1), games=100))) + "\n"
        for i in range(3)) + "not json\n")
    finished = run_dir / "exploit" / "final-1"
    finished.mkdir(parents=True)
    (finished / "summary.json").write_text(json.dumps(dict(exploit=dict(
        read_out=True, still_rising=False, estimate=dict(value=0.12, ci95=0.01, games=5000),
        curve=[dict(t_s=5.0, games=10, value=-0.3), dict(t_s=10.0, games=10, value=0.1)]))))
    training = run_dir / "exploit" / "final-2"
    training.mkdir()
    (training / "progress.jsonl").write_text(tick(3000.0, 5, 50, mean_return=-0.2) + tick(3002.0, 9, 90, mean_return=0.05))


def test_host_progress_places_steps_at_env_steps_and_times_by_hand(tmp_path):
    path = tmp_path / "progress.jsonl"
    # a fresh host: the origin is its start (time - wall_s); steps 0..100 over env steps 0..1000, idle at 100
    path.write_text(tick(1002.0, 20, 200) + tick(1010.0, 100, 1000) + tick(1012.0, 100, 1000))
    host = HostProgress(str(path))
    host.update()
    assert host.at_steps([0, 10, 60, 100, 101]) == [[0, 1000.0], [100, 1001.0], [600, 1006.0], [1000, 1010.0],
                                                    [None, None]]  # 100 at its first tick; beyond the last: unplaced
    assert host.env_steps_at_times([999.0, 1001.0, 1011.0, 1013.0]) == [None, 100, 1000, None]
    # resumed from step 60's checkpoint: the points after step 60 are superseded; a torn line waits for its end
    with open(path, "a") as f:
        f.write(tick(1020.0, 60, 600).replace('"resumed_from": null', '"resumed_from": 60') + '{"time": 10')
    host.update()
    assert host.learner_step == [0, 20, 60] and host.env_steps == [0, 200, 600]
    with open(path, "a") as f:
        f.write('25.0, "wall_s": 1, "env_steps": 900, "learner_step": 90, "resumed_from": 60}\n')
    host.update()
    assert host.learner_step == [0, 20, 60, 90] and host.time[-1] == 1025.0


def test_run_files_give_env_steps_evaluations_and_best_responses(tmp_path):
    write_run_files(tmp_path)
    snapshots = [dict(key="main:000100", player="main", step=100), dict(key="x:000100", player="x", step=100),
                 dict(key="main:000300", player="main", step=300)]
    found = RunFiles(str(tmp_path)).read(["main", "x"], snapshots, [1005.0, 1020.0])
    assert found["snapshot_at"] == {"main:000100": [1000, 1010.0], "x:000100": [500, 1020.0],
                                    "main:000300": [None, None]}  # main's ticks reach step 200
    assert found["wall_env_steps"] == {"main": [500, 2000], "x": [125, 500]}  # x started at 1000 too (wall_s)
    assert found["progress"]["main"]["env_steps"] == [0, 100, 500, 1000, 2000]  # the origin, then the ticks
    assert found["evaluations"] == {
        "exploitability": [[0, 0.0, 0, 0.5, 2000.0], [1000, 10.0, 100, 0.25, 2001.0], [2000, 20.0, 200, 0.166667, 2002.0]],
        "param_average_exploitability": [[0, 0.0, 0, 0.25, 2000.0], [1000, 10.0, 100, 0.125, 2001.0],
                                         [2000, 20.0, 200, 0.083333, 2002.0]]}
    finished, training = found["best_responses"]
    assert finished == dict(name="final-1", finished=True, estimate=0.12, ci95=0.01, games=5000, read_out=True,
                            still_rising=False, error="", curve=[[5.0, -0.3], [10.0, 0.1]])
    assert training == dict(name="final-2", finished=False, curve=[[2000.0, -0.2], [2002.0, 0.05]])


def test_the_page_shows_the_run_files_beside_its_league(tmp_path):
    write_run_files(tmp_path)
    (tmp_path / "league").mkdir()
    league = League(CONFIG, str(tmp_path / "league" / "league.sqlite"))
    fill(league)
    with LeaguePage(league, PageConfig(sample_every_s=3600), say=lambda line: None,
                    run_dir=str(tmp_path / "league")) as served:
        state = json.loads(get(served, "/api/state")[2])
    league.close()
    assert state["run_dir"] == str(tmp_path)
    assert state["snapshot_at"]["main:000100"] == [1000, 1010.0] and state["snapshot_at"]["main:000000"][0] == 0
    assert set(state["evaluations"]) == {"exploitability", "param_average_exploitability"}
    assert [r["name"] for r in state["best_responses"]] == ["final-1", "final-2"]
    assert set(state["wall_env_steps"]) == {"main", "x"}


def test_serve_refuses_a_bad_page_address(tmp_path, capsys):
    assert cli.main(["league", "serve", "--run-dir", str(tmp_path), "--page.address", "nowhere"]) == 2
    assert "page address 'nowhere' is not HOST:PORT" in capsys.readouterr().err


# --- a real `seedleague league serve`, seen in a real headless Chromium ---------------------------


CHROMIUM = next((path for path in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if path), None)


PFSP_FLAGS = ("--mode", "pfsp", "--payoff_decay", "1.0", "--min_games", "0")


def _start_serve(run_dir: str, *config_flags: str) -> tuple[subprocess.Popen, str, str]:
    """A league process with its page; returns (process, gRPC address, page URL)."""
    command = [sys.executable, "-m", "seedleague.cli", "league", "serve", "--run-dir", run_dir, "--address",
               "127.0.0.1:0", "--page.address", "127.0.0.1:0", "--page.sample-every-s", "0.2", "--log-every-s",
               "3600", *config_flags]
    env = dict(os.environ, PYTHONUNBUFFERED="1", SEEDLEAGUE_TOKEN=TOKEN)
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = [proc.stdout.readline(), proc.stdout.readline()]
    if not (lines[0].startswith("league serving on ") and lines[1].startswith(PAGE_READY)):
        proc.kill()
        pytest.fail(f"league serve did not start with its page: {''.join(lines)}{proc.stdout.read()}")
    return proc, lines[0].split()[-1], lines[1].split()[3]


def _dump(url: str, user_dir: str) -> str:
    """The page's DOM after chromium ran its scripts (virtual time: the polls and redraws of 8 s)."""
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               f"--user-data-dir={user_dir}", "--virtual-time-budget=8000", "--dump-dom", url]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "<body" in done.stdout, done.stderr[-2000:]
    return done.stdout


def _attribute(dom: str, element_id: str, name: str) -> int:
    match = re.search(rf'id="{element_id}"[^>]*?{name}="(\d+)"', dom)
    assert match, f"#{element_id} has no {name}: the page did not draw it"
    return int(match.group(1))


def _rendered(dom: str) -> dict:
    """What the page drew: the standings rows, the results it shows, and the points of three charts."""
    body = re.search(r'<body[^>]*data-results="(\d+)"', dom)
    assert body, "the page never showed a state"
    standings = re.search(r'id="standings".*?<tbody>(.*?)</tbody>', dom, re.S).group(1)
    assert dom.count('class="main-svg"') >= 6  # plotly drew its figures
    assert 'class="hm"' in dom or "heatmaplayer" in dom  # ... the heatmap among them
    axis = re.search(r'id="elo-steps"[^>]*?data-axis="(\w+)"', dom)
    return dict(results=int(body.group(1)), standings=standings.count("<tr>"), text=re.sub("<[^>]+>", " ", standings),
                heatmap=_attribute(dom, "payoff", "data-points"), curve=_attribute(dom, "elo-results", "data-points"),
                steps=_attribute(dom, "elo-steps", "data-points"), steps_axis=axis and axis.group(1),
                exploit=_attribute(dom, "exploit", "data-points"), responses=_attribute(dom, "best-response", "data-points"))


def _page_state(url: str) -> dict:
    with urllib.request.urlopen(url + "api/state?token=" + TOKEN, timeout=10) as response:
        return json.loads(response.read())


def _page_results(url: str) -> int:
    return _page_state(url)["results"]


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (make chromium, or apt-get install chromium)")
def test_a_real_browser_sees_the_league_change_as_results_arrive(tmp_path):
    write_run_files(tmp_path)  # the hosts' progress, evaluations and best responses beside the league
    proc, address, url = _start_serve(str(tmp_path / "league"), *PFSP_FLAGS, "--pbt-interval", "1000")
    client = LeagueClient(address, ClientSecurity(token=TOKEN))
    try:
        fill(client)
        wait_for(lambda: _page_results(url) == 8, 30, "the page's data to count 8 results")
        first = _rendered(_dump(url + "?token=" + TOKEN, str(tmp_path / "chromium")))
        assert first["results"] == 8 and first["standings"] == 6 and "main:000100" in first["text"]
        assert "alpha x1.00 lr x1.00 kl x1.00" in first["text"]  # main, a PBT member: its settings' column
        assert first["heatmap"] == 6 and first["curve"] > 0 and first["steps"] == 4
        # snapshots over env steps (the hosts' progress files), the evaluations' and best responses' curves
        assert first["steps_axis"] == "env" and first["exploit"] == 6 and first["responses"] == 5

        client.check_in("main", 200)
        client.add_snapshot("main", 200, "/pool/main/200")
        client.report_results([result("main", "main:000200", 1.0) for _ in range(12)])
        wait_for(lambda: _page_results(url) == 20, 30, "the page's data to count 20 results")
        second = _rendered(_dump(url + "?token=" + TOKEN, str(tmp_path / "chromium")))
        assert second["results"] == 20 and second["standings"] == 7 and "main:000200" in second["text"]
        assert second["heatmap"] == 7 and second["curve"] > first["curve"] and second["steps"] == 5  # main:200 placed
        assert second["text"] != first["text"]
    finally:
        client.close()
        proc.terminate()
        proc.wait(timeout=30)


# --- ratings and payoffs across --resume, and the page of a finished run ---------------------------

# One Adam step an update (the game recipe takes 4 x 4 on a batch of 64 unrolls): these runs check ratings, payoffs and
# the page across --resume, not learning, and their 120 updates are CPU the workers and league then have.
KUHN = ("--env", "openspiel:kuhn_poker", "--no-eval", "--league-page", "off", "--checkpoint.interval-s", "2",
        "--league.check-in-interval-s", "0.5", "--league-config.snapshot-interval-steps", "20", "--learner.epochs", "1",
        "--learner.minibatches", "1")


def _train(run_dir: str, *flags: str) -> dict:
    """A real `seedleague train` on Kuhn poker to its end; returns its summary.json."""
    done = subprocess.run([sys.executable, "-m", "seedleague.cli", "train", *KUHN, "--run-dir", run_dir, *flags],
                          cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)


def _league_of(run_dir: str) -> tuple:
    """(standings, payoff, Elo history, results counted) of a run's league, read back from its database."""
    league_dir = os.path.join(run_dir, "league")
    with League(load_config(league_dir), os.path.join(league_dir, "league.sqlite")) as league:
        return league.standings(), league.payoff(), league.elo_history(), league.results_counted()


def test_a_finished_runs_page_shows_its_ratings_and_resume_carries_every_rating_and_payoff_on(tmp_path):
    run_dir = str(tmp_path / "run")
    summary = _train(run_dir, "--max-learner-steps", "60")
    standings, matrix, history, results = _league_of(run_dir)
    assert results > 0 and len(matrix.keys) >= 3
    # The game preset's uniform anchor was rated in the run, against the learner, on the same scale.
    anchor = next(row for row in standings if row.key == "uniform")
    assert anchor.role == Role.ANCHOR and anchor.games > 0
    # The database holds every key the live league reported at the end of the run (the summary reads the
    # standings before the host's last delivery of results, so their numbers may trail the database's).
    assert {row["key"] for row in summary["standings"]} <= {row.key for row in standings}

    # Serving the finished run's league again (no flags: its saved config) shows the same on its page.
    proc, _, url = _start_serve(os.path.join(run_dir, "league"))
    try:
        state = _page_state(url)
        shown = {row["key"]: row["elo"] for row in state["standings"]}
        assert shown == {row.key: round(row.elo, 1) for row in tables.rated_first(standings, 40).rows}
        assert state["results"] == results and state["mode"] == load_config(os.path.join(run_dir, "league")).mode.value
        assert state["fixed"] == [dict(key="uniform", role="anchor", plays="uniform")]
        # each snapshot at the env steps its host had reached, from the run's own progress.jsonl
        env_steps = [state["snapshot_at"][s["key"]][0] for s in state["snapshots"]]
        placed = [n for n in env_steps if n is not None]
        assert env_steps[0] == 0 and len(placed) >= 2 and placed == sorted(placed) and placed[-1] > 0, env_steps
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0

    resumed = _train(run_dir, "--resume", "--max-learner-steps", "120")
    assert resumed["learner_step"] > summary["learner_step"]
    after_standings, after_matrix, after_history, after_results = _league_of(run_dir)
    assert after_results > results
    assert after_matrix.keys[:len(matrix.keys)] == matrix.keys  # every key kept, in its place
    for key, points in history.items():  # ratings went on from where the run ended, never from the start
        assert after_history[key][:len(points)] == points, key
    # The anchor is the same member after the resume (joined once), and kept being rated.
    assert after_matrix.keys.count("uniform") == 1
    assert next(row for row in after_standings if row.key == "uniform").games != anchor.games
