"""CheckpointMeta: the one reader and writer of a checkpoint's JSON meta (spec, configs, counters)."""

import json

import numpy as np
import pytest

from seedleague.checkpoint_meta import CheckpointMeta, model_record, read
from seedleague.protocol.named import (ActionSpec, ContinuousHead, DiscreteHead, NamedEnvSpec, ObservationSpec, TensorSpec,
                                       flat_model, named_of_v1)
from seedleague.protocol.specs import EnvSpec
from seedleague.rl.learner import LearnerConfig
from seedleague.rl.networks import NetworkConfig
from test_api import save_checkpoint

SPEC = EnvSpec("openspiel:kuhn_poker", (11,), np.dtype(np.float32), 2, 1)


def test_a_meta_survives_json_with_tuples_counters_and_unknown_keys():
    meta = CheckpointMeta(SPEC, NetworkConfig(hidden_sizes=(16, 8)), LearnerConfig(loss="mmd", kl_cost=0.2, epochs=2), env_steps=5,
                          agent_steps=9, episodes=2, wall_s=1.5, returns=(1.0, -1.0), extra={"note": "kept"})
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


def test_a_flat_models_named_spec_is_recorded_as_protocol_1_and_read_back_as_the_named_spec():
    # A worker's spec of one tensor and one discrete head runs on the flat model whatever its names: a host's
    # checkpoint records v1's spec, which every earlier version reads, and it reads back as the named spec the
    # flat model is built from.
    named = NamedEnvSpec("openspiel:kuhn_poker", ObservationSpec((TensorSpec("board", (11,), np.float32),)),
                         ActionSpec((DiscreteHead("move", 2, has_legal_mask=True),)), num_envs=8, num_seats=2)
    data = json.loads(json.dumps(CheckpointMeta(model_record(named)).to_json()))
    assert data["spec"] == CheckpointMeta(SPEC).to_json()["spec"] and "protocol" not in data["spec"]
    read_back = CheckpointMeta.from_json(data, source="x")
    assert read_back.spec == SPEC  # what earlier code reads: v1's spec
    assert read_back.model_spec == named_of_v1(SPEC) and flat_model(read_back.model_spec)
    assert read_back.model_spec.observation.tensors[0].shape == (11,) and read_back.model_spec.action.heads[0].num_actions == 2


def test_a_named_networks_spec_keeps_its_tensors_heads_and_teams():
    named = NamedEnvSpec("duel", ObservationSpec((TensorSpec("board", (3, 3), np.float32), TensorSpec("flags", (2,), np.int32))),
                         ActionSpec((DiscreteHead("move", 9, has_legal_mask=True), ContinuousHead("aim", (-1.0,), (1.0,)))),
                         num_envs=4, num_seats=2, seat_team=(0, 1))
    assert model_record(named) is named
    read_back = CheckpointMeta.from_json(json.loads(json.dumps(CheckpointMeta(named).to_json())), source="x")
    assert read_back.spec.observation == named.observation and read_back.spec.action == named.action
    assert read_back.model_spec is read_back.spec and read_back.spec.seat_team == (0, 1) and not flat_model(read_back.spec)
