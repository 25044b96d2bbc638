"""Episode boundaries in a worker's step, on the batcher thread, before inference.

`end_and_seat` closes the episodes the step ends (episode metrics, a warning when a return exceeds the spec's
declared return_bound; in a league run, one result per game against a snapshot and the zero-sum check that
refuses a worker whose seats do not play one; training a best response, the learner's return in each game)
and seats the episodes it starts (who plays each seat, drawn from the league, a served mixture, or the output a
best response plays).
It sets the step's `learning_before`, `learning` and `opponents` masks that inference and the
unroll store read.
"""

from __future__ import annotations

import logging

import numpy as np

from seedleague.host import results
from seedleague.host.pipeline import Pipeline
from seedleague.host.sessions import AgentStep
from seedleague.metrics import Metrics

log = logging.getLogger(__name__)


def end_and_seat(step: AgentStep, pipeline: Pipeline, player: str, metrics: Metrics) -> None:
    """Close the episodes `step` ends (metrics, league results) and seat the ones it starts."""
    session = step.session
    ended, returns, lengths = session.finished_episodes(step)
    seating = session.seating
    step.learning_before = session.every_agent if seating is None else seating.learning()
    league, target = pipeline.league, pipeline.target
    seated_learner = league is not None or target is not None
    counted = ended & step.learning_before if seated_learner else ended  # serving counts every seat
    metrics.record_episodes(returns[counted], lengths[counted])
    if (session.spec.return_bound and not session.beyond_bound_warned
            and (problem := results.beyond_return_bound(session.spec, returns[ended]))):
        session.beyond_bound_warned = True  # once per session: the run goes on, on rewards scaled too little
        log.warning("worker %s: %s", session.worker_name, problem)
    if seating is None:
        step.learning = step.learning_before
        return
    seats = session.spec.num_seats
    if pipeline.population is not None:  # evaluation games among snapshots: each one counts for every pair
        pipeline.population.record(session, ended, returns)
    if league is not None:
        envs = np.flatnonzero(ended[::seats])
        if session.refusal is None and (problem := results.not_zero_sum(session.spec, envs, returns, seating)):
            session.refusal = problem
            log.error("refusing worker %s: %s", session.worker_name, problem)
        outcomes = results.report(league, player, pipeline.policy.version, seating, envs, returns)
        metrics.record_games(len(envs), outcomes)
    elif target is not None:  # a best response: its returns against the frozen output are what the run measures
        envs = np.flatnonzero(ended[::seats])
        learner_returns = target.record(seating, envs, returns)
        metrics.record_games(len(envs))  # no league: the progress line shows the response's return instead
        if learner_returns.size:
            metrics.record(best_response_return=float(learner_returns.mean()))
    started_envs = np.flatnonzero(step.first[::seats])
    seating.start(started_envs, pipeline.opponents().draw(len(started_envs)))
    if pipeline.population is not None:
        pipeline.population.reset(session, step.first)
    step.learning = seating.learning()
    step.opponents = seating.opponents()
