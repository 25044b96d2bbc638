"""The training host: wires servicer -> sessions -> batcher -> policy -> unroll store -> replay -> learner.

`Host` is the `EnvBackend` the gRPC servicer calls. Its pipeline (seedleague.host.pipeline)
is built from the first worker's env spec, or from a checkpoint or a run's output
(seedleague.host.restore); every later worker must fit it. Inference and replay
inserts run on the batcher thread, learning on the learner thread; the asyncio loop
only decodes, checks and waits.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from typing import Any, Optional

import jax
import numpy as np

from seedleague.checkpoint import Checkpointer
from seedleague.checkpoint_meta import CheckpointMeta, record_protocol_of
from seedleague.host import episodes, inference, restore, named
from seedleague.host.batcher import Batcher, Request
from seedleague.host.config import HostConfig
from seedleague.host.opponents import OpponentTable
from seedleague.host.pending import PendingStep, answer_all
from seedleague.host.pbt_member import PbtMember
from seedleague.host.pipeline import Pipeline, Services, build_pipeline, spec_difference
from seedleague.host.seating import Seating
from seedleague.host.sessions import AgentStep, Session, SessionRegistry
from seedleague.league.model_pool import ModelPool
from seedleague.league.types import LeagueAPI
from seedleague.metrics import Metrics
from seedleague.protocol.errors import FAILED_PRECONDITION, INVALID_ARGUMENT, RESOURCE_EXHAUSTED, ProtocolError
from seedleague.protocol.named import NamedActionBatch, NamedEnvSpec, NamedStepBatch, check_named_step, flat_model
from seedleague.rl import sharding
from seedleague.rl.types import Unroll

log = logging.getLogger(__name__)


class Host:
    """The training host as an EnvBackend: sessions in, actions out, unrolls into replay."""

    def __init__(self, config: HostConfig, metrics: Metrics, resume: bool = False, league: Optional[LeagueAPI] = None,
                 start_if_none: bool = False):
        """`league` (any LeagueAPI: a LeagueClient, an in-process League, a fake) is needed when
        `config.league.address` is set; opponents and snapshots then come from it. `resume` continues the
        checkpoint directory's run and refuses (ValueError) one with no checkpoint, unless `start_if_none`."""
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
        self.checkpointer = Checkpointer(config.checkpoint, writer=config.learn) if config.checkpoint.directory else None
        self.pipeline: Optional[Pipeline] = None
        self._pipeline_lock = threading.Lock()
        self._restored_meta: dict = {}
        self._opponent_table = OpponentTable()  # opponents' params on the inference device, one pass for all
        self._stopping = False
        self.resumed_note = ""  # damaged checkpoints a resume passed over (restore.Restored.note)
        self._target = None  # training a best response: the frozen output it plays against
        if config.exploit_output:
            self.config, self._target = restore.exploit_target(config, self.layout.inference_device)
        if self.checkpointer is not None and self.checkpointer.latest_step() is not None:
            if not resume:
                raise FileExistsError(
                    f"{self.checkpointer.directory} already holds checkpoints: pass --resume to continue that run, "
                    "or choose a new run directory"
                )
            self._resume()
        elif resume and not start_if_none and not config.serve_output:
            where = self.checkpointer.directory if self.checkpointer is not None else "the run directory"
            raise ValueError(f"--resume: {where} holds no checkpoint to continue from; pass --resume-or-start to "
                             "start a new run there when it has none, or give another --run-dir")
        if config.serve_output and config.population_size:
            restored, games = restore.population(config, self.layout.inference_device, self.config.batcher.bucket)
            self.config = restored.config
            pipeline = self._build_pipeline(restored.spec, restored.state)
            pipeline.mixture, pipeline.population = games.mixture, games
        elif config.serve_output:
            restored, mixture = restore.from_output(config, self.layout.inference_device)
            self.config = restored.config
            self._build_pipeline(restored.spec, restored.state).mixture = mixture
        self.batcher.start()

    # -- EnvBackend ---------------------------------------------------------------------------

    def open_session(self, spec: NamedEnvSpec, worker_name: str) -> str:
        """A spec of one tensor and one discrete head (every v1 worker's) runs on the flat model, the others on
        the named network (seedleague.protocol.named.flat_model); the pipeline and the session keep the worker's
        spec, whose teams seat league games."""
        if spec.num_agents > self.config.batcher.max_batch_size:
            raise ProtocolError(
                RESOURCE_EXHAUSTED,
                f"worker declares {spec.num_envs} envs x {spec.num_seats} seats = {spec.num_agents} agents; one forward "
                f"pass holds at most {self.config.batcher.max_batch_size} (batcher.max_batch_size)",
            )
        if not flat_model(spec) and self.config.explore:
            raise ProtocolError(FAILED_PRECONDITION, f"{spec.env_name} needs the named network (several tensors "
                                "or heads), which has no exploration mixture: start the host with --explore 0")
        if self._league_api is not None and spec.num_seats < 2:
            raise ProtocolError(FAILED_PRECONDITION, f"this host plays in a league, which needs a game with 2 or more "
                                f"seats; {spec.env_name} declares {spec.num_seats}")
        if self._target is not None:
            problem = "it declares 1 seat" if spec.num_seats < 2 else spec_difference(spec, self._target.spec)
            if problem:
                raise ProtocolError(FAILED_PRECONDITION, f"this host trains a best response to the output of "
                                    f"{self.config.exploit_output}, and {spec.env_name}'s spec does not fit it: "
                                    f"{problem}; start the workers of the game that run trained on")
        pipeline = self._pipeline_for(spec)
        seat_weights = pipeline.mixture.seat_weights if pipeline.mixture is not None else None
        if seat_weights is not None and len(seat_weights) != spec.num_seats:
            raise ProtocolError(FAILED_PRECONDITION, f"the served output mixes its networks per seat for {len(seat_weights)} "
                                f"seats; {spec.env_name} declares {spec.num_seats}: serve it to the game it was trained on")
        unroll_length = self.config.unroll_length if self.config.learn else 0

        def make(sid: str) -> Session:
            seating = None
            if pipeline.opponents() is not None:
                seating = Seating(spec.num_envs, spec.num_seats, np.random.default_rng(uuid.UUID(sid).int % 2**32),
                                  every_seat=pipeline.mixture is not None, teams=spec.seat_team,
                                  train_on_matches=self.config.league.train_on_matches)
            return Session(sid, spec, worker_name, unroll_length, pipeline.network.initial_state, seating,
                           heads=getattr(pipeline.network, "heads", None))

        session = self.sessions.open(spec, worker_name, make)
        log.info("worker %s opened session %s: %d envs x %d seats", worker_name, session.id[:8], spec.num_envs, spec.num_seats)
        return session.id

    def attach(self, session_id: str) -> None:
        self.sessions.attach(session_id)

    async def step(self, step: NamedStepBatch) -> NamedActionBatch:
        session = self.sessions.get(step.session_id)
        if session.refusal:  # found while recording an earlier step (batcher thread), refused on this one
            raise ProtocolError(INVALID_ARGUMENT, session.refusal)
        check_named_step(session.spec, step)  # nothing of a refused step goes further
        named.record_episode_stats(self.metrics, step)
        agents = session.flatten(step)
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.batcher.submit(Request(size=session.num_agents, payload=PendingStep(agents, step.sequence, future, loop)))
        return await future

    def close_session(self, session_id: str, reason: str) -> None:
        session = self.sessions.close(session_id)
        if session is not None:
            log.info("closed session %s of %s (%s)", session_id[:8], session.worker_name, reason)

    # -- pipeline -----------------------------------------------------------------------------

    def _pipeline_for(self, spec: NamedEnvSpec) -> Pipeline:
        with self._pipeline_lock:
            if self.pipeline is None:
                self._build_pipeline(spec)
            problem = self.pipeline.fits(spec)
        if problem:
            raise ProtocolError(FAILED_PRECONDITION, f"env spec does not fit the host's model: {problem}")
        return self.pipeline

    def _build_pipeline(self, spec: NamedEnvSpec, state: Any = None) -> Pipeline:
        services = Services(self.metrics, self.checkpointer, self._checkpoint_meta, self._trained_seconds,
                            self._league_api, self.pool, self._target)
        self.pipeline = build_pipeline(self.config, self.layout, spec, services, state)
        if self.pipeline.league is not None:  # a member of population-based training applies the league's answers
            self.pipeline.league.pbt_handler = PbtMember(self.pipeline.learner, self.pool, self.pipeline.initial_state)
        return self.pipeline

    def _resume(self) -> None:
        """Build the pipeline from the run directory's checkpoint (resuming or serving it)."""
        restored = restore.from_checkpoint(self.config, self.checkpointer)
        self.config, self.resumed_note = restored.config, restored.note
        if self.config.learn:  # a resumed run continues its counters; a serving host counts only what it serves
            meta = self._restored_meta = restored.meta
            self.metrics.env_steps = meta["env_steps"]
            self.metrics.agent_steps = meta["agent_steps"]
            self.metrics.episodes = meta["episodes"]
            self.metrics.returns.extend(meta.get("returns", []))
        self._build_pipeline(restored.spec, restored.state)

    def _trained_seconds(self) -> float:
        """Wall-clock seconds of this run so far, earlier sessions (--resume) included."""
        return self._restored_meta.get("wall_s", 0.0) + time.perf_counter() - self.metrics.start_time

    def _checkpoint_meta(self) -> dict:
        m = self.metrics
        spec = self.pipeline.spec
        return CheckpointMeta(spec, self.config.network, self.config.learner, env_steps=m.env_steps,
                              agent_steps=m.agent_steps, episodes=m.episodes, wall_s=self._trained_seconds(),
                              returns=tuple(m.returns), record_protocol=record_protocol_of(spec)).to_json()

    # -- inference (batcher thread) -----------------------------------------------------------

    def _run_batch(self, requests: list[Request]) -> None:
        try:
            self._infer_and_record(requests)
        except BaseException as error:
            log.exception("inference failed for a batch of %d requests", len(requests))
            answer_all([(request.payload, None, error) for request in requests])

    def _infer_and_record(self, requests: list[Request]) -> None:
        pipeline = self.pipeline
        if self._read_out_due():
            self._begin_read_out()
        agents: list[AgentStep] = [r.payload.agents for r in requests]
        for step in agents:
            episodes.end_and_seat(step, self.pipeline, self.config.league.player, self.metrics)
        if not flat_model(pipeline.spec):
            observation, legal = named.batch_inputs(pipeline.spec, agents)
        else:
            observation = np.concatenate([a.observation for a in agents])
            legal = np.concatenate([a.session.every_action if a.legal_mask is None else a.legal_mask for a in agents])
        first = np.concatenate([a.first for a in agents])
        core = agents[0].session.core_state  # () for a feed-forward network: nothing to join
        if agents[0].session.has_core_state:
            core = jax.tree.map(lambda *xs: np.concatenate(xs), *[a.session.core_state for a in agents])
        opponents = None if pipeline.opponents() is None else np.concatenate([a.opponents for a in agents])
        start = time.perf_counter()
        if pipeline.population is not None:  # evaluation games: one pass of every member acts and scores each action
            out = pipeline.population.act(agents, observation, legal, opponents, pipeline.policy)
        else:
            out = inference.forward(pipeline.policy, self._opponent_table, self.config.batcher.bucket, observation,
                                    first, core, legal, opponents,
                                    None if opponents is None else pipeline.opponents().opponent_params)
        self.metrics.record(inference_batch=len(first), inference_ms=1000 * (time.perf_counter() - start))
        offset, answers = 0, []
        for request, step in zip(requests, agents):
            rows = slice(offset, offset + request.size)
            offset += request.size
            self._record(step, _take(out.action, rows), _take(out.logits, rows), _take(out.core_state, rows),
                         out.policy_version)
            action = named.split_actions(out.action, rows, step.session.spec)
            answers.append((request.payload, NamedActionBatch(request.payload.sequence, action, out.policy_version),
                            None))
        answer_all(answers)  # one wake-up of the event loop for the whole batch, not one per request

    def _read_out_due(self) -> bool:
        if self._target is None or self._target.read_out_at is not None:
            return False
        if self.config.exploit_read_out_updates:
            return self.pipeline.learner.step >= self.config.exploit_read_out_updates
        return 0 < self.config.exploit_read_out_s <= self._trained_seconds()

    def finished(self) -> Optional[str]:
        """Why this host's work is done before any budget, or None: a best response is done once its read-out has
        lasted exploit_read_out_length_s and holds an estimate (MIN_TEAM_GAMES of every team: on a loaded machine
        or a slow game a read-out of its length can end with fewer, and then it lasts on, up to the run's budget)."""
        length = self.config.exploit_read_out_length_s
        target = self._target
        if length and target is not None and target.read_out_seconds() >= length and target.read_out_estimate():
            begun = (f"after {self.config.exploit_read_out_updates} learner updates"
                     if self.config.exploit_read_out_updates else f"from {self.config.exploit_read_out_s:g} s")
            return f"the best response's read-out lasted {length:g} s, {begun}"
        return None

    def _begin_read_out(self) -> None:
        """A best response's read-out (HostConfig.exploit_read_out_s): the learner stops and writes its checkpoint,
        whose params the learner's rows play from now on, greedily; no more unrolls are kept."""
        self._target.begin_read_out()
        self.pipeline.learner.stop()
        self.pipeline.policy.read_out()
        log.info("best response: learner stopped at update %d after %.0f s; its greedy play is measured from now on",
                 self.pipeline.learner.step, self._trained_seconds())

    def _record(self, step: AgentStep, action, logits, new_core, version: int) -> None:
        session = step.session
        before = session.core_state
        if session.has_core_state:
            # Acting rows carry the new state; a row whose episode starts while it waits (turn-based) starts afresh.
            session.core_state = jax.tree.map(
                lambda new, old, initial: np.where(_rows(step.acting, new), new, np.where(_rows(step.first, old), initial, old)),
                new_core, before, session.initial_core,
            )
        self.metrics.record_steps(session.spec.num_envs, int(step.acting.sum()))
        if session.unrolls is None or (self._target is not None and self._target.read_out_at is not None):
            return
        # Only the learner's rows go to replay: rewards and ends of its finished episodes, actions of its current ones.
        ends = step.learning_before
        reward = np.where(ends, step.reward, 0.0).astype(np.float32)
        terminated, truncated = step.terminated & ends, step.truncated & ends
        if step.final_observation is not None:  # protocol v2: bootstrap truncated episodes from their final state
            reward, terminated, truncated = named.bootstrap(
                step, reward, terminated, truncated, ends, before, self.pipeline.policy.values,
                self.config.batcher.bucket, self.config.learner.discount)
        complete = session.unrolls.add(
            acting=step.acting & step.learning, reward=reward, terminated=terminated, truncated=truncated,
            observation=step.observation, first=step.first, action=action, logits=logits,
            legal_mask=step.legal_mask, policy_version=version, core_state=before,
        )
        if complete is not None and not session.closed:
            self._insert(complete)

    def _insert(self, rows: Unroll) -> None:
        replay = self.pipeline.replay
        start = time.perf_counter()
        replay.insert_all(rows, lambda: self._stopping)
        self.metrics.record(replay_size=replay.size, insert_wait_ms=1000 * (time.perf_counter() - start))

    # -- lifecycle ----------------------------------------------------------------------------

    def stop_serving(self) -> None:
        """Release inference from back-pressure waits; call before the server's event loop closes."""
        self._stopping = True
        if self.pipeline is not None and self.pipeline.replay is not None:
            self.pipeline.replay.close()
        self.batcher.stop()

    def stop(self) -> None:
        """Stop inference and learning; the learner writes a final checkpoint."""
        self._stopping = True
        if self.pipeline is not None:
            self.pipeline.stop()
        self.batcher.stop()
        if self.checkpointer is not None:
            self.checkpointer.close()
        if self.pool is not None:
            self.pool.close()


def _rows(mask: np.ndarray, like: np.ndarray) -> np.ndarray:
    """[N] mask shaped to broadcast over [N, ...] `like`."""
    return mask.reshape((-1,) + (1,) * (like.ndim - 1))


def _take(tree: Any, rows: slice) -> Any:
    """`rows` of every array of `tree` (an array itself on the usual path, without a tree walk)."""
    if isinstance(tree, np.ndarray):
        return tree[rows]
    return tree if tree == () else jax.tree.map(lambda x: x[rows], tree)  # (): a feed-forward network's core state
