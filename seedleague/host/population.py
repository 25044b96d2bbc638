"""Evaluation games among a run's newest snapshots, every game scored by every member: the sampled meta-game.

A serving host given a run and a population size K (`HostConfig.serve_output`, `population_size`) seats the run's
members as a served mixture with one uniform mix per seat, so each seat's member is drawn uniformly and
independently per episode (seedleague.host.mixture). After every forward pass `score` computes, for every acting
row, each of the K members' log-probability of the action the row's own member took (one stacked forward pass of
all K, the host's `act_stacked`), and adds it to that row's running log reach; when a game ends, `record` hands its
seat-0 return and both seats' log reaches [K] to a SampledMetagame (seedleague.eval.sampled_metagame), which
counts the game for every pair of members by importance weighting.

    games = PopulationGames(keys, params, stacked_params, rng, bucket)
    games.record(session, ended, returns)          # batcher thread, before the step's new episodes are seated
    games.reset(session, first)                    # ... and after
    games.score(agents, observation, legal, action, policy)   # after the step's forward pass
    games.summary()                                 # summary.json's "population": the Nash mixture and its bound
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Sequence

import numpy as np

from seedleague.buckets import pad
from seedleague.eval.sampled_metagame import SampledMetagame
from seedleague.host.mixture import ServedMixture

LOG_FLOOR = -1e9  # the log-probability of an action a member gives probability 0 (a reach of exactly 0)


def action_log_probs(logits: np.ndarray, legal: np.ndarray, action: np.ndarray) -> np.ndarray:
    """[K, N] log-probability of each row's `action` [N] under each member's logits [K, N, A] masked to `legal`
    [N, A] (a softmax over the legal actions, as the host samples them)."""
    masked = np.where(legal[None], logits.astype(np.float64), -np.inf)
    top = masked.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)  # a row without a legal action (a seat not acting): no warning
    log_norm = top[..., 0] + np.log(np.maximum(np.exp(masked - top).sum(axis=-1), np.finfo(np.float64).tiny))
    taken = np.take_along_axis(masked, action[None, :, None].astype(np.int64), axis=-1)[..., 0]
    return np.maximum(taken - log_norm, LOG_FLOOR)


class PopulationGames:
    """The members as a served mixture, each acting row's log reach per member, and the sampled meta-game."""

    def __init__(self, keys: Sequence[str], params: Sequence[Any], stacked: Any, rng: np.random.Generator,
                 bucket: Callable[[int], int]):
        size = len(keys)
        self.keys = list(keys)
        self.mixture = ServedMixture(keys, [1.0] * size, params, rng, seat_weights=np.full((2, size), 1.0 / size))
        self.table = SampledMetagame(size)
        self._stacked = stacked  # the members' params with a leading [K] axis, on the inference device
        self._bucket = bucket
        self._log_reach: dict[str, np.ndarray] = {}  # session id -> [E*S, K]
        self._lock = threading.Lock()

    def _reach_of(self, session) -> np.ndarray:
        if session.id not in self._log_reach:
            self._log_reach[session.id] = np.zeros((session.num_agents, self.table.size))
        return self._log_reach[session.id]

    def record(self, session, ended: np.ndarray, returns: np.ndarray) -> None:
        """Games of `session` this step ended ([E*S] masks and returns, env-major): each one's seat-0 return and
        both seats' log reaches go to the meta-game."""
        envs = np.flatnonzero(np.asarray(ended)[::2])
        if not envs.size:
            return
        reach = self._reach_of(session)
        with self._lock:
            self.table.add(np.asarray(returns)[2 * envs], reach[2 * envs], reach[2 * envs + 1])

    def reset(self, session, first: np.ndarray) -> None:
        """Rows whose episode starts on this step begin with a reach of 1 (log 0)."""
        self._reach_of(session)[np.asarray(first, bool)] = 0.0

    def score(self, agents: Sequence[Any], observation: Any, legal: Any, action: Any, policy: Any) -> None:
        """Add every member's log-probability of each acting row's action (rows in the order of `agents`' steps,
        as the batch's forward pass had them). The flat model's observation, legal mask and action are arrays; a
        named network's are dicts (per tensor, per head), and an action's log-probability sums its heads'. Only
        the acting rows are passed forward (in a turn-based game the other seat's rows wait)."""
        acting = np.concatenate([np.asarray(step.acting, bool) for step in agents])
        rows = np.flatnonzero(acting)
        if not rows.size:
            return
        size = self._bucket(rows.size)
        members = self.table.size
        take = lambda tree: {k: v[rows] for k, v in tree.items()} if isinstance(tree, dict) else tree[rows]
        stacked = lambda x, fill: np.broadcast_to(pad(x, size, fill)[None], (members, size) + x.shape[1:])
        each = lambda tree, fill: {k: stacked(v, fill) for k, v in tree.items()} if isinstance(tree, dict) \
            else stacked(tree, fill)
        observation, legal, action = take(observation), take(legal), take(action)
        out = policy.act_stacked(self._stacked, each(observation, 0), stacked(np.zeros(rows.size, bool), True), (),
                                 each(legal, True))
        if isinstance(action, dict):  # the named network's discrete heads (a head without a mask: all legal)
            log_probs = sum(action_log_probs(np.asarray(out.logits[head])[:, :rows.size],
                                             legal.get(head, np.ones((rows.size, np.shape(out.logits[head])[-1]),
                                                                     bool)),
                                             np.asarray(action[head])) for head in action)
        else:
            log_probs = action_log_probs(np.asarray(out.logits)[:, :rows.size], legal, np.asarray(action))  # [K, n]
        done = 0
        for step in agents:  # the acting rows of each step, in batch order
            mine = np.flatnonzero(np.asarray(step.acting, bool))
            self._reach_of(step.session)[mine] += log_probs[:, done:done + mine.size].T
            done += mine.size

    def summary(self) -> dict:
        """summary.json's "population": the estimated meta-game's Nash mixture (one mix per seat), its games and
        the largest entry's 95% half-width; {"error"} before two games."""
        with self._lock:
            if self.table.games < 2:
                return dict(error=f"{self.table.games} evaluation games finished: too few for a meta-game")
            return self.table.nash(self.keys).to_json()
