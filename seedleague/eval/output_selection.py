"""Choosing a run's output by exact exploitability, where the game lets us measure it.

A run produces several candidate strategies: its final params, the param average over the
end of its anneal, and its population of snapshots, whose meta-game (every snapshot against
every other) has a Nash mixture (PSRO's meta-strategy, Lanctot et al. 2017) and a time average
(the uniform mixture, fictitious play's output; here with the param average at half weight). Which is
least exploitable differs from game to game: in Kuhn poker the iterates circle the equilibrium
and their Nash mixture is far better than any one network; in Leduc the newest snapshot beats
its population yet is exploitable, and the averages are best. In an imperfect-information
OpenSpiel game every candidate's exploitability can be computed exactly, so the `selected`
output (seedleague.output) measures all of them and hands over the least exploitable. One more
candidate mixes every network at once: Anytime PSRO's restricted distribution
(seedleague.eval.least_exploitable), the mixture of the loaded snapshots, the final params and the
param average that no strategy of the whole game exploits more, one mix per seat, solved exactly (a
sequence-form LP, or best-response cuts where the LP would be large). Each other candidate
is one of its feasible mixtures, so it never loses; a tie goes to the simpler candidate listed first.

    choice = select(run_dir, checkpoint, snapshot_keys, "main")   # Choice: name, members, scores
    choice.scores   # {"final": 0.167, "param_average": 0.017, "population_nash": 0.003, "population_average": 0.01,
                    #  "least_exploitable_mixture": 0.0016}

The meta-game is solved with exact payoffs (seedleague.eval.metagame) over the newest
`POPULATION` snapshots, then over twice as many, and so on up to every snapshot the run kept
(at most `MAX_POPULATION`, and at most what `metagame.largest_population` lets fit in memory): PSRO's restricted game holds every policy added so far, and where
the late iterates cycle among a few strategies (goofspiel), the mixture that closes the cycle
may need older snapshots; where the early snapshots are weak (Leduc), the newest alone may do
better. Each window is a candidate ("population_nash", "population_nash_64", ...,
"population_nash_all"), scored like the others. `select` caches its choice in `<run_dir>/output_selection.json`,
valid while the newest checkpoint and snapshot are the same, so loading the output again is
cheap. Where exploitability cannot be measured (`tree_size.unmeasurable` says why: not an OpenSpiel
imperfect-information game, or a game tree too large to measure in minutes) `select` returns
None and the output is the param average.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from typing import Optional

from seedleague import storage
from seedleague.artifacts.load import NoParamAverageError, load_policies, load_policy
from seedleague.artifacts.run_output import Member  # one network of an output: key, weight, path, step, average
from seedleague.eval import least_exploitable, metagame, openspiel_eval
from seedleague.eval.tree_size import game_of, unmeasurable
from seedleague.league.types import parse_key

log = logging.getLogger(__name__)

FILE = "output_selection.json"
POPULATION = 32  # newest snapshots in the smallest meta-game and in the time average; where the anneal has settled
MAX_POPULATION = 512  # newest snapshots in the largest meta-game (fewer where its payoffs would not fit
#                       metagame.PAYOFF_BYTES); loading each costs about 0.13 s on 2 cores


@dataclasses.dataclass(frozen=True)
class Choice:
    """The least exploitable candidate, with every candidate's score, for the run's state `stamp`."""

    name: str  # "final", "param_average", "population_nash[_K|_all]", "population_average" or "least_exploitable_mixture"
    members: tuple[Member, ...]
    scores: dict  # candidate name -> exact exploitability
    stamp: dict  # {"checkpoint": step, "snapshot": newest key}: what the choice was made from
    seconds: float = 0.0

    def describe(self) -> str:
        others = ", ".join(f"{name} {value:.4f}" for name, value in sorted(self.scores.items(), key=lambda kv: kv[1]))
        return f"{self.name}, the least exploitable of the run's candidates (exact exploitability: {others})"


def _stamp(checkpoint: int, snapshot_keys: list[str]) -> dict:
    return {"checkpoint": checkpoint, "snapshot": snapshot_keys[-1] if snapshot_keys else None}


def cached(run_dir: str, stamp: dict) -> Optional[Choice]:
    """The cached choice when it was made from the same checkpoint and newest snapshot, else None."""
    path = os.path.join(run_dir, FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            data = json.load(f)
        if data.get("stamp") != stamp:
            return None
        return Choice(data["name"], tuple(Member(**m) for m in data["members"]), data["scores"], data["stamp"],
                      data.get("seconds", 0.0))
    except (OSError, ValueError, KeyError, TypeError) as error:
        log.warning("ignoring unreadable %s (%s): choosing the output again", path, error)
        return None


def _write(run_dir: str, choice: Choice) -> None:
    path = os.path.join(run_dir, FILE)
    storage.write_json(path, dict(dataclasses.asdict(choice), members=[dataclasses.asdict(m) for m in choice.members]))


def _normalised(members: list[Member]) -> tuple[Member, ...]:
    total = sum(m.weight for m in members)
    return tuple(dataclasses.replace(m, weight=m.weight / total) for m in members)


def _windows(loaded: int, kept: int) -> list[tuple[int, str]]:
    """(size, candidate name) of each meta-game window over the newest `loaded` of `kept` snapshots:
    "population_nash" over the newest POPULATION (or all, when fewer), doubled while smaller than
    `loaded`, then all of them ("population_nash_all" when that is every snapshot the run kept)."""
    sizes, size = [], POPULATION
    while size < loaded:
        sizes.append(size)
        size *= 2
    sizes.append(loaded)
    names = ["population_nash"] + [f"population_nash_{s}" for s in sizes[1:]]
    if len(sizes) > 1 and loaded == kept:
        names[-1] = "population_nash_all"
    return list(zip(sizes, names))


def select(run_dir: str, checkpoint: int, snapshot_keys: list[str], player: str, seed: int = 0) -> Optional[Choice]:
    """Measure every candidate of the run (newest checkpoint `checkpoint`, `player`'s snapshots
    `snapshot_keys`, oldest first) and return the least exploitable; None when the run's game
    is not measurable. Cached (see the module docstring)."""
    stamp = _stamp(checkpoint, snapshot_keys)
    hit = cached(run_dir, stamp)
    if hit is not None:
        return hit
    final = load_policy(run_dir, checkpoint, seed=seed)
    if unmeasurable(final.spec.env_name):
        return None
    game = game_of(final.spec.env_name)
    start = time.perf_counter()
    average, average_member = None, Member(f"param_average:{checkpoint:06d}", 1.0, run_dir, checkpoint, True)
    try:
        average = load_policy(run_dir, checkpoint, seed=seed, average=True)
    except NoParamAverageError:
        pass  # the learner keeps no param average: that candidate does not exist
    networks = [(Member(f"checkpoint:{checkpoint:06d}", 1.0, run_dir, checkpoint), final)] + (
        [(average_member, average)] if average is not None else [])
    terminal = metagame.terminal_table(game) if snapshot_keys else None
    population = snapshot_keys[-min(MAX_POPULATION, metagame.largest_population(terminal)):] if terminal else []
    player_dir = os.path.join(run_dir, "pool", player)
    steps = [parse_key(key)[1] for key in population]
    policies = load_policies(player_dir, steps, seed=seed) if population else []
    snapshots = [Member(key, 1.0, player_dir, step) for key, step in zip(population, steps)]
    # Every network's table and own reach, once: rows are the snapshots (oldest first), then the networks.
    tables = openspiel_eval.PolicyTables(game, policies + [policy for _, policy in networks])
    count = len(policies)
    candidates: dict[str, tuple[tuple[Member, ...], float]] = {
        "final": ((networks[0][0],), tables.exploitability([1.0], [count]))}
    if average is not None:
        candidates["param_average"] = ((average_member,), tables.exploitability([1.0], [count + 1]))
    if population:
        windows = _windows(len(population), len(snapshot_keys))
        mixtures = metagame.newest_nash_mixtures(game, policies, [size for size, _ in windows], terminal, tables)
        for (size, name), (value, weights) in zip(windows, mixtures):
            members = [dataclasses.replace(m, weight=float(w)) for m, w in zip(snapshots[-size:], weights) if w > 1e-6]
            candidates[name] = (_normalised(members), value)
        # The time average of the iterates (fictitious play's and CFR's output), the param average at half weight.
        recent = snapshots[-POPULATION:]
        members = [dataclasses.replace(m, weight=1.0 / len(recent)) for m in recent]
        rows = list(range(count - len(recent), count))
        if average is not None:
            members = [dataclasses.replace(m, weight=0.5 * m.weight) for m in members] + [
                dataclasses.replace(average_member, weight=0.5)]
            rows.append(count + 1)
        candidates["population_average"] = (_normalised(members), tables.exploitability(
            [m.weight for m in members], rows))
        # Anytime PSRO's restricted distribution: the mixture of every network above that no strategy of the
        # whole game exploits more, one mix per seat; each candidate above is one such mixture, so it is never worse.
        pool = snapshots + [member for member, _ in networks]  # the rows of `tables`, in order
        _, weights, method = least_exploitable.solve(tables.tree, terminal, tables.probs)
        support = [i for i in range(len(pool)) if weights[:, i].max() > 1e-6]
        seat_weights = weights[:, support] / weights[:, support].sum(axis=1, keepdims=True)
        members = tuple(dataclasses.replace(pool[i], weight=float(seat_weights[:, j].mean()),
                                            seat_weights=tuple(float(w) for w in seat_weights[:, j]))
                        for j, i in enumerate(support))
        candidates["least_exploitable_mixture"] = (members, tables.exploitability(seat_weights, support))
        log.info("least exploitable mixture of %d networks by %s", len(pool), method)
    best = min(value for _, value in candidates.values())
    name = next(n for n, (_, value) in candidates.items() if value <= best + 1e-9)  # ties: the first, smallest window
    choice = Choice(name, candidates[name][0], {n: float(v) for n, (_, v) in candidates.items()}, stamp,
                    time.perf_counter() - start)
    _write(run_dir, choice)
    log.info("output of %s: %s (%.1f s)", run_dir, choice.describe(), choice.seconds)
    return choice
