"""Matches of a policy against reference opponents in two-player OpenSpiel games.

This file owns playing many games at once in lockstep (so the policy's moves of
all running games go through one batched forward pass), alternating seats half
and half, and counting wins, draws and losses from the policy's side:

    stats = vs_random(game, policy, games=200)
    stats = vs_mcts(game, policy, games=20, simulations=1000)    # pyspiel.MCTSBot, random rollouts
    stats = head_to_head(game, policy_a, policy_b, games=200)     # from policy_a's side
    stats.win_rate, stats.per_seat[0].wins, stats.to_dict()

A game counts as a win when the policy's return is higher than its opponent's.
Any agent with `act(states) -> actions` can play through `play`.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Optional, Protocol, Sequence

import numpy as np
import pyspiel

from seedleague.games.openspiel import encode, legal_mask
from seedleague.artifacts.policy import Policy
from seedleague.eval.openspiel_eval import GameLike, as_game, check_fits


class Agent(Protocol):
    """Chooses the move of the player to act in each of several states (none terminal or chance)."""

    def act(self, states: Sequence[pyspiel.State]) -> list[int]: ...


class PolicyAgent:
    """A seedleague policy: one batched forward pass for all the states it is asked about."""

    def __init__(self, policy: Policy, greedy: bool = False, seed: int = 0):
        self.policy, self.greedy = policy, greedy
        self._rng = np.random.default_rng(seed)
        self._width = 0  # rows of every forward pass: the most states asked about at once so far

    def act(self, states: Sequence[pyspiel.State]) -> list[int]:
        num_actions, count = self.policy.spec.num_actions, len(states)
        # Padding every call to one width (all-legal dummy rows) keeps the forward pass at one
        # compiled shape as games finish, instead of one compile per shrinking batch size.
        self._width = max(self._width, count)
        observation = np.stack([encode(s, s.current_player()) for s in states])
        observation = np.concatenate([observation, np.zeros((self._width - count,) + observation.shape[1:], observation.dtype)])
        mask = np.ones((self._width, num_actions), bool)
        mask[:count] = [legal_mask(s, s.current_player(), num_actions) for s in states]
        actions = self.policy.act(observation, mask, greedy=self.greedy, rng=self._rng)
        return np.asarray(actions)[:count].tolist()


class RandomAgent:
    """Uniformly random legal moves."""

    def __init__(self, seed: int = 0):
        self._rng = np.random.default_rng(seed)

    def act(self, states: Sequence[pyspiel.State]) -> list[int]:
        return [int(self._rng.choice(s.legal_actions())) for s in states]


class BotAgent:
    """An OpenSpiel bot (e.g. pyspiel.MCTSBot), one state at a time; it must not keep
    per-game state between calls (MCTSBot searches afresh each move)."""

    def __init__(self, bot: pyspiel.Bot):
        self.bot = bot

    def act(self, states: Sequence[pyspiel.State]) -> list[int]:
        return [int(self.bot.step(s)) for s in states]


def mcts_agent(game: pyspiel.Game, simulations: int, uct_c: float = 2.0, rollouts: int = 1, seed: int = 0,
               solve: bool = True) -> BotAgent:
    """OpenSpiel's MCTS (UCT, `simulations` per move, `rollouts` random rollouts per leaf; seeded)."""
    if simulations < 1 or rollouts < 1:
        raise ValueError(f"MCTS needs simulations >= 1 and rollouts >= 1, got {simulations} and {rollouts}")
    evaluator = pyspiel.RandomRolloutEvaluator(rollouts, seed)
    bot = pyspiel.MCTSBot(game, evaluator, uct_c, simulations, 1000, solve, seed + 1, False)
    return BotAgent(bot)


@dataclasses.dataclass(frozen=True)
class SeatStats:
    """Outcomes of the games played from one seat."""

    games: int
    wins: int
    draws: int
    losses: int


@dataclasses.dataclass(frozen=True)
class MatchStats:
    """Outcomes from the evaluated side; `per_seat[i]` counts the games it played as player i."""

    opponent: str
    games: int
    wins: int
    draws: int
    losses: int
    per_seat: tuple[SeatStats, SeatStats]
    mean_return: float  # the evaluated side's mean return (chips in poker)
    seconds: float

    @property
    def win_rate(self) -> float:
        return self.wins / self.games if self.games else 0.0

    @property
    def draw_rate(self) -> float:
        return self.draws / self.games if self.games else 0.0

    @property
    def loss_rate(self) -> float:
        return self.losses / self.games if self.games else 0.0

    @property
    def score(self) -> float:
        """(wins + draws / 2) / games: the league's win-rate convention."""
        return (self.wins + 0.5 * self.draws) / self.games if self.games else 0.5

    @property
    def games_per_s(self) -> float:
        return self.games / self.seconds if self.seconds > 0 else float("inf")

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["per_seat"] = [dataclasses.asdict(s) for s in self.per_seat]
        data.update(win_rate=self.win_rate, draw_rate=self.draw_rate, loss_rate=self.loss_rate, score=self.score,
                    games_per_s=self.games_per_s)
        return data


def _finish_chance(state: pyspiel.State, rng: np.random.Generator) -> None:
    while state.is_chance_node():
        outcomes, probs = zip(*state.chance_outcomes())
        state.apply_action(int(outcomes[rng.choice(len(outcomes), p=probs)]))


def _tally(opponent: str, outcome_g: np.ndarray, seat_g: np.ndarray, return_g: np.ndarray, seconds: float) -> MatchStats:
    """MatchStats from per-game outcomes (+1 win, 0 draw, -1 loss) and the evaluated side's seats."""
    def counts(mask: np.ndarray) -> SeatStats:
        o = outcome_g[mask]
        return SeatStats(int(mask.sum()), int((o > 0).sum()), int((o == 0).sum()), int((o < 0).sum()))

    total = counts(np.ones_like(seat_g, bool))
    return MatchStats(opponent, total.games, total.wins, total.draws, total.losses,
                      (counts(seat_g == 0), counts(seat_g == 1)),
                      float(return_g.mean()) if len(return_g) else 0.0, seconds)


WAVE = 2  # a time-bound match's first games at once, one from each seat (`play`'s max_seconds)


def play(game: GameLike, agent: Agent, opponent: Agent, games: int, seed: int = 0,
         opponent_name: str = "opponent", max_seconds: Optional[float] = None) -> MatchStats:
    """Play `games` games of `agent` against `opponent`, all at once in lockstep; `agent` sits
    at seat 0 in the even-numbered games and seat 1 in the odd ones. Stats are from `agent`'s side.
    With `max_seconds`, in waves instead, each as many games as were played before it (WAVE at first), none begun once
    `max_seconds` have passed: at least WAVE games, and the whole match within twice its seconds plus the first wave
    (an MCTS opponent's random rollouts in chess or hive take minutes for the games a small game plays in seconds)."""
    game = as_game(game)
    if games < 1:
        raise ValueError(f"games must be >= 1, got {games}")
    start = time.perf_counter()
    rng = np.random.default_rng(seed)  # chance outcomes
    returns, seats = [], []
    played = 0
    while played < games and (max_seconds is None or not played or time.perf_counter() - start < max_seconds):
        count = games - played if max_seconds is None else min(max(WAVE, played), games - played)
        seat_g = (played + np.arange(count)) % 2
        returns.append(_play_games(game, agent, opponent, seat_g, rng))
        seats.append(seat_g)
        played += count
    returns_g, seat_g = np.concatenate(returns), np.concatenate(seats)
    mine_g, theirs_g = returns_g[np.arange(played), seat_g], returns_g[np.arange(played), 1 - seat_g]
    return _tally(opponent_name, np.sign(mine_g - theirs_g), seat_g, mine_g, time.perf_counter() - start)


def _play_games(game: pyspiel.Game, agent: Agent, opponent: Agent, seat_g: np.ndarray,
                rng: np.random.Generator) -> np.ndarray:
    """Returns [G, 2] of games played in lockstep, `agent` at seat `seat_g[g]` in game g."""
    states = [game.new_initial_state() for _ in seat_g]
    active = list(range(len(seat_g)))
    while active:
        turns: tuple[list[int], list[int]] = ([], [])  # games where agent / opponent moves now
        for g in active:
            _finish_chance(states[g], rng)
            if not states[g].is_terminal():
                turns[0 if states[g].current_player() == seat_g[g] else 1].append(g)
        for mover, playing in ((agent, turns[0]), (opponent, turns[1])):
            if playing:
                for g, action in zip(playing, mover.act([states[g] for g in playing])):
                    states[g].apply_action(action)
        active = [g for g in active if not states[g].is_terminal()]
    return np.array([s.returns() for s in states])


def vs_random(game: GameLike, policy: Policy, games: int = 100, greedy: bool = False, seed: int = 0,
              max_seconds: Optional[float] = None) -> MatchStats:
    """`policy` against uniformly random legal moves (`max_seconds`: see `play`)."""
    game = as_game(game)
    check_fits(game, policy)
    return play(game, PolicyAgent(policy, greedy, seed + 1), RandomAgent(seed + 2), games, seed, "random",
                max_seconds)


def vs_mcts(game: GameLike, policy: Policy, games: int = 20, simulations: int = 100, uct_c: float = 2.0,
            rollouts: int = 1, greedy: bool = False, seed: int = 0, max_seconds: Optional[float] = None) -> MatchStats:
    """`policy` against pyspiel.MCTSBot with a RandomRolloutEvaluator (seeded; `max_seconds`: see `play`)."""
    game = as_game(game)
    check_fits(game, policy)
    bot = mcts_agent(game, simulations, uct_c, rollouts, seed + 2)
    return play(game, PolicyAgent(policy, greedy, seed + 1), bot, games, seed, f"mcts{simulations}", max_seconds)


def head_to_head(game: GameLike, policy_a: Policy, policy_b: Policy, games: int = 100, greedy: bool = False,
                 seed: int = 0) -> MatchStats:
    """`policy_a` against `policy_b`, seats alternating; stats from policy_a's side."""
    game = as_game(game)
    check_fits(game, policy_a)
    check_fits(game, policy_b)
    name = getattr(policy_b, "source", "") or "policy_b"
    return play(game, PolicyAgent(policy_a, greedy, seed + 1), PolicyAgent(policy_b, greedy, seed + 2), games,
                seed, name)
