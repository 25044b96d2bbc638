"""seedleague.host.policy: the acting side, here its epsilon-exploration (HostConfig.explore)."""

import dataclasses

import jax
import numpy as np
import pytest

from seedleague.host.host import HostConfig
from seedleague.host.policy import InferencePolicy, explored_logits
from seedleague.rl.losses import masked_log_softmax
from seedleague.rl.networks import make_network
from seedleague.rl.network_config import NetworkConfig
from test_api import head_params

LEGAL = np.array([True, True, False])


def test_explored_logits_by_hand():
    # pi over the legal pair = (0.25, 0.75); 0.8 * pi + 0.2 * (0.5, 0.5) = (0.3, 0.7); the illegal logit is kept
    logits = np.array([[0.0, np.log(3.0), 5.0]], np.float32)
    out = np.asarray(explored_logits(logits, LEGAL[None], 0.2))
    np.testing.assert_allclose(np.exp(out[0, :2]), [0.3, 0.7], rtol=1e-6)
    assert out[0, 2] == 5.0
    np.testing.assert_allclose(np.exp(masked_log_softmax(out, LEGAL[None]))[0], [0.3, 0.7, 0.0], rtol=1e-6)
    one_legal = np.asarray(explored_logits(logits, np.array([[False, True, False]]), 0.2))
    assert one_legal[0, 1] == pytest.approx(0.0, abs=1e-7)  # log 1: the only legal action, explored or not


def _sure_of_action_0(explore: float) -> InferencePolicy:
    network = make_network(NetworkConfig(torso="mlp", hidden_sizes=(8,)), (3,), np.dtype(np.float32), 3)
    params = head_params(network.init(jax.random.key(0)), 0.0, [12.0, 0.0, 0.0])  # pi(0) = 1 - 1e-5
    return InferencePolicy(network, params, version=7, seed=1, explore=explore)


def test_an_exploring_policy_acts_uniformly_at_its_rate_and_reports_the_mixture_it_acted_with():
    policy, rows = _sure_of_action_0(0.3), 4000
    inputs = (np.ones((rows, 3), np.float32), np.ones(rows, bool), (), np.tile(LEGAL, (rows, 1)))
    out = policy.act(*inputs)
    counts = np.bincount(out.action, minlength=3) / rows
    assert counts[1] == pytest.approx(0.15, abs=0.02) and counts[2] == 0  # explore * 1/2 legal actions
    np.testing.assert_allclose(np.exp(masked_log_softmax(out.logits, inputs[3]))[0], [0.85, 0.15, 0.0], atol=1e-4)
    assert out.policy_version == 7
    # an opponent's params never explore: acting for it is playing it as it is
    opponent = policy.act(*inputs, params=policy.current()[0])
    assert (opponent.action == 0).mean() > 0.999
    np.testing.assert_allclose(np.exp(masked_log_softmax(opponent.logits, inputs[3]))[0], [1.0, 0.0, 0.0], atol=1e-4)
    assert (_sure_of_action_0(0.0).act(*inputs).action == 0).mean() > 0.999


def test_exploration_is_refused_where_it_has_no_meaning():
    with pytest.raises(ValueError, match=r"explore must be a probability in \[0, 1\), got 1.0"):
        _sure_of_action_0(1.0)
    with pytest.raises(ValueError, match=r"explore must be a probability in \[0, 1\), got -0.1"):
        HostConfig(explore=-0.1)
    for serving in (dict(learn=False), dict(greedy=True)):
        with pytest.raises(ValueError, match="explore applies to a learning host that samples its actions"):
            HostConfig(explore=0.1, **serving)
    assert HostConfig(explore=0.1).explore == 0.1


def test_a_learning_host_acts_with_the_exploration_its_config_asks_for():
    from conftest import SMALL_HOST, RawWorker, vector_spec
    from seedleague.host.host import Host
    from seedleague.metrics import Metrics
    from seedleague.testing.server_thread import ServerThread

    host = Host(dataclasses.replace(SMALL_HOST, explore=0.25), Metrics())
    server = ServerThread(host).start()
    try:
        worker = RawWorker(server.address, vector_spec())
        worker.step()
        assert host.pipeline.policy.explore == 0.25
        worker.close()
    finally:
        server.stop()
        host.stop()
