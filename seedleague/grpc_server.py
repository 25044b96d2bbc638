"""Builds the asyncio gRPC servers every seedleague process runs.

Each server gets the standard health and reflection services, an explicit
message-size limit, and keepalive settings that match `channel_options`, so a
client configured with those options is never sent GOAWAY for pinging.
Security (bearer token, TLS) comes from a `ServerSecurity`; see `seedleague.security`.
"""

from __future__ import annotations

import logging
from typing import Callable, Iterable

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
