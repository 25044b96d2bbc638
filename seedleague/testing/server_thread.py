"""ServerThread: run any `EnvBackend` behind the real asyncio gRPC server in a
background thread, so synchronous tests and tools can talk to it over a socket.

    with ServerThread(FakeBackend(), address="127.0.0.1:0") as server:
        channel = grpc.insecure_channel(server.address)
        ...
        server.stop(grace=0)      # host "crashes": streams end
        server.start()            # same port, same backend: a restarted host

Each start gets its own event loop and thread; the server is built by
`seedleague.grpc_server.start_server` with the backend behind `EnvServicer`, so
health checking, reflection, the message-size limit and security (token, TLS:
`security=ServerSecurity(...)`) are the production ones.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Optional

import grpc

from seedleague.grpc_server import start_server
from seedleague.host.servicer import SERVICE_NAME, EnvBackend, EnvServicer
from seedleague.security import ServerSecurity


class ServerThread:
    """An EnvService server on its own thread and event loop; restartable on the same port."""

    def __init__(self, backend: EnvBackend, address: str = "127.0.0.1:0", security: ServerSecurity = ServerSecurity()):
        if not address.rpartition(":")[0]:
            raise ValueError(f"address must be 'host:port' (port 0 picks a free one), got {address!r}")
        self.backend = backend
        self.security = security
        self._host = address.rpartition(":")[0]
        self._address = address
        self._port: Optional[int] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._server: Optional[grpc.aio.Server] = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("server was never started")
        return self._port

    @property
    def address(self) -> str:
        """"host:port" with the bound port, for clients."""
        return f"{self._host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self, timeout_s: float = 10.0) -> "ServerThread":
        """Bind (the same port as before, after a stop) and serve; returns self."""
        if self.running:
            raise RuntimeError("server is already running")
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="seedleague-server", daemon=True)
        thread.start()
        address = self._address if self._port is None else f"{self._host}:{self._port}"
        servicer = EnvServicer(self.backend)
        starting = start_server(
            address, [servicer.register], [SERVICE_NAME], self.backend.max_message_bytes, self.security
        )
        try:
            server, port = asyncio.run_coroutine_threadsafe(starting, loop).result(timeout_s)
        except BaseException:
            _stop_loop(loop, thread)
            raise
        self._loop, self._thread, self._server, self._port = loop, thread, server, port
        return self

    def stop(self, grace: Optional[float] = 0.0, timeout_s: float = 10.0) -> None:
        """Stop serving: in-flight streams get `grace` seconds, then are cancelled. Idempotent."""
        if not self.running:
            return
        loop, thread, server = self._loop, self._thread, self._server
        self._loop = self._thread = self._server = None
        try:
            asyncio.run_coroutine_threadsafe(server.stop(grace), loop).result(timeout_s)
            # Close handlers' async generators that grpc left suspended, as asyncio.run
            # does: their `finally` blocks (e.g. the servicer's close_session) then run.
            asyncio.run_coroutine_threadsafe(loop.shutdown_asyncgens(), loop).result(timeout_s)
        finally:
            _stop_loop(loop, thread)

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


def _stop_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    loop.close()
