"""Who may talk to a seedleague server, and over what: bearer tokens and TLS.

This module owns the security settings of both ends of every connection:

    server = ServerSecurity(token="s3cret", tls_cert="host.pem", tls_key="host.key")
    await start_server(..., security=server)            # seedleague.grpc_server

    client = ClientSecurity(token="s3cret", tls_ca="host.pem")
    WorkerClient(ClientConfig("host:50051", security=client), spec)

With a token set, every RPC must carry the metadata `authorization: Bearer
<token>`; `TokenInterceptor` refuses any other call with UNAUTHENTICATED before
its handler runs, so not one message of it is read, parsed or seen by the
backend. The one exception is the standard health service
(`grpc.health.v1.Health`): it only answers SERVING or NOT_SERVING, and leaving
it open lets load balancers, `grpc_health_probe` and Kubernetes gRPC probes
check liveness without holding the secret.

A token alone travels in clear text; give the server a certificate (and the
client the CA that signed it, or the certificate itself) whenever traffic
leaves the machine.

CLIs share the flags: `add_security_flags(parser, "server" | "client")`, then
`server_security_from_args(args)` / `client_security_from_args(args)`.
`--token` falls back to the environment variable SEEDLEAGUE_TOKEN, which is the
way to pass it: command lines are visible to every user through `ps`.

How to generate a test certificate (self-signed, valid for localhost and
127.0.0.1, no passphrase; the certificate is also the CA a client trusts):

    openssl req -x509 -newkey rsa:2048 -nodes -days 1 \\
        -keyout host.key -out host.pem -subj "/CN=localhost" \\
        -addext "subjectAltName=DNS:localhost,IP:127.0.0.1"

    # server: --tls-cert host.pem --tls-key host.key
    # client: --tls-ca host.pem   (connect to localhost:PORT or 127.0.0.1:PORT)
"""

from __future__ import annotations

import argparse
import dataclasses
import hmac
import os
from typing import Awaitable, Callable, Literal, Optional

import grpc
import grpc.aio

TOKEN_ENV_VAR = "SEEDLEAGUE_TOKEN"
AUTH_METADATA_KEY = "authorization"
REFUSAL = "missing or wrong token (send metadata 'authorization: Bearer <token>')"
OPEN_SERVICE_PREFIXES = ("/grpc.health.v1.Health/",)  # callable without a token, see the module docstring


def _token_problems(token: str) -> list[str]:
    """A token must be a valid gRPC metadata value: printable ASCII without spaces."""
    if token and not all("!" <= c <= "~" for c in token):
        return ["token must be printable ASCII without spaces (it travels as gRPC metadata)"]
    return []


_CERTIFICATE = "CERTIFICATE-----"
_PRIVATE_KEY = "PRIVATE KEY-----"


def _pem_problems(name: str, path: str, marker: str) -> list[str]:
    """What is wrong with the PEM file at `path` ("" = not used): missing, unreadable, or no `marker` block."""
    if not path:
        return []
    try:
        _read_pem(name, path, marker)
    except OSError as error:
        return [f"{name} {path!r} cannot be read ({error.strerror}): give the path of a PEM file"]
    except ValueError as error:
        return [str(error)]
    return []


def _read_pem(name: str, path: str, marker: str) -> bytes:
    """The file's bytes, or ValueError if it does not hold a PEM block ending in `marker`."""
    with open(path, "rb") as file:
        data = file.read()
    if marker.encode() not in data:
        raise ValueError(f"{name} {path!r} holds no '-----BEGIN ...{marker}' PEM block: give a PEM file")
    return data


@dataclasses.dataclass(frozen=True)
class ServerSecurity:
    """What a server demands: a bearer token ("" = none) and TLS (both PEM paths, or neither = plaintext)."""

    token: str = dataclasses.field(default="", repr=False)
    tls_cert: str = ""  # PEM certificate chain the server presents
    tls_key: str = ""  # PEM private key of that certificate, unencrypted

    def __post_init__(self):
        problems = _token_problems(self.token)
        if bool(self.tls_cert) != bool(self.tls_key):
            problems.append("give both tls_cert and tls_key (--tls-cert and --tls-key) for TLS, or neither")
        problems += _pem_problems("tls_cert", self.tls_cert, _CERTIFICATE)
        problems += _pem_problems("tls_key", self.tls_key, _PRIVATE_KEY)
        if problems:
            raise ValueError("bad server security: " + "; ".join(problems))

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert)

    def credentials(self) -> Optional[grpc.ServerCredentials]:
        """TLS credentials for `add_secure_port`, or None for plaintext."""
        if not self.tls:
            return None
        cert = _read_pem("tls_cert", self.tls_cert, _CERTIFICATE)
        key = _read_pem("tls_key", self.tls_key, _PRIVATE_KEY)
        return grpc.ssl_server_credentials([(key, cert)])

    def interceptors(self) -> list[grpc.aio.ServerInterceptor]:
        """The interceptors that enforce these settings (none without a token)."""
        return [TokenInterceptor(self.token)] if self.token else []


@dataclasses.dataclass(frozen=True)
class ClientSecurity:
    """What a client presents: a bearer token ("" = none) and the CA to trust ("" = plaintext)."""

    token: str = dataclasses.field(default="", repr=False)
    tls_ca: str = ""  # PEM file of the CA (or the self-signed certificate) the server's certificate must chain to

    def __post_init__(self):
        problems = _token_problems(self.token) + _pem_problems("tls_ca", self.tls_ca, _CERTIFICATE)
        if problems:
            raise ValueError("bad client security: " + "; ".join(problems))

    @property
    def tls(self) -> bool:
        return bool(self.tls_ca)

    def channel(self, target: str, options: list[tuple[str, object]]) -> grpc.Channel:
        """A TLS channel trusting `tls_ca`, or a plaintext one."""
        if not self.tls:
            return grpc.insecure_channel(target, options=options)
        credentials = grpc.ssl_channel_credentials(root_certificates=self.root_certificates())
        return grpc.secure_channel(target, credentials, options=options)

    def root_certificates(self) -> Optional[bytes]:
        """The PEM of `tls_ca`; None for plaintext."""
        return _read_pem("tls_ca", self.tls_ca, _CERTIFICATE) if self.tls else None

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """Call metadata carrying the token (empty without one)."""
        return ((AUTH_METADATA_KEY, f"Bearer {self.token}"),) if self.token else ()


def _presented_token(metadata) -> bytes:
    """The bearer token in `metadata`, b"" if there is none."""
    for key, value in metadata or ():
        if key == AUTH_METADATA_KEY:
            value = value.encode() if isinstance(value, str) else value
            scheme, _, token = value.partition(b" ")
            return token if scheme.lower() == b"bearer" else b""
    return b""


async def _refuse_unary(request, context: grpc.aio.ServicerContext):
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, REFUSAL)


async def _refuse_stream(request_iterator, context: grpc.aio.ServicerContext):
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, REFUSAL)


def _refusing_handler(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """A handler of `handler`'s kind that aborts with UNAUTHENTICATED and never parses a request."""
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(_refuse_stream)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(_refuse_stream)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(_refuse_unary)
    return grpc.unary_unary_rpc_method_handler(_refuse_unary)


class TokenInterceptor(grpc.aio.ServerInterceptor):
    """Refuses every RPC (health checks aside) whose `authorization` metadata is not `Bearer <token>`."""

    def __init__(self, token: str):
        if not token:
            raise ValueError("TokenInterceptor needs a non-empty token")
        self._token = token.encode()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Optional[grpc.RpcMethodHandler]]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Optional[grpc.RpcMethodHandler]:
        handler = await continuation(handler_call_details)  # A lookup only: nothing runs yet.
        if handler is None or handler_call_details.method.startswith(OPEN_SERVICE_PREFIXES):
            return handler
        presented = _presented_token(handler_call_details.invocation_metadata)
        if hmac.compare_digest(presented, self._token):
            return handler
        return _refusing_handler(handler)


def add_security_flags(parser: argparse.ArgumentParser, side: Literal["server", "client"]) -> None:
    """--token and the TLS flags of one side; read them back with `*_security_from_args`."""
    if side not in ("server", "client"):
        raise ValueError(f"side must be 'server' or 'client', got {side!r}")
    group = parser.add_argument_group("security")
    group.add_argument(
        "--token",
        default=None,
        help=f"bearer token every RPC must carry (default: ${TOKEN_ENV_VAR}, else none); "
        f"prefer the environment variable, command lines show in ps",
    )
    if side == "server":
        group.add_argument("--tls-cert", default="", help="PEM certificate chain to serve TLS with (needs --tls-key)")
        group.add_argument("--tls-key", default="", help="PEM private key of --tls-cert")
    else:
        group.add_argument("--tls-ca", default="", help="PEM CA certificate to trust; connects with TLS when given")


def token_from_args(args: argparse.Namespace) -> str:
    """--token if given, else $SEEDLEAGUE_TOKEN, else ""."""
    return args.token if args.token is not None else os.environ.get(TOKEN_ENV_VAR, "")


def server_security_from_args(args: argparse.Namespace) -> ServerSecurity:
    """ServerSecurity from `add_security_flags(parser, "server")`; raises ValueError naming what to change."""
    return ServerSecurity(token=token_from_args(args), tls_cert=args.tls_cert, tls_key=args.tls_key)


def client_security_from_args(args: argparse.Namespace) -> ClientSecurity:
    """ClientSecurity from `add_security_flags(parser, "client")`; raises ValueError naming what to change."""
    return ClientSecurity(token=token_from_args(args), tls_ca=args.tls_ca)
