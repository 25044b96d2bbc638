"""The built-in games: env ids that `seedleague train --env ID` starts a worker for, behind one interface.

An env id is `<family>:<game>` (openspiel:kuhn_poker, pettingzoo:classic/tictactoe_v3), or a gymnasium id
(CartPole-v1, ALE/Pong-v5) where no family is registered under its prefix. The families live outside this
package, with the reference workers in envs/, and reach it through the `seedleague.games` entry point group
(pyproject.toml): seedleague never imports envs, and another installed package can add a family the same way.
A family is an object with

    worker_command(game, num_envs) -> argv   # its worker's command line; the launcher adds --address and --seed
    spec(game) -> NamedEnvSpec or None       # the spec the host will read from its worker's handshake, read here
                                             # from one env made in this process; None where it cannot tell
                                             # without the worker;
                                             # UnsupportedGame (one line: why, and what to give) for a bad name
    main(argv) -> exit status                # its worker in this process (`seedleague worker` runs gym's)

    games.worker_command("openspiel:kuhn_poker", 64)    # ('python', '-m', 'envs.openspiel_worker', ...)
    games.spec_of("CartPole-v1")                        # NamedEnvSpec: one tensor "observation" float32[4], ...

`seedleague.games.openspiel` is the OpenSpiel encoding that the OpenSpiel worker and the evaluation both use.
"""

from __future__ import annotations

import functools
from importlib import metadata
from typing import TYPE_CHECKING, Optional, Protocol, Sequence

if TYPE_CHECKING:
    from seedleague.protocol.named import NamedEnvSpec

ENTRY_POINT_GROUP = "seedleague.games"
DEFAULT_FAMILY = "gym"  # ids with no registered family prefix


class UnsupportedGame(ValueError):
    """A game that its family's worker would refuse, by name, before anything starts."""


class GameFamily(Protocol):
    def worker_command(self, game: str, num_envs: int) -> tuple[str, ...]: ...

    def spec(self, game: str) -> "Optional[NamedEnvSpec]": ...

    def main(self, argv: Sequence[str]) -> int: ...


@functools.cache
def families() -> dict[str, GameFamily]:
    """The installed families by name (entry points of the `seedleague.games` group, loaded once)."""
    return {entry.name: entry.load() for entry in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def family_of(env_id: str) -> tuple[GameFamily, str]:
    """(the family that runs `env_id`, the game's name within it), or UnsupportedGame when none is installed."""
    installed = families()
    prefix, colon, game = env_id.partition(":")
    if colon and prefix in installed and prefix != DEFAULT_FAMILY:
        return installed[prefix], game
    return default_family(), env_id


def default_family() -> GameFamily:
    """The family of ids without a registered prefix (gymnasium's), or UnsupportedGame when none is installed."""
    installed = families()
    if DEFAULT_FAMILY not in installed:
        raise UnsupportedGame(f"no built-in {DEFAULT_FAMILY!r} game family is installed (the {ENTRY_POINT_GROUP!r} "
                              "entry points; install seedleague with `pip install -e .` from its clone), so no "
                              "built-in worker runs: give your own worker with --worker-cmd")
    return installed[DEFAULT_FAMILY]


def worker_command(env_id: str, num_envs: int) -> tuple[str, ...]:
    """The command line of the built-in worker for `env_id` with `num_envs` envs (without --address and --seed)."""
    family, game = family_of(env_id)
    return tuple(family.worker_command(game, num_envs))


def spec_of(env_id: str) -> "Optional[NamedEnvSpec]":
    """The named spec the host will read from the built-in worker for `env_id` (None: not known without starting
    it), or UnsupportedGame (its worker would refuse the name)."""
    family, game = family_of(env_id)
    return family.spec(game)
