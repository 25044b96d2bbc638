"""One person's games against a trained policy on an OpenSpiel game: the rules side of `seedleague play`.

    session = PlaySession(game, agent, seat=0, greedy=False, rng=np.random.default_rng(0))
    view = session.view()            # what the page shows: the person's view of the state, legal moves, ...
    session.move(action)             # the person's move; the agent and chance then play until the person is to move
    session.finished, session.outcome()   # after the last move: 1 / 0.5 / 0 from the person's seat

Generic over OpenSpiel's two-player zero-sum sequential games (those `seedleague.games.openspiel.load_game`
accepts): the state is shown as OpenSpiel's own text, from the person's seat while the game runs (its
information-state string, or its observation string, so a poker hand's hidden card stays hidden; a
perfect-information game's whole state, a board) and in full once it ends; moves are OpenSpiel's action strings. The agent's observation and legal mask are the
env worker's (`seedleague.games.openspiel.encode`, `legal_mask`), so it plays exactly as it was trained. A
mixture output draws one member per game for the agent's seat, as `seedleague serve` does. Chance
outcomes are sampled with their probabilities.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyspiel

from seedleague.games.openspiel import encode, legal_mask


class OpenSpielGame:
    """An OpenSpiel game as the play page serves it: its name and a fresh `PlaySession` per game (the play page
    takes any object with `name` and `session(agent, seat, greedy, rng)`; `classic.ClassicGame` is the other)."""

    def __init__(self, game: pyspiel.Game):
        self.game, self.name = game, game.get_type().short_name

    def session(self, agent: Any, seat: int, greedy: bool, rng: np.random.Generator) -> "PlaySession":
        return PlaySession(self.game, agent, seat, greedy, rng)


class PlaySession:
    """One game at a time between a person (seat `seat`) and `agent` (a Policy or PolicyMixture)."""

    def __init__(self, game: pyspiel.Game, agent: Any, seat: int, greedy: bool, rng: np.random.Generator):
        if seat not in (0, 1):
            raise ValueError(f"seat must be 0 or 1 (the game's two seats), got {seat!r}")
        self.game, self.agent, self.seat, self.greedy, self._rng = game, agent, seat, bool(greedy), rng
        self.num_actions = game.num_distinct_actions()
        self.state = game.new_initial_state()
        self.policy = agent.draw(self._rng, seat=1 - seat) if hasattr(agent, "draw") else agent
        self.history: list[dict] = []  # [{"who": "you" | "agent" | "chance", "move": text}]
        self.agent_moves: list[dict] = []  # the agent's moves, each with its action probabilities
        self._advance()

    @property
    def finished(self) -> bool:
        return self.state.is_terminal()

    def returns(self) -> list[float]:
        """Each seat's return so far (the game's, at its end)."""
        return [float(r) for r in self.state.returns()]

    def outcome(self) -> float:
        """1 win, 0.5 draw, 0 loss, from the person's seat; ValueError before the game ends."""
        if not self.finished:
            raise ValueError("the game has not ended")
        returns = self.state.returns()
        mine, theirs = returns[self.seat], returns[1 - self.seat]
        return 1.0 if mine > theirs else 0.5 if mine == theirs else 0.0

    def move(self, action: Any) -> None:
        """The person's move; ValueError naming the legal ones when it is not legal now."""
        if self.finished:
            raise ValueError("the game has ended: start a new one")
        legal = self.state.legal_actions(self.seat)
        if isinstance(action, bool) or not isinstance(action, int) or action not in legal:
            raise ValueError(f"action {action!r} is not legal now: choose one of {legal}")
        self.history.append(dict(who="you", move=self.state.action_to_string(self.seat, action)))
        self.state.apply_action(action)
        self._advance()

    def _advance(self) -> None:
        """Chance and the agent move until the person is to move or the game ends."""
        while not self.state.is_terminal() and self.state.current_player() != self.seat:
            if self.state.is_chance_node():
                outcomes, probs = zip(*self.state.chance_outcomes())
                action = int(self._rng.choice(outcomes, p=np.asarray(probs) / np.sum(probs)))
                text = self.state.action_to_string(pyspiel.PlayerId.CHANCE, action)
                self.history.append(dict(who="chance", move=text, hidden=not _perfect_information(self.game)))
                self.state.apply_action(action)
            else:
                self._agent_move()

    def _agent_move(self) -> None:
        player = self.state.current_player()
        observation = encode(self.state, player)
        mask = legal_mask(self.state, player, self.num_actions)
        probs = np.asarray(self.policy.action_probabilities(observation, mask), np.float64)
        action = int(np.argmax(probs)) if self.greedy else int(self._rng.choice(len(probs), p=probs / probs.sum()))
        legal = self.state.legal_actions(player)
        text = self.state.action_to_string(player, action)
        self.agent_moves.append(dict(move=text, probabilities=[
            dict(move=self.state.action_to_string(player, a), p=round(float(probs[a]), 4)) for a in legal]))
        self.history.append(dict(who="agent", move=text))
        self.state.apply_action(action)

    def view(self) -> dict:
        """The page's view: the state as the person may see it, the legal moves, the agent's moves, the result."""
        over = self.finished
        legal = [] if over else self.state.legal_actions(self.seat)
        return dict(
            seat=self.seat, greedy=self.greedy, finished=over,
            state=str(self.state) if over else _seen_by(self.state, self.seat),
            legal=[dict(action=a, text=self.state.action_to_string(self.seat, a)) for a in legal],
            history=[dict(who=h["who"], move="(hidden)" if h.get("hidden") and not over else h["move"])
                     for h in self.history],
            agent_moves=self.agent_moves,
            returns=[float(r) for r in self.state.returns()] if over else None,
            outcome=self.outcome() if over else None,
        )


def _perfect_information(game: pyspiel.Game) -> bool:
    return game.get_type().information == pyspiel.GameType.Information.PERFECT_INFORMATION


def _seen_by(state: pyspiel.State, seat: int) -> str:
    """OpenSpiel's text of the state as `seat` may see it: the whole state in a perfect-information game (a
    board), else its information state, else its observation, else the whole state."""
    kind = state.get_game().get_type()
    if _perfect_information(state.get_game()):
        return str(state)
    if kind.provides_information_state_string:
        return state.information_state_string(seat)
    if kind.provides_observation_string:
        return state.observation_string(seat)
    return str(state)

