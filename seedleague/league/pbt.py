"""Population-based training in the league: the selection maths, and the members' settings and tallies.

    settings = initial_settings(index=1, rng=rng)               # member 0 keeps the recipe's values (all 1)
    bottom, top = split(["a", "b", "c", "d"], [0.4, 0.6, 0.5, 0.7], share=0.25)   # (["a"], ["d"])
    gap = difference_bound(Tally(70, 0, 100), Tally(40, 0, 100), z=1.96)       # > 0: significant
    new = perturb(settings, (0.8, 1.2), rng)                     # each multiplier x0.8 or x1.2

Members are the league's learning players of role main (`LeagueConfig.pbt_interval` > 0). Each has settings:
multipliers on the learner's entropy cost (MMD's alpha, its whole anneal), learning rate (likewise) and MMD's
kl_cost, which the host passes to its update as traced values (`seedleague.rl.learner.Scales`). A *round* comes
once every member's learner has made `pbt_interval` more updates: members are ranked by their score over the
round, the rated results of their live params against the population (every snapshot and anchor they met, as
the payoff table counts them) since the last round, (wins + draws / 2) / games. Each member of the bottom `share`
picks a member of the top share at random and, only if the lower confidence bound of the two scores'
difference is above zero, copies its newest snapshot (params, optimiser state, magnet, param average) and its
settings, perturbed (Jaderberg et al. 2017, "Population Based Training of Neural Networks": truncation
selection, then perturb by 0.8 or 1.2; TLeague's mutable hyperparameters, Sun et al. 2020, do the same).

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
    """A member's rated results in the current round: wins, draws (each half a win) and games."""

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
    round that was not replaced (`evidence` says why). `evidence`: the scores, games and bound that decided."""

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
            return (f"round {self.round}: {self.member} copied {self.source_key} ({self.new.text()}): score "
                    f"{e.get('score', 0):.3f} over {e.get('games', 0):.0f} games against {self.source}'s "
                    f"{e.get('source_score', 0):.3f} over {e.get('source_games', 0):.0f}, gap >= {e.get('bound', 0):.3f}")
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


def difference_bound(source: Tally, member: Tally, z: float) -> float:
    """The lower confidence bound of score(source) - score(member): the difference minus z standard errors,
    each score's variance bounded by p (1 - p) / games (an outcome in [0, 1] with mean p has at most that).
    -inf when either has no games. > 0: the source is better with confidence (z = 1.96: one-sided 97.5%)."""
    if source.games <= 0 or member.games <= 0:
        return -math.inf
    p, q = source.score, member.score
    error = math.sqrt(p * (1 - p) / source.games + q * (1 - q) / member.games)
    return (p - q) - z * error


@dataclasses.dataclass(frozen=True)
class RoundInput:
    """What a round reads: members in join order, their tallies and settings, each one's newest snapshot key."""

    round: int
    members: Sequence[str]
    tallies: dict
    settings: dict
    latest: dict  # member -> newest snapshot key ("" while it has none)


def plan_round(view: RoundInput, share: float, z: float, factors: tuple[float, float],
               rng: np.random.Generator) -> list[PbtRow]:
    """One row per member: EXPLOIT for a bottom member whose drawn top member beats it with confidence and has
    a snapshot to copy, KEPT for every other member (with why)."""
    scores = [view.tallies[m].score for m in view.members]
    bottom, top = split(view.members, scores, share)
    rows = []
    for member in view.members:
        mine, old = view.tallies[member], view.settings[member]
        evidence = {"score": mine.score, "games": mine.games}
        if member not in bottom:
            rows.append(PbtRow(view.round, member, KEPT, old, old, evidence=dict(evidence, why="not in the bottom share")))
            continue
        source = top[int(rng.integers(len(top)))]
        theirs = view.tallies[source]
        bound = difference_bound(theirs, mine, z)
        evidence.update(source=source, source_score=theirs.score, source_games=theirs.games, bound=bound, z=z)
        if not bound > 0:
            why = f"{source} not better with confidence (bound {bound:.3f})"
        elif not view.latest.get(source):
            why = f"{source} has no snapshot to copy yet"
        else:
            new = perturb(view.settings[source], factors, rng)
            rows.append(PbtRow(view.round, member, EXPLOIT, old, new, source, view.latest[source], evidence))
            continue
        rows.append(PbtRow(view.round, member, KEPT, old, old, evidence=dict(evidence, why=why)))
    return rows


class PbtState:
    """The members' settings, the current round's tallies and the history, rebuilt from `PbtRow` events."""

    def __init__(self, interval: int):
        self.interval = interval  # learner updates per round (0: PBT off)
        self.settings: dict[str, PbtSettings] = {}  # member -> current settings, join order
        self.tallies: dict[str, Tally] = {}
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
            self.tallies = {member: Tally() for member in self.settings}
        self.history.append(row)
        if row.kind == KEPT:
            return
        self.settings[row.member] = row.new
        self.tallies[row.member] = Tally()
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

    def count(self, player: str, outcome: float) -> None:
        """A rated result of a member's live params (its side's outcome) into this round's tally."""
        if player in self.tallies:
            self.tallies[player] = self.tallies[player].add(outcome)

    def due(self, learner_steps: dict[str, int]) -> bool:
        """Whether the next round is due: two or more members, each at least interval x (rounds + 1) updates."""
        if not self.enabled or len(self.settings) < 2:
            return False
        return min(learner_steps.get(m, 0) for m in self.settings) >= self.interval * (self.rounds + 1)

    def round_input(self, latest: dict[str, str]) -> RoundInput:
        members = list(self.settings)
        return RoundInput(self.rounds + 1, members, dict(self.tallies), dict(self.settings),
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
