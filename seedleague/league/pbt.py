"""Population-based training in the league: the selection maths, and the members' settings and tallies.

    settings = initial_settings(index=1, rng=rng)               # member 0 keeps the recipe's values (all 1)
    opponents = common_opponents(tallies, min_games=100)         # met >= 100 times by every member this round
    worst = worst_case(tallies["a"], opponents)                  # a's lowest score over them
    gap = separation(tallies["d"], tallies["a"], opponents)      # z of "d's worst case is above a's"
    rows = plan_round(view, Test(alpha=0.05, looks=5, min_games=100), 0.25, (0.8, 1.2), rng)
    new = perturb(settings, (0.8, 1.2), rng)                     # each multiplier x0.8 or x1.2

Members are the league's learning players of role main (`LeagueConfig.pbt_interval` > 0). Each has settings:
multipliers on the learner's entropy cost (MMD's alpha, its whole anneal), learning rate (likewise) and MMD's
kl_cost, which the host passes to its update as traced values (`seedleague.rl.learner.Scales`). Jaderberg et al.
2017 ("Population Based Training of Neural Networks"; TLeague's mutable hyperparameters, Sun et al. 2020, do the
same): exploit by truncation selection, or by "t-test selection", where a member copies another only when a
test says the other is better, then explore by perturbing each setting by 0.8 or 1.2.

A round is looked at every `pbt_interval` learner updates of the slowest member; each look ranks the members by
their *worst case* over the population, the lowest of their scores against each opponent (snapshot or anchor)
that every member met at least `min_games` times in the round, and tests each bottom member against a top member
it draws: is the top member's worst case above the bottom's with confidence (`separation`, one-sided tests built
from the per-opponent results, against `look_critical`)? A score is the mean return (the game's own payoff, e.g.
chips) when every game came with its return and the returns are more than signs (`scoring`; the test is then the
two-sample z on means with the observed variances), else (wins + draws / 2) / games (a two-proportion test): the
same games, but a won pot of 2 is not a won pot of 1. The round closes when a test passes (the bottom member
copies the top member's newest snapshot, params, optimiser state, magnet and param average, and its settings,
perturbed) or at its last look, `looks`; otherwise it stays open and gathers more games. The level is spent over
the looks by a group-sequential spending function (`seedleague.league.sequential`, Lan and DeMets 1983) or split
evenly (Bonferroni), so a round that waits for evidence does not copy more often by chance for waiting.

Why the worst case: in a two-player zero-sum game what matters is how much the best response takes from a
policy; against the population the best response is the opponent that scores most against it, so the worst case
is the policy's exploitability restricted to the population (PSRO's restricted game, Lanctot et al. 2017). The
average over the opponents met rewards a sharp policy that beats most of a population and loses to a few
(Balduzzi et al. 2018, "Re-evaluating Evaluation").

The run's output is the population's `leader`: the member best by the same worst case, in the open round when it
has a common opponent, else in the newest ranked round. `PbtState` holds the members' settings, the round's
tallies and the history, and changes only by applying events (`PbtRow`), as `LeagueState` does; the service
stores each row before applying it, so a restarted league replays to the same state. Pure functions of numbers
and a numpy Generator; no SQL, no lock.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Optional, Sequence

import numpy as np

from seedleague.league import sequential


SETTINGS = ("entropy_cost", "learning_rate", "kl_cost")  # the learner settings a member's multipliers scale
INIT, EXPLOIT, KEPT, LOOK = "init", "exploit", "kept", "look"  # kinds of PbtRow
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
    """A member's rated results against one opponent in the current round: wins, draws (each half a win), games,
    and the returns the games came with (the learner seat's return in the game's units, when reported): their
    sum and sum of squares over `valued` games, the first nonzero magnitude seen and whether another was seen."""

    wins: float = 0.0
    draws: float = 0.0
    games: float = 0.0
    value_sum: float = 0.0
    value_sq: float = 0.0
    valued: float = 0.0  # games that came with a return
    scale: float = 0.0  # the first nonzero |return| seen (0: none yet)
    graded: bool = False  # a nonzero |return| other than `scale` was seen: the returns are more than signs

    @property
    def score(self) -> float:
        """(wins + draws / 2) / games; 0.5 with no games."""
        return (self.wins + 0.5 * self.draws) / self.games if self.games > 0 else 0.5

    @property
    def mean_return(self) -> float:
        """The mean return of the valued games (0 with none)."""
        return self.value_sum / self.valued if self.valued > 0 else 0.0

    @property
    def return_var(self) -> float:
        """The unbiased sample variance of the valued games' returns (0 with fewer than two)."""
        if self.valued < 2:
            return 0.0
        return max(0.0, (self.value_sq - self.value_sum ** 2 / self.valued) / (self.valued - 1))

    def add(self, outcome: float, value: Optional[float] = None) -> "Tally":
        """This tally with one more game: its outcome, and its return when reported."""
        wins, draws = self.wins + (outcome == 1.0), self.draws + (outcome == 0.5)
        if value is None:
            return Tally(wins, draws, self.games + 1, self.value_sum, self.value_sq, self.valued, self.scale,
                         self.graded)
        size = abs(value)
        scale = self.scale or size
        graded = self.graded or (size > 0 and not math.isclose(size, scale, rel_tol=1e-6))
        return Tally(wins, draws, self.games + 1, self.value_sum + value, self.value_sq + value * value,
                     self.valued + 1, scale, graded)


RETURN, WINS = "return", "win/loss"  # how a round scores its members: mean return, or (wins + draws / 2) / games


def scoring(tallies: Sequence[Tally]) -> str:
    """RETURN when every one of `tallies` has a return for each of its games and the returns are more than signs
    (some tally saw two nonzero magnitudes, or two tallies' magnitudes differ); else WINS. Returns that are only
    signs (+c, 0, -c) carry the win/loss outcome and nothing more, and the two-proportion test keeps its
    small-sample adjustment."""
    if not tallies or any(t.valued < t.games or t.games == 0 for t in tallies):
        return WINS
    scales = [t.scale for t in tallies if t.scale > 0]
    if any(t.graded for t in tallies) or any(not math.isclose(s, scales[0], rel_tol=1e-6) for s in scales):
        return RETURN
    return WINS


def score(tally: Tally, scored: str = WINS) -> float:
    """A member's score against one opponent: its mean return (RETURN) or its win score (WINS)."""
    return tally.mean_return if scored == RETURN else tally.score


@dataclasses.dataclass(frozen=True)
class PbtRow:
    """One stored PBT event. INIT: a member joined with `new` settings. EXPLOIT: at round `round` `member`
    copied `source`'s snapshot `source_key` and took `new` (perturbed from the source's); KEPT: a member of the
    closed round that was not replaced (`evidence` says why); LOOK: the open round was tested and stays open
    (`member` the bottom member tested, `source` the top member). `evidence`: what decided, as `plan_round`
    measured it (the member's games, average score, worst case and its opponent, its rank; for a bottom member
    the source's worst case, the statistic and where it was weakest, the critical value, alpha, the look and the
    round's last look)."""

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
            what = "worst mean return" if e.get("scored") == RETURN else "worst case"
            return (f"round {self.round}: {self.member} copied {self.source_key} ({self.new.text()}): {what} "
                    f"{e.get('score', 0):.3f} (against {e.get('opponent', '?')}) under {self.source}'s "
                    f"{e.get('source_score', 0):.3f} (against {e.get('source_opponent', '?')}), z {e.get('statistic', 0):.2f}"
                    f" > {e.get('critical', 0):.2f} at look {e.get('look', 1)} of {e.get('looks', 1)}")
        if self.kind == LOOK:
            return f"round {self.round} look {e.get('look', 1)}: open ({e.get('why', '')})"
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
    """A member's lowest score over a set of opponents."""

    score: float  # min over the opponents of the measured score
    opponent: str  # the opponent it was measured against


def worst_case(mine: dict[str, Tally], opponents: Sequence[str], scored: str = WINS) -> WorstCase:
    """The lowest score (`score(..., scored)`) of one member's tallies (opponent -> Tally) over `opponents`
    (non-empty, each tallied); ties: the first opponent given."""
    if not opponents:
        raise ValueError("the worst case needs at least one opponent")
    scores = [score(mine[o], scored) for o in opponents]
    at = int(np.argmin(scores))
    return WorstCase(float(scores[at]), opponents[at])


@dataclasses.dataclass(frozen=True)
class Separation:
    """How far a top member's worst case is above a bottom member's: `statistic` = max over the bottom's
    opponents b of min over the top's opponents o of z(top vs o, bottom vs b), at `top_opponent` (o) and
    `bottom_opponent` (b)."""

    statistic: float
    top_opponent: str
    bottom_opponent: str


def pair_z(top: Tally, bottom: Tally, scored: str = WINS) -> float:
    """One-sided z of "top's expected score is above bottom's": the two-sample z on mean returns with the observed
    variances (`sequential.welch_z`) when scored by RETURN, else the two-proportion z on win scores
    (`sequential.two_proportion_z`)."""
    if scored == RETURN:
        return sequential.welch_z(top.mean_return, top.return_var, top.valued,
                                  bottom.mean_return, bottom.return_var, bottom.valued)
    return sequential.two_proportion_z(top.wins + 0.5 * top.draws, top.games, bottom.wins + 0.5 * bottom.draws, bottom.games)


def separation(top: dict[str, Tally], bottom: dict[str, Tally], opponents: Sequence[str],
               scored: str = WINS, critical: Optional[dict] = None) -> Separation:
    """The test statistic of "the top member's worst case over `opponents` is above the bottom member's".

    If the bottom's true score against some b is below the top's true score against every o, then min_o p_top,o >
    p_bottom,b >= min_b p_bottom,b (p: expected win score, or expected return when `scored` is RETURN). So the
    round rejects "not better" when, for some b, every one-sided z(top vs o, bottom vs b) (`pair_z`) passes its
    critical value: an intersection-union test over o (Berger 1982: each at the full level, no correction) and a
    union over the choices of b (each b its own share of the level: `critical`, b -> its critical value,
    `critical_values`). The b chosen is the one whose weakest z is furthest above its critical value (without
    `critical`: the largest weakest z)."""
    best, margin = None, -math.inf
    for b in opponents:
        z = [(pair_z(top[o], bottom[b], scored), o) for o in opponents]
        weakest = min(z)  # ties: the first opponent in order
        gap = weakest[0] - (critical[b] if critical is not None else 0.0)
        if best is None or gap > margin:
            best, margin = Separation(weakest[0], weakest[1], b), gap
    if best is None:
        raise ValueError("the separation needs at least one opponent")
    return best


def critical_z(alpha: float, opponents: int, looks: int) -> float:
    """The statistic's critical value: one-sided level `alpha` split over the `opponents` choices of the
    bottom's opponent and the round's `looks` (Bonferroni), z = Phi^-1(1 - alpha / (opponents x looks))."""
    return sequential.normal_isf(alpha / (opponents * looks))


def look_critical(alpha: float, opponents: int, look: int, looks: int, spending: str) -> float:
    """The critical value at look `look` of `looks` for a choice of b that has been common since the round's
    first look, with `opponents` common opponents at every look (`critical_values` in general)."""
    return critical_values(alpha, looks, spending, look, {"b": 1}, [opponents] * look)["b"]


def critical_values(alpha: float, looks: int, spending: str, look: int, entry: dict, counts: Sequence[int]) -> dict:
    """Each choice of b's critical value at look `look` of `looks` (b -> value).

    `entry`: b -> the look of this round from which b has been a common opponent at every look; `counts`: the
    number of common opponents at looks 1..look. "bonferroni": Phi^-1(1 - alpha / (K_look x looks)) for every b.
    A spending function spends alpha_k = alpha(t_k) - alpha(t_k-1) at look k (t_k = k / looks: the looks are
    equally many learner updates apart, and the games a look adds about as many), split evenly over the K_k
    choices of b then; b's critical values from its entry look on are the group-sequential boundaries of one
    growing sample with those shares as its first-crossing chances (`sequential.crossing_boundaries`). For a b
    the statistic z(top vs o*, bottom vs b) of the o* that makes the null true is one growing sample's, so b
    passes at some look with chance at most the sum of its shares, and over every b and look the shares sum to
    alpha: P(some look copies a member that is not better) <= alpha, however many looks the round takes and
    however many opponents join it."""
    look = min(look, looks)
    if spending == "bonferroni":
        return {b: critical_z(alpha, counts[look - 1], looks) for b in entry}
    spent = sequential.increments(spending, alpha, looks)
    values = {}
    for b, first in entry.items():
        fractions = tuple(k / looks for k in range(first, look + 1))
        shares = tuple(spent[k - 1] / counts[k - 1] for k in range(first, look + 1))
        values[b] = sequential.crossing_boundaries(fractions, shares)[-1]
    return values


def entries(opponents: Sequence[str], history: Sequence[Optional[Sequence[str]]], look: int) -> dict:
    """b -> the first look of the unbroken run of looks, ending at `look`, at which b was a common opponent
    (`history`: the common opponents of looks 1..look-1 of the round, None where not recorded)."""
    found = {}
    for b in opponents:
        first = look
        while first > 1 and history[first - 2] is not None and b in history[first - 2]:
            first -= 1
        found[b] = first
    return found


@dataclasses.dataclass(frozen=True)
class RoundInput:
    """What a look at the open round reads: members in join order, their tallies (member -> opponent -> Tally)
    and settings, each one's newest snapshot key, and which look this is (1: the first, at `pbt_interval`
    updates of every member into the round)."""

    round: int
    members: Sequence[str]
    tallies: dict
    settings: dict
    latest: dict  # member -> newest snapshot key ("" while it has none)
    look: int = 1
    common: tuple = ()  # the common opponents at each earlier look of the round (None: not recorded)


@dataclasses.dataclass(frozen=True)
class Test:
    """How a look decides: one-sided level `alpha` per bottom member, `looks` the most a round takes, the level
    spent over the looks by `spending` (`sequential.SPENDINGS`)."""

    alpha: float
    looks: int
    min_games: float
    spending: str = "bonferroni"


def _measured(mine: dict[str, Tally], worst: Optional[WorstCase], count: int, scored: str) -> dict:
    """A member's evidence: its round's games and average score (and mean return over the games that came with
    one), and its worst case over the `count` opponents, scored by `scored`."""
    games = sum(t.games for t in mine.values())
    mean = sum(t.wins + 0.5 * t.draws for t in mine.values()) / games if games else 0.5
    evidence = {"games": games, "mean": mean, "opponents": count, "scored": scored}
    valued = sum(t.valued for t in mine.values())
    if valued:
        evidence["mean_return"] = sum(t.value_sum for t in mine.values()) / valued
    if worst is not None:
        evidence.update(score=worst.score, opponent=worst.opponent)
    return evidence


def rank(view: RoundInput, min_games: float) -> tuple[list[str], dict[str, dict]]:
    """The members best first by their worst case over `common_opponents(..., min_games)` (ties: join order;
    none ranked without a common opponent), scored by mean return when the returns are more than signs
    (`scoring`), and each member's evidence (with "rank", 1 = best, when ranked; "scored": how)."""
    tallies = {m: view.tallies.get(m, {}) for m in view.members}
    opponents = common_opponents(tallies, min_games)
    scored = scoring([tallies[m][o] for m in view.members for o in opponents]) if opponents else WINS
    worst = {m: worst_case(tallies[m], opponents, scored) for m in view.members} if opponents else {}
    evidence = {m: _measured(tallies[m], worst.get(m), len(opponents), scored) for m in view.members}
    if not opponents:
        return [], evidence
    order = sorted(view.members, key=lambda m: (-worst[m].score, view.members.index(m)))
    for place, member in enumerate(order, 1):
        evidence[member]["rank"] = place
    return order, evidence


def plan_round(view: RoundInput, test: Test, share: float, factors: tuple[float, float],
               rng: np.random.Generator) -> list[PbtRow]:
    """A look at the open round. The round closes (one EXPLOIT or KEPT row per member) when a bottom member's
    drawn top member is better with confidence (`separation` above `critical_z`) and has a snapshot, or at the
    round's last look (`test.looks`); otherwise it stays open: one LOOK row with the bottom member's statistic.
    Members are ranked by their worst case over the opponents every member met `test.min_games` times."""
    order, evidence = rank(view, test.min_games)
    opponents = common_opponents({m: view.tallies.get(m, {}) for m in view.members}, test.min_games)
    last = view.look >= test.looks
    if not order:
        why = f"no opponent every member met {test.min_games:g} times this round"
        if last:
            return _close(view, evidence, why)
        return [_look(view, view.members[0], dict(evidence[view.members[0]], why=why), [])]
    bottom, top = split(order, [-i for i in range(len(order))], share)
    history = list(view.common)[:view.look - 1]
    history = [None] * (view.look - 1 - len(history)) + history  # looks not recorded (an older league)
    counts = [len(h) if h is not None else len(opponents) for h in history] + [len(opponents)]
    criticals = critical_values(test.alpha, test.looks, test.spending, view.look,
                                entries(opponents, history, view.look), counts)
    scored = evidence[order[0]]["scored"]
    decided = {}
    for member in bottom:
        source = top[int(rng.integers(len(top)))]
        gap = separation(view.tallies[source], view.tallies[member], opponents, scored, criticals)
        critical = criticals[gap.bottom_opponent]
        found = dict(evidence[member], source=source, source_score=evidence[source]["score"],
                     source_opponent=evidence[source]["opponent"], source_games=evidence[source]["games"],
                     statistic=gap.statistic, critical=critical, at=[gap.top_opponent, gap.bottom_opponent],
                     alpha=test.alpha, look=view.look, looks=test.looks, spending=test.spending)
        if not gap.statistic > critical:
            found["why"] = f"{source} not better with confidence (z {gap.statistic:.2f} <= {critical:.2f})"
        elif not view.latest.get(source):
            found["why"] = f"{source} has no snapshot to copy yet"
        decided[member] = found
    if not any("why" not in found for found in decided.values()) and not last:
        member = bottom[-1]
        return [_look(view, member, decided[member], opponents)]
    return _close(view, evidence, "not in the bottom share", decided, factors, rng)


def _look(view: RoundInput, member: str, evidence: dict, common: Sequence[str]) -> PbtRow:
    """The round stays open: a LOOK row with what was tested (`member` is the bottom member looked at) and the
    look's common opponents (later looks' critical values depend on them)."""
    settings = view.settings[member]
    return PbtRow(view.round, member, LOOK, settings, settings, evidence.get("source", ""),
                  evidence=dict(evidence, look=view.look, common=list(common)))


def _close(view: RoundInput, evidence: dict, why: str, decided: Optional[dict] = None,
           factors: tuple[float, float] = (1.0, 1.0), rng: Optional[np.random.Generator] = None) -> list[PbtRow]:
    """The round's closing rows: EXPLOIT for each bottom member whose test passed, KEPT (with why) for the rest."""
    decided = decided or {}
    rows = []
    for member in view.members:
        old = view.settings[member]
        found = decided.get(member, dict(evidence.get(member, {}), why=why, look=view.look))
        if "why" in found:
            rows.append(PbtRow(view.round, member, KEPT, old, old, evidence=found))
            continue
        source = found["source"]
        new = perturb(view.settings[source], factors, rng)
        rows.append(PbtRow(view.round, member, EXPLOIT, old, new, source, view.latest[source], found))
    return rows


def _by(evidence: dict) -> str:
    """" by mean return" when the evidence was scored by return, else "" (win scores, as before returns were kept)."""
    return " by mean return" if evidence.get("scored") == RETURN else ""


def leader(view: RoundInput, history: Sequence[PbtRow], min_games: float) -> tuple[str, str]:
    """The population's output: (member, why). The best member by the league's own evidence: the first of the
    open round's ranking when every member met a common opponent `min_games` times in it, else the rank-1 member
    of the newest round that ranked, else the first member (the one that started with the recipe's settings)."""
    order, evidence = rank(view, min_games)
    if order:
        e = evidence[order[0]]
        return order[0], (f"best worst case{_by(e)} in the open round {view.round}: {e['score']:.3f} against {e['opponent']} "
                          f"over {e['opponents']} opponents every member met {min_games:g} times")
    for row in reversed(history):
        if row.kind in (EXPLOIT, KEPT) and row.evidence.get("rank") == 1:
            e = row.evidence
            return row.member, (f"best worst case{_by(e)} at round {row.round}: {e['score']:.3f} against {e['opponent']} over "
                                f"{e['opponents']} opponents every member met {min_games:g} times")
    return view.members[0], "no round has ranked the members yet: the first member, with the recipe's settings"


class PbtState:
    """The members' settings, the current round's tallies and the history, rebuilt from `PbtRow` events."""

    def __init__(self, interval: int):
        self.interval = interval  # learner updates between two looks at the open round (0: PBT off)
        self.settings: dict[str, PbtSettings] = {}  # member -> current settings, join order
        self.tallies: dict[str, dict[str, Tally]] = {}  # member -> opponent -> this round's Tally
        self.rounds = 0  # rounds closed so far
        self.looks = 0  # looks taken so far, over all rounds (the next is due at interval x (looks + 1) updates)
        self.look = 0  # looks taken at the open round
        self.common: list = []  # the common opponents at each look of the open round (None: not recorded)
        self.history: list[PbtRow] = []
        self.undelivered: dict[str, PbtRow] = {}  # member -> its newest EXPLOIT not yet handed to its host
        self.last_change: dict[str, PbtRow] = {}  # member -> its newest INIT or EXPLOIT

    @property
    def enabled(self) -> bool:
        return self.interval > 0

    def is_member(self, name: str) -> bool:
        return name in self.settings

    def apply(self, row: PbtRow) -> None:
        """One stored event. A LOOK leaves the round open; the first row of a round's closing rows (EXPLOIT and
        KEPT, stored together) closes it and ends its tallies."""
        self.history.append(row)
        if row.kind == LOOK:
            self.looks, self.look = self.looks + 1, self.look + 1
            self.common.append(row.evidence.get("common"))
            return
        if row.kind != INIT and row.round > self.rounds:
            self.rounds, self.looks, self.look, self.common = row.round, self.looks + 1, 0, []
            self.tallies = {member: {} for member in self.settings}
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

    def count(self, player: str, opponent: str, outcome: float, value: Optional[float] = None) -> None:
        """A rated result of a member's live params against `opponent` (its side's outcome, and its return when
        reported) into this round's tally."""
        if player in self.tallies:
            mine = self.tallies[player]
            mine[opponent] = mine.get(opponent, Tally()).add(outcome, value)

    def due(self, learner_steps: dict[str, int]) -> bool:
        """Whether the next look is due: two or more members, each at least interval x (looks + 1) updates."""
        if not self.enabled or len(self.settings) < 2:
            return False
        return min(learner_steps.get(m, 0) for m in self.settings) >= self.interval * (self.looks + 1)

    def round_input(self, latest: dict[str, str]) -> RoundInput:
        """The open round as its next look sees it."""
        members = list(self.settings)
        return RoundInput(self.rounds + 1, members, {m: dict(t) for m, t in self.tallies.items()}, dict(self.settings),
                          {m: latest.get(m, "") for m in members}, self.look + 1, tuple(self.common))

    def leader(self, latest: dict[str, str], min_games: float) -> tuple[str, str]:
        """(member, why): the run's output, `leader` over the open round and the history."""
        return leader(self.round_input(latest), self.history, min_games)

    def note(self, member: str, output: bool = False) -> str:
        """The standings' text for a member: its settings, its newest change, and whether it is the run's output."""
        if member not in self.settings:
            return ""
        last = self.last_change.get(member)
        copied = f", copied {last.source_key} at round {last.round}" if last is not None and last.kind == EXPLOIT else ""
        return self.settings[member].text() + copied + ("; the run's output" if output else "")


def row_settings(values: Optional[Sequence[float]]) -> PbtSettings:
    """PbtSettings from stored multipliers in SETTINGS order."""
    return PbtSettings(*map(float, values)) if values else PbtSettings()
