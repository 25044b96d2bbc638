"""League play with a named spec (protocol v2: several named observation tensors, a discrete and a
continuous action head): opponent snapshots of the named network act for their seats in one stacked
pass, and a two-seat game (envs.shootout_worker) trains through the host over a real socket in the league
mode its preset picks, its games against snapshots rated, its snapshots and output loaded as named
policies."""

import dataclasses
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from envs.shootout_worker import LANES, ShootoutGame, play_against_random, shootout_spec
from seedleague import output, presets
from seedleague.api import PolicyMixture, load_snapshot, load_trained
from seedleague.checkpoint_config import CheckpointConfig
from seedleague.host import inference, restore
from seedleague.host.host import Host
from seedleague.host.league_link_config import LeagueLinkConfig
from seedleague.league.service import League
from seedleague.metrics import Metrics
from seedleague.protocol.client import ClientConfig
from seedleague.protocol.client_v2 import NamedWorkerClient
from seedleague.rl.network_config import NetworkConfig
from seedleague.artifacts.named import NamedPolicy
from seedleague.testing.fakes import FakeLeague
from seedleague.testing.server_thread import ServerThread
from tests.conftest import SMALL_HOST, stopped_output, wait_for

SPEC = shootout_spec(num_envs=8)
PRESET = presets.preset_for_spec(SPEC)
# The preset's host, learner and league mode, scaled down to train for seconds: small batches and network, two
# minibatch steps per update (on a CPU a network with a convolution, the `lanes` image's, unrolls them: each one
# costs compile time), snapshots every few updates, and half of the episodes against snapshots.
HOST = dataclasses.replace(PRESET.host, unroll_length=4, batch_size=8, max_message_bytes=SMALL_HOST.max_message_bytes,
                           limits=SMALL_HOST.limits, replay=dataclasses.replace(PRESET.host.replay, capacity=32),
                           network=NetworkConfig(torso="auto", hidden_sizes=(16,)),
                           learner=dataclasses.replace(PRESET.host.learner, epochs=1, minibatches=2))
LEAGUE = dataclasses.replace(PRESET.league, snapshot_interval_steps=4, self_play_share=0.5)


def link_config(run_dir: str, address: str) -> LeagueLinkConfig:
    return LeagueLinkConfig(address=address, player="main", pool_dir=os.path.join(run_dir, "pool"), retry_s=0.05,
                            report_interval_s=0.1, check_in_interval_s=0.1, prefetch=16)


def test_the_preset_of_a_two_seat_named_game_is_the_game_recipe_in_the_league():
    kuhn = presets.preset_for("openspiel:kuhn_poker")
    assert PRESET.host.learner == presets.GAME_RECIPE and PRESET.league == kuhn.league and PRESET.output == kuhn.output
    assert PRESET.league.mode == presets.Mode.PSRO and PRESET.host.network.torso == "auto"


def test_with_aim_levels_every_head_is_discrete_and_a_seat_that_reads_both_cues_wins():
    # 5 levels lie 0.5 apart over [-1, 1], so the level nearest the target's height is within 0.25 of it, under the
    # hit distance: a seat that picks the lit lane and that level hits every step and wins in WIN_SCORE steps, unless
    # the random seat hits as often (a draw)
    heads = shootout_spec(num_envs=1, aim_levels=5).action.heads
    assert [(h.name, h.num_actions) for h in heads] == [("lane", LANES), ("aim", 5)]
    levels = np.linspace(-1.0, 1.0, 5)
    reader = lambda o: {"lane": o["lanes"][:, 0, :, 0].argmax(axis=1),
                        "aim": np.abs(o["state"][:, 2:3] - levels).argmin(axis=1)}
    wins, draws, losses = play_against_random(reader, 200, seed=0, aim_levels=5)
    assert losses == 0 and wins >= 190, (wins, draws, losses)
    with pytest.raises(ValueError, match="--aim-levels must be >= 0"):
        ShootoutGame(1, aim_levels=-1)


def test_every_named_snapshot_in_a_batch_acts_with_its_own_params_in_one_stacked_pass(tmp_path):
    """Rows of four snapshots, the learner and an uncached opponent: each row's actions come from its own
    snapshot's params (the behaviour params of both heads equal those of that snapshot acting alone), every
    snapshot's params cross to the device once, and the uncached opponent plays as the learner."""
    run_dir = str(tmp_path)
    host = Host(dataclasses.replace(HOST, league=link_config(run_dir, "fake")), Metrics(), league=FakeLeague())
    server = ServerThread(host).start()
    client = NamedWorkerClient(ClientConfig(server.address, connect_timeout_s=60), SPEC)
    try:
        client.connect()  # builds the named pipeline
        policy = host.pipeline.policy
        live, _ = policy.current()

        def with_bias(i: float):  # a snapshot whose heads prefer lane i % 3 and aim at (i - 2) / 2
            params = jax.tree.map(np.asarray, live)
            lane_bias = np.float32([i % LANES == k for k in range(LANES)]) * 9
            lane = dict(params["params"]["policy_head_lane"], bias=lane_bias)
            aim = dict(params["params"]["policy_head_aim"], bias=np.float32([(i - 2) / 2, -3.0]))
            layers = dict(params["params"], policy_head_lane=lane, policy_head_aim=aim)
            return jax.device_put({"params": layers}, policy.device)

        snapshots = {f"main:{i:06d}": with_bias(i) for i in range(4)}
        rng = np.random.default_rng(0)
        keys = [None, "main:999999"] + list(snapshots)  # main:999999 is not cached: snapshots.get gives None
        opponents = np.array([keys[i] for i in rng.integers(0, len(keys), 37)], object)
        step = ShootoutGame(37, seed=1).reset(1)
        observation = {name: x[:, 0] for name, x in step.observation.items()}
        first, legal = np.zeros(37, bool), {}
        core = jax.tree.map(np.asarray, policy.network.initial_state(37))
        forward = lambda: inference.forward(policy, host._opponent_table, host.config.batcher.bucket, observation,
                                            first, core, legal, opponents, snapshots.get)
        out = forward()
        assert set(out.action) == {"lane", "aim"} and out.action["aim"].shape == (37, 1)
        assert ((-1.0 <= out.action["aim"]) & (out.action["aim"] <= 1.0)).all()
        for key in set(opponents):
            rows = np.flatnonzero(opponents == key)
            alone = policy.act(observation, first, core, legal, params=snapshots.get(key))  # every row: one compile
            for head in ("lane", "aim"):
                np.testing.assert_allclose(out.logits[head][rows], alone.logits[head][rows], rtol=1e-5, atol=1e-5)
            if key is not None and key in snapshots:  # a near-certain lane: the one its bias picks
                assert (out.action["lane"][rows] == int(key[-1]) % LANES).all()
        assert host._opponent_table.writes == 4  # each snapshot crossed to the device once ...
        forward()
        assert host._opponent_table.writes == 4  # ... and stays there for the next batch
    finally:
        client.close()
        server.stop()
        host.stop()


def test_a_two_seat_dict_observation_hybrid_action_game_trains_in_the_league_against_rated_snapshots(tmp_path):
    run_dir = str(tmp_path / "run")
    db = os.path.join(run_dir, "league", "league.sqlite")
    os.makedirs(os.path.dirname(db))
    output.record(run_dir, output.OutputConfig(PRESET.output))
    config = dataclasses.replace(HOST, league=link_config(run_dir, "in-process"),
                                 checkpoint=CheckpointConfig(directory=os.path.join(run_dir, "checkpoints")))
    league = League(LEAGUE, db)
    host = Host(config, Metrics(), league=league)
    server = ServerThread(host).start()
    worker = subprocess.Popen([sys.executable, "-m", "envs.shootout_worker", "--address", server.address,
                               "--num-envs", str(SPEC.num_envs), "--log-level", "WARNING"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "PYTHONFAULTHANDLER": "1"})

    def rated_snapshots() -> list:
        return [s for s in league.standings() if s.key.startswith("main:") and s.games > 0]

    try:
        wait_for(lambda: len(rated_snapshots()) >= 2 and host.metrics.league_games >= 20, timeout=120,
                 what=lambda: f"2 rated snapshots and 20 league games: {league.leaderboard_text()}, "
                              f"{host.metrics.league_games} games, {host.pipeline.league.stats}")
        assert worker.poll() is None, worker.communicate()[0][-3000:]
    finally:
        worker_log = stopped_output(worker)
        server.stop()
        host.stop()
    assert worker.returncode == 0, worker_log[-3000:]
    link = host.pipeline.league.stats
    assert link.snapshots >= 2 and link.failures == 0 and link.skipped == 0
    assert host.metrics.league_games >= 20 and link.acknowledged >= 20  # games against snapshots, results delivered
    payoff = league.payoff()
    assert sum(map(sum, payoff.games)) > 0  # rated: the results count in the league's payoff table
    keys = [s.key for s in league.snapshots("main")]
    league.close()

    snapshot = load_snapshot(run_dir, keys[-1])  # restored from the model pool as the named network
    assert isinstance(snapshot, NamedPolicy) and snapshot.spec.observation == SPEC.observation
    trained = load_trained(run_dir)  # the preset's output: param average, or the final params
    assert isinstance(trained, NamedPolicy) and trained.spec.action == SPEC.action
    for policy in (snapshot, trained):
        wins, draws, losses = play_against_random(policy.act, 16)
        assert wins + draws + losses == 16
    output.record(run_dir, output.OutputConfig("league_nash"))
    mixture = load_trained(run_dir)  # the Nash mixture over the rated snapshots
    assert isinstance(mixture, PolicyMixture) and all(isinstance(m, NamedPolicy) for m in mixture.members)
    action = mixture.draw().act({name: x[0, 0] for name, x in ShootoutGame(1).reset(0).observation.items()})
    assert set(action) == {"lane", "aim"} and action["aim"].shape == (1,)
    serving = dataclasses.replace(HOST, learn=False, serve_output=run_dir)  # what `seedleague serve` restores
    restored, served = restore.from_output(serving, None)
    assert restored.spec.action == SPEC.action and served.keys == [m.key for m in output.resolve(run_dir).members]
