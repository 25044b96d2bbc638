"""Evaluation games among a run's newest snapshots, every game scored by every member: the sampled meta-game.

A serving host given a run and a population size K (`HostConfig.serve_output`, `population_size`) seats the run's
members as a served mixture with one uniform mix per seat, so each seat's member is drawn uniformly and
independently per episode (seedleague.host.mixture). The members act for their rows themselves: `act` runs one
stacked forward pass of all K (the host's `act_stacked`) over the batch's distinct acting rows (a small game's rows
repeat a few information states), draws each row's action from its own member's policy, and adds every member's
log-probability of that action to the row's running log reach; when a game ends, `record` hands its seat-0 return
and both seats' log reaches [K] to a SampledMetagame (seedleague.eval.sampled_metagame), which counts the game for
every pair of members by importance weighting.

    games = PopulationGames(keys, params, stacked_params, rng, bucket)
    games.record(session, ended, returns)          # batcher thread, before the step's new episodes are seated
    games.reset(session, first)                    # ... and after
    actions = games.act(agents, observation, legal, members, policy)   # the batch's pass: Actions
    games.summary()                                 # summary.json's "population": the Nash mixture and its bound

With `samples` (a MoveSamples) it also keeps a uniform sample of the games' moves, each with every member's policy
and reach there (seedleague.host.population_samples), from which the Nash mixture is distilled into one network.

With `mixed` < K the last networks are learned best responses (`HostConfig.population_responses`): they play
like the others, and the summary's mixture mixes the members alone against all of them (one step of PSRO).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional, Sequence

import jax
import numpy as np

from seedleague.buckets import pad
from seedleague.eval.sampled_metagame import SampledMetagame
from seedleague.host.mixture import ServedMixture
from seedleague.host.opponents import take_rows
from seedleague.host.policy import Actions
from seedleague.host.population_samples import MoveSamples

LOG_FLOOR = -1e9  # the log-probability of an action a member gives probability 0 (a reach of exactly 0)


def legal_log_softmax(logits: np.ndarray, legal: np.ndarray) -> np.ndarray:
    """[..., N, A] log-probabilities of the softmax of `logits` over the `legal` [N, A] actions (as the host samples
    them): -inf off them (a row without a legal action, a seat not acting: -inf throughout, with no warning)."""
    masked = np.where(legal, logits.astype(np.float64), -np.inf)
    top = masked.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    log_norm = top + np.log(np.maximum(np.exp(masked - top).sum(axis=-1, keepdims=True), np.finfo(np.float64).tiny))
    return masked - log_norm


def action_log_probs(logits: np.ndarray, legal: np.ndarray, action: np.ndarray) -> np.ndarray:
    """[K, N] log-probability of each row's `action` [N] under each member's logits [K, N, A] masked to `legal`
    [N, A], floored at LOG_FLOOR."""
    log_pi = legal_log_softmax(logits, legal[None])
    taken = np.take_along_axis(log_pi, action[None, :, None].astype(np.int64), axis=-1)[..., 0]
    return np.maximum(taken, LOG_FLOOR)


def distinct_rows(observation: Any, legal: Any) -> tuple[np.ndarray, np.ndarray]:
    """(index of each distinct row [U], each row's place among them [n]) of rows alike in every observation and
    legal-mask array (arrays, or dicts of them): a small game's rows repeat a few information states, and each
    distinct one needs the members' pass only once."""
    leaves = [x for tree in (observation, legal) for x in (tree.values() if isinstance(tree, dict) else [tree])]
    count = len(leaves[0])
    raw = np.hstack([np.ascontiguousarray(x).reshape(count, -1).view(np.uint8) for x in leaves])
    keys = np.ascontiguousarray(raw).view(np.dtype((np.void, raw.shape[1])))[:, 0]
    _, distinct, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return distinct, inverse.reshape(-1)


class PopulationGames:
    """The members as a served mixture, each acting row's log reach per member, and the sampled meta-game."""

    def __init__(self, keys: Sequence[str], params: Sequence[Any], stacked: Any, rng: np.random.Generator,
                 bucket: Callable[[int], int], mixed: Optional[int] = None, samples: Optional[MoveSamples] = None):
        size = len(keys)
        self.keys = list(keys)
        self.mixed = size if mixed is None else mixed  # the first `mixed` networks mix; the rest are responses
        self.mixture = ServedMixture(keys, [1.0] * size, params, rng, seat_weights=np.full((2, size), 1.0 / size))
        self.table = SampledMetagame(size)
        self._stacked = stacked  # the members' params with a leading [K] axis, on the inference device
        self._bucket = bucket
        self._log_reach: dict[str, np.ndarray] = {}  # session id -> [E*S, K]
        self._lock = threading.Lock()
        self._index = {key: i for i, key in enumerate(self.keys)}
        self._rng = rng  # draws each row's action from its member's policy
        self.samples = samples  # a uniform sample of the games' moves, for the distilled output

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

    def act(self, agents: Sequence[Any], observation: Any, legal: Any, members: np.ndarray, policy: Any) -> Actions:
        """The batch's actions: each acting row's drawn from its own member (`members` [N]: the key seated on each
        row), and every member's log-probability of it added to the row's log reach, from one stacked pass of all
        K members over the batch's distinct acting rows (rows in the order of `agents`' steps). The flat model's
        observation, legal mask and action are arrays; a named network's are dicts (per tensor, per head), and an
        action's log-probability sums its heads'. A row that does not act (in a turn-based game the other seat's
        rows wait) gets action 0 and zero logits, which its worker ignores."""
        acting = np.concatenate([np.asarray(step.acting, bool) for step in agents])
        rows = np.flatnonzero(acting)
        probe = rows if rows.size else np.arange(1)  # nobody acts: one row's pass still shapes the answer
        named, heads = self._pass(take_rows(observation, probe), take_rows(legal, probe), policy)
        own = np.array([self._index[key] for key in members[rows]], np.int64)
        actions, logits, log_probs = self._draw(heads, own, rows, len(members), getattr(policy, "greedy", False))
        keep = self.samples is not None and rows.size > 0
        before, seats = self._add_to_reach(agents, log_probs, keep)
        flat = lambda tree: tree if named else tree[None]  # a flat network's one head is None
        if keep:
            self.samples.add(take_rows(observation, rows), flat({head: mask for head, (_, _, mask) in heads.items()}),
                             flat({head: log_pi for head, (log_pi, _, _) in heads.items()}), before, seats)
        return Actions(flat(actions), flat(logits), (), policy.version)

    def _draw(self, heads: dict, own: np.ndarray, rows: np.ndarray, count: int,
              greedy: bool) -> tuple[dict, dict, np.ndarray]:
        """Per head, the action of each of the batch's `count` rows, drawn for the acting `rows` from their own
        member's policy (`own` [n]; its most probable legal action when `greedy`) and 0 elsewhere, and the logits it
        was drawn from (zeros elsewhere); and [K, n] every member's log-probability of each acting row's whole
        action (the sum of its heads')."""
        actions, logits, log_probs = {}, {}, np.zeros((self.table.size, rows.size))
        for head, (log_pi, raw, _) in heads.items():  # log_pi [K, n, A]: every member's policy at each acting row
            actions[head] = np.zeros(count, np.int32)
            logits[head] = np.zeros((count, raw.shape[-1]), np.float32)
            if not rows.size:
                continue
            mine = log_pi[own, np.arange(rows.size)]  # [n, A]: the row's own member's
            pick = mine if greedy else mine + self._rng.gumbel(size=mine.shape)
            chosen = np.argmax(pick, axis=-1)  # Gumbel-max: a draw from the member's policy over the legal actions
            log_probs += np.maximum(np.take_along_axis(log_pi, chosen[None, :, None], axis=-1)[..., 0], LOG_FLOOR)
            actions[head][rows] = chosen
            logits[head][rows] = raw[own, np.arange(rows.size)]
        return actions, logits, log_probs

    def _add_to_reach(self, agents: Sequence[Any], log_probs: np.ndarray, keep: bool):
        """Adds each acting row's [K] log-probabilities (`log_probs` [K, n], rows in the order of `agents`' steps) to
        its session's log reach. With `keep`: (each member's reach before the move [n, K], each row's seat [n]; rows
        env-major, two seats an env), else (None, None)."""
        done, before, seats = 0, [], []
        for step in agents:
            mine = np.flatnonzero(np.asarray(step.acting, bool))
            reach = self._reach_of(step.session)
            if keep:
                before.append(reach[mine].copy())
                seats.append(mine % 2)
            reach[mine] += log_probs[:, done:done + mine.size].T
            done += mine.size
        return (np.concatenate(before), np.concatenate(seats)) if keep else (None, None)

    def _pass(self, observation: Any, legal: Any, policy: Any) -> tuple[bool, dict]:
        """(whether the network is named, {head: (log-probabilities [K, n, A] over the legal actions, logits
        [K, n, A], the legal mask [n, A])}) of every member at each row (a flat model's one head is None); the
        stacked pass runs once per distinct row."""
        distinct, inverse = distinct_rows(observation, legal)
        observation, legal = take_rows(observation, distinct), take_rows(legal, distinct)
        size = self._bucket(distinct.size)
        members = self.table.size
        stacked = lambda x, fill: np.broadcast_to(pad(x, size, fill)[None], (members, size) + x.shape[1:])
        out = policy.act_stacked(self._stacked, jax.tree.map(lambda x: stacked(x, 0), observation),
                                 stacked(np.zeros(distinct.size, bool), True), (),
                                 jax.tree.map(lambda x: stacked(x, True), legal))
        named = isinstance(out.logits, dict)
        raw, legal = (out.logits, legal) if named else ({None: out.logits}, {None: legal})
        heads = {}
        for head, logits in raw.items():  # a named head without a mask: every action legal
            logits = np.asarray(logits)[:, :distinct.size]  # [K, U, A] over the distinct rows
            mask = legal.get(head, np.ones(logits.shape[1:], bool))
            # each row's: softmax once per distinct row, then spread to the rows [K, n, A]
            heads[head] = (legal_log_softmax(logits, mask)[:, inverse], logits[:, inverse], mask[inverse])
        return named, heads

    def summary(self) -> dict:
        """summary.json's "population": the estimated meta-game's Nash mixture (one mix per seat; with responses,
        the members' mix against every network), its games and the largest entry's 95% half-width; {"error"} before
        two games."""
        with self._lock:
            if self.table.games < 2:
                return dict(error=f"{self.table.games} evaluation games finished: too few for a meta-game")
            return self.table.nash(self.keys, self.mixed).to_json()
