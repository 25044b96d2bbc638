"""seedleague.launch.child: real child processes that become ready, die before they are ready, or ignore SIGTERM."""

import signal
import sys
import threading

import pytest

from seedleague.launch.child import Child, ChildExited, ChildNotReady, stop_all
from tests.conftest import wait_for

PY = sys.executable


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_waits_for_the_ready_line_of_this_start_only(tmp_path):
    log_path = tmp_path / "logs" / "server.log"
    log_path.parent.mkdir()
    log_path.write_text("serving on 10.0.0.1:1 (an earlier start's line)\n")
    script = "import time; print('starting'); print('serving on 127.0.0.1:5', flush=True); time.sleep(600)"
    child = Child([PY, "-c", script], str(log_path), name="test server")
    child.start()
    try:
        assert child.wait_for_line("serving on ", timeout_s=60) == "serving on 127.0.0.1:5"
        assert child.running() and child.poll() is None
    finally:
        assert child.stop(timeout_s=30) == -signal.SIGTERM
    assert "an earlier start's line" in log_path.read_text()  # appended to, not truncated


def test_a_child_that_dies_first_is_named_with_its_log_tail(tmp_path):
    script = "import sys; print('bad flag --bogus: use --real'); sys.exit(3)"
    child = Child([PY, "-c", script], str(tmp_path / "w.log"), name="worker 7")
    child.start()
    with pytest.raises(ChildExited) as raised:
        child.wait_for_line("serving on ", timeout_s=60)
    message = str(raised.value)
    assert message.startswith("worker 7 exited with status 3 while waiting for it to print 'serving on'"), message
    assert "bad flag --bogus: use --real" in message and str(tmp_path / "w.log") in message
    assert child.returncode == 3


def test_a_child_that_never_becomes_ready_is_named_after_the_deadline(tmp_path):
    child = Child([PY, "-c", "import time; print('still compiling', flush=True); time.sleep(600)"],
                  str(tmp_path / "slow.log"), name="the host")
    child.start()
    try:
        wait_for(lambda: "still compiling" in child.output(), 60, "the child's first line")
        with pytest.raises(ChildNotReady, match="(?s)the host still runs after 0.2 s of waiting for .*still compiling"):
            child.wait_for_line("serving on ", timeout_s=0.2)
        assert child.running()
    finally:
        child.stop(timeout_s=30)


def test_a_cancelled_wait_returns_none_at_once(tmp_path):
    child = Child([PY, "-c", "import time; time.sleep(600)"], str(tmp_path / "c.log"))
    child.start()
    cancel = threading.Event()
    cancel.set()
    try:
        assert child.wait_for_line("never", timeout_s=600, cancel=cancel) is None
    finally:
        child.stop(timeout_s=30)


# Ignores SIGTERM, starts a grandchild in its own process group, prints both pids, then waits for ever.
STUBBORN = """
import signal, subprocess, sys
signal.signal(signal.SIGTERM, signal.SIG_IGN)
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print("pids", grandchild.pid, flush=True)
signal.pause()
"""


def test_stop_kills_a_child_that_ignores_sigterm_and_what_it_started(tmp_path):
    child = Child([PY, "-c", STUBBORN], str(tmp_path / "stubborn.log"), name="stubborn")
    child.start()
    grandchild = int(child.wait_for_line("pids ", timeout_s=60).split()[1])
    assert _alive(grandchild)
    assert child.stop(timeout_s=0.5) == -signal.SIGKILL  # SIGTERM was ignored, so the deadline's SIGKILL ended it
    wait_for(lambda: not _alive(grandchild), 30, "the grandchild to die with its group")


def test_stop_all_ends_every_child_and_restart_gives_a_new_process(tmp_path):
    children = [Child([PY, "-c", "import time; print('up', flush=True); time.sleep(600)"], str(tmp_path / f"{i}.log"))
                for i in range(3)]
    for child in children:
        child.start()
    first_pid = children[0].pid
    for child in children:
        child.wait_for_line("up", timeout_s=60)
    stop_all([*children, None], timeout_s=30)
    assert [child.returncode for child in children] == [-signal.SIGTERM] * 3
    children[0].start()
    try:
        assert children[0].starts == 2 and children[0].pid != first_pid
        assert children[0].wait_for_line("up", timeout_s=60) == "up"
    finally:
        children[0].stop(timeout_s=30)


def test_a_missing_command_raises_oserror_and_a_running_child_cannot_start_twice(tmp_path):
    with pytest.raises(OSError):
        Child([str(tmp_path / "no-such-binary")], str(tmp_path / "x.log")).start()
    child = Child([PY, "-c", "import time; time.sleep(600)"], str(tmp_path / "y.log"), name="twice")
    child.start()
    try:
        with pytest.raises(RuntimeError, match="twice is still running"):
            child.start()
    finally:
        child.stop(timeout_s=30)


PARENT = """
import sys, time
from seedleague.launch.child import Child
child = Child(sys.argv[2:], sys.argv[1], name="orphan")
child.start()
print("child", child.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("command", [[PY, "-c", "import time; time.sleep(600)"], ["sleep", "600"]],
                         ids=["python", "binary"])
def test_a_child_dies_with_a_launcher_killed_before_it_could_stop_it(tmp_path, command):
    """SIGKILL gives the launcher no chance to stop its children, and each runs in a session of its own: the
    trampoline's PR_SET_PDEATHSIG, kept across the exec into any program, still ends them."""
    import os
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    launcher = subprocess.Popen([PY, "-c", PARENT, str(tmp_path / "child.log"), *command], stdout=subprocess.PIPE,
                                text=True, cwd=root, env=dict(os.environ, PYTHONPATH=root))
    try:
        pid = int(launcher.stdout.readline().split()[1])
        wait_for(lambda: open(f"/proc/{pid}/cmdline").read().split("\0")[0] == command[0], 30,
                 "the trampoline to exec the command")
        launcher.kill()
        launcher.wait()
        wait_for(lambda: not _alive(pid), 30, "the orphaned child to get its SIGTERM")
    finally:
        launcher.kill()
        if "pid" in locals() and _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_path_that_is_not_an_executable_file_is_refused_before_starting(tmp_path):
    (tmp_path / "script").write_text("#!/bin/sh\n")
    with pytest.raises(PermissionError, match="not executable"):
        Child([str(tmp_path / "script")], str(tmp_path / "x.log")).start()
    with pytest.raises(FileNotFoundError):
        Child([str(tmp_path)], str(tmp_path / "y.log")).start()
    with pytest.raises(FileNotFoundError, match="PATH"):
        Child(["no-such-program-anywhere"], str(tmp_path / "z.log")).start()
