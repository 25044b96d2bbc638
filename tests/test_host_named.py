"""The training host with protocol v2 workers over a real socket: the named network acts (one action per
head, legal and inside its Box), unrolls of named tensors reach the learner, truncated episodes bootstrap from
their final observation, bad steps reach nothing, the checkpoint meta records the spec; a flat-shaped v2 worker
runs on the flat model, and a v1 worker reaches the host as named steps (v1 is an adapter at the wire edge)."""

from __future__ import annotations

import dataclasses
import threading

import grpc
import numpy as np
import pytest

from conftest import serve_host

from seedleague.checkpoint_meta import CheckpointMeta
from seedleague.host import named
from seedleague.host.host import Host, HostConfig
from seedleague.host.replay_config import ReplayConfig
from seedleague.host.sessions import AgentStep, Session
from seedleague.metrics import Metrics
from seedleague.protocol import codec_v2
from seedleague.protocol.client import ClientConfig, WorkerClient
from seedleague.protocol.client_v2 import NamedWorkerClient
from seedleague.protocol.errors import FAILED_PRECONDITION, ProtocolError
from seedleague.protocol.named import (ActionSpec, ContinuousHead, DiscreteHead, NamedActionBatch, NamedEnvSpec,
                                       NamedStepBatch, ObservationSpec, TensorSpec, flat_spec, named_of_v1,
                                       zero_named_step)
from seedleague.protocol.specs import EnvSpec
from seedleague.rl.networks import Network
from seedleague.rl.network_config import NetworkConfig
from seedleague.rl.types import NamedUnroll
from seedleague.testing.server_thread import ServerThread
from seedleague.v2 import env_pb2_grpc

CONFIG = HostConfig(unroll_length=4, batch_size=2, replay=ReplayConfig(capacity=64, error_buffer=10_000),
                    network=NetworkConfig(hidden_sizes=(8,)))
SPEC = NamedEnvSpec(
    "named", ObservationSpec((TensorSpec("vector", (3,), np.float32),
                              TensorSpec("entities", (4, 2), np.float32, masked=True))),
    ActionSpec((DiscreteHead("move", 3, has_legal_mask=True), ContinuousHead("aim", (-1.0, 0.0), (1.0, 2.0)))),
    num_envs=3)


@pytest.fixture
def served():
    yield from serve_host(CONFIG)


def _wait(predicate, timeout_s: float = 60.0) -> bool:
    done = threading.Event()
    for _ in range(int(timeout_s / 0.05)):
        if predicate():
            return True
        done.wait(0.05)
    return predicate()


def test_a_named_worker_trains_with_one_legal_bounded_action_per_head(served):
    host, server = served
    client = NamedWorkerClient(ClientConfig(server.address, connect_timeout_s=60), SPEC)
    client.connect()
    inserted, insert = [], host.pipeline.replay.insert
    host.pipeline.replay.insert = lambda rows, timeout=None: inserted.append(rows) or insert(rows, timeout)
    step = zero_named_step(SPEC)
    step.legal_mask["move"][:, :, 0] = False
    rng = np.random.default_rng(0)
    try:
        for sequence in range(24):
            step.observation["vector"] = rng.normal(size=(3, 1, 3)).astype(np.float32)
            truncated = np.array([False, sequence % 5 == 4, False])
            final = {k: v[1:2] for k, v in step.observation.items()} if truncated.any() else {}
            actions = client.step(step.observation, np.ones((3, 1)), np.zeros(3, bool), truncated, step.legal_mask,
                                  final_observation=final)
            assert (actions["move"] != 0).all() and actions["move"].shape == (3, 1)
            assert ((actions["aim"] >= [-1.0, 0.0]) & (actions["aim"] <= [1.0, 2.0])).all()
        assert _wait(lambda: host.pipeline.learner.step >= 2)
    finally:
        client.close()
    batch = inserted[0]
    assert isinstance(batch, NamedUnroll) and sorted(batch.observation) == ["entities", "entities/mask", "vector"]
    assert batch.action["aim"].shape == (3, 5, 2) and batch.behaviour_params["aim"].shape == (3, 5, 4)
    # Every truncation arrived with its final observation: each became a termination with the bootstrap in its
    # reward (1 + gamma * V(final) != 1), and none is left for the learner's approximation.
    rows = NamedUnroll(*[np.concatenate([getattr(b, f) for b in inserted]) if f not in
                         ("observation", "action", "behaviour_params", "legal_mask", "core_state") else None
                         for f in NamedUnroll._fields])
    assert not rows.truncated.any() and rows.terminated[:, :-1].sum() >= 1
    ends = rows.terminated[:, :-1]
    assert (rows.reward[:, :-1][ends] != 1.0).all() and (rows.reward[:, :-1][~ends] == 1.0).all()
    meta = CheckpointMeta.from_json(host._checkpoint_meta(), source="test")
    assert meta.spec.observation == SPEC.observation and meta.spec.action == SPEC.action


def test_a_step_missing_a_tensor_is_refused_naming_it_and_nothing_reaches_replay(served):
    host, server = served
    with grpc.insecure_channel(server.address) as channel:
        stub = env_pb2_grpc.EnvServiceStub(channel)
        session = stub.Handshake(codec_v2.encode_handshake(SPEC, "raw"), timeout=60).session_id
        step = zero_named_step(SPEC, session)
        step.observation.pop("entities/mask")
        call = stub.Stream(iter([codec_v2.encode_step(step)]), timeout=30)
        with pytest.raises(grpc.RpcError) as error:
            next(call)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "'entities/mask'" in error.value.details()
    assert host.metrics.env_steps == 0 and host.pipeline.replay.size == 0


def test_episode_stats_reach_the_metrics_as_running_means(served):
    host, server = served
    spec = NamedEnvSpec("stats", ObservationSpec((TensorSpec("obs", (3,), np.float32),)),
                        ActionSpec((ContinuousHead("torque", (-2.0,), (2.0,)),)), num_envs=2, episode_stats=("win",))
    client = NamedWorkerClient(ClientConfig(server.address, connect_timeout_s=60), spec)
    client.connect()
    observation = {"obs": np.zeros((2, 3), np.float32)}
    try:
        client.step(observation, np.zeros(2), np.zeros(2, bool), np.zeros(2, bool))
        client.step(observation, np.zeros(2), np.array([True, True]), np.zeros(2, bool),
                    episode_stats={"win": np.array([1.0, 0.0])})
        client.step(observation, np.zeros(2), np.array([False, True]), np.zeros(2, bool),
                    episode_stats={"win": np.array([5.0, 1.0])})  # env 0's 5.0 ends no episode: not counted
    finally:
        client.close()
    assert host.metrics.report()["episode_stats/win"] == pytest.approx(2 / 3)


def test_a_flat_shaped_v2_worker_runs_on_the_flat_model(served):
    host, server = served
    spec = NamedEnvSpec("v1-shaped", ObservationSpec((TensorSpec("obs", (3,), np.float32),)),
                        ActionSpec((DiscreteHead("act", 2),)), num_envs=2)
    client = NamedWorkerClient(ClientConfig(server.address, connect_timeout_s=60), spec)
    client.connect()
    try:
        actions = client.step({"obs": np.zeros((2, 3), np.float32)}, np.zeros(2), np.zeros(2, bool), np.zeros(2, bool))
    finally:
        client.close()
    assert client.protocol_version == 2 and sorted(actions) == ["act"] and actions["act"].shape == (2, 1)
    assert host.pipeline.spec == spec and isinstance(host.pipeline.network, Network)  # the flat model and data path


def test_a_flat_shaped_v2_worker_bootstraps_its_truncations_on_the_flat_path(served):
    host, server = served
    spec = NamedEnvSpec("v1-shaped", ObservationSpec((TensorSpec("obs", (3,), np.float32),)),
                        ActionSpec((DiscreteHead("act", 2),)), num_envs=2)
    client = NamedWorkerClient(ClientConfig(server.address, connect_timeout_s=60), spec)
    client.connect()
    inserted, insert = [], host.pipeline.replay.insert
    host.pipeline.replay.insert = lambda rows, timeout=None: inserted.append(rows) or insert(rows, timeout)
    observation = {"obs": np.ones((2, 3), np.float32)}
    try:
        for sequence in range(12):
            truncated = np.array([sequence == 3, False])
            final = {"obs": np.full((1, 3), 2.0, np.float32)} if truncated.any() else {}
            client.step(observation, np.ones(2), np.zeros(2, bool), truncated, final_observation=final)
        assert _wait(lambda: len(inserted) >= 1)
    finally:
        client.close()
    rows = inserted[0]  # env 0's first unroll: its episode was cut off after its third action (row 2)
    assert rows.observation.shape == (2, 5, 3) and not rows.truncated.any()
    assert rows.terminated[0].tolist() == [False, False, True, False, False]
    assert rows.reward[0, 2] != 1.0 and rows.reward[0, :2].tolist() == [1.0, 1.0]  # 1 + gamma * V(final)


def test_a_v1_worker_reaches_the_host_as_named_steps_and_takes_named_actions_back(served):
    # v1 is an adapter at the wire edge (protocol/codec.py): the host's step sees the named step (one tensor
    # "observation", one mask "action", no final observations) and answers {"action": [E, S]}, which v1's codec
    # sends as the one array v1's client reads.
    host, server = served
    seen, host_step = [], host.step

    async def recording(step):
        answer = await host_step(step)
        seen.append((step, answer))
        return answer

    host.step = recording  # the servicer calls its backend's step
    spec = EnvSpec("v1", (3,), np.float32, 4, num_envs=2, num_seats=2, has_legal_mask=True)
    client = WorkerClient(ClientConfig(server.address, connect_timeout_s=60), spec)
    client.connect()
    legal = np.zeros((2, 2, 4), bool)
    legal[..., 2] = True  # one legal action: the answer is known
    nothing, no_end = np.zeros((2, 2), np.float32), np.zeros(2, bool)
    try:
        actions = [client.step(np.full((2, 2, 3), s, np.float32), nothing, no_end, no_end, legal) for s in range(3)]
    finally:
        client.close()
    assert len(seen) == 3 and host.pipeline.spec == named_of_v1(spec) and isinstance(host.pipeline.network, Network)
    for sequence, ((step, answer), action) in enumerate(zip(seen, actions)):
        assert isinstance(step, NamedStepBatch) and step.sequence == sequence and step.final_observation is None
        assert list(step.observation) == ["observation"] and list(step.legal_mask) == ["action"]
        assert (step.observation["observation"] == sequence).all()
        assert isinstance(answer, NamedActionBatch) and list(answer.action) == ["action"]
        np.testing.assert_array_equal(answer.action["action"], action)
        assert action.shape == (2, 2) and (action == 2).all()


def test_a_flat_model_session_takes_the_named_steps_own_arrays():
    # The flat model reads one array: a session of one tensor and one head flattens the named step's arrays in
    # place (no copy), and the final observations of a truncated env go to its agent rows as one array.
    spec = flat_spec("flat", (3,), np.float32, 4, num_envs=3, num_seats=2, has_legal_mask=True)
    session = Session("s", spec, "test", unroll_length=0, initial_state=lambda n: ())
    step = zero_named_step(spec, "s", acting=True)
    step.observation["observation"][:] = np.arange(18, dtype=np.float32).reshape(3, 2, 3)
    step.final_observation = {"observation": np.full((1, 2, 3), 9.0, np.float32)}
    step.truncated[1] = True
    first = session.flatten(step)  # the stream's first step ends no episode: no final observations
    assert first.first.all() and first.final_observation is None and not first.truncated.any()
    step.sequence = 1
    agents = session.flatten(step)
    assert agents.observation.shape == (6, 3) and agents.legal_mask.shape == (6, 4)
    assert np.shares_memory(agents.observation, step.observation["observation"])
    assert np.shares_memory(agents.legal_mask, step.legal_mask["action"])
    assert agents.observation[5].tolist() == [15.0, 16.0, 17.0]  # env 2, seat 1
    assert agents.truncated.tolist() == [False, False, True, True, False, False]
    assert agents.final_rows.tolist() == [2, 3] and agents.final_observation.shape == (2, 3)
    assert (agents.final_observation == 9.0).all()


def test_bootstrap_adds_the_discounted_value_of_the_final_observation_by_hand():
    agents = AgentStep(session=None, observation=None, first=np.zeros(3, bool), reward=None, terminated=None,
                       truncated=None, acting=np.ones(3, bool), legal_mask=None,
                       final_observation={"v": np.ones((2, 1), np.float32)}, final_rows=np.array([1, 2]))
    seen = {}

    def values(observation, first, core):
        seen["rows"] = len(first)
        return np.array([5.0, 7.0, 0.0, 0.0], np.float32)[:len(first)]

    reward, terminated, truncated = named.bootstrap(
        agents, np.array([1.0, 2.0, 3.0], np.float32), np.zeros(3, bool), np.array([False, True, True]),
        learning=np.array([True, True, False]), core_before=(), values=values, bucket=lambda n: 4, discount=0.9)
    np.testing.assert_allclose(reward, [1.0, 2.0 + 0.9 * 5.0, 3.0])  # row 2 is not the learner's: unchanged
    assert terminated.tolist() == [False, True, False] and truncated.tolist() == [False, False, True]
    assert seen["rows"] == 4  # padded to the bucket


def test_a_named_run_resumes_and_loads_as_a_named_policy(tmp_path):
    import dataclasses

    from seedleague.api import load_policy
    from seedleague.checkpoint_config import CheckpointConfig
    from seedleague.artifacts.named import NamedPolicy

    config = dataclasses.replace(CONFIG, checkpoint=CheckpointConfig(directory=str(tmp_path / "checkpoints"),
                                                                     interval_s=3600))
    host = Host(config, Metrics())
    server = ServerThread(host).start()
    client = NamedWorkerClient(ClientConfig(server.address, connect_timeout_s=60), SPEC)
    try:
        client.connect()
        step = zero_named_step(SPEC)
        for _ in range(12):
            client.step(step.observation, np.ones((3, 1)), np.zeros(3, bool), np.zeros(3, bool), step.legal_mask)
        assert _wait(lambda: host.pipeline.learner.step >= 1)
    finally:
        client.close()
        server.stop()
        host.stop()  # writes the final checkpoint
    resumed = Host(config, Metrics(), resume=True)
    try:
        assert resumed.pipeline.spec.observation == SPEC.observation and resumed.pipeline.learner.step >= 1
        saved_step = resumed.pipeline.learner.step
    finally:
        resumed.stop()
    serving = Host(dataclasses.replace(config, learn=False), Metrics(), resume=True)  # what `seedleague serve` runs
    with ServerThread(serving) as server:
        client = NamedWorkerClient(ClientConfig(server.address, connect_timeout_s=60), SPEC)
        client.connect()
        try:
            served = client.step(step.observation, np.zeros((3, 1)), np.zeros(3, bool), np.zeros(3, bool),
                                 step.legal_mask)
        finally:
            client.close()
            serving.stop()
    assert client.policy_version == saved_step and served["aim"].shape == (3, 1, 2)
    policy = load_policy(str(tmp_path / "checkpoints"))
    assert isinstance(policy, NamedPolicy) and policy.step >= 1
    observation = {k: v[:, 0] for k, v in step.observation.items()}
    legal = {"move": np.array([[False, True, False]] * 3)}
    actions = policy.act(observation, legal)
    assert actions["move"].tolist() == [1, 1, 1] and actions["aim"].shape == (3, 2)
    assert ((actions["aim"] >= [-1.0, 0.0]) & (actions["aim"] <= [1.0, 2.0])).all()
    single = policy.act({k: v[0] for k, v in observation.items()}, greedy=True)
    assert single["aim"].shape == (2,) and np.shape(policy.value(observation)) == (3,)


def test_a_recurrent_named_policy_is_refused_as_the_flat_policy_refuses_one():
    from seedleague.api import RecurrentPolicyError
    from seedleague.rl.networks import Network
    from seedleague.rl.network_config import NetworkConfig
    from seedleague.artifacts.named import NamedPolicy

    with pytest.raises(RecurrentPolicyError, match=r"runs/x/7 has an LSTM core \(lstm_size=16\).*seedleague serve"):
        NamedPolicy(NetworkConfig(lstm_size=16), params={}, spec=SPEC, source="runs/x/7")


def test_exploration_is_refused_for_a_named_spec_rather_than_ignored():
    # The exploration mixture is defined for one discrete head; a named network would act without it.
    host = Host(dataclasses.replace(CONFIG, explore=0.05), Metrics())
    try:
        with pytest.raises(ProtocolError, match="--explore 0") as refused:
            host.open_session(SPEC, "worker")
        assert refused.value.code == FAILED_PRECONDITION
        assert host.pipeline is None  # nothing was built for the refused worker
    finally:
        host.stop()
