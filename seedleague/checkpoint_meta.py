"""What a checkpoint says about itself: the JSON meta that every learner checkpoint and league
snapshot carries beside its params, written and read in this one place.

    meta = CheckpointMeta(spec, network, learner, env_steps=..., wall_s=..., record_protocol=record_protocol_of(spec))
    checkpointer.save(step, state, meta.to_json())
    meta = CheckpointMeta.from_json(checkpointer.restore_meta(step), source="runs/kuhn/checkpoints/512")
    meta.spec.env_name, meta.network, meta.learner   # NamedEnvSpec, NetworkConfig, LearnerConfig (None: not recorded)

The meta names the env spec the network was built for (always as the named spec, the one representation
below the backend), the network and learner configs whose structure the saved params and optimiser state
have, and the run's counters at that step. The spec's record on disk has two forms (`record_protocol`):
protocol 1, v1's four fields, which a host writes for the flat model and every version of seedleague reads;
protocol 2 ("protocol": 2), the tensors, heads and teams. This file is the disk edge where protocol 1 is
turned into the named spec and back. Keys this file does not know are kept in `extra` and written back
unchanged.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from seedleague.checkpoint import Checkpointer
from seedleague.checkpoint_config import CheckpointConfig
from seedleague.protocol.named import (ActionSpec, ContinuousHead, DiscreteHead, NamedEnvSpec, ObservationSpec,
                                       TensorSpec, flat_model, flat_spec)
from seedleague.rl.learner_config import LearnerConfig
from seedleague.rl.network_config import NetworkConfig

_COUNTERS = ("env_steps", "agent_steps", "episodes", "wall_s", "returns")


def _head_to_json(head) -> dict:
    if isinstance(head, DiscreteHead):
        return dict(name=head.name, kind="discrete", num_actions=head.num_actions, has_legal_mask=head.has_legal_mask)
    return dict(name=head.name, kind="continuous", low=list(head.low), high=list(head.high))


def _head_from_json(data: dict):
    if data["kind"] == "discrete":
        return DiscreteHead(data["name"], data["num_actions"], data["has_legal_mask"])
    return ContinuousHead(data["name"], tuple(data["low"]), tuple(data["high"]))


def record_protocol_of(spec: NamedEnvSpec) -> int:
    """The record a checkpoint of the model a host builds for `spec` writes: 1 for the flat model
    (seedleague.protocol.named.flat_model), v1's record, which every version of seedleague reads and loads as a
    `Policy`; 2 for the named network (loaded as a `NamedPolicy`)."""
    return 1 if flat_model(spec) else 2


def spec_to_json(spec: NamedEnvSpec, protocol: int = 2) -> dict:
    """`spec` as a checkpoint records it: protocol 2 its tensors, heads and teams (and "protocol": 2); protocol 1
    v1's four fields, for a spec of the flat model only (ValueError otherwise)."""
    if protocol == 2:
        return dict(protocol=2, env_name=spec.env_name, episode_stats=list(spec.episode_stats),
                    seat_team=list(spec.seat_team),
                    observation=[dict(name=t.name, shape=list(t.shape), dtype=t.dtype.str, masked=t.masked)
                                 for t in spec.observation.tensors],
                    action=[_head_to_json(h) for h in spec.action.heads])
    if protocol != 1 or not flat_model(spec):
        raise ValueError(f"{spec.env_name}'s spec cannot be recorded as protocol {protocol}: protocol 1 records the "
                         "flat model's spec (one unmasked tensor, one discrete head), protocol 2 any spec")
    tensor, head = spec.observation.tensors[0], spec.action.heads[0]
    return dict(env_name=spec.env_name, observation_shape=list(tensor.shape), observation_dtype=tensor.dtype.str,
                num_actions=head.num_actions)


def spec_from_json(data: dict) -> NamedEnvSpec:
    """The named spec of a checkpoint's record, either protocol: a protocol-1 record as one tensor "observation"
    and one discrete head "action" (`flat_spec`), of one env and one seat."""
    if _protocol_of_record(data) == 2:
        observation = ObservationSpec(tuple(TensorSpec(t["name"], tuple(t["shape"]), np.dtype(t["dtype"]), t["masked"])
                                            for t in data["observation"]))
        action = ActionSpec(tuple(_head_from_json(h) for h in data["action"]))
        return NamedEnvSpec(data["env_name"], observation, action, 1, len(data["seat_team"]) or 1,
                            tuple(data["episode_stats"]), tuple(data["seat_team"]))
    return flat_spec(data["env_name"], tuple(data["observation_shape"]), np.dtype(data["observation_dtype"]),
                     data["num_actions"])


def _protocol_of_record(data: dict) -> int:
    """Which record a checkpoint's spec JSON is: 2 when it says so, else 1 (written before records had a number)."""
    return 2 if data.get("protocol") == 2 else 1


def _config(cls, data: dict, source: str):
    unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise ValueError(f"checkpoint {source} records a {cls.__name__} with fields this version of seedleague does "
                         f"not have: {unknown}; load it with the version that wrote it")
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


def network_from_json(data: dict, source: str = "?") -> NetworkConfig:
    """The NetworkConfig a checkpoint was trained with (JSON turns tuples into lists)."""
    return _config(NetworkConfig, data, source)


def learner_from_json(data: dict, source: str = "?") -> LearnerConfig:
    """The LearnerConfig a checkpoint was trained with (its optimiser state has that structure)."""
    return _config(LearnerConfig, data, source)


@dataclasses.dataclass(frozen=True)
class CheckpointMeta:
    """A checkpoint's meta: the spec, the configs its state was built with, and the run's counters."""

    spec: NamedEnvSpec  # the spec the network was built for, whichever record it has on disk
    network: Optional[NetworkConfig] = None  # None: the checkpoint predates recording it
    learner: Optional[LearnerConfig] = None
    env_steps: int = 0
    agent_steps: int = 0
    episodes: int = 0
    wall_s: float = 0.0  # trained seconds, earlier sessions of a resumed run included
    returns: tuple[float, ...] = ()  # the newest episode returns, for a resumed run's moving average
    extra: dict = dataclasses.field(default_factory=dict)  # keys this file does not know, kept as they were
    record_protocol: int = 2  # the spec's record on disk: 1 v1's (a host's flat model: record_protocol_of), 2 named

    def __post_init__(self):
        if self.record_protocol not in (1, 2) or (self.record_protocol == 1 and not flat_model(self.spec)):
            raise ValueError(f"record_protocol {self.record_protocol} for {self.spec.env_name}'s spec: give 2, or 1 "
                             "for a spec of the flat model (record_protocol_of(spec) chooses)")

    def to_json(self) -> dict:
        out = dict(self.extra, spec=spec_to_json(self.spec, self.record_protocol), env_steps=self.env_steps,
                   agent_steps=self.agent_steps, episodes=self.episodes, wall_s=self.wall_s, returns=list(self.returns))
        if self.network is not None:
            out["network"] = dataclasses.asdict(self.network)
        if self.learner is not None:
            out["learner"] = dataclasses.asdict(self.learner)
        return out

    @classmethod
    def from_json(cls, data: dict, source: str, learner: bool = True) -> "CheckpointMeta":
        """Parse a checkpoint's meta; ValueError naming `source` when it has no env spec (not seedleague's format)
        or a config this version cannot build. `learner=False` leaves the learner config unread (loading a
        policy for inference needs only the network)."""
        if "spec" not in data:
            raise ValueError(f"checkpoint {source} has no env spec in its meta; it predates seedleague's format")
        known = {"spec", "network", "learner", *_COUNTERS}
        network, learner_data = data.get("network"), data.get("learner") if learner else None
        return cls(
            spec=spec_from_json(data["spec"]), record_protocol=_protocol_of_record(data["spec"]),
            network=network_from_json(network, source) if network is not None else None,
            learner=learner_from_json(learner_data, source) if learner_data is not None else None,
            env_steps=data.get("env_steps", 0), agent_steps=data.get("agent_steps", 0), episodes=data.get("episodes", 0),
            wall_s=data.get("wall_s", 0.0), returns=tuple(data.get("returns", ())),
            extra={k: v for k, v in data.items() if k not in known},
        )


def read(directory: str, step: Optional[int] = None) -> CheckpointMeta:
    """The meta of checkpoint `step` (None: the newest) in Checkpointer directory `directory`."""
    checkpointer = Checkpointer(CheckpointConfig(directory=directory))
    try:
        step = checkpointer.latest_step() if step is None else step
        return CheckpointMeta.from_json(checkpointer.restore_meta(step), source=f"{directory}/{step}")
    finally:
        checkpointer.close()
