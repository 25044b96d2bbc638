"""PettingZoo parallel-API envs of any number of agents as a protocol v2 `VectorGame`: `num_envs` copies of one
env, every agent acting on every step, one seat per agent, seats grouped into teams.

    game = ParallelVectorGame(make_env, "pettingzoo:mpe/simple_tag_v3", num_envs=8, seed=0,
                              team_of=lambda env, agent: ...)   # None: every agent in one team
    step = game.reset()        # GameStep: {"observation": [E, S, D] float32}, legal mask {"action": [E, S, n]}
    step = game.step(actions)  # {"action": [E, S] int32} (or [E, S, d] float32 for a continuous Box)

Seat s is the env's agent s (`possible_agents` order). Agents whose spaces differ
share one spec, so that one policy can play every seat of a team (parameter
sharing):
- `observation` float32 `[D]`: the agent's flat observation, zero-padded to the
  largest agent's size, then, when the agents' names have more than one role (the
  name before its last `_`: `adversary_0` and `agent_0` are roles `adversary` and
  `agent`), a one-hot of the seat's role, roles in order of first appearance.
- one head `action`: Discrete(n) for the largest agent's n, with a legal mask
  hiding actions n_agent..n-1 when the agents' counts differ; or, when every
  agent has the same Box, a continuous head with its bounds. Agents with
  different Boxes, or Discrete beside Box, are refused (`UnsupportedParallelEnv`).
- `seat_team`: `team_of(env, agent)` for each agent (`env` the first copy) (teams numbered in order of first
  appearance), every seat in team 0 when `team_of` is None.
- With two or more teams, one episode stat per team, `return_<team>`: the team's
  mean return over its seats, at every seat, in the message that ends the episode.

`reward[e, s]` is agent s's reward of the step. When every agent is terminated
or truncated (or after `max_cycles` steps, this worker's count) the env restarts
in the same step (docs/protocol.md section 5); a truncated episode's last
observations go in `final_observation`, so the host bootstraps from them. Never
imports jax.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

import numpy as np

from envs.worker_loop import EnvPerSlot, GameStep
from seedleague.protocol.named import (ActionSpec, ContinuousHead, DiscreteHead, ObservationSpec,
                                       NamedEnvSpec, TensorSpec)

log = logging.getLogger("envs.pettingzoo_parallel")

OBSERVATION = "observation"
ACTION = "action"


class UnsupportedParallelEnv(ValueError):
    """The env's agents have spaces one spec cannot carry (message says which and why)."""


def role_of(agent: str) -> str:
    """`adversary` for `adversary_0`; a name without `_` is its own role."""
    return agent.rpartition("_")[0] or agent


def _numbered(labels: list[str]) -> tuple[list[str], list[int]]:
    """(distinct labels in order of first appearance, the index of each label among them)."""
    distinct = list(dict.fromkeys(labels))
    return distinct, [distinct.index(label) for label in labels]


def _action_head(name: str, agents: list[str], spaces: list[Any]) -> tuple[Any, Optional[np.ndarray]]:
    """The one action head every agent's space fits, and the [S, n] legal mask of a discrete head whose agents'
    counts differ (None when they agree)."""
    if all(hasattr(space, "n") for space in spaces):
        counts = [int(space.n) for space in spaces]
        legal = None
        if len(set(counts)) > 1:
            legal = np.arange(max(counts))[None, :] < np.asarray(counts)[:, None]
        return DiscreteHead(ACTION, max(counts), has_legal_mask=legal is not None), legal
    boxes = [space for space in spaces if getattr(space, "shape", None) is not None and hasattr(space, "low")]
    if len(boxes) == len(spaces) and all(len(box.shape) == 1 for box in boxes) and all(
            box.shape == boxes[0].shape and np.array_equal(box.low, boxes[0].low)
            and np.array_equal(box.high, boxes[0].high) for box in boxes):
        return ContinuousHead(ACTION, tuple(float(x) for x in boxes[0].low),
                              tuple(float(x) for x in boxes[0].high)), None
    raise UnsupportedParallelEnv(
        f"{name}: its agents' action spaces {dict(zip(agents, map(str, spaces)))} do not fit one action head: the "
        "worker takes Discrete spaces (of any sizes, a legal mask hides the actions an agent lacks) or one Box "
        "shared by every agent; Boxes of different shapes or bounds would need a head per role or padded "
        "continuous dimensions that the losses ignore, which the host does not have")


class ParallelVectorGame(EnvPerSlot):
    """`num_envs` copies of a PettingZoo parallel env stepped together; a `worker_loop.VectorGame` (protocol v2).

    `make_env()` returns one fresh parallel env; `team_of(env, agent)` names an agent's team (None: one team). The
    returned arrays are buffers reused by the next call. Raises UnsupportedParallelEnv.
    """

    protocol = 2  # spoken on the wire (v1 cannot carry the spec)

    def __init__(self, make_env: Callable[[], Any], env_name: str, num_envs: int, seed: int = 0,
                 max_cycles: int = 5000, team_of: Optional[Callable[[Any, str], str]] = None):
        if num_envs < 1 or max_cycles < 1:
            raise ValueError(f"need num_envs >= 1 and max_cycles >= 1, got {num_envs} and {max_cycles}")
        self.max_cycles = max_cycles
        self._open_envs(make_env, num_envs, seed)
        try:
            self._describe(env_name, num_envs, team_of)
        except BaseException:
            self.close()
            raise
        self._steps = np.zeros(num_envs, np.int64)  # steps of each env's current episode
        self._returns = np.zeros((num_envs, len(self._agents)), np.float32)

    def _describe(self, env_name: str, num_envs: int, team_of) -> None:
        """The spec and the per-seat layout: observation sizes, role one-hots, legal mask, teams."""
        first = self._envs[0]
        agents = self._agents = list(first.possible_agents)
        shapes = [first.observation_space(agent).shape for agent in agents]
        if any(shape is None or len(shape) != 1 for shape in shapes):
            raise UnsupportedParallelEnv(f"{env_name}: the worker takes flat (1-D Box) observations; its agents have "
                                         f"{dict(zip(agents, map(str, shapes)))}")
        self._sizes = [int(shape[0]) for shape in shapes]
        roles, self._role = _numbered([role_of(agent) for agent in agents])
        self._num_roles = len(roles) if len(roles) > 1 else 0  # one role needs no indicator
        width = max(self._sizes) + self._num_roles
        head, self._legal = _action_head(env_name, agents, [first.action_space(agent) for agent in agents])
        self.discrete = isinstance(head, DiscreteHead)
        teams = [team_of(first, agent) for agent in agents] if team_of else ["all"] * len(agents)
        self.team_names, seat_team = _numbered(teams)
        self._seat_team = np.asarray(seat_team)
        stats = tuple(f"return_{team}" for team in self.team_names) if len(self.team_names) > 1 else ()
        self.spec = NamedEnvSpec(env_name, ObservationSpec((TensorSpec(OBSERVATION, (width,), np.float32),)),
                                 ActionSpec((head,)), num_envs=num_envs, num_seats=len(agents),
                                      episode_stats=stats, seat_team=tuple(seat_team))
        agents_shape = (num_envs, len(agents))
        self._out = GameStep(observation={OBSERVATION: np.zeros(agents_shape + (width,), np.float32)},
                             reward=np.zeros(agents_shape, np.float32), terminated=np.zeros(num_envs, bool),
                             truncated=np.zeros(num_envs, bool),
                             legal_mask=None if self._legal is None else {
                                 ACTION: np.broadcast_to(self._legal, agents_shape + self._legal.shape[1:]).copy()},
                             episode_stats={name: np.zeros(agents_shape, np.float32) for name in stats} or None)

    def reset(self, seed: Optional[int] = None) -> GameStep:
        """Fresh episodes everywhere; `seed` reseeds env e with `seed + e` (the first reset uses the constructor's
        seed when given None; later ones continue each env's random stream)."""
        self._start_all(seed)
        out = self._out.clear_ends()
        out.final_observation = None
        for values in (out.episode_stats or {}).values():
            values.fill(0.0)
        return out

    def step(self, actions: dict) -> GameStep:
        """Every seat's action in every env; ended episodes restart in the same step."""
        action = np.asarray(actions[ACTION])
        out, ended_final = self._out, []
        for values in (out.episode_stats or {}).values():
            values.fill(0.0)
        for env, game in enumerate(self._envs):
            chosen = {agent: self._agent_action(action[env, seat]) for seat, agent in enumerate(self._agents)
                      if agent in game.agents}
            observations, rewards, terminations, truncations, _ = game.step(chosen)
            self._steps[env] += 1
            for seat, agent in enumerate(self._agents):
                out.reward[env, seat] = rewards.get(agent, 0.0)
            self._returns[env] += out.reward[env]
            live = [agent for agent in game.agents if not (terminations.get(agent) or truncations.get(agent))]
            over = not live or self._steps[env] >= self.max_cycles
            out.terminated[env] = over and all(terminations.get(agent, False) for agent in observations)
            out.truncated[env] = over and not out.terminated[env]
            if out.truncated[env]:
                ended_final.append(self._observed(observations))
            if over:
                self._end(env)
                self._start(env, None)
            else:
                self._write(env, observations)
        out.final_observation = ({OBSERVATION: np.stack(ended_final)} if ended_final else None)
        return out

    def _agent_action(self, value: np.ndarray) -> Any:
        return int(value) if self.discrete else np.asarray(value, np.float32)

    def _start(self, env: int, seed: Optional[int]) -> None:
        observations, _ = self._envs[env].reset(seed=seed)
        self._steps[env] = 0
        self._returns[env] = 0.0
        self._write(env, observations)

    def _end(self, env: int) -> None:
        """Count env's episode and write its teams' returns as episode stats (`_start` zeroes its counters)."""
        self.episodes += 1
        stats = self._out.episode_stats
        if stats:
            for team, name in enumerate(self.team_names):
                seats = self._seat_team == team
                stats[f"return_{name}"][env] = self._returns[env, seats].mean()

    def _observed(self, observations: dict) -> np.ndarray:
        """[S, D]: every agent's observation, padded, with its role one-hot (absent agents: zeros and the role)."""
        rows = np.zeros((len(self._agents),) + self._out.observation[OBSERVATION].shape[2:], np.float32)
        for seat, agent in enumerate(self._agents):
            if agent in observations:
                rows[seat, : self._sizes[seat]] = observations[agent]
            if self._num_roles:
                rows[seat, max(self._sizes) + self._role[seat]] = 1.0
        return rows

    def _write(self, env: int, observations: dict) -> None:
        self._out.observation[OBSERVATION][env] = self._observed(observations)
