"""PettingZoo's classic turn-based games (AEC envs) as a seedleague `VectorGame`:
`num_envs` copies of one `pettingzoo.classic` game, stepped turn by turn.

    game = ClassicVectorGame("tictactoe_v3", num_envs=8, seed=0)
    step = game.reset()              # GameStep: observation {"observation": [E, 2, 2, 3, 3] float32},
                                     # legal_mask {"action": [E, 2, 9]}, acting [E, 2]
    step = game.step({"action": a})  # a [E, 2] int; only the agent to move acts

Seat s is the env's agent s (`possible_agents` order, e.g. tictactoe's `player_1`,
`player_2`). Each message carries, per env (the spec's one tensor and head, `worker_loop.turn_based_spec`,
which v1 carries on the wire): `observation[e, s]` = `observe(agent
s)["observation"]` as float32, an [H, W, C] board transposed to [C, H, W] planes
(the layout the host's board torso reads; a vector stays as it is);
`acting[e, s]` = (agent s is the `agent_selection`); `legal_mask[e, s]` = its
`action_mask` for the agent to move, all False for the others; `reward[e, s]` =
agent s's entry of the AEC `rewards` after the previous step (every seat, acting
or not, so an episode's rewards sum to what AEC's cumulative rewards give).
When every agent is terminated (or truncated, by the env or after `max_cycles`
turns of this worker's count) the next message has the flag, those rewards and
already the first observation of a new game (same-step autoreset,
docs/protocol.md section 5).

Games that work: two agents, a Dict observation with a Box `observation` and an
`action_mask`, and the same Discrete action space for both. Here, with the base
dependencies, that is tictactoe_v3, connect_four_v3, go_v5 and rlcard's
leduc_holdem_v4, texas_holdem_v4 and texas_holdem_no_limit_v6 (`available_games`
lists them by trying each registered classic game); chess_v6 and hanabi_v5 need
packages that are not installed, and rps_v2's observation is not a Box. An illegal
action from the host (e.g. a host that ignores legal masks) is replaced by the
first legal one, counted and logged 1 in N (`worker_loop.IllegalActions`), as
the OpenSpiel worker does. Never imports jax.
"""

from __future__ import annotations

import logging
from typing import Optional

import numpy as np

from envs.worker_loop import CountsIllegalActions, EnvPerSlot, GameStep, IllegalActions, head_actions, turn_based_spec
from seedleague.games import pettingzoo_classic
from seedleague.games.pettingzoo_classic import (UnsupportedClassicGame, available_games, make_aec_env,  # noqa: F401
                                                 seat_observation, seat_observation_shape)

log = logging.getLogger("envs.pettingzoo_classic")

NAMESPACE, NUM_SEATS = pettingzoo_classic.NAMESPACE, pettingzoo_classic.NUM_SEATS


class ClassicVectorGame(CountsIllegalActions, EnvPerSlot):
    """`num_envs` games of one classic PettingZoo AEC game, stepped turn by turn; a `worker_loop.VectorGame`.

    The returned arrays are buffers reused by the next call. Raises UnsupportedClassicGame.
    """

    protocol = 1  # spoken on the wire: v1 carries the spec (`turn_based_spec`), as every earlier version sent it

    def __init__(self, game_name: str, num_envs: int, seed: int = 0, max_cycles: int = 5000):
        if num_envs < 1 or max_cycles < 1:
            raise ValueError(f"need num_envs >= 1 and max_cycles >= 1, got {num_envs} and {max_cycles}")
        self.max_cycles = max_cycles
        self._open_envs(lambda: make_aec_env(game_name), num_envs, seed)
        first = self._envs[0]
        self._agents = list(first.possible_agents)
        self.num_actions = int(first.action_space(self._agents[0]).n)
        board = first.observation_space(self._agents[0]).spaces["observation"].shape
        self.spec = turn_based_spec(f"pettingzoo:{NAMESPACE}/{game_name}", seat_observation_shape(board),
                                    self.num_actions, num_envs, NUM_SEATS)
        self._out = GameStep.zeros(self.spec)
        (self._observation,), (self._legal,) = self._out.observation.values(), self._out.legal_mask.values()
        self._turns = np.zeros(num_envs, np.int64)  # turns of each env's current episode
        self._illegal = IllegalActions(log)  # host actions replaced by the first legal action

    def reset(self, seed: Optional[int] = None) -> GameStep:
        """Fresh games in every env; `seed` reseeds env e with `seed + e` (the first reset uses the constructor's
        seed when given None; later ones continue each env's random stream)."""
        self._start_all(seed)
        return self._out.clear_ends()

    def step(self, actions: dict) -> GameStep:
        """The acting seat's action ({"action": [E, 2] int}) in every env; games that end restart in the same
        step."""
        actions = head_actions(actions, self.spec)
        out = self._out
        for env, game in enumerate(self._envs):
            seat = self._agents.index(game.agent_selection)
            game.step(self._illegal.checked(env, seat, int(actions[env, seat]), self._legal[env, seat]))
            self._turns[env] += 1
            for s, agent in enumerate(self._agents):
                out.reward[env, s] = game.rewards.get(agent, 0.0)
            ended = [agent for agent in game.agents if game.terminations[agent] or game.truncations[agent]]
            over = not game.agents or len(ended) == len(game.agents)
            out.terminated[env] = over and any(game.terminations.get(agent, False) for agent in self._agents)
            out.truncated[env] = not out.terminated[env] and (over or self._turns[env] >= self.max_cycles)
            if out.terminated[env] or out.truncated[env]:
                self.episodes += 1
                self._start(env, None)
            else:
                self._render(env)
        return out

    def _start(self, env: int, seed: Optional[int]) -> None:
        self._envs[env].reset(seed=seed)
        self._turns[env] = 0
        self._render(env)

    def _render(self, env: int) -> None:
        """Write env's observations, legal mask and acting flags for its agent to move."""
        game, out = self._envs[env], self._out
        mover = game.agent_selection
        # The agent to move is observed last: TerminateIllegalWrapper judges the next action by the last observation.
        for seat, agent in sorted(enumerate(self._agents), key=lambda pair: pair[1] == mover):
            observed = game.observe(agent)
            board = observed["observation"]
            self._observation[env, seat] = seat_observation(board)
            out.acting[env, seat] = agent == mover
            self._legal[env, seat] = np.asarray(observed["action_mask"], bool) if agent == mover else False
