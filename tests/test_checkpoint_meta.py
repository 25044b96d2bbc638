"""CheckpointMeta: the one reader and writer of a checkpoint's JSON meta (spec, configs, counters)."""

import json

import numpy as np
import pytest

from seedleague.checkpoint_meta import CheckpointMeta, read, record_protocol_of, spec_to_json
from seedleague.protocol.named import (ActionSpec, ContinuousHead, DiscreteHead, NamedEnvSpec, ObservationSpec, TensorSpec,
                                       flat_model, named_of_v1)
from seedleague.protocol.specs import EnvSpec
from seedleague.rl.learner_config import LearnerConfig
from seedleague.rl.network_config import NetworkConfig
from test_api import save_checkpoint, v1_record

V1 = EnvSpec("openspiel:kuhn_poker", (11,), np.dtype(np.float32), 2, 1)
SPEC = named_of_v1(V1)  # how a protocol-1 record reads back: one tensor "observation", one head "action"
DUEL = NamedEnvSpec("duel", ObservationSpec((TensorSpec("board", (3, 3), np.float32), TensorSpec("flags", (2,), np.int32))),
                    ActionSpec((DiscreteHead("move", 9, has_legal_mask=True), ContinuousHead("aim", (-1.0,), (1.0,)))),
                    num_envs=1, num_seats=2, seat_team=(0, 1))  # a record keeps no worker's env count


@pytest.mark.parametrize("spec, protocol", [(SPEC, 1), (SPEC, 2), (DUEL, 2)])
def test_a_meta_survives_json_with_tuples_counters_and_unknown_keys(spec, protocol):
    meta = CheckpointMeta(spec, NetworkConfig(hidden_sizes=(16, 8)), LearnerConfig(loss="mmd", kl_cost=0.2, epochs=2), env_steps=5,
                          agent_steps=9, episodes=2, wall_s=1.5, returns=(1.0, -1.0), extra={"note": "kept"},
                          record_protocol=protocol)
    data = json.loads(json.dumps(meta.to_json()))  # what orbax's JSON sidecar does to it
    assert data["network"]["hidden_sizes"] == [16, 8] and data["note"] == "kept"
    assert CheckpointMeta.from_json(data, source="x") == meta


def test_a_meta_without_a_spec_or_with_fields_this_version_lacks_is_refused_by_name():
    with pytest.raises(ValueError, match="checkpoint runs/a/3 has no env spec"):
        CheckpointMeta.from_json({"network": {}}, source="runs/a/3")
    data = CheckpointMeta(SPEC, NetworkConfig(), LearnerConfig()).to_json()
    data["learner"]["retired_knob"] = 1
    with pytest.raises(ValueError, match=r"LearnerConfig with fields .* not have: \['retired_knob'\]"):
        CheckpointMeta.from_json(data, source="runs/a/3")
    assert CheckpointMeta.from_json(data, source="runs/a/3", learner=False).learner is None  # inference needs no learner


def test_read_gives_the_newest_or_a_named_checkpoints_meta(tmp_path):
    save_checkpoint(tmp_path / "c", step=3)
    save_checkpoint(tmp_path / "c", step=7, network=NetworkConfig(hidden_sizes=(4,)))
    assert read(str(tmp_path / "c")).network.hidden_sizes == (4,)
    older = read(str(tmp_path / "c"), 3)
    assert older.spec.env_name == "openspiel:kuhn_poker" and older.env_steps == 300 and older.learner == LearnerConfig()


def test_a_checkpoint_written_before_records_had_a_protocol_reads_as_the_named_spec_and_writes_back_unchanged(tmp_path):
    # save_checkpoint writes the spec as every earlier version did: v1's four fields, no "protocol" key.
    save_checkpoint(tmp_path / "c", step=3, env=("openspiel:leduc_poker", (30,), 3), dtype=np.uint8)
    meta = read(str(tmp_path / "c"))
    assert meta.record_protocol == 1 and flat_model(meta.spec)
    assert meta.spec == named_of_v1(EnvSpec("openspiel:leduc_poker", (30,), np.dtype(np.uint8), 3, 1))
    (tensor,), (head,) = meta.spec.observation.tensors, meta.spec.action.heads
    assert (tensor.name, tensor.shape, tensor.dtype, head.name, head.num_actions) == ("observation", (30,), np.uint8, "action", 3)
    assert meta.spec.num_seats == 1 and meta.spec.seat_team == ()  # a protocol-1 record names no seats
    assert meta.to_json()["spec"] == v1_record("openspiel:leduc_poker", (30,), np.uint8, 3)  # a resumed run keeps it


def test_a_flat_models_named_spec_is_recorded_as_protocol_1_and_read_back_as_the_named_spec():
    # A worker's spec of one tensor and one discrete head runs on the flat model whatever its names: a host's
    # checkpoint records v1's spec, which every earlier version reads, and it reads back as the named spec the
    # flat model is built from.
    named = NamedEnvSpec("openspiel:kuhn_poker", ObservationSpec((TensorSpec("board", (11,), np.float32),)),
                         ActionSpec((DiscreteHead("move", 2, has_legal_mask=True),)), num_envs=8, num_seats=2)
    assert record_protocol_of(named) == 1
    data = json.loads(json.dumps(CheckpointMeta(named, record_protocol=record_protocol_of(named)).to_json()))
    assert data["spec"] == v1_record("openspiel:kuhn_poker", (11,), np.float32, 2) == spec_to_json(named, 1)
    read_back = CheckpointMeta.from_json(data, source="x")
    assert read_back.spec == SPEC and read_back.record_protocol == 1 and flat_model(read_back.spec)
    assert read_back.spec.observation.tensors[0].shape == (11,) and read_back.spec.action.heads[0].num_actions == 2


def test_a_named_networks_spec_keeps_its_tensors_heads_and_teams():
    assert record_protocol_of(DUEL) == 2
    read_back = CheckpointMeta.from_json(json.loads(json.dumps(CheckpointMeta(DUEL).to_json())), source="x")
    assert read_back.spec.observation == DUEL.observation and read_back.spec.action == DUEL.action
    assert read_back.record_protocol == 2 and read_back.spec.seat_team == (0, 1) and not flat_model(read_back.spec)


def test_a_named_networks_spec_cannot_be_recorded_as_protocol_1():
    with pytest.raises(ValueError, match="record_protocol 1 for duel's spec: give 2, or 1 for a spec of the flat model"):
        CheckpointMeta(DUEL, record_protocol=1)
    with pytest.raises(ValueError, match="duel's spec cannot be recorded as protocol 1"):
        spec_to_json(DUEL, 1)
    with pytest.raises(ValueError, match="record_protocol 3"):
        CheckpointMeta(SPEC, record_protocol=3)
