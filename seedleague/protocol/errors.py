"""ProtocolError: a bad input, with the gRPC status code the host answers it with.

Plain code raises it without importing grpc; servicers turn it into a status.
"""

from __future__ import annotations

from typing import Optional

INVALID_ARGUMENT = "INVALID_ARGUMENT"
FAILED_PRECONDITION = "FAILED_PRECONDITION"
NOT_FOUND = "NOT_FOUND"
RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
UNAVAILABLE = "UNAVAILABLE"
INTERNAL = "INTERNAL"


class ProtocolError(Exception):
    """A message the host refuses. `code` names a grpc.StatusCode member; `field` names the message's
    field at fault (`"observation"`, `"legal_mask"`, ...) where one is, so tools need not parse `message`."""

    def __init__(self, code: str, message: str, field: Optional[str] = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field

    def __repr__(self) -> str:
        return f"ProtocolError({self.code}, {self.message!r})"
