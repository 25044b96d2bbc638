"""What `seedleague eval` measures, and the run's evaluation history: every evaluation that applies to a policy
of an OpenSpiel game, as one history entry (`evaluate`, `evaluate_run`), and `<run_dir>/eval/history.jsonl`.

    entry = evaluate(run_dir, policy, EvalConfig(games=100))   # {"time", "step", ..., "results": {...}}
    entry, why = evaluate_run(run_dir, QUICK)                  # the newest checkpoint and the run's output; or why not
                                                               # (EvalConfig, QUICK: seedleague.eval.eval_config)
    append_history(run_dir, entry); read_history(run_dir)

Imperfect-information games (poker) get exact exploitability (and that of a mixture, of the recent average of the
snapshots, of the league's Nash mixtures and of the learner's param average where the checkpoint keeps one) where
their tree can be walked (seedleague.eval.tree_size), else win/draw/loss against uniform random and a note naming
`seedleague exploit`; perfect-information games get win/draw/loss against uniform random and against MCTS; a
head-to-head match applies to any OpenSpiel game. `seedleague.eval.cli` parses the command and prints the entry.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Optional

import numpy as np
import pyspiel

from seedleague import output as run_output
from seedleague.artifacts.load import load_policy, load_snapshot
from seedleague.eval import board, metagame, openspiel_eval, output_score
from seedleague.eval.curve import load_param_average
from seedleague.eval.eval_config import EvalConfig, check_average_fraction
from seedleague.eval.output_selection import POPULATION
from seedleague.eval.tree_size import game_of, tree_too_large
from seedleague.eval.run_league import league_of
from seedleague.games.openspiel import game_name, load_game
from seedleague.league.model_pool import ModelPool, root_of
from seedleague.league.nash import league_nash


END_OF_RUN_AVERAGE = 1 / 3  # the end of `seedleague train` reports the average of the newest third of the snapshots


def resolve_policy(run_dir: str, key_or_path: str):
    """A snapshot key ("main:000512", from `<run_dir>/pool`) or a directory (run, checkpoints or pool player)."""
    if os.path.isdir(key_or_path):
        return load_policy(key_or_path)
    return load_snapshot(run_dir, key_or_path)


def evaluate(run_dir: str, policy, config: EvalConfig, vs: Optional[str] = None,
             mixture: Optional[list[tuple[str, float]]] = None, nash: bool = False,
             average: Optional[float] = None, param_average=None) -> dict:
    """Every evaluation that applies to `policy`'s game; returns the history entry (results inside).
    `average`: also the exploitability of the uniform mixture of the newest `average` fraction of
    the league's snapshots (poker games). `param_average`: the same checkpoint's running mean of
    the params (`seedleague.eval.curve.load_param_average`), scored beside the policy (poker games). Raises ValueError
    when the env is not an OpenSpiel game (nothing here applies)."""
    name = game_name(policy.spec.env_name)
    if name is None:
        raise ValueError(
            f"{policy.spec.env_name!r} is not an OpenSpiel game (expected 'openspiel:<game>'): exploitability, "
            "MCTS and head-to-head evaluation need OpenSpiel's game tree. Load the policy with "
            "seedleague.api.load_policy and play it in your own env instead (see docs/api.md)"
        )
    game = load_game(name)
    imperfect = game.get_type().information == pyspiel.GameType.Information.IMPERFECT_INFORMATION
    results: dict[str, Any] = {"game": name, "information": "imperfect" if imperfect else "perfect"}
    too_large = tree_too_large(policy.spec.env_name)
    exact = imperfect and not too_large
    if exact:
        results.update(_exploitability(game, policy))
        if param_average is not None:
            results.update({"param_average_" + k: v for k, v in _exploitability(game, param_average).items()},
                           param_average=param_average.meta["average"])
    elif too_large:
        # MCTS would search the true state of a game whose players do not see it: against random only
        results.update(exploitability_note=_not_exact(run_dir, too_large),
                       vs_random=board.vs_random(game, policy, config.games, config.greedy, config.seed,
                                                 config.match_seconds).to_dict())
    else:
        results.update(_board(game, policy, config))
    if mixture:
        results.update(_mixture(run_dir, game, exact, mixture))
    if average is not None and exact:
        results.update(_recent_average(run_dir, game, average, param_average))
    if nash and exact:
        results.update(_league_nash(run_dir, game))
    if vs:
        opponent = resolve_policy(run_dir, vs)
        stats = board.head_to_head(game, policy, opponent, config.games, config.greedy, config.seed)
        results["head_to_head"] = dict(stats.to_dict(), opponent=vs, opponent_step=opponent.step)
    meta = policy.meta
    return dict(time=time.time(), step=policy.step, env_steps=meta.get("env_steps"), wall_s=meta.get("wall_s"),
                policy=policy.source, env_name=policy.spec.env_name, greedy=config.greedy, results=results)


def _exploitability(game, policy) -> dict:
    start = time.perf_counter()
    value = openspiel_eval.exploitability(game, policy)
    return {"exploitability": value, "exploitability_seconds": time.perf_counter() - start}


def _board(game, policy, config: EvalConfig) -> dict:
    vs_random = board.vs_random(game, policy, config.games, config.greedy, config.seed, config.match_seconds)
    mcts_games = config.mcts_games or config.games
    vs_mcts = {
        str(sims): board.vs_mcts(game, policy, mcts_games, sims, config.uct_c, greedy=config.greedy,
                                 seed=config.seed, max_seconds=config.match_seconds).to_dict()
        for sims in config.mcts_sims
    }
    return {"vs_random": vs_random.to_dict(), "vs_mcts": vs_mcts}


def _not_exact(run_dir: str, too_large: str) -> str:
    return f"{too_large}; `seedleague exploit --run-dir {run_dir}` measures the output with a learned best response"


def _mixture(run_dir: str, game, exact: bool, mixture: list[tuple[str, float]]) -> dict:
    if not exact:
        return {"mixture_note": "--mixture applies to imperfect-information games whose tree can be walked only "
                                "(exact exploitability)"}
    policies = [resolve_policy(run_dir, key) for key, _ in mixture]
    value = openspiel_eval.mixture_exploitability(game, policies, [w for _, w in mixture])
    return {"mixture": dict(mixture), "mixture_exploitability": value}


def _recent_average(run_dir: str, game, fraction: float, param_average=None) -> dict:
    """Exploitability of the average policy of the newest `fraction` of the first player's snapshots
    (a uniform mixture, mixed as behaviour strategies). Self-play by policy gradient does not settle
    on an equilibrium; its recent average is nearer one than any single iterate (fictitious play).
    With the learner's `param_average` (a Policy), also that of the even mixture of the two averages:
    the param average played half the time, a snapshot of the window the other half. Exploitability is
    convex in a mixture, so it is at most the mean of the two, and where the two miss the equilibrium
    in different directions it is below both (Leduc numbers in benchmarks/README.md)."""
    check_average_fraction(fraction)
    player, keys = pool_keys(run_dir)
    if not keys:
        return {"average_note": "the run has no league snapshots yet"}
    start = time.perf_counter()
    policies = run_output.average_policy(run_dir, fraction, player, False).load().members
    count = len(policies)
    keys = keys[-count:]
    tables = openspiel_eval.PolicyTables(game, policies + ([param_average] if param_average is not None else []))
    out = {"average_exploitability": tables.exploitability(np.ones(count), np.arange(count)),
           "average_snapshots": [keys[0], keys[-1], count], "average_fraction": fraction}
    if param_average is not None:
        out["average_and_params_exploitability"] = tables.exploitability([0.5 / count] * count + [0.5])
    return dict(out, average_seconds=time.perf_counter() - start)


def _league_nash(run_dir: str, game, max_snapshots: Optional[int] = None) -> dict:
    """Exploitability of two Nash mixtures over the league's snapshots (PSRO meta-strategies): from the
    exact meta-game (every snapshot against every other, computed from the game tree) and, when
    snapshots played each other, from the league's own payoff table of win rates."""
    max_snapshots = max_snapshots or POPULATION

    league = league_of(run_dir)
    if league is None:
        return {"nash_note": f"no league database under {run_dir}"}
    try:
        payoff, keys = league.payoff(), [s.key for s in league.snapshots()][-max_snapshots:]
    finally:
        league.close()
    if not keys:
        return {"nash_note": "the league has no snapshots yet"}
    start = time.perf_counter()
    value, weights = metagame.nash_mixture_exploitability(game, [resolve_policy(run_dir, key) for key in keys])
    out = {"nash_mixture_exploitability": value, "nash_mixture": {k: float(w) for k, w in zip(keys, weights) if w > 1e-6},
           "nash_mixture_seconds": time.perf_counter() - start, "nash_population": len(keys)}
    snapshots = [i for i, key in enumerate(payoff.keys) if ":" in key]
    if np.asarray(payoff.games)[np.ix_(snapshots, snapshots)].any():
        table = league_nash(payoff.keys, np.asarray(payoff.win_rate), None)
        policies = [resolve_policy(run_dir, key) for key in table]
        out.update(league_table_nash_exploitability=openspiel_eval.mixture_exploitability(game, policies, list(table.values())),
                   league_table_nash=table)
    return out


def _output(run_dir: str, policy, config: EvalConfig) -> dict:
    """The run's output (seedleague.api.load_trained), scored: exploitability in imperfect-information
    games (a mixture as played, one member per game), win/draw/loss against random otherwise."""
    try:
        resolved = run_output.resolve(run_dir)
        trained = resolved.load(config.seed)
    except (ValueError, FileNotFoundError, NotImplementedError) as error:
        return {"output_note": f"no output to score: {error}"}
    out = {"output": resolved.describe()}
    game = load_game(game_name(policy.spec.env_name))
    exact = not tree_too_large(policy.spec.env_name)
    if exact and game.get_type().information == pyspiel.GameType.Information.IMPERFECT_INFORMATION:
        # a mixture as it is played: one member per game, by its seat's weights where it has them
        out["output_exploitability"] = output_score.score(game, trained)[output_score.EXPLOITABILITY]
    elif resolved.kind == "policy":
        out["output_vs_random"] = board.vs_random(game, trained, config.games, config.greedy, config.seed,
                                                  config.match_seconds).to_dict()
    else:
        out["output_note"] = ("a mixture is scored in imperfect-information games whose tree can be walked only (exact "
                              "exploitability)")
    return out


def evaluate_run(run_dir: str, config: EvalConfig) -> tuple[Optional[dict], str]:
    """(the entry of the run's newest learner checkpoint, with its output scored, ""), or (None, why) when nothing
    applies (no checkpoint, not an OpenSpiel game, a recurrent network)."""
    try:
        policy = load_policy(run_dir)
        if game_name(policy.spec.env_name) is None:  # `seedleague eval`'s refusal would point at the API instead
            return None, (f"{policy.spec.env_name!r} is not an OpenSpiel game: the league's standings above rate this "
                          "run's snapshots; exploitability and games against random or MCTS need OpenSpiel's game")
        entry = evaluate(run_dir, policy, config, nash=True, average=END_OF_RUN_AVERAGE,
                         param_average=load_param_average(run_dir, policy.step))
    except (ValueError, FileNotFoundError, NotImplementedError) as error:
        return None, str(error)
    entry["results"].update(_output(run_dir, policy, config))
    return entry, ""


def append_history(run_dir: str, entry: dict) -> str:
    """Append `entry` as one JSON line to `<run_dir>/eval/history.jsonl`; returns that path."""
    path = os.path.join(run_dir, "eval", "history.jsonl")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(entry) + "\n")
    return path


def read_history(run_dir: str) -> list[dict]:
    """Every entry of `<run_dir>/eval/history.jsonl` (none if it does not exist); bad lines are skipped."""
    path = os.path.join(run_dir, "eval", "history.jsonl")
    if not os.path.exists(path):
        return []
    entries = []
    with open(path) as f:
        for line in f:
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut short by a crash mid-write
    return entries


def pool_keys(run_dir: str) -> tuple[Optional[str], list[str]]:
    """The run's first learning player ("main" when there is one) and its snapshot keys, oldest first."""
    pool = ModelPool(root_of(run_dir))
    try:
        players = pool.players()
        player = "main" if "main" in players else (players[0] if players else None)
        return player, (pool.keys(player) if player else [])
    finally:
        pool.close()


def is_poker(env_name: str) -> bool:
    """An OpenSpiel imperfect-information game (exact exploitability is cheap enough only there)."""
    return game_of(env_name) is not None
