"""One person's games against a trained policy on a PettingZoo classic game: the rules side of `seedleague play`
for env ids "pettingzoo:classic/<game>" (tictactoe_v3, connect_four_v3, ...).

    game = ClassicGame("tictactoe_v3")
    session = game.session(agent, seat=0, greedy=False, rng=np.random.default_rng(0))
    session.view(); session.move(action); session.finished, session.outcome()   # as session.PlaySession

Generic over the classic games the PettingZoo worker steps (`seedleague.games.pettingzoo_classic`): seat s is the
env's agent s, and the agent sees exactly what the worker sends a host (`seat_observation`, the `action_mask`), so
it plays as it was trained. PettingZoo gives no text for a state or a move, so both are read off the board the
person's agent observes: an [H, W, C] board is drawn as a grid, a cell showing the first of its planes that is set
(1, 2, ...; "." for none: in the classic games plane 1 is the observing player's pieces, 2 the opponent's), and a
move is named by the cells it changes on that board when it is tried on a replay of the game ("move 4: row 1 col
1"); a vector observation is shown as its numbers and its moves by their ids. The result is the agents' summed rewards.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from seedleague.games.pettingzoo_classic import make_aec_env, seat_observation

MAX_NAMED_MOVES = 64  # moves named by trying them on a copy; beyond, by their ids ("move 17")


class ClassicGame:
    """A PettingZoo classic game as the play page serves it (see session.OpenSpielGame)."""

    def __init__(self, game_name: str):
        make_aec_env(game_name).close()  # UnsupportedClassicGame, in one line, for a game the worker would refuse
        self.game_name, self.name = game_name, game_name

    def session(self, agent: Any, seat: int, greedy: bool, rng: np.random.Generator) -> "ClassicSession":
        return ClassicSession(self.game_name, agent, seat, greedy, rng)


class ClassicSession:
    """One game between a person (seat `seat`) and `agent` (a Policy or PolicyMixture); see session.PlaySession."""

    def __init__(self, game_name: str, agent: Any, seat: int, greedy: bool, rng: np.random.Generator):
        if seat not in (0, 1):
            raise ValueError(f"seat must be 0 or 1 (the game's two seats), got {seat!r}")
        self.seat, self.greedy, self._rng, self.game_name = seat, bool(greedy), rng, game_name
        self.env = make_aec_env(game_name)
        self._seed = int(rng.integers(2**31))
        self.env.reset(seed=self._seed)
        self._played: list[int] = []  # every move so far, replayed to name the next ones (`_names`)
        self._trial = None  # the env the replays run in
        self.agents = list(self.env.possible_agents)
        self.policy = agent.draw(rng, seat=1 - seat) if hasattr(agent, "draw") else agent
        self._returns = np.zeros(len(self.agents))
        self.history: list[dict] = []
        self.agent_moves: list[dict] = []
        self._advance()

    @property
    def finished(self) -> bool:
        env = self.env
        return not env.agents or all(env.terminations[a] or env.truncations[a] for a in env.agents)

    def returns(self) -> list[float]:
        return [float(r) for r in self._returns]

    def outcome(self) -> float:
        """1 win, 0.5 draw, 0 loss, from the person's seat; ValueError before the game ends."""
        if not self.finished:
            raise ValueError("the game has not ended")
        mine, theirs = self._returns[self.seat], self._returns[1 - self.seat]
        return 1.0 if mine > theirs else 0.5 if mine == theirs else 0.0

    def _mover(self) -> int:
        return self.agents.index(self.env.agent_selection)

    def _legal(self) -> list[int]:
        return [int(a) for a in np.flatnonzero(self.env.observe(self.env.agent_selection)["action_mask"])]

    def move(self, action: Any) -> None:
        """The person's move; ValueError naming the legal ones when it is not legal now."""
        if self.finished:
            raise ValueError("the game has ended: start a new one")
        legal = self._legal()
        if isinstance(action, bool) or not isinstance(action, int) or action not in legal:
            raise ValueError(f"action {action!r} is not legal now: choose one of {legal}")
        self.history.append(dict(who="you", move=self._names([action])[action]))
        self._step(action)
        self._advance()

    def _step(self, action: int) -> None:
        self.env.step(action)
        self._played.append(action)
        self._returns += [self.env.rewards.get(a, 0.0) for a in self.agents]

    def _advance(self) -> None:
        """The agent moves until the person is to move or the game ends."""
        while not self.finished and self._mover() != self.seat:
            observed = self.env.observe(self.env.agent_selection)
            mask = np.asarray(observed["action_mask"], bool)
            probs = np.asarray(self.policy.action_probabilities(seat_observation(observed["observation"]), mask),
                               np.float64)
            action = int(np.argmax(probs)) if self.greedy else int(self._rng.choice(len(probs), p=probs / probs.sum()))
            legal = [int(a) for a in np.flatnonzero(mask)]
            names = self._names(legal)
            self.agent_moves.append(dict(move=names.get(action, f"move {action}"), probabilities=[
                dict(move=names[a], p=round(float(probs[a]), 4)) for a in legal]))
            self.history.append(dict(who="agent", move=names.get(action, f"move {action}")))
            self._step(action)

    def _board(self, env: Any) -> np.ndarray:
        """The person's agent's observation in `env`, as the env gives it ([H, W, C] for a board)."""
        return np.asarray(env.observe(self.agents[self.seat])["observation"])

    def _names(self, actions: list[int]) -> dict[int, str]:
        """Each move named by the cells it changes on the person's board, tried on a replay of the game so far (a
        copy of a PettingZoo env is a fresh one: its pickling rebuilds it); by its id where the replay differs."""
        board = self._board(self.env)
        names = {a: f"move {a}" for a in actions}
        if board.ndim != 3 or len(actions) > MAX_NAMED_MOVES:
            return names
        if self._trial is None:
            self._trial = make_aec_env(self.game_name)
        for action in actions:
            self._trial.reset(seed=self._seed)
            for played in self._played:
                self._trial.step(played)
            if not np.array_equal(self._board(self._trial), board):
                return {a: f"move {a}" for a in actions}  # the game does not replay from its seed: ids only
            self._trial.step(action)
            cells = np.argwhere((self._board(self._trial) != board).any(axis=2))
            if len(cells):
                names[action] += ": " + ", ".join(f"row {r} col {c}" for r, c in cells[:2])
        return names

    def view(self) -> dict:
        """The page's view, as session.PlaySession's: the board as the person's agent sees it, legal moves, ..."""
        over = self.finished
        legal = [] if over else self._legal()
        names = self._names(legal)
        return dict(
            seat=self.seat, greedy=self.greedy, finished=over, state=board_text(self._board(self.env)),
            legal=[dict(action=a, text=names[a]) for a in legal], history=list(self.history),
            agent_moves=self.agent_moves, returns=self.returns() if over else None,
            outcome=self.outcome() if over else None,
        )


def board_text(board: np.ndarray) -> str:
    """An [H, W, C] board as a grid of the first plane set in each cell (1-based; "." for none), with row and column
    numbers; any other observation as its numbers."""
    if board.ndim != 3:
        return np.array2string(np.asarray(board), precision=3, max_line_width=100)
    height, width, _ = board.shape
    set_ = board != 0
    first = np.where(set_.any(axis=2), set_.argmax(axis=2) + 1, 0)
    head = "     " + " ".join(f"{c:>2}" for c in range(width))
    rows = [f"row{r:>2} " + " ".join(f"{(str(v) if v else '.'):>2}" for v in first[r]) for r in range(height)]
    return "\n".join([head, *rows, "", "1: your pieces, 2: the agent's (the planes of your seat's observation)"])
