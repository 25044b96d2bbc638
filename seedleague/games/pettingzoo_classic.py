"""How a PettingZoo classic (AEC, turn-based) game is made and shown to a policy: the one encoding shared by the
PettingZoo worker (envs/pettingzoo_classic.py) and `seedleague play`.

    env = make_aec_env("tictactoe_v3")     # one AEC env; UnsupportedClassicGame (one line) for a game that does not fit
    observed = env.observe(agent)
    seat_observation(observed["observation"]), observed["action_mask"]   # what the policy of that seat gets

Seat s is the env's agent s (`possible_agents` order). A seat's observation is its `observe(agent)["observation"]`
as float32, an [H, W, C] board transposed to [C, H, W] planes (the layout the host's board torso reads; a vector
stays as it is); its legal mask is the `action_mask` while it is to move. Env ids: "pettingzoo:classic/<game>".
Never imports jax.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from seedleague import games

PREFIX = "pettingzoo:classic/"  # env ids of the classic games: "pettingzoo:classic/<game>"

NAMESPACE = "classic"
# Two agents. The host would seat more (one learner seat, a snapshot in every other) and score the learner's seat by
# the sign of its return, but no classic game that installs here has more than two (hanabi_v5, 2-5 players, needs
# shimmy), so none was tried: more agents are refused rather than trained untested.
NUM_SEATS = 2


class UnsupportedClassicGame(games.UnsupportedGame):
    """The name is not a classic PettingZoo game this worker can step (unknown, not installable, or not fitting)."""


def _registered() -> list[str]:
    """Every classic AEC game in PettingZoo's registry, as module names (tictactoe_v3)."""
    import pettingzoo

    return sorted(spec.id[len(NAMESPACE) + 1:].replace("-v", "_v") for spec in pettingzoo.aec_registry.values()
                  if spec.namespace == NAMESPACE)


@functools.lru_cache(maxsize=1)
def available_games() -> tuple[str, ...]:
    """The classic games `make_aec_env` accepts here (their packages installed, their spaces fitting)."""
    games = []
    for name in _registered():
        try:
            _make(name).close()
        except UnsupportedClassicGame:
            continue
        games.append(name)
    return tuple(games)


def make_aec_env(game_name: str) -> Any:
    """One AEC env of PettingZoo's registered `classic/<game_name>`. Raises UnsupportedClassicGame naming
    the problem and the classic games that work here."""
    try:
        return _make(game_name)
    except UnsupportedClassicGame as error:
        raise UnsupportedClassicGame(f"{error}; the classic games that work here: "
                                     f"{', '.join(available_games())}") from None


def _make(game_name: str) -> Any:
    import pettingzoo
    import pettingzoo.env_registry.exceptions as registry_errors

    problem = f"unsupported PettingZoo game 'classic/{game_name}'"
    try:
        spec = pettingzoo.spec("aec", f"{NAMESPACE}/{game_name}")
    except registry_errors.PettingZooRegistryError:
        raise UnsupportedClassicGame(f"{problem}: no such classic game (registered: {', '.join(_registered())})") \
            from None
    try:
        env = pettingzoo.make("aec", spec)
    except (registry_errors.FailedToImport, ImportError) as error:  # a package the game needs is not installed
        cause = error.__cause__ or error
        raise UnsupportedClassicGame(f"{problem}: it does not import here ({str(cause).splitlines()[0]})") from None
    agents = list(env.possible_agents)
    observation, action = env.observation_space(agents[0]), env.action_space(agents[0])
    fits = (len(agents) == NUM_SEATS and hasattr(action, "n")
            and all(env.action_space(agent) == action and env.observation_space(agent) == observation
                    for agent in agents)
            and hasattr(observation, "spaces") and "action_mask" in observation.spaces
            and getattr(observation.spaces.get("observation"), "shape", None))
    if not fits:
        env.close()
        raise UnsupportedClassicGame(
            f"{problem}: the worker steps games of {NUM_SEATS} agents with a Dict observation (a Box 'observation' "
            f"and an 'action_mask') and one Discrete action space; it has agents {agents}, observation space "
            f"{observation} and action space {action}")
    return env


def seat_observation_shape(shape: tuple) -> tuple:
    """An [H, W, C] board as [C, H, W] planes; any other shape as it is."""
    return (shape[2], shape[0], shape[1]) if len(shape) == 3 else tuple(shape)


def seat_observation(board: np.ndarray) -> np.ndarray:
    """A seat's observation as the worker sends it: float32, an [H, W, C] board as [C, H, W] planes."""
    board = np.asarray(board, np.float32)
    return np.transpose(board, (2, 0, 1)) if board.ndim == 3 else board


def game_name(env_name: str) -> str | None:
    """"tictactoe_v3" for "pettingzoo:classic/tictactoe_v3"; None for an env of another family."""
    return env_name[len(PREFIX):] if env_name.startswith(PREFIX) else None
