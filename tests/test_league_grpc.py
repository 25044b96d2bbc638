"""The league over real sockets: every method round trip, refusals with their status codes,
the token, the client's retries across a league restart (a real `seedleague league serve`
killed with SIGKILL and started again on the same port and run dir), and the CLI."""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import subprocess
import sys
import threading
import uuid

import grpc
import pytest

from seedleague import cli
from seedleague.league import codec
from seedleague.league.client import LeagueClient, LeagueUnavailable
from seedleague.league.config import LeagueConfig
from seedleague.league.server import LeagueServer
from seedleague.league.service import League
from seedleague.league.store import LeagueStore
from seedleague.league.types import MatchResult, Role
from seedleague.protocol.channel import channel_options
from seedleague.protocol.errors import ProtocolError
from seedleague.security import ClientSecurity, ServerSecurity
from seedleague.v1 import league_pb2 as pb
from seedleague.v1 import league_pb2_grpc
from tests.conftest import wait_for

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG = LeagueConfig(payoff_decay=1.0, min_games=0)
TOKEN = "league-token-0123"


def result(player, opponent, outcome=1.0, rid=None) -> MatchResult:
    return MatchResult(uuid.uuid4().hex if rid is None else rid, player, opponent, outcome, learner_step=3)


@pytest.fixture
def served(tmp_path):
    """(league, server, client) for a fresh league on a loopback port."""
    league = League(CONFIG, str(tmp_path / "league.sqlite"))
    with LeagueServer(league) as server:
        client = LeagueClient(server.address, retry_deadline_s=2.0)
        yield league, server, client
        client.close()
    league.close()


def test_every_method_round_trips(served):
    league, _, client = served
    main = client.register_player("main", Role.MAIN)
    assert main == league.players()[0]
    assert client.register_player("x", "main_exploiter").role == Role.MAIN_EXPLOITER
    decision = client.check_in("main", 0)
    assert decision.snapshot and not decision.reset and "initial" in decision.reason
    snapshot = client.add_snapshot("main", 0, "/pool/main/0")
    assert snapshot == league.snapshots()[0] and snapshot.key == "main:000000"
    client.add_snapshot("x", 0, "/pool/x/0")
    matches = client.get_opponents("main", 5)
    assert len(matches) == 5 and all(m.opponent in ("main", "main:000000", "x:000000") for m in matches)
    twice = result("main", "x:000000", 0.5, rid="same")
    assert client.report_results([twice, twice, result("x", "main:000000", 0.0)]) == 2
    assert client.report_results([]) == 0
    assert client.players() == league.players() and len(client.players()) == 2
    assert client.snapshots() == league.snapshots()
    assert client.snapshots("x") == league.snapshots("x") and len(client.snapshots("x")) == 1
    assert client.standings() == league.standings()
    assert client.payoff() == league.payoff()
    matrix = client.payoff()
    assert matrix.keys == ["main", "x", "main:000000", "x:000000"]
    assert matrix.games[0][3] == 1.0 and matrix.win_rate[0][3] == 0.5  # main drew x:000000, counted once
    assert "main:000000" in client.leaderboard_text()


def test_a_results_return_crosses_the_wire_and_an_unset_one_stays_unset(served, tmp_path):
    league, _, client = served
    client.register_player("a", Role.MAIN)
    client.add_snapshot("a", 0, "/a/0")
    won, old = MatchResult("r1", "a", "a:000000", 1.0, 3, value=2.0), result("a", "a:000000", 0.0)
    assert codec.decode_result(codec.encode_result(won)) == won
    assert not codec.encode_result(old).HasField("value") and codec.decode_result(codec.encode_result(old)).value is None
    assert client.report_results([won, old]) == 2
    store = LeagueStore(str(tmp_path / "league.sqlite"))  # the served league's file
    assert [r.value for r in store.events() if isinstance(r, MatchResult)] == [2.0, None]
    store.close()


def _raw_stub(address: str) -> tuple[grpc.Channel, league_pb2_grpc.LeagueServiceStub]:
    channel = grpc.insecure_channel(address, options=channel_options(1 << 20))
    return channel, league_pb2_grpc.LeagueServiceStub(channel)


def test_raw_messages_duplicates_and_unset_role(served):
    league, server, client = served
    client.register_player("a", Role.MAIN)
    client.add_snapshot("a", 0, "/a/0")
    channel, stub = _raw_stub(server.address)
    with channel:
        one = pb.MatchResult(result_id="r1", player="a", opponent="a:000000", outcome=1.0)
        reply = stub.ReportResults(pb.ReportResultsRequest(results=[one, one]), timeout=5)
        assert (reply.new_results, reply.duplicate_results) == (1, 1)
        with pytest.raises(grpc.RpcError) as error:
            stub.RegisterPlayer(pb.RegisterPlayerRequest(name="b"), timeout=5)  # role left unset
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "role" in error.value.details()
    assert [p.name for p in league.players()] == ["a"]


@pytest.mark.parametrize(
    "call, code",
    [
        (lambda c: c.register_player("a b", Role.MAIN), "INVALID_ARGUMENT"),
        (lambda c: c.register_player("a", Role.LEAGUE_EXPLOITER), "FAILED_PRECONDITION"),
        (lambda c: c.get_opponents("ghost", 1), "NOT_FOUND"),
        (lambda c: c.get_opponents("a", 0), "INVALID_ARGUMENT"),
        (lambda c: c.check_in("a", -1), "INVALID_ARGUMENT"),
        (lambda c: c.add_snapshot("a", 0, "/other"), "FAILED_PRECONDITION"),
        (lambda c: c.report_results([result("a", "a:000000"), result("a", "a:000000", 0.25)]), "INVALID_ARGUMENT"),
        (lambda c: c.report_results([result("a", "a:000000"), result("a", "b:000001")]), "NOT_FOUND"),
        (lambda c: c.snapshots("ghost"), "NOT_FOUND"),
    ],
    ids=["bad-name", "role-mismatch", "unknown-player", "zero-count", "negative-step", "other-path",
         "bad-outcome", "unknown-snapshot", "snapshots-of-unknown"],
)
def test_bad_input_gets_its_status_code_and_changes_nothing(served, call, code):
    league, _, client = served
    client.register_player("a", Role.MAIN)
    client.add_snapshot("a", 0, "/a/0")
    before = (league.players(), league.snapshots(), league.payoff(), league.standings())
    with pytest.raises(ProtocolError) as error:
        call(client)
    assert error.value.code == code and "league refused" in error.value.message
    assert (league.players(), league.snapshots(), league.payoff(), league.standings()) == before


def test_token_is_required(tmp_path):
    with League(CONFIG, str(tmp_path / "league.sqlite")) as league:
        with LeagueServer(league, security=ServerSecurity(token=TOKEN)) as server:
            for security in (ClientSecurity(), ClientSecurity(token="wrong")):
                with LeagueClient(server.address, security) as client:
                    with pytest.raises(ProtocolError, match="SEEDLEAGUE_TOKEN") as error:
                        client.register_player("a", Role.MAIN)
                    assert error.value.code == "UNAUTHENTICATED"
            assert league.players() == []
            with LeagueClient(server.address, ClientSecurity(token=TOKEN)) as client:
                assert client.register_player("a", Role.MAIN).name == "a"


def test_tls_round_trip(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl CLI")
    cert, key = str(tmp_path / "league.pem"), str(tmp_path / "league.key")
    command = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", key, "-out", cert,
               "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"]
    subprocess.run(command, check=True, capture_output=True, timeout=30)
    with League(CONFIG, str(tmp_path / "league.sqlite")) as league:
        security = ServerSecurity(token=TOKEN, tls_cert=cert, tls_key=key)
        with LeagueServer(league, security=security) as server:
            with LeagueClient(server.address, ClientSecurity(token=TOKEN, tls_ca=cert)) as client:
                assert client.register_player("a", Role.MAIN).name == "a"
            with LeagueClient(server.address, ClientSecurity(token=TOKEN), retry_deadline_s=0.2) as plaintext:
                with pytest.raises(LeagueUnavailable, match="--tls-ca"):
                    plaintext.players()


def test_client_gives_up_after_its_deadline_when_nothing_listens():
    with LeagueClient("127.0.0.1:1", retry_deadline_s=0.3, backoff_initial_s=0.02) as client:
        with pytest.raises(LeagueUnavailable, match="did not answer ListPlayers within 0.3 s"):
            client.players()
    with pytest.raises(LeagueUnavailable, match="closed"):
        client.players()


def test_client_waits_for_an_in_process_server_to_come_back(served):
    _, server, client = served
    client.register_player("a", Role.MAIN)
    server.stop(grace=0)
    restart = threading.Timer(0.5, server.start)
    restart.start()
    try:
        assert client.register_player("b", Role.MAIN).name == "b"  # retried until the server was back
    finally:
        restart.join()


# --- a real `seedleague league serve` process ------------------------------------------------------


def _start_serve(run_dir: str, address: str) -> tuple[subprocess.Popen, str]:
    command = [sys.executable, "-m", "seedleague.cli", "league", "serve", "--run-dir", run_dir, "--address", address,
               "--log-every-s", "3600", "--payoff_decay", "1.0", "--min_games", "0"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = proc.stdout.readline()
    if not line.startswith("league serving on "):
        proc.kill()
        pytest.fail(f"league serve did not start: {line}{proc.stdout.read()}")
    return proc, line.split()[-1]


def test_results_survive_kill_9_and_the_client_retries_until_the_league_is_back(tmp_path):
    run_dir = str(tmp_path / "run")
    proc, address = _start_serve(run_dir, "127.0.0.1:0")
    client = LeagueClient(address, retry_deadline_s=30.0, backoff_initial_s=0.02, backoff_max_s=0.2)
    acked: list[tuple[list[MatchResult], int]] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def report():
        while not stop.is_set():
            batch = [result("p", "p:000000") for _ in range(5)]
            try:
                acked.append((batch, client.report_results(batch)))
            except BaseException as error:  # noqa: BLE001 - surfaced by the assertion below
                errors.append(error)
                return

    try:
        client.register_player("p", Role.MAIN)
        client.add_snapshot("p", 0, "/pool/p/0")
        reporter = threading.Thread(target=report)
        reporter.start()
        wait_for(lambda: len(acked) >= 10, 30, "10 acknowledged results")
        proc.kill()  # SIGKILL: no shutdown code runs
        proc.wait()
        at_kill = len(acked)
        proc, _ = _start_serve(run_dir, address)
        wait_for(lambda: len(acked) >= at_kill + 10 or errors, 30, "10 more results, or an error, after the kill")
        stop.set()
        reporter.join()
        assert not errors
        every = [r for batch, _ in acked for r in batch]
        # The batch in flight at the kill may have committed before it: its retry then reads as 5 duplicates.
        assert len(every) - 5 <= sum(new for _, new in acked) <= len(every)
        assert client.payoff().games[0][1] == len(every)  # decay 1: exact game count, nothing twice
        assert client.report_results(every) == 0  # every acknowledged id is stored
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert "database closed" in proc.stdout.read()
    finally:
        stop.set()
        client.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_prints_standings_and_payoff(served, capsys):
    _, server, client = served
    client.register_player("a", Role.MAIN)
    client.add_snapshot("a", 0, "/a/0")
    client.report_results([result("a", "a:000000")])
    assert cli.main(["league", "standings", "--address", server.address, "--top", "5"]) == 0
    out = capsys.readouterr().out
    assert "a:000000" in out and "1216.0" in out
    assert cli.main(["league", "payoff", "--address", server.address]) == 0
    assert "P[row beats column]" in capsys.readouterr().out
    assert cli.main(["league", "standings", "--address", "127.0.0.1:1", "--timeout-s", "0.2"]) == 1
    assert "did not answer" in capsys.readouterr().err


def test_cli_refuses_a_bad_config(tmp_path, capsys):
    code = cli.main(["league", "serve", "--run-dir", str(tmp_path), "--address", "127.0.0.1:0", "--main_pfsp", "0.9"])
    assert code == 2
    assert "main_self_play + main_pfsp + main_forgotten must sum to 1" in capsys.readouterr().err
