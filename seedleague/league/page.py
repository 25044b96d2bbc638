"""The live league page: an HTTP server inside the league service's process that shows the league as it trains.

    page = LeaguePage(league, PageConfig(address="127.0.0.1:0"), token="s3cret").start()
    print(page.url)            # http://127.0.0.1:PORT/  (open it with ?token=s3cret)
    ...
    page.stop()

This module owns the page: its HTTP server (the standard library's ThreadingHTTPServer, on a
port of its own beside the gRPC one), who may read it, what it refuses, and the JSON the page
polls. A `LeagueRecorder` thread reads the league's own objects every `sample_every_s` seconds
(standings, payoff, snapshots, Elo history, and a preview of each player's opponent draws that
leaves the league's RNG alone), keeps the wall-clock series, and encodes one JSON document; every
request is answered from that document, so the page costs the league the same whether one
browser watches or twenty.

The charts are drawn in the browser by plotly.js, served from the installed `plotly` Python
package (nothing is downloaded at run time, no CDN); the page's own HTML and JavaScript are in
`static/`. Refusals: a missing or wrong token (401), a Host header other than this loopback
address (403, against DNS rebinding), a method other than GET/HEAD (405), a query or path too
long (414), junk that is not HTTP (400, from http.server; a TLS handshake is told to use http://), HTTP/2
(505), more than `max_connections` at once (503); each answer names the problem and the fix, and the console
gets one line for it.
docs/league_page.md is the user's guide.
"""

from __future__ import annotations

import collections
import dataclasses
import hmac
import http.server
import importlib.util
import json
import os
import socket
import threading
import time
import urllib.parse
from typing import Callable, Optional

import numpy as np

from seedleague.league import payoff, tables
from seedleague.league.page_files import RunFiles
from seedleague.league.service import League
from seedleague.league.types import Role, learns
from seedleague.protocol.errors import ProtocolError

STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
PAGE_READY = "league page on "  # printed by `seedleague league serve` once the page serves ...
PAGE_FAILED = "league page: "  # ... or this and why, when it cannot (the league serves on without it)
COOKIE = "seedleague_page_token"
MAX_PATH_CHARS = 2048
MAX_BODY_BYTES = 4096  # a POST body (seedleague play's moves); the league page takes none
LINGER_S, LINGER_BYTES = 1.0, 16 << 20  # what a closing connection still reads of a refused request (see _Server)
MAX_CURVE_POINTS = 400  # points per key of the Elo-by-results curve (the league keeps one every elo_history_every)
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclasses.dataclass(frozen=True)
class PageConfig:
    """The live league page of `seedleague league serve` (docs/league_page.md)."""

    address: str = "127.0.0.1:0"  # host:port of the page (port 0 picks a free one); a non-loopback host shows it to the network
    sample_every_s: float = 2.0  # how often the page's data is read from the league (and the browser polls)
    top: int = 40  # keys in the standings and the payoff heatmap (live players and the best-rated snapshots)
    draws: int = 200  # opponent draws previewed per player for "whom it draws now"
    max_connections: int = 32  # connections served at once; more are refused with 503
    request_timeout_s: float = 10.0  # a connection that sends no complete request in this time is closed

    def __post_init__(self):
        problems = []
        try:
            split_address(self.address)
        except ValueError as error:
            problems.append(str(error))
        for name in ("sample_every_s", "request_timeout_s"):
            if not getattr(self, name) > 0:
                problems.append(f"{name} must be > 0 seconds, got {getattr(self, name)}")
        for name in ("top", "draws", "max_connections"):
            if not getattr(self, name) >= 1:
                problems.append(f"{name} must be >= 1, got {getattr(self, name)}")
        if problems:
            raise ValueError("bad league page config: " + "; ".join(problems))


def split_address(address: str) -> tuple[str, int]:
    """("127.0.0.1", 8080) for "127.0.0.1:8080" ("[::1]:8080" for IPv6); ValueError naming the fix."""
    host, sep, port = address.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"page address {address!r} is not HOST:PORT: give e.g. 127.0.0.1:8765 (port 0 picks one)")
    return host, int(port)


# --- what the page shows ------------------------------------------------------------------------


def _round(values, digits: int = 4) -> list:
    return [round(float(v), digits) for v in values]


def _shown_keys(league: League, standings, top: int) -> list[str]:
    """Live players, anchors and humans first, then the best-rated snapshots, `top` keys in all."""
    players = [p.name for p in league.players()]
    rated = [row.key for row in tables.rated_first(standings, None).rows if row.key not in players]
    return players + rated[:max(0, top - len(players))]


def _payoff_view(league: League, keys: list[str]) -> dict:
    """The payoff among `keys`: win rates, decayed games and their 95% Wilson intervals."""
    matrix = league.payoff()
    index, wanted = {key: i for i, key in enumerate(matrix.keys)}, set(keys)
    ordered = [key for key in matrix.keys if key in wanted]
    rows = [index[key] for key in ordered]
    k = len(matrix.keys)
    rate = np.asarray(matrix.win_rate, dtype=np.float64).reshape(k, k)[np.ix_(rows, rows)]
    games = np.asarray(matrix.games, dtype=np.float64).reshape(k, k)[np.ix_(rows, rows)]
    low, high = payoff.wilson_interval(rate, games)
    return dict(keys=ordered, win_rate=[_round(r, 3) for r in rate], games=[_round(r, 2) for r in games],
                low=[_round(r, 3) for r in low], high=[_round(r, 3) for r in high],
                left_out=len(matrix.keys) - len(ordered))


def thinned(points: list, max_points: int) -> list:
    """At most `max_points` of `points`, evenly spaced by index, the first and the last always kept."""
    if len(points) <= max_points:
        return list(points)
    picks = np.unique(np.linspace(0, len(points) - 1, max_points).round().astype(int))
    return [points[i] for i in picks]


def _draw_shares(league: League, player: str, draws: int) -> list[dict]:
    """Opponents of `draws` previewed draws for `player`, most drawn first, with their shares."""
    counts = collections.Counter(m.opponent for m in league.draw_preview(player, draws))
    return [dict(opponent=key, share=round(n / draws, 3)) for key, n in counts.most_common(12)]


def league_snapshot(league: League, config: PageConfig) -> dict:
    """What the page shows that the league itself holds, read through its public methods (one lock each)."""
    standings = league.standings()
    keys = _shown_keys(league, standings, config.top)
    shown = set(keys)
    board = tables.rated_first(standings, config.top)
    history = league.elo_history()
    members = league.players()
    players = [p for p in members if learns(p.role)]
    return dict(
        mode=league.config.mode.value,
        results=league.results_counted(),
        standings=[dict(key=s.key, role=s.role.value, elo=round(s.elo, 1), games=round(s.games, 2),
                        win_rate=round(s.win_rate, 3), mu=round(s.trueskill_mu, 2), sigma=round(s.trueskill_sigma, 2),
                        pbt=s.pbt)  # a PBT member's settings and newest copy (docs/pbt.md); "" for everyone else
                   for s in board.rows],
        standings_notes=board.notes(),
        players=[dict(name=p.name, role=p.role.value, learner_step=p.learner_step, snapshots=p.snapshots,
                      resets=p.resets, last_snapshot_step=p.last_snapshot_step) for p in players],
        snapshots=[dict(key=s.key, player=s.player, step=s.step, role=s.role.value) for s in league.snapshots()],
        fixed=[dict(key=a.key, role=a.role.value, plays=a.path) for a in league.anchors()]
        + [dict(key=p.name, role=p.role.value, plays="a person, through seedleague play") for p in members
           if p.role == Role.HUMAN],
        snapshot_elo={s.key: round(s.elo, 1) for s in standings},
        payoff=_payoff_view(league, keys),
        elo_history={key: [[n, round(elo, 1)] for n, elo in thinned(points, MAX_CURVE_POINTS)]
                     for key, points in history.items() if key in shown},
        draws={p.name: _draw_shares(league, p.name, config.draws) for p in players},
    )


PLAY_URL_FILE = "play.url"  # in the league's directory: the address of a `seedleague play` of the run, while it serves


def play_link(league_dir: str) -> dict:
    """The league page's "play against it" panel: the command, and the address of a play page serving now."""
    run_dir = os.path.dirname(os.path.abspath(league_dir)) if league_dir else "RUN"
    link = dict(command=f"seedleague play --run-dir {run_dir}", url="")
    try:
        with open(os.path.join(league_dir, PLAY_URL_FILE)) as f:
            url = f.read().strip()
        link["url"] = url if url.startswith("http://") and url.isprintable() and len(url) < 200 else ""
    except OSError:
        pass
    return link


class WallClock:
    """The league over wall-clock time, as this process saw it: a bounded series of samples.

    When `max_points` samples are held, every second one is dropped, so a long run keeps its
    whole span at a coarser step (the page's memory stays bounded)."""

    def __init__(self, max_points: int = 2000):
        self.max_points = max_points
        self.t: list[float] = []
        self.results: list[int] = []
        self.elo: dict[str, list[Optional[float]]] = {}
        self.steps: dict[str, list[Optional[int]]] = {}
        self.first_seen: dict[str, float] = {}  # snapshot key -> when this process first saw it

    def add(self, now: float, snapshot: dict) -> None:
        self.t.append(now)
        self.results.append(snapshot["results"])
        tracked = ({p["name"] for p in snapshot["players"]} | {m["key"] for m in snapshot.get("fixed", ())}
                   | {row["key"] for row in snapshot["standings"][:10]})
        elo = {row["key"]: row["elo"] for row in snapshot["standings"]} | snapshot["snapshot_elo"]
        _append(self.elo, {key: elo.get(key) for key in tracked}, len(self.t))
        _append(self.steps, {p["name"]: p["learner_step"] for p in snapshot["players"]}, len(self.t))
        for s in snapshot["snapshots"]:
            self.first_seen.setdefault(s["key"], now)
        if len(self.t) >= self.max_points:
            self._thin()

    def _thin(self) -> None:
        keep = slice(None, None, 2)
        self.t, self.results = self.t[keep], self.results[keep]
        self.elo = {k: v[keep] for k, v in self.elo.items()}
        self.steps = {k: v[keep] for k, v in self.steps.items()}

    def rates(self, window: int = 5) -> dict[str, dict[str, float]]:
        """Per player, learner steps per second over the last `window` samples; results/s of the league."""
        if len(self.t) < 2:
            return {}
        first = max(0, len(self.t) - 1 - window)
        span = self.t[-1] - self.t[first]
        if span <= 0:
            return {}
        out = {name: dict(steps_per_s=round(((s[-1] or 0) - (s[first] or 0)) / span, 2)) for name, s in self.steps.items()}
        out["*"] = dict(results_per_s=round((self.results[-1] - self.results[first]) / span, 2))
        return out

    def to_json(self) -> dict:
        return dict(t=_round(self.t, 2), results=self.results, elo=self.elo, steps=self.steps)


def _append(series: dict[str, list], values: dict, length: int) -> None:
    """Append one sample to every series (None where a key has no value), starting new keys with Nones."""
    for key, value in values.items():
        series.setdefault(key, [None] * (length - 1))
    for key, points in series.items():
        points.append(values.get(key))


class LeagueRecorder:
    """Reads the league every `config.sample_every_s` seconds on its own thread and keeps the page's JSON."""

    def __init__(self, league: League, config: PageConfig, clock: Callable[[], float] = time.time,
                 say: Callable[[str], None] = print, run_dir: str = ""):
        self.league, self.config, self._clock, self._say = league, config, clock, say
        self.run_dir = run_dir  # the league's directory: where `seedleague play` leaves its address (PLAY_URL_FILE)
        # the run's directory above it: its hosts' progress, evaluations and best responses (page_files)
        self.files = RunFiles(os.path.dirname(os.path.abspath(run_dir))) if run_dir else None
        self.wall = WallClock()
        self.samples = 0
        self._document = b"{}"
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.started = clock()

    def sample(self) -> None:
        """Read the league once and encode the page's JSON document."""
        try:
            snapshot = league_snapshot(self.league, self.config)
        except ProtocolError:  # the league is shutting down: keep the last document
            return
        now = self._clock()
        self.wall.add(now, snapshot)
        rates = self.wall.rates()
        for player in snapshot["players"]:
            player.update(rates.get(player["name"], {}))
        snapshot.update(self.read_files(snapshot))
        document = dict(snapshot, play=play_link(self.run_dir), time=round(now, 2), started=round(self.started, 2), sample=self.samples + 1,
                        every_s=self.config.sample_every_s, results_per_s=rates.get("*", {}).get("results_per_s"),
                        wall=self.wall.to_json(), first_seen={k: round(v, 2) for k, v in self.wall.first_seen.items()})
        encoded = json.dumps(document, separators=(",", ":"), allow_nan=False).encode()
        with self._lock:
            self._document, self.samples = encoded, self.samples + 1
            self._lock.notify_all()

    def read_files(self, snapshot: dict) -> dict:
        """The run's files' part of the page (env steps, exploitability; page_files.RunFiles), empty without a run
        directory; a file not there (yet), or not readable, leaves its part empty."""
        if self.files is None:
            return dict(progress={}, snapshot_at={}, wall_env_steps={}, evaluations={}, best_responses=[],
                        run_dir="")
        found = self.files.read([p["name"] for p in snapshot["players"]], snapshot["snapshots"], self.wall.t)
        return dict(found, run_dir=self.files.run_dir)

    def document(self) -> bytes:
        with self._lock:
            return self._document

    def wait_for_sample(self, count: int, timeout_s: float) -> bool:
        """Block until `count` samples have been taken; False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: self.samples >= count, timeout_s)

    def start(self) -> "LeagueRecorder":
        self.sample()
        self._thread = threading.Thread(target=self._run, name="seedleague-league-page-recorder", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.config.sample_every_s):
            try:
                self.sample()
            except Exception as error:  # the page shows its last document; the league goes on regardless
                self._say(f"league page: reading the league failed ({error!r}); the page keeps its last data")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


# --- the HTTP server ------------------------------------------------------------------------------


def _static(name: str) -> bytes:
    with open(os.path.join(STATIC_DIR, name), "rb") as f:
        return f.read()


def plotly_js_path() -> str:
    """plotly.min.js inside the installed `plotly` package (found without importing it)."""
    spec = importlib.util.find_spec("plotly")
    path = os.path.join(list(spec.submodule_search_locations)[0], "package_data", "plotly.min.js") if spec else ""
    if not os.path.isfile(path):
        raise ValueError("the league page needs plotly.min.js from the `plotly` package: `pip install -e .` "
                         "installs it (or start the league with --no-page)")
    return path


class _Throttled:
    """Console lines for refusals: at most one a second, then a count of those left out."""

    def __init__(self, say: Callable[[str], None]):
        self._say, self._lock, self._last, self._held = say, threading.Lock(), 0.0, 0

    def __call__(self, line: str) -> None:
        with self._lock:
            now = time.monotonic()
            if now - self._last < 1.0:
                self._held += 1
                return
            held, self._held, self._last = self._held, 0, now
        self._say(line + (f" ({held} more refusals not shown)" if held else ""))


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], page: "LeaguePage"):
        self.page = page
        self._slots = threading.BoundedSemaphore(page.config.max_connections)
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, _Handler)

    def process_request(self, request, client_address):
        """Serve on a thread of its own while fewer than max_connections are open, else refuse with 503."""
        if not self._slots.acquire(blocking=False):
            self.page.refused(f"503 from {client_address[0]}: more than {self.page.config.max_connections} connections")
            _send_raw(request, 503, "the league page is serving its maximum of connections: retry in a few seconds "
                                    "(or raise --page.max-connections)")
            super().shutdown_request(request)  # no lingering on the accepting thread
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def shutdown_request(self, request):
        """Close a served connection without resetting it: after the last byte of the answer, read and drop what the
        client still sends (a refused body) for at most LINGER_S seconds or LINGER_BYTES, so a refusal of a huge
        request reaches the client instead of being lost to the reset a close with unread data sends."""
        try:
            request.shutdown(socket.SHUT_WR)
            request.settimeout(LINGER_S)
            end, left = time.monotonic() + LINGER_S, LINGER_BYTES
            while left > 0 and time.monotonic() < end:
                chunk = request.recv(min(65536, left))
                if not chunk:
                    break
                left -= len(chunk)
        except OSError:
            pass
        self.close_request(request)


def _send_raw(sock: socket.socket, code: int, reason: str) -> None:
    """A minimal HTTP/1.0 refusal written on the accepting thread (it waits at most a second)."""
    body = f"{code} {reason}\n".encode()
    head = (f"HTTP/1.0 {code} {http.HTTPStatus(code).phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nRetry-After: 2\r\nConnection: close\r\n\r\n").encode()
    try:
        sock.settimeout(1.0)
        sock.sendall(head + body)
    except OSError:
        pass


class _Handler(http.server.BaseHTTPRequestHandler):
    """GET/HEAD of the page, its scripts and its JSON; everything else is refused with a reason."""

    server_version = "seedleague-league-page"

    def setup(self) -> None:
        self.timeout = self.server.page.config.request_timeout_s
        super().setup()

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def do_POST(self) -> None:
        """A page with `post_route` (seedleague play) takes small JSON bodies; the league page is read-only."""
        if getattr(self.server.page, "post_route", None) is None:
            return self._read_only()
        self._answer(send_body=True, post=True)

    def _read_only(self) -> None:
        self.close_connection = True
        self._refuse(405, f"{self.command} is not served",
                        f"the {self.server.page.name} is read-only: use GET (a browser, curl)")

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_TRACE = do_CONNECT = _read_only

    def _answer(self, send_body: bool, post: bool = False) -> None:
        if len(self.path) > MAX_PATH_CHARS:
            return self._refuse(414, f"the path is {len(self.path)} chars",
                                   f"the page's paths are short: open {self.server.page.url}")
        problem = self.server.page.host_problem(self.headers.get("Host", ""))
        if problem:
            return self._refuse(403, "wrong Host header", problem)
        parts = urllib.parse.urlsplit(self.path)
        try:
            query = urllib.parse.parse_qs(parts.query, max_num_fields=4)
        except ValueError:
            return self._refuse(400, "too many query fields", "the page takes at most ?token=...")
        presented = (query.get("token") or [""])[0] or _bearer(self.headers.get("Authorization", "")) or \
            _cookie(self.headers.get("Cookie", ""))
        if not self.server.page.token_ok(presented):
            return self._refuse(401, "missing or wrong token",
                                   "this league runs with a token: open the page as URL?token=<the run's token> "
                                   "(its --token or $SEEDLEAGUE_TOKEN), or send 'Authorization: Bearer <token>'")
        route = (self._posted if post else self.server.page.route)(parts.path)
        if route is None:
            return self._refuse(404, f"no page at {parts.path[:80]!r}", f"open {self.server.page.url}")
        try:
            body, content_type, cache = route()
        except _Refused as refusal:
            return self._refuse(refusal.code, refusal.message, refusal.fix)
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", cache)
        self.send_header("X-Content-Type-Options", "nosniff")
        if query.get("token") and self.server.page.token:
            cookie = urllib.parse.quote(self.server.page.token, safe="")
            self.send_header("Set-Cookie", f"{COOKIE}={cookie}; HttpOnly; SameSite=Strict; Path=/")
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def _posted(self, path: str) -> Optional[Callable[[], tuple[bytes, str, str]]]:
        """The answer to a POST of a small JSON body to `path` (None: no such path); a body that is too large,
        not JSON, or refused by the page's handler (ValueError) is refused with 413, 415 or 400."""
        handler = self.server.page.post_route(path)
        if handler is None:
            return None

        def answer() -> tuple[bytes, str, str]:
            if self.headers.get("Content-Type", "").split(";")[0].strip() != "application/json":
                raise _Refused(415, "the body is not JSON", "POST a JSON object with Content-Type: application/json")
            length = self.headers.get("Content-Length", "")
            if not length.isdigit() or int(length) > MAX_BODY_BYTES:
                raise _Refused(413, f"a body of {length[:20] or 'unknown'} bytes",
                               f"POST a JSON object of at most {MAX_BODY_BYTES} bytes with its Content-Length")
            try:
                request = json.loads(self.rfile.read(int(length)) or b"null")
                if not isinstance(request, dict):
                    raise ValueError("the body must be a JSON object")
                answer = handler(request)
            except ValueError as error:  # json.JSONDecodeError included
                raise _Refused(400, "bad request", str(error).splitlines()[0][:300]) from None
            return json.dumps(answer, separators=(",", ":"), allow_nan=False).encode(), "application/json", "no-store"

        return answer

    def send_error(self, code: int, message: Optional[str] = None, explain: Optional[str] = None) -> None:
        """http.server's own refusals (junk, too long a line, too many headers, HTTP/2), with what to change added;
        what the client sent is quoted at most MAX_QUOTED chars."""
        if code == 400 and getattr(self, "raw_requestline", b"")[:2] == TLS_HANDSHAKE:
            return self._refuse(400, "a TLS handshake (https://)",
                                f"the page speaks plain HTTP: open {self.server.page.url}, with http://")
        fix = _EXPLAIN.get(code, "send an HTTP GET of the page's address")
        message = (message or http.HTTPStatus(code).phrase)[:MAX_QUOTED]
        self._refuse(code, message, f"{explain}; {fix}" if explain else fix)

    def _refuse(self, code: int, message: str, fix: str) -> None:
        """A plain-text answer "CODE message: fix", the connection closed, and one console line."""
        self.server.page.refused(f"{code} from {self.client_address[0]}: {message}: {fix}")
        body = f"{code} {message}: {fix}\n".encode()
        self.close_connection = True
        self.request_version = "HTTP/1.0"  # junk parses as HTTP/0.9, which would get no status line
        try:
            self.send_response(code)  # the standard phrase: the status line never carries what the client sent
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except OSError:  # the client left: nothing more to tell it
            pass

    def log_message(self, format: str, *args) -> None:
        """Quiet: refusals are logged by send_error, and served requests are not logged."""


class _Refused(Exception):
    """A request refused with `code`: "code message: fix"."""

    def __init__(self, code: int, message: str, fix: str):
        super().__init__(message)
        self.code, self.message, self.fix = code, message, fix


TLS_HANDSHAKE = b"\x16\x03"  # the first bytes of a TLS ClientHello: a browser asked for https://
MAX_QUOTED = 120  # chars of a refused request quoted back (and on the console)
_EXPLAIN = {
    400: "the page speaks HTTP/1.x: open it in a browser or with curl",
    505: "the page speaks HTTP/1.x, not HTTP/2: open it in a browser or with curl",
    408: "send the whole request within --page.request-timeout-s",
    414: "the page's paths are short: open the address the league printed",
    431: "send fewer or shorter headers",
    501: "the league page is read-only: use GET",
}


def _bearer(value: str) -> str:
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _cookie(value: str) -> str:
    for part in value.split(";"):
        name, _, token = part.strip().partition("=")
        if name == COOKIE:
            return urllib.parse.unquote(token)
    return ""


class WebPage:
    """A small HTTP page on its own port: binding, the token, the Host check and throttled refusal lines. A
    subclass gives `name`, `route(path)` (GET) and, to take small JSON POSTs, `post_route(path)`; `config`
    needs `address`, `max_connections` and `request_timeout_s`. Used by the league page and `seedleague play`."""

    name = "page"
    post_route = None  # path -> (request dict -> answer dict) or None; None here: the page is read-only

    def __init__(self, config, token: str, say: Callable[[str], None]):
        self.config, self.token = config, token
        self.refused = _Throttled(lambda line: say(f"{self.name} refused {line}"))
        self._server: Optional[_Server] = None
        self._thread: Optional[threading.Thread] = None
        self.host, self.port = split_address(config.address)

    def route(self, path: str) -> Optional[Callable[[], tuple[bytes, str, str]]]:
        raise NotImplementedError

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def start(self) -> "WebPage":
        """Bind and serve; ValueError naming the fix when the address cannot be bound."""
        try:
            self._server = _Server(split_address(self.config.address), self)
        except OSError as error:
            raise ValueError(f"cannot serve the {self.name} on {self.config.address} ({error.strerror}): "
                             f"{self.address_fix}") from None
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs=dict(poll_interval=0.2),
                                        name="seedleague-league-page", daemon=True)
        self._thread.start()
        return self

    address_fix = "give another address"

    def stop(self) -> None:
        """Stop serving. Idempotent."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()
            self._server = None

    def __enter__(self) -> "WebPage":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def token_ok(self, presented: str) -> bool:
        return not self.token or hmac.compare_digest(presented.encode(), self.token.encode())

    def host_problem(self, host_header: str) -> str:
        """Why a Host header is refused ("" if it is fine): on loopback only this machine's names for the page."""
        if self.host not in _LOOPBACK:
            return ""
        allowed = {f"{name}:{self.port}" for name in ("127.0.0.1", "localhost", "[::1]")}
        if host_header.lower() in allowed:
            return ""
        return (f"the page serves loopback only and got Host {host_header[:80]!r} (a page on another site may be "
                f"reaching it through DNS): open {self.url}")



class LeaguePage(WebPage):
    """The league page's server and recorder; `start()` binds and returns self, `url` says where to open it."""

    name = "league page"
    address_fix = "give another --page.address, or --no-page"

    def __init__(self, league: League, config: PageConfig = PageConfig(), token: str = "",
                 say: Callable[[str], None] = print, run_dir: str = ""):
        super().__init__(config, token, say)
        self.league = league
        self.recorder = LeagueRecorder(league, config, say=say, run_dir=run_dir)
        self._plotly_path = plotly_js_path()
        self._plotly: Optional[bytes] = None

    def start(self) -> "LeaguePage":
        super().start()
        self.recorder.start()
        return self

    def stop(self) -> None:
        """Stop serving and sampling. Idempotent."""
        self.recorder.stop()
        super().stop()

    def route(self, path: str) -> Optional[Callable[[], tuple[bytes, str, str]]]:
        """The answer for `path`: (body, content type, cache control), or None for an unknown path."""
        routes = {
            "/": lambda: (_static("index.html"), "text/html; charset=utf-8", "no-cache"),
            "/page.js": lambda: (_static("page.js"), "text/javascript; charset=utf-8", "no-cache"),
            "/plotly.min.js": lambda: (self.plotly_js(), "text/javascript; charset=utf-8", "max-age=86400"),
            "/api/state": lambda: (self.recorder.document(), "application/json", "no-store"),
            "/favicon.ico": lambda: (b"", "image/x-icon", "max-age=86400"),
        }
        return routes.get(path)

    def plotly_js(self) -> bytes:
        if self._plotly is None:
            with open(self._plotly_path, "rb") as f:
                self._plotly = f.read()
        return self._plotly
