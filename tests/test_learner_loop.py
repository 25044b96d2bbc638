"""The learner thread (seedleague.host.learner_loop): stopping it while its first update compiles.

The update here is a neighbour standing in for the jitted one: it blocks on its first call, as a
compile of tens of seconds does. Replay, policy, metrics and the checkpointer are the real ones."""

import threading

import jax
import numpy as np

from seedleague.checkpoint import CheckpointConfig, Checkpointer
from seedleague.host.learner_loop import LearnerLoop
from seedleague.host.pipeline import _example_unroll
from seedleague.host.policy import InferencePolicy
from seedleague.host.replay import Replay, ReplayConfig
from seedleague.metrics import Metrics
from seedleague.protocol.specs import EnvSpec
from seedleague.rl.learner import LearnerConfig, init_train_state
from seedleague.rl.networks import NetworkConfig, make_network

SPEC = EnvSpec("test", (3,), np.float32, 2, 1)


def _loop(tmp_path, update):
    network = make_network(NetworkConfig(hidden_sizes=(4,)), SPEC.observation_shape, np.float32, 2)
    state = init_train_state(LearnerConfig(), network, jax.random.key(0))
    replay = Replay(ReplayConfig(capacity=4), _example_unroll(SPEC, 2, network), batch_size=1, seed=0)
    replay.insert(_example_unroll(SPEC, 2, network))
    policy = InferencePolicy(network, state.params, 0, seed=0)
    checkpointer = Checkpointer(CheckpointConfig(directory=str(tmp_path / "checkpoints")))
    return LearnerLoop(update, state, replay, policy, Metrics(), checkpointer), policy, checkpointer


def test_a_stop_during_the_first_update_neither_waits_for_it_nor_checkpoints(tmp_path):
    compiling, release = threading.Event(), threading.Event()

    def first_update_compiles(state, batch, seconds):
        compiling.set()
        release.wait(60)
        return state._replace(step=state.step + 1), {"total_loss": np.float32(0.0)}

    loop, policy, checkpointer = _loop(tmp_path, first_update_compiles)
    loop.start()
    assert compiling.wait(60)
    loop.stop()  # returns while the update is still running
    assert not release.is_set() and checkpointer.steps() == []
    release.set()
    loop._thread.join(60)
    assert not loop._thread.is_alive() and loop.error is None
    assert policy.version == 0 and loop.step == 0 and checkpointer.steps() == []  # nothing published or saved
    checkpointer.close()


def test_a_stop_after_an_update_waits_for_the_current_one_and_checkpoints(tmp_path):
    updated = threading.Event()

    def update(state, batch, seconds):
        updated.set()
        return state._replace(step=state.step + 1), {"total_loss": np.float32(0.0)}

    loop, policy, checkpointer = _loop(tmp_path, update)
    loop.start()
    assert updated.wait(60)
    loop.stop()
    assert not loop._thread.is_alive() and loop.step >= 1 and checkpointer.steps() == [loop.step]
    checkpointer.close()
