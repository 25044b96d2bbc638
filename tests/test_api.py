"""seedleague.api: loading real orbax checkpoints and querying the policy; the docs/api.md example runs."""

import dataclasses
import functools
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from seedleague.api import (PolicyMixture, PolicySpec, RecurrentPolicyError, load_average_policy, load_policies,
                            load_policy, load_snapshot)
from seedleague.artifacts.load import _params_of
from seedleague.artifacts.networks import shared_network
from seedleague.checkpoint import Checkpointer
from seedleague.checkpoint_config import CheckpointConfig
from seedleague.rl.learner import ParamAverage, TrainState, init_train_state
from seedleague.rl.learner_config import LearnerConfig
from seedleague.rl.network_config import NetworkConfig

SMALL = NetworkConfig(torso="mlp", hidden_sizes=(8,))
KUHN = ("openspiel:kuhn_poker", (11,), 2)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def v1_record(env_name, shape, dtype, actions):
    """A flat model's spec as every version of seedleague records it in a checkpoint's meta (protocol 1)."""
    return dict(env_name=env_name, observation_shape=list(shape), observation_dtype=np.dtype(dtype).str,
                num_actions=actions)


def head_params(params, kernel=None, bias=None):
    """`params` with the policy head's kernel scaled by `kernel` and its bias replaced by `bias`."""
    head = dict(params["params"]["policy_head"])
    if kernel is not None:
        head["kernel"] = head["kernel"] * kernel
    if bias is not None:
        head["bias"] = jnp.asarray(bias, jnp.float32)
    return {"params": dict(params["params"], policy_head=head)}


@functools.lru_cache(maxsize=None)
def train_state(network, shape, dtype, actions, learner):
    """The learner's real initial TrainState (Adam state included), built once per shape: compiles are slow."""
    return init_train_state(learner, shared_network(network, shape, dtype, actions), jax.random.key(0))


def save_checkpoint(directory, env=KUHN, step=0, network=SMALL, seed=0, uniform=False, bias=None,
                    learner=LearnerConfig(), dtype=np.float32, extra_meta=None, average=None, sharpen=None):
    """A real checkpoint as the host writes it; `uniform` zeroes the policy head (logits exactly 0),
    `sharpen` scales its random kernel (a policy that depends on the observation, far from uniform);
    `average` = (params, count) replaces the learner's param average (needs `learner.average_from`)."""
    env_name, shape, actions = env
    state = train_state(network, shape, np.dtype(dtype), actions, learner)
    state = state._replace(params=shared_network(network, shape, np.dtype(dtype), actions).init(jax.random.key(seed)))
    if uniform or bias is not None:
        state = state._replace(params=head_params(state.params, 0.0, np.zeros(actions) if bias is None else bias))
    elif sharpen is not None:
        state = state._replace(params=head_params(state.params, sharpen))
    state = state._replace(step=jnp.asarray(step, jnp.int32))
    if average is not None:
        state = state._replace(average=ParamAverage(average[0], jnp.asarray(average[1], jnp.int32)))
    meta = dict(spec=v1_record(env_name, shape, dtype, actions),
                network=dataclasses.asdict(network), learner=dataclasses.asdict(learner),
                env_steps=100 * step, agent_steps=100 * step, episodes=step, wall_s=1.5 * step, returns=[])
    meta.update(extra_meta or {})
    checkpointer = Checkpointer(CheckpointConfig(directory=str(directory), max_to_keep=10))
    checkpointer.save(step, state, meta)
    checkpointer.close()
    return state


def test_load_policy_from_a_run_dir_a_checkpoint_dir_and_a_pool_player(tmp_path):
    run = tmp_path / "run"
    save_checkpoint(run / "checkpoints", step=3, seed=1)
    newest = save_checkpoint(run / "checkpoints", step=7, seed=2)
    save_checkpoint(run / "pool" / "main", step=512, seed=3)
    policy = load_policy(str(run))
    assert policy.step == 7 and policy.spec == PolicySpec("openspiel:kuhn_poker", (11,), np.float32, 2)
    assert policy.meta["env_steps"] == 700 and policy.source.endswith("checkpoints/7")
    assert load_policy(str(run / "checkpoints"), step=3).step == 3
    assert load_policy(str(run / "pool" / "main")).step == 512
    assert load_snapshot(str(run), "main:000512").step == 512
    assert load_policy(run).step == 7 and load_policy(run / "pool" / "main").step == 512  # pathlib paths too
    # the params are the saved ones: logits match the network applied directly
    obs = np.random.default_rng(0).random((5, 11), np.float32)
    logits, _, _ = shared_network(SMALL, (11,), np.dtype(np.float32), 2).apply(newest.params, obs[:, None], np.ones((5, 1), bool), ())
    # logits near 0 (about 1e-4 here) differ in float32's last bits between two compiles of the same network
    np.testing.assert_allclose(policy.logits(obs), np.asarray(logits)[:, 0], rtol=1e-6, atol=1e-7)


def test_the_param_average_loads_in_place_of_the_params_and_its_absence_is_named(tmp_path):
    averaging = LearnerConfig(average_from=5)
    state = save_checkpoint(tmp_path / "a", step=3, learner=averaging)  # before step 5: nothing averaged yet
    with pytest.raises(ValueError, match="no averaged params yet: averaging starts at learner step 5"):
        load_policy(str(tmp_path / "a"), average=True)
    mean = head_params(state.params, 0.0, [2.0, -2.0])
    save_checkpoint(tmp_path / "a", step=9, learner=averaging, average=(mean, 4))
    policy = load_policy(str(tmp_path / "a"), average=True)
    assert policy.step == 9 and policy.meta["average"] == {"from": 5, "count": 4}
    assert policy.source.endswith("a/9 (param average)")
    obs = np.zeros((3, 11), np.float32)
    np.testing.assert_allclose(policy.logits(obs), np.tile([2.0, -2.0], (3, 1)), rtol=1e-6)
    assert not np.allclose(load_policy(str(tmp_path / "a")).logits(obs), policy.logits(obs))  # not the params
    save_checkpoint(tmp_path / "b", step=1)
    with pytest.raises(ValueError, match="holds no param average: its learner ran without averaging"):
        load_policy(str(tmp_path / "b"), average=True)


def test_the_average_policy_is_the_newest_snapshots_plus_the_param_average_drawn_per_game(tmp_path):
    run = tmp_path / "run"
    for step in range(1, 6):
        save_checkpoint(run / "pool" / "main", step=step, seed=step)
    averaging = LearnerConfig(average_from=2)
    state = save_checkpoint(run / "checkpoints", step=7, learner=averaging)
    # no averaged params yet: the newest third of the five snapshots alone, uniform
    alone = load_average_policy(str(run))
    assert [m.step for m in alone.members] == [4, 5] and list(alone.weights) == [0.5, 0.5]
    save_checkpoint(run / "checkpoints", step=8, learner=averaging, average=(head_params(state.params, 0.0, [1.0, 0.0]), 3))
    mixture = load_average_policy(str(run))
    assert [m.step for m in mixture.members] == [4, 5, 8] and mixture.members[-1].meta["average"]["count"] == 3
    np.testing.assert_allclose(mixture.weights, [0.25, 0.25, 0.5])
    assert [m.step for m in load_average_policy(str(run), fraction=1.0, param_average=False).members] == [1, 2, 3, 4, 5]
    drawn = [mixture.draw().source for _ in range(4000)]
    assert abs(drawn.count(mixture.members[-1].source) / 4000 - 0.5) < 0.03  # the param average in half the games
    assert {mixture.draw(rng=11).source for _ in range(5)} == {mixture.draw(rng=11).source}  # a seed fixes the draw
    with pytest.raises(ValueError, match=r"fraction of the snapshots in \(0, 1\], got 0"):
        load_average_policy(str(run), fraction=0)
    with pytest.raises(FileNotFoundError, match="no league snapshots of player 'exploiter'"):
        load_average_policy(str(run), player="exploiter")


def test_a_policy_mixture_refuses_weights_and_members_it_cannot_play(tmp_path):
    save_checkpoint(tmp_path / "kuhn", step=1)
    save_checkpoint(tmp_path / "other", env=("openspiel:leduc_poker", (30,), 3), step=1)
    kuhn, leduc = load_policy(str(tmp_path / "kuhn")), load_policy(str(tmp_path / "other"))
    for weights in ([1.0, -1.0], [0.0, 0.0], [float("nan"), 1.0]):
        with pytest.raises(ValueError, match="finite, >= 0 and not all 0"):
            PolicyMixture([kuhn, kuhn], weights)
    with pytest.raises(ValueError, match="one weight per policy"):
        PolicyMixture([kuhn], [0.5, 0.5])
    with pytest.raises(ValueError, match="must share one env spec"):
        PolicyMixture([kuhn, leduc], [1.0, 1.0])
    assert PolicyMixture([kuhn], [3.0]).draw() is kuhn


def test_any_optimiser_state_loads(tmp_path):
    """Only params are read: an SGD-with-momentum state (not the learner's Adam) loads the same."""
    params = shared_network(SMALL, (11,), np.dtype(np.float32), 2).init(jax.random.key(0))
    state = TrainState(params, optax.sgd(0.1, momentum=0.9).init(params), jnp.asarray(4, jnp.int32), jax.random.key(1))
    meta = dict(spec=v1_record(KUHN[0], KUHN[1], np.float32, KUHN[2]), network=dataclasses.asdict(SMALL))
    checkpointer = Checkpointer(CheckpointConfig(directory=str(tmp_path)))
    checkpointer.save(4, state, meta)
    checkpointer.close()
    policy = load_policy(str(tmp_path))
    assert policy.step == 4
    np.testing.assert_array_equal(np.asarray(policy.params["params"]["policy_head"]["kernel"]),
                                  np.asarray(params["params"]["policy_head"]["kernel"]))


def test_probabilities_are_legal_only_and_batched_or_single(tmp_path):
    save_checkpoint(tmp_path, bias=[0.0, np.log(3.0)])  # P(bet) = 3/4 where both are legal
    policy = load_policy(str(tmp_path))
    obs = np.zeros((3, 11), np.float32)
    mask = np.array([[True, True], [True, False], [False, True]])
    probs = policy.action_probabilities(obs, mask)
    np.testing.assert_allclose(probs, [[0.25, 0.75], [1.0, 0.0], [0.0, 1.0]], rtol=1e-6)
    assert probs[1, 1] == 0.0 and probs[2, 0] == 0.0  # exactly
    assert policy.logits(obs, mask)[1, 1] == -np.inf
    np.testing.assert_allclose(policy.action_probabilities(obs[0]), [0.25, 0.75], rtol=1e-6)  # unbatched -> [A]
    assert policy.action_probabilities(np.zeros((5, 11))).shape == (5, 2)  # float64 cast, 5 padded to 8
    assert policy.value(obs).shape == (3,) and isinstance(policy.value(obs[0]), float)
    assert policy.act(obs, mask, greedy=True).tolist() == [1, 0, 1]
    assert policy.act(obs[0], mask[1]) == 0 and isinstance(policy.act(obs[0]), int)
    sampled = policy.act(np.zeros((4000, 11), np.float32), rng=1)
    assert abs(sampled.mean() - 0.75) < 0.03
    assert set(policy.act(obs, mask, rng=np.random.default_rng(2))[1:].tolist()) == {0, 1}


def test_bad_inputs_give_clear_errors(tmp_path):
    save_checkpoint(tmp_path)
    policy = load_policy(str(tmp_path))
    with pytest.raises(ValueError, match=r"observation must be shaped \(11,\)"):
        policy.logits(np.zeros((2, 12), np.float32))
    with pytest.raises(ValueError, match="dtype"):
        policy.logits(np.array([["x"] * 11]))
    with pytest.raises(ValueError, match=r"legal_mask must be shaped \(2, 2\)"):
        policy.logits(np.zeros((2, 11), np.float32), np.ones((2, 3), bool))
    with pytest.raises(ValueError, match=r"no legal action in row\(s\) \[1\]"):
        policy.action_probabilities(np.zeros((2, 11), np.float32), np.array([[1, 0], [0, 0]]))
    with pytest.raises(ValueError, match="empty"):
        policy.logits(np.zeros((0, 11), np.float32))
    with pytest.raises(ValueError, match=r"NaN or infinite values in row\(s\) \[1\]"):
        policy.act(np.array([[0.0] * 11, [np.nan] * 11]))


def test_params_are_found_in_every_shape_a_restored_state_takes():
    params = {"params": {"w": np.ones(2)}}
    state = TrainState(params, (), np.int32(0), np.zeros(2, np.uint32))
    for restored in (state._asdict(), list(state), state):
        assert _params_of(restored) is params
    with pytest.raises(ValueError, match="no params"):
        _params_of(3)


def test_uint8_policies_refuse_float_observations(tmp_path):
    save_checkpoint(tmp_path, env=("pixels", (4, 4, 1), 3), network=NetworkConfig(torso="mlp", hidden_sizes=(4,)),
                    dtype=np.uint8)
    policy = load_policy(str(tmp_path))
    assert policy.action_probabilities(np.zeros((4, 4, 1), np.uint8)).shape == (3,)
    with pytest.raises(ValueError, match="float32 does not fit the policy's uint8"):
        policy.logits(np.zeros((4, 4, 1), np.float32))


def test_load_policies_reads_many_steps_from_one_directory_as_load_policy_does(tmp_path):
    pool = tmp_path / "pool" / "main"
    for step, seed in ((10, 1), (20, 2), (30, 3)):
        save_checkpoint(pool, step=step, seed=seed)
    many = load_policies(str(pool), [30, 10, None])
    assert [p.step for p in many] == [30, 10, 30]  # in the order asked; None is the newest
    observation = np.linspace(-1, 1, 11, dtype=np.float32)[None]
    for policy in many:
        alone = load_policy(str(pool), policy.step)
        np.testing.assert_array_equal(policy.action_probabilities(observation), alone.action_probabilities(observation))
        assert policy.source == alone.source
    with pytest.raises(FileNotFoundError, match=r"no checkpoint at step 15; it has steps \[10, 20, 30\]"):
        load_policies(str(pool), [10, 15])


def test_load_policies_restores_only_the_params_and_reads_their_metadata_once(tmp_path, monkeypatch):
    import orbax.checkpoint as ocp

    from seedleague import checkpoint

    pool = tmp_path / "pool" / "main"
    for step in (10, 20, 30):
        save_checkpoint(pool, step=step, seed=step)
    templates, reads = [], []
    read_state, item_metadata = checkpoint.read_state, ocp.CheckpointManager.item_metadata
    monkeypatch.setattr(checkpoint, "read_state", lambda manager, step, subtrees: templates.append(subtrees)
                        or read_state(manager, step, subtrees))
    monkeypatch.setattr(ocp.CheckpointManager, "item_metadata", lambda self, step: reads.append(step)
                        or item_metadata(self, step))
    policies = load_policies(str(pool), [10, 20, 30])
    assert [p.step for p in policies] == [10, 20, 30] and reads == [10]  # one metadata read for the three
    assert all(template is not None and set(template) == {"params"} for template in templates)  # nothing else read


def test_missing_or_empty_directories_and_steps(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such directory"):
        load_policy(str(tmp_path / "nowhere"))
    assert not (tmp_path / "nowhere").exists()  # loading never creates anything
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no checkpoint in"):
        load_policy(str(tmp_path / "empty"))
    save_checkpoint(tmp_path / "run" / "pool" / "main", step=5)
    with pytest.raises(FileNotFoundError, match=r"pool has players \['main'\]"):
        load_policy(str(tmp_path / "run"))  # a run dir with snapshots only says where they are
    with pytest.raises(FileNotFoundError, match=r"no checkpoint at step 6; it has steps \[5\]"):
        load_policy(str(tmp_path / "run" / "pool" / "main"), step=6)
    with pytest.raises(ValueError, match="names a live player"):
        load_snapshot(str(tmp_path / "run"), "main")
    with pytest.raises(FileNotFoundError, match=r"no player directory .* players \['main'\]"):
        load_snapshot(str(tmp_path / "run"), "exploiter:000005")


def test_recurrent_networks_are_refused_with_a_reason(tmp_path):
    # refused from the meta alone, before any params are read (so MLP params stand in for the LSTM's)
    save_checkpoint(tmp_path, extra_meta=dict(network=dataclasses.asdict(NetworkConfig(hidden_sizes=(8,), lstm_size=4))))
    with pytest.raises(RecurrentPolicyError, match="recurrent policies need a state-carrying API"):
        load_policy(str(tmp_path))


def test_params_that_do_not_match_the_meta_network_are_refused(tmp_path):
    save_checkpoint(tmp_path, extra_meta=dict(network=dataclasses.asdict(NetworkConfig(torso="mlp", hidden_sizes=(16,)))))
    with pytest.raises(ValueError, match="do not match the network its meta describes"):
        load_policy(str(tmp_path))


def test_the_docs_example_runs(tmp_path, capsys, monkeypatch):
    text = open(os.path.join(ROOT, "docs", "api.md")).read()
    example = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    save_checkpoint(tmp_path / "runs" / "kuhn" / "checkpoints", step=12, uniform=True)
    monkeypatch.chdir(tmp_path)  # the example's "runs/kuhn" is relative
    exec(compile(example, "docs/api.md", "exec"), {})
    out = capsys.readouterr().out
    assert "openspiel:kuhn_poker step 12" in out
    assert "P(pass, bet) = [0.5 0.5]" in out
    assert re.search(r"exploitability 0\.4583333", out)
