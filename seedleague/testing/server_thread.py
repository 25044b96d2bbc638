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

from seedleague.grpc_server import ThreadedServer
from seedleague.host.servicer import SERVICE_NAMES, EnvBackend, EnvServicer
from seedleague.security import ServerSecurity


class ServerThread(ThreadedServer):
    """An EnvService server on its own thread and event loop; restartable on the same port."""

    def __init__(self, backend: EnvBackend, address: str = "127.0.0.1:0", security: ServerSecurity = ServerSecurity()):
        super().__init__(address, lambda: [EnvServicer(backend).register], SERVICE_NAMES,
                         backend.max_message_bytes, security)
        self.backend = backend
