"""A run's output: which trained policy it hands over, recorded when the run starts.

A run names its output source with `--output` (`OutputConfig`); `record` writes it to
`<run_dir>/output.json` before anything else starts, so a run stopped or killed at any
moment still says what its output is (those types: seedleague.artifacts.run_output).
`resolve` finds that output in what is on disk now (the newest checkpoint, the snapshots
that exist, the league's stored payoff table) without loading any params; `Output.load`
loads it:

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
A population-based training run's output is its best member's (docs/pbt.md, "The run's output").
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Optional, Sequence

import numpy as np

from seedleague import checkpoint_meta
from seedleague.artifacts import run_files
from seedleague.artifacts.load import checkpoint_steps, param_average_count
# What a run's output is, re-exported: callers name them as seedleague.output's.
from seedleague.artifacts.run_output import AVERAGE_FRACTION, Member, Output, record, recorded
from seedleague.artifacts.output_config import DISTILLED_DIR, FILE, MIXTURES, SOURCES, OutputConfig, choices_text
from seedleague.eval import sampled_metagame
from seedleague.eval.output_selection import select
from seedleague.eval.tree_size import unmeasurable
from seedleague.eval.run_league import league_of, pbt_members, pbt_output
from seedleague.league.model_pool import ModelPool, player_dir_of, root_of
from seedleague.league.nash import league_nash
from seedleague.league.types import parse_key

log = logging.getLogger(__name__)
PARAM_AVERAGE_KEY = "param_average:"  # a member key's prefix for a checkpoint's param average ("param_average:000010")
RESPONSE_KEY = "response:"  # a learned best response's, by its run directory's name ("response:population_nash")

__all__ = ["AVERAGE_FRACTION", "FILE", "MIXTURES", "SOURCES", "Member", "Output", "OutputConfig", "choices_text",
           "record", "recorded", "resolve", "average_policy"]


def resolve(run_dir: str, config: Optional[OutputConfig] = None) -> Output:
    """The recorded output of `run_dir` (or the one `config` names), from what is on disk now; loads no params.

    Raises FileNotFoundError when no output exists yet (no checkpoint, or no snapshots for a
    mixture), saying why."""
    if not os.path.isdir(run_dir):
        raise FileNotFoundError(f"no such run directory: {run_dir!r}")
    config = config or recorded(run_dir)
    if config.source == "selected":  # chosen on the game tree among the run's own player's networks
        return _resolve(run_dir, config, "")
    member, home, note = output_member(run_dir, config.player)
    return _resolve(run_dir if config.source in MIXTURES else home, dataclasses.replace(config, player=member), note)


def output_member(run_dir: str, player: str) -> tuple[str, str, str]:
    """(the player whose networks stand for `player`'s output, the run directory of its host, why): `player` and
    `run_dir` themselves, or in a population-based training run the best member (docs/pbt.md) and its host's
    directory, with the league's evidence for it."""
    best = pbt_output(run_dir, player)
    if best is None:
        return player, run_dir, ""
    if best[0] == player:
        return player, run_dir, f"population-based training: {player} is the best member ({best[1]})"
    return (best[0], _home(run_dir, best[0]),
            f"population-based training: the output is member {best[0]}'s, the best ({best[1]})")


def _home(run_dir: str, player: str) -> str:
    """The run directory of `player`'s host, where its checkpoints and param average are: `run_dir` for the run's
    own player, `RUN/players/NAME` for another player the run started (seedleague.launch.league's layout)."""
    other = os.path.join(run_dir, "players", player)
    return other if player != recorded(run_dir).player and os.path.isdir(other) else run_dir


def _resolve(run_dir: str, config: OutputConfig, note: str) -> Output:
    """`resolve` once the run (or PBT member) and its player are known; `note` joins the output's own note."""
    out = _source(run_dir, config)
    return dataclasses.replace(out, note="; ".join(n for n in (note, out.note) if n))


def _source(run_dir: str, config: OutputConfig) -> Output:
    if config.source == "average_policy":
        return average_policy(run_dir, AVERAGE_FRACTION, config.player)
    if config.source == "league_nash":
        return _league_nash(run_dir, config.player)
    if config.source in sampled_metagame.FILES:
        return _population_nash(run_dir, config.player, config.source)
    if config.source == "distilled":
        return _distilled(run_dir)
    step = _newest_checkpoint(run_dir, config.source)
    final = Output(config.source, (Member(f"checkpoint:{step:06d}", 1.0, run_dir, step),))
    if config.source == "final":
        return final
    if config.source == "selected":
        chosen = _selected(run_dir, step, config.player)
        if chosen is not None:
            return chosen
    if param_average_count(run_dir, step) == 0:
        note = (f"checkpoint {step} of {run_dir} keeps no param average (its learner ran without "
                "--learner.average-from or --learner.average-tail, or has not reached it): the output is the final params instead")
        log.warning("%s", note)
        return dataclasses.replace(final, note=note)
    note = ""
    if config.source == "selected":
        why = unmeasurable(checkpoint_meta.read(os.path.join(run_dir, "checkpoints"), step).spec.env_name)
        note = f"this game's exploitability cannot be measured ({why}), so nothing is selected: the output is the param average"
    return Output(config.source, (Member(f"param_average:{step:06d}", 1.0, run_dir, step, average=True),), note)


def _distilled(run_dir: str) -> Output:
    directory = os.path.join(run_dir, DISTILLED_DIR)
    steps = checkpoint_steps(directory) if os.path.isdir(directory) else []
    if not steps:
        raise FileNotFoundError(f"{run_dir!r} has no distilled output: `seedleague exploit --run-dir {run_dir} "
                                "--choose distilled` fits one to the population's Nash mixture and measures it")
    return Output("distilled", (Member(f"distilled:{steps[-1]:06d}", 1.0, directory, steps[-1]),))


def _selected(run_dir: str, step: int, player: str) -> "Output | None":
    """The least exploitable candidate (seedleague.eval.output_selection); None where it cannot be measured."""
    keys = _snapshot_keys(run_dir, player, "selected", required=False)
    choice = select(run_dir, step, keys, player)
    if choice is None:
        return None
    return Output("selected", choice.members, choice.describe())


def _newest_checkpoint(run_dir: str, source: str) -> int:
    directory = os.path.join(run_dir, "checkpoints")
    steps = checkpoint_steps(directory) if os.path.isdir(directory) else []
    if not steps:
        raise FileNotFoundError(run_files.no_output_message(run_dir, source, directory))
    return steps[-1]


def _player_dir(run_dir: str, player: str) -> str:
    return player_dir_of(run_dir, player)


def _snapshot_keys(run_dir: str, player: str, source: str, required: bool = True) -> list[str]:
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
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be a fraction of the snapshots in (0, 1], got {fraction}")
    keys = _snapshot_keys(run_dir, player, "average_policy")
    keys = keys[-max(1, round(len(keys) * fraction)):]
    player_dir = _player_dir(run_dir, player)
    members = [Member(key, 1.0 / len(keys), player_dir, parse_key(key)[1]) for key in keys]
    average = _param_average(_home(run_dir, player)) if param_average else None
    if average is not None:
        members = [dataclasses.replace(m, weight=0.5 / len(keys)) for m in members]
        members.append(dataclasses.replace(average, weight=0.5))
    return Output("average_policy", tuple(members))


def population(run_dir: str, player: str, size: int, responses: Sequence[str] = ()) -> Output:
    """The newest `size` of `player`'s snapshots and the newest checkpoint's param average (where it keeps one),
    then the newest checkpoint of each best response's run directory in `responses`, uniformly weighted: the
    networks of the sampled meta-game (seedleague.host.population), the responses last. In a population-based
    training run the population is every member's: the newest `size` / N snapshots of each of its N members, each
    with its own param average (docs/pbt.md, "The run's output")."""
    if size < 1:
        raise ValueError(f"a population needs at least one snapshot, got size {size}")
    names = [os.path.basename(os.path.normpath(path)) for path in responses]
    if len(set(names)) < len(names):
        raise ValueError(f"best responses are keyed by their run directories' names, and {list(responses)} repeat one")
    members_of = pbt_members(run_dir, player)
    if members_of:
        share = max(1, size // len(members_of))
        members = [m for member in members_of for m in _networks(run_dir, member, share, of_population=True)]
        if not members:
            raise FileNotFoundError(f"{run_dir!r} has no league snapshots of {player!r}'s population "
                                    f"({', '.join(members_of)}) yet, so its population_nash does not exist yet")
    else:
        members = _networks(run_dir, player, size, of_population=False)
    for name, path in zip(names, responses):
        members.append(Member(f"{RESPONSE_KEY}{name}", 1.0, path, _newest_checkpoint(path, "a best response")))
    return Output("population", tuple(dataclasses.replace(m, weight=1.0 / len(members)) for m in members))


def _networks(run_dir: str, player: str, size: int, of_population: bool) -> list[Member]:
    """The newest `size` of `player`'s snapshots and its param average (where its host's newest checkpoint keeps
    one), weight 1. `of_population`: `player` is one of several players whose networks meet, so its param average's
    key names it, and having no snapshot yet is not an error (FileNotFoundError otherwise)."""
    keys = _snapshot_keys(run_dir, player, "population_nash", required=not of_population)[-size:]
    player_dir = _player_dir(run_dir, player)
    members = [Member(key, 1.0, player_dir, parse_key(key)[1]) for key in keys]
    average = _param_average(_home(run_dir, player), player if of_population else "")
    return members + ([average] if average is not None else [])


def _param_average(run_dir: str, player: str = "") -> Optional[Member]:
    """The param average of `run_dir`'s newest checkpoint as a member (weight 1), or None where it keeps none; its
    key is `average_key(step, player)`."""
    directory = os.path.join(run_dir, "checkpoints")
    steps = checkpoint_steps(directory) if os.path.isdir(directory) else []
    if not steps or param_average_count(run_dir, steps[-1]) == 0:
        return None
    return Member(average_key(steps[-1], player), 1.0, run_dir, steps[-1], average=True)


def average_key(step: int, player: str = "") -> str:
    """A param average's member key: "param_average:000010" (the output's own player's), or
    "param_average:main-1:000010" (the named player's, in a population of several players' networks)."""
    return f"{PARAM_AVERAGE_KEY}{player + ':' if player else ''}{step:06d}"


def parse_average_key(key: str) -> tuple[str, int]:
    """(player, or "" for the output's own, step) of an `average_key`."""
    player, _, step = key[len(PARAM_AVERAGE_KEY):].rpartition(":")
    return player, int(step)


def _population_nash(run_dir: str, player: str, source: str = "population_nash") -> Output:
    """The Nash mixture of the run's sampled meta-game (`seedleague exploit --choose population_nash` estimates
    it: seedleague.eval.sampled_metagame), one mix per seat over the members either seat plays; `population_psro`'s
    likewise, solved against the learned responses too (which its mixes never include)."""
    nash = sampled_metagame.read(run_dir, source)
    members = []
    for key, w0, w1 in zip(nash.keys, *nash.seat_weights):
        if w0 <= 0 and w1 <= 0:
            continue
        average = key.startswith(PARAM_AVERAGE_KEY)
        if average:
            owner, step = parse_average_key(key)
            directory = _home(run_dir, owner or player)
        else:
            owner, step = parse_key(key)
            directory = _player_dir(run_dir, owner)
        members.append(Member(key, (w0 + w1) / 2, directory, step, average=average, seat_weights=(w0, w1)))
    responses = sum(key.startswith(RESPONSE_KEY) for key in nash.keys)
    against = f", mixed against {responses} learned best responses too" if responses else ""
    note = (f"the Nash mixture of {len(nash.keys) - responses} networks' meta-game from {nash.games:,} evaluation "
            f"games{against} (largest entry's 95% half-width {nash.max_half_width:.4f})")
    return Output(source, tuple(members), note)


def _league_nash(run_dir: str, player: str) -> Output:
    """PSRO's meta-strategy over `player`'s snapshots that exist now, from the league's stored win rates."""
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
