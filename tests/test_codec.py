"""Codec round trips and the errors malformed messages get (seedleague.protocol.codec, specs.check_step)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from seedleague.protocol import codec
from seedleague.protocol.errors import INVALID_ARGUMENT, RESOURCE_EXHAUSTED, ProtocolError
from seedleague.protocol.specs import ActionBatch, EnvSpec, StepBatch, check_step, zero_step
from seedleague.v1 import env_pb2 as pb

ALL_DTYPES = [name for name in pb.DType.keys() if name != "DTYPE_UNSPECIFIED"]
SHAPES = [(), (0,), (3,), (2, 3), (2, 0, 4), (2, 3, 4, 1)]


def _array(dtype: np.dtype, shape: tuple) -> np.ndarray:
    count = int(np.prod(shape))
    if dtype == bool:
        return (np.arange(count) % 2 == 0).reshape(shape)
    values = np.arange(count) - count // 2 if dtype.kind in "if" else np.arange(count)
    return values.astype(dtype).reshape(shape)


def _spec(**overrides) -> EnvSpec:
    fields = dict(env_name="test", observation_shape=(3,), observation_dtype=np.float32, num_actions=4, num_envs=2)
    fields.update(overrides)
    return EnvSpec(**fields)


def _step(spec: EnvSpec, **overrides) -> StepBatch:
    return dataclasses.replace(zero_step(spec, "s"), **overrides)


def _refused(code: str, *words: str):
    """Context manager: expect ProtocolError with `code` and a message containing every word."""

    class Check:
        def __enter__(self):
            self._raises = pytest.raises(ProtocolError)
            self.info = self._raises.__enter__()
            return self

        def __exit__(self, *exc):
            handled = self._raises.__exit__(*exc)
            error = self.info.value
            assert error.code == code, error
            for word in words:
                assert word in error.message, error.message
            return handled

    return Check()


@pytest.mark.parametrize("name", ALL_DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_tensor_round_trip_every_dtype_and_shape(name, shape):
    enum = pb.DType.Value(name)
    array = _array(codec.enum_to_dtype(enum), shape)
    message = codec.encode_tensor(array)
    assert message.dtype == enum
    assert tuple(message.shape) == shape
    wire = pb.Tensor.FromString(message.SerializeToString())
    decoded = codec.decode_tensor(wire)
    assert decoded.dtype == array.dtype and decoded.shape == shape
    np.testing.assert_array_equal(decoded, array)


def test_big_endian_input_is_sent_little_endian():
    array = np.arange(3, dtype=">i4")
    message = codec.encode_tensor(array)
    assert message.data == np.arange(3, dtype="<i4").tobytes()
    np.testing.assert_array_equal(codec.decode_tensor(message), array)


def test_spec_round_trip():
    spec = _spec(
        observation_shape=(84, 84, 4), observation_dtype=np.uint8, num_envs=8, num_seats=2, has_legal_mask=True,
        return_bound=1200.0,
    )
    wire = pb.EnvSpec.FromString(codec.encode_spec(spec).SerializeToString())
    assert codec.decode_spec(wire) == spec
    assert codec.decode_spec(codec.encode_spec(_spec())).return_bound == 0.0  # not declared


@pytest.mark.parametrize("bound", [-1.0, float("nan"), float("inf")])
def test_a_return_bound_that_is_no_finite_non_negative_number_is_refused(bound):
    message = codec.encode_spec(_spec())
    message.return_bound = bound
    with _refused(INVALID_ARGUMENT, "return_bound", "finite number >= 0"):
        codec.decode_spec(message)


def test_step_round_trip_with_optional_tensors():
    spec = _spec(num_seats=2, has_legal_mask=True)
    rng = np.random.default_rng(0)
    step = _step(
        spec,
        sequence=7,
        observation=rng.normal(size=(2, 2, 3)).astype(np.float32),
        reward=np.array([[1.0, -1.0], [0.5, 0.0]], np.float32),
        terminated=np.array([True, False]),
        truncated=np.array([False, True]),
        acting=np.array([[True, False], [False, True]]),
    )
    wire = pb.StepBatch.FromString(codec.encode_step(step).SerializeToString())
    decoded = codec.decode_step(wire)
    assert (decoded.session_id, decoded.sequence) == ("s", 7)
    for field in ("observation", "reward", "terminated", "truncated", "legal_mask", "acting"):
        np.testing.assert_array_equal(getattr(decoded, field), getattr(step, field))
    check_step(spec, decoded)


def test_step_round_trip_without_optional_tensors():
    decoded = codec.decode_step(codec.encode_step(_step(_spec())))
    assert decoded.legal_mask is None and decoded.acting is None


def test_actions_round_trip():
    actions = ActionBatch(sequence=3, action=np.array([[1], [0]], np.int32), policy_version=12)
    decoded = codec.decode_actions(pb.ActionBatch.FromString(codec.encode_actions(actions).SerializeToString()))
    assert (decoded.sequence, decoded.policy_version) == (3, 12)
    np.testing.assert_array_equal(decoded.action, actions.action)


def test_unknown_dtype_enum():
    with _refused(INVALID_ARGUMENT, "observation", "unknown dtype", "99"):
        codec.decode_tensor(pb.Tensor(dtype=99, shape=[1], data=b"\0"), "observation")
    with _refused(INVALID_ARGUMENT, "unknown dtype", "0"):
        codec.decode_tensor(pb.Tensor(dtype=pb.DTYPE_UNSPECIFIED, shape=[], data=b""))


def test_negative_dimension():
    with _refused(INVALID_ARGUMENT, "reward", "negative dimension"):
        codec.decode_tensor(pb.Tensor(dtype=pb.FLOAT32, shape=[2, -1], data=b""), "reward")


def test_bytes_do_not_match_shape():
    with _refused(INVALID_ARGUMENT, "observation", "7 data bytes", "needs 8"):
        codec.decode_tensor(pb.Tensor(dtype=pb.FLOAT32, shape=[2], data=b"\0" * 7), "observation")


def test_huge_shape_is_resource_exhausted():
    with _refused(RESOURCE_EXHAUSTED, "observation", "elements", "limit"):
        codec.decode_tensor(pb.Tensor(dtype=pb.UINT8, shape=[1 << 20, 1 << 20], data=b""), "observation")


def test_bool_bytes_other_than_zero_and_one():
    with _refused(INVALID_ARGUMENT, "terminated", "BOOL", "0 and 1"):
        codec.decode_tensor(pb.Tensor(dtype=pb.BOOL, shape=[3], data=b"\x00\x01\x02"), "terminated")


@pytest.mark.parametrize("field", ["observation", "reward", "terminated", "truncated"])
def test_missing_tensor(field):
    message = codec.encode_step(_step(_spec()))
    message.ClearField(field)
    with _refused(INVALID_ARGUMENT, f"no {field} tensor"):
        codec.decode_step(message)


def test_spec_without_observation_or_action():
    message = codec.encode_spec(_spec())
    message.ClearField("action")
    with _refused(INVALID_ARGUMENT, "action space"):
        codec.decode_spec(message)
    message = codec.encode_spec(_spec())
    message.ClearField("observation")
    with _refused(INVALID_ARGUMENT, "observation spec"):
        codec.decode_spec(message)


def test_bad_spec_names_every_problem():
    with _refused(INVALID_ARGUMENT, "num_envs", "num_actions"):
        _spec(num_envs=0, num_actions=0)


def test_check_step_accepts_a_good_step():
    check_step(_spec(), _step(_spec()))


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("observation", np.zeros((2, 1, 4), np.float32), ["observation", "shape (2, 1, 4)", "expected (2, 1, 3)"]),
        ("reward", np.zeros((2,), np.float32), ["reward", "shape"]),
        ("terminated", np.zeros((3,), bool), ["terminated", "shape"]),
        ("observation", np.zeros((2, 1, 3), np.float64), ["observation", "dtype float64", "float32"]),
        ("reward", np.zeros((2, 1), np.float64), ["reward", "dtype"]),
        ("truncated", np.zeros((2,), np.uint8), ["truncated", "dtype"]),
    ],
)
def test_check_step_wrong_shape_or_dtype(field, value, words):
    spec = _spec()
    with _refused(INVALID_ARGUMENT, *words):
        check_step(spec, _step(spec, **{field: value}))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("field", ["observation", "reward"])
def test_check_step_non_finite(field, bad):
    spec = _spec()
    step = _step(spec)
    getattr(step, field)[1, 0, ...] = bad
    with _refused(INVALID_ARGUMENT, field, "non-finite", "[1, 0"):
        check_step(spec, step)


def test_check_step_legal_mask_without_a_legal_action_for_an_acting_seat():
    spec = _spec(num_seats=2, has_legal_mask=True)
    mask = np.ones((2, 2, 4), bool)
    mask[1, 0] = False
    with _refused(INVALID_ARGUMENT, "no legal action", "env 1 seat 0"):
        check_step(spec, _step(spec, legal_mask=mask))
    # The same mask is fine when that seat does not act this step.
    check_step(spec, _step(spec, legal_mask=mask, acting=np.array([[True, True], [False, True]])))


def test_check_step_missing_legal_mask():
    spec = _spec(has_legal_mask=True)
    with _refused(INVALID_ARGUMENT, "legal_mask is missing"):
        check_step(spec, _step(spec, legal_mask=None))


def test_check_step_unexpected_legal_mask():
    spec = _spec()
    with _refused(INVALID_ARGUMENT, "legal_mask sent", "has_legal_mask=false"):
        check_step(spec, _step(spec, legal_mask=np.ones((2, 1, 4), bool)))


def test_check_step_wrong_acting_shape():
    spec = _spec()
    with _refused(INVALID_ARGUMENT, "acting", "shape"):
        check_step(spec, _step(spec, acting=np.ones((2,), bool)))
