"""A run's output (seedleague.output, seedleague.api.load_trained): recorded at the start of a run, resolved
from what is on disk (a finished run, a stopped one, one with nothing yet), named in summary.json, scored at
the end of the run, and served (a mixture: one member per env per episode); unusable games are refused."""

import contextlib
import dataclasses
import json
import logging
import os
import subprocess

import grpc
import numpy as np
import pytest

from conftest import RawWorker
from seedleague import checkpoint, checkpoint_config, cli, output
from seedleague.checkpoint import Checkpointer
from seedleague.checkpoint_config import CheckpointConfig
from seedleague.api import Policy, PolicyMixture, load_policy, load_trained
from seedleague.artifacts.run_output import Output
from seedleague.host.host import Host, HostConfig
from seedleague.league.nash import league_nash
from seedleague.metrics import Metrics
from seedleague.protocol import codec
from seedleague.protocol.specs import EnvSpec, zero_step
from seedleague.testing.server_thread import ServerThread
from test_api import SMALL, save_checkpoint
from test_e2e import SEEDLEAGUE, run_cli, summary

LEAGUE_RUN = ["--unroll_length", "4", "--batch_size", "8", "--network.hidden_sizes", "16", "--replay.capacity", "64",
              "--checkpoint.interval_s", "2", "--envs-per-worker", "16", "--league.check_in_interval_s", "0.5",
              "--league_config.mode", "pfsp", "--league_config.snapshot_interval_steps", "8",
              "--learner.average_from", "1", "--max-learner-steps", "40", "--max-seconds", "90"]


def with_source(run_dir, source, player="main"):
    output.record(str(run_dir), output.OutputConfig(source, player))


@pytest.fixture(scope="module")
def league_run(tmp_path_factory):
    """A short real Kuhn league run (PFSP, so snapshots play each other) whose output is league_nash."""
    run_dir = str(tmp_path_factory.mktemp("output") / "run")
    out = run_cli(["train", "--env", "openspiel:kuhn_poker", "--run-dir", run_dir, "--output", "league_nash"]
                  + LEAGUE_RUN, timeout=240)
    return run_dir, out.stdout


def test_a_league_run_records_names_scores_and_loads_its_output(league_run):
    run_dir, stdout = league_run
    with open(os.path.join(run_dir, output.FILE)) as f:
        assert json.load(f) == {"source": "league_nash", "player": "main"}
    named = summary(run_dir)["output"]
    assert named["source"] == "league_nash" and named["kind"] == "mixture"
    assert abs(sum(m["weight"] for m in named["members"]) - 1.0) < 1e-9
    pool_keys = set(os.listdir(os.path.join(run_dir, "pool", "main")))  # step dirs
    assert {str(int(m["key"].split(":")[1])) for m in named["members"]} <= pool_keys
    assert named["step"] == max(int(m["key"].split(":")[1]) for m in named["members"])
    assert "  output  " in stdout and "league_nash" in stdout  # the end-of-run evaluation scored it
    assert f"  output:      a mixture of {len(named['members'])} networks (league_nash, step {named['step']})" in stdout
    assert named["seconds"] >= 0.0  # how long resolving the output took after the budget
    # A two-player run reports games and its win rate against the league, not a zero-sum mean return of ~0.
    counts = summary(run_dir)
    assert 0 < counts["league_games"] <= counts["games"] and 0.0 <= counts["league_win_rate"] <= 1.0
    assert f"games {counts['games']} ({counts['league_games']} against league snapshots, recent win rate" in stdout
    trained = load_trained(run_dir)
    assert isinstance(trained, PolicyMixture)
    assert [m.step for m in trained.members] == [int(m["key"].split(":")[1]) for m in named["members"]]
    if "note" not in named:  # snapshots played each other: PSRO's meta-strategy of the stored table
        from seedleague.eval.run_league import league_of

        league = league_of(run_dir)
        payoff = league.payoff()
        league.close()
        expected = league_nash(payoff.keys, np.asarray(payoff.win_rate), "main")
        np.testing.assert_allclose(trained.weights, [expected[m["key"]] for m in named["members"]], atol=1e-9)


def test_each_source_of_the_same_run(league_run):
    run_dir, _ = league_run
    newest = load_policy(run_dir)
    try:
        with_source(run_dir, "final")
        final = load_trained(run_dir)
        assert isinstance(final, Policy) and final.step == newest.step and final.source == newest.source
        with_source(run_dir, "param_average")
        average = load_trained(run_dir)
        assert isinstance(average, Policy) and average.meta["average"]["count"] > 0
        assert average.source.endswith("(param average)")
        with_source(run_dir, "average_policy")
        mixture = load_trained(run_dir)
        expected = output.average_policy(run_dir, 1 / 3, "main")
        assert isinstance(mixture, PolicyMixture) and mixture.members[-1].meta["average"]["count"] > 0
        assert [m.step for m in mixture.members] == [m.step for m in expected.members]
        np.testing.assert_allclose(mixture.weights[-1], 0.5)
    finally:
        with_source(run_dir, "league_nash")


def test_a_mixtures_members_are_read_with_each_directorys_checkpoint_list_opened_once(league_run, monkeypatch):
    run_dir, _ = league_run
    members = output.population(run_dir, "main", 64).members  # every snapshot of the pool and the param average
    assert members[-1].average
    doubled = [m for m in members if not m.average] * 2 + [members[-1]]  # the pool read for two members at least
    population = Output("population", tuple(dataclasses.replace(m, weight=1 / len(doubled)) for m in doubled))
    opened = []
    real_open = checkpoint.open_read_only
    monkeypatch.setattr(checkpoint, "open_read_only", lambda directory: opened.append(directory) or real_open(directory))
    mixture = population.load(seed=3)
    assert sorted(opened) == sorted({os.path.join(run_dir, "pool", "main"), os.path.join(run_dir, "checkpoints")})
    assert [(m.step, "average" in m.meta) for m in mixture.members] == [(m.step, m.average) for m in population.members]


def test_a_stopped_run_gives_its_newest_checkpoint_and_param_average_falls_back_with_a_note(tmp_path, caplog):
    run = tmp_path / "stopped"
    with_source(run, "final")
    with pytest.raises(FileNotFoundError, match=r"has no output yet: .*holds none"):
        load_trained(str(run))
    save_checkpoint(run / "checkpoints", step=3, seed=1)
    save_checkpoint(run / "checkpoints", step=7, seed=2)  # no summary.json: the run was stopped here
    assert load_trained(str(run)).step == 7
    with_source(run, "param_average")
    with caplog.at_level(logging.WARNING, logger="seedleague.output"):
        fallback = load_trained(str(run))
    assert fallback.step == 7 and "average" not in fallback.meta
    assert "keeps no param average" in caplog.text and "final params instead" in caplog.text
    assert output.resolve(str(run)).describe()["note"].startswith("checkpoint 7")
    with_source(run, "average_policy")
    with pytest.raises(FileNotFoundError, match="no league snapshots of player 'main' yet"):
        load_trained(str(run))
    with pytest.raises(FileNotFoundError, match="no such run directory"):
        load_trained(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="must be one of final, param_average, average_policy, league_nash"):
        output.OutputConfig("best")


@contextlib.contextmanager
def served(run, num_envs: int):
    """A greedy host serving `run`'s output, and a raw two-seat Kuhn worker of `num_envs` envs on it:
    (server, worker, spec)."""
    host = Host(HostConfig(learn=False, greedy=True, serve_output=str(run)), Metrics())
    server = ServerThread(host).start()
    spec = EnvSpec("openspiel:kuhn_poker", (11,), np.float32, 2, num_envs, num_seats=2, has_legal_mask=True)
    worker = RawWorker(server.address, spec)
    try:
        yield server, worker, spec
    finally:
        worker.close()
        server.stop()
        host.stop()


def test_a_served_mixture_plays_one_member_per_env_for_a_whole_episode(tmp_path):
    """Two members that are told apart by their greedy action (5 -> 0, 6 -> 1), on every seat of an env."""
    run = tmp_path / "run"
    for step in range(1, 7):
        bias = {5: [8.0, -8.0], 6: [-8.0, 8.0]}.get(step)
        save_checkpoint(run / "pool" / "main", step=step, seed=step, bias=bias, network=SMALL)
    with_source(run, "average_policy")  # the newest third of six snapshots: 5 and 6, half each
    num_envs = 8
    with served(run, num_envs) as (_, worker, spec):
        members = [[] for _ in range(num_envs)]  # per env: the member of each episode
        for t in range(40):
            step = zero_step(spec, worker.session_id, t, acting=True)
            ends = (np.arange(num_envs) + t) % 3 == 0 if t else np.zeros(num_envs, bool)
            step.terminated = ends
            reply = codec.decode_actions(worker.send(codec.encode_step(step)))
            assert reply.policy_version == 6
            actions = np.asarray(reply.action).reshape(num_envs, 2)
            assert (actions[:, 0] == actions[:, 1]).all()  # the member takes every seat of its env
            for env in range(num_envs):
                if t == 0 or ends[env]:
                    members[env].append([])
                members[env][-1].append(int(actions[env, 0]))
        for env in range(num_envs):
            assert all(len(set(episode)) == 1 for episode in members[env])  # never switched mid-episode
        drawn = [episode[0] for env in members for episode in env]
        assert set(drawn) == {0, 1} and 0.3 < np.mean(drawn) < 0.7  # both members, about half each
        assert any(len({e[0] for e in env}) == 2 for env in members)  # an env draws again at its next episode


def test_a_served_mixture_with_one_mix_per_seat_draws_each_seats_member_by_its_own_weights(tmp_path):
    """The least exploitable mixture's shape (seat weights), written as output selection caches it: seat 0
    always plays member 5 (greedy action 0), seat 1 always member 6 (action 1)."""
    from seedleague.eval import output_selection

    run = tmp_path / "run"
    for step, bias in ((5, [8.0, -8.0]), (6, [-8.0, 8.0])):
        save_checkpoint(run / "pool" / "main", step=step, seed=step, bias=bias, network=SMALL)
    save_checkpoint(run / "checkpoints", step=6, seed=6, network=SMALL)
    with_source(run, "selected")
    pool = str(run / "pool" / "main")
    members = (output.Member("main:000005", 0.5, pool, 5, seat_weights=(1.0, 0.0)),
               output.Member("main:000006", 0.5, pool, 6, seat_weights=(0.0, 1.0)))
    output_selection._write(str(run), output_selection.Choice(
        "least_exploitable_mixture", members, {"least_exploitable_mixture": 0.5},
        output_selection._stamp(6, ["main:000005", "main:000006"])))
    trained = load_trained(str(run))
    assert trained.seat_weights.tolist() == [[1.0, 0.0], [0.0, 1.0]] and trained.weights.tolist() == [0.5, 0.5]
    assert [trained.draw(seed, seat=0).step for seed in range(5)] == [5] * 5
    assert [trained.draw(seed, seat=1).step for seed in range(5)] == [6] * 5
    with pytest.raises(ValueError, match="weights for seats 0-1, got seat 2"):
        trained.draw(0, seat=2)
    num_envs = 8
    with served(run, num_envs) as (server, worker, spec):
        for t in range(12):
            step = zero_step(spec, worker.session_id, t, acting=True)
            step.terminated = (np.arange(num_envs) + t) % 3 == 0 if t else np.zeros(num_envs, bool)
            actions = np.asarray(codec.decode_actions(worker.send(codec.encode_step(step))).action).reshape(num_envs, 2)
            assert (actions[:, 0] == 0).all() and (actions[:, 1] == 1).all()  # each seat its own member
        with pytest.raises(grpc.RpcError) as refused:  # one seat: not the game this mixture was made for
            RawWorker(server.address, EnvSpec("openspiel:kuhn_poker", (11,), np.float32, 2, 4, num_seats=1,
                                              has_legal_mask=True))
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "mixes its networks per seat for 2 seats" in refused.value.details()


@pytest.mark.parametrize("args, message", [
    (["--env", "openspiel:leduc_poker(players=3)"], "leduc_poker(players=3) is a 3-player game"),
    (["--env", "openspiel:sheriff"], "sheriff is general-sum, not zero-sum"),
    (["--env", "openspiel:phantom_ttt_ir"], "phantom_ttt_ir provides neither an information-state tensor"),
    (["--env", "openspiel:no_such_game"], "OpenSpiel has no game 'no_such_game'"),
    (["--env", "openspiel:kuhn_poker", "--output", "best"], "invalid choice: 'best' (choose from 'final'"),
    (["--env", "openspiel:kuhn_poker", "--output", "league_nash", "--league_config.mode", "self_play"],
     "self-play leaves empty"),
    (["--env", "CartPole-v1", "--output", "average_policy"], "CartPole-v1 is single-agent"),
    (["--env", "openspiel:kuhn_poker", "--output", "distilled"], "--output distilled is fitted after training"),
])
def test_refusals_come_before_anything_starts(tmp_path, capsys, args, message):
    """`seedleague train` run in this process (the same main; the console path of one refusal as its own
    process is checked below): exit 2 with the reason on stderr, and nothing started."""
    run_dir = tmp_path / "run"
    try:
        status = cli.main(["train", "--run-dir", str(run_dir)] + args)
    except SystemExit as exit:  # argparse's refusals
        status = exit.code
    stderr = capsys.readouterr().err
    assert status == 2 and message in stderr, stderr[-2000:]
    assert not run_dir.exists()  # no run directory, so no league, host or worker was started


def test_a_refusal_reaches_the_console_of_a_train_process(tmp_path):
    run_dir = tmp_path / "run"
    result = subprocess.run(SEEDLEAGUE + ["train", "--run-dir", str(run_dir), "--env", "openspiel:sheriff"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "sheriff is general-sum, not zero-sum" in result.stderr, result.stderr[-2000:]
    assert not run_dir.exists()


def test_a_run_directory_orbax_could_not_read_back_is_refused_before_anything_starts(tmp_path, capsys):
    run_dir = tmp_path / "sweep[1]"  # orbax globs for its files: "[1]" would match only "1"
    assert cli.main(["train", "--run-dir", str(run_dir), "--env", "openspiel:kuhn_poker"]) == 2
    stderr = capsys.readouterr().err
    assert "--run-dir" in stderr and "contains '[' and ']'" in stderr and "could not be read back" in stderr, stderr
    assert not run_dir.exists()
    with pytest.raises(ValueError, match=r"checkpoint directory .*contains '\\\\'"):
        Checkpointer(CheckpointConfig(directory=str(tmp_path / "a\\b")))


def test_a_game_name_with_a_list_parameter_gets_a_default_run_directory_orbax_can_read():
    name = "openspiel:battleship(board_width=2,board_height=2,ship_sizes=[1],ship_values=[1],num_shots=2)"
    run_dir = cli._default_run_dir(name)
    assert checkpoint_config.path_problem(run_dir) is None
    assert "ship_sizes=_1_" in run_dir and run_dir.startswith(os.path.join("runs", "openspiel:battleship("))
