"""PettingZoo's multi-particle envs (the `mpe2` package, formerly `pettingzoo.mpe`) by name, as a
`pettingzoo_parallel.ParallelVectorGame`.

    game = make_mpe_game("simple_spread_v3", num_envs=8)                        # 3 agents, one team
    game = make_mpe_game("simple_tag_v3(num_good=2,continuous_actions=True)", 8)  # teams: adversary, good

A name is an `mpe2` module, `simple_spread_v3`, optionally with keyword arguments
of its env in parentheses, Python literals: `simple_tag_v3(num_good=2)`. Unknown
games, unknown keywords, `render_mode` (the worker draws nothing) and
`curriculum` (the worker never advances its stages) are refused by name
(`UnsupportedMPEGame`) before any env runs. Actions are discrete by default;
`continuous_actions=True` gives every agent a Box in [0, 1], one continuous
head.

Teams come from the env: an agent whose particle is an `adversary` (simple_tag's
chasers, simple_adversary's and simple_push's adversary, simple_crypto's eve,
simple_world_comm's leader and adversaries) is in team `adversary`, every other
agent in team `good`, as MPE's own `num_good` / `num_adversaries` say. Games with
no adversary (simple_spread, simple_reference, simple_speaker_listener, ...)
are one team: every seat is played by the one learning policy (parameter
sharing). MPE rewards are general-sum (a team's gain is not the other's loss), so
MPE games train outside the league, every seat learning, teams reported as
episode stats `return_adversary` and `return_good` (docs/protocol.md section
13). Episodes end by truncation at the env's `max_cycles` (25 by default): the
last observation goes to the host as `final_observation`. Never imports jax.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from typing import Any

from envs.pettingzoo_parallel import ParallelVectorGame, UnsupportedParallelEnv

NAMESPACE = "mpe"
REFUSED_KWARGS = {
    "render_mode": "the worker draws nothing",
    "curriculum": "the worker never advances the curriculum's stages",
}


class UnsupportedMPEGame(ValueError):
    """The name is not an MPE game the worker can step, or its keyword arguments are refused (message says why)."""


def available_games() -> tuple[str, ...]:
    """The mpe2 games, as module names (simple_spread_v3)."""
    try:
        from mpe2.all_modules import mpe_environments
    except ImportError as error:
        raise UnsupportedMPEGame(f"the MPE games need the mpe2 package, which does not import here ({error}): "
                                 "reinstall seedleague (`make install`), whose dependencies include it") from None
    return tuple(sorted(name.partition("/")[2] for name in mpe_environments))


def parse_game_name(name: str) -> tuple[str, dict]:
    """("simple_tag_v3", {"num_good": 2}) for "simple_tag_v3(num_good=2)"; raises UnsupportedMPEGame."""
    game, paren, rest = name.partition("(")
    game = game.strip()
    if not paren:
        return game, {}
    problem = (f"bad MPE game name '{NAMESPACE}/{name}': give keyword arguments as Python literals, e.g. "
               "mpe/simple_tag_v3(num_good=2,continuous_actions=True)")
    try:
        call = ast.parse(f"f({rest}", mode="eval").body
        if not isinstance(call, ast.Call) or call.args or any(k.arg is None for k in call.keywords):
            raise ValueError("positional arguments")
        return game, {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    except (SyntaxError, ValueError):
        raise UnsupportedMPEGame(problem) from None


def _module(game: str) -> Any:
    games = available_games()
    if game not in games:
        raise UnsupportedMPEGame(f"unsupported PettingZoo game '{NAMESPACE}/{game}': no such MPE game (mpe2 has: "
                                 f"{', '.join(games)})")
    return importlib.import_module(f"mpe2.{game}")


def _check_kwargs(game: str, module: Any, kwargs: dict) -> None:
    accepted = [name for name in inspect.signature(module.raw_env).parameters if name not in ("self", "kwargs")]
    for name in kwargs:
        if name in REFUSED_KWARGS:
            raise UnsupportedMPEGame(f"'{NAMESPACE}/{game}': keyword {name!r} is refused: {REFUSED_KWARGS[name]}")
        if name not in accepted:
            usable = [a for a in accepted if a not in REFUSED_KWARGS]
            raise UnsupportedMPEGame(f"'{NAMESPACE}/{game}' has no keyword {name!r}; it takes {', '.join(usable)}")


def team_of(env: Any, agent: str) -> str:
    """`adversary` for an agent whose particle is an adversary, else `good`."""
    world = env.unwrapped.world
    particle = next(a for a in world.agents if a.name == agent)
    return "adversary" if getattr(particle, "adversary", False) else "good"


def make_mpe_game(name: str, num_envs: int, seed: int = 0, max_cycles: int = 5000) -> ParallelVectorGame:
    """The VectorGame of an MPE game name (module docstring); raises UnsupportedMPEGame."""
    game, kwargs = parse_game_name(name)
    module = _module(game)
    _check_kwargs(game, module, kwargs)

    def make_env() -> Any:
        return module.parallel_env(**kwargs)

    try:
        return ParallelVectorGame(make_env, f"pettingzoo:{NAMESPACE}/{name}", num_envs, seed, max_cycles, team_of)
    except UnsupportedParallelEnv as error:
        raise UnsupportedMPEGame(f"unsupported PettingZoo game {error}") from None
    except (AssertionError, TypeError, ValueError) as error:  # the env's own checks of its keyword arguments
        raise UnsupportedMPEGame(f"'{NAMESPACE}/{name}' refused its keyword arguments {kwargs}: "
                                 f"{error or type(error).__name__}") from None
