"""League runs on one machine: the league service and every extra learning player as processes.

Data path of a league run: env workers --gRPC--> each player's host (batcher ->
policy + opponent snapshots -> unroll store -> replay -> learner) --gRPC--> the
league service (opponents, results, snapshot decisions), with snapshots in the
model pool on the shared disk:

    <run_dir>/                    the first player's host (checkpoints/, logs/, tensorboard/)
    <run_dir>/league/             the league service: league.sqlite, league.log
    <run_dir>/pool/<player>/      the model pool: one orbax checkpoint per snapshot
    <run_dir>/players/<name>/     every other player's host (its own `seedleague train`)

`local.run` starts a `LeagueProcess` before its host when the run owns its league,
and `PlayerProcesses` for the extra players once the league is serving; its watch
loop restarts a league service that died, on the same address and run dir.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys
import time
from typing import Optional, Sequence

from seedleague.launch.child import Child, ChildFailed, ChildNotReady, log_tail, stop_all
from seedleague.league.page import PAGE_FAILED, PAGE_READY, split_address
from seedleague.league.types import Role
from seedleague.security import TOKEN_ENV_VAR, ServerSecurity

log = logging.getLogger(__name__)

LEAGUE_READY = "league serving on "  # printed by `seedleague league serve` once it serves


@dataclasses.dataclass(frozen=True)
class PlayerSpec:
    """A learning player: its name in the league and its AlphaStar role."""

    name: str
    role: Role = Role.MAIN

    @staticmethod
    def parse(text: str) -> "PlayerSpec":
        """"main", "main:main" or "exploiter:main_exploiter" -> PlayerSpec."""
        name, _, role = text.partition(":")
        try:
            return PlayerSpec(name.strip(), Role(role.strip() or Role.MAIN.value))
        except ValueError:
            roles = ", ".join(r.value for r in Role)
            raise ValueError(f"bad player {text!r}: expected NAME or NAME:ROLE with ROLE one of {roles}") from None


@dataclasses.dataclass(frozen=True)
class LeagueSpec:
    """The league a run plays in: its own service (address "") or an existing one."""

    address: str = ""  # an existing league's host:port; "" = start one for this run
    service_flags: tuple[str, ...] = ()  # LeagueConfig flags for the started service, e.g. ("--mode", "pfsp")
    players: tuple[PlayerSpec, ...] = (PlayerSpec("main"),)  # the first is played by this process's host
    player_args: tuple[str, ...] = ()  # `seedleague train` arguments the extra players' hosts are started with
    # the built-in workers of each extra player's host before they are fitted to the machine (the preset's);
    # 0: its command line decides (a --worker-cmd's)
    player_workers: int = 0
    page_address: str = "127.0.0.1:0"  # the live league page's host:port (port 0: a free one); "" = no page
    start_timeout_s: float = 60.0
    max_restarts: int = 10  # a league service that dies is restarted (same address, same run dir) this often at most

    def __post_init__(self):
        if self.max_restarts < 0:
            raise ValueError(f"league max_restarts must be >= 0, got {self.max_restarts}")
        if self.page_address:
            split_address(self.page_address)


def _env_with_token(security: ServerSecurity) -> dict:
    env = dict(os.environ)
    if security.token:  # through the environment: a token on a command line is visible to every user
        env[TOKEN_ENV_VAR] = security.token
    return env


def _tls_flags(security: ServerSecurity, server: bool) -> list[str]:
    if not security.tls:
        return []
    return ["--tls-cert", security.tls_cert, "--tls-key", security.tls_key] if server else ["--tls-ca", security.tls_cert]


class LeagueProcess:
    """`seedleague league serve` in a child process; `start()` returns the address it listens on.

    `restart_if_dead()` (called by the launcher's watch loop) starts a service that
    died again on the same address and run dir, so hosts reconnect to it without
    being told, and the league resumes from its SQLite file; at most
    `spec.max_restarts` times.
    """

    def __init__(self, run_dir: str, spec: LeagueSpec, security: ServerSecurity = ServerSecurity()):
        self.directory = os.path.join(run_dir, "league")
        self.spec = spec
        self.security = security
        self.log_path = os.path.join(self.directory, "league.log")
        self.address: Optional[str] = None
        self.page_url: Optional[str] = None  # the live league page, once the service printed it
        self.restarts = 0
        self._child: Optional[Child] = None

    @property
    def pid(self) -> Optional[int]:
        return None if self._child is None else self._child.pid

    def start(self) -> str:
        """Start the service on a free port and wait until it serves; returns its address.

        A service left running by a launcher that was killed (SIGKILL: it could not stop
        its children) is stopped first, so one league process serves the database."""
        os.makedirs(self.directory, exist_ok=True)
        self._stop_stale()
        self._spawn("127.0.0.1:0", self.spec.page_address)
        try:
            line = self._child.wait_for_line(LEAGUE_READY, self.spec.start_timeout_s)
        except ChildNotReady:
            self.stop()
            raise
        self.address = line.split(LEAGUE_READY, 1)[1].strip()
        if self.spec.page_address:
            self.page_url = self._page_url()
        return self.address

    def _page_url(self) -> Optional[str]:
        """The page's URL from the line printed after LEAGUE_READY; None (and a warning) if it could not serve."""
        try:
            line = self._child.wait_until(
                lambda: self._child.ready_line(PAGE_READY) or self._child.ready_line(PAGE_FAILED),
                self.spec.start_timeout_s, "its page's line")
        except ChildFailed:  # it died or hung after serving: the watch loop sees that, the page is not the cause
            return None
        if line.startswith(PAGE_FAILED):
            log.warning("%s", line)
            return None
        return line.split(PAGE_READY, 1)[1].split()[0]

    def _stop_stale(self, timeout: float = 10.0) -> None:
        """SIGTERM the service named by <league dir>/league.pid if it still runs (checked by its command line)."""
        try:
            with open(self._pid_path) as f:
                pid = int(f.read().split()[0])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read().split(b"\0")
        except (OSError, ValueError, IndexError):
            return
        if b"seedleague.league.cli" not in command or self.directory.encode() not in command:
            return
        log.warning("stopping league service %d left running by an earlier launcher of %s", pid, self.directory)
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _running(pid):
            os.kill(pid, signal.SIGKILL)

    @property
    def _pid_path(self) -> str:
        return os.path.join(self.directory, "league.pid")

    def restart_if_dead(self) -> bool:
        """Start the service again on the same address if it has exited; True if it was restarted.

        Does not wait for it to serve (the launcher's loop must not stall): hosts retry
        until it answers, and a restart that fails exits and is seen at the next check.
        Raises RuntimeError once it died more than `spec.max_restarts` times.
        """
        if self._child is None or self.address is None or self._child.poll() is None:
            return False
        status = self._child.returncode
        if self.restarts >= self.spec.max_restarts:
            raise RuntimeError(f"the league service exited (status {status}) after {self.restarts} restarts, "
                               f"the limit (league max_restarts); see {self.log_path}")
        self.restarts += 1
        log.warning("league service exited with status %s; restarting it on %s (restart %d of at most %d)",
                    status, self.address, self.restarts, self.spec.max_restarts)
        page = self.page_url.split("//", 1)[1].rstrip("/") if self.page_url else self.spec.page_address
        self._spawn(self.address, page)  # the page keeps its address too, so an open browser tab goes on
        return True

    def _spawn(self, address: str, page_address: str) -> None:
        page = ["--page.address", page_address] if page_address else ["--no-page"]
        command = [sys.executable, "-m", "seedleague.league.cli", "serve", "--run-dir", self.directory,
                   "--address", address, *page, *_tls_flags(self.security, server=True), *self.spec.service_flags]
        self._child = Child(command, self.log_path, name="the league service", env=_env_with_token(self.security))
        self._child.start()
        with open(self._pid_path, "w") as f:
            f.write(f"{self._child.pid}\n")

    def alive(self) -> bool:
        return self._child is not None and self._child.running()

    @property
    def returncode(self) -> Optional[int]:
        """The exit status of the service this object started last (None while it runs or before it started)."""
        return None if self._child is None else self._child.returncode

    def stop(self, timeout: float = 10.0) -> None:
        if self._child is not None:
            self._child.stop(timeout)


class PlayerProcesses:
    """One `seedleague train` process per extra learning player, each with its own host and workers."""

    def __init__(self, run_dir: str, env_id: str, spec: LeagueSpec, address: str, pool_dir: str,
                 security: ServerSecurity = ServerSecurity()):
        self.run_dir, self.env_id, self.spec = run_dir, env_id, spec
        self.address, self.pool_dir, self.security = address, pool_dir, security
        self._children: list[Child] = []

    def start(self, players: Sequence[PlayerSpec], workers: int = 0) -> None:
        """One host process per player, each with `workers` built-in workers (0: its own command line's)."""
        for index, player in enumerate(players, start=1):
            run_dir = os.path.join(self.run_dir, "players", player.name)
            os.makedirs(run_dir, exist_ok=True)
            command = [
                sys.executable, "-m", "seedleague.cli", "train", *(("--env", self.env_id) if self.env_id else ()),
                "--run-dir", run_dir,
                "--league.address", self.address, "--league.player", player.name, "--league.role", player.role.value,
                "--league.pool_dir", self.pool_dir, "--seed", str(index * 7919), "--no-eval",
                *(("--workers", str(workers)) if workers else ()),
                *_tls_flags(self.security, server=True), *self.spec.player_args,
            ]
            child = Child(command, os.path.join(run_dir, "player.log"), name=f"player {player.name}",
                          env=_env_with_token(self.security))
            self._children.append(child)
            child.start()

    def failed(self) -> Optional[str]:
        for child, player in zip(self._children, self.spec.players[1:]):
            if child.poll() not in (None, 0):
                return (f"player {player.name} exited with status {child.returncode}; the end of its log "
                        f"{child.log_path}:\n{log_tail(child.log_path)}")
        return None

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM: each host stops its workers and writes a final checkpoint."""
        stop_all(self._children, timeout)


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (Linux /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
