"""Default settings per game family, so `seedleague train --env X` works out of the box.

A preset is a RunConfig-shaped set of defaults; every value can still be changed
on the command line. CartPole's preset is tuned to solve the task (mean return
>= 475 over 100 episodes) quickly on two CPU cores.
"""

from __future__ import annotations

import dataclasses

from seedleague.host.batcher import BatcherConfig
from seedleague.league.config import LeagueConfig
from seedleague.league.types import Mode
from seedleague.host.host import HostConfig
from seedleague.host.replay import ReplayConfig
from seedleague.rl.learner import LearnerConfig
from seedleague.rl.networks import NetworkConfig

DEFAULT_ENV = "openspiel:kuhn_poker"  # `make run`: a league run that ends by printing its exploitability


@dataclasses.dataclass(frozen=True)
class Preset:
    host: HostConfig
    workers: int
    envs_per_worker: int
    target_return: float | None = None
    max_seconds: float = 0.0
    max_learner_steps: int = 0  # 0: no limit
    players: str = "main"  # two-player games: the learning players, NAME[:ROLE],...
    league: LeagueConfig = LeagueConfig()
    output: str = "final"  # what the run's output is (seedleague.output.SOURCES): --output


def is_multiplayer(env_id: str) -> bool:
    """Two-player games (run in a league): "openspiel:<game>" and "pettingzoo:<game>"."""
    return env_id.startswith(("openspiel:", "pettingzoo:"))


def league_flags(config: LeagueConfig) -> tuple[str, ...]:
    """`seedleague league serve` flags that reproduce `config`."""
    flags = []
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if value == field.default:
            continue
        text = value.value if hasattr(value, "value") else ",".join(map(str, value)) if isinstance(value, tuple) else value
        flags += [f"--{field.name}", str(text)]
    return tuple(flags)


def _classic_control() -> Preset:
    # Chosen by seed sweeps on CartPole-v1 (2 cores; see README): V-trace at 6e-4
    # solved 3/3 seeds, PPO at 1e-3 3/3 but slower, V-trace at 1e-3 or above
    # sometimes collapsed. One worker with 64 envs beats two with 16 (fewer
    # processes competing for the cores); uniform replay at 2 samples per insert
    # over the last 128 unrolls trades a little staleness for sample reuse.
    return Preset(
        host=HostConfig(
            unroll_length=16,
            batch_size=16,
            batcher=BatcherConfig(timeout_ms=2.0),
            replay=ReplayConfig(capacity=128, samples_per_insert=2.0, sampler="uniform"),
            network=NetworkConfig(torso="mlp", hidden_sizes=(64, 64)),
            learner=LearnerConfig(loss="vtrace", learning_rate=6e-4, entropy_cost=0.01, discount=0.99),
        ),
        workers=1,
        envs_per_worker=64,
    )


def _atari() -> Preset:
    return Preset(
        host=HostConfig(
            unroll_length=20,
            batch_size=32,
            replay=ReplayConfig(capacity=256, samples_per_insert=1.0, sampler="fifo"),
            network=NetworkConfig(torso="conv", hidden_sizes=(512,)),
            learner=LearnerConfig(loss="vtrace", learning_rate=6e-4, entropy_cost=0.01, discount=0.99),
        ),
        workers=2,
        envs_per_worker=16,
    )


# Poker: self-play with one policy on both seats and an entropy cost that starts
# high and anneals. A small constant entropy cost (0.02-0.1) let self-play
# collapse into near-deterministic, exploitable policies within a minute (Kuhn
# exploitability 0.3-0.63, oscillating); annealing 1.0 -> 0.02 over 20K updates
# tracked the regularised equilibrium down smoothly (Kuhn 0.036 after 300 s).
# Leduc has 936 information states to Kuhn's 12: with 32 x 8-step unrolls per
# update its gradients were too noisy to follow the annealed equilibrium (0.6
# after 30 minutes); 128 unrolls per update at a higher learning rate reached
# 0.33-0.47 within 200-300 s, and 256 unrolls (two workers keep the learner fed,
# about 10 updates/s, so the 17.5K-update anneal ends with the 30 minutes) brought
# the average of the last third of the snapshots from 0.17-0.22 to 0.126. The
# anneal is counted in updates, and Leduc's run ends with it: a machine that made 15
# updates/s finished the anneal after 20 minutes (average policy 0.124 there) and,
# trained on at the final settings, drifted to 0.30 by minute 30; the run that
# stopped at the anneal's end printed 0.165, and 0.148 when run again (so 0.124-0.165
# at that point, not reliably under the 0.15 target). A longer anneal, a KL magnet and
# an entropy floor did no better. V-trace's lambda at 1 (advantages from the sampled
# returns, not a critic chasing a moving opponent) kept the mixture at 0.124-0.155
# (within the spread). The learner also keeps the mean of its params over the last
# quarter of the anneal: one network, as good as the mixture (0.106-0.159 against
# 0.121-0.155 in seven runs, each under 0.15 in six), printed as "param average".
# How exploitable a run's averages came out varied from run to run (param average 0.106-0.167
# in nine runs). The likely cause: lines the annealed policies stop playing leave the responses
# to them untrained, and a best response walks into them. Acting uniformly at random 5% of the
# time (--explore 0.05; V-trace corrects for it) keeps those lines in the data: in six runs
# the param average scored 0.110-0.120 and the average policy 0.116-0.133 (10%: 0.19).
# A much slower machine ends the run at 30 minutes still annealing. See benchmarks/README.md.
@dataclasses.dataclass(frozen=True)
class _Schedule:
    entropy: float  # entropy cost at the start ...
    entropy_final: float  # ... and after `anneal` updates
    anneal: int
    seconds: float  # the run's default length
    batch_size: int = 32
    learning_rate: float = 3e-4
    learning_rate_final: float = 3e-5
    snapshot_interval: int = 500  # learner updates between league snapshots
    workers: int = 1  # OpenSpiel workers of 128 envs each
    stop_after_anneal: bool = False  # the run's learner-step budget is `anneal` (it also stops at `seconds`)
    trace_lambda: float = 0.95  # V-trace's lambda (1: returns without the critic's bias)
    average_tail: float = 0.0  # keep the mean of the params over this last fraction of the anneal (0: none)
    explore: float = 0.0  # epsilon-exploration of the acting learner (HostConfig.explore)


_POKER = {
    "kuhn_poker": _Schedule(1.0, 0.05, 25_000, 600.0),
    "leduc_poker": _Schedule(1.0, 0.03, 17_500, 1800.0, batch_size=256, learning_rate=1e-3, learning_rate_final=5e-5,
                             snapshot_interval=125, workers=2, stop_after_anneal=True, trace_lambda=1.0,
                             average_tail=0.25, explore=0.05),
}
_OTHER_GAMES = _Schedule(0.05, 0.01, 20_000, 600.0)


# Board games (connect_four: 98% against uniform random after 10 minutes with the
# board torso, 90-94% with MLPs of 128 or 256 units even after 40 minutes).
_BOARD_NETWORK = NetworkConfig(torso="board", hidden_sizes=(256,))
_FLAT_NETWORK = NetworkConfig(torso="mlp", hidden_sizes=(128, 128))


def _shows_a_board(game: str) -> bool:
    """Whether the OpenSpiel game's observation is [C, H, W] planes (the board torso fits)."""
    from envs.openspiel_games import UnsupportedGame, load_game, observation_shape

    try:
        return len(observation_shape(load_game(game))) == 3
    except UnsupportedGame:
        return False  # the worker refuses the game by name, before anything is trained


def _openspiel(game: str) -> Preset:
    schedule = _POKER.get(game, _OTHER_GAMES)
    network = _BOARD_NETWORK if game not in _POKER and _shows_a_board(game) else _FLAT_NETWORK
    return Preset(
        host=HostConfig(
            unroll_length=8,
            batch_size=schedule.batch_size,
            explore=schedule.explore,
            batcher=BatcherConfig(timeout_ms=2.0),
            replay=ReplayConfig(capacity=256, samples_per_insert=1.0, sampler="fifo"),
            network=network,
            learner=LearnerConfig(loss="vtrace", learning_rate=schedule.learning_rate, entropy_cost=schedule.entropy,
                                  discount=1.0, lambda_=schedule.trace_lambda,
                                  learning_rate_final=schedule.learning_rate_final,
                                  entropy_cost_final=schedule.entropy_final, anneal_steps=schedule.anneal,
                                  average_from=(round(schedule.anneal * (1 - schedule.average_tail))
                                                if schedule.average_tail else None)),
        ),
        workers=schedule.workers,
        envs_per_worker=128,
        max_seconds=schedule.seconds,
        max_learner_steps=schedule.anneal if schedule.stop_after_anneal else 0,
        league=LeagueConfig(mode=Mode.SELF_PLAY, snapshot_interval_steps=schedule.snapshot_interval),
    )


def _pettingzoo() -> Preset:
    atari = _atari()
    return dataclasses.replace(atari, workers=2, envs_per_worker=2, max_seconds=3600.0,
                               league=LeagueConfig(mode=Mode.PFSP, snapshot_interval_steps=500))


def preset_for(env_id: str) -> Preset:
    """The preset for an env id: Atari ids get the conv net, CartPole a target return."""
    if env_id.startswith("openspiel:"):
        return _openspiel(env_id.partition(":")[2])
    if env_id.startswith("pettingzoo:"):
        return _pettingzoo()
    if env_id.startswith("ALE/") or "NoFrameskip" in env_id:
        return _atari()
    preset = _classic_control()
    if env_id.startswith("CartPole-v1"):
        preset = dataclasses.replace(preset, target_return=475.0, max_seconds=600.0)
    return preset
