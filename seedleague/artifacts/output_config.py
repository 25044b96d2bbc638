"""OutputConfig: which of a run's networks is its output (`seedleague train --output`), and the sources to choose from.

Kept apart from seedleague.artifacts.run_output, which loads the output's networks with jax, so that building the
command line (`seedleague train --help`, a refused flag) needs no jax.
"""

from __future__ import annotations

import dataclasses
import json
import os

from seedleague import storage


FILE = "output.json"
SOURCES = {
    "final": "the newest checkpoint's params",
    "param_average": "the learner's running mean of its params; final where the checkpoint keeps none",
    "average_policy": "the newest third of the player's snapshots mixed uniformly, the param average at half weight",
    "league_nash": "the Nash mixture over the player's snapshots, from the league's payoff table",
    "population_nash": "the Nash mixture, one mix per seat, of the meta-game among the newest snapshots and the param "
                       "average, estimated from evaluation games (`seedleague exploit --choose population_nash`)",
    "population_psro": "one step of PSRO on that meta-game: the same networks' mix, one per seat, against them and the "
                       "learned best responses to the outputs measured before it (`seedleague exploit --choose "
                       "population_nash param_average population_psro`)",
    "distilled": "one network that plays as the population_nash mixture does, fitted to that mixture's play in the "
                 "evaluation games that estimate it (`seedleague exploit --choose distilled`)",
    "selected": "the least exploitable of final, param_average, the newest snapshots' Nash mixture and average, and the "
                "least exploitable mixture of them all, measured exactly on the game tree (an explicit choice for "
                "OpenSpiel imperfect-information games small enough to walk); param_average where that cannot be "
                "measured",
}
DISTILLED_DIR = "distilled"  # the `distilled` output's checkpoint directory in the run directory
MIXTURES = ("average_policy", "league_nash", "population_nash", "population_psro")  # need a league's snapshots
CHOOSABLE = tuple(source for source in SOURCES if source != "selected")  # what `seedleague exploit --choose` measures
# What `--choose` measures when it names nothing: the averages, the snapshots' sampled meta-game's Nash and that
# mixture distilled into one network (which replaces it within its noise), none of which needs a game tree
# (league_nash's win rates estimate that meta-game with far more noise; `final` was 2-3x the param average wherever
# it was measured: name either to include it).
CHOICE_DEFAULT = ("param_average", "average_policy", "population_nash", "distilled")
# What `seedleague train` chooses between at the end of its time budget, in this order: the population's Nash mixture
# distilled into one network (population_nash itself where it cannot be fitted: too few recorded moves) and the param
# average. The mixture is not measured beside its distilled network: inside the same share a third response left
# its evaluation games three quarters of the time, and the Nash of fewer games came out worse in 3 of 3 Kuhn runs
# (benchmarks/README.md, "Distilled: the Nash mixture as one network"). population_psro (one PSRO step with the
# responses) is not among them either: its round of games and its response left each part a fifth instead of a
# third, and the shorter responses chose worse on Kuhn ("One PSRO step inside the choice"); name it to
# `seedleague exploit --choose`. The average policy's 129-network mixture serves too slowly to fit a run's budget.
TRAIN_CHOICE = ("distilled", "param_average")
# The share of `seedleague train --max-seconds` that choosing among TRAIN_CHOICE takes after training (its evaluation
# games and two best responses, a third each): on Kuhn a 150 s response was already within 0.004 of the exact value.
CHOICE_SHARE = 0.4


def evaluation_rounds(sources) -> int:
    """The rounds of evaluation games among a run's snapshots that choosing among `sources` plays: one for
    population_nash or distilled (which is fitted to the first round's play), one more for population_psro."""
    return int(bool({"population_nash", "distilled"} & set(sources))) + int("population_psro" in sources)


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
    storage.write_json(path, dataclasses.asdict(config))
    return path


def recorded(run_dir: str) -> OutputConfig:
    """The run's recorded output config; `final` for a run that predates output.json."""
    path = os.path.join(run_dir, FILE)
    if not os.path.exists(path):
        return OutputConfig()
    with open(path) as f:
        return OutputConfig(**json.load(f))
