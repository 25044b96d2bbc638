"""Property-based fuzzing of protocol v2's decode paths: the EnvSpec, StepBatch decoding with
`check_named_step`, and raw bytes parsed as each v2 message.

The property, as for v1 (tests/test_fuzz_decode.py): hostile input gives either a decoded value or a
ProtocolError whose code names a gRPC status, never another exception.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from seedleague.host.session_limits import SessionLimits, check_spec
from seedleague.protocol import codec, codec_v2
from seedleague.protocol.named import check_named_step
from seedleague.v2 import env_pb2 as pb
from test_fuzz_decode import DIMS, DTYPE_ENUMS, FLOATS, FUZZ, INT32, attempt, tensors
from test_protocol_v2 import SPEC, _step

NAMES = st.one_of(st.sampled_from(["vector", "screen", "entities", "entities/mask", "move", "aim", "win", ""]),
                  st.text(max_size=8))


@st.composite
def specs(draw) -> pb.EnvSpec:
    """An EnvSpec whose names, shapes, dtypes, heads, counts and teams may each be wrong."""
    message = pb.EnvSpec(env_name=draw(st.text(max_size=8)), num_envs=draw(INT32), num_seats=draw(INT32),
                         episode_stats=draw(st.lists(NAMES, max_size=3)), seat_team=draw(st.lists(INT32, max_size=4)))
    for _ in range(draw(st.integers(0, 3))):
        message.observation.add(name=draw(NAMES), dtype=draw(DTYPE_ENUMS), shape=draw(st.lists(DIMS, max_size=4)),
                                masked=draw(st.booleans()))
    for _ in range(draw(st.integers(0, 3))):
        head = message.action.add(name=draw(NAMES))
        kind = draw(st.sampled_from(["discrete", "continuous", "none"]))
        if kind == "discrete":
            head.discrete.num_actions = draw(INT32)
            head.discrete.has_legal_mask = draw(st.booleans())
        elif kind == "continuous":
            head.continuous.low[:] = draw(st.lists(FLOATS, max_size=3))
            head.continuous.high[:] = draw(st.lists(FLOATS, max_size=3))
    return message


def _v2(tensor) -> pb.Tensor:
    """A v1 Tensor as the v2 one with the same bytes on the wire (the two messages are field for field alike)."""
    return pb.Tensor.FromString(tensor.SerializeToString())


@FUZZ
@given(specs())
def test_any_v2_spec_decodes_and_passes_the_limits_or_is_refused_with_a_status(message):
    ok, spec = attempt(codec_v2.decode_spec, message)
    if ok:
        attempt(check_spec, spec, SessionLimits())


@FUZZ
@given(st.data())
def test_any_v2_step_against_a_spec_is_accepted_or_refused_with_a_status(data):
    message = codec_v2.encode_step(_step())
    field = data.draw(st.sampled_from(["observation", "legal_mask", "final_observation", "episode_stats"]))
    items = getattr(message, field)
    if items and data.draw(st.booleans()):
        del items[data.draw(st.integers(0, len(items) - 1))]
    for _ in range(data.draw(st.integers(0, 2))):
        items.add(name=data.draw(NAMES)).tensor.CopyFrom(_v2(data.draw(tensors())))
    if data.draw(st.booleans()):
        message.truncated.CopyFrom(_v2(data.draw(tensors())))
    ok, step = attempt(codec_v2.decode_step, message)
    if ok:
        attempt(check_named_step, SPEC, step)


@FUZZ
@given(st.binary(max_size=256), st.sampled_from([pb.HandshakeRequest, pb.StepBatch, pb.ActionBatch]))
def test_any_bytes_parse_as_a_v2_message_or_are_malformed(data, message_type):
    parsed = codec.lenient_parser(message_type)(data)
    if isinstance(parsed, codec.Malformed):
        assert parsed.refusal().code == "INVALID_ARGUMENT"
    elif message_type is pb.StepBatch:
        attempt(codec_v2.decode_step, parsed)
    elif message_type is pb.ActionBatch:
        attempt(codec_v2.decode_actions, parsed)
