"""With `codec_v2` (protocol v2's messages, built on the tensor functions here), the only module that
converts between protobuf messages and numpy/dataclasses.

The host side sees one representation, v2's named tensors and heads: `decode_named_spec`,
`decode_named_step` and `encode_named_actions` are protocol v1 as an adapter onto it (one tensor
named "observation", one discrete head named "action"; no copy of any array). The worker side
(`seedleague.protocol.client`) still builds and reads v1's own dataclasses with the functions below them.

Tensors travel as dtype + shape + raw little-endian C-order bytes. Decoding
checks structure only (known dtype, rank, non-negative dims, byte count, size
limit) and allocates nothing before the checks pass; `specs.check_step` checks
meaning against a session's spec.

Servicers also take two hostile-input helpers from here: `lenient_parser`, a
gRPC request deserializer that turns bytes that are no valid message into a
`Malformed` value (refused as INVALID_ARGUMENT, not gRPC's UNKNOWN), and
`clip`, which bounds the text of a status or log line that echoes client input.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import numpy as np
from google.protobuf.message import DecodeError

from seedleague.protocol.errors import INVALID_ARGUMENT, RESOURCE_EXHAUSTED, ProtocolError
from seedleague.protocol.specs import MAX_RANK, PROTOCOL_VERSION, ActionBatch, EnvSpec, StepBatch
from seedleague.protocol.named import (FLAT_ACTION, FLAT_OBSERVATION, NamedActionBatch, NamedEnvSpec,
                                       NamedStepBatch, named_of_v1)
from seedleague.v1 import env_pb2 as pb

_DTYPES = {
    pb.FLOAT32: np.dtype("<f4"),
    pb.FLOAT64: np.dtype("<f8"),
    pb.FLOAT16: np.dtype("<f2"),
    pb.INT8: np.dtype("i1"),
    pb.INT16: np.dtype("<i2"),
    pb.INT32: np.dtype("<i4"),
    pb.INT64: np.dtype("<i8"),
    pb.UINT8: np.dtype("u1"),
    pb.UINT16: np.dtype("<u2"),
    pb.UINT32: np.dtype("<u4"),
    pb.UINT64: np.dtype("<u8"),
    pb.BOOL: np.dtype("?"),
}
_ENUMS = {dtype.newbyteorder("="): enum for enum, dtype in _DTYPES.items()}
_BOOL = _DTYPES[pb.BOOL]

# Largest tensor decode accepts, in elements (and largest single dimension); bounds the
# memory a hostile shape can claim.
MAX_TENSOR_ELEMENTS = 1 << 31
# Longest status details or logged value built from client input; gRPC refuses trailers over 16 KiB.
MAX_DETAILS_CHARS = 1024
MAX_NAME_CHARS = 256  # longest EnvSpec.env_name


def dtype_to_enum(dtype) -> int:
    dtype = np.dtype(dtype).newbyteorder("=")
    try:
        return _ENUMS[dtype]
    except KeyError:
        raise ProtocolError(INVALID_ARGUMENT, f"dtype {dtype} has no protocol equivalent") from None


def enum_to_dtype(enum: int, what: str = "tensor") -> np.dtype:
    try:
        return _DTYPES[enum]
    except KeyError:
        raise ProtocolError(INVALID_ARGUMENT, f"{what} has unknown dtype enum value {enum}", what) from None


def encode_tensor(array: np.ndarray, out: Optional[pb.Tensor] = None) -> pb.Tensor:
    """numpy array -> Tensor. Big-endian input is converted to little-endian."""
    array = np.asarray(array)
    out = pb.Tensor() if out is None else out
    out.dtype = dtype_to_enum(array.dtype)
    out.shape[:] = array.shape
    little = array.astype(array.dtype.newbyteorder("<"), copy=False)  # no copy when already little-endian
    out.data = np.ascontiguousarray(little).tobytes()
    return out


def decode_tensor(tensor: pb.Tensor, what: str = "tensor") -> np.ndarray:
    """Tensor -> read-only numpy array in native byte order, or ProtocolError."""
    dtype = enum_to_dtype(tensor.dtype, what)
    shape = _shape(tensor.shape, what)
    elements = math.prod(shape)
    if elements > MAX_TENSOR_ELEMENTS or not elements:
        span = math.prod(d for d in shape if d)  # numpy refuses a shape whose other dims overflow, even beside a 0
        if span > MAX_TENSOR_ELEMENTS:
            raise ProtocolError(
                RESOURCE_EXHAUSTED,
                f"{what} shape {shape} has {elements} elements{'' if elements else f' (spans {span})'}, "
                f"limit {MAX_TENSOR_ELEMENTS}", what,
            )
    data = tensor.data  # one copy out of the message
    expected = elements * dtype.itemsize
    if len(data) != expected:
        raise ProtocolError(
            INVALID_ARGUMENT,
            f"{what} has {len(data)} data bytes but shape {shape} of {dtype.name} needs {expected}", what,
        )
    if dtype is _BOOL and data.translate(None, b"\x00\x01"):  # any byte left is neither 0 nor 1
        raise ProtocolError(INVALID_ARGUMENT, f"{what} is BOOL but holds bytes other than 0 and 1", what)
    array = np.frombuffer(data, dtype=dtype).reshape(shape)
    return array if dtype.isnative else array.astype(dtype.newbyteorder("="))


def _shape(dims, what: str) -> tuple[int, ...]:
    """A wire shape as a tuple, refused before it is copied if it has too many dimensions."""
    if len(dims) > MAX_RANK:
        raise ProtocolError(INVALID_ARGUMENT, f"{what} has {len(dims)} dimensions, at most {MAX_RANK}", what)
    shape = tuple(dims)
    if shape and min(shape) < 0:
        raise ProtocolError(INVALID_ARGUMENT, f"{what} has a negative dimension in shape {shape}", what)
    return shape


def encode_spec(spec: EnvSpec) -> pb.EnvSpec:
    return pb.EnvSpec(
        env_name=spec.env_name,
        observation=pb.TensorSpec(dtype=dtype_to_enum(spec.observation_dtype), shape=spec.observation_shape),
        action=pb.ActionSpec(num_actions=spec.num_actions),
        num_envs=spec.num_envs,
        num_seats=spec.num_seats,
        has_legal_mask=spec.has_legal_mask,
        return_bound=spec.return_bound,
    )


def decode_spec(message: pb.EnvSpec) -> EnvSpec:
    if not message.HasField("observation"):
        raise ProtocolError(INVALID_ARGUMENT, "env spec has no observation spec")
    if message.action.WhichOneof("space") != "num_actions":
        raise ProtocolError(INVALID_ARGUMENT, "env spec has no action space (set action.num_actions)")
    name = message.env_name
    if len(name) > MAX_NAME_CHARS or not name.isprintable():
        raise ProtocolError(
            INVALID_ARGUMENT,
            f"env_name must be at most {MAX_NAME_CHARS} printable chars (logs show it), got {clip(repr(name), 80)}",
        )
    rank = len(message.observation.shape)
    if rank > MAX_RANK - 2:  # checked before the shape is copied out of the message
        raise ProtocolError(
            INVALID_ARGUMENT, f"bad env spec: observation shape has {rank} dimensions, at most {MAX_RANK - 2}"
        )
    return EnvSpec(
        env_name=name,
        observation_shape=tuple(message.observation.shape),
        observation_dtype=enum_to_dtype(message.observation.dtype, "observation spec"),
        num_actions=message.action.num_actions,
        num_envs=message.num_envs,
        num_seats=message.num_seats,
        has_legal_mask=message.has_legal_mask,
        return_bound=message.return_bound,
    )


def encode_handshake(spec: EnvSpec, worker_name: str, version: int = PROTOCOL_VERSION) -> pb.HandshakeRequest:
    return pb.HandshakeRequest(protocol_version=version, spec=encode_spec(spec), worker_name=worker_name)


def encode_step(step: StepBatch) -> pb.StepBatch:
    message = pb.StepBatch(session_id=step.session_id, sequence=step.sequence)
    encode_tensor(step.observation, message.observation)
    encode_tensor(np.asarray(step.reward, np.float32), message.reward)
    encode_tensor(np.asarray(step.terminated, bool), message.terminated)
    encode_tensor(np.asarray(step.truncated, bool), message.truncated)
    if step.legal_mask is not None:
        encode_tensor(np.asarray(step.legal_mask, bool), message.legal_mask)
    if step.acting is not None:
        encode_tensor(np.asarray(step.acting, bool), message.acting)
    return message


OUTCOMES = ("reward", "terminated", "truncated")  # the tensors every step batch carries, in v1 and v2 alike


def required_tensors(message: Any, fields: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The tensor `fields` of a step batch message (v1 or v2), decoded; a ProtocolError names the first one
    missing."""
    for field in fields:
        if not message.HasField(field):
            raise ProtocolError(INVALID_ARGUMENT, f"step batch has no {field} tensor", field)
    return {field: decode_tensor(getattr(message, field), field) for field in fields}


def optional_tensor(message: Any, field: str) -> Optional[np.ndarray]:
    """The tensor `field` of a message, decoded, or None when it was not sent."""
    return decode_tensor(getattr(message, field), field) if message.HasField(field) else None


def decode_step(message: pb.StepBatch) -> StepBatch:
    """StepBatch message -> StepBatch; structural checks only (see specs.check_step)."""
    return StepBatch(
        session_id=message.session_id,
        sequence=message.sequence,
        **required_tensors(message, ("observation",) + OUTCOMES),
        legal_mask=optional_tensor(message, "legal_mask"),
        acting=optional_tensor(message, "acting"),
    )


def encode_actions(actions: ActionBatch) -> pb.ActionBatch:
    message = pb.ActionBatch(sequence=actions.sequence, policy_version=actions.policy_version)
    encode_tensor(np.asarray(actions.action, np.int32), message.action)
    return message


def decode_actions(message: pb.ActionBatch) -> ActionBatch:
    return ActionBatch(
        sequence=message.sequence,
        action=decode_tensor(message.action, "action"),
        policy_version=message.policy_version,
    )


# --- protocol v1 as an adapter onto the named representation (the host side) -----------------------


def decode_named_spec(message: pb.EnvSpec) -> NamedEnvSpec:
    """A v1 EnvSpec message as the named spec it is: one tensor "observation", one discrete head "action"."""
    return named_of_v1(decode_spec(message))


def decode_named_step(message: pb.StepBatch) -> NamedStepBatch:
    """A v1 StepBatch message as a named step ({"observation": x}, {"action": mask} when sent, no final
    observations); structural checks only (the session's spec checks the rest: protocol.named.check_named_step)."""
    tensors = required_tensors(message, ("observation",) + OUTCOMES)
    return NamedStepBatch(
        session_id=message.session_id,
        sequence=message.sequence,
        observation={FLAT_OBSERVATION: tensors.pop("observation")},
        **tensors,
        legal_mask={FLAT_ACTION: decode_tensor(message.legal_mask, "legal_mask")}
        if message.HasField("legal_mask") else {},
        acting=optional_tensor(message, "acting"),
        final_observation=None,  # v1 carries none: the learner bootstraps a truncated episode from V(s_t)
    )


def encode_named_step(step: NamedStepBatch) -> pb.StepBatch:
    """A named step of a flat-shaped spec as the v1 StepBatch message a v1 worker sends (its one tensor and mask)."""
    (observation,) = step.observation.values()
    legal_mask = next(iter(step.legal_mask.values()), None)
    return encode_step(StepBatch(step.session_id, step.sequence, observation, step.reward, step.terminated,
                                 step.truncated, legal_mask, step.acting))


def encode_named_actions(actions: NamedActionBatch) -> pb.ActionBatch:
    """The host's named answer to a v1 session (its one head, "action") as a v1 ActionBatch message."""
    message = pb.ActionBatch(sequence=actions.sequence, policy_version=actions.policy_version)
    encode_tensor(np.asarray(actions.action[FLAT_ACTION], np.int32), message.action)
    return message


# --- hostile input ---------------------------------------------------------------------------------


class Malformed:
    """A request whose bytes are not a valid `type_name` message (what `lenient_parser` yields)."""

    def __init__(self, type_name: str, error: str):
        self.type_name = type_name
        self.error = error

    def refusal(self) -> ProtocolError:
        return ProtocolError(INVALID_ARGUMENT, f"request is not a valid {self.type_name} message: {clip(self.error)}")


def lenient_parser(message_type: Any) -> Callable[[bytes], Any]:
    """A gRPC request deserializer for `message_type` that never raises: bytes that do not
    parse become a `Malformed`, which the servicer refuses with INVALID_ARGUMENT."""
    name = message_type.DESCRIPTOR.full_name

    def parse(data: bytes) -> Any:
        try:
            return message_type.FromString(data)
        except (DecodeError, ValueError, RuntimeError) as error:
            return Malformed(name, str(error))

    return parse


def check_parsed(request: Any) -> Any:
    """`request` unchanged, or the ProtocolError(INVALID_ARGUMENT) of a `Malformed` one."""
    if isinstance(request, Malformed):
        raise request.refusal()
    return request


def clip(text: str, limit: int = MAX_DETAILS_CHARS) -> str:
    """`text` cut to about `limit` chars, saying how long it was; client-controlled strings
    echoed in a status or log line go through this."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"
