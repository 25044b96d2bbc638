"""Evaluation games among snapshots scored by every member (seedleague.host.population): the action's
log-probability by hand, the log reaches a game's rows gather step by step and what a finished game adds to the
meta-game, with the policy's stacked forward pass faked (tests/test_exploit.py runs the real command on Kuhn)."""

import types
import warnings

import numpy as np
import pytest

from seedleague.host.config import HostConfig
from seedleague.host.population_samples import MoveSamples
from seedleague.host.population import LOG_FLOOR, PopulationGames, action_log_probs


def test_the_log_probability_of_the_taken_action_is_over_the_legal_actions_only():
    logits = np.array([[[0.0, 0.0, 5.0]], [[np.log(3.0), 0.0, 0.0]]])  # [K=2, N=1, A=3]
    legal = np.array([[True, True, False]])
    found = action_log_probs(logits, legal, np.array([0]))
    # member 0: the illegal third action does not count, so 1/2; member 1: 3 / (3 + 1)
    assert found == pytest.approx(np.log([[0.5], [0.75]]))
    # an action a member gives probability 0 is floored, not -inf; a row without a legal action (a seat that does
    # not act) gets the floor too, with no warning
    assert action_log_probs(np.array([[[0.0, -np.inf]]]), np.ones((1, 2), bool), np.array([1]))[0, 0] == LOG_FLOOR
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert action_log_probs(np.zeros((1, 1, 2)), np.zeros((1, 2), bool), np.array([0]))[0, 0] == LOG_FLOOR


class FakePolicy:
    """Stands in for the host's InferencePolicy: member k's logits are `table[k]` for every row."""

    def __init__(self, table, greedy=False):
        self.table = np.asarray(table, np.float32)  # [K, A]
        self.calls = []
        self.greedy, self.version = greedy, 7

    def act_stacked(self, params, observation, first, core, legal):
        self.calls.append(observation.shape)
        members, rows = observation.shape[:2]
        logits = np.broadcast_to(self.table[:, None, :], (members, rows, self.table.shape[1]))
        return types.SimpleNamespace(logits=logits)


def _step(session, first, acting):
    return types.SimpleNamespace(session=session, first=np.asarray(first, bool), acting=np.asarray(acting, bool))


def _observations(*rows):
    return np.array(rows, np.float32)[:, None] * np.ones((1, 3), np.float32)  # [N, 3]: row i all rows[i]


def test_a_games_rows_gather_each_members_log_reach_and_its_end_adds_it_to_the_meta_game():
    # two members, two actions: member 0 plays action 0 with probability 1/2, member 1 with 3/4 (logits log 3, 0)
    policy = FakePolicy([[0.0, 0.0], [np.log(3.0), 0.0]])
    probability = np.array([[0.5, 0.5], [0.75, 0.25]])  # [member, action]
    games = PopulationGames(["main:1", "main:2"], [{}, {}], {}, np.random.default_rng(0), bucket=lambda n: 8)
    assert games.mixture.seat_weights.tolist() == [[0.5, 0.5], [0.5, 0.5]]  # each seat's member drawn uniformly
    session = types.SimpleNamespace(id="s", num_agents=2)  # one env, two seats: rows 0 and 1
    legal = np.ones((2, 2), bool)
    seated = np.array(["main:2", "main:1"], object)  # seat 0 plays member 1, seat 1 member 0
    start = _step(session, [True, True], [True, False])
    games.reset(session, start.first)
    first = games.act([start], _observations(0, 1), legal, seated, policy)  # seat 0 acts
    second_step = _step(session, [False, False], [False, True])
    second = games.act([second_step], _observations(0, 2), legal, seated, policy)  # seat 1 acts
    assert policy.calls == [(2, 8, 3), (2, 8, 3)]  # every member, the acting row padded to its bucket
    assert first.policy_version == 7 and first.action[1] == 0 and not first.logits[1].any()  # seat 1 waited
    assert first.logits[0].tolist() == pytest.approx([np.log(3.0), 0.0])  # seat 0's own member's logits
    a, b = int(first.action[0]), int(second.action[1])
    games.record(session, np.array([True, True]), np.array([2.0, -2.0]))
    # each seat's reach of its action under each member, weighed by its mean over the members (balance heuristic)
    weights = lambda action: probability[:, action] / probability[:, action].mean()
    expected = 2.0 * np.outer(weights(a), weights(b))
    assert games.table.games == 1 and games.table.matrix() == pytest.approx(expected)
    games.reset(session, np.array([True, True]))  # the next episode starts from a reach of 1
    games.record(session, np.array([True, True]), np.array([1.0, -1.0]))
    assert games.table.matrix() == pytest.approx((expected + np.ones((2, 2))) / 2)
    assert games.summary()["keys"] == ["main:1", "main:2"]


def test_with_samples_each_move_is_kept_with_every_members_policy_and_its_reach_before_the_move():
    policy = FakePolicy([[0.0, 0.0], [np.log(3.0), 0.0]])  # members play action 0 with 1/2 and 3/4
    probability = np.array([[0.5, 0.5], [0.75, 0.25]])  # [member, action]
    samples = MoveSamples(10, np.random.default_rng(0))
    games = PopulationGames(["main:1", "main:2"], [{}, {}], {}, np.random.default_rng(0), bucket=lambda n: 8,
                            samples=samples)
    session = types.SimpleNamespace(id="s", num_agents=2)
    legal, seated = np.ones((2, 2), bool), np.array(["main:2", "main:1"], object)
    start = _step(session, [True, True], [True, False])
    games.reset(session, start.first)
    first = games.act([start], _observations(10, 11), legal, seated, policy)  # seat 0's first move
    games.act([_step(session, [False, False], [False, True])], _observations(20, 21), legal, seated, policy)  # seat 1
    games.act([_step(session, [False, False], [True, False])], _observations(30, 31), legal, seated, policy)  # seat 0
    assert samples.seen == 3  # the acting rows only
    kept = samples._columns
    assert kept["seat"][:3].tolist() == [0, 1, 0] and kept["observation"][:3, 0].tolist() == [10, 21, 30]
    # before its first move each seat's reach is 1 under every member; before seat 0's second, each member's
    # probability of the action seat 0 took first
    a = int(first.action[0])
    np.testing.assert_allclose(np.exp(kept["log_reach"][:3]), [[1, 1], [1, 1], probability[:, a]], rtol=1e-6)
    np.testing.assert_allclose(np.exp(kept["log_pi"][2]), probability, rtol=1e-6)  # [member, action] at the row


def test_each_row_draws_its_action_from_its_own_members_policy_over_the_legal_actions():
    # member 0 plays (0.8, 0.2, 0), member 1 (0.2, 0.8, 0) once action 2 is masked out (its logit is the largest)
    policy = FakePolicy([[np.log(4.0), 0.0, 9.0], [0.0, np.log(4.0), 9.0]])
    games = PopulationGames(["main:1", "main:2"], [{}, {}], {}, np.random.default_rng(3), bucket=lambda n: n)
    rows = 4000
    session = types.SimpleNamespace(id="s", num_agents=rows)
    step = _step(session, np.ones(rows), np.ones(rows))
    games.reset(session, step.first)
    seated = np.array(["main:1", "main:2"] * (rows // 2), object)
    legal = np.tile([True, True, False], (rows, 1))
    out = games.act([step], np.zeros((rows, 3), np.float32), legal, seated, policy)
    assert policy.calls == [(2, 1, 3)]  # 4000 alike rows: one distinct row goes forward
    assert not (out.action == 2).any()
    share = [np.mean(out.action[member::2] == member) for member in (0, 1)]  # each member's favourite, 0.8
    assert share == pytest.approx([0.8, 0.8], abs=0.03)  # 3.4 standard deviations over 2000 draws each
    greedy = FakePolicy(policy.table, greedy=True)
    assert games.act([step], np.zeros((rows, 3), np.float32), legal, seated, greedy).action[:4].tolist() == [0, 1, 0, 1]


class FakeNamedPolicy:
    """A named network's stacked pass: dict inputs, logits per head (`tables[head][k]` for every row)."""

    def __init__(self, tables):
        self.tables = {head: np.asarray(t, np.float32) for head, t in tables.items()}
        self.calls = []
        self.greedy, self.version = False, 0

    def act_stacked(self, params, observation, first, core, legal):
        self.calls.append(({k: v.shape for k, v in observation.items()}, sorted(legal)))
        members, rows = first.shape
        return types.SimpleNamespace(logits={h: np.broadcast_to(t[:, None, :], (members, rows, t.shape[1]))
                                             for h, t in self.tables.items()})


def test_a_named_networks_action_is_drawn_per_head_and_scored_by_the_sum_of_its_heads_log_probabilities():
    # head "move" (masked): member 0 uniform over 2, member 1 3:1; head "say" (no mask): member 0 1:1, member 1 1:3
    policy = FakeNamedPolicy({"move": [[0.0, 0.0], [np.log(3.0), 0.0]], "say": [[0.0, 0.0], [0.0, np.log(3.0)]]})
    games = PopulationGames(["main:1", "main:2"], [{}, {}], {}, np.random.default_rng(0), bucket=lambda n: 4)
    session = types.SimpleNamespace(id="s", num_agents=2)
    step = _step(session, [True, True], [True, False])
    games.reset(session, step.first)
    observation = {"board": np.zeros((2, 3)), "hand": np.zeros((2, 1))}
    legal = {"move": np.ones((2, 2), bool)}
    out = games.act([step], observation, legal, np.array(["main:1", "main:1"], object), policy)
    assert policy.calls == [({"board": (2, 4, 3), "hand": (2, 4, 1)}, ["move"])]
    assert sorted(out.action) == ["move", "say"] and out.logits["say"].shape == (2, 2)
    move, say = int(out.action["move"][0]), int(out.action["say"][0])
    games.record(session, np.array([True, True]), np.array([1.0, -1.0]))
    # seat 0's reach is the product of its heads' probabilities; seat 1 took no action, so both reach it with 1
    reach = np.array([0.5 * 0.5, [0.75, 0.25][move] * [0.25, 0.75][say]])
    assert games.table.matrix() == pytest.approx(np.outer(reach / reach.mean(), [1.0, 1.0]))


def test_with_samples_a_named_networks_moves_are_kept_per_tensor_and_per_head():
    # the heads above; only seat 0 acts: its row is kept with both tensors, both heads' masks ("say" has none: all
    # legal) and every member's policy per head, from a reach of 1
    policy = FakeNamedPolicy({"move": [[0.0, 0.0], [np.log(3.0), 0.0]], "say": [[0.0, 0.0], [0.0, np.log(3.0)]]})
    samples = MoveSamples(10, np.random.default_rng(0))
    games = PopulationGames(["main:1", "main:2"], [{}, {}], {}, np.random.default_rng(0), bucket=lambda n: 4,
                            samples=samples)
    session = types.SimpleNamespace(id="s", num_agents=2)
    step = _step(session, [True, True], [True, False])
    games.reset(session, step.first)
    observation = {"board": np.arange(6, dtype=np.float32).reshape(2, 3), "hand": np.array([[7.0], [8.0]])}
    games.act([step], observation, {"move": np.array([[True, False], [True, True]])},
              np.array(["main:1", "main:1"], object), policy)
    kept = samples._columns
    assert samples.seen == 1 and kept["observation:board"][0].tolist() == [0, 1, 2] and kept["observation:hand"][0] == 7
    assert kept["legal:move"][0].tolist() == [True, False] and kept["legal:say"][0].tolist() == [True, True]
    np.testing.assert_allclose(np.exp(kept["log_pi:move"][0]), [[1, 0], [1, 0]])  # the mask leaves one action
    np.testing.assert_allclose(np.exp(kept["log_pi:say"][0]), [[0.5, 0.5], [0.25, 0.75]], rtol=1e-6)
    assert kept["log_reach"][0].tolist() == [0, 0] and kept["seat"][0] == 0


def test_only_distinct_acting_rows_go_forward_and_each_steps_rows_get_their_own_log_probabilities():
    # two workers' steps in one batch: the first's seat 0 acts, the second's seat 1; member 1 always plays action 0
    policy = FakePolicy([[0.0, 0.0], [0.0, -np.inf]])
    games = PopulationGames(["main:1", "main:2"], [{}, {}], {}, np.random.default_rng(0), bucket=lambda n: n)
    first, second = (types.SimpleNamespace(id=name, num_agents=2) for name in ("a", "b"))
    steps = [_step(first, [True, True], [True, False]), _step(second, [True, True], [False, True])]
    for step in steps:
        games.reset(step.session, step.first)
    seated = np.array(["main:2", "main:1", "main:1", "main:2"], object)
    games.act(steps, _observations(1, 2, 3, 4), np.ones((4, 2), bool), seated, policy)
    assert policy.calls == [(2, 2, 3)]  # the two acting rows only, distinct
    assert np.exp(games._reach_of(first)) == pytest.approx(np.array([[0.5, 1.0], [1.0, 1.0]]))
    assert np.exp(games._reach_of(second)) == pytest.approx(np.array([[1.0, 1.0], [0.5, 1.0]]))
    nobody = games.act([_step(first, [False, False], [False, False])], _observations(1, 2), np.ones((2, 2), bool),
                       seated[:2], policy)
    assert nobody.action.tolist() == [0, 0] and nobody.logits.shape == (2, 2)  # an answer shaped as usual
    assert np.exp(games._reach_of(first)) == pytest.approx(np.array([[0.5, 1.0], [1.0, 1.0]]))  # unchanged


def test_a_summary_before_two_games_says_so():
    games = PopulationGames(["main:1"], [{}], {}, np.random.default_rng(0), bucket=lambda n: n)
    assert "too few" in games.summary()["error"]


def test_with_learned_responses_the_summary_mixes_the_members_alone_against_every_network():
    # members rock and paper, a response playing scissors (seat 0's payoffs): the members' plain Nash is paper alone,
    # the summary's is rock 1/3, paper 2/3 in each seat with no weight on the response (one step of PSRO)
    games = PopulationGames(["main:1", "main:2", "response:population_nash"], [{}] * 3, {}, np.random.default_rng(0),
                            bucket=lambda n: n, mixed=2)
    pure = [np.log(np.where(np.arange(3) == k, 1.0, 1e-300)) for k in range(3)]
    rps = np.array([[0.0, -1.0, 1.0], [1.0, 0.0, -1.0], [-1.0, 1.0, 0.0]])
    pairs = [(i, j) for i in range(3) for j in range(3)]
    games.table.add(np.array([rps[i, j] for i, j in pairs]), np.array([pure[i] for i, _ in pairs]),
                    np.array([pure[j] for _, j in pairs]))
    found = games.summary()
    assert found["keys"] == games.keys and found["games"] == 9
    for seat in found["seat_weights"]:
        assert seat == pytest.approx([1 / 3, 2 / 3, 0.0], abs=1e-6)


def test_evaluation_games_need_the_run_they_evaluate():
    with pytest.raises(ValueError, match="needs serve_output"):
        HostConfig(learn=False, population_size=8)
    with pytest.raises(ValueError, match="population_responses join evaluation games"):
        HostConfig(learn=False, serve_output="/runs/x", population_responses=("/runs/x/exploit/br",))
