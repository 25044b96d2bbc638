"""Population-based training in the league: the selection maths, and the members' settings and tallies.

    settings = initial_settings(index=1, rng=rng)               # member 0 keeps the recipe's values (all 1)
    opponents = common_opponents(tallies, min_games=100)         # met >= 100 times by every member this round
    worst = worst_case(tallies["a"], opponents, z=1.96)          # a's lowest score over them, with its bounds
    bottom, top = split(["a", "b", "c", "d"], [0.4, 0.6, 0.5, 0.7], share=0.25)   # (["a"], ["d"])
    new = perturb(settings, (0.8, 1.2), rng)                     # each multiplier x0.8 or x1.2

Members are the league's learning players of role main (`LeagueConfig.pbt_interval` > 0). Each has settings:
multipliers on the learner's entropy cost (MMD's alpha, its whole anneal), learning rate (likewise) and MMD's
kl_cost, which the host passes to its update as traced values (`seedleague.rl.learner.Scales`). A *round* comes
once every member's learner has made `pbt_interval` more updates (Jaderberg et al. 2017, "Population Based
Training of Neural Networks": truncation selection, then perturb by 0.8 or 1.2; TLeague's mutable
hyperparameters, Sun et al. 2020, do the same).

What a round ranks by: a member's *worst case* over the population, the lowest of its scores, (wins + draws / 2)
/ games, against each opponent (snapshot or anchor) that every member met at least `min_games` times in the
round. In a two-player zero-sum game what matters is how much the best response takes from a policy; against
the population the best response is the opponent that scores most against it, so the worst case is the
policy's exploitability restricted to the population (PSRO's restricted game, Lanctot et al. 2017, "A Unified
Game-Theoretic Approach to Multiagent Reinforcement Learning"). The average over the opponents met rewards a
sharp policy that beats most of a population and loses to a few (Balduzzi et al. 2018, "Re-evaluating
Evaluation": an average over a population is skewed by what the population holds); the payoff against the
population's Nash mixture, Balduzzi et al.'s Nash averaging, does not tell them apart either: under it every
pure strategy of rock-paper-scissors ties with the uniform mixture. Each member of the bottom `share` picks a
member of the top share at random and copies its newest snapshot (params, optimiser state, magnet, param
average) and its settings, perturbed, only if the two worst cases are apart with confidence: the top member's
lower bound (the lowest Wilson lower bound over the opponents) above the bottom member's upper bound (the
lowest Wilson upper bound), each at `z`.

`PbtState` holds the members' settings, the round's tallies and the history, and changes only by applying
events (`PbtRow`), as `LeagueState` does; the service stores each row before applying it, so a restarted league
replays to the same state. Pure functions of numbers and a numpy Generator; no SQL, no lock.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Optional, Sequence

import numpy as np

from seedleague.league.payoff import wilson_interval

SETTINGS = ("entropy_cost", "learning_rate", "kl_cost")  # the learner settings a member's multipliers scale
INIT, EXPLOIT, KEPT = "init", "exploit", "kept"  # kinds of PbtRow
INITIAL_RANGE = (0.5, 2.0)  # a new member's multipliers are drawn log-uniformly from this range (member 0: all 1)


@dataclasses.dataclass(frozen=True)
class PbtSettings:
    """Multipliers on the recipe's entropy cost (its anneal), learning rate (its anneal) and kl_cost."""

    entropy_cost: float = 1.0
    learning_rate: float = 1.0
    kl_cost: float = 1.0

    def __post_init__(self):
        for name in SETTINGS:
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"PBT multiplier {name} must be a finite number > 0, got {value!r}")

    def text(self) -> str:
        """E.g. "alpha x0.80 lr x1.20 kl x1.00"."""
        return f"alpha x{self.entropy_cost:.2f} lr x{self.learning_rate:.2f} kl x{self.kl_cost:.2f}"


@dataclasses.dataclass(frozen=True)
class Tally:
    """A member's rated results against one opponent in the current round: wins, draws (each half a win), games."""

    wins: float = 0.0
    draws: float = 0.0
    games: float = 0.0

    @property
    def score(self) -> float:
        """(wins + draws / 2) / games; 0.5 with no games."""
        return (self.wins + 0.5 * self.draws) / self.games if self.games > 0 else 0.5

    def add(self, outcome: float) -> "Tally":
        return Tally(self.wins + (outcome == 1.0), self.draws + (outcome == 0.5), self.games + 1)


@dataclasses.dataclass(frozen=True)
class PbtRow:
    """One stored PBT event. INIT: a member joined with `new` settings. EXPLOIT: at round `round` `member`
    copied `source`'s snapshot `source_key` and took `new` (perturbed from the source's); KEPT: a member of the
    round that was not replaced (`evidence` says why). `evidence`: what decided, as `plan_round` measured it (the
    member's games and average score, its worst case, the opponent of it and its bounds; the source's worst case
    and lower bound; the bound on the gap and z)."""

    round: int
    member: str
    kind: str
    old: PbtSettings
    new: PbtSettings
    source: str = ""
    source_key: str = ""
    evidence: dict = dataclasses.field(default_factory=dict)
    delivered: bool = False  # EXPLOIT: its copy was handed to the member's host at a check-in

    def text(self) -> str:
        """One line for logs and the standings, e.g. "round 3: main-1 copied main-2:000400 (...)"."""
        if self.kind == INIT:
            return f"{self.member} joined with {self.new.text()}"
        e = self.evidence
        if self.kind == EXPLOIT:
            return (f"round {self.round}: {self.member} copied {self.source_key} ({self.new.text()}): worst case "
                    f"{e.get('score', 0):.3f} (against {e.get('opponent', '?')}, at most {e.get('high', 0):.3f}) under "
                    f"{self.source}'s {e.get('source_score', 0):.3f} (at least {e.get('source_low', 0):.3f}), "
                    f"gap >= {e.get('bound', 0):.3f}")
        return f"round {self.round}: {self.member} kept ({e.get('why', '')})"

    def evidence_json(self) -> str:
        return json.dumps(self.evidence, sort_keys=True)


def initial_settings(index: int, rng: np.random.Generator) -> PbtSettings:
    """Member `index`'s first settings: the recipe's (all 1) for member 0, else each multiplier log-uniform in
    INITIAL_RANGE (Jaderberg et al. 2017 start each member from a random draw of its hyperparameters)."""
    if index == 0:
        return PbtSettings()
    low, high = np.log(INITIAL_RANGE)
    return PbtSettings(*(float(np.exp(rng.uniform(low, high))) for _ in SETTINGS))


def perturb(settings: PbtSettings, factors: tuple[float, float], rng: np.random.Generator) -> PbtSettings:
    """Each multiplier times one of `factors`, each with probability 1/2 (Jaderberg et al. 2017: 0.8 or 1.2)."""
    return PbtSettings(*(getattr(settings, name) * float(factors[rng.integers(2)]) for name in SETTINGS))


def split(members: Sequence[str], scores: Sequence[float], share: float) -> tuple[list[str], list[str]]:
    """(bottom, top): the max(1, floor(share * N)) lowest- and highest-scoring members (ties keep the order
    given: the earlier member ranks higher). Empty with fewer than two members."""
    if len(members) != len(scores):
        raise ValueError(f"{len(members)} members but {len(scores)} scores")
    if len(members) < 2:
        return [], []
    count = min(len(members) // 2, max(1, int(math.floor(share * len(members)))))
    order = sorted(range(len(members)), key=lambda i: (-scores[i], i))  # best first
    return [members[i] for i in order[-count:]], [members[i] for i in order[:count]]


def common_opponents(tallies: dict[str, dict[str, Tally]], min_games: float) -> list[str]:
    """The opponents every member of `tallies` (member -> opponent -> Tally) met at least `min_games` times,
    sorted; none with no members."""
    if not tallies:
        return []
    met = [{o for o, tally in mine.items() if tally.games >= min_games} for mine in tallies.values()]
    return sorted(set.intersection(*met))


@dataclasses.dataclass(frozen=True)
class WorstCase:
    """A member's lowest score over a set of opponents, and bounds on the lowest true score."""

    score: float  # min over the opponents of the measured score
    opponent: str  # the opponent it was measured against
    low: float  # min over the opponents of the Wilson lower bound: below it with confidence
    high: float  # min over the opponents of the Wilson upper bound: above it with confidence


def worst_case(mine: dict[str, Tally], opponents: Sequence[str], z: float) -> WorstCase:
    """The worst case of one member's tallies (opponent -> Tally) over `opponents` (non-empty, each tallied).

    The true worst case min_o p_o lies below every p_o, so below min_o high_o, and above min_o low_o when every
    opponent's interval holds (Wilson 1927's score interval, `payoff.wilson_interval`; not corrected for the
    number of opponents)."""
    if not opponents:
        raise ValueError("the worst case needs at least one opponent")
    tallies = [mine[o] for o in opponents]
    scores = np.array([t.score for t in tallies])
    low, high = wilson_interval(scores, np.array([t.games for t in tallies]), z)
    at = int(np.argmin(scores))  # ties: the first opponent in the order given
    return WorstCase(float(scores[at]), opponents[at], float(low.min()), float(high.min()))


@dataclasses.dataclass(frozen=True)
class RoundInput:
    """What a round reads: members in join order, their tallies (member -> opponent -> Tally) and settings, each
    one's newest snapshot key."""

    round: int
    members: Sequence[str]
    tallies: dict
    settings: dict
    latest: dict  # member -> newest snapshot key ("" while it has none)


def _measured(mine: dict[str, Tally], worst: Optional[WorstCase], count: int) -> dict:
    """A member's evidence: its round's games and average score, and its worst case over the `count` opponents."""
    games = sum(t.games for t in mine.values())
    mean = sum(t.wins + 0.5 * t.draws for t in mine.values()) / games if games else 0.5
    evidence = {"games": games, "mean": mean, "opponents": count}
    if worst is not None:
        evidence.update(score=worst.score, opponent=worst.opponent, low=worst.low, high=worst.high)
    return evidence


def plan_round(view: RoundInput, share: float, z: float, factors: tuple[float, float], rng: np.random.Generator,
               min_games: float) -> list[PbtRow]:
    """One row per member: EXPLOIT for a bottom member whose drawn top member's worst case is above its own with
    confidence (bound = the top's low - the bottom's high > 0) and who has a snapshot to copy, KEPT for every
    other member (with why). Members are ranked by their worst case over `common_opponents(..., min_games)`."""
    tallies = {m: view.tallies.get(m, {}) for m in view.members}
    opponents = common_opponents(tallies, min_games)
    worst = {m: worst_case(tallies[m], opponents, z) for m in view.members} if opponents else {}
    evidence = {m: _measured(tallies[m], worst.get(m), len(opponents)) for m in view.members}
    if not opponents:
        why = f"no opponent every member met {min_games:g} times this round"
        return [PbtRow(view.round, m, KEPT, view.settings[m], view.settings[m], evidence=dict(evidence[m], why=why))
                for m in view.members]
    bottom, top = split(view.members, [worst[m].score for m in view.members], share)
    rows = []
    for member in view.members:
        old = view.settings[member]
        if member not in bottom:
            rows.append(PbtRow(view.round, member, KEPT, old, old, evidence=dict(evidence[member], why="not in the bottom share")))
            continue
        source = top[int(rng.integers(len(top)))]
        theirs = worst[source]
        bound = theirs.low - worst[member].high
        found = dict(evidence[member], source=source, source_score=theirs.score, source_opponent=theirs.opponent,
                     source_low=theirs.low, source_games=evidence[source]["games"], bound=bound, z=z)
        if not bound > 0:
            why = f"{source} not better with confidence (bound {bound:.3f})"
        elif not view.latest.get(source):
            why = f"{source} has no snapshot to copy yet"
        else:
            new = perturb(view.settings[source], factors, rng)
            rows.append(PbtRow(view.round, member, EXPLOIT, old, new, source, view.latest[source], found))
            continue
        rows.append(PbtRow(view.round, member, KEPT, old, old, evidence=dict(found, why=why)))
    return rows


class PbtState:
    """The members' settings, the current round's tallies and the history, rebuilt from `PbtRow` events."""

    def __init__(self, interval: int):
        self.interval = interval  # learner updates per round (0: PBT off)
        self.settings: dict[str, PbtSettings] = {}  # member -> current settings, join order
        self.tallies: dict[str, dict[str, Tally]] = {}  # member -> opponent -> this round's Tally
        self.rounds = 0  # rounds held so far
        self.history: list[PbtRow] = []
        self.undelivered: dict[str, PbtRow] = {}  # member -> its newest EXPLOIT not yet handed to its host
        self.last_change: dict[str, PbtRow] = {}  # member -> its newest INIT or EXPLOIT

    @property
    def enabled(self) -> bool:
        return self.interval > 0

    def is_member(self, name: str) -> bool:
        return name in self.settings

    def apply(self, row: PbtRow) -> None:
        """One stored event. The first row of a new round ends the previous round's tallies."""
        if row.kind != INIT and row.round > self.rounds:
            self.rounds = row.round
            self.tallies = {member: {} for member in self.settings}
        self.history.append(row)
        if row.kind == KEPT:
            return
        self.settings[row.member] = row.new
        self.tallies[row.member] = {}
        self.last_change[row.member] = row
        if row.kind == EXPLOIT and not row.delivered:
            self.undelivered[row.member] = row

    def delivered(self, member: str) -> None:
        """`member`'s waiting copy was handed to its host (its stored row is marked so)."""
        row = self.undelivered.pop(member, None)
        if row is None:
            return
        done = dataclasses.replace(row, delivered=True)
        self.history[next(i for i in reversed(range(len(self.history))) if self.history[i] is row)] = done
        if self.last_change.get(member) is row:
            self.last_change[member] = done

    def count(self, player: str, opponent: str, outcome: float) -> None:
        """A rated result of a member's live params against `opponent` (its side's outcome) into this round's tally."""
        if player in self.tallies:
            mine = self.tallies[player]
            mine[opponent] = mine.get(opponent, Tally()).add(outcome)

    def due(self, learner_steps: dict[str, int]) -> bool:
        """Whether the next round is due: two or more members, each at least interval x (rounds + 1) updates."""
        if not self.enabled or len(self.settings) < 2:
            return False
        return min(learner_steps.get(m, 0) for m in self.settings) >= self.interval * (self.rounds + 1)

    def round_input(self, latest: dict[str, str]) -> RoundInput:
        members = list(self.settings)
        return RoundInput(self.rounds + 1, members, {m: dict(t) for m, t in self.tallies.items()}, dict(self.settings),
                          {m: latest.get(m, "") for m in members})

    def note(self, member: str) -> str:
        """The standings' text for a member: its settings and its newest change."""
        if member not in self.settings:
            return ""
        last = self.last_change.get(member)
        copied = f", copied {last.source_key} at round {last.round}" if last is not None and last.kind == EXPLOIT else ""
        return self.settings[member].text() + copied


def row_settings(values: Optional[Sequence[float]]) -> PbtSettings:
    """PbtSettings from stored multipliers in SETTINGS order."""
    return PbtSettings(*map(float, values)) if values else PbtSettings()
