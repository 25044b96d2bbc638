"""Builds the asyncio gRPC servers every seedleague process runs.

Each server gets the standard health and reflection services, an explicit
message-size limit, and keepalive settings that match `channel_options`, so a
client configured with those options is never sent GOAWAY for pinging.
Security (bearer token, TLS) comes from a `ServerSecurity`; see `seedleague.security`.

`ThreadedServer` runs such a server on its own thread and event loop, so synchronous
code (the league process, tests, tools) can start, stop and restart it on one port.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Callable, Iterable, Optional

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from seedleague.protocol.channel import channel_options
from seedleague.security import ServerSecurity

log = logging.getLogger(__name__)

_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


async def start_server(
    address: str,
    register: Iterable[Callable[[grpc.aio.Server], None]],
    service_names: Iterable[str],
    max_message_bytes: int,
    security: ServerSecurity = ServerSecurity(),
) -> tuple[grpc.aio.Server, int]:
    """Start an aio server on `address` ("host:port", port 0 picks one); returns (server, port).

    `register` holds the generated `add_*Servicer_to_server` calls, already bound to
    their servicers; `service_names` their full names, for health and reflection.
    `security` adds the token check (every RPC but health) and TLS; the default is
    plaintext with no token.
    """
    _warn_if_token_in_clear(address, security)
    server = grpc.aio.server(options=channel_options(max_message_bytes), interceptors=security.interceptors())
    for add in register:
        add(server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = list(service_names)
    for name in names + [""]:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    reflection.enable_server_reflection(names + [health.SERVICE_NAME, reflection.SERVICE_NAME], server)
    credentials = security.credentials()
    port = server.add_insecure_port(address) if credentials is None else server.add_secure_port(address, credentials)
    if port == 0:
        raise OSError(f"could not bind a gRPC server to {address!r}")
    await server.start()
    return server, port


def _warn_if_token_in_clear(address: str, security: ServerSecurity) -> None:
    host = address.rpartition(":")[0]
    if security.token and not security.tls and not address.startswith("unix:") and host not in _LOOPBACK_HOSTS:
        log.warning("%s requires a token but serves plaintext: the token is readable on the network; add TLS", address)


class ThreadedServer:
    """A gRPC server on its own thread and event loop; restartable on the same port.

    `make_register()` is called at every start and returns the `add_*Servicer_to_server`
    calls bound to fresh servicers; the rest is `start_server`'s arguments. Subclasses
    (`LeagueServer`, the test `ServerThread`) add what they serve.
    """

    def __init__(
        self,
        address: str,
        make_register: Callable[[], Iterable[Callable[[grpc.aio.Server], None]]],
        service_names: Iterable[str],
        max_message_bytes: int,
        security: ServerSecurity = ServerSecurity(),
        thread_name: str = "seedleague-server",
    ):
        if not address.rpartition(":")[0]:
            raise ValueError(f"address must be 'host:port' (port 0 picks a free one), got {address!r}")
        self.security = security
        self._address = address
        self._host = address.rpartition(":")[0]
        self._make_register = make_register
        self._service_names = list(service_names)
        self._max_message_bytes = max_message_bytes
        self._thread_name = thread_name
        self._port: Optional[int] = None
        self._running: Optional[tuple[asyncio.AbstractEventLoop, threading.Thread, grpc.aio.Server]] = None

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
        return self._running is not None

    def start(self, timeout_s: float = 10.0):
        """Bind (the same port as before, after a stop) and serve; returns self."""
        if self.running:
            raise RuntimeError("server is already running")
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name=self._thread_name, daemon=True)
        thread.start()
        address = self._address if self._port is None else f"{self._host}:{self._port}"
        starting = start_server(address, self._make_register(), self._service_names, self._max_message_bytes,
                                self.security)
        try:
            server, port = asyncio.run_coroutine_threadsafe(starting, loop).result(timeout_s)
        except BaseException:
            _stop_loop(loop, thread)
            raise
        self._running, self._port = (loop, thread, server), port
        return self

    def stop(self, grace: Optional[float] = 0.0, timeout_s: float = 10.0) -> None:
        """Stop serving: calls in flight get `grace` seconds, then are cancelled. Idempotent."""
        if self._running is None:
            return
        loop, thread, server = self._running
        self._running = None
        try:
            asyncio.run_coroutine_threadsafe(server.stop(grace), loop).result(timeout_s)
            # Close handlers' async generators that grpc left suspended, as asyncio.run
            # does: their `finally` blocks (e.g. a servicer's close_session) then run.
            asyncio.run_coroutine_threadsafe(loop.shutdown_asyncgens(), loop).result(timeout_s)
        finally:
            _stop_loop(loop, thread)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


def _stop_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    loop.close()
