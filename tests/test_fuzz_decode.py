"""Property-based fuzzing of every env-protocol decode path: tensors, the handshake's EnvSpec,
StepBatch decoding and `check_step`, and raw bytes parsed as each message.

The property everywhere: hostile input gives either a decoded value or a ProtocolError whose
code names a gRPC status; never another exception, and never an allocation sized by a declared
shape rather than by the bytes received. `benchmarks/fuzz_decode.py` runs the `test_*` functions
here with many more examples (`SEEDLEAGUE_FUZZ_EXAMPLES` sets the count for pytest too).
"""

from __future__ import annotations

import math
import os
import tracemalloc

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from seedleague.host.sessions import Session
from seedleague.host.session_limits import SessionLimits, check_spec
from seedleague.protocol import codec
from seedleague.protocol.errors import ProtocolError
from seedleague.protocol.specs import MAX_RANK, EnvSpec, check_step, zero_step
from seedleague.protocol.named import check_named_step, named_of_v1
from seedleague.v1 import env_pb2 as pb

EXAMPLES = int(os.environ.get("SEEDLEAGUE_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
STATUS_NAMES = set(grpc.StatusCode.__members__)
INT64 = st.integers(-(2**63), 2**63 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
# Dimensions a hostile worker would try: small, zero, negative, and huge.
DIMS = st.one_of(st.integers(0, 6), st.integers(-3, -1), st.sampled_from([2**31, 2**40, 2**62, 2**63 - 1]), INT64)
DTYPE_ENUMS = st.one_of(st.sampled_from(list(pb.DType.values())), st.integers(-5, 40))
FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=32)


def attempt(call, *args) -> tuple[bool, object]:
    """(True, call(*args)), or (False, the ProtocolError) after one that names a status and says something."""
    try:
        return True, call(*args)
    except ProtocolError as error:
        assert error.code in STATUS_NAMES, error
        assert error.message
        return False, error


@st.composite
def tensors(draw, max_rank: int = 6) -> pb.Tensor:
    """A Tensor whose dtype, shape and data may each be wrong, or all right."""
    dtype = draw(DTYPE_ENUMS)
    shape = draw(st.lists(DIMS, max_size=max_rank))
    try:
        needed = math.prod(shape) * codec.enum_to_dtype(dtype).itemsize
    except ProtocolError:
        needed = 0
    size = draw(st.one_of(st.just(needed), st.integers(0, 64)) if 0 <= needed <= 4096 else st.integers(0, 64))
    return pb.Tensor(dtype=dtype, shape=shape, data=draw(st.binary(min_size=size, max_size=size)))


@st.composite
def specs(draw) -> EnvSpec:
    """A valid EnvSpec small enough to build steps for."""
    return EnvSpec(
        env_name=draw(st.text(max_size=8)),
        observation_shape=tuple(draw(st.lists(st.integers(1, 3), max_size=3))),
        observation_dtype=draw(st.sampled_from([np.float32, np.float16, np.uint8, np.int32, np.bool_])),
        num_actions=draw(st.integers(1, 5)),
        num_envs=draw(st.integers(1, 3)),
        num_seats=draw(st.integers(1, 2)),
        has_legal_mask=draw(st.booleans()),
    )


# --- tensors -------------------------------------------------------------------------------------


@FUZZ
@given(tensors())
def test_decode_tensor_gives_the_declared_array_or_a_status(tensor):
    ok, array = attempt(codec.decode_tensor, tensor, "observation")
    if ok:
        assert array.shape == tuple(tensor.shape)
        assert array.nbytes == len(tensor.data)


@FUZZ
@given(st.lists(DIMS, min_size=1, max_size=40), DTYPE_ENUMS)
def test_hostile_shapes_never_allocate_by_shape(shape, dtype):
    tensor = pb.Tensor(dtype=dtype, shape=shape, data=b"\x00" * 8)
    tracemalloc.start()
    try:
        attempt(codec.decode_tensor, tensor)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024, f"decoding shape {shape} allocated {peak} bytes"


@pytest.mark.parametrize(
    "shape, data, code, words",
    [
        ([2**40], b"", "RESOURCE_EXHAUSTED", "elements"),
        ([1 << 20, 1 << 20, 4], b"", "RESOURCE_EXHAUSTED", "elements"),
        ([0, 2**62], b"", "RESOURCE_EXHAUSTED", "spans"),  # zero elements, but numpy refuses the shape
        ([0, 2**31, 2**31], b"", "RESOURCE_EXHAUSTED", "spans"),
        ([1] * 100, b"\x00" * 4, "INVALID_ARGUMENT", "100 dimensions"),  # numpy allows at most 64
        ([0] * (MAX_RANK + 1), b"", "INVALID_ARGUMENT", "dimensions"),
        ([-1, -1], b"\x00" * 4, "INVALID_ARGUMENT", "negative"),
        ([2, 3], b"\x00" * 7, "INVALID_ARGUMENT", "7 data bytes"),
    ],
)
def test_hostile_tensors_are_refused_before_allocating(shape, data, code, words):
    tracemalloc.start()
    try:
        with pytest.raises(ProtocolError) as error:
            codec.decode_tensor(pb.Tensor(dtype=pb.FLOAT32, shape=shape, data=data), "observation")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert error.value.code == code and words in error.value.message, error.value
    assert peak < 64 * 1024


def test_a_million_dimension_shape_is_refused_without_copying_it():
    tensor = pb.Tensor(dtype=pb.UINT8, shape=[1] * 1_000_000)
    tracemalloc.start()
    try:
        with pytest.raises(ProtocolError, match="1000000 dimensions"):
            codec.decode_tensor(tensor)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024  # tuple(shape) alone would be 8 MB


# --- handshake -------------------------------------------------------------------------------------


@st.composite
def handshake_specs(draw) -> pb.EnvSpec:
    message = pb.EnvSpec(
        env_name=draw(st.text(max_size=20)),
        num_envs=draw(st.one_of(st.integers(-2, 5), INT32)),
        num_seats=draw(st.one_of(st.integers(-2, 3), INT32)),
        has_legal_mask=draw(st.booleans()),
    )
    if draw(st.booleans()):
        message.observation.dtype = draw(DTYPE_ENUMS)
        message.observation.shape[:] = draw(st.lists(DIMS, max_size=40))
    if draw(st.booleans()):
        message.action.num_actions = draw(st.one_of(st.integers(-2, 10), INT32))
    return message


@FUZZ
@given(handshake_specs())
def test_handshake_spec_is_valid_within_limits_or_refused(message):
    ok, spec = attempt(codec.decode_spec, message)
    if not ok:
        assert spec.code == "INVALID_ARGUMENT"
        return
    assert spec.num_envs >= 1 and spec.num_seats >= 1 and spec.num_actions >= 1
    assert all(d >= 1 for d in spec.observation_shape) and len(spec.observation_shape) <= MAX_RANK - 2
    limits = SessionLimits()
    ok, error = attempt(check_spec, named_of_v1(spec), limits)
    if not ok:
        assert error.code == "RESOURCE_EXHAUSTED"
        return
    assert math.prod(spec.observation_shape) <= limits.max_observation_elements
    assert spec.num_actions <= limits.max_num_actions


def test_handshake_with_a_2_to_the_40_observation_is_refused_before_anything_is_built():
    message = pb.EnvSpec(env_name="huge", num_envs=1, num_seats=1)
    message.observation.dtype = pb.FLOAT32
    message.observation.shape[:] = [1 << 20, 1 << 20]
    message.action.num_actions = 2
    with pytest.raises(ProtocolError) as error:
        check_spec(codec.decode_named_spec(message), SessionLimits())
    assert error.value.code == "RESOURCE_EXHAUSTED" and "max_observation_elements" in error.value.message


# --- steps ---------------------------------------------------------------------------------------

STEP_TENSORS = ("observation", "reward", "terminated", "truncated", "legal_mask", "acting")


@st.composite
def hostile_steps(draw) -> tuple[EnvSpec, pb.StepBatch]:
    """A spec and a StepBatch that fits it, with up to three hostile changes."""
    spec = draw(specs())
    step = zero_step(spec, "s", acting=draw(st.booleans()))
    with np.errstate(over="ignore"):  # a float32 beyond float16's range becomes inf: one more hostile value
        if spec.observation_dtype.kind == "f":
            step.observation = np.full_like(step.observation, draw(FLOATS))
        step.reward = np.full_like(step.reward, draw(FLOATS))
    if step.legal_mask is not None:
        step.legal_mask = np.asarray(draw(st.lists(st.booleans(), min_size=step.legal_mask.size,
                                                   max_size=step.legal_mask.size)), bool).reshape(step.legal_mask.shape)
    message = codec.encode_step(step)
    for _ in range(draw(st.integers(0, 3))):
        field = draw(st.sampled_from(STEP_TENSORS))
        change = draw(st.sampled_from(["replace", "drop", "shape", "dtype", "data"]))
        tensor = getattr(message, field)
        if change == "replace":
            tensor.CopyFrom(draw(tensors(max_rank=4)))
        elif change == "drop":
            message.ClearField(field)
        elif change == "shape":
            tensor.shape[:] = draw(st.lists(DIMS, max_size=5))
        elif change == "dtype":
            tensor.dtype = draw(DTYPE_ENUMS)
        else:
            tensor.data = draw(st.binary(max_size=64))
    return spec, message


@FUZZ
@given(hostile_steps())
def test_steps_that_pass_check_step_can_be_served(spec_and_message):
    spec, message = spec_and_message
    ok, step = attempt(codec.decode_step, message)
    if not ok or not attempt(check_step, spec, step)[0]:
        return
    for name in ("observation", "reward"):  # what passes is finite and has the spec's layout
        value = getattr(step, name)
        assert value.dtype.kind != "f" or np.isfinite(value).all()
    named_spec, named_step = named_of_v1(spec), codec.decode_named_step(message)  # the host's own path: v1's adapter
    check_named_step(named_spec, named_step)  # what v1's check lets through, the host's named check does too
    session = Session("s", named_spec, "fuzz", unroll_length=0, initial_state=lambda n: np.zeros((n, 1)))
    agents = session.flatten(named_step)  # the host's next move; must not fail on anything check_step let through
    assert agents.observation.shape == (spec.num_agents,) + spec.observation_shape
    if spec.has_legal_mask:
        assert agents.legal_mask[agents.acting].any(axis=-1).all()


@FUZZ
@given(specs(), st.sampled_from(["nan", "inf", "-inf"]), st.sampled_from(["observation", "reward"]))
def test_non_finite_values_are_refused(spec, bad, field):
    step = zero_step(spec, "s")
    value = getattr(step, field)
    assume(value.dtype.kind == "f")
    value.flat[-1] = float(bad)
    with pytest.raises(ProtocolError, match="non-finite") as error:
        check_step(spec, codec.decode_step(codec.encode_step(step)))
    assert error.value.code == "INVALID_ARGUMENT"


# --- raw bytes ---------------------------------------------------------------------------------------


def _decode_handshake(message: pb.HandshakeRequest):
    return codec.decode_spec(message.spec)


DECODERS = {
    pb.HandshakeRequest: _decode_handshake,
    pb.EnvSpec: codec.decode_spec,
    pb.StepBatch: codec.decode_step,
    pb.Tensor: codec.decode_tensor,
    pb.ActionBatch: codec.decode_actions,
}


def _parse_and_decode(message_type, data: bytes):
    """What a servicer does with received bytes: lenient parse, refuse Malformed, decode."""
    return DECODERS[message_type](codec.check_parsed(codec.lenient_parser(message_type)(data)))


@FUZZ
@given(st.sampled_from(list(DECODERS)), st.binary(max_size=256))
def test_random_bytes_as_every_message(message_type, data):
    attempt(_parse_and_decode, message_type, data)


@FUZZ
@given(hostile_steps(), st.data())
def test_truncated_messages(spec_and_message, data):
    spec, message = spec_and_message
    wire = message.SerializeToString()
    cut = wire[: data.draw(st.integers(0, len(wire)))]
    ok, step = attempt(_parse_and_decode, pb.StepBatch, cut)
    if ok:
        attempt(check_step, spec, step)
    handshake = codec.encode_handshake(spec, "fuzz").SerializeToString()
    attempt(_parse_and_decode, pb.HandshakeRequest, handshake[: data.draw(st.integers(0, len(handshake)))])


def test_random_bytes_are_malformed_not_an_exception():
    parsed = codec.lenient_parser(pb.StepBatch)(b"\xff\xff\xff")
    assert isinstance(parsed, codec.Malformed)
    with pytest.raises(ProtocolError, match="not a valid seedleague.v1.StepBatch") as error:
        codec.check_parsed(parsed)
    assert error.value.code == "INVALID_ARGUMENT"


def test_clip_bounds_echoed_input():
    assert codec.clip("abc") == "abc"
    clipped = codec.clip("x" * 100_000)
    assert len(clipped) < codec.MAX_DETAILS_CHARS + 32 and clipped.endswith("(100000 chars)")
