"""What a run's output is: the `--output` source it recorded when it started, and the networks it consists of.

A run names its output source with `--output` (`OutputConfig`); `record` writes it to `<run_dir>/output.json`
before anything else starts, so a run stopped or killed at any moment still says what its output is.
`seedleague.output.resolve` finds that output in what is on disk now, as an `Output` of `Member`s (where each
network is and its weight); `Output.load` loads it:

    record(run_dir, OutputConfig("league_nash", player="main"))   # at the start of a run
    output = seedleague.output.resolve(run_dir)   # Output: source, kind, step, members (keys and weights)
    output.describe()                # the "output" entry of summary.json
    trained = output.load(seed=0)    # a Policy or a PolicyMixture: seedleague.api.load_trained
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from seedleague.artifacts.load import load_policies, load_policy
from seedleague.artifacts.mixture import PolicyMixture
# record and recorded (jax-free, in output_config) are re-exported: callers name them as this module's
from seedleague.artifacts.output_config import MIXTURES, record, recorded  # noqa: F401

AVERAGE_FRACTION = 1 / 3  # average_policy mixes this newest fraction of the snapshots (as evaluate_run reports)


@dataclasses.dataclass(frozen=True)
class Member:
    """One network of an output: where it is and its weight in the output."""

    key: str  # "main:000512" (a snapshot), "checkpoint:000010" or "param_average:000010" (the learner's)
    weight: float
    path: str  # the directory seedleague.artifacts.load.load_policy reads it from
    step: int
    average: bool = False  # the learner's param average of that checkpoint, not its params
    seat_weights: Optional[tuple[float, ...]] = None  # a mixture with one mix per seat: its weight in each seat

    def __post_init__(self):
        if self.seat_weights is not None:  # read back from JSON as a list
            object.__setattr__(self, "seat_weights", tuple(float(w) for w in self.seat_weights))

    def entry(self) -> dict:
        """{"key", "weight"} and, for a mixture with one mix per seat, "seat_weights": how summary.json and an
        export's index list the member."""
        out = dict(key=self.key, weight=self.weight)
        if self.seat_weights is not None:
            out["seat_weights"] = list(self.seat_weights)
        return out

    def load(self, seed: int = 0):
        return load_policy(self.path, self.step, seed=seed, average=self.average)


@dataclasses.dataclass(frozen=True)
class Output:
    """A run's output as it is on disk now: one network (kind "policy") or a mixture of several."""

    source: str
    members: tuple[Member, ...]
    note: str = ""  # how the output differs from what its source asked for, e.g. a fallback

    @property
    def kind(self) -> str:
        return "mixture" if self.source in MIXTURES or len(self.members) > 1 else "policy"

    @property
    def step(self) -> int:
        """The learner step of the newest network in the output."""
        return max(m.step for m in self.members)

    def describe(self) -> dict:
        """{"source", "kind", "step", "members": [{"key", "weight"}] (mixtures), "note" (if any)}."""
        out = dict(source=self.source, kind=self.kind, step=self.step)
        if self.kind == "mixture":
            out["members"] = [m.entry() for m in self.members]
        if self.note:
            out["note"] = self.note
        return out

    def load(self, seed: int = 0):
        """The output's Policy, or a PolicyMixture whose draw() gives one member per episode."""
        if self.kind == "policy":
            return self.members[0].load(seed)
        return PolicyMixture(self._load_members(seed), [m.weight for m in self.members], seed, self.seat_weights())

    def _load_members(self, seed: int) -> list:
        """Every member's policy, in order; the members of one directory (a player's pool, the run's param average)
        are read with its checkpoint list opened once, not once each."""
        groups: dict[tuple[str, bool], list[int]] = {}
        for i, member in enumerate(self.members):
            groups.setdefault((member.path, member.average), []).append(i)
        policies: list = [None] * len(self.members)
        for (path, average), index in groups.items():
            steps = [self.members[i].step for i in index]
            for i, policy in zip(index, load_policies(path, steps, seed=seed, average=average)):
                policies[i] = policy
        return policies

    def seat_weights(self) -> "list[list[float]] | None":
        """[seats][members]: each seat's mix, where the output has one per seat; else None."""
        if any(m.seat_weights is None for m in self.members):
            return None
        return [list(row) for row in zip(*(m.seat_weights for m in self.members))]
