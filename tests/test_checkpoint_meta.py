"""CheckpointMeta: the one reader and writer of a checkpoint's JSON meta (spec, configs, counters)."""

import json

import numpy as np
import pytest

from seedleague.checkpoint_meta import CheckpointMeta, read
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
