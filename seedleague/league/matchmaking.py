"""Who plays whom, and when a learner freezes a snapshot: the league's rules as functions.

Every function reads a `LeagueView` (players, snapshots, payoff counts; read-only)
and draws from a numpy Generator; none touches SQL, gRPC or the league's lock.

    matches = choose_opponents(view, "main", count=8, config=config, rng=rng)
    decision = check_in_decision(view, view.players["main"], learner_step=1500, config=config, rng=rng)

What the host can run: the learner's live params on one seat and, on the other,
either its own live params (self-play: `Match(opponent=<player>, self_play=True)`)
or a snapshot from the model pool. Other players' live params are not
reachable, so "play main agent M" means M's latest snapshot.

Modes and roles (AlphaStar: Vinyals et al., Nature 2019, Methods and pseudocode):
  SELF_PLAY         always self-play.
  LAST_N            uniform over the player's own last N snapshots.
  PFSP              PFSP (configured weighting) over every snapshot of every player.
  PSRO              the Nash mixture of the snapshots' win-rate matrix, mixed with
                    uniform (psro_epsilon) (Lanctot et al., NeurIPS 2017).
  ALPHASTAR, MAIN   50% hard-PFSP over every snapshot; 15% the "verification" branch
                    (past main exploiters it cannot beat, else forgotten snapshots of a
                    main agent); 35% (and when verification finds nothing) self-play
                    against a random main agent, or variance-PFSP over that agent's
                    snapshots when it beats its latest one less than 30%.
  ALPHASTAR, MAIN_EXPLOITER    a random main agent's latest snapshot, or variance-PFSP
                    over its snapshots when it beats that less than main_exploiter_threshold.
  ALPHASTAR, LEAGUE_EXPLOITER  linear-capped PFSP over every snapshot.
With nothing to draw from (no snapshot yet), every rule falls back to self-play.
Anchors (fixed members, types.Role.ANCHOR), in every mode: an `anchor_share` of the draws is a
game against one of them, uniformly; such a match rates only (`Match.rates_only`).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Optional, Sequence

import numpy as np

from seedleague.league import payoff
from seedleague.league.config import LeagueConfig
from seedleague.league.nash import symmetric_nash
from seedleague.league.pfsp import pfsp_weights
from seedleague.league.types import Match, Mode, PlayerInfo, Role, SnapshotDecision, SnapshotInfo

PFSP_BRANCH, FORGOTTEN_BRANCH, SELF_PLAY_BRANCH = "pfsp", "forgotten", "self_play"


@dataclasses.dataclass(frozen=True)
class LeagueView:
    """What the rules read: players by name, snapshots oldest first, and the payoff counts.

    `counts[index[a], index[b]]` is the pair's decayed [wins, draws, losses, games]
    from a's side (see `payoff`); `index` covers live player names and snapshot keys.
    """

    players: Mapping[str, PlayerInfo]
    snapshots: Sequence[SnapshotInfo]
    index: Mapping[str, int]
    counts: np.ndarray  # [K, K, 4], read-only
    min_games: float
    anchors: Sequence[str] = ()  # the anchors' keys: learners meet them in config.anchor_share of their draws

    def win_rates(self, key: str, opponents: Sequence[str]) -> np.ndarray:
        """P[key beats each opponent] [len(opponents)], 0.5 below min_games games."""
        row = self.counts[self.index[key], [self.index[o] for o in opponents]].reshape(len(opponents), payoff.ROW)
        return payoff.win_rate(row[:, payoff.WINS], row[:, payoff.DRAWS], row[:, payoff.GAMES], self.min_games)

    def snapshots_of(self, player: str) -> list[SnapshotInfo]:
        return [s for s in self.snapshots if s.player == player]

    def latest_snapshot(self, player: str) -> Optional[SnapshotInfo]:
        mine = self.snapshots_of(player)
        return mine[-1] if mine else None

    def names_with_role(self, role: Role) -> list[str]:
        return [name for name, info in self.players.items() if info.role == role]


def self_play(player: str) -> Match:
    return Match(opponent=player, self_play=True)


def pfsp_match(
    view: LeagueView, player: str, candidates: Sequence[SnapshotInfo], weighting: str, p: float, rng: np.random.Generator
) -> Match:
    """A snapshot drawn by PFSP over `candidates` from `player`'s side; self-play when there are none."""
    if not candidates:
        return self_play(player)
    keys = [s.key for s in candidates]
    probs = pfsp_weights(view.win_rates(player, keys), weighting, p)
    return Match(opponent=keys[rng.choice(len(keys), p=probs)], self_play=False)


def last_n_match(view: LeagueView, player: str, n: int, rng: np.random.Generator) -> Match:
    """Uniform over the player's own last `n` snapshots; self-play while it has none."""
    return pfsp_match(view, player, view.snapshots_of(player)[-n:], "uniform", 1.0, rng)


def psro_mixture(view: LeagueView, epsilon: float) -> np.ndarray:
    """Probabilities over `view.snapshots`: (1 - epsilon) * Nash of their win-rate matrix + epsilon * uniform."""
    keys = [s.key for s in view.snapshots]
    if not keys:
        return np.zeros(0)
    win_rates = np.stack([view.win_rates(key, keys) for key in keys])
    nash = symmetric_nash(win_rates)
    return (1.0 - epsilon) * nash + epsilon / len(keys)


def psro_match(view: LeagueView, player: str, mixture: np.ndarray, rng: np.random.Generator) -> Match:
    """A snapshot drawn from `mixture` (from `psro_mixture`); self-play when there are no snapshots."""
    if not len(mixture):
        return self_play(player)
    return Match(opponent=view.snapshots[rng.choice(len(mixture), p=mixture / mixture.sum())].key, self_play=False)


def main_agent_branch(u: float, config: LeagueConfig) -> str:
    """The main agent's branch for a uniform draw `u` in [0, 1): PFSP, then forgotten, then self-play."""
    if u < config.main_pfsp:
        return PFSP_BRANCH
    if u < config.main_pfsp + config.main_forgotten:
        return FORGOTTEN_BRANCH
    return SELF_PLAY_BRANCH


def remove_monotonic_suffix(win_rates: np.ndarray, keys: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """Drop the trailing run of snapshots whose win rates never increase (AlphaStar pseudocode).

    Those are the newest snapshots the player beats less and less, i.e. ones it
    is still learning against; what is left ends at the last "dip" and holds the
    snapshots it may have forgotten how to beat. Empty when the rates never rise.
    """
    win_rates = np.asarray(win_rates, np.float64)
    if win_rates.shape != (len(keys),):
        raise ValueError(f"win_rates has shape {win_rates.shape}, expected ({len(keys)},)")
    for i in range(len(keys) - 1, 0, -1):
        if win_rates[i - 1] < win_rates[i]:
            return win_rates[: i + 1], list(keys[: i + 1])
    return np.zeros(0), []


def main_self_play_match(
    view: LeagueView, player: str, opponent: str, config: LeagueConfig, rng: np.random.Generator
) -> Match:
    """Self-play against main agent `opponent` (its latest snapshot unless it is `player`).

    Below `main_self_play_threshold` against that snapshot: variance-PFSP over
    `opponent`'s snapshots instead, a curriculum toward the current one.
    """
    latest = view.latest_snapshot(opponent)
    if opponent == player or latest is None:
        return self_play(player)
    if view.win_rates(player, [latest.key])[0] >= config.main_self_play_threshold:
        return Match(opponent=latest.key, self_play=False)
    return pfsp_match(view, player, view.snapshots_of(opponent), "variance", config.pfsp_p, rng)


def forgotten_match(
    view: LeagueView, player: str, opponent: str, config: LeagueConfig, rng: np.random.Generator
) -> Optional[Match]:
    """AlphaStar's verification branch, or None when it finds nothing to play.

    Past main-exploiter snapshots first, if the player beats one of them less than
    `main_exploiter_check_threshold`; else the forgotten snapshots of main agent
    `opponent` (see `remove_monotonic_suffix`), if it beats one less than
    `main_forgotten_threshold`. Hard-PFSP over the chosen set.
    """
    exploiters = [s for s in view.snapshots if s.role == Role.MAIN_EXPLOITER]
    if exploiters and view.win_rates(player, [s.key for s in exploiters]).min() < config.main_exploiter_check_threshold:
        return pfsp_match(view, player, exploiters, "hard", config.pfsp_p, rng)
    history = view.snapshots_of(opponent)
    rates, keys = remove_monotonic_suffix(view.win_rates(player, [s.key for s in history]), [s.key for s in history])
    if keys and rates.min() < config.main_forgotten_threshold:
        return pfsp_match(view, player, history[: len(keys)], "hard", config.pfsp_p, rng)
    return None


def main_agent_match(view: LeagueView, player: str, config: LeagueConfig, rng: np.random.Generator) -> Match:
    """One AlphaStar main-agent draw (see the module docstring)."""
    branch = main_agent_branch(rng.random(), config)
    if branch == PFSP_BRANCH:
        return pfsp_match(view, player, view.snapshots, "hard", config.pfsp_p, rng)
    mains = view.names_with_role(Role.MAIN)
    opponent = mains[rng.choice(len(mains))] if mains else player
    if branch == FORGOTTEN_BRANCH:
        match = forgotten_match(view, player, opponent, config, rng)
        if match is not None:
            return match
    return main_self_play_match(view, player, opponent, config, rng)


def main_exploiter_match(view: LeagueView, player: str, config: LeagueConfig, rng: np.random.Generator) -> Match:
    """A random main agent's latest snapshot, or variance-PFSP over its snapshots when that is too strong."""
    mains = view.names_with_role(Role.MAIN)
    if not mains:
        return self_play(player)
    target = mains[rng.choice(len(mains))]
    latest = view.latest_snapshot(target)
    if latest is None:
        return self_play(player)
    if view.win_rates(player, [latest.key])[0] >= config.main_exploiter_threshold:
        return Match(opponent=latest.key, self_play=False)
    return pfsp_match(view, player, view.snapshots_of(target), "variance", config.pfsp_p, rng)


def league_exploiter_match(view: LeagueView, player: str, config: LeagueConfig, rng: np.random.Generator) -> Match:
    return pfsp_match(view, player, view.snapshots, "linear_capped", config.pfsp_p, rng)


_ROLE_MATCH = {
    Role.MAIN: main_agent_match,
    Role.MAIN_EXPLOITER: main_exploiter_match,
    Role.LEAGUE_EXPLOITER: league_exploiter_match,
}


def _draw(view: LeagueView, player: str, config: LeagueConfig,
          mixture: Optional[np.ndarray]) -> Callable[[np.random.Generator], Match]:
    """One draw of `player`'s opponent under config.mode; per-call work (the Nash LP, unless `mixture`
    gives its result) done once here."""
    if config.mode == Mode.SELF_PLAY:
        return lambda rng: self_play(player)
    if config.mode == Mode.LAST_N:
        return _with_self_play(player, config, lambda rng: last_n_match(view, player, config.last_n, rng))
    if config.mode == Mode.PFSP:
        return _with_self_play(player, config, lambda rng: pfsp_match(
            view, player, view.snapshots, config.pfsp_weighting, config.pfsp_p, rng))
    if config.mode == Mode.PSRO:
        if mixture is None:
            mixture = psro_mixture(view, config.psro_epsilon)
        return _with_self_play(player, config, lambda rng: psro_match(view, player, mixture, rng))
    role_match = _ROLE_MATCH[Role(view.players[player].role)]
    return lambda rng: role_match(view, player, config, rng)


def _with_anchors(view: LeagueView, config: LeagueConfig,
                  draw: Callable[[np.random.Generator], Match]) -> Callable[[np.random.Generator], Match]:
    """`draw`, except that a `config.anchor_share` of the matches are against an anchor, drawn uniformly; those
    rate the learner and the anchor and are not trained on. No anchor: `draw` itself (and its RNG stream)."""
    anchors = list(view.anchors)
    if not anchors or not config.anchor_share:
        return draw

    def with_anchors(rng: np.random.Generator) -> Match:
        if rng.random() < config.anchor_share:
            return Match(opponent=anchors[rng.choice(len(anchors))], self_play=False, rates_only=True)
        return draw(rng)

    return with_anchors


def _with_self_play(player: str, config: LeagueConfig,
                    draw: Callable[[np.random.Generator], Match]) -> Callable[[np.random.Generator], Match]:
    """`draw`, except that a `config.self_play_share` of the matches are self-play."""
    if not config.self_play_share:
        return draw
    return lambda rng: self_play(player) if rng.random() < config.self_play_share else draw(rng)


def choose_opponents(
    view: LeagueView, player: str, count: int, config: LeagueConfig, rng: np.random.Generator,
    psro: Optional[np.ndarray] = None,
) -> list[Match]:
    """`count` independent opponent draws for live player `player`; `psro`: Mode.PSRO's mixture over
    `view.snapshots` when the caller has it (`psro_mixture`), else it is solved here."""
    draw = _with_anchors(view, config, _draw(view, player, config, psro))
    return [draw(rng) for _ in range(count)]


# --- check-ins ------------------------------------------------------------------------------------


def beats_all(view: LeagueView, player: str, targets: Sequence[str], win_rate: float) -> bool:
    """True when `player` beats every key in `targets` with a win rate above `win_rate` (False for none).

    A pair below min_games games reads 0.5, so a target needs that many games first.
    """
    return bool(targets) and bool(view.win_rates(player, targets).min() > win_rate)


def _exploiter_ready(view: LeagueView, info: PlayerInfo, steps: int, timeout: int, config: LeagueConfig) -> str:
    """Why an exploiter should snapshot now ("" = not yet): timeout, or it beats all its targets."""
    if steps >= timeout:
        return f"{steps} steps since the last snapshot reached the timeout of {timeout}"
    if steps < config.exploiter_min_steps:
        return ""
    if info.role == Role.MAIN_EXPLOITER:
        latest = (view.latest_snapshot(name) for name in view.names_with_role(Role.MAIN))
        targets, what = [s.key for s in latest if s is not None], "every main agent's latest snapshot"
    else:
        targets, what = [s.key for s in view.snapshots], "every snapshot"
    if beats_all(view, info.name, targets, config.exploiter_snapshot_win_rate):
        return f"beats {what} with a win rate above {config.exploiter_snapshot_win_rate}"
    return ""


def check_in_decision(
    view: LeagueView, info: PlayerInfo, learner_step: int, config: LeagueConfig, rng: np.random.Generator
) -> SnapshotDecision:
    """Whether `info`'s learner, now at `learner_step`, should freeze a snapshot, and reset after it.

    A player with no snapshot snapshots at once (its initial params enter the pool).
    Main agents, and every player outside Mode.ALPHASTAR, snapshot every
    snapshot_interval_steps and never reset. Main exploiters snapshot when they
    beat every main agent's latest snapshot or time out, then always reset;
    league exploiters when they beat every snapshot or time out, then reset with
    probability league_exploiter_reset_prob.
    """
    if info.snapshots == 0:
        return SnapshotDecision(snapshot=True, reset=False, reason="first check-in: the initial params enter the pool")
    steps = learner_step - info.last_snapshot_step
    if config.mode != Mode.ALPHASTAR or info.role == Role.MAIN:
        if steps >= config.snapshot_interval_steps:
            return SnapshotDecision(True, False, f"{steps} steps since the last snapshot")
        return SnapshotDecision(False)
    timeout = (
        config.main_exploiter_timeout_steps if info.role == Role.MAIN_EXPLOITER else config.league_exploiter_timeout_steps
    )
    reason = _exploiter_ready(view, info, steps, timeout, config)
    if not reason:
        return SnapshotDecision(False)
    if info.role == Role.MAIN_EXPLOITER:
        return SnapshotDecision(True, True, reason)
    return SnapshotDecision(True, bool(rng.random() < config.league_exploiter_reset_prob), reason)
