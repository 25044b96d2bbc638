"""The OpenSpiel env worker: steps `num_envs` copies of a two-player zero-sum
turn-based OpenSpiel game and lets a seedleague host choose every action.

    python -m envs.openspiel_worker --address 127.0.0.1:50051 --game kuhn_poker --num-envs 64
    python -m envs.openspiel_worker --address host:50051 --game "leduc_poker(players=2)" --seed 3

Seat s of every env is OpenSpiel player s. Each message carries, per env:
`observation[e, s]` = `seedleague.games.openspiel.encode(state, s)` (the encoding that
`seedleague eval` also uses); `acting[e, s]` = (s is the player to move);
`legal_mask[e, s]` = `seedleague.games.openspiel.legal_mask(state, s, A)` (all False for the
seat not to move; the host needs a legal action for acting seats only);
`reward[e, s]` = the change in `state.returns()[s]` since the previous message,
so a finished episode's rewards sum to its final returns (zero-sum). Chance
nodes are resolved inside the worker, sampled from `chance_outcomes()` with the
worker's numpy Generator (seeded by --seed). When an action ends a game the next
message has `terminated[e]` set, that final reward, and already the first
observation of a new game (same-step autoreset, docs/protocol.md section 5).

An illegal action from the host for the seat to move (e.g. from a host that
ignores legal masks) does not crash the worker: it is counted, logged for the
first time and then every `worker_loop.ILLEGAL_LOG_EVERY`-th time, and replaced
by the first legal action, as the C++ Connect Four worker does
(`worker_loop.IllegalActions`). Actions of seats not to move are ignored. A bad
game name exits 2 before connecting. Never imports jax.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Optional, Sequence

import numpy as np
import pyspiel

from envs.worker_loop import (CountsIllegalActions, GameStep, IllegalActions, add_game_worker_arguments,
                               game_worker_main, head_actions, positive_int, turn_based_spec)
from seedleague.games.openspiel import Encoder, UnsupportedGame, load_game, payoff_bound

log = logging.getLogger("envs.openspiel_worker")

NUM_SEATS = 2


class OpenSpielVectorGame(CountsIllegalActions):
    """`num_envs` games of one OpenSpiel game, stepped together; a `worker_loop.VectorGame`.

        game = OpenSpielVectorGame("kuhn_poker", num_envs=64, seed=0)
        step = game.reset()                 # GameStep: observation {"observation": [E, 2, *shape] float32}, ...
        step = game.step({"action": a})     # a [E, 2] int; the acting seat's entry is played

    The returned arrays are buffers reused by the next call. Raises UnsupportedGame
    for a game that is not two-player zero-sum sequential with tensors.
    """

    protocol = 1  # spoken on the wire: v1 carries the spec (`turn_based_spec`), as every earlier version sent it

    def __init__(self, game_name: str, num_envs: int, seed: int = 0):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.game = load_game(game_name)
        self._encoder = Encoder(self.game)
        self.num_actions, shape = self._encoder.num_actions, self._encoder.shape
        self.spec = turn_based_spec(f"openspiel:{game_name}", shape, self.num_actions, num_envs, NUM_SEATS,
                                    return_bound=payoff_bound(self.game))
        self._out = GameStep.zeros(self.spec)
        (self._observation,), (self._legal,) = self._out.observation.values(), self._out.legal_mask.values()
        self._rng = np.random.default_rng(seed)
        self._states: list[pyspiel.State] = []
        self._returns: list[list[float]] = []  # returns at the previous message, per env
        self.episodes = 0  # games finished
        self._illegal = IllegalActions(log)  # host actions replaced by the first legal action

    def reset(self, seed: Optional[int] = None) -> GameStep:
        """Fresh games in every env; `seed` reseeds the chance sampling."""
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        num_envs = self.spec.num_envs
        self._states = [self.game.new_initial_state() for _ in range(num_envs)]
        self._returns = [[0.0] * NUM_SEATS for _ in range(num_envs)]
        for env in range(num_envs):
            self._start(env)
        self._out.reward.fill(0.0)
        self._out.terminated.fill(False)
        return self._out

    def step(self, actions: dict) -> GameStep:
        """Play the acting seat's action ({"action": [E, 2] int}) in every env; finished games restart in the same
        step."""
        actions = head_actions(actions, self.spec)
        out = self._out
        out.terminated.fill(False)
        for env, state in enumerate(self._states):
            player = state.current_player()
            action = self._illegal.checked(env, player, int(actions[env, player]), self._legal[env, player])
            state.apply_action(action)
            self._resolve_chance(state)
            returns, before = state.returns(), self._returns[env]
            out.reward[env, 0] = returns[0] - before[0]
            out.reward[env, 1] = returns[1] - before[1]
            if state.is_terminal():
                out.terminated[env] = True
                self.episodes += 1
                self._states[env] = self.game.new_initial_state()
                self._start(env)
            else:
                self._returns[env] = returns
                self._render(env, state)
        return out

    @property
    def states(self) -> tuple[pyspiel.State, ...]:
        """The live OpenSpiel state of every env (to inspect, not to mutate); a finished one is replaced."""
        return tuple(self._states)

    def close(self) -> None:
        pass

    def _start(self, env: int) -> None:
        """Deal (resolve the opening chance nodes of) env's fresh state and show it."""
        state = self._states[env]
        self._resolve_chance(state)
        self._returns[env] = state.returns()
        self._render(env, state)

    def _resolve_chance(self, state: pyspiel.State) -> None:
        """Sample chance outcomes with the worker's Generator until a player is to move (or the game ends)."""
        while state.is_chance_node():
            u = self._rng.random()
            outcomes = state.chance_outcomes()
            action = outcomes[-1][0]  # if rounding leaves u above the total
            for outcome, probability in outcomes:
                u -= probability
                if u < 0.0:
                    action = outcome
                    break
            state.apply_action(action)

    def _render(self, env: int, state: pyspiel.State) -> None:
        """Write env's observations, legal masks and acting flags; `state` is live (a player is to move)."""
        out, player = self._out, state.current_player()
        for seat in range(NUM_SEATS):
            self._encoder.observation(state, seat, self._observation[env, seat])
            out.acting[env, seat] = player == seat
        self._legal[env] = False  # seedleague.games.openspiel.legal_mask: only the player to move has legal actions
        self._legal[env, player, state.legal_actions(player)] = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The worker's flags."""
    parser.add_argument("--address", required=True, help="host address, host:port")
    parser.add_argument(
        "--game", required=True, help="OpenSpiel game name, parameters allowed: kuhn_poker, leduc_poker, connect_four"
    )
    parser.add_argument("--num-envs", type=positive_int, default=64, help="games stepped together (default 64)")
    add_game_worker_arguments(parser)  # --seed, --max-steps, connection and security flags, --log-level


def main(argv: Optional[Sequence[str]] = None) -> int:
    """CLI entry point; 0 stopped, 2 bad flags, unusable game or refused by the host."""
    parser = argparse.ArgumentParser(prog="python -m envs.openspiel_worker", description=__doc__.split("\n\n")[0])
    add_arguments(parser)

    def make_game(args: argparse.Namespace) -> OpenSpielVectorGame:
        try:
            return OpenSpielVectorGame(args.game, args.num_envs, args.seed)
        except UnsupportedGame as error:  # OpenSpiel lists every game, one a line: keep the log to one line.
            raise UnsupportedGame(" ".join(str(error).split("\n"))) from None

    return game_worker_main(parser, argv, make_game, UnsupportedGame, log)


if __name__ == "__main__":
    sys.exit(main())
