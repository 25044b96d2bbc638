"""LeagueConfig: every number the league uses, in one frozen dataclass validated on creation.

Defaults follow the AlphaStar paper (Vinyals et al., Nature 2019) and its
pseudocode, with the step counts scaled from StarCraft's billions of agent steps
to learner steps of small games; the paper's values are in the comments.
`seedleague league serve` exposes every field as a flag (`--pfsp-weighting
variance`, via seedleague.config_flags).
"""

from __future__ import annotations

import dataclasses
import math
import os

from seedleague.league.pfsp import WEIGHTINGS
from seedleague.league.types import UNIFORM_ANCHOR, Mode

# How PBT spends its level over a round's looks (seedleague.league.sequential; kept here so the config needs no scipy)
SPENDINGS = ("obrien_fleming", "pocock", "bonferroni")
MAX_SPENT_LOOKS = 20  # the most looks a round may have with a spending function (each look integrates over the earlier)


@dataclasses.dataclass(frozen=True)
class LeagueConfig:
    mode: Mode = Mode.ALPHASTAR  # how opponents are chosen; see types.Mode
    seed: int = 0  # of the league's RNG (opponent draws, league exploiters' resets); restarts begin again from it

    # Mode.LAST_N: uniform over the player's own last N snapshots.
    last_n: int = 5
    # Mode.PFSP: the weighting over every snapshot (hard, variance, linear, linear_capped, uniform).
    pfsp_weighting: str = "hard"
    pfsp_p: float = 2.0  # exponent of "hard" (1-x)^p; AlphaStar's "squared" is 2 (also used by the main agent)
    # Mode.PSRO: probability mass spread uniformly over all snapshots, the rest follows the Nash mixture.
    psro_epsilon: float = 0.1
    # Modes LAST_N, PFSP and PSRO: the share of episodes the learner plays against itself; the rest meet
    # snapshots as the mode draws them (0: every episode against a snapshot once there is one).
    self_play_share: float = 0.0

    # Anchors: fixed members that never train, rated on the same scale as everyone (docs/league_page.md,
    # "Anchors"). Each is "uniform" (the uniform random policy in the run's network), "NAME=PATH" or "PATH" (a
    # run's output, or a checkpoint directory; NAME defaults to the directory's name). Learners meet them in
    # anchor_share of their episodes, in every mode; those games rate both sides and are never trained on.
    anchors: tuple[str, ...] = ()
    anchor_share: float = 0.02  # the share of every learner's episodes played against an anchor (0: anchors are never drawn)

    # Payoff table and ratings.
    payoff_decay: float = 0.99  # each pair's counts are multiplied by this at every new result (paper: 0.99)
    min_games: int = 5  # below this many (decayed) games a win rate reads 0.5 (TLeague: 5)
    elo_k: float = 32.0  # Elo's K: how far one result moves a rating (REFERENCE: about 32)
    elo_scale: float = 400.0  # rating points for 10:1 odds
    initial_elo: float = 1200.0  # a new snapshot's rating
    elo_history_every: int = 10  # elo_history() records a point every this many results

    # AlphaStar main agent: branch probabilities (paper: 35% self-play, 50% PFSP, 15% forgotten/exploiters).
    main_self_play: float = 0.35
    main_pfsp: float = 0.5  # AlphaStar main agent: share of episodes against PFSP-drawn snapshots
    main_forgotten: float = 0.15  # AlphaStar main agent: share on the forgotten/exploiter branch
    # In self-play, below this win rate against the opponent main agent, variance-PFSP over its snapshots (paper: 0.3).
    main_self_play_threshold: float = 0.3
    # Forgotten branch: hard-PFSP over past main-exploiter snapshots if it beats one of them less often than this
    # (pseudocode: 0.3), else over the forgotten snapshots of the opponent main agent if it beats one of them
    # less often than `main_forgotten_threshold` (pseudocode: 0.7), else self-play.
    main_exploiter_check_threshold: float = 0.3
    main_forgotten_threshold: float = 0.7  # forgotten branch: see the comment above
    # Main exploiter: below this win rate against a main agent's latest snapshot, variance-PFSP over that agent's
    # snapshots instead (paper: 0.2; pseudocode: 0.1).
    main_exploiter_threshold: float = 0.2

    # Check-ins. Main agents (and every player outside Mode.ALPHASTAR) snapshot every this many learner
    # steps and never reset (paper: 2e9 agent steps).
    snapshot_interval_steps: int = 500
    # Exploiters snapshot once they beat every target (main agents' latest snapshots for main exploiters, every
    # snapshot for league exploiters) with a win rate above this (paper: 0.7) ...
    exploiter_snapshot_win_rate: float = 0.7
    # ... but not sooner than this many steps after their last snapshot (pseudocode: 2e9; 0 = at once) ...
    exploiter_min_steps: int = 200
    # ... or after these many steps without a snapshot (paper: 4e9 main exploiter, 2e9 league exploiter).
    main_exploiter_timeout_steps: int = 1000
    league_exploiter_timeout_steps: int = 500  # the same for league exploiters
    # After a snapshot a main exploiter always resets to its initial params; a league exploiter with this
    # probability (paper: 0.25).
    league_exploiter_reset_prob: float = 0.25

    # Population-based training (seedleague.league.pbt, docs/pbt.md) over the learning players of role main:
    # the open round is looked at every this many learner updates of each member (0: off). Members are ranked by
    # their round's worst case: their lowest score (mean return, or win score when the returns are only signs)
    # against an opponent every member met at least `pbt_min_games` times in the round. The round closes when a
    # bottom-`pbt_share` member's drawn top member is better with confidence (a one-sided test at level
    # `pbt_alpha`, spent over the round's looks by `pbt_spending`) or at its `pbt_looks`-th look; the bottom member then copies the top member's newest snapshot and settings and
    # perturbs each setting by 1 - pbt_perturb or 1 + pbt_perturb (Jaderberg et al. 2017: 0.8 or 1.2).
    pbt_interval: int = 0
    pbt_share: float = 0.25  # PBT: the bottom and the top share of the members (TLeague: the better quarter)
    pbt_alpha: float = 0.05  # PBT: the chance that a round copies a member that is not better (one-sided)
    pbt_looks: int = 5  # PBT: the most looks at a round, pbt_interval updates apart: a round lasts at most this many
    # PBT: how the level is spent over a round's looks: obrien_fleming or pocock (Lan-DeMets spending functions:
    # group-sequential critical values from the looks' correlation), or bonferroni (alpha / pbt_looks a look)
    pbt_spending: str = "obrien_fleming"
    pbt_min_games: int = 100  # PBT: a member's games against an opponent, in a round, for it to count in the worst case
    pbt_perturb: float = 0.2  # PBT: each copied setting is multiplied by 1 - this or 1 + this (Jaderberg: 0.8 / 1.2)

    # The gRPC service's request rate limit, per client connection (token bucket): RESOURCE_EXHAUSTED beyond
    # `request_burst` calls at once or `max_requests_per_s` sustained. A host makes a few calls a second;
    # 0 turns the limit off.
    max_requests_per_s: float = 500.0
    request_burst: int = 1000  # calls at once a connection may make before the sustained limit applies

    def __post_init__(self):
        if isinstance(self.mode, str) and not isinstance(self.mode, Mode) and self.mode in {m.value for m in Mode}:
            object.__setattr__(self, "mode", Mode(self.mode))  # e.g. read back from JSON
        if isinstance(self.anchors, (list, str)):  # read back from JSON, or one given as a string
            object.__setattr__(self, "anchors", tuple([self.anchors] if isinstance(self.anchors, str) else self.anchors))
        problems = (_mode_problems(self) + _probability_problems(self) + _count_problems(self)
                    + _anchor_problems(self))
        if problems:
            raise ValueError("bad league config: " + "; ".join(problems))


_PROBABILITIES = (
    "psro_epsilon",
    "self_play_share",
    "anchor_share",
    "main_self_play",
    "main_pfsp",
    "main_forgotten",
    "main_self_play_threshold",
    "main_exploiter_check_threshold",
    "main_forgotten_threshold",
    "main_exploiter_threshold",
    "exploiter_snapshot_win_rate",
    "league_exploiter_reset_prob",
)
_POSITIVE = ("last_n", "elo_history_every", "snapshot_interval_steps", "main_exploiter_timeout_steps",
             "league_exploiter_timeout_steps", "pfsp_p", "elo_k", "elo_scale")
_NON_NEGATIVE = ("min_games", "exploiter_min_steps", "max_requests_per_s")


def anchor_member(spec: str) -> tuple[str, str]:
    """(name, path) of one `LeagueConfig.anchors` entry: "uniform" -> ("uniform", "uniform"); "NAME=PATH";
    "PATH" -> (the last directory name of PATH, with ':' and spaces as '-', PATH). ValueError naming the fix."""
    if spec == UNIFORM_ANCHOR:
        return UNIFORM_ANCHOR, UNIFORM_ANCHOR
    name, sep, path = spec.partition("=")
    if not sep:
        path = spec
        name = os.path.basename(os.path.normpath(spec)) if spec else ""
        name = "".join("-" if c == ":" or c.isspace() else c for c in name)
    if not path or not name or len(name) > 64 or ":" in name or any(c.isspace() for c in name):
        raise ValueError(f"anchor {spec!r} is not 'uniform', 'NAME=PATH' or 'PATH': NAME is 1 to 64 characters "
                         "without ':' or spaces, PATH a run directory")
    return name, path


def _anchor_problems(config: LeagueConfig) -> list[str]:
    problems, names = [], []
    for spec in config.anchors:
        try:
            names.append(anchor_member(str(spec))[0])
        except ValueError as error:
            problems.append(str(error))
    if len(set(names)) != len(names):
        problems.append(f"anchor names must be unique, got {names}: name them with NAME=PATH")
    return problems


def _mode_problems(config: LeagueConfig) -> list[str]:
    problems = []
    if config.mode not in tuple(Mode):
        problems.append(f"mode {config.mode!r} is unknown: use one of {', '.join(m.value for m in Mode)}")
    if config.pfsp_weighting not in WEIGHTINGS:
        problems.append(f"pfsp_weighting {config.pfsp_weighting!r} is unknown: use one of {', '.join(WEIGHTINGS)}")
    return problems


def _probability_problems(config: LeagueConfig) -> list[str]:
    problems = [
        f"{name} is a probability or win rate: set it in [0, 1], got {getattr(config, name)}"
        for name in _PROBABILITIES
        if not 0.0 <= getattr(config, name) <= 1.0
    ]
    total = config.main_self_play + config.main_pfsp + config.main_forgotten
    if not math.isclose(total, 1.0, abs_tol=1e-9):
        problems.append(
            f"main_self_play + main_pfsp + main_forgotten must sum to 1 (paper: 0.35 + 0.5 + 0.15), got {total:g}"
        )
    if not 0.0 < config.payoff_decay <= 1.0:
        problems.append(f"payoff_decay must be in (0, 1] (1 = no decay; paper: 0.99), got {config.payoff_decay}")
    return problems


def _count_problems(config: LeagueConfig) -> list[str]:
    problems = [f"{name} must be > 0, got {getattr(config, name)}" for name in _POSITIVE if not getattr(config, name) > 0]
    problems += [
        f"{name} must be >= 0, got {getattr(config, name)}" for name in _NON_NEGATIVE if not getattr(config, name) >= 0
    ]
    if config.max_requests_per_s > 0 and not config.request_burst >= 1:
        problems.append(f"request_burst must be >= 1 when max_requests_per_s is set, got {config.request_burst}")
    if config.pbt_interval < 0:
        problems.append(f"pbt_interval must be >= 0 learner updates (0: no population-based training), "
                        f"got {config.pbt_interval}")
    if not 0 < config.pbt_share <= 0.5:
        problems.append(f"pbt_share must be in (0, 0.5] (the bottom and the top share of the members), "
                        f"got {config.pbt_share}")
    if not 0 < config.pbt_alpha < 1:
        problems.append(f"pbt_alpha must be in (0, 1) (the chance a round copies a member that is not better; "
                        f"0.05 is usual), got {config.pbt_alpha}")
    if not (isinstance(config.pbt_looks, int) and config.pbt_looks >= 1):
        problems.append(f"pbt_looks must be a whole number >= 1 (the most looks at a round, pbt_interval updates "
                        f"apart), got {config.pbt_looks!r}")
    if config.pbt_spending not in SPENDINGS:
        problems.append(f"pbt_spending must be one of {', '.join(SPENDINGS)} (how the level is spent over a round's "
                        f"looks), got {config.pbt_spending!r}")
    elif config.pbt_spending != "bonferroni" and isinstance(config.pbt_looks, int) and config.pbt_looks > MAX_SPENT_LOOKS:
        problems.append(f"pbt_looks must be at most {MAX_SPENT_LOOKS} with pbt_spending {config.pbt_spending} (each look "
                        f"computes its critical values by numerical integration over the looks before it), got "
                        f"{config.pbt_looks}: use fewer looks, or pbt_spending bonferroni")
    if not (isinstance(config.pbt_min_games, int) and config.pbt_min_games >= 1):
        problems.append(f"pbt_min_games must be a whole number of games >= 1 (a member's games against an opponent "
                        f"in a round for it to count in the worst case), got {config.pbt_min_games!r}")
    if not 0 < config.pbt_perturb < 1:
        problems.append(f"pbt_perturb must be in (0, 1) (factors 1 - p and 1 + p; 0.2: x0.8 or x1.2), "
                        f"got {config.pbt_perturb}")
    if not math.isfinite(config.initial_elo):
        problems.append(f"initial_elo must be a finite number, got {config.initial_elo}")
    return problems
