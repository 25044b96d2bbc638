"""Env workers: processes that step games and let a seedleague host choose the
actions over the env protocol (proto/seedleague/v1/env.proto).

`gym_worker` runs any gymnasium env id with Discrete actions (`gym_vector` picks
its vector env: native, sync or async; `atari` holds the Atari preprocessing it
applies to "ALE/..." ids); `openspiel_worker` runs any
two-player zero-sum OpenSpiel game by name (encoded by `seedleague.games.openspiel`);
`pettingzoo_worker` runs two-player PettingZoo Atari games (Pong) and, through
`pettingzoo_classic`, classic turn-based AEC games (tictactoe_v3, connect_four_v3); `worker_loop` is their shared
connect/reconnect/stop loop; `cpp/` is a native C++ worker. Workers never import jax.

GYM, OPENSPIEL and PETTINGZOO below are these workers as seedleague's game families (`seedleague.games`, registered
as entry points in pyproject.toml): `seedleague train --env ID` starts them and reads their specs through these
objects, so the seedleague package never imports this one. Each imports its worker module only when called.
A family's `spec(game)` is the named spec the host will read from its worker's handshake (the game's own `spec`),
whichever protocol the worker speaks.
"""

from __future__ import annotations

import sys
from typing import Sequence

from seedleague.games import UnsupportedGame


class _Gym:
    """Any gymnasium env id (envs.gym_worker)."""

    def worker_command(self, game: str, num_envs: int) -> tuple[str, ...]:
        return (sys.executable, "-m", "envs.gym_worker", "--env", game, "--num-envs", str(num_envs))

    def spec(self, game: str):
        """The spec the gym worker declares for `game` (one env made to read its spaces), or None when gymnasium
        cannot make it here (the worker then says why)."""
        import gymnasium as gym

        from envs.gym_worker import GymVectorGame, UnsupportedEnv

        try:
            envs = gym.vector.SyncVectorEnv([lambda: gym.make(game)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        except (gym.error.Error, ImportError, TypeError, ValueError):
            return None
        try:
            return GymVectorGame(game, envs).spec
        except UnsupportedEnv:
            return None
        finally:
            envs.close()

    def main(self, argv: Sequence[str]) -> int:
        from envs import gym_worker

        return gym_worker.main(list(argv)) or 0


class _OpenSpiel:
    """Two-player zero-sum OpenSpiel games by name (envs.openspiel_worker)."""

    def worker_command(self, game: str, num_envs: int) -> tuple[str, ...]:
        return (sys.executable, "-m", "envs.openspiel_worker", "--game", game, "--num-envs", str(num_envs))

    def spec(self, game: str) -> None:
        """None: read from the worker (its name is checked by `seedleague.games.openspiel.load_game`)."""
        from seedleague.games.openspiel import load_game

        load_game(game)  # UnsupportedGame (a seedleague.games.UnsupportedGame) for a name the worker refuses
        return None

    def main(self, argv: Sequence[str]) -> int:
        from envs import openspiel_worker

        return openspiel_worker.main(list(argv)) or 0


class _PettingZoo:
    """PettingZoo games: two-player Atari, classic/<game>, mpe/<game> (envs.pettingzoo_worker)."""

    def worker_command(self, game: str, num_envs: int) -> tuple[str, ...]:
        return (sys.executable, "-m", "envs.pettingzoo_worker", "--game", game, "--num-envs", str(num_envs))

    def spec(self, game: str):
        """A classic or MPE game's spec, read from one env made here; None for an Atari game (its ROM is checked by
        its worker)."""
        from envs import pettingzoo_worker as worker

        try:
            if worker.split_game_name(game)[0] not in ("classic", "mpe"):
                return None
            vector_game = worker.make_vector_game(game, num_envs=1)
        except worker.UnsupportedGame as error:
            raise UnsupportedGame(str(error)) from None
        try:
            return vector_game.spec
        finally:
            vector_game.close()

    def main(self, argv: Sequence[str]) -> int:
        from envs import pettingzoo_worker

        return pettingzoo_worker.main(list(argv)) or 0


GYM = _Gym()
OPENSPIEL = _OpenSpiel()
PETTINGZOO = _PettingZoo()
