"""seedleague.launch.local.run: whatever interrupts the host's shutdown, the league service process is stopped."""

import pytest

from seedleague.launch import local
from seedleague.launch.run_config import RunConfig


class FakeLeague:
    """Stands in for the run's league side (its own service process in a real run)."""

    def __init__(self, config, run_dir):
        self.client, self.stopped = None, False
        FakeLeague.last = self

    def start(self, host_config):
        return host_config

    def hosts_here(self):
        return 1

    def start_players(self, machine):
        pass

    def summary(self):
        return {}

    def stop(self):
        self.stopped = True


class HostInterruptedWhileStopping:
    """A host whose shutdown (final checkpoint) is cut short by a second SIGTERM."""

    def __init__(self, *args, **kwargs):
        pass

    def stop(self):
        raise KeyboardInterrupt("signal 15")


async def _served(*args):
    return {}


def test_an_interrupt_during_host_shutdown_still_stops_the_league(tmp_path, monkeypatch):
    monkeypatch.setattr(local, "_League", FakeLeague)
    monkeypatch.setattr(local, "Host", HostInterruptedWhileStopping)
    monkeypatch.setattr(local, "_serve", _served)
    # run() sets the process's GIL switch interval and SIGTERM handler: keep them from later tests.
    monkeypatch.setattr(local.sys, "setswitchinterval", lambda seconds: None)
    monkeypatch.setattr(local.signal, "signal", lambda signum, handler: None)
    with pytest.raises(KeyboardInterrupt):
        local.run(RunConfig(run_dir=str(tmp_path / "run")))
    assert FakeLeague.last.stopped


def test_sigterm_while_the_output_is_chosen_skips_the_choice_and_says_so(monkeypatch, tmp_path, capsys):
    import os
    import signal
    import threading

    from seedleague import output

    def slow_choice(run_dir):  # measuring candidates: SIGTERM arrives meanwhile
        os.kill(os.getpid(), signal.SIGTERM)
        threading.Event().wait(60)  # the handler interrupts this wait
        raise AssertionError("SIGTERM did not interrupt the choice")

    monkeypatch.setattr(output, "resolve", slow_choice)
    before = signal.signal(signal.SIGTERM, local._already_stopping)
    try:
        described = local._describe_output(str(tmp_path), output.OutputConfig("selected"))
        assert signal.getsignal(signal.SIGTERM) is local._already_stopping  # restored for what follows
    finally:
        signal.signal(signal.SIGTERM, before)
    assert described["source"] == "selected" and "interrupted while choosing the output" in described["note"]
    printed = capsys.readouterr()
    assert "load_trained" in printed.err and "choosing the run's output" in printed.out  # the console knows why it waits
