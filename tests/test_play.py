"""`seedleague play` (seedleague/play): the rules of a person's game against a policy (OpenSpiel's and PettingZoo's
classic games), the play page's routes and refusals over real sockets (and that a refusal changes nothing), and, in
a real headless Chromium driven over the DevTools protocol, one full game each of Kuhn poker, OpenSpiel's
tic-tac-toe and PettingZoo's tictactoe_v3 played by clicking the page's move buttons against the outputs of real
`seedleague train` runs, each game then found in the run's league standings as a result of the human member."""

from __future__ import annotations

import fcntl
import http.client
import json
import os
import pathlib
import socket
import subprocess
import sys
import time

import numpy as np
import pyspiel
import pytest

from seedleague.league.client import LeagueClient
from seedleague.league.server import load_config
from seedleague.league.service import League
from seedleague.league.types import Role
from seedleague.play.results import LeagueResults
from seedleague.play.server import PLAY_READY, PlayConfig, PlayPage
from seedleague.play.classic import ClassicGame, board_text
from seedleague.play.session import OpenSpielGame, PlaySession
from tests.conftest import seedleague_here
from tests.test_league_page import CHROMIUM

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOKEN = "play-token-0123"


class Uniform:
    """A policy that plays every legal move with equal probability (the `api.Policy` query the session uses)."""

    def action_probabilities(self, observation, mask):
        return mask / mask.sum()


class Leaning(Uniform):
    """Puts 0.7 on the highest legal action id and spreads the rest."""

    def action_probabilities(self, observation, mask):
        probs = 0.3 * mask / mask.sum()
        probs[np.flatnonzero(mask)[-1]] += 0.7
        return probs


class Sink:
    """The play page's league side, recorded in memory."""

    def __init__(self):
        self.outcomes: list[float] = []

    def record(self, outcome: float) -> str:
        self.outcomes.append(outcome)
        return f"recorded {outcome}"

    def standings(self) -> list[dict]:
        return [dict(key="human", role="human", elo=1200.0, games=len(self.outcomes), win_rate=0.5)]


def play_out(session: PlaySession) -> None:
    while not session.finished:
        session.move(session.view()["legal"][0]["action"])


@pytest.mark.parametrize("name", ["kuhn_poker", "tic_tac_toe"])
@pytest.mark.parametrize("seat", [0, 1])
def test_a_game_is_played_to_its_end_from_either_seat(name, seat):
    game = pyspiel.load_game(name)
    session = PlaySession(game, Uniform(), seat, False, np.random.default_rng(seat))
    play_out(session)
    view = session.view()
    returns = session.state.returns()
    assert view["finished"] and view["legal"] == [] and view["returns"] == list(returns)
    assert session.outcome() == {1: 1.0, 0: 0.5, -1: 0.0}[int(np.sign(returns[seat] - returns[1 - seat]))]
    assert all(m["probabilities"] for m in view["agent_moves"])
    assert {h["who"] for h in view["history"]} >= {"you", "agent"}


def test_the_person_sees_their_own_view_of_a_hidden_hand_and_the_whole_state_at_the_end():
    session = PlaySession(pyspiel.load_game("kuhn_poker"), Uniform(), 0, False, np.random.default_rng(0))
    view = session.view()
    assert [h["move"] for h in view["history"]] == ["(hidden)", "(hidden)"]  # the deals
    assert view["state"] == session.state.information_state_string(0)  # one's own card, not the agent's
    play_out(session)
    assert session.view()["state"] == str(session.state)
    assert all(h["move"] != "(hidden)" for h in session.view()["history"])


def test_greedy_plays_the_most_probable_move_and_shows_the_probabilities():
    session = PlaySession(pyspiel.load_game("tic_tac_toe"), Leaning(), 1, True, np.random.default_rng(0))
    first = session.view()["agent_moves"][0]
    assert first["move"] == "x(2,2)"  # action 8, the highest id, at 0.7 + 0.3/9
    assert abs(sum(p["p"] for p in first["probabilities"]) - 1.0) < 1e-3 and len(first["probabilities"]) == 9


def test_an_illegal_move_is_refused_in_one_line_and_changes_nothing():
    session = PlaySession(pyspiel.load_game("tic_tac_toe"), Uniform(), 0, False, np.random.default_rng(0))
    session.move(4)
    before = str(session.state)
    for bad in (4, -1, 99, "4", True, None):
        with pytest.raises(ValueError, match="is not legal now: choose one of"):
            session.move(bad)
    assert str(session.state) == before


# --- PettingZoo's classic games -------------------------------------------------------------------------


class Seen(Uniform):
    """Uniform, keeping what the agent was shown."""

    def __init__(self):
        self.seen = []

    def action_probabilities(self, observation, mask):
        self.seen.append((observation, mask))
        return super().action_probabilities(observation, mask)


@pytest.mark.parametrize("seat", [0, 1])
def test_a_classic_game_is_played_to_its_end_from_either_seat_and_the_agent_sees_what_the_worker_sends(seat):
    from envs.pettingzoo_classic import ClassicVectorGame

    agent = Seen()
    session = ClassicGame("tictactoe_v3").session(agent, seat, False, np.random.default_rng(seat))
    assert session.view()["finished"] is False and len(session.view()["legal"]) == 9 - seat
    play_out(session)
    view = session.view()
    assert view["finished"] and view["legal"] == [] and sorted(view["returns"]) in ([-1.0, 1.0], [0.0, 0.0])
    assert session.outcome() == {1: 1.0, 0: 0.5, -1: 0.0}[int(np.sign(view["returns"][seat] - view["returns"][1 - seat]))]
    spec = ClassicVectorGame("tictactoe_v3", num_envs=1).spec  # the worker's observation: float32 [2, 3, 3] planes
    observation, mask = agent.seen[0]
    assert observation.shape == spec.observation.tensors[0].shape  # the spec's one tensor, "observation"
    assert observation.dtype == np.float32 and mask.dtype == bool
    assert [h["who"] for h in view["history"]][:2] == (["you", "agent"] if seat == 0 else ["agent", "you"])


def test_classic_moves_are_named_by_the_cells_they_mark_and_the_board_is_drawn_from_the_persons_seat():
    session = ClassicGame("connect_four_v3").session(Leaning(), 0, True, np.random.default_rng(0))
    legal = session.view()["legal"]
    assert [m["text"] for m in legal] == [f"move {c}: row 5 col {c}" for c in range(7)]  # a piece falls to row 5
    session.move(3)
    # the agent (greedy, 0.7 on the highest legal id) dropped into column 6; the person's piece is plane 1
    assert session.view()["history"] == [dict(who="you", move="move 3: row 5 col 3"),
                                         dict(who="agent", move="move 6: row 5 col 6")]
    lines = session.view()["state"].splitlines()
    assert lines[6].split() == ["row", "5", ".", ".", ".", "1", ".", ".", "2"]
    first = session.view()["agent_moves"][0]
    assert first["move"] == "move 6: row 5 col 6" and abs(sum(p["p"] for p in first["probabilities"]) - 1) < 1e-3
    assert board_text(np.arange(3.0)) == "[0. 1. 2.]"  # a vector observation: its numbers


def test_an_illegal_classic_move_is_refused_in_one_line_and_changes_nothing():
    session = ClassicGame("tictactoe_v3").session(Uniform(), 0, False, np.random.default_rng(0))
    session.move(4)
    before = session.view()
    for bad in (4, -1, 99, "4", True, None):
        with pytest.raises(ValueError, match="is not legal now: choose one of"):
            session.move(bad)
    assert session.view() == before


def test_play_refuses_a_game_of_another_family_in_one_line():
    from seedleague.play.cli import _game

    with pytest.raises(ValueError, match="serves OpenSpiel games .* and PettingZoo's classic games"):
        _game("/runs/x", "CartPole-v1")
    with pytest.raises(ValueError, match="no such classic game"):
        _game("/runs/x", "pettingzoo:classic/nothing_v1")


# --- the play page over real sockets --------------------------------------------------------------------


@pytest.fixture
def page():
    sink = Sink()
    config = PlayConfig(max_connections=4, request_timeout_s=1.0, max_tables=2)
    said: list[str] = []
    with PlayPage(OpenSpielGame(pyspiel.load_game("tic_tac_toe")), Uniform(), sink, config, token=TOKEN, say=said.append,
                  describe=dict(member="human", anchor="output-1")) as served:
        yield served, sink, said


def request(served, method: str, path: str, body=None, headers=None) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
    try:
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        connection.request(method, path, body=data, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {"Content-Type": "application/json", **AUTH}


def test_a_game_through_the_pages_routes_keeps_a_score_and_records_each_game_once(page):
    served, sink, _ = page
    status, body = request(served, "POST", "/api/new", dict(seat=0), JSON)
    assert status == 200
    answer = json.loads(body)
    while not answer["view"]["finished"]:
        action = answer["view"]["legal"][0]["action"]
        answer = json.loads(request(served, "POST", "/api/move", dict(table=answer["table"], action=action), JSON)[1])
    assert answer["score"]["games"] == 1 and sink.outcomes == [answer["view"]["outcome"]]
    assert answer["recorded"] == f"recorded {answer['view']['outcome']}"
    again = json.loads(request(served, "POST", "/api/new", dict(seat=1, table=answer["table"]), JSON)[1])
    assert again["table"] == answer["table"] and again["score"]["games"] == 1 and again["view"]["seat"] == 1
    info = json.loads(request(served, "GET", "/api/info", headers=AUTH)[1])
    assert info["game"] == "tic_tac_toe" and info["anchor"] == "output-1"
    assert json.loads(request(served, "GET", "/api/standings", headers=AUTH)[1])["standings"][0]["games"] == 1


def _raw(served, data: bytes) -> tuple[int, bytes]:
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    answer = b"".join(chunks)
    return int(answer.split(b" ", 2)[1]), answer


BAD_INPUT = {
    "no token": (lambda s: request(s, "POST", "/api/new", dict(seat=0), {"Content-Type": "application/json"}),
                 401, b"token"),
    "wrong token": (lambda s: request(s, "GET", "/api/info", headers={"Authorization": "Bearer nope"}), 401, b"Bearer"),
    "wrong host": (lambda s: request(s, "POST", "/api/new", dict(seat=0), {"Host": "evil.example", **JSON}),
                   403, b"loopback"),
    "not JSON": (lambda s: request(s, "POST", "/api/new", b"seat=0", AUTH), 415, b"application/json"),
    "a huge body": (lambda s: request(s, "POST", "/api/new", b"{" + b" " * 100_000 + b"}", JSON), 413, b"at most"),
    "a JSON list": (lambda s: request(s, "POST", "/api/new", [1, 2], JSON), 400, b"JSON object"),
    "junk JSON": (lambda s: request(s, "POST", "/api/new", b"{\x00\xff", JSON), 400, b"bad request"),
    "a bad seat": (lambda s: request(s, "POST", "/api/new", dict(seat=7), JSON), 400, b"seat must be 0 or 1"),
    "greedy not a bool": (lambda s: request(s, "POST", "/api/new", dict(greedy="yes"), JSON), 400, b"true or false"),
    "an unknown game": (lambda s: request(s, "POST", "/api/move", dict(table="x", action=0), JSON), 400,
                        b"start a new game"),
    "an unknown path": (lambda s: request(s, "POST", "/api/delete", dict(), JSON), 404, b"open http://"),
    "a PUT": (lambda s: request(s, "PUT", "/api/new", dict(), JSON), 405, b"GET"),
    "junk bytes": (lambda s: _raw(s, b"\x00\xff\xfe junk \x01\r\n\r\n"), 400, b"HTTP"),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUT))
def test_bad_input_gets_a_one_line_reason_and_changes_nothing(page, name):
    served, sink, said = page
    status, body = request(served, "POST", "/api/new", dict(seat=1), JSON)
    table = json.loads(body)["table"]
    before = (json.dumps(served._tables[table].session.view()), served._tables[table].score(), list(sink.outcomes),
              list(served._tables))
    send, code, says = BAD_INPUT[name]
    status, body = send(served)
    assert status == code and says in body, body
    assert body.count(b"\n") <= 1 or code == 400 and name == "junk bytes" and body.endswith(b"\n")
    assert (json.dumps(served._tables[table].session.view()), served._tables[table].score(), sink.outcomes,
            list(served._tables)) == before
    assert any(f"refused {code}" in line for line in said)
    assert request(served, "GET", "/api/info", headers=AUTH)[0] == 200  # still serving


def test_an_illegal_move_through_the_page_is_refused_and_the_game_goes_on(page):
    served, sink, _ = page
    answer = json.loads(request(served, "POST", "/api/new", dict(seat=0), JSON)[1])
    status, body = request(served, "POST", "/api/move", dict(table=answer["table"], action=99), JSON)
    assert status == 400 and b"is not legal now: choose one of [0, 1, 2, 3, 4, 5, 6, 7, 8]" in body
    legal = answer["view"]["legal"][0]["action"]
    assert request(served, "POST", "/api/move", dict(table=answer["table"], action=legal), JSON)[0] == 200


def test_the_command_refuses_a_run_dir_it_cannot_play_in_one_line(tmp_path, capsys):
    for run_dir, says in ((tmp_path / "none", "no such directory"), (tmp_path, "has no output yet")):
        done = seedleague_here(capsys, "play", "--run-dir", str(run_dir))  # seedleague play's main, in this process
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith("seedleague play: ") and says in done.stderr.lower(), done.stderr


def test_games_go_to_the_league_service_serving_the_run_and_to_its_database_once_it_stopped(tmp_path):
    league_dir = str(tmp_path / "league")
    results = LeagueResults(league_dir, "human", "output-7", "/runs/x")
    proc = subprocess.Popen([sys.executable, "-m", "seedleague.cli", "league", "serve", "--run-dir", league_dir,
                             "--address", "127.0.0.1:0", "--no-page", "--log-every-s", "3600"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        address = proc.stdout.readline().split()[-1]
        assert results.where() == address  # the service's league.serving marker
        results.join()
        assert results.record(1.0).startswith("recorded in the league: human beat output-7")
        client = LeagueClient(address)
        rows = {row.key: row for row in client.standings()}
        client.close()
        assert rows["human"].games == 1 and rows["output-7"].role == Role.ANCHOR
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    assert results.where() == ""  # the marker went with the service: the database now
    results.join()  # the same members: unchanged
    assert results.record(0.0).startswith("recorded in the league: human lost to output-7")
    rows = {row["key"]: row for row in results.standings()}
    assert round(rows["human"]["games"]) == 2 and round(rows["output-7"]["games"]) == 2  # decayed by 0.99


# --- real runs' outputs, played in a real headless Chromium ------------------------------------------------

GAMES = ("openspiel:kuhn_poker", "openspiel:tic_tac_toe", "pettingzoo:classic/tictactoe_v3")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """{env id: run dir} of tiny real `seedleague train` runs, trained side by side (strength is irrelevant: one
    Adam step an update, where the board games' presets unroll 16 on CPU, each a convolution to compile)."""
    root = tmp_path_factory.mktemp("runs")
    runs = {game: str(root / game.replace(":", "-").replace("/", "-")) for game in GAMES}
    procs = {game: subprocess.Popen(
        [sys.executable, "-m", "seedleague.cli", "train", "--env", game, "--run-dir", run_dir,
         "--max-learner-steps", "4", "--no-eval", "--league-page", "off", "--envs-per-worker", "16",
         "--learner.epochs", "1", "--learner.minibatches", "1"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for game, run_dir in runs.items()}
    for game, proc in procs.items():
        out = proc.communicate(timeout=300)[0]
        assert proc.returncode == 0, out[-3000:]
    return runs


class Browser:
    """Headless Chromium driven over its DevTools protocol on a pipe (--remote-debugging-pipe: NUL-separated
    JSON commands on fd 3, answers and events on fd 4), so a test can click the page's buttons."""

    def __init__(self, user_dir: str):
        to_chromium, self._write = os.pipe()
        self._read, from_chromium = os.pipe()
        # above fd 10 first, so neither end is already 3 or 4 (dup2 onto itself would keep close-on-exec)
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_chromium, from_chromium)]
        for fd in (to_chromium, from_chromium):
            os.close(fd)
        to_chromium, from_chromium = high
        # posix_spawn puts the pipes on the protocol's fds 3 and 4 (no fork: this process runs JAX's threads)
        arguments = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--no-first-run", f"--user-data-dir={user_dir}", "--remote-debugging-pipe", "about:blank"]
        quiet = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_WRONLY, 0) for fd in (1, 2)]
        self.pid = os.posix_spawn(CHROMIUM, arguments, os.environ, file_actions=quiet + [
            (os.POSIX_SPAWN_DUP2, to_chromium, 3), (os.POSIX_SPAWN_DUP2, from_chromium, 4)])
        os.close(to_chromium)
        os.close(from_chromium)
        self._buffer, self._id, self._session = b"", 0, None

    def send(self, method: str, session: bool = True, **params) -> dict:
        self._id += 1
        message = dict(id=self._id, method=method, params=params)
        if session and self._session:
            message["sessionId"] = self._session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self._buffer:
                chunk = os.read(self._read, 1 << 20)
                assert chunk, "chromium closed its DevTools pipe"
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            answer = json.loads(raw)
            if answer.get("id") == self._id:
                assert "error" not in answer, answer
                return answer["result"]

    def open(self, url: str) -> None:
        target = self.send("Target.createTarget", session=False, url=url)["targetId"]
        self._session = self.send("Target.attachToTarget", session=False, targetId=target, flatten=True)["sessionId"]

    def js(self, expression: str):
        result = self.send("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    def wait(self, expression: str, timeout_s: float = 60.0):
        deadline = time.monotonic() + timeout_s
        guarded = f"(() => {{ try {{ return ({expression}); }} catch (error) {{ return false; }} }})()"
        while time.monotonic() < deadline:
            value = self.js(guarded)  # a page still loading has no body or element yet: not true yet, no error
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError(f"the page never made {expression!r} true: " + str(self.js("document.body.innerText")))

    def close(self) -> None:
        os.kill(self.pid, 9)
        os.waitpid(self.pid, 0)
        os.close(self._write)
        os.close(self._read)


def _start_play(run_dir: str) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", SEEDLEAGUE_TOKEN=TOKEN)
    proc = subprocess.Popen([sys.executable, "-m", "seedleague.cli", "play", "--run-dir", run_dir, "--address",
                             "127.0.0.1:0"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    for line in proc.stdout:
        if line.startswith(PLAY_READY):
            return proc, line.split()[3]
    proc.wait(timeout=30)
    pytest.fail(f"seedleague play did not start: exit {proc.returncode}")


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (make chromium, or apt-get install chromium)")
@pytest.mark.parametrize("game", GAMES)
def test_a_person_plays_a_whole_game_in_a_real_browser_and_it_is_in_the_leagues_standings(trained, tmp_path, game):
    run_dir = trained[game]
    proc, url = _start_play(run_dir)
    browser = Browser(str(tmp_path / "chromium"))
    try:
        browser.open(f"{url}?token={TOKEN}")
        browser.wait("document.body.dataset.ready === 'true'")
        assert browser.js("document.body.dataset.game") == game.split(":")[1].split("/")[-1]
        moves = 0
        while browser.js("document.body.dataset.finished") != "true":
            before = browser.js("document.getElementById('history').children.length")
            browser.js("document.querySelector('#legal button.move').click()")  # the first legal move
            browser.wait(f"document.body.dataset.finished === 'true' || "
                         f"document.getElementById('history').children.length > {before}")
            moves += 1
        assert moves >= (1 if game == "openspiel:kuhn_poker" else 2)
        assert browser.js("document.body.dataset.games") == "1"
        recorded = browser.js("document.getElementById('recorded').textContent")
        assert recorded.startswith("recorded in the league: human "), recorded
        assert browser.js("document.querySelectorAll('#agent tr.agent-move').length") >= 1  # the agent's replies
        shown = browser.wait("document.getElementById('standings').dataset.rows > 0 && "
                             "document.getElementById('standings').innerText")
        assert "human" in shown and "output-" in shown
    finally:
        browser.close()
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    league_dir = os.path.join(run_dir, "league")
    with League(load_config(league_dir), os.path.join(league_dir, "league.sqlite")) as league:
        rows = {row.key: row for row in league.standings()}
    human = rows["human"]
    anchor = next(row for key, row in rows.items() if key.startswith("output-"))
    assert human.role == Role.HUMAN and human.games == 1 and anchor.role == Role.ANCHOR and anchor.games == 1
    outcome = {"you won": 1.0, "a draw": 0.5, "you lost": 0.0}
    assert human.win_rate in outcome.values()
