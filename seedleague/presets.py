"""Default settings per game family, so `seedleague train --env X` works out of the box.

A preset is a RunConfig-shaped set of defaults; every value can still be changed
on the command line. CartPole's preset is tuned to solve the task (mean return
>= 475 over 100 episodes) quickly on two CPU cores. A worker binary with no --env
(`train --worker-cmd`, `host`) gets `preset_for_spec` of its handshake's spec,
which looks at the spec alone, after `check_trainable` refused what cannot train.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from seedleague import config_flags, games
from seedleague.host.batcher import BatcherConfig
from seedleague.league.config import LeagueConfig
from seedleague.league.types import UNIFORM_ANCHOR, Mode
from seedleague.host.config import HostConfig
from seedleague.host.replay_config import ReplayConfig
from seedleague.protocol.named import ContinuousHead, NamedEnvSpec, TensorSpec, flat_model
from seedleague.rl.learner_config import LearnerConfig
from seedleague.rl.network_config import NetworkConfig

DEFAULT_ENV = "openspiel:kuhn_poker"  # `make run`: a league run that ends by printing its exploitability


@dataclasses.dataclass(frozen=True)
class Preset:
    host: HostConfig
    # The built-in env workers on a CPU-only machine, where they share its cores with the learner and inference
    # (each preset's count was measured on 2 cores). A host on an accelerator raises it to the machine's CPUs
    # (seedleague.launch.run_config.machine_share) unless --workers is given.
    workers: int
    envs_per_worker: int
    target_return: float | None = None
    max_seconds: float = 0.0
    max_learner_steps: int = 0  # 0: no limit
    players: str = "main"  # two-player games: the learning players, NAME[:ROLE],...
    league: LeagueConfig = LeagueConfig()
    output: str = "final"  # what the run's output is (seedleague.output.SOURCES): --output
    anneal_over_budget: bool = False  # the learner's anneal follows the run's time budget (see anneal_over_budget)
    # the learner of a run whose user asks for `--output selected` where that choice can measure every candidate
    # exactly (a game tree small enough to walk): see for_output
    exact_selection_learner: LearnerConfig | None = None


def is_multiplayer(env_id: str) -> bool:
    """Two-player games (run in a league): "openspiel:<game>" and "pettingzoo:<game>", except PettingZoo's MPE games
    ("pettingzoo:mpe/<game>"), whose rewards are general-sum: they train every seat with one shared policy."""
    return env_id.startswith(("openspiel:", "pettingzoo:")) and not env_id.startswith("pettingzoo:mpe/")


def plays_in_league(spec: NamedEnvSpec) -> bool:
    """Whether a worker's spec is a game of two or more teams (a league game; every seat its own team unless a
    protocol v2 spec groups them). One team of several seats is a cooperative game: one policy plays every seat."""
    return len(set(spec.teams)) >= 2


def league_flags(config: LeagueConfig) -> tuple[str, ...]:
    """`seedleague league serve` flags that reproduce `config`."""
    flags = []
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if value == field.default:
            continue
        text = value.value if hasattr(value, "value") else ",".join(map(str, value)) if isinstance(value, tuple) else value
        flags += [config_flags.flag_name(field.name), str(text)]
    return tuple(flags)


def _classic_control() -> Preset:
    # Sample efficiency first (env steps are what a real simulator costs): PPO epochs on fresh
    # data, the standard implementations' recipe for small MLP tasks (rl-baselines3-zoo's
    # CartPole PPO: 8 envs, GAE(0.8) at gamma 0.98, 20 epochs, lr 1e-3, no entropy bonus), with
    # 8-step unrolls, so the learner updates after every 64 env steps (the zoo's: 256). The FIFO
    # replay at one sample per insert trains on every batch once, and its rate limiter holds the
    # worker while the learner is two batches behind, so the policy lag stays below one update
    # on average.
    # Chosen by seed sweeps on CartPole-v1 (2 cores; benchmarks/README.md, "Time to solve
    # CartPole-v1"), against V-trace at 64 envs, which needed about 5x the env steps. Two
    # workers of 8 envs rather than one: the lockstep round trip, not the learner, bounded one
    # worker (the learner waited twice as long as it updated); two step while the host answers.
    return Preset(
        host=HostConfig(
            unroll_length=8,
            batch_size=8,
            batcher=BatcherConfig(timeout_ms=2.0),
            replay=ReplayConfig(capacity=64, samples_per_insert=1.0, sampler="fifo"),
            network=NetworkConfig(torso="mlp", hidden_sizes=(64, 64)),
            learner=LearnerConfig(loss="ppo", epochs=20, minibatches=1, fixed_targets=True, learning_rate=1e-3,
                                  entropy_cost=0.0, discount=0.98, lambda_=0.8),
        ),
        workers=2,
        envs_per_worker=8,
    )


def _continuous_control() -> Preset:
    # Continuous action heads (a float Box): PPO as the standard implementations run it on continuous
    # control (Schulman et al. 2017's MuJoCo settings, CleanRL's ppo_continuous_action: 2048-step
    # rollouts, 10 epochs of 32 minibatches, gamma 0.99, GAE(0.95), no entropy bonus), scaled to one
    # worker on two cores: 16 envs x 32-step unrolls = 512 steps per update, 10 epochs of 4 minibatches.
    # The learning rate starts at 1e-3 (3e-4 left Pendulum flat for its first 100 s) and anneals to 1e-4
    # over the run's time budget, so the Gaussian settles by the end of a run of any length.
    # Measurements: benchmarks/README.md, "Continuous control: Pendulum-v1".
    return Preset(
        host=HostConfig(
            unroll_length=32,
            batch_size=16,
            batcher=BatcherConfig(timeout_ms=2.0),
            replay=ReplayConfig(capacity=64, samples_per_insert=1.0, sampler="fifo"),
            network=NetworkConfig(torso="mlp", hidden_sizes=(64, 64)),
            learner=LearnerConfig(loss="ppo", epochs=10, minibatches=4, fixed_targets=True, learning_rate=1e-3,
                                  learning_rate_final=1e-4, entropy_cost=0.0, discount=0.99, lambda_=0.95),
        ),
        workers=1,
        envs_per_worker=16,
        anneal_over_budget=True,
    )


def has_continuous_actions(spec: NamedEnvSpec) -> bool:
    """Whether a spec's action has a continuous head (a protocol v2 spec with a float Box)."""
    return any(isinstance(h, ContinuousHead) for h in spec.action.heads)


def _gym_spec(env_id: str) -> NamedEnvSpec | None:
    """The spec a gym worker declares for `env_id` (one env made to read its spaces), or None when gymnasium cannot
    make it here (the worker then says why)."""
    try:
        return games.spec_of(env_id)
    except games.UnsupportedGame:
        return None


# Image observations: PPO epochs as the standard implementations run them on Atari (Schulman et al. 2017's Atari
# settings as rl-baselines3-zoo's PPO has them: 4 epochs of 4 minibatches, lr 2.5e-4, ratio clip 0.1, entropy 0.01,
# GAE(0.95), advantages and targets computed once per batch), on batches of 32 unrolls x 20 steps, each trained on
# once from the FIFO replay. On 2 CPU cores Pong's score began to climb with them within 30 minutes (one run), where
# one V-trace step per sample stayed flat on up to 2.6x the env steps (two runs; benchmarks/README.md, "Atari Pong on
# 2 CPU cores").
IMAGE_PPO = LearnerConfig(loss="ppo", epochs=4, minibatches=4, fixed_targets=True, learning_rate=2.5e-4,
                          ppo_clip_epsilon=0.1, entropy_cost=0.01, discount=0.99)
# V-trace, one step per sample (IMPALA; SEED RL's Atari agent): the choice where the data is off-policy (many
# asynchronous workers far behind the learner, or replay that reuses samples), which V-trace's importance weights
# correct and PPO's clip does not, and where env steps cost nothing next to wall-clock. `benchmarks/gpu_pong.py`
# measures SEED RL's setting with it. Select it with `--learner.loss vtrace --learner.fixed-targets false
# --learner.epochs 1 --learner.minibatches 1 --learner.learning-rate 6e-4`.
IMAGE_VTRACE = LearnerConfig(loss="vtrace", learning_rate=6e-4, entropy_cost=0.01, discount=0.99)


def _atari() -> Preset:
    return Preset(
        host=HostConfig(
            unroll_length=20,
            batch_size=32,
            replay=ReplayConfig(capacity=256, samples_per_insert=1.0, sampler="fifo"),
            network=NetworkConfig(torso="conv", hidden_sizes=(512,)),
            learner=IMAGE_PPO,
        ),
        workers=2,
        envs_per_worker=16,
    )


# Two-player zero-sum OpenSpiel games: one recipe for every game, whatever its name.
# Magnetic mirror descent (Sokota et al. 2023) in self-play: PPO's surrogate, an entropy
# bonus (a uniform magnet) and a KL pull to the policy that acted, several epochs per
# batch, so the network itself, not only an average of it, approaches an equilibrium.
# The entropy cost and the learning rate anneal over the run's time budget (anneal_seconds
# is set from --max-seconds, see `anneal_over_budget`), so a run ends annealed on a fast
# machine and a slow one alike; the output is the mean of the params over the last quarter
# of that anneal. Measurements and the per-game schedules this replaced: benchmarks/README.md.
# GAME_RECIPE is every game's recipe, and its output needs no game tree (GAME_OUTPUT). MIXTURE_RECIPE serves only
# a run whose user asks for the exact selection (`--output selected`) on a game whose tree can be walked
# (`mixes_networks`): the least exploitable mixture of the run's networks, chosen by exact exploitability.
GAME_RECIPE = LearnerConfig(
    loss="mmd",
    kl_cost=0.2,  # 1 / eta, MMD's proximal weight on KL(pi || the policy that acted)
    epochs=4,
    minibatches=4,
    learning_rate=3e-4,
    learning_rate_final=3e-5,
    entropy_cost=0.2,  # alpha, on normalised advantages, so its scale does not depend on the game's rewards
    entropy_cost_final=0.05,  # below about 0.07 Kuhn's single iterates destabilised (benchmarks/README.md, kuhn_d1)
    discount=1.0,  # games end; their return is the outcome
    average_tail=0.25,
)
# Where the output mixes the run's networks by an exact LP (Anytime PSRO's restricted distribution), the
# iterates' cycling at a lower temperature becomes coverage: the mixture, not any one iterate, approaches the
# lower temperature's QRE, which is nearer Nash (benchmarks/README.md, "A lower final temperature under the
# mixture output"). The single networks get worse, so this holds only where the mixture is the output.
MIXTURE_RECIPE = dataclasses.replace(GAME_RECIPE, entropy_cost_final=0.02)
# The output of a game's run by default: nothing that chooses it walks a game tree, so an OpenSpiel game's run
# gives what a user's own worker binary's run gives.
GAME_OUTPUT = "param_average"
# Values and returns are learnt in the game's own payoff units while its payoffs stay within what the recipe is
# measured on (Leduc's largest is 13); a game with larger payoffs learns them scaled into [-1, 1]
# (`scale_for_bound` of the return bound the worker's spec declares). universal_poker's chips (up to 1,200) put
# the value loss at about 170,000, the gradient clip was set by the value head alone, and the output stayed at
# 200.9 exploitability; at 1/1,000 it fell to 132 in the same 600 s (benchmarks/README.md, "Payoffs in chips").
PAYOFF_RANGE = 16.0
ANNEALED_SHARE = 0.9  # the anneal ends at this share of the time budget; the rest trains at the final settings
_DEFAULT_GAME_SECONDS = 600.0

# Board observations ([C, H, W] planes) get the board torso: connect_four reached 98% against
# uniform random after 10 minutes with it, 90-94% with MLPs even after 40 minutes. A game's
# features may be raw counts (universal_poker's information state carries bets in chips, up to
# 1,200): inputs beyond [-1, 1] enter log-squashed (NetworkConfig.squash_inputs); every game
# measured before it shows features within [-1, 1] only, which it leaves exactly as they are.
_BOARD_NETWORK = NetworkConfig(torso="board", hidden_sizes=(256,), squash_inputs=True)
_FLAT_NETWORK = NetworkConfig(torso="mlp", hidden_sizes=(128, 128), squash_inputs=True)


def _shows_a_board(game: str) -> bool:
    """Whether the OpenSpiel game's observation is [C, H, W] planes (the board torso fits)."""
    from seedleague.games.openspiel import UnsupportedGame, load_game, observation_shape

    try:
        return len(observation_shape(load_game(game))) == 3
    except UnsupportedGame:
        return False  # the worker refuses the game by name, before anything is trained


def mixes_networks(env_name: str) -> bool:
    """Whether an asked-for `selected` output of a run on `env_name` can be the least exploitable mixture of its
    networks:
    exactly when every candidate's exploitability can be measured (seedleague.eval.tree_size.unmeasurable,
    asked of the name the worker's spec declares, as the output's choice asks it)."""
    from seedleague.games.openspiel import UnsupportedGame
    from seedleague.eval.tree_size import unmeasurable

    try:
        return not unmeasurable(env_name)
    except UnsupportedGame:
        return False  # the worker refuses the game by name, before anything is trained


def scale_for_bound(return_bound: float) -> float:
    """The learner's reward_scale for a game whose largest absolute return is `return_bound` (a spec's field;
    0: not declared): 1 up to PAYOFF_RANGE or when not declared, else one over the bound, so returns lie in
    [-1, 1]."""
    return 1.0 if return_bound <= PAYOFF_RANGE else 1.0 / return_bound


def payoff_scale(env_name: str) -> float:
    """`scale_for_bound` of the return bound the worker for `env_name` will declare: an OpenSpiel game's largest
    payoff (`seedleague.games.openspiel.payoff_bound`); other env ids declare none here: 1."""
    from seedleague.games.openspiel import UnsupportedGame, game_name, load_game, payoff_bound

    name = game_name(env_name)
    if name is None:
        return 1.0
    try:
        return scale_for_bound(payoff_bound(load_game(name)))
    except UnsupportedGame:
        return 1.0  # the worker refuses the game by name, before anything is trained


def _openspiel(game: str) -> Preset:
    name = f"openspiel:{game}"
    return _game(board=_shows_a_board(game), exact_selection=mixes_networks(name), reward_scale=payoff_scale(name))


def _game(board: bool, exact_selection: bool = False, reward_scale: float = 1.0) -> Preset:
    """Two-player zero-sum games: GAME_RECIPE in self-play, the GAME_OUTPUT; MIXTURE_RECIPE only for a run that asks
    for `--output selected` where that can measure exactly (`exact_selection`); the board torso for [C, H, W]
    planes; rewards times `reward_scale` (`payoff_scale`)."""
    learner = dataclasses.replace(GAME_RECIPE, reward_scale=reward_scale)
    return Preset(
        host=HostConfig(
            unroll_length=8,
            batch_size=64,
            batcher=BatcherConfig(timeout_ms=2.0),
            replay=ReplayConfig(capacity=256, samples_per_insert=1.0, sampler="fifo"),  # each batch once, fresh
            network=_BOARD_NETWORK if board else _FLAT_NETWORK,
            learner=learner,
        ),
        workers=1,
        envs_per_worker=128,
        max_seconds=_DEFAULT_GAME_SECONDS,
        # PSRO's opponent draw (the Nash mixture of the snapshots) for a tenth of the episodes: the league's
        # games rate the snapshots; more costs learner updates (opponent rows need a second pass). The uniform random
        # policy is an anchor (rated, never trained against, in anchor_share of the episodes): Elo is read against it.
        league=LeagueConfig(mode=Mode.PSRO, self_play_share=0.9, snapshot_interval_steps=100,
                            anchors=(UNIFORM_ANCHOR,)),
        output=GAME_OUTPUT,
        anneal_over_budget=True,
        exact_selection_learner=dataclasses.replace(MIXTURE_RECIPE, reward_scale=reward_scale) if exact_selection else None,
    )


def for_output(preset: Preset, source: str | None) -> Preset:
    """`preset` for a run whose output is `source` (--output; None: the preset's own). Asking for `selected` where
    the exact selection can measure every candidate gets the preset's `exact_selection_learner` (MIXTURE_RECIPE at
    the same reward scale): that output mixes the run's networks, which the lower final temperature serves."""
    if source in (None, preset.output):
        return preset
    if source == "selected" and preset.exact_selection_learner is not None:
        host = dataclasses.replace(preset.host, learner=preset.exact_selection_learner)
        return dataclasses.replace(preset, output=source, host=host)
    return dataclasses.replace(preset, output=source)


def anneal_over_budget(learner: LearnerConfig, max_seconds: float) -> LearnerConfig:
    """`learner` annealed over `ANNEALED_SHARE` of a run's time budget, unless it already anneals
    over time or over updates, or the run has no time budget."""
    if learner.anneal_seconds or learner.anneal_steps or not max_seconds:
        return learner
    return dataclasses.replace(learner, anneal_seconds=ANNEALED_SHARE * max_seconds)


def _pettingzoo() -> Preset:
    atari = _atari()
    return dataclasses.replace(atari, workers=2, envs_per_worker=2, max_seconds=3600.0,
                               league=LeagueConfig(mode=Mode.PFSP, snapshot_interval_steps=500,
                                                   anchors=(UNIFORM_ANCHOR,)))


def _pettingzoo_game(game: str) -> Preset:
    """Atari games get `_pettingzoo`; classic ones the preset of the spec their worker declares (read from one env,
    as `preset_for_spec` would from the worker's handshake), GAME_RECIPE for a name the worker refuses. MPE games
    (general-sum, outside the league) get `shared_seats` of their spec, whatever their teams."""
    try:
        spec = games.spec_of(f"pettingzoo:{game}")  # None for an Atari game: not made here
    except games.UnsupportedGame:
        return _game(board=False)  # the worker refuses the game by name, before anything is trained
    if spec is None:
        return _pettingzoo()
    return shared_seats(spec) if game.startswith("mpe/") else preset_for_spec(spec)


def shared_seats(spec: NamedEnvSpec) -> Preset:
    """A game trained outside a league, one policy learning at every seat (parameter sharing): the single-agent
    settings of its action, continuous control for a continuous head, else classic control."""
    return _continuous_control() if has_continuous_actions(spec) else _classic_control()


def _shows_pixels(tensor: TensorSpec) -> bool:
    """[H, W, C] uint8 frames (the conv torso fits) rather than [C, H, W] planes or features."""
    return len(tensor.shape) == 3 and tensor.dtype == np.uint8


class UntrainableSpec(ValueError):
    """A worker's spec no preset can train; the message names the problem and what to change."""


def step_bytes(spec: NamedEnvSpec) -> int:
    """The tensor bytes of one StepBatch for `spec` (every named tensor, reward, flags, legal masks, acting): a
    lower bound on its message size."""
    agents = spec.num_agents
    observation = sum(agents * int(np.prod(shape)) * np.dtype(dtype).itemsize
                      for shape, dtype in spec.observation.arrays().values())
    masks = sum(agents * h.num_actions for h in spec.action.discrete if h.has_legal_mask)
    return observation + 4 * agents + 2 * spec.num_envs + masks + agents


def check_trainable(spec: NamedEnvSpec, max_batch_size: int = BatcherConfig().max_batch_size,
                    max_message_bytes: int = HostConfig().max_message_bytes) -> None:
    """Raise UntrainableSpec, naming the worker's game and what to change, unless a run can train `spec`."""
    problems = []
    if spec.num_agents > max_batch_size:
        problems.append(f"it steps {spec.num_envs} envs x {spec.num_seats} seats = {spec.num_agents} agents, more than "
                        f"one forward pass holds ({max_batch_size}, --batcher.max-batch-size): start it with fewer envs")
    if step_bytes(spec) > max_message_bytes:
        problems.append(f"one step of its {spec.num_envs} envs is at least {step_bytes(spec)} bytes, more than the host "
                        f"accepts ({max_message_bytes}, --max-message-bytes): start it with fewer envs")
    if problems:
        raise UntrainableSpec(f"the worker's game {spec.env_name!r} cannot be trained: " + "; ".join(problems))


def preset_for_spec(spec: NamedEnvSpec) -> Preset:
    """The preset for a worker's spec, from what the spec says; its name is read only to ask whether an asked-for
    exact selection of the output can measure it (`mixes_networks`, as that choice asks it), never to look up
    settings.

    Two or more seats (or teams): a game, trained in the league (the host checks that every
    episode's rewards sum to zero over the seats): GAME_RECIPE (MIXTURE_RECIPE only for an asked-for exact
    selection, `for_output`), with the board torso for [C, H, W] planes; [H, W, C] uint8 frames get the two-player Atari
    settings; a protocol v2 spec of several named tensors or action heads gets GAME_RECIPE with one encoder per tensor
    (torso "auto"). One seat: the conv settings for [H, W, C] frames, the continuous-control
    ones for a spec with a continuous head, else the classic-control ones. Several seats in one team (a
    cooperative game): `shared_seats`, no league. A league game's rewards are learnt times
    `scale_for_bound(spec.return_bound)`: scaled into [-1, 1] where the worker declares a bound above PAYOFF_RANGE."""
    if spec.num_seats >= 2 and not plays_in_league(spec):
        return shared_seats(spec)
    if not flat_model(spec):
        if spec.num_seats >= 2:
            game = _game(board=False, reward_scale=scale_for_bound(spec.return_bound))
            network = dataclasses.replace(game.host.network, torso="auto")  # each tensor's encoder from its spec
            return dataclasses.replace(game, host=dataclasses.replace(game.host, network=network))
        return _continuous_control() if has_continuous_actions(spec) else _classic_control()
    tensor = spec.observation.tensors[0]  # the flat model's one observation array
    if spec.num_seats >= 2:
        if _shows_pixels(tensor):
            return _pettingzoo()
        return _game(board=len(tensor.shape) == 3, exact_selection=mixes_networks(spec.env_name),
                     reward_scale=scale_for_bound(spec.return_bound))
    return _atari() if len(tensor.shape) == 3 else _classic_control()


def preset_for(env_id: str) -> Preset:
    """The preset for an env id: Atari ids get the conv net, CartPole a target return."""
    if env_id.startswith("openspiel:"):
        return _openspiel(env_id.partition(":")[2])
    if env_id.startswith("pettingzoo:"):
        return _pettingzoo_game(env_id.partition(":")[2])
    if env_id.startswith("ALE/") or "NoFrameskip" in env_id:
        return _atari()
    spec = _gym_spec(env_id)
    if spec is not None and has_continuous_actions(spec):
        return _continuous_control()
    preset = _classic_control()
    if env_id.startswith("CartPole-v1"):
        preset = dataclasses.replace(preset, target_return=475.0, max_seconds=600.0)
    return preset
