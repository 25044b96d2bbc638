"""seedleague.host.opponents: the opponent table's slots, its writes, and its one batched pass."""

import jax
import numpy as np

from seedleague.host.opponents import OpponentTable
from seedleague.host.policy import InferencePolicy
from seedleague.rl.networks import make_network
from seedleague.rl.network_config import NetworkConfig

NUM_ACTIONS = 3
NETWORK = make_network(NetworkConfig(torso="mlp", hidden_sizes=(8,)), (3,), np.dtype(np.float32), NUM_ACTIONS)


def _params(seed: int):
    return NETWORK.init(jax.random.key(seed))


def test_slots_are_reused_least_recently_used_first_and_written_once_per_stay():
    params_of = {f"s{i}": _params(i) for i in range(4)}
    table = OpponentTable(capacity=2)
    assert table.slots(["s0", "s1"], params_of).tolist() == [0, 1] and table.writes == 2
    assert table.slots(["s1", "s0"], params_of).tolist() == [1, 0] and table.writes == 2  # cached: no copy
    assert table.slots(["s2"], params_of).tolist() == [1]  # s1 was used less recently than s0
    assert table.writes == 3
    assert table.slots(["s0", "s2"], params_of).tolist() == [0, 1] and table.writes == 3
    # More opponents in one batch than slots: the table grows (to a power of two) and holds all of them.
    assert sorted(table.slots(["s0", "s1", "s3"], params_of).tolist()) == [0, 1, 2]
    assert table.capacity == 4


class Batch:
    """Random inputs of `rows` agents (every `masked`-th row has `action` illegal) and a `put` that collects."""

    def __init__(self, rows: int, seed: int, masked: slice, action: int):
        rng = np.random.default_rng(seed)
        self.observation = rng.normal(size=(rows, 3)).astype(np.float32)
        self.first = np.ones(rows, bool)
        self.legal = np.ones((rows, NUM_ACTIONS), bool)
        self.legal[masked, action] = False
        self.logits = np.zeros((rows, NUM_ACTIONS), np.float32)
        self.action = np.full(rows, -1)

    def put(self, at, out):
        self.action[at], self.logits[at] = out.action, out.logits

    def check(self, policy, at, params):
        """The rows `at` got exactly what `params` (None: the published ones) acting alone give."""
        alone = policy.act(self.observation[at], self.first[at], (), self.legal[at], params=params)
        np.testing.assert_allclose(self.logits[at], alone.logits, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(self.action[at], alone.action)


def test_one_pass_over_the_table_acts_as_each_opponent_alone():
    # Greedy acting: each opponent's rows must get that opponent's own greedy actions and logits.
    params_of = {f"s{i}": _params(10 + i) for i in range(3)}
    policy = InferencePolicy(NETWORK, _params(0), version=0, seed=0, greedy=True)
    batch = Batch(11, seed=0, masked=slice(None, None, 3), action=0)
    groups = {"s0": [0, 4, 5], "s1": [1, 2, 3, 6, 7, 8, 9], "s2": [10]}
    table = OpponentTable()
    for _ in range(2):  # the second batch reads the cached slots
        table.act(policy, groups, params_of, batch.observation, batch.first, (), batch.legal, batch.put,
                  bucket=lambda n: 8)
        for key, at in groups.items():
            batch.check(policy, at, params_of[key])
    assert table.writes == 3


def test_the_learner_and_its_opponents_in_one_call_act_as_each_alone():
    params_of = {f"s{i}": _params(20 + i) for i in range(2)}
    policy = InferencePolicy(NETWORK, _params(0), version=7, seed=0, greedy=True)
    batch = Batch(9, seed=1, masked=slice(1, None, 2), action=2)
    groups = {"s0": [1, 8], "s1": [4]}
    learner_rows = np.array([0, 2, 3, 5, 6, 7])
    version = OpponentTable().act_with_learner(policy, learner_rows, groups, params_of, batch.observation, batch.first,
                                               (), batch.legal, batch.put, bucket=lambda n: 8)
    assert version == 7  # the learner's rows acted with the published params
    batch.check(policy, learner_rows, None)
    for key, at in groups.items():
        batch.check(policy, np.array(at), params_of[key])
