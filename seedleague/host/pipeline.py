"""The per-spec pipeline: what the host builds once it knows the env spec.

A `Pipeline` holds the network, the inference policy, the replay and the learner loop (its
thread), and, in a league run, the league link (its thread); when serving a mixture, the
served mixture; when training a best response to a run's output, that output (an ExploitTarget). `build_pipeline` makes one from a spec and an initial train state; the host
owns when (first worker, resume, serving an output) and keeps the single instance.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Optional

import jax
import numpy as np

from seedleague.artifacts import networks
from seedleague.checkpoint import Checkpointer
from seedleague.checkpoint_meta import CheckpointMeta
from seedleague.host.anchors import AnchorLoader
from seedleague.host.config import HostConfig
from seedleague.host.data_reuse import DataReuse, passes_for
from seedleague.host.exploit import ExploitTarget
from seedleague.host.league_link import LeagueLink
from seedleague.host.learner_loop import LearnerLoop
from seedleague.host.mixture import ServedMixture
from seedleague.host.population import PopulationGames
from seedleague.host.policy import InferencePolicy
from seedleague.host.replay import Replay
from seedleague.league.model_pool import ModelPool
from seedleague.league.types import LeagueAPI, parse_key
from seedleague.metrics import Metrics
from seedleague.protocol.named import NamedEnvSpec, flat_model
from seedleague.host.unroll_store import named_rows
from seedleague.rl import sharding
from seedleague.rl.kl_step import KLStep
from seedleague.rl.learner import init_train_state, make_sharded_update
from seedleague.rl.types import Unroll

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Pipeline:
    """Network, policy, replay and learner built for one env spec (and the league link or served mixture)."""

    spec: NamedEnvSpec  # the model's: flat or named (seedleague.protocol.named.flat_model)
    network: Any
    policy: InferencePolicy
    replay: Optional[Replay]  # None when the host does not learn
    learner: Optional[LearnerLoop]
    initial_state: Any = None  # the train state a reset returns to (league exploiters)
    league: Optional[LeagueLink] = None
    mixture: Optional[ServedMixture] = None  # serving a mixture: its members take the seats, episode by episode
    target: Optional[ExploitTarget] = None  # training a best response: the output's members take the other seats
    population: Optional[PopulationGames] = None  # evaluation games among snapshots: `mixture` seats them, this scores

    def opponents(self) -> Optional[Any]:
        """Who seats each episode and holds the params of the networks in `Seating.opponents()`."""
        for source in (self.league, self.mixture, self.target):
            if source is not None:
                return source
        return None

    def fits(self, spec: NamedEnvSpec) -> Optional[str]:
        """None if `spec` can be served by this pipeline, else what differs."""
        return spec_difference(spec, self.spec)

    def stop(self) -> None:
        """Stop the league link, then the learner (which writes a final checkpoint)."""
        if self.league is not None:
            self.league.stop()
        if self.learner is not None:
            self.learner.stop()


def spec_difference(spec: NamedEnvSpec, mine: NamedEnvSpec) -> Optional[str]:
    """None if a model built for `mine` can act on `spec`, else what differs. The flat model reads one array and
    answers one categorical: the names of its tensor and head, and whether a worker sends legal masks, do not
    matter to it (a protocol-1 checkpoint records none of them)."""
    if flat_model(spec) != flat_model(mine):
        kind = lambda s: "the flat model" if flat_model(s) else "the named network"
        return f"the worker's spec runs on {kind(spec)}, the host's model is {kind(mine)}"
    if flat_model(spec):
        for name, theirs, ours in _flat_fields(spec, mine):
            if theirs != ours:
                return f"{name} is {theirs} but the host's model was built for {ours}"
        return None
    if spec.observation != mine.observation:
        return f"observation is {spec.observation} but the host's model was built for {mine.observation}"
    if spec.action != mine.action:
        return f"action is {spec.action} but the host's model was built for {mine.action}"
    return None


def _flat_fields(spec: NamedEnvSpec, mine: NamedEnvSpec):
    """(name, spec's, mine's) of what the flat model is built from, named as its PolicySpec names them."""
    (tensor, head), (my_tensor, my_head) = ((s.observation.tensors[0], s.action.heads[0]) for s in (spec, mine))
    return (("observation_shape", tensor.shape, my_tensor.shape), ("observation_dtype", tensor.dtype, my_tensor.dtype),
            ("num_actions", head.num_actions, my_head.num_actions))


@dataclasses.dataclass
class Services:
    """What a pipeline is wired to: the run's metrics and checkpoints, the league, and the run's clock."""

    metrics: Metrics
    checkpointer: Optional[Checkpointer]
    checkpoint_meta: Callable[[], dict]
    trained_seconds: Callable[[], float]
    league_api: Optional[LeagueAPI] = None
    pool: Optional[ModelPool] = None
    target: Optional[ExploitTarget] = None  # the frozen output a best response trains against


def build_network(config: HostConfig, spec: NamedEnvSpec) -> Any:
    """The network the host trains for `spec` (seedleague.artifacts.networks.build)."""
    return networks.build(config.network, spec)


def build_pipeline(config: HostConfig, layout: sharding.DeviceLayout, spec: NamedEnvSpec, services: Services,
                   state: Any = None) -> Pipeline:
    """The pipeline for `spec`, starting from `state` (a fresh initialisation when None); its threads run."""
    network = build_network(config, spec)
    initial = init_train_state(config.learner, network, jax.random.key(config.seed))  # what a reset returns to
    if state is None:
        state = jax.tree.map(jax.numpy.copy, initial)  # its own buffers: updates donate the state
    version = int(state.step)
    if config.learn:  # replicated over the learner devices (of every process: process 0's values)
        state = sharding.place_state(state, layout)
    params = sharding.copy_to_device(state.params, layout.inference_device)
    policy = InferencePolicy(network, params, version, seed=config.seed + 1, greedy=config.greedy,
                             device=layout.inference_device, explore=config.explore)
    replay = learner = None
    if config.learn:
        replay = Replay(config.replay, _example_unroll(spec, config.unroll_length, network), config.batch_size,
                        config.seed, batch_sharding=layout.batch_sharding)
        passes = passes_for(config.replay, config.learner, layout.local_learner_devices[0].platform)
        if passes > 1:
            log.info("while no fresh batch is ready the learner trains the newest one again, up to %d updates a "
                     "batch (--replay.reuse-when-idle off: never)", passes)
        learner = LearnerLoop(
            make_sharded_update(config.learner, network, layout.mesh), state, replay, policy, services.metrics,
            services.checkpointer, config.checkpoint.interval_s, services.checkpoint_meta, layout,
            services.trained_seconds,
            DataReuse(passes),
            KLStep(config.learner.learning_rate, config.learner.kl_target) if config.learner.step_control == "kl"
            else None,
        )
    pipeline = Pipeline(spec, network, policy, replay, learner, initial, target=services.target)
    if learner is not None:
        learner.start()
    if learner is not None and services.league_api is not None:
        pipeline.league = _start_league_link(config, pipeline, services)
    log.info("built %s for %s: observation %s, action %s; %s", "the flat model" if flat_model(spec) else
             "the named network", spec.env_name, spec.observation, spec.action, layout.describe())
    return pipeline


def _start_league_link(config: HostConfig, pipeline: Pipeline, services: Services) -> LeagueLink:
    league = config.league
    pool = services.pool
    anchors = AnchorLoader(services.league_api, pipeline.initial_state.params, pipeline.fits, pipeline.policy.device)

    def load_opponent(key: str) -> Any:
        if parse_key(key)[1] is None:  # an anchor: its key is its bare name (seedleague.host.anchors)
            return anchors(key)
        state, meta = pool.restore(key, pipeline.initial_state)
        problem = pipeline.fits(CheckpointMeta.from_json(meta, source=f"snapshot {key}").spec)
        if problem:
            raise ValueError(f"snapshot {key} does not fit this host's model: {problem}")
        return jax.device_put(state.params, pipeline.policy.device)

    def save_snapshot() -> tuple[int, str]:
        """Freeze the learner into the model pool (on the learner thread); returns (step, path)."""
        saved = {}

        def save(state: Any) -> None:
            saved["step"] = int(state.step)
            pool.save(league.player, sharding.portable(state), services.checkpoint_meta())

        pipeline.learner.call(save)
        return saved["step"], pool.player_dir(league.player)

    def reset_learner() -> None:
        """Back to the initial params, optimiser state, magnet and param average; the step count goes on."""
        initial = pipeline.initial_state  # copied: the next update donates the state it is given
        fields = ("params", "opt_state", "magnet", "average")
        fresh = lambda: jax.tree.map(jax.numpy.copy, tuple(getattr(initial, f) for f in fields))
        pipeline.learner.call(lambda state: state._replace(**dict(zip(fields, fresh()))))

    link = LeagueLink(league, services.league_api, load_opponent, save_snapshot, reset_learner,
                      lambda: pipeline.learner.step, seed=config.seed)
    link.start()
    log.info("playing in the league at %s as %s (%s)", league.address, league.player, league.role.value)
    return link


def _example_unroll(spec: NamedEnvSpec, unroll_length: int, network: Any) -> Any:
    if not flat_model(spec):
        return named_rows(1, unroll_length, spec.observation, network.heads, network.initial_state(1))
    rows = (1, unroll_length + 1)
    tensor, head = spec.observation.tensors[0], spec.action.heads[0]
    return Unroll(
        observation=np.zeros(rows + tensor.shape, tensor.dtype),
        first=np.zeros(rows, bool),
        action=np.zeros(rows, np.int32),
        behaviour_logits=np.zeros(rows + (head.num_actions,), np.float32),
        legal_mask=np.ones(rows + (head.num_actions,), bool),
        reward=np.zeros(rows, np.float32),
        terminated=np.zeros(rows, bool),
        truncated=np.zeros(rows, bool),
        policy_version=np.zeros(rows, np.int32),
        core_state=network.initial_state(1),
    )
