"""A run's output: which trained policy it hands over, recorded when the run starts.

A run names its output source with `--output` (`OutputConfig`); `record` writes it to
`<run_dir>/output.json` before anything else starts, so a run stopped or killed at any
moment still says what its output is. `resolve` finds that output in what is on disk
now (the newest checkpoint, the snapshots that exist, the league's stored payoff
table) without loading any params; `Output.load` loads it:

    record(run_dir, OutputConfig("league_nash", player="main"))   # at the start of a run
    output = resolve(run_dir)        # Output: source, kind, step, members (keys and weights)
    output.describe()                # the "output" entry of summary.json
    trained = output.load(seed=0)    # a Policy or a PolicyMixture: seedleague.api.load_trained

Sources (SOURCES): `final` the newest checkpoint's params; `param_average` the learner's
running mean of them (falls back to `final`, with a logged note, where the checkpoint
keeps none); `average_policy` the uniform mixture of the newest third of the player's
snapshots with the param average at half the weight (seedleague.api.load_average_policy);
`league_nash` the Nash mixture over the player's snapshots, solved from the league's
payoff table of win rates (PSRO's meta-strategy, seedleague.league.nash.league_nash).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Optional

log = logging.getLogger(__name__)

FILE = "output.json"
SOURCES = {
    "final": "the newest checkpoint's params",
    "param_average": "the learner's running mean of its params; final where the checkpoint keeps none",
    "average_policy": "the newest third of the player's snapshots mixed uniformly, the param average at half weight",
    "league_nash": "the Nash mixture over the player's snapshots, from the league's payoff table",
    "selected": "the least exploitable of final, param_average, the newest snapshots' Nash mixture and average, and the "
                "least exploitable mixture of them all, measured exactly on the game tree (an explicit choice for "
                "OpenSpiel imperfect-information games small enough to walk); param_average where that cannot be "
                "measured",
}
MIXTURES = ("average_policy", "league_nash")  # sources that need a league's snapshots
AVERAGE_FRACTION = 1 / 3  # average_policy mixes this newest fraction of the snapshots (as evaluate_run reports)


def choices_text() -> str:
    """"final (the newest ...), param_average (...), ...": for help texts and errors."""
    return "; ".join(f"{name} ({meaning})" for name, meaning in SOURCES.items())


@dataclasses.dataclass(frozen=True)
class OutputConfig:
    """What a run's output is (`seedleague train --output`)."""

    source: str = "final"  # one of SOURCES
    player: str = "main"  # whose snapshots average_policy and league_nash mix

    def __post_init__(self):
        if self.source not in SOURCES:
            raise ValueError(f"--output must be one of {', '.join(SOURCES)}, got {self.source!r}: {choices_text()}")
        if not self.player:
            raise ValueError("the output's player must be a league player's name, e.g. main")


def record(run_dir: str, config: OutputConfig) -> str:
    """Write `<run_dir>/output.json` (atomically: a reader never sees half a file); returns its path."""
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, FILE)
    with open(path + ".tmp", "w") as f:
        json.dump(dataclasses.asdict(config), f)
    os.replace(path + ".tmp", path)
    return path


def recorded(run_dir: str) -> OutputConfig:
    """The run's recorded output config; `final` for a run that predates output.json."""
    path = os.path.join(run_dir, FILE)
    if not os.path.exists(path):
        return OutputConfig()
    with open(path) as f:
        return OutputConfig(**json.load(f))


@dataclasses.dataclass(frozen=True)
class Member:
    """One network of an output: where it is and its weight in the output."""

    key: str  # "main:000512" (a snapshot), "checkpoint:000010" or "param_average:000010" (the learner's)
    weight: float
    path: str  # the directory seedleague.api.load_policy reads it from
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
        from seedleague.api import load_policy

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
        from seedleague.api import PolicyMixture

        if self.kind == "policy":
            return self.members[0].load(seed)
        return PolicyMixture([m.load(seed) for m in self.members], [m.weight for m in self.members], seed,
                             self.seat_weights())

    def seat_weights(self) -> "list[list[float]] | None":
        """[seats][members]: each seat's mix, where the output has one per seat; else None."""
        if any(m.seat_weights is None for m in self.members):
            return None
        return [list(row) for row in zip(*(m.seat_weights for m in self.members))]


def resolve(run_dir: str, config: Optional[OutputConfig] = None) -> Output:
    """The recorded output of `run_dir` (or the one `config` names), from what is on disk now; loads no params.

    Raises FileNotFoundError when no output exists yet (no checkpoint, or no snapshots for a
    mixture), saying why."""
    if not os.path.isdir(run_dir):
        raise FileNotFoundError(f"no such run directory: {run_dir!r}")
    config = config or recorded(run_dir)
    if config.source == "average_policy":
        return average_policy(run_dir, AVERAGE_FRACTION, config.player)
    if config.source == "league_nash":
        return _league_nash(run_dir, config.player)
    step = _newest_checkpoint(run_dir, config.source)
    final = Output(config.source, (Member(f"checkpoint:{step:06d}", 1.0, run_dir, step),))
    if config.source == "final":
        return final
    if config.source == "selected":
        chosen = _selected(run_dir, step, config.player)
        if chosen is not None:
            return chosen
    from seedleague.api import param_average_count

    if param_average_count(run_dir, step) == 0:
        note = (f"checkpoint {step} of {run_dir} keeps no param average (its learner ran without "
                "--learner.average-from or --learner.average-tail, or has not reached it): the output is the final params instead")
        log.warning("%s", note)
        return dataclasses.replace(final, note=note)
    note = ""
    if config.source == "selected":
        from seedleague import checkpoint_meta
        from seedleague.eval.output_selection import unmeasurable

        why = unmeasurable(checkpoint_meta.read(os.path.join(run_dir, "checkpoints"), step).spec.env_name)
        note = f"this game's exploitability cannot be measured ({why}), so nothing is selected: the output is the param average"
    return Output(config.source, (Member(f"param_average:{step:06d}", 1.0, run_dir, step, average=True),), note)


def _selected(run_dir: str, step: int, player: str) -> "Output | None":
    """The least exploitable candidate (seedleague.eval.output_selection); None where it cannot be measured."""
    from seedleague.eval.output_selection import select

    keys = _snapshot_keys(run_dir, player, "selected", required=False)
    choice = select(run_dir, step, keys, player)
    if choice is None:
        return None
    return Output("selected", choice.members, choice.describe())


def _newest_checkpoint(run_dir: str, source: str) -> int:
    from seedleague.api import checkpoint_steps

    directory = os.path.join(run_dir, "checkpoints")
    steps = checkpoint_steps(directory) if os.path.isdir(directory) else []
    if not steps:
        raise FileNotFoundError(
            f"{run_dir!r} has no output yet: its output ({source}) is read from the learner's checkpoints and "
            f"{directory} holds none; a run writes its first after --checkpoint.interval-s of training and "
            "one when it stops, so wait for one (or resume the run)"
        )
    return steps[-1]


def _player_dir(run_dir: str, player: str) -> str:
    from seedleague.league.model_pool import player_dir_of  # imports jax and orbax: only when snapshots are read

    return player_dir_of(run_dir, player)


def _snapshot_keys(run_dir: str, player: str, source: str, required: bool = True) -> list[str]:
    from seedleague.league.model_pool import ModelPool, root_of

    pool = ModelPool(root_of(run_dir))
    try:
        keys = pool.keys(player)
    finally:
        pool.close()
    if not keys and required:
        raise FileNotFoundError(
            f"{run_dir!r} has no league snapshots of player {player!r} yet, so its output ({source}, a mixture of "
            f"them) does not exist yet: the league freezes one every snapshot_interval_steps learner updates"
        )
    return keys


def average_policy(run_dir: str, fraction: float, player: str, param_average: bool = True) -> Output:
    """The uniform mixture of the newest `fraction` of `player`'s snapshots; with `param_average`, the
    newest learner checkpoint's param average (where it keeps one) joins with half the weight."""
    from seedleague.api import param_average_count
    from seedleague.league.types import parse_key

    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be a fraction of the snapshots in (0, 1], got {fraction}")
    keys = _snapshot_keys(run_dir, player, "average_policy")
    keys = keys[-max(1, round(len(keys) * fraction)):]
    player_dir = _player_dir(run_dir, player)
    members = [Member(key, 1.0 / len(keys), player_dir, parse_key(key)[1]) for key in keys]
    directory = os.path.join(run_dir, "checkpoints")
    if param_average and os.path.isdir(directory):
        from seedleague.api import checkpoint_steps

        steps = checkpoint_steps(directory)
        if steps and param_average_count(run_dir, steps[-1]) > 0:
            members = [dataclasses.replace(m, weight=0.5 / len(keys)) for m in members]
            members.append(Member(f"param_average:{steps[-1]:06d}", 0.5, run_dir, steps[-1], average=True))
    return Output("average_policy", tuple(members))


def _league_nash(run_dir: str, player: str) -> Output:
    """PSRO's meta-strategy over `player`'s snapshots that exist now, from the league's stored win rates."""
    import numpy as np

    from seedleague.eval.run_league import league_of
    from seedleague.league.nash import league_nash
    from seedleague.league.types import parse_key

    keys = _snapshot_keys(run_dir, player, "league_nash")
    league = league_of(run_dir)
    if league is None:
        raise FileNotFoundError(f"{run_dir!r} has no league database (league/league.sqlite), so its output "
                                "(league_nash) cannot be solved: it needs the league's payoff table")
    try:
        payoff = league.payoff()
    finally:
        league.close()
    known = {key: i for i, key in enumerate(payoff.keys)}
    keys = [key for key in keys if key in known]
    index = [known[key] for key in keys]
    player_dir = _player_dir(run_dir, player)
    if not keys:
        raise FileNotFoundError(f"the league of {run_dir!r} has registered none of {player!r}'s snapshots yet, so "
                                "its output (league_nash) does not exist yet")
    games = np.asarray(payoff.games, np.float64)[np.ix_(index, index)]
    if not games.any():
        note = (f"no two of {player}'s {len(keys)} snapshots have played each other in the league yet (self-play "
                "records no results): every mixture is a Nash mixture of that table, so the output is the uniform one")
        log.warning("%s", note)
        weights = {key: 1.0 / len(keys) for key in keys}
    else:
        note = ""
        weights = league_nash(keys, np.asarray(payoff.win_rate, np.float64)[np.ix_(index, index)], player)
    members = tuple(Member(key, float(w), player_dir, parse_key(key)[1]) for key, w in weights.items())
    return Output("league_nash", members, note)
