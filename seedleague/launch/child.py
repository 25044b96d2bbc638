"""Child processes: start a command with its output in a log file, wait until it is ready, stop it by a deadline.

Every launcher, supervisor and tool that runs a server or a worker as a child
process uses this one class (the local launcher's workers, league service and
extra players, the Ray actors' commands, the chaos soak, check-worker):

    child = Child(["seedleague", "league", "serve", ...], "runs/x/league/league.log", name="league service")
    child.start()
    line = child.wait_for_line("league serving on ", timeout_s=60)   # ChildNotReady / ChildExited, with the log tail
    child.poll()            # None while it runs, else its exit status
    child.stop(10.0)        # SIGTERM its process group, SIGKILL the group after 10 s

Each child runs in a session (process group) of its own, so a Ctrl-C at the
launcher's terminal does not reach it before the launcher decides, and `stop`
reaches whatever the child started in its group too. The log is appended to
(restarts, --resume): readiness is read only from what this start wrote.

A session of its own also means a launcher that dies without stopping its children (SIGKILL, the
OOM killer, a CI job's timeout) would leave them running: workers reconnecting forever, a league
service holding its port and database. So every child is started through a small Python trampoline
that asks Linux to SIGTERM it when the launcher dies (PR_SET_PDEATHSIG, kept across the exec into the
real command, whatever its language) and then execs the command. Linux sends that signal when the
thread that started the child ends, so start children from a thread that lives as long as they should.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from typing import Callable, Mapping, Optional, Sequence, TypeVar

T = TypeVar("T")

POLL_INTERVAL_S = 0.05

# `python -c DIE_WITH_PARENT PARENT_PID COMMAND...`: ask for SIGTERM when the parent dies, then become COMMAND.
# The signal survives the exec; a parent that died before prctl ran is caught by the getppid check.
DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    "parent = int(sys.argv[1])\n"
    "try:\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG\n"
    "except (OSError, AttributeError):\n"
    "    pass  # not Linux: only the launcher's own stop ends the child\n"
    "if os.getppid() != parent:\n"
    "    sys.exit(143)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def dying_with_this_process(command: Sequence[str], env: Optional[Mapping[str, str]] = None) -> list[str]:
    """`command` run through DIE_WITH_PARENT, so it gets SIGTERM when this process (the thread starting it) dies.
    Raises FileNotFoundError or PermissionError, as starting it would, when the command's program cannot run
    (looked up on `env`'s PATH, the child's, else this process's)."""
    program = command[0]
    if os.sep in program:  # a path: run as it is, relative to the working directory
        if not os.path.isfile(program):
            raise FileNotFoundError(2, "No such file", program)
        if not os.access(program, os.X_OK):
            raise PermissionError(13, "Permission denied (not executable)", program)
    elif shutil.which(program, path=(os.environ if env is None else env).get("PATH", os.defpath)) is None:
        raise FileNotFoundError(2, "No such program on PATH", program)
    return [sys.executable, "-c", DIE_WITH_PARENT, str(os.getpid()), *command]


class ChildFailed(RuntimeError):
    """A child process that did not become ready: the message names it and ends with the tail of its log."""

    def __init__(self, child: "Child", what: str):
        super().__init__(f"{child.name} {what}; the end of its log {child.log_path}:\n{log_tail(child.log_path)}")
        self.child = child


class ChildExited(ChildFailed):
    """The child exited before it was ready (`child.returncode` says how)."""


class ChildNotReady(ChildFailed):
    """The child still ran, not ready, when the wait's deadline passed."""


class Child:
    """One command as a child process in its own process group, stdout and stderr appended to `log_path`."""

    def __init__(self, command: Sequence[str], log_path: str, name: str = "", env: Optional[Mapping[str, str]] = None):
        self.command = list(command)
        self.log_path = log_path
        self.name = name or shlex.join(self.command)[:120]
        self.env = None if env is None else dict(env)
        self.starts = 0
        self._proc: Optional[subprocess.Popen] = None
        self._log_offset = 0

    def start(self) -> int:
        """Start (or start again, after it exited) the command; returns its pid. OSError if it cannot start."""
        if self.poll() is None and self._proc is not None:
            raise RuntimeError(f"{self.name} is still running (pid {self._proc.pid})")
        os.makedirs(os.path.dirname(os.path.abspath(self.log_path)), exist_ok=True)
        self._log_offset = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        with open(self.log_path, "ab") as out:
            self._proc = subprocess.Popen(dying_with_this_process(self.command, self.env), stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True, env=self.env)
        self.starts += 1
        return self._proc.pid

    @property
    def pid(self) -> Optional[int]:
        return None if self._proc is None else self._proc.pid

    @property
    def returncode(self) -> Optional[int]:
        return None if self._proc is None else self._proc.poll()

    def poll(self) -> Optional[int]:
        """None while it runs (or before it started), else its exit status (negative: the signal that ended it)."""
        return self.returncode

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def wait(self, timeout_s: Optional[float] = None) -> Optional[int]:
        """Its exit status once it exits, or None if it still runs after `timeout_s`."""
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def output(self) -> str:
        """What this start has written to the log so far."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def wait_until(self, ready: Callable[[], Optional[T]], timeout_s: float, what: str,
                   cancel: Optional[threading.Event] = None) -> Optional[T]:
        """Poll `ready()` until it returns something other than None, and return that.

        Raises ChildExited if the child exits first, ChildNotReady after `timeout_s`
        (both name the child and `what` was awaited, e.g. "its handshake", and show its
        log tail); returns None at once when `cancel` is set (the caller is stopping).
        """
        deadline = time.monotonic() + timeout_s
        while True:
            value = ready()
            if value is not None:
                return value
            if self._proc is None or self._proc.poll() is not None:
                value = ready()  # what it wrote just before it exited
                if value is not None:
                    return value
                raise ChildExited(self, f"exited with status {self.returncode} while waiting for {what}")
            if time.monotonic() >= deadline:
                raise ChildNotReady(self, f"still runs after {timeout_s:g} s of waiting for {what}")
            if cancel is not None:
                if cancel.wait(POLL_INTERVAL_S):
                    return None
            else:
                time.sleep(POLL_INTERVAL_S)

    def ready_line(self, prefix: str) -> Optional[str]:
        """The first line of this start's output that starts with `prefix` (stripped), or None."""
        for line in self.output().splitlines():
            if line.startswith(prefix):
                return line.strip()
        return None

    def wait_for_line(self, prefix: str, timeout_s: float, cancel: Optional[threading.Event] = None) -> Optional[str]:
        """The first line of this start's output starting with `prefix`, as soon as it appears (see wait_until)."""
        return self.wait_until(lambda: self.ready_line(prefix), timeout_s, f"it to print {prefix.strip()!r}", cancel)

    def send_signal(self, sig: int) -> None:
        """`sig` to the child alone (not its group), if it still runs."""
        if self.running():
            self._proc.send_signal(sig)

    def signal_group(self, sig: int) -> None:
        """`sig` to the child's process group: the child and whatever it started that did not leave the group."""
        if self._proc is None:
            return
        try:
            os.killpg(self._proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, timeout_s: float = 10.0) -> Optional[int]:
        """SIGTERM the process group, SIGKILL it after `timeout_s`; returns the exit status (None if never started)."""
        stop_all([self], timeout_s)
        return self.returncode

    def kill(self) -> Optional[int]:
        """SIGKILL the process group at once; returns the exit status."""
        if self._proc is None:
            return None
        self.signal_group(signal.SIGKILL)
        return self._proc.wait()

    def tail(self, lines: int = 15) -> str:
        return log_tail(self.log_path, lines)


def stop_all(children: Sequence[Optional[Child]], timeout_s: float) -> None:
    """Stop several children under one deadline: SIGTERM every group at once, SIGKILL the groups still
    running when `timeout_s` has passed, then SIGKILL what each exited child left behind in its group."""
    started = [child for child in children if child is not None and child._proc is not None]
    for child in started:
        if child.running():
            child.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for child in started:
        if child.wait(max(0.0, deadline - time.monotonic())) is None:
            child.signal_group(signal.SIGKILL)
            child.wait()
        child.signal_group(signal.SIGKILL)  # anything the child left running in its group


def log_tail(path: str, lines: int = 15, max_bytes: int = 8192) -> str:
    """The last `lines` lines of the file at `path` (at most its last `max_bytes`), indented for the console."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - max_bytes))
            text = f.read().decode(errors="replace")
    except OSError as error:
        return f"    (no log: {error})"
    tail = deque(text.splitlines(), maxlen=lines)
    return "\n".join("    " + line for line in tail) if tail else "    (the log is empty)"
