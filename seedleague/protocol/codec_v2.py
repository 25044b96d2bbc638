"""The v2 half of the codec: seedleague.v2 messages <-> the dataclasses of `protocol/named.py`.

Tensors use v1's encoding (`codec.encode_tensor` / `codec.decode_tensor`: the
DType values are the same). Decoding checks structure (names well-formed and not
repeated, each tensor decodable, spec values valid) and raises ProtocolError
naming the tensor or head; `protocol.named.check_named_step` checks meaning
against the session's spec. Like `codec`, the only module that sees these
protobuf types.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from seedleague.protocol.codec import (MAX_NAME_CHARS, OUTCOMES, clip, decode_tensor, dtype_to_enum, encode_tensor,
                                       enum_to_dtype, optional_tensor, required_tensors)
from seedleague.protocol.errors import INVALID_ARGUMENT, ProtocolError
from seedleague.protocol.specs import MAX_RANK
from seedleague.protocol.named import (MAX_NAME_LENGTH, MAX_NAMED, PROTOCOL_VERSION_V2, ActionSpec,
                                       ContinuousHead, DiscreteHead, ObservationSpec, NamedActionBatch,
                                       NamedEnvSpec, NamedStepBatch, TensorSpec)
from seedleague.v2 import env_pb2 as pb


# --- specs -----------------------------------------------------------------------------------------


def encode_spec(spec: NamedEnvSpec) -> pb.EnvSpec:
    message = pb.EnvSpec(env_name=spec.env_name, num_envs=spec.num_envs, num_seats=spec.num_seats,
                         episode_stats=list(spec.episode_stats), seat_team=list(spec.seat_team),
                         return_bound=spec.return_bound)
    for tensor in spec.observation.tensors:
        message.observation.add(name=tensor.name, dtype=dtype_to_enum(tensor.dtype), shape=tensor.shape,
                                masked=tensor.masked)
    for head in spec.action.heads:
        if isinstance(head, DiscreteHead):
            message.action.add(name=head.name, discrete=pb.DiscreteHead(num_actions=head.num_actions,
                                                                         has_legal_mask=head.has_legal_mask))
        else:
            message.action.add(name=head.name, continuous=pb.ContinuousHead(low=head.low, high=head.high))
    return message


def _check_counts(message: pb.EnvSpec) -> None:
    """Refuse, before anything is copied out of the message, lists and names longer than a spec may hold."""
    for what, items in (("observation tensors", message.observation), ("action heads", message.action),
                        ("episode stats", message.episode_stats)):
        if len(items) > MAX_NAMED:
            raise ProtocolError(INVALID_ARGUMENT, f"bad env spec: {len(items)} {what}, at most {MAX_NAMED}")
    for tensor in message.observation:
        if len(tensor.shape) > MAX_RANK - 2:
            raise ProtocolError(INVALID_ARGUMENT, f"bad env spec: observation tensor {clip(tensor.name, 80)!r} has "
                                f"{len(tensor.shape)} dimensions, at most {MAX_RANK - 2}")
    for head in message.action:
        if head.WhichOneof("kind") == "continuous" and max(len(head.continuous.low), len(head.continuous.high)) > 4096:
            raise ProtocolError(INVALID_ARGUMENT, f"bad env spec: continuous head {clip(head.name, 80)!r} has more "
                                "than 4096 dimensions")
    if len(message.seat_team) > 4096:
        raise ProtocolError(INVALID_ARGUMENT, "bad env spec: seat_team has more than 4096 entries")


def _head(message: pb.ActionHeadSpec):
    kind = message.WhichOneof("kind")
    if kind == "discrete":
        return DiscreteHead(message.name, message.discrete.num_actions, message.discrete.has_legal_mask)
    if kind == "continuous":
        return ContinuousHead(message.name, tuple(message.continuous.low), tuple(message.continuous.high))
    raise ValueError(f"action head {message.name!r} is neither discrete nor continuous (set one of them)")


def decode_spec(message: pb.EnvSpec) -> NamedEnvSpec:
    """EnvSpec message -> NamedEnvSpec, or ProtocolError(INVALID_ARGUMENT) saying what is wrong with it."""
    _check_counts(message)
    name = message.env_name
    if len(name) > MAX_NAME_CHARS or not name.isprintable():
        raise ProtocolError(INVALID_ARGUMENT, f"env_name must be at most {MAX_NAME_CHARS} printable chars, got "
                            f"{clip(repr(name), 80)}")
    names = [t.name for t in message.observation] + [h.name for h in message.action] + list(message.episode_stats)
    long = [n for n in names if len(n) > MAX_NAME_LENGTH]
    if long:
        raise ProtocolError(INVALID_ARGUMENT, f"bad env spec: name {clip(long[0], 80)!r} is longer than "
                            f"{MAX_NAME_LENGTH} chars")
    try:
        observation = ObservationSpec(tuple(
            TensorSpec(t.name, tuple(t.shape), enum_to_dtype(t.dtype, f"observation tensor {t.name!r}"), t.masked)
            for t in message.observation))
        action = ActionSpec(tuple(_head(h) for h in message.action))
    except ValueError as error:
        raise ProtocolError(INVALID_ARGUMENT, f"bad env spec: {error}") from None
    return NamedEnvSpec(name, observation, action, message.num_envs, message.num_seats,
                        tuple(message.episode_stats), tuple(message.seat_team), message.return_bound)


def encode_handshake(spec: NamedEnvSpec, worker_name: str,
                     version: int = PROTOCOL_VERSION_V2) -> pb.HandshakeRequest:
    return pb.HandshakeRequest(protocol_version=version, spec=encode_spec(spec), worker_name=worker_name)


# --- steps and actions -----------------------------------------------------------------------------


def encode_named(arrays: dict, out, dtypes: dict | None = None) -> None:
    """{name: array} -> repeated NamedTensor `out`, in the dict's order."""
    for key, array in arrays.items():
        array = np.asarray(array) if dtypes is None else np.asarray(array, dtypes[key])
        encode_tensor(array, out.add(name=key).tensor)


def _decode_named(field: str, items: Iterable[pb.NamedTensor]) -> dict:
    """Repeated NamedTensor -> {name: array}; a repeated name is refused, naming it."""
    out = {}
    for item in items:
        key = item.name
        what = f"{field}/{clip(key, 80)}"
        if key in out:
            raise ProtocolError(INVALID_ARGUMENT, f"{field} tensor {clip(key, 80)!r} is sent twice", what)
        out[key] = decode_tensor(item.tensor, what)
    return out


def encode_step(step: NamedStepBatch) -> pb.StepBatch:
    message = pb.StepBatch(session_id=step.session_id, sequence=step.sequence)
    encode_named(step.observation, message.observation)
    encode_tensor(np.asarray(step.reward, np.float32), message.reward)
    encode_tensor(np.asarray(step.terminated, bool), message.terminated)
    encode_tensor(np.asarray(step.truncated, bool), message.truncated)
    encode_named({k: np.asarray(v, bool) for k, v in step.legal_mask.items()}, message.legal_mask)
    if step.acting is not None:
        encode_tensor(np.asarray(step.acting, bool), message.acting)
    encode_named(step.final_observation, message.final_observation)
    encode_named({k: np.asarray(v, np.float32) for k, v in step.episode_stats.items()}, message.episode_stats)
    return message


def decode_step(message: pb.StepBatch) -> NamedStepBatch:
    """StepBatch message -> NamedStepBatch; structural checks only (see protocol.named.check_named_step)."""
    outcomes = required_tensors(message, OUTCOMES)
    return NamedStepBatch(
        session_id=message.session_id,
        sequence=message.sequence,
        observation=_decode_named("observation", message.observation),
        **outcomes,
        legal_mask=_decode_named("legal_mask", message.legal_mask),
        acting=optional_tensor(message, "acting"),
        final_observation=_decode_named("final_observation", message.final_observation),
        episode_stats=_decode_named("episode_stats", message.episode_stats),
    )


def encode_actions(actions: NamedActionBatch) -> pb.ActionBatch:
    """Each head in its wire dtype: integer arrays as INT32 (discrete heads), float ones as FLOAT32."""
    message = pb.ActionBatch(sequence=actions.sequence, policy_version=actions.policy_version)
    for name, array in actions.action.items():
        array = np.asarray(array)
        encode_tensor(array.astype(np.int32 if array.dtype.kind in "iu" else np.float32, copy=False),
                      message.action.add(name=name).tensor)
    return message


def decode_actions(message: pb.ActionBatch) -> NamedActionBatch:
    return NamedActionBatch(sequence=message.sequence, action=_decode_named("action", message.action),
                            policy_version=message.policy_version)
