"""`seedleague eval` and `seedleague report`: evaluate a trained policy; write the league report.

    seedleague eval --run-dir D [--snapshot KEY | --checkpoint PATH] [--step N] [--games N]
                    [--mcts-sims 100,1000] [--mcts-games N] [--greedy] [--vs KEY_OR_PATH]
                    [--mixture KEY=W,KEY=W,...] [--nash] [--average FRACTION] [--json OUT] [--seed S]
    seedleague report --run-dir D [--out DIR]

The game comes from the checkpoint's env spec ("openspiel:<game>"). Imperfect-
information games (poker) get exact exploitability (and that of a `--mixture`, and of
the learner's param average where the checkpoint keeps one);
perfect-information games get win/draw/loss against uniform random and against
MCTS at each `--mcts-sims`; `--vs` adds a head-to-head match in any OpenSpiel
game. Every evaluation is printed as a table and appended as one JSON line to
`<run_dir>/eval/history.jsonl`, which `seedleague report` plots.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

import numpy as np
from typing import Any, Optional

from seedleague.eval.run_league import league_of


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    """How much to play in one `seedleague eval`."""

    games: int = 100  # against random and head-to-head
    mcts_sims: tuple[int, ...] = (100,)  # one MCTS opponent per simulation count
    mcts_games: Optional[int] = None  # games against each MCTS opponent (None: `games`)
    uct_c: float = 2.0
    greedy: bool = False  # the policy plays its most probable legal action instead of sampling
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "mcts_sims", tuple(self.mcts_sims))
        if self.games < 1 or (self.mcts_games is not None and self.mcts_games < 1):
            raise ValueError(f"--games and --mcts-games must be >= 1, got {self.games} and {self.mcts_games}")
        if any(s < 1 for s in self.mcts_sims):
            raise ValueError(f"--mcts-sims must be positive simulation counts, got {self.mcts_sims}")


QUICK = EvalConfig(games=50, mcts_sims=(100,), mcts_games=10)  # a few seconds: the end of `seedleague train`
END_OF_RUN_AVERAGE = 1 / 3  # the end of `seedleague train` reports the average of the newest third of the snapshots


def resolve_policy(run_dir: str, key_or_path: str):
    """A snapshot key ("main:000512", from `<run_dir>/pool`) or a directory (run, checkpoints or pool player)."""
    from seedleague.api import load_policy, load_snapshot

    if os.path.isdir(key_or_path):
        return load_policy(key_or_path)
    return load_snapshot(run_dir, key_or_path)


def parse_mixture(text: str) -> list[tuple[str, float]]:
    """[("main:000512", 0.7), ...] from "main:000512=0.7,main:001024=0.3"."""
    pairs = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, _, weight = item.rpartition("=")
        try:
            pairs.append((key.strip(), float(weight)))
        except ValueError:
            key = ""
        if not key:
            raise ValueError(f"--mixture items must be KEY=WEIGHT (e.g. main:000512=0.7), got {item!r}")
    if not pairs:
        raise ValueError("--mixture needs at least one KEY=WEIGHT")
    return pairs


# -- evaluation ---------------------------------------------------------------------------------


def evaluate(run_dir: str, policy, config: EvalConfig, vs: Optional[str] = None,
             mixture: Optional[list[tuple[str, float]]] = None, nash: bool = False,
             average: Optional[float] = None, param_average=None) -> dict:
    """Every evaluation that applies to `policy`'s game; returns the history entry (results inside).
    `average`: also the exploitability of the uniform mixture of the newest `average` fraction of
    the league's snapshots (poker games). `param_average`: the same checkpoint's running mean of
    the params (`seedleague.eval.curve.load_param_average`), scored beside the policy (poker games). Raises ValueError
    when the env is not an OpenSpiel game (nothing here applies)."""
    from seedleague.games.openspiel import game_name, load_game
    import pyspiel

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
    if imperfect:
        results.update(_exploitability(game, policy))
        if param_average is not None:
            results.update({"param_average_" + k: v for k, v in _exploitability(game, param_average).items()},
                           param_average=param_average.meta["average"])
    else:
        results.update(_board(game, policy, config))
    if mixture:
        results.update(_mixture(run_dir, game, imperfect, mixture))
    if average is not None and imperfect:
        results.update(_recent_average(run_dir, game, average, param_average))
    if nash and imperfect:
        results.update(_league_nash(run_dir, game))
    if vs:
        from seedleague.eval import board

        opponent = resolve_policy(run_dir, vs)
        stats = board.head_to_head(game, policy, opponent, config.games, config.greedy, config.seed)
        results["head_to_head"] = dict(stats.to_dict(), opponent=vs, opponent_step=opponent.step)
    meta = policy.meta
    return dict(time=time.time(), step=policy.step, env_steps=meta.get("env_steps"), wall_s=meta.get("wall_s"),
                policy=policy.source, env_name=policy.spec.env_name, greedy=config.greedy, results=results)


def _exploitability(game, policy) -> dict:
    from seedleague.eval import openspiel_eval

    start = time.perf_counter()
    value = openspiel_eval.exploitability(game, policy)
    return {"exploitability": value, "exploitability_seconds": time.perf_counter() - start}


def _board(game, policy, config: EvalConfig) -> dict:
    from seedleague.eval import board

    vs_random = board.vs_random(game, policy, config.games, config.greedy, config.seed)
    mcts_games = config.mcts_games or config.games
    vs_mcts = {
        str(sims): board.vs_mcts(game, policy, mcts_games, sims, config.uct_c, greedy=config.greedy,
                                 seed=config.seed).to_dict()
        for sims in config.mcts_sims
    }
    return {"vs_random": vs_random.to_dict(), "vs_mcts": vs_mcts}


def _mixture(run_dir: str, game, imperfect: bool, mixture: list[tuple[str, float]]) -> dict:
    if not imperfect:
        return {"mixture_note": "--mixture applies to imperfect-information games only (exact exploitability)"}
    from seedleague.eval import openspiel_eval

    policies = [resolve_policy(run_dir, key) for key, _ in mixture]
    value = openspiel_eval.mixture_exploitability(game, policies, [w for _, w in mixture])
    return {"mixture": dict(mixture), "mixture_exploitability": value}


def check_average_fraction(fraction: float) -> float:
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"--average must be a fraction of the snapshots in (0, 1], got {fraction}")
    return fraction


def _recent_average(run_dir: str, game, fraction: float, param_average=None) -> dict:
    """Exploitability of the average policy of the newest `fraction` of the first player's snapshots
    (a uniform mixture, mixed as behaviour strategies). Self-play by policy gradient does not settle
    on an equilibrium; its recent average is nearer one than any single iterate (fictitious play).
    With the learner's `param_average` (a Policy), also that of the even mixture of the two averages:
    the param average played half the time, a snapshot of the window the other half. Exploitability is
    convex in a mixture, so it is at most the mean of the two, and where the two miss the equilibrium
    in different directions it is below both (Leduc numbers in benchmarks/README.md)."""
    from seedleague.api import load_average_policy
    from seedleague.eval import openspiel_eval

    check_average_fraction(fraction)
    player, keys = _pool_keys(run_dir)
    if not keys:
        return {"average_note": "the run has no league snapshots yet"}
    start = time.perf_counter()
    policies = load_average_policy(run_dir, fraction, player, param_average=False).members
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
    from seedleague.eval import metagame, openspiel_eval
    from seedleague.eval.output_selection import POPULATION
    from seedleague.league.nash import league_nash

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
    from seedleague.games.openspiel import game_name, load_game
    from seedleague import output as run_output
    from seedleague.eval import board, output_score
    import pyspiel

    try:
        resolved = run_output.resolve(run_dir)
        trained = resolved.load(config.seed)
    except (ValueError, FileNotFoundError, NotImplementedError) as error:
        return {"output_note": f"no output to score: {error}"}
    out = {"output": resolved.describe()}
    game = load_game(game_name(policy.spec.env_name))
    if game.get_type().information == pyspiel.GameType.Information.IMPERFECT_INFORMATION:
        # a mixture as it is played: one member per game, by its seat's weights where it has them
        out["output_exploitability"] = output_score.score(game, trained)[output_score.EXPLOITABILITY]
    elif resolved.kind == "policy":
        out["output_vs_random"] = board.vs_random(game, trained, config.games, config.greedy, config.seed).to_dict()
    else:
        out["output_note"] = "a mixture is scored in imperfect-information games only (exact exploitability)"
    return out


def evaluate_run(run_dir: str, quick: bool = False, config: Optional[EvalConfig] = None) -> Optional[dict]:
    """Evaluate the run's newest learner checkpoint, print the table and append it to the run's
    history; returns the entry. When nothing applies (no checkpoint, not an OpenSpiel game, a
    recurrent network) it prints why and returns None, so a finished training run never fails here."""
    from seedleague.api import load_policy
    from seedleague.eval.curve import load_param_average
    from seedleague.eval.output_selection import tree_too_large

    config = config or (QUICK if quick else EvalConfig())
    try:
        policy = load_policy(run_dir)
        too_large = tree_too_large(policy.spec.env_name)
        if too_large:
            print(f"  no evaluation: {too_large}; `seedleague exploit --run-dir {run_dir}` measures the output with a "
                  "learned best response")
            return None
        entry = evaluate(run_dir, policy, config, nash=True, average=END_OF_RUN_AVERAGE,
                         param_average=load_param_average(run_dir, policy.step))
    except (ValueError, FileNotFoundError, NotImplementedError) as error:
        print(f"  no evaluation: {error}")
        return None
    entry["results"].update(_output(run_dir, policy, config))
    print(format_entry(entry))
    print(f"appended to {append_history(run_dir, entry)}")
    return entry


# -- output -------------------------------------------------------------------------------------


def _stats_row(label: str, stats: dict) -> str:
    seats = "  ".join(f"{s['wins']}/{s['draws']}/{s['losses']}".rjust(11) for s in stats["per_seat"])
    return (f"  {label:<22}{stats['games']:>6}  {stats['win_rate']:>5.2f}  {stats['draw_rate']:>5.2f}  "
            f"{stats['loss_rate']:>5.2f}  {seats}  {stats['mean_return']:>7.3f}  {stats['games_per_s']:>8.1f}")


def format_entry(entry: dict) -> str:
    """The readable table `seedleague eval` prints."""
    results = entry["results"]
    steps = f", env steps {entry['env_steps']}" if entry.get("env_steps") is not None else ""
    lines = [f"{entry['env_name']}: {entry['policy']} (step {entry['step']}{steps})"]
    if "exploitability" in results:
        lines.append(f"  exploitability          {results['exploitability']:.6f}   "
                     f"({results['exploitability_seconds']:.2f} s; NashConv/2, 0 at a Nash equilibrium)")
    if "param_average_exploitability" in results:
        span = results["param_average"]
        lines.append(f"  param average           {results['param_average_exploitability']:.6f}   "
                     f"(one network: the mean of the learner's params over {span['count']} updates "
                     + (f"from step {span['from']})" if span.get("from") is not None else "at the end of its anneal)"))
    if "mixture_exploitability" in results:
        lines.append(f"  mixture exploitability  {results['mixture_exploitability']:.6f}   {results['mixture']}")
    if "mixture_note" in results:
        lines.append(f"  mixture: {results['mixture_note']}")
    if "average_exploitability" in results:
        first, last, count = results["average_snapshots"]
        lines.append(f"  average policy          {results['average_exploitability']:.6f}   "
                     f"(uniform mixture of the newest {count} snapshots, {first} .. {last})")
    if "average_and_params_exploitability" in results:
        lines.append(f"  average + param average {results['average_and_params_exploitability']:.6f}   "
                     "(the two averages above mixed half and half: the param average in half the games)")
    if "average_note" in results:
        lines.append(f"  average policy: {results['average_note']}")
    for field, mixture, label in (("nash_mixture_exploitability", "nash_mixture", "league Nash mixture"),
                                  ("league_table_nash_exploitability", "league_table_nash", "  from win rates")):
        if field in results:
            support = results[mixture]
            top = ", ".join(f"{k}={w:.2f}" for k, w in sorted(support.items(), key=lambda kv: -kv[1])[:3])
            lines.append(f"  {label:<22}  {results[field]:.6f}   "
                         f"({len(support)} snapshots in its support: {top}{', ...' if len(support) > 3 else ''})")
    if "output" in results:
        described = results["output"]
        shown = f"{described['source']}, step {described['step']}"
        if described["kind"] == "mixture":
            shown += f", {len(described['members'])} snapshots mixed"
        if "output_exploitability" in results:
            lines.append(f"  output                  {results['output_exploitability']:.6f}   ({shown}: what "
                         "load_trained and serve give)")
    if "output_note" in results:
        lines.append(f"  output: {results['output_note']}")
    if "nash_note" in results:
        lines.append(f"  league Nash mixture: {results['nash_note']}")
    matches = [("vs random", results.get("vs_random")), ("output vs random", results.get("output_vs_random"))]
    matches += [(f"vs mcts {sims} sims", s) for sims, s in results.get("vs_mcts", {}).items()]
    matches += [(f"vs {results['head_to_head']['opponent']}", results["head_to_head"])] if "head_to_head" in results else []
    matches = [(label, s) for label, s in matches if s]
    if matches:
        lines.append(f"  {'opponent':<22}{'games':>6}  {'win':>5}  {'draw':>5}  {'loss':>5}  {'seat0 W/D/L':>11}  "
                     f"{'seat1 W/D/L':>11}  {'return':>7}  {'games/s':>8}")
        lines += [_stats_row(label, s) for label, s in matches]
    return "\n".join(lines)


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


# -- report -------------------------------------------------------------------------------------


def run_report(run_dir: str, league: Any, out_dir: Optional[str] = None) -> list[str]:
    """Write the report of `run_dir` from `league` (standings, payoff, elo history; None: empty
    league) and the run's eval history into `out_dir` (default `<run_dir>/report`); returns paths."""
    from seedleague.eval.report import write_report
    from seedleague.league.types import PayoffMatrix

    standings, payoff, elo = [], PayoffMatrix([], [], []), {}
    if league is not None:
        standings, payoff = league.standings(), league.payoff()
        elo = league.elo_history() if hasattr(league, "elo_history") else {}
    history = read_history(run_dir) + _pool_curve(run_dir)
    return write_report(out_dir or os.path.join(run_dir, "report"), standings, payoff, elo, history)


def _pool_curve(run_dir: str, max_points: int = 40) -> list[dict]:
    """Exploitability of the first player's snapshots over training, for poker runs (else [])."""
    from seedleague.api import load_snapshot
    from seedleague.eval.curve import as_eval_history, snapshot_curve

    player, keys = _pool_keys(run_dir)
    if not keys or not _is_poker(load_snapshot(run_dir, keys[0]).spec.env_name):
        return []
    return as_eval_history(snapshot_curve(run_dir, player, every=max(1, len(keys) // max_points)))


def _pool_keys(run_dir: str) -> tuple[Optional[str], list[str]]:
    """The run's first learning player ("main" when there is one) and its snapshot keys, oldest first."""
    from seedleague.league.model_pool import ModelPool, root_of

    pool = ModelPool(root_of(run_dir))
    try:
        players = pool.players()
        player = "main" if "main" in players else (players[0] if players else None)
        return player, (pool.keys(player) if player else [])
    finally:
        pool.close()


def _is_poker(env_name: str) -> bool:
    """An OpenSpiel imperfect-information game (exact exploitability is cheap enough only there)."""
    from seedleague.eval.output_selection import game_of

    return game_of(env_name) is not None


# -- commands -----------------------------------------------------------------------------------


def _sims(text: str) -> tuple[int, ...]:
    try:
        sims = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--mcts-sims must be comma-separated integers like 100,1000, got {text!r}") from None
    return sims


def add_parser(sub) -> None:
    """Register `eval` and `report` on an argparse subparsers object."""
    parser = sub.add_parser("eval", help="evaluate a trained policy: exploitability, vs random/MCTS, head-to-head",
                            description=__doc__.split("\n\n")[2])
    parser.add_argument("--run-dir", required=True, metavar="DIR", help="the run directory (history goes to <run-dir>/eval/)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--snapshot", default=None, metavar="KEY", help="evaluate league snapshot KEY (player:step) from <run-dir>/pool")
    which.add_argument("--checkpoint", default=None, metavar="PATH",
                       help="evaluate the checkpoint in PATH (run, checkpoints or pool player directory)")
    parser.add_argument("--step", type=int, default=None, metavar="N", help="checkpoint step (default: newest); not with --snapshot")
    parser.add_argument("--games", type=int, default=100, metavar="N", help="games against random and head-to-head (default 100)")
    parser.add_argument("--mcts-sims", type=_sims, default=(100,), metavar="SIMS", help="MCTS simulation counts, e.g. 100,1000 (default 100)")
    parser.add_argument("--mcts-games", type=int, default=None, metavar="N", help="games against each MCTS (default: --games)")
    parser.add_argument("--uct-c", type=float, default=2.0, metavar="C", help="MCTS exploration constant (default 2)")
    parser.add_argument("--greedy", action="store_true", help="play the most probable legal action instead of sampling")
    parser.add_argument("--vs", default=None, metavar="KEY_OR_PATH", help="head-to-head against a snapshot KEY or a checkpoint PATH")
    parser.add_argument("--mixture", default=None, metavar="KEY=W,...", help="exploitability of the mixture KEY=W,KEY=W,... (poker games)")
    parser.add_argument("--nash", action="store_true",
                        help="also the exploitability of the league's Nash mixture over its snapshots (poker games)")
    parser.add_argument("--average", type=float, default=None, metavar="FRACTION",
                        help="also the exploitability of the average policy of the newest FRACTION of the league's "
                             "snapshots, e.g. 0.33 (poker games; the end of training reports 1/3)")
    parser.add_argument("--json", default=None, metavar="OUT", help="also write the results to this JSON file")
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="seed of chance, sampling and MCTS (default 0)")
    report = sub.add_parser("report", help="write the league report (leaderboard, heatmap, rating and exploitability plots)",
                            description="Write leaderboard.md, payoff_heatmap.png, ratings.png, exploitability.png and "
                                        "report.md from the run's league and eval history.")
    report.add_argument("--run-dir", required=True, metavar="DIR", help="the run directory")
    report.add_argument("--out", default=None, metavar="DIR", help="output directory (default <run-dir>/report)")


def run(args: argparse.Namespace) -> int:
    """Run `eval` or `report`; 0 on success, 2 with a message for bad input or nothing to evaluate."""
    try:
        if args.command == "report":
            return _report(args)
        return _eval(args)
    except (ValueError, FileNotFoundError, NotADirectoryError, NotImplementedError) as error:
        print(f"seedleague {args.command}: {error}", file=sys.stderr)
        return 2


def _eval(args: argparse.Namespace) -> int:
    from seedleague.api import load_policy, load_snapshot
    from seedleague.eval.curve import load_param_average

    config = EvalConfig(args.games, args.mcts_sims, args.mcts_games, args.uct_c, args.greedy, args.seed)
    mixture = parse_mixture(args.mixture) if args.mixture else None
    if args.average is not None:
        check_average_fraction(args.average)
    if args.snapshot:
        if args.step is not None:
            raise ValueError("--step applies to --run-dir or --checkpoint; a snapshot key names its own step")
        policy, param_average = load_snapshot(args.run_dir, args.snapshot, seed=args.seed), None
    else:
        policy = load_policy(args.checkpoint or args.run_dir, args.step, seed=args.seed)
        param_average = load_param_average(args.checkpoint or args.run_dir, policy.step, args.seed)
    entry = evaluate(args.run_dir, policy, config, args.vs, mixture, args.nash, args.average, param_average)
    print(format_entry(entry))
    path = append_history(args.run_dir, entry)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(entry, f, indent=2)
    print(f"appended to {path}" + (f"; wrote {args.json}" if args.json else ""))
    return 0


def _report(args: argparse.Namespace) -> int:
    if not os.path.isdir(args.run_dir):
        raise FileNotFoundError(f"no such run directory: {args.run_dir!r}")
    league = league_of(args.run_dir)
    try:
        paths = run_report(args.run_dir, league, args.out)
    finally:
        if league is not None and hasattr(league, "close"):
            league.close()
    if league is None:
        print(f"no league database in {os.path.join(args.run_dir, 'league')}: leaderboard and payoff are empty")
    print("wrote " + "\n      ".join(paths))
    return 0
