"""gRPC channel options shared by every client and server: size limits and keepalive.

Kept apart from the server module so env workers import only grpc itself.
Clients and servers built with these options agree on keepalive, so a client
is never sent GOAWAY (too_many_pings) for pinging.
"""

from __future__ import annotations

KEEPALIVE_TIME_MS = 20_000


def channel_options(max_message_bytes: int) -> list[tuple[str, int]]:
    """Options for clients and servers alike: size limits and compatible keepalive."""
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", KEEPALIVE_TIME_MS // 2),
        ("grpc.http2.max_pings_without_data", 0),
    ]
