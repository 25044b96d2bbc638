"""A host that stops while a worker from elsewhere is still streaming tells that worker to reconnect
(UNAVAILABLE) and prints no traceback: grpc prints one for every call the server's stop cancels."""

import signal
import subprocess

import grpc
import numpy as np
import pytest

from conftest import RawWorker
from seedleague.protocol.specs import EnvSpec
from test_e2e import SEEDLEAGUE, TINY, free_port

CARTPOLE = EnvSpec("CartPole-v1", (4,), np.dtype(np.float32), 2, 4)


def test_a_stopping_host_ends_open_streams_with_unavailable_and_no_traceback(tmp_path):
    address = f"127.0.0.1:{free_port()}"
    host = subprocess.Popen(SEEDLEAGUE + ["host", "--env", "CartPole-v1", "--address", address, "--run-dir",
                                          str(tmp_path / "run")] + TINY,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        while "listening on" not in (line := host.stdout.readline()):
            assert line, "the host exited before listening"
        worker = RawWorker(address, CARTPOLE)
        worker.step()  # the stream is open and answered
        host.send_signal(signal.SIGINT)
        with pytest.raises(grpc.RpcError) as ended:
            while True:
                worker.step()
        assert ended.value.code() == grpc.StatusCode.UNAVAILABLE and "reconnect" in ended.value.details()
        worker.close()
        output, _ = host.communicate(timeout=120)
    finally:
        if host.poll() is None:
            host.kill()
    assert host.returncode == 0 and "run ended: interrupted" in output
    assert "Traceback" not in output and "CancelledError" not in output, output[-3000:]
