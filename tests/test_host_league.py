"""The host's league side against a FakeLeague: opponents per episode, random learner seat,
only learner rows in replay, results reported once (also across a league outage), snapshots
into the model pool, resets, and the opponent's params actually used for its seat."""

import collections
import dataclasses
import logging
import time

import jax
import numpy as np
import pytest

from seedleague.host import inference, results
from seedleague.host.host import Host
from seedleague.host.league_link import LeagueLink
from seedleague.host.league_link_config import LeagueLinkConfig
from seedleague.league.model_pool import ModelPool, ParamsCache, nbytes
from seedleague.league.types import Role
from seedleague.metrics import Metrics
from seedleague.protocol import codec
from seedleague.protocol.specs import EnvSpec, StepBatch
from seedleague.protocol.named import flat_spec
from seedleague.rl.networks import Network
from seedleague.testing.fakes import FakeLeague
from seedleague.testing.server_thread import ServerThread
from tests.conftest import SMALL_HOST, RawWorker, wait_for

NUM_ENVS = 4
# A two-move game: seat 0 moves, seat 1 moves, then seat 0 has won (+1) and seat 1 lost (-1).
SPEC = EnvSpec("duel", (2,), np.float32, 2, NUM_ENVS, num_seats=2)


def duel_steps(session_id: str):
    """Endless StepBatches of the duel game in every env, same-step autoreset."""
    sequence, turn = 0, 0
    while True:
        ended = turn == 2
        turn = 0 if ended else turn
        observation = np.zeros((NUM_ENVS, 2, 2), np.float32)
        observation[:, :, 0] = turn
        observation[:, 1, 1] = 1.0
        acting = np.zeros((NUM_ENVS, 2), bool)
        acting[:, turn] = True
        reward = np.zeros((NUM_ENVS, 2), np.float32)
        if ended:
            reward[:, 0], reward[:, 1] = 1.0, -1.0
        yield StepBatch(session_id, sequence, observation, reward, np.full(NUM_ENVS, ended), np.zeros(NUM_ENVS, bool),
                        acting=acting)
        sequence, turn = sequence + 1, turn + 1


def play(worker: RawWorker, steps, count: int) -> list:
    return [codec.decode_actions(worker.send(codec.encode_step(next(steps)))) for _ in range(count)]


@pytest.fixture
def league_host(tmp_path):
    made = []

    def make(league: FakeLeague, learner=SMALL_HOST.learner, **link):
        config = dataclasses.replace(
            SMALL_HOST,
            learner=learner,
            league=LeagueLinkConfig(address="fake", player="p", pool_dir=str(tmp_path / "pool"), retry_s=0.05,
                                    report_interval_s=0.05, check_in_interval_s=0.05, prefetch=8, **link),
        )
        host = Host(config, Metrics(), league=league)
        server = ServerThread(host).start()
        made.append((host, server))
        return host, server

    yield make
    for host, server in made:
        server.stop()
        host.stop()


def duel_against_a_snapshot(league_host, **link):
    """A league host whose league serves the snapshot p:000000, and a worker that has played the duel's first
    3 steps: (league, host, worker, steps)."""
    league = FakeLeague(opponents=["p:000000"])
    host, server = league_host(league, **link)
    worker = RawWorker(server.address, SPEC)
    steps = duel_steps(worker.session_id)
    play(worker, steps, 3)
    return league, host, worker, steps


def play_until_a_reset(host, worker) -> None:
    """Play the duel until the league has reset the learner once."""
    steps = duel_steps(worker.session_id)
    deadline = time.monotonic() + 60
    while host.pipeline is None or host.pipeline.league.stats.resets < 1:
        play(worker, steps, 3)
        assert time.monotonic() < deadline, "no reset happened"


def test_a_call_on_a_learner_whose_loop_has_ended_fails_at_once(league_host):
    # the end of a run closes the replay, which ends the learner's loop; a league check-in that then asks it to save
    # a snapshot must not wait out the call's timeout (it held up the link's stop until its join gave up)
    league, host, worker, steps = duel_against_a_snapshot(league_host)
    learner = host.pipeline.learner
    seen = []
    learner.call(lambda state: seen.append(int(state.step)))  # a live loop runs calls
    assert seen and seen[0] >= 0
    host.stop_serving()
    assert wait_for(lambda: not learner._thread.is_alive())
    with pytest.raises(TimeoutError, match="the learner has stopped"):
        learner.call(lambda state: None, timeout=120)
    worker.close()


def test_single_seat_game_is_refused_in_a_league(league_host):
    host, server = league_host(FakeLeague())
    with pytest.raises(Exception, match="2 or more seats"):
        RawWorker(server.address, EnvSpec("solo", (2,), np.float32, 2, 1))


def test_a_game_whose_episodes_are_not_zero_sum_is_refused_in_a_league(league_host):
    import grpc

    host, server = league_host(FakeLeague())
    worker = RawWorker(server.address, SPEC)

    def both_seats_win():  # the duel, but both seats get +1 at its end
        for step in duel_steps(worker.session_id):
            step.reward[:] = np.abs(step.reward)
            yield step

    steps = both_seats_win()
    with pytest.raises(grpc.RpcError) as refused:
        play(worker, steps, 6)  # the third step ends the first episodes; a later one is refused
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "zero-sum games only" in refused.value.details() and "[1.0, 1.0]" in refused.value.details()
    worker.close()


def test_results_follow_the_learner_seat_and_are_reported_once(league_host):
    league, host, worker, steps = duel_against_a_snapshot(league_host)
    assert wait_for(lambda: any(s.key == "p:000000" for s in league.added)), "the initial snapshot never reached the league"
    assert ModelPool(str(host.config.league.pool_dir)).keys("p") == ["p:000000"]
    play(worker, steps, 3 * 40)
    assert wait_for(lambda: len(league.results) >= 30)
    results = list(league.results.values())
    outcomes = {r.outcome for r in results}
    assert outcomes == {0.0, 1.0}, "the learner must sit in both seats (seat 0 always wins this game)"
    assert all(r.player == "p" and r.opponent == "p:000000" for r in results)
    assert set(np.unique(list(host.metrics.returns))) <= {-1.0, 1.0}
    report = host.metrics.report()  # the progress line's games and win rate count the same results
    assert report["games"] >= report["league_games"] >= len(results)
    assert 0.0 < report["league_win_rate"] < 1.0
    worker.close()


def test_outage_loses_and_duplicates_nothing(league_host):
    league, host, worker, steps = duel_against_a_snapshot(league_host)
    assert wait_for(lambda: league.added and host.pipeline.league.stats.fetched > 0)
    league.available = False
    play(worker, steps, 3 * 25)  # play goes on against the cached opponents while the league is away
    finished_in_outage = host.pipeline.league.stats.pending
    assert finished_in_outage > 0
    league.available = True
    play(worker, steps, 3)
    link = host.pipeline.league
    assert wait_for(lambda: link.stats.pending == 0)
    assert link.stats.failures > 0
    assert len(league.results) == link.stats.new_results  # every result once
    episodes_vs_snapshot = sum(1 for _ in league.results)
    assert episodes_vs_snapshot >= finished_in_outage
    worker.close()


def _live_params_play_one_and_record(league, host, worker, steps):
    """Once the snapshot is in play: the live params always choose action 1 (the frozen snapshot is near
    uniform), the episodes seated before are finished, and each later `unrolls.add`'s acting rows are recorded.
    (session, the recorded acting masks)."""
    assert wait_for(lambda: league.added and host.pipeline.league.stats.fetched > 0)

    def always_one(state):
        params = state.params
        head = dict(params["params"]["policy_head"], bias=jax.numpy.array([-50.0, 50.0]))
        return state._replace(params={"params": dict(params["params"], policy_head=head)})

    host.pipeline.learner.call(always_one)
    play(worker, steps, 3)  # episodes seated before the first opponents arrived were self-play; finish them
    session = next(iter(host.sessions._sessions.values()))
    recorded = []
    add = session.unrolls.add
    session.unrolls.add = lambda **kw: recorded.append(kw["acting"].copy()) or add(**kw)
    return session, recorded


def test_opponent_seat_uses_the_snapshot_params_and_only_learner_rows_act_as_learner(league_host):
    league, host, worker, steps = duel_against_a_snapshot(league_host, cache_size=2)
    session, recorded = _live_params_play_one_and_record(league, host, worker, steps)
    learner_actions, opponent_actions = [], []
    for _ in range(3 * 30):
        batch = play(worker, steps, 1)[0]
        learning = session.seating.learning().reshape(NUM_ENVS, 2)
        assert learning.sum(1).tolist() == [1] * NUM_ENVS  # exactly one learner seat per env
        # the unroll store (and so replay) sees the learner's acting rows only
        assert (recorded[-1] <= learning.reshape(-1)).all() and recorded[-1].sum() <= NUM_ENVS
        learner_actions += batch.action[learning].tolist()
        opponent_actions += batch.action[~learning].tolist()
    assert set(learner_actions) == {1}
    assert set(opponent_actions) == {0, 1}
    worker.close()


def test_without_training_on_matches_the_learner_plays_its_seat_but_replay_records_none_of_the_match(league_host):
    league, host, worker, steps = duel_against_a_snapshot(league_host, train_on_matches=False)
    session, recorded = _live_params_play_one_and_record(league, host, worker, steps)
    results_before = len(league.results)
    learner_actions, opponent_actions = [], []
    for _ in range(3 * 30):
        batch = play(worker, steps, 1)[0]
        assert not session.seating.learning().any()  # every env plays the snapshot (the fake league's only draw)
        assert not recorded[-1].any()  # ... and replay records none of it
        learner_rows = session.seating.learner_rows(np.arange(NUM_ENVS))
        opponent_rows = np.setdiff1d(np.arange(2 * NUM_ENVS), learner_rows)
        learner_actions += batch.action.reshape(-1)[learner_rows].tolist()
        opponent_actions += batch.action.reshape(-1)[opponent_rows].tolist()
    assert set(learner_actions) == {1}  # the learner's seat still plays with its live params
    assert set(opponent_actions) == {0, 1}
    assert wait_for(lambda: len(league.results) >= results_before + 30)  # and the games still rate the two
    worker.close()


def test_an_exploiter_that_would_train_on_no_match_is_refused():
    with pytest.raises(ValueError, match="main_exploiter learns from its games against snapshots"):
        LeagueLinkConfig(address="fake", role=Role.MAIN_EXPLOITER, train_on_matches=False)
    assert not LeagueLinkConfig(address="fake", role=Role.MAIN, train_on_matches=False).train_on_matches


def test_snapshots_and_resets_on_the_leagues_schedule(league_host):
    league = FakeLeague(snapshot_every=2, reset=True)  # self-play; snapshot every 2 learner steps, then reset
    host, server = league_host(league)
    worker = RawWorker(server.address, SPEC)
    play_until_a_reset(host, worker)
    keys = ModelPool(host.config.league.pool_dir).keys("p")
    assert len(keys) >= 2
    assert [s.key for s in league.added][: len(keys)] == keys[: len(league.added)]
    # after the reset the learner acts with its initial params again (the step count goes on)
    params, version = host.pipeline.policy.current()
    assert version > 0
    worker.close()


def test_a_reset_starts_the_param_average_again(league_host):
    league = FakeLeague(snapshot_every=2, reset=True)
    host, server = league_host(league, learner=dataclasses.replace(SMALL_HOST.learner, average_from=0))
    worker = RawWorker(server.address, SPEC)
    play_until_a_reset(host, worker)
    seen = []
    host.pipeline.learner.call(lambda state: seen.append((int(state.average.count), int(state.step))))
    count, step = seen[0]
    assert count < step  # averaged since the last reset only; without one, every update from step 0 counts
    worker.close()


def test_params_cache_keeps_every_opponent_in_play_and_evicts_the_idle_ones(caplog):
    # A hard LRU with more opponents in play than its capacity reloads one from disk
    # on every batch; the cache keeps whatever was used within keep_s instead.
    caplog.set_level(logging.INFO, logger="seedleague.league.model_pool")
    now = [0.0]
    loads = []
    cache = ParamsCache(lambda key: loads.append(key) or f"params of {key}", capacity=2, keep_s=10.0,
                        clock=lambda: now[0])
    in_play = ["a", "b", "c", "d"]
    for _ in range(50):  # 50 inference batches, each seating all four opponents
        for key in in_play:
            assert cache.get(key) == f"params of {key}"
        now[0] += 0.01
    assert loads == in_play  # each loaded once
    assert len(cache) == 4 and "exceed the params cache's capacity 2" in caplog.text
    assert all(r.levelno == logging.INFO for r in caplog.records)  # a large pool's every run: no warning for it
    now[0] += 11.0  # "a" and "b" leave the table; "c", "d" and a newcomer play on
    for key in ("c", "d", "e"):
        cache.get(key)
    assert "a" not in cache and "b" not in cache and len(cache) == 3
    now[0] += 11.0
    cache.get("e")
    assert len(cache) == 2 and "e" in cache  # back within capacity once the rest went idle


def test_params_in_play_beyond_capacity_warn_once_they_hold_more_than_the_bound(caplog):
    caplog.set_level(logging.INFO, logger="seedleague.league.model_pool")
    now = [0.0]
    params = {"layer": {"w": np.zeros((256, 256), np.float32), "b": np.zeros(256, np.float32)}}  # 263,168 bytes
    assert nbytes(params) == 263_168 and nbytes([params, (params, "not an array")]) == 2 * 263_168
    cache = ParamsCache(lambda key: params, capacity=2, keep_s=10.0, clock=lambda: now[0], warn_bytes=900_000)
    for key in "abc":
        cache.get(key)
    assert [r.levelname for r in caplog.records] == ["INFO"]  # 3 in play, 0.8 MiB: over capacity, under the bound
    for key in "abcd":
        cache.get(key)
    assert [r.levelname for r in caplog.records] == ["INFO", "WARNING"]  # 4 in play hold 1.0 MiB: warned, once
    assert "4 opponents in play (1.0 MiB of params)" in caplog.records[-1].getMessage()
    assert "--league.cache-keep-s" in caplog.records[-1].getMessage()


def test_a_host_sees_snapshots_another_host_adds_to_the_pool_after_it_opened_it(tmp_path):
    # Two learning players' hosts share one pool: each writes its own player and reads the other's.
    # orbax caches a directory's step list, so a reader opened before the writer's next snapshot once
    # answered "no checkpoint 1008 ... it holds [0]" for the rest of the run.
    State = collections.namedtuple("State", "step params")
    writer, reader = ModelPool(str(tmp_path)), ModelPool(str(tmp_path))
    writer.save("main", State(np.asarray(0, np.int32), np.zeros(3, np.float32)), {"n": 0})
    template = State(np.asarray(0, np.int32), np.zeros(3, np.float32))
    assert reader.keys("main") == ["main:000000"]
    assert reader.restore("main:000000", template)[1] == {"n": 0}  # the reader now holds main's directory open
    key = writer.save("main", State(np.asarray(1008, np.int32), np.full(3, 7.0, np.float32)), {"n": 1008})
    assert reader.keys("main") == ["main:000000", "main:001008"]
    state, meta = reader.restore(key, template)
    assert int(state.step) == 1008 and meta == {"n": 1008} and np.all(state.params == 7.0)
    with pytest.raises(FileNotFoundError, match=r"no checkpoint 2016 .* it holds \[0, 1008\]"):
        reader.restore("main:002016", template)
    writer.close(), reader.close()


def test_an_opponent_missing_from_the_pool_skips_only_its_own_matches(caplog):
    # One unloadable snapshot (a pool not shared with its host, or not written yet) used to fail the
    # whole prefetch batch, so every other opponent stopped arriving too.
    league = FakeLeague(opponents=["p:000000", "q:000100"])

    def load(key):
        if key == "q:000100":
            raise FileNotFoundError("no checkpoint 100 in pool/q; it holds [0]")
        return f"params of {key}"

    config = LeagueLinkConfig(address="fake", player="p", prefetch=16, retry_s=0.05, check_in_interval_s=5.0)
    link = LeagueLink(config, league, load, snapshot=lambda: (0, ""), reset=lambda: None, learner_step=lambda: 0)
    link.start()
    try:
        assert wait_for(lambda: link.stats.fetched >= 8)
        matches = link.draw(32)
    finally:
        link.stop()
    assert {m.opponent for m in matches} == {"p:000000"}
    assert link.opponent_params("p:000000") == "params of p:000000"
    assert link.stats.skipped > 0 and link.stats.failures == 0
    assert caplog.text.count("opponent q:000100 is not in the model pool") == 1  # warned once, not per batch


def test_every_opponent_snapshot_in_a_batch_acts_with_its_own_params_in_one_stacked_pass(league_host):
    """Rows of five snapshots, the learner and an opponent not in the cache: one stacked pass for
    the five must give each row exactly its own snapshot's logits; the uncached one plays as the learner."""
    league = FakeLeague()
    host, server = league_host(league)
    worker = RawWorker(server.address, SPEC)
    play(worker, duel_steps(worker.session_id), 2)
    assert wait_for(lambda: host.pipeline is not None)
    live, _ = host.pipeline.policy.current()

    def with_bias(bias):
        head = dict(live["params"]["policy_head"], bias=jax.numpy.array(bias, jax.numpy.float32))
        return {"params": dict(live["params"], policy_head=head)}

    snapshots = {f"p:{i:06d}": with_bias([float(i), -float(i)]) for i in range(5)}
    # "p:999999" is not cached: snapshots.get gives None for it
    rng = np.random.default_rng(0)
    keys = [None, "p:999999"] + list(snapshots)
    opponents = np.array([keys[i] for i in rng.integers(0, len(keys), 37)], object)
    observation = rng.normal(size=(37, 2)).astype(np.float32)
    first, legal = np.zeros(37, bool), np.ones((37, 2), bool)
    core = jax.tree.map(np.asarray, host.pipeline.policy.network.initial_state(37))
    forward = lambda: inference.forward(host.pipeline.policy, host._opponent_table, host.config.batcher.bucket,
                                        observation, first, core, legal, opponents, snapshots.get)
    out = forward()
    for key in set(opponents):
        rows = np.flatnonzero(opponents == key)
        alone = host.pipeline.policy.act(observation[rows], first[rows], jax.tree.map(lambda x: x[rows], core),
                                      legal[rows], params=snapshots.get(key))
        np.testing.assert_allclose(out.logits[rows], alone.logits, rtol=1e-5, atol=1e-5)
    assert host._opponent_table.writes == 5  # each snapshot crossed to the device once ...
    forward()
    assert host._opponent_table.writes == 5  # ... and stays there for the next batch
    worker.close()


def test_a_game_result_is_scored_from_the_learner_seats_return_sign():
    assert [results.outcome(r) for r in (2.0, 1e-9, 0.0, -0.5)] == [1.0, 1.0, 0.5, 0.0]
    spec = flat_spec("g", (2,), np.dtype(np.float32), 2, num_envs=3, num_seats=2)
    returns = np.array([1.0, -1.0, 0.5, 0.5, 0.0, 0.0], np.float32)  # env 1 pays both seats: not zero-sum
    assert results.not_zero_sum(spec, np.array([0, 2]), returns) is None
    assert "(env 1) ended with returns [0.5, 0.5]" in results.not_zero_sum(spec, np.array([1]), returns)


def test_seating_with_teams_gives_the_learner_every_seat_of_one_team():
    from seedleague.host.seating import Seating
    from seedleague.league.types import Match

    seating = Seating(3, 4, np.random.default_rng(0), teams=(0, 0, 1, 1))
    seating.start(np.arange(3), [Match("p:000000", False)] * 3)
    learning = seating.learning().reshape(3, 4)
    teams = {tuple(row) for row in learning.tolist()}
    assert teams <= {(True, True, False, False), (False, False, True, True)}
    opponents = seating.opponents().reshape(3, 4)
    assert ((opponents == "p:000000") == ~learning).all()
    returns = np.array([1.0, 3.0, -2.0, -2.0] * 3)
    np.testing.assert_allclose(seating.team_returns(returns), [[2.0, -2.0]] * 3)  # the mean over a team's seats
    assert seating.learner_team.tolist() == [0 if row[0] else 1 for row in learning]


@pytest.mark.parametrize("named", [False, True], ids=["v1-shaped", "two-tensors-hybrid-action"])
def test_a_2v2_team_game_over_protocol_v2_reports_one_result_per_game_from_the_learner_team(league_host, named):
    """A flat-shaped v2 spec runs on the flat model; one of two named tensors and a discrete plus a continuous head on
    the named network: teams seat, score and report the same way for both."""
    from seedleague.protocol.client import ClientConfig
    from seedleague.protocol.client_v2 import NamedWorkerClient
    from seedleague.protocol.named import (ActionSpec, ContinuousHead, DiscreteHead, ObservationSpec,
                                           NamedEnvSpec, TensorSpec)

    league = FakeLeague(opponents=["p:000000"])
    host, server = league_host(league)
    tensors, heads = (TensorSpec("obs", (2,), np.float32),), (DiscreteHead("act", 2),)
    if named:
        tensors += (TensorSpec("clock", (1,), np.float32),)
        heads += (ContinuousHead("u", (-1.0,), (1.0,)),)
    spec = NamedEnvSpec("2v2 duel", ObservationSpec(tensors), ActionSpec(heads), num_envs=NUM_ENVS, num_seats=4,
                        seat_team=(0, 0, 1, 1))
    client = NamedWorkerClient(ClientConfig(server.address, connect_timeout_s=60), spec)
    client.connect()
    observation = {t.name: np.zeros((NUM_ENVS, 4) + t.shape, np.float32) for t in tensors}
    try:
        client.step(observation, np.zeros((NUM_ENVS, 4)), np.zeros(NUM_ENVS, bool), np.zeros(NUM_ENVS, bool))
        assert wait_for(lambda: any(s.key == "p:000000" for s in league.added)), "no initial snapshot"
        for turn in range(1, 2000):  # every second step ends every env's episode: team 0 wins, team 1 loses
            ended = turn % 2 == 0
            reward = np.zeros((NUM_ENVS, 4), np.float32)
            if ended:
                reward[:, :2], reward[:, 2:] = 1.0, -1.0
            client.step(observation, reward, np.full(NUM_ENVS, ended), np.zeros(NUM_ENVS, bool))
            if len(league.results) >= 30:
                break
    finally:
        client.close()
    assert wait_for(lambda: len(league.results) >= 30)
    assert {r.outcome for r in league.results.values()} == {0.0, 1.0}  # the learner played both teams
    if named:
        assert host.pipeline.spec == spec and host._opponent_table.writes >= 1  # the snapshot acted on the device
    else:
        assert host.pipeline.spec == spec and isinstance(host.pipeline.network, Network)  # the flat model


def test_a_return_beyond_the_declared_bound_is_warned_about_once_and_play_goes_on(league_host, caplog):
    host, server = league_host(FakeLeague())
    worker = RawWorker(server.address, dataclasses.replace(SPEC, return_bound=0.5))  # the duel pays +-1
    with caplog.at_level(logging.WARNING, logger="seedleague.host.episodes"):
        play(worker, duel_steps(worker.session_id), 9)  # three episodes end in every env
    warned = [r.getMessage() for r in caplog.records if "return_bound" in r.getMessage()]
    assert len(warned) == 1 and "returned 1 to one seat, beyond the return_bound 0.5" in warned[0], warned
    worker.close()
    assert results.beyond_return_bound(SPEC, np.array([1.0, -1.0])) is None  # declares no bound
    assert results.beyond_return_bound(dataclasses.replace(SPEC, return_bound=1.0), np.array([1.0, -1.0])) is None
