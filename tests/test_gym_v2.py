"""The gym worker on protocol v2: specs from Dict observations and Box, MultiDiscrete, Tuple and Dict actions; final
observations of truncated episodes; and MoveFire (Dict observation, two action heads that both must be used to
score) trained end to end through the host over a real socket."""

from __future__ import annotations

import dataclasses
import threading
import types

import gymnasium as gym
import numpy as np
import pytest

from seedleague.testing import move_fire
from envs.gym_spaces import NamedSpaces
from envs.gym_vector import UnsupportedEnv
from envs.gym_worker import WorkerConfig, make_gym_game, run_worker
from envs.worker_loop import GameWorkerConfig, run_game_worker
from seedleague.host.host import Host
from seedleague.metrics import Metrics
from seedleague.presets import preset_for
from seedleague.protocol.client import ClientConfig
from seedleague.protocol.named import ContinuousHead, DiscreteHead, NamedEnvSpec
from seedleague.rl.networks import Network
from seedleague.testing.fakes import FakeBackend
from seedleague.testing.server_thread import ServerThread


def _vector(observation_space, action_space, num_envs=2):
    return types.SimpleNamespace(single_observation_space=observation_space, single_action_space=action_space,
                                 num_envs=num_envs)


def test_action_spaces_become_named_heads_and_back():
    box = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action = gym.spaces.Tuple((gym.spaces.Discrete(3, start=1), gym.spaces.Box(-2.0, 2.0, (2, 1), np.float32),
                               gym.spaces.MultiDiscrete([2, 4])))
    spaces = NamedSpaces.of("t", _vector(box, action))
    heads = spaces.spec.action.heads
    assert heads == (DiscreteHead("action_0", 3), ContinuousHead("action_1", (-2.0, -2.0), (2.0, 2.0)),
                     DiscreteHead("action_2_0", 2), DiscreteHead("action_2_1", 4))
    env_action = spaces.env_action({"action_0": np.array([[0], [2]], np.int32),
                                    "action_1": np.array([[[0.5, -1.0]], [[2.0, 0.0]]], np.float32),
                                    "action_2_0": np.array([[1], [0]], np.int32),
                                    "action_2_1": np.array([[3], [2]], np.int32)})
    assert env_action[0].tolist() == [1, 3]  # Discrete's start added back
    assert env_action[1].shape == (2, 2, 1) and env_action[1][0, :, 0].tolist() == [0.5, -1.0]
    assert env_action[2].tolist() == [[1, 3], [0, 2]]
    assert action.contains(tuple(x[0] for x in env_action))


def test_dict_observations_become_named_tensors_and_bad_spaces_say_what_to_do():
    game = make_gym_game("seedleague/MoveFire-v0", 2, "sync")
    game.close()
    assert [t.name for t in game.spec.observation.tensors] == ["agent", "target"]
    assert [h.name for h in game.spec.action.heads] == ["fire", "move"]  # gymnasium's Dict sorts its keys
    assert NamedSpaces.of("cartpole", _vector(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))) is None
    unbounded = _vector(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Box(-np.inf, np.inf, (1,), np.float32))
    with pytest.raises(UnsupportedEnv, match="ClipAction or RescaleAction"):
        NamedSpaces.of("unbounded", unbounded)
    with pytest.raises(UnsupportedEnv, match="FlattenObservation"):
        NamedSpaces.of("text", _vector(gym.spaces.Text(5), gym.spaces.Discrete(2)))


def test_tuple_observations_become_one_tensor_per_element_read_from_a_real_vector_env():
    """Blackjack-v1's Tuple(Discrete(32), Discrete(11), Discrete(2)) was refused with advice a command-line user
    cannot take (wrap it in FlattenObservation); each element is now its own one-hot tensor, nested Dicts named too."""
    game = make_gym_game("Blackjack-v1", 3, "sync")
    try:
        assert [(t.name, t.shape) for t in game.spec.observation.tensors] == [
            ("observation_0", (32,)), ("observation_1", (11,)), ("observation_2", (2,))]
        step = game.reset(seed=0)
        raw, _ = game.envs.reset(seed=0)
        for i in range(3):
            observed = step.observation[f"observation_{i}"]
            assert observed.shape[:2] == (3, 1) and (observed.argmax(-1)[:, 0] == raw[i]).all()
    finally:
        game.close()
    nested = gym.spaces.Tuple((gym.spaces.Box(-1, 1, (2,)), gym.spaces.Dict({"x": gym.spaces.Discrete(3)})))
    spaces = NamedSpaces.of("nested", _vector(nested, gym.spaces.Discrete(2)))
    assert [t.name for t in spaces.spec.observation.tensors] == ["observation_0", "observation_1.x"]


@pytest.mark.parametrize("vector", ["sync", "async"])
def test_pendulum_speaks_v2_and_sends_the_final_observation_of_every_truncated_episode(vector):
    received = []
    backend = FakeBackend(on_step=lambda session, step: received.append(step))
    with ServerThread(backend) as server:
        config = WorkerConfig("Pendulum-v1", 2, GameWorkerConfig(ClientConfig(server.address), max_steps=2 * 201),
                              vector=vector)
        run_worker(config)
    assert not backend.violations  # the fake host refuses a truncation without its final observation
    session = backend.sessions[0]
    assert isinstance(session.spec, NamedEnvSpec) and session.episodes == 2
    ends = [step for step in received if step.truncated.any()]
    assert len(ends) == 1 and ends[0].final_observation["observation"].shape == (2, 1, 3)
    # The final observation is the state the last action led to, not the next episode's first.
    assert not np.allclose(ends[0].final_observation["observation"], ends[0].observation["observation"])


def test_protocol_2_forces_a_flat_shaped_v2_spec_which_the_host_runs_on_the_flat_model():
    host = Host(dataclasses.replace(preset_for("CartPole-v1").host, batch_size=2), Metrics())
    with ServerThread(host) as server:
        game = make_gym_game("CartPole-v1", 4, "native", protocol=2)
        try:
            assert isinstance(game.spec, NamedEnvSpec)
            run = GameWorkerConfig(ClientConfig(server.address), max_steps=4 * 600)
            stats = run_game_worker(game, run)
        finally:
            game.close()
            host.stop()
    assert stats.env_steps >= 4 * 600 and host.metrics.episodes > 0
    assert host.pipeline.spec == game.spec and isinstance(host.pipeline.network, Network)  # the flat model


def test_move_fire_trains_through_the_host_over_a_real_socket():
    # The classic-control preset that `seedleague train --env seedleague/MoveFire-v0` picks, from the spec alone,
    # with a small entropy bonus: without one (CartPole's preset has none) the fire head could settle on never
    # firing, a policy that misses no shot and so earns 0 for as long as the test waits (seen once in a CI run).
    preset = preset_for(move_fire.ENV_ID)
    learner = dataclasses.replace(preset.host.learner, entropy_cost=0.01)
    host = Host(dataclasses.replace(preset.host, seed=1, learner=learner), Metrics())
    stop = threading.Event()
    with ServerThread(host) as server:
        config = WorkerConfig("seedleague/MoveFire-v0", 16, GameWorkerConfig(ClientConfig(server.address), seed=1),
                              vector="sync")
        worker = threading.Thread(target=run_worker, args=(config, stop), daemon=True)
        worker.start()
        learned = threading.Event()
        try:
            for _ in range(1200):  # polls the running mean; gives up after 120 s of a loaded machine
                if host.metrics.episodes >= 100 and host.metrics.mean_return() >= 2.0:
                    learned.set()
                    break
                stop.wait(0.1)
        finally:
            stop.set()
            worker.join(timeout=30)
            host.stop()
    assert learned.is_set(), f"mean return {host.metrics.mean_return():.2f} after {host.metrics.env_steps} env steps"
