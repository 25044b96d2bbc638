"""How an OpenSpiel game state is shown to a policy: the one encoding shared by the
OpenSpiel env worker (envs/openspiel_worker.py), `seedleague eval` and the Python policy API.

A seat's observation is its information-state tensor (the full private history,
so a feed-forward policy is enough for perfect recall), or, for games that
provide no information state, the observation tensor followed by one constant
plane per player that marks whose view it is (and, for imperfect-information games,
the move number: `shows_the_clock`). OpenSpiel's observation tensors of
board games (tic_tac_toe, connect_four, ...) are absolute, the same for both
players (plane 0 = player 0's pieces), so without the seat planes a network would
have to infer its own colour from the parity of the pieces on the board.
Actions are OpenSpiel's distinct
action ids; the legal mask of a seat that is not to move is all False.
"""

from __future__ import annotations

import difflib
import re

import numpy as np
import pyspiel

from seedleague import games

PREFIX = "openspiel:"  # env ids of OpenSpiel games: "openspiel:<game>"


class UnsupportedGame(games.UnsupportedGame):
    """The named game is not a two-player zero-sum sequential game with a tensor to observe."""


def game_name(env_name: str) -> str | None:
    """"kuhn_poker" for "openspiel:kuhn_poker"; None for an env that is not an OpenSpiel game."""
    return env_name[len(PREFIX):] if env_name.startswith(PREFIX) else None


def load_game(name: str) -> pyspiel.Game:
    """Load a game by OpenSpiel name (parameters allowed, e.g. `leduc_poker(players=2)`) and check it fits.

    Raises UnsupportedGame naming the game, what does not fit and what to change: an unknown
    name, a player count other than two, utilities that are not zero-sum (constant-sum games
    are refused too: league results and returns are read as zero-sum, a win being a positive
    return), simultaneous moves, or neither an information-state nor an observation tensor.
    """
    _check_game_names(name)
    try:
        game = pyspiel.load_game(name)
    except (pyspiel.SpielError, LookupError, RuntimeError, ValueError) as error:  # nfg_game without its file: IndexError
        first = (str(error).strip().splitlines() or ["unknown game"])[0].split(" Available games")[0]
        hint = ("; a parameter that is itself a game takes parentheses, even without parameters of its own, "
                "e.g. turn_based_simultaneous_game(game=blotto())") if "Expected type: kGame" in first else ""
        raise UnsupportedGame(f"OpenSpiel has no game {name!r} ({first}): check the name and its parameters, "
                              f"e.g. kuhn_poker, leduc_poker(players=2), connect_four{hint}") from None
    kind = game.get_type()
    if game.num_players() != 2:
        raise UnsupportedGame(f"{name} is a {game.num_players()}-player game; seedleague's OpenSpiel worker plays "
                              f"two-player games: {_two_player_hint(kind)}")
    if kind.utility != pyspiel.GameType.Utility.ZERO_SUM:
        raise UnsupportedGame(f"{name} is {kind.utility.name.lower().replace('_', '-')}, not zero-sum; seedleague's "
                              "self-play and league results assume one seat's gain is the other's loss: pick a "
                              "two-player zero-sum game (kuhn_poker, leduc_poker, connect_four, ...)")
    if kind.dynamics != pyspiel.GameType.Dynamics.SEQUENTIAL:
        inner = name if "(" in name else f"{name}()"
        raise UnsupportedGame(f"{name} is not sequential (turn-based); simultaneous-move games are played in "
                              f"OpenSpiel's turn-based form: turn_based_simultaneous_game(game={inner})")
    if not (kind.provides_information_state_tensor or kind.provides_observation_tensor):
        raise UnsupportedGame(f"{name} provides neither an information-state tensor (what the worker shows for "
                              "imperfect-information games) nor an observation tensor, so the OpenSpiel worker has "
                              "nothing to observe: pick a variant that provides one (e.g. phantom_ttt rather than "
                              "phantom_ttt_ir)")
    return game


def _two_player_hint(kind: pyspiel.GameType) -> str:
    """What to change for a game of another player count: its two-player form where it has one, else another game
    (or, for a one-player or team game, a worker of one's own)."""
    if "players" in kind.parameter_specification and kind.min_num_players <= 2 <= kind.max_num_players:
        return f"ask for its two-player form, {kind.short_name}(players=2)"
    if kind.max_num_players < 2:
        elsewhere = " (a one-player game trains as a single-agent env through a worker of your own, docs/protocol.md)"
    elif kind.utility == pyspiel.GameType.Utility.ZERO_SUM:
        elsewhere = " (a team game trains through a worker of your own declaring each seat's team, docs/protocol.md)"
    else:
        elsewhere = ""
    return f"it has no two-player form; pick a two-player game{elsewhere}"


def _check_game_names(name: str) -> None:
    """Refuse a name whose game (or a game it takes as a parameter, `game=...`) OpenSpiel does not know, naming the
    nearest known ones, before OpenSpiel itself prints its whole list of games to stderr."""
    known = pyspiel.registered_names()
    for short in re.findall(r"(?:^|game=)\s*([^(),=\s]+)", name.strip()):
        if short not in known:
            close = difflib.get_close_matches(short, known, n=3)
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            raise UnsupportedGame(f"OpenSpiel has no game {name!r} ({short!r} is not one of its {len(known)} games"
                                  f"{hint}): check the name and its parameters, e.g. kuhn_poker, "
                                  "leduc_poker(players=2), connect_four")


def payoff_bound(game: pyspiel.Game) -> float:
    """The largest absolute payoff one player can get, from the game's declared utility bounds (a spec's
    return_bound: 1 for a game won or lost, a poker game's stack)."""
    return float(max(abs(game.max_utility()), abs(game.min_utility())))


def shows_the_clock(game: pyspiel.Game) -> bool:
    """Whether a seat's observation carries the move number: an imperfect-information game without an
    information-state tensor, whose observation tensor alone forgets the history (in the turn-based
    form of oshi_zumo(coins=6,size=2,horizon=6), 394,824 information states share 324 tensors, and
    states that differ only in the moves left look the same), so a feed-forward policy could not tell
    an early position from a late one."""
    kind = game.get_type()
    return (not kind.provides_information_state_tensor
            and kind.information == pyspiel.GameType.Information.IMPERFECT_INFORMATION)


def _clock_size(game: pyspiel.Game, rank: int) -> int:
    """Entries the clock adds: a one-hot of the move number (0..max_game_length) after a flat
    observation, one plane of move number / max_game_length after board planes."""
    if not shows_the_clock(game):
        return 0
    return game.max_game_length() + 1 if rank == 1 else 1


def observation_shape(game: pyspiel.Game) -> tuple[int, ...]:
    if game.get_type().provides_information_state_tensor:
        return tuple(game.information_state_tensor_shape())
    planes, *rest = game.observation_tensor_shape()
    return (planes + game.num_players() + _clock_size(game, 1 + len(rest)), *rest)


class Encoder:
    """Writes observations of one game into caller-owned buffers, with the game's
    type and shape looked up once (the worker encodes every seat of every env at
    every step; `encode` is the one-off form)."""

    def __init__(self, game: pyspiel.Game):
        self.shape = observation_shape(game)
        self.num_actions = game.num_distinct_actions()
        self._information_state = game.get_type().provides_information_state_tensor
        self._clock = _clock_size(game, len(self.shape))
        self._max_moves = max(1, game.max_game_length())
        self._seats = game.num_players()
        self._board_planes = None if self._information_state else self.shape[0] - self._seats - self._clock

    def observation(self, state: pyspiel.State, player: int, out: np.ndarray) -> None:
        """out[...] = `player`'s observation of `state`; `out` is a float32 array shaped `self.shape`."""
        if self._information_state:
            out.flat[:] = state.information_state_tensor(player)
            return
        planes = self._board_planes
        out[:planes].flat[:] = state.observation_tensor(player)
        out[planes:] = 0.0
        out[planes + player] = 1.0  # whose view this is
        if self._clock:
            moves = min(state.move_number(), self._max_moves)
            if len(self.shape) == 1:
                out[planes + self._seats + moves] = 1.0
            else:
                out[planes + self._seats] = moves / self._max_moves


def encode(state: pyspiel.State, player: int) -> np.ndarray:
    """The float32 observation of `player` in `state`, shaped `observation_shape(game)`."""
    encoder = Encoder(state.get_game())
    observation = np.empty(encoder.shape, np.float32)
    encoder.observation(state, player, observation)
    return observation


def legal_mask(state: pyspiel.State, player: int, num_actions: int) -> np.ndarray:
    """[num_actions] bool: the actions `player` may take now (all False when it is not to move)."""
    mask = np.zeros(num_actions, bool)
    if not state.is_terminal() and state.current_player() == player:
        mask[state.legal_actions(player)] = True
    return mask
