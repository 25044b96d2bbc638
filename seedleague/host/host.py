"""The training host: wires servicer -> sessions -> batcher -> policy -> unroll store -> replay -> learner.

`Host` is the `EnvBackend` the gRPC servicer calls. The model is built from the
first worker's env spec (or from the checkpoint's spec when resuming); every
later worker must fit it. Inference and replay inserts run on the batcher
thread, learning on the learner thread; the asyncio loop only decodes, checks
and waits.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
import uuid
from typing import Any, Optional

import jax
import numpy as np

from seedleague.checkpoint import Checkpointer
from seedleague.checkpoint_meta import CheckpointMeta
from seedleague.host import inference, results
from seedleague.host.batcher import Batcher, Request
from seedleague.host.config import HostConfig
from seedleague.host.league_link import LeagueLink
from seedleague.host.learner import LearnerLoop
from seedleague.host.mixture import ServedMixture
from seedleague.host.opponents import OpponentTable
from seedleague.host.policy import InferencePolicy
from seedleague.host.replay import Replay
from seedleague.host.seating import Seating
from seedleague.host.sessions import AgentStep, Session, SessionRegistry
from seedleague.league.model_pool import ModelPool
from seedleague.league.types import LeagueAPI
from seedleague.metrics import Metrics
from seedleague.protocol.errors import FAILED_PRECONDITION, INVALID_ARGUMENT, RESOURCE_EXHAUSTED, ProtocolError
from seedleague.protocol.specs import ActionBatch, EnvSpec, StepBatch, check_step
from seedleague.rl import sharding
from seedleague.rl.learner import init_train_state, make_sharded_update
from seedleague.rl.networks import make_network
from seedleague.rl.types import Unroll

log = logging.getLogger(__name__)


def _with_averaged_params(state: Any, source: str) -> Any:
    """`state` acting with its param average (LearnerConfig.average_from), for serving; ValueError if it has none."""
    if not state.average:
        raise ValueError(f"{source} holds no param average: its learner ran without --learner.average_from")
    count = int(state.average.count)
    if count == 0:
        raise ValueError(f"{source} has no averaged params yet: its run stopped before averaging began")
    log.info("serving the param average of %s (%d updates)", source, count)
    return state._replace(params=state.average.params)


@dataclasses.dataclass
class Model:
    """What exists once the env spec is known: network, policy, replay and learner."""

    spec: EnvSpec
    network: Any
    policy: InferencePolicy
    replay: Optional[Replay]  # None when the host does not learn
    learner: Optional[LearnerLoop]
    initial_state: Any = None  # the train state a reset returns to (league exploiters)
    league: Optional[LeagueLink] = None
    mixture: Optional[ServedMixture] = None  # serving a mixture: its members take the seats, episode by episode

    def opponents(self) -> Optional[Any]:
        """Who seats each episode and holds the params of the networks in `Seating.opponents()`."""
        return self.league if self.league is not None else self.mixture

    def fits(self, spec: EnvSpec) -> Optional[str]:
        """None if `spec` can be served by this model, else what differs."""
        mine = self.spec
        for name in ("observation_shape", "observation_dtype", "num_actions"):
            if getattr(spec, name) != getattr(mine, name):
                return f"{name} is {getattr(spec, name)} but the host's model was built for {getattr(mine, name)}"
        return None


class Host:
    """The training host as an EnvBackend: sessions in, actions out, unrolls into replay."""

    def __init__(self, config: HostConfig, metrics: Metrics, resume: bool = False, league: Optional[LeagueAPI] = None):
        """`league` (any LeagueAPI: a LeagueClient, an in-process League, a fake) is needed when
        `config.league.address` is set; opponents and snapshots then come from it."""
        if config.league.enabled and league is None:
            raise ValueError(f"config.league.address is {config.league.address!r} but no league client was given")
        sharding.initialize_distributed(config.distributed)  # before anything starts a JAX backend
        self.layout = sharding.make_layout(config.devices, config.batch_size if config.learn else None)
        self.config = config
        self._league_api = league if config.league.enabled else None
        self.pool = ModelPool(config.league.pool_dir) if self._league_api is not None else None
        self.max_message_bytes = config.max_message_bytes
        self.metrics = metrics
        self.sessions = SessionRegistry(config.limits)
        self.batcher = Batcher(config.batcher, self._run_batch, self.sessions.attached_count)
        self.checkpointer = Checkpointer(config.checkpoint) if config.checkpoint.directory else None
        self.model: Optional[Model] = None
        self._model_lock = threading.Lock()
        self._restored_meta: dict = {}
        self._opponent_table = OpponentTable()  # opponents' params on the inference device, one pass for all
        self._stopping = False
        if self.checkpointer is not None and self.checkpointer.latest_step() is not None:
            if not resume:
                raise FileExistsError(
                    f"{self.checkpointer.directory} already holds checkpoints: pass --resume to continue that run, "
                    "or choose a new run directory"
                )
            self._restore()
        if config.serve_output:
            self._serve_output()
        self.batcher.start()

    # -- EnvBackend ---------------------------------------------------------------------------

    def open_session(self, spec: EnvSpec, worker_name: str) -> str:
        if spec.num_agents > self.config.batcher.max_batch_size:
            raise ProtocolError(
                RESOURCE_EXHAUSTED,
                f"worker declares {spec.num_envs} envs x {spec.num_seats} seats = {spec.num_agents} agents; one forward "
                f"pass holds at most {self.config.batcher.max_batch_size} (batcher.max_batch_size)",
            )
        if self._league_api is not None and spec.num_seats < 2:
            raise ProtocolError(FAILED_PRECONDITION, f"this host plays in a league, which needs a game with 2 or more "
                                f"seats; {spec.env_name} declares {spec.num_seats}")
        model = self._model_for(spec)
        unroll_length = self.config.unroll_length if self.config.learn else 0

        def make(sid: str) -> Session:
            seating = None
            if model.opponents() is not None:
                seating = Seating(spec.num_envs, spec.num_seats, np.random.default_rng(uuid.UUID(sid).int % 2**32),
                                  every_seat=model.mixture is not None)
            return Session(sid, spec, worker_name, unroll_length, model.network.initial_state, seating)

        session = self.sessions.open(spec, worker_name, make)
        log.info("worker %s opened session %s: %d envs x %d seats", worker_name, session.id[:8], spec.num_envs, spec.num_seats)
        return session.id

    def attach(self, session_id: str) -> None:
        self.sessions.attach(session_id)

    async def step(self, step: StepBatch) -> ActionBatch:
        session = self.sessions.get(step.session_id)
        if session.refusal:  # found while recording an earlier step (batcher thread), refused on this one
            raise ProtocolError(INVALID_ARGUMENT, session.refusal)
        check_step(session.spec, step)
        agents = session.flatten(step)
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.batcher.submit(Request(size=session.num_agents, payload=PendingStep(agents, step.sequence, future, loop)))
        return await future

    def close_session(self, session_id: str, reason: str) -> None:
        session = self.sessions.close(session_id)
        if session is not None:
            log.info("closed session %s of %s (%s)", session_id[:8], session.worker_name, reason)

    # -- model --------------------------------------------------------------------------------

    def _model_for(self, spec: EnvSpec) -> Model:
        with self._model_lock:
            if self.model is None:
                self.model = self._build_model(spec)
            problem = self.model.fits(spec)
        if problem:
            raise ProtocolError(FAILED_PRECONDITION, f"env spec does not fit the host's model: {problem}")
        return self.model

    def _build_model(self, spec: EnvSpec, state: Any = None) -> Model:
        config = self.config
        network = make_network(config.network, spec.observation_shape, spec.observation_dtype, spec.num_actions)
        initial = init_train_state(config.learner, network, jax.random.key(config.seed))  # what a reset returns to
        if state is None:
            state = jax.tree.map(jax.numpy.copy, initial)  # its own buffers: updates donate the state
        version = int(state.step)
        layout = self.layout
        if config.learn:  # replicated over the learner devices (of every process: process 0's values)
            state = sharding.place_state(state, layout)
        params = sharding.copy_to_device(state.params, layout.inference_device)
        policy = InferencePolicy(network, params, version, seed=config.seed + 1, greedy=config.greedy,
                                 device=layout.inference_device, explore=config.explore)
        replay = learner = None
        if config.learn:
            replay = Replay(config.replay, _example_unroll(spec, config.unroll_length, network), config.batch_size,
                            config.seed, batch_sharding=layout.batch_sharding)
            learner = LearnerLoop(
                make_sharded_update(config.learner, network, layout.mesh), state, replay, policy, self.metrics,
                self.checkpointer, config.checkpoint.interval_s, self._checkpoint_meta, layout, self._trained_seconds,
            )
        self.model = Model(spec, network, policy, replay, learner, initial)
        if learner is not None:
            learner.start()
        if learner is not None and self._league_api is not None:
            self.model.league = self._start_league_link()
        log.info("built model for %s: obs %s %s, %d actions; %s", spec.env_name, spec.observation_shape,
                 spec.observation_dtype, spec.num_actions, layout.describe())
        return self.model

    def _start_league_link(self) -> LeagueLink:
        config = self.config.league
        link = LeagueLink(
            config, self._league_api, self._load_opponent, self._save_snapshot, self._reset_learner,
            lambda: self.model.learner.step, seed=self.config.seed,
        )
        link.start()
        log.info("playing in the league at %s as %s (%s)", config.address, config.player, config.role.value)
        return link

    def _load_opponent(self, key: str) -> Any:
        state, meta = self.pool.restore(key, self.model.initial_state)
        problem = self.model.fits(CheckpointMeta.from_json(meta, source=f"snapshot {key}").spec)
        if problem:
            raise ValueError(f"snapshot {key} does not fit this host's model: {problem}")
        return jax.device_put(state.params, self.layout.inference_device)

    def _save_snapshot(self) -> tuple[int, str]:
        """Freeze the learner into the model pool (on the learner thread); returns (step, path)."""
        saved = {}

        def save(state: Any) -> None:
            saved["step"] = int(state.step)
            self.pool.save(self.config.league.player, sharding.portable(state), self._checkpoint_meta())

        self.model.learner.call(save)
        return saved["step"], self.pool.player_dir(self.config.league.player)

    def _reset_learner(self) -> None:
        """Back to the initial params, optimiser state, magnet and param average; the step count goes on."""
        initial = self.model.initial_state  # copied: the next update donates the state it is given
        fields = ("params", "opt_state", "magnet", "average")
        fresh = lambda: jax.tree.map(jax.numpy.copy, tuple(getattr(initial, f) for f in fields))
        self.model.learner.call(lambda state: state._replace(**dict(zip(fields, fresh()))))

    def _trained_seconds(self) -> float:
        """Wall-clock seconds of this run so far, earlier sessions (--resume) included."""
        return self._restored_meta.get("wall_s", 0.0) + time.perf_counter() - self.metrics.start_time

    def _checkpoint_meta(self) -> dict:
        m = self.metrics
        return CheckpointMeta(self.model.spec, self.config.network, self.config.learner, env_steps=m.env_steps,
                              agent_steps=m.agent_steps, episodes=m.episodes, wall_s=self._trained_seconds(),
                              returns=tuple(m.returns)).to_json()

    def _restore(self) -> None:
        step = self.config.checkpoint.restore_step
        saved = CheckpointMeta.from_json(self.checkpointer.restore_meta(step), source=self.checkpointer.directory)
        spec = saved.spec
        for name in ("network", "learner"):
            config = getattr(saved, name)
            if config is not None and config != getattr(self.config, name):  # the saved state has that structure
                log.warning("using the checkpoint's %s config %s, not %s", name, config, getattr(self.config, name))
                self.config = dataclasses.replace(self.config, **{name: config})
        network = make_network(self.config.network, spec.observation_shape, spec.observation_dtype, spec.num_actions)
        template = init_train_state(self.config.learner, network, jax.random.key(0))
        step = self.checkpointer.latest_step() if step is None else step
        state, meta = self.checkpointer.restore(step, template)
        if self.config.serve_param_average:
            state = _with_averaged_params(state, f"{self.checkpointer.directory}/{step}")
        if self.config.learn:  # a resumed run continues its counters; a serving host counts only what it serves
            self._restored_meta = meta
            self.metrics.env_steps = meta["env_steps"]
            self.metrics.agent_steps = meta["agent_steps"]
            self.metrics.episodes = meta["episodes"]
            self.metrics.returns.extend(meta.get("returns", []))
        self._build_model(spec, state)
        log.info("resumed from %s at learner step %d, %d env steps", self.checkpointer.directory, int(state.step), meta["env_steps"])

    def _serve_output(self) -> None:
        """Build the model from the run's output (seedleague.output) and serve its members as a mixture."""
        from seedleague import output

        resolved = output.resolve(self.config.serve_output)
        trained = resolved.load(self.config.seed)
        members = trained.members if resolved.kind == "mixture" else [trained]
        first = members[0]
        self.config = dataclasses.replace(self.config, network=first.network_config)
        spec = EnvSpec(first.spec.env_name, first.spec.observation_shape, first.spec.observation_dtype,
                       first.spec.num_actions, 1)
        network = make_network(self.config.network, spec.observation_shape, spec.observation_dtype, spec.num_actions)
        state = init_train_state(self.config.learner, network, jax.random.key(0))
        self._build_model(spec, state._replace(params=first.params, step=jax.numpy.asarray(resolved.step, jax.numpy.int32)))
        device = self.layout.inference_device
        self.model.mixture = ServedMixture([m.key for m in resolved.members], [m.weight for m in resolved.members],
                                           [jax.device_put(m.params, device) for m in members],
                                           np.random.default_rng(self.config.seed))
        log.info("serving the output of %s: %s", self.config.serve_output, resolved.describe())

    # -- inference (batcher thread) -----------------------------------------------------------

    def _run_batch(self, requests: list[Request]) -> None:
        try:
            self._infer_and_record(requests)
        except BaseException as error:
            log.exception("inference failed for a batch of %d requests", len(requests))
            for request in requests:
                request.payload.answer(None, error)

    def _infer_and_record(self, requests: list[Request]) -> None:
        model = self.model
        agents: list[AgentStep] = [r.payload.agents for r in requests]
        for step in agents:
            self._end_and_seat(step)
        num_actions = model.spec.num_actions
        observation = np.concatenate([a.observation for a in agents])
        first = np.concatenate([a.first for a in agents])
        legal = np.concatenate([_legal(a, num_actions) for a in agents])
        core = jax.tree.map(lambda *xs: np.concatenate(xs), *[a.session.core_state for a in agents])
        opponents = None if model.opponents() is None else np.concatenate([a.opponents for a in agents])
        start = time.perf_counter()
        out = inference.forward(model.policy, self._opponent_table, self.config.batcher.bucket, observation, first,
                                core, legal, opponents, None if opponents is None else model.opponents().opponent_params)
        self.metrics.record(inference_batch=len(first), inference_ms=1000 * (time.perf_counter() - start))
        offset = 0
        for request, step in zip(requests, agents):
            rows = slice(offset, offset + request.size)
            offset += request.size
            self._record(step, out.action[rows], out.logits[rows], jax.tree.map(lambda x: x[rows], out.core_state), out.policy_version)
            action = out.action[rows].reshape(step.session.spec.num_envs, step.session.spec.num_seats)
            request.payload.answer(ActionBatch(request.payload.sequence, action, out.policy_version), None)

    def _end_and_seat(self, step: AgentStep) -> None:
        """Close the episodes this step ends (metrics, league results) and seat the ones it starts."""
        session = step.session
        ended, returns, lengths = session.finished_episodes(step)
        seating = session.seating
        step.learning_before = np.ones(len(ended), bool) if seating is None else seating.learning()
        league = self.model.league
        counted = ended & step.learning_before if league is not None else ended  # serving counts every seat
        self.metrics.record_episodes(returns[counted], lengths[counted])
        if seating is None:
            step.learning = step.learning_before
            return
        seats = session.spec.num_seats
        if league is not None:
            envs = np.flatnonzero(ended[::seats])
            if session.refusal is None and (problem := results.not_zero_sum(session.spec, envs, returns)):
                session.refusal = problem
                log.error("refusing worker %s: %s", session.worker_name, problem)
            outcomes = results.report(self.model.league, self.config.league.player, self.model.policy.version,
                                      seating, envs, returns)
            self.metrics.record_games(len(envs), outcomes)
        started_envs = np.flatnonzero(step.first[::seats])
        seating.start(started_envs, self.model.opponents().draw(len(started_envs)))
        step.learning = seating.learning()
        step.opponents = seating.opponents()

    def _record(self, step: AgentStep, action, logits, new_core, version: int) -> None:
        session = step.session
        before = session.core_state
        # Acting rows carry the new state; a row whose episode starts while it waits (turn-based) starts afresh.
        session.core_state = jax.tree.map(
            lambda new, old, initial: np.where(_rows(step.acting, new), new, np.where(_rows(step.first, old), initial, old)),
            new_core, before, session.initial_core,
        )
        self.metrics.record_steps(session.spec.num_envs, int(step.acting.sum()))
        if session.unrolls is None:
            return
        # Only the learner's rows go to replay: rewards and ends of its finished episodes, actions of its current ones.
        ends = step.learning_before
        complete = session.unrolls.add(
            acting=step.acting & step.learning, reward=np.where(ends, step.reward, 0.0).astype(np.float32),
            terminated=step.terminated & ends, truncated=step.truncated & ends,
            observation=step.observation, first=step.first, action=action, logits=logits,
            legal_mask=step.legal_mask, policy_version=version, core_state=before,
        )
        if complete is not None and not session.closed:
            self._insert(complete)

    def _insert(self, rows: Unroll) -> None:
        replay = self.model.replay
        start = time.perf_counter()
        done, count = 0, len(rows.first)
        while done < count and not self._stopping:
            done += replay.insert(jax.tree.map(lambda x: x[done:], rows), timeout=1.0)
        self.metrics.record(replay_size=replay.size, insert_wait_ms=1000 * (time.perf_counter() - start))

    # -- lifecycle ----------------------------------------------------------------------------

    def stop_serving(self) -> None:
        """Release inference from back-pressure waits; call before the server's event loop closes."""
        self._stopping = True
        if self.model is not None and self.model.replay is not None:
            self.model.replay.close()
        self.batcher.stop()

    def stop(self) -> None:
        """Stop inference and learning; the learner writes a final checkpoint."""
        self._stopping = True
        if self.model is not None and self.model.league is not None:
            self.model.league.stop()
        if self.model is not None and self.model.learner is not None:
            self.model.learner.stop()
        self.batcher.stop()
        if self.checkpointer is not None:
            self.checkpointer.close()
        if self.pool is not None:
            self.pool.close()


@dataclasses.dataclass
class PendingStep:
    """A worker step waiting in the batcher (a Request's payload): its agents, and the stream to answer."""

    agents: AgentStep
    sequence: int
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop

    def answer(self, value: Any, error: Optional[BaseException]) -> None:
        """Hand the result to the stream waiting on its event loop (called from the batcher thread)."""
        try:
            self.loop.call_soon_threadsafe(_resolve, self.future, value, error)
        except RuntimeError:  # the loop is closed: the server is gone, and so is the stream that asked
            pass


def _resolve(future: asyncio.Future, value: Any, error: Optional[BaseException]) -> None:
    if future.done():  # the stream was cancelled while its request was in flight
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


def _rows(mask: np.ndarray, like: np.ndarray) -> np.ndarray:
    """[N] mask shaped to broadcast over [N, ...] `like`."""
    return mask.reshape((-1,) + (1,) * (like.ndim - 1))


def _legal(step: AgentStep, num_actions: int) -> np.ndarray:
    return step.legal_mask if step.legal_mask is not None else np.ones((len(step.first), num_actions), bool)


def _example_unroll(spec: EnvSpec, unroll_length: int, network: Any) -> Unroll:
    rows = (1, unroll_length + 1)
    return Unroll(
        observation=np.zeros(rows + spec.observation_shape, spec.observation_dtype),
        first=np.zeros(rows, bool),
        action=np.zeros(rows, np.int32),
        behaviour_logits=np.zeros(rows + (spec.num_actions,), np.float32),
        legal_mask=np.ones(rows + (spec.num_actions,), bool),
        reward=np.zeros(rows, np.float32),
        terminated=np.zeros(rows, bool),
        truncated=np.zeros(rows, bool),
        policy_version=np.zeros(rows, np.int32),
        core_state=network.initial_state(1),
    )
