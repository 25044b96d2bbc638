"""The default league recipe, its exact selection and a plain self-play baseline, per game, on one wall-clock budget.

    python -m benchmarks.league_suite --games openspiel:kuhn_poker openspiel:leduc_poker \\
        openspiel:connect_four --seconds 600 --runs 3 --out R [--at 0.25 0.5]

For each game and run it trains, one run after the other by default (`--parallel` below), with
the same budget:

- **recipe**: `seedleague train --env GAME --run-dir DIR --max-seconds S --no-eval`,
  the default recipe with no per-game flags;
- **exact-selection**: the same command plus `--output selected`: the least exploitable mixture of the run's
  networks chosen on the game tree (the explicit choice for games small enough to walk; a user's own game has
  no tree, so README claims rest on **recipe**);
- **self-play**: the same command plus `SELF_PLAY_BASELINE_FLAGS`.

Each run is then scored at fractions of its budget (`--at`; the league snapshot in
DIR/pool whose training wall-clock is nearest that time) and at its end: the run's
output as `seedleague.api.load_trained(run_dir)` returns it, or, until that function
exists, `seedleague.api.load_policy(run_dir)` (each row's `output` says which was
used). Scores (seedleague/eval/output_score.py): exact exploitability in poker games
(a PolicyMixture scored as the mixture it is), wins/draws/losses against uniform
random and MCTS with 100 simulations in perfect-information board games. Env steps and
learner updates come from DIR/summary.json.

Every finished row is appended to R/league_suite.jsonl at once, so a suite killed
midway keeps its finished rows, and rerunning with the same --out skips them (a run
killed before its summary.json is trained again). The Markdown table is printed and
written to R/league_suite.md. Runs go to R/runs/<game>-<method>-<run>, their console
output beside them as <run dir>.log.

A game too large for an exact score (phantom_ttt, 3x3 dark_hex: `tree_size.unmeasurable`) gets no exact
cells, each saying why. `--exploit-seconds B` measures such a game: after each run, `seedleague exploit --run-dir
DIR --max-seconds B` trains a best response to its output (in DIR/exploit/suite) and the row gets its estimate, a
lower bound with its 95% interval, marked "rising" where the response was still learning; `--exploit-uniform`
adds, per game, a row for the uniform random policy measured the same way (in the game's first run dir), the
scale the MMD paper reports beside each method (the issue's big games: `--games openspiel:phantom_ttt
'openspiel:dark_hex(gameversion=adh)' --seconds 3600 --methods recipe self-play --exploit-seconds 1200
--exploit-uniform`). Best responses run one after the other, after the run they measure.

`--choose-seconds C` adds the output choice a user's game gets without a tree: after each run (and before its
`--exploit-seconds` response), `seedleague exploit --run-dir DIR --choose --max-seconds C` measures each of the
run's outputs with a best response (in DIR/exploit/suite-choice) and records the least exploitable as the run's
output. The row keeps the recorded output's score in "final output" and adds the chosen one's, scored the same
way, with the estimates it was chosen by.

One after the other, no run shares the machine with another. On a machine with
cores to spare (a GPU box), `--parallel K` trains K at once: every run of that call then shares
the machine, so its rows compare methods and seeds with each other, not with rows from another
call or machine.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Callable, Iterator, Optional, Sequence

from seedleague import api
from seedleague.checkpoint_config import safe_path_part
from seedleague.eval import curve, output_score

# Plain self-play by policy gradient, as a game nobody tuned for got it before the recipe: V-trace, one
# step per batch of 32 unrolls, entropy 0.05 -> 0.01 and lr 3e-4 -> 3e-5 over 20K updates, the final params.
SELF_PLAY_BASELINE_FLAGS = (
    "--league-config.mode", "self_play", "--learner.loss", "vtrace", "--learner.kl-cost", "0",
    "--learner.epochs", "1", "--learner.minibatches", "1", "--batch-size", "32",
    "--learner.entropy-cost", "0.05", "--learner.entropy-cost-final", "0.01", "--learner.anneal-steps", "20000",
    "--learner.average-tail", "0", "--output", "final",
)
METHODS = {"recipe": (), "exact-selection": ("--output", "selected"), "self-play": SELF_PLAY_BASELINE_FLAGS}
ROWS_FILE, TABLE_FILE = "league_suite.jsonl", "league_suite.md"
UNIFORM = "uniform"  # the row of a game's uniform random policy, measured by a best response (`--exploit-uniform`)


def seedleague_command() -> list[str]:
    """The `seedleague` entry point of the Python environment running this script, or `python -m
    seedleague.cli` where the package is importable but not installed (a checkout on PYTHONPATH)."""
    entry_point = os.path.join(os.path.dirname(sys.executable), "seedleague")
    return [entry_point] if os.path.exists(entry_point) else [sys.executable, "-m", "seedleague.cli"]


def train_command(game: str, run_dir: str, seconds: float, method: str,
                  methods: Optional[dict[str, tuple[str, ...]]] = None) -> list[str]:
    return [*seedleague_command(), "train", "--env", game, "--run-dir", run_dir, "--max-seconds", f"{seconds:g}",
            "--no-eval", "--seed", str(_seed(run_dir)), *(methods or METHODS)[method]]


def _seed(run_dir: str) -> int:
    """The run's index (the directory ends in -RUN), so repeated runs are seeded differently."""
    tail = run_dir.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def parse_methods(names: Sequence[str], extra: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """The methods to run: built-in `names` (of METHODS) and `extra` "NAME=FLAGS" candidates."""
    unknown = [name for name in names if name not in METHODS]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}: the built-in ones are {list(METHODS)}; add others with "
                         "--method NAME='FLAGS'")
    if not names and not extra:
        raise ValueError("nothing to run: name built-in --methods or add a candidate with --method NAME='FLAGS'")
    methods = {name: METHODS[name] for name in names}
    for text in extra:
        name, sep, flags = text.partition("=")
        if not sep or not name or name in methods:
            raise ValueError(f"--method takes NAME='--flag value ...' with a new name, got {text!r}")
        methods[name] = tuple(flags.split())
    return methods


def train(command: list[str], run_dir: str, seconds: float, env: Optional[dict[str, str]] = None) -> int:
    """Run one training to its end (killed at twice its budget plus two minutes); returns its exit code."""
    with open(run_dir + ".log", "w") as log:
        try:
            return subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=2 * seconds + 120,
                                  env=env).returncode
        except subprocess.TimeoutExpired:
            return -9


def sharing_env() -> dict[str, str]:
    """The environment for runs that share one machine (`--parallel`): JAX does not take three quarters of a
    GPU's memory for each of them, unless the caller says otherwise."""
    return {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", **os.environ}


def trained_in_order(jobs: Sequence[tuple[list[str], str]], seconds: float, parallel: int,
                     train_fn: Callable[..., int]) -> Iterator[int]:
    """Each (command, run_dir) trained (skipped where its run left a summary.json: 0), its exit code yielded in
    job order. One at a time when `parallel` is 1, so nothing the caller does between two yields shares the
    machine with a run; else up to `parallel` runs at once, and the caller scores finished runs while
    later ones train."""

    def train_one(command: list[str], run_dir: str) -> int:
        if os.path.exists(os.path.join(run_dir, "summary.json")):
            return 0
        shutil.rmtree(run_dir, ignore_errors=True)  # a run killed midway starts again
        print(f"[{time.strftime('%H:%M:%S')}] {' '.join(command)}", flush=True)
        return train_fn(command, run_dir, seconds) if parallel == 1 else train_fn(command, run_dir, seconds,
                                                                                  sharing_env())

    if parallel == 1:
        for command, run_dir in jobs:
            yield train_one(command, run_dir)
        return
    with concurrent.futures.ThreadPoolExecutor(max_workers=parallel) as pool:
        futures = [pool.submit(train_one, command, run_dir) for command, run_dir in jobs]
        for future in futures:
            yield future.result()


def load_output(run_dir: str, seed: int = 0) -> tuple[api.Policy | api.PolicyMixture, str]:
    """The run's output and the name of the function that loaded it: `load_trained` (what a run is
    meant to hand over) where seedleague.api has it, else `load_policy` (the learner's newest params)."""
    load_trained = getattr(api, "load_trained", None)
    if load_trained is not None:
        return load_trained(run_dir, seed=seed), "load_trained"
    return api.load_policy(run_dir, seed=seed), "load_policy"


def exploit_run(run_dir: str, seconds: float, source: Optional[str] = None) -> dict:
    """`seedleague exploit` of the run's output (or of `source`: another output, or "uniform") for `seconds`, in
    RUN/exploit/suite[-SOURCE] (its console output beside it as .log); its summary's estimate as {"value", "ci95",
    "still_rising", "games"}, or {"error"}. A finished one is read back, not trained again."""
    out = os.path.join(run_dir, "exploit", "suite" if source is None else f"suite-{source}")
    found = read_summary(out).get("exploit")
    if not (found and found.get("estimate")):
        shutil.rmtree(out, ignore_errors=True)  # a best response killed midway trains again
        os.makedirs(os.path.dirname(out), exist_ok=True)
        command = [*seedleague_command(), "exploit", "--run-dir", run_dir, "--max-seconds", f"{seconds:g}", "--out",
                   out, *(["--output", source] if source else [])]
        with open(out + ".log", "w") as log:
            returncode = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT)
        found = read_summary(out).get("exploit")
        if not (found and found.get("estimate")):
            return dict(error=f"no estimate (exit {returncode}): see {out}.log", seconds=seconds)
    estimate = found["estimate"]
    return dict(value=estimate["value"], ci95=estimate["ci95"], games=estimate["games"],
                still_rising=bool(found.get("still_rising")), seconds=seconds, run_dir=out)


def choose_run(run_dir: str, game_name: str, seconds: float, budget: output_score.BoardBudget) -> dict:
    """`seedleague exploit --choose` of the run's outputs, a best response of `seconds` to each, in
    RUN/exploit/suite-choice (console output beside it as .log; a rerun reuses the finished responses); the choice
    file's entry with the chosen output's score as "score", or {"error"}."""
    from seedleague.eval import exploit_choice
    from seedleague.games.openspiel import load_game

    out = os.path.join(run_dir, "exploit", "suite-choice")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    command = [*seedleague_command(), "exploit", "--run-dir", run_dir, "--choose", "--max-seconds", f"{seconds:g}",
               "--out", out]
    with open(out + ".log", "a") as log:
        returncode = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        with open(os.path.join(run_dir, exploit_choice.FILE)) as f:
            entry = json.load(f)
    except (OSError, ValueError):
        return dict(error=f"no choice (exit {returncode}): see {out}.log", seconds=seconds)
    game = load_game(game_name.partition(":")[2])
    too_large = exact_score_problem(game, game_name)
    entry.update(dict(score=None, error=too_large) if too_large else
                 _scored(lambda: output_score.score(game, load_output(run_dir)[0], budget)))
    return entry


def choice_cell(found: Optional[dict]) -> str:
    """"0.0423 (average_policy)", "n/a" (too large to score) or "error"; the choice's source either way."""
    if not found or "chosen" not in found:
        return "error" if found else "n/a"
    return f"{output_score.format_score(found.get('score'))} ({found['chosen']})"


def exploit_cell(found: Optional[dict]) -> str:
    """"0.1234 +- 0.0050", "0.1234 +- 0.0050 rising" (still learning at its end), "n/a" (none), or "error"."""
    if not found:
        return "n/a"
    if "value" not in found:
        return "error"
    return f"{found['value']:.4f} +- {found['ci95']:.4f}" + (" rising" if found.get("still_rising") else "")


def _scored(scoring: Callable[[], dict]) -> dict:
    """`scoring()`'s result as {"score": ...}, or {"score": None, "error": ...} (a row is written either way)."""
    try:
        return dict(score=scoring())
    except Exception as error:  # noqa: BLE001 - one unscorable point must not lose the other columns
        return dict(score=None, error=f"{type(error).__name__}: {error}")


def score_run(run_dir: str, game_name: str, seconds: float, fractions: Sequence[float],
              budget: output_score.BoardBudget) -> dict:
    """Scores of the run at each fraction of `seconds` (nearest snapshot) and of its final output,
    with env steps and learner updates from its summary.json."""
    from seedleague.games.openspiel import load_game

    game = load_game(game_name.partition(":")[2])
    too_large = exact_score_problem(game, game_name)  # then every cell says why, and nothing walks the tree
    scored = (lambda scoring: dict(score=None, error=too_large)) if too_large else _scored
    times = curve.snapshot_times(run_dir) if os.path.isdir(os.path.join(run_dir, "pool")) else []
    points = []
    for fraction in fractions:
        nearest = curve.nearest_snapshot(times, fraction * seconds)
        point = dict(fraction=fraction, target_s=fraction * seconds, snapshot=None, snapshot_wall_s=None)
        if nearest is None:
            point.update(score=None, error="no snapshot with a wall-clock time in the pool")
        else:
            point.update(snapshot=nearest[0], snapshot_wall_s=nearest[1])
            point.update(scored(lambda: output_score.score(game, api.load_snapshot(run_dir, nearest[0]), budget)))
        points.append(point)
    loaded: dict = {}

    def final_score() -> dict:
        output, loaded["output"] = load_output(run_dir)
        return output_score.score(game, output, budget)

    final = scored(final_score)
    final["output"] = loaded.get("output")
    summary = read_summary(run_dir)
    return dict(points=points, final=final, env_steps=summary.get("env_steps"),
                learner_steps=summary.get("learner_steps"), wall_s=summary.get("wall_s"), reason=summary.get("reason"),
                choice_s=read_choice_seconds(run_dir))


def exact_score_problem(game, game_name: str) -> str:
    """Why `game`'s exploitability cannot be scored exactly in minutes ("" where it can, and for board games,
    scored by games instead)."""
    from seedleague.eval import tree_size

    if output_score.game_kind(game) != output_score.EXPLOITABILITY:
        return ""
    why = tree_size.unmeasurable(game_name)
    return f"no exact score: {why}" if why else ""


def read_choice_seconds(run_dir: str) -> Optional[float]:
    """How long choosing the run's `selected` output took (after the training's budget), or None where it made
    no such choice (another output, or a game it cannot measure)."""
    from seedleague.eval import output_selection

    try:
        with open(os.path.join(run_dir, output_selection.FILE)) as f:
            return float(json.load(f)["seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def read_summary(run_dir: str) -> dict:
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def read_rows(out_dir: str) -> list[dict]:
    """The rows finished so far (a line a kill cut short is skipped)."""
    rows = []
    path = os.path.join(out_dir, ROWS_FILE)
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    continue
    return rows


def append_row(out_dir: str, row: dict) -> None:
    with open(os.path.join(out_dir, ROWS_FILE), "a") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _point_cell(point: dict) -> str:
    """A cutoff's score and the training time of the snapshot it came from, e.g. "0.2134 (at 148 s)"."""
    cell = output_score.format_score(point.get("score"))
    return cell if point.get("snapshot_wall_s") is None else f"{cell} (at {point['snapshot_wall_s']:.0f} s)"


def markdown_table(rows: Sequence[dict], fractions: Sequence[float], exploit_seconds: float = 0.0,
                   choose_seconds: float = 0.0) -> str:
    """One line per run: game, method, run, the score at each fraction of the budget (with the training
    time of the snapshot nearest it) and of the final output (exploitability, or wins/draws/losses
    against random and MCTS; with the loader used), env steps, learner updates, and the seconds the output's
    choice took after the training's budget (`--max-seconds` bounds the training; "-": no choice was made); with
    `exploit_seconds`, the best response's estimate of the output (`exploit_cell`); with `choose_seconds`, the
    output chosen by best responses and its score (`choice_cell`)."""
    at = [f"{round(100 * f)}% (snapshot)" for f in fractions]
    response = [f"best response ({exploit_seconds:g} s)"] if exploit_seconds else []
    response = ([f"chosen by best responses ({choose_seconds:g} s each)"] if choose_seconds else []) + response
    lines = ["| game | method | run | " + " | ".join(at + ["final output"] + response) + " | env steps | "
             "learner updates | output choice s |",
             "|---|---|---:|" + "---:|" * (len(at) + len(response)) + "---:|---:|---:|---:|"]
    for row in rows:
        by_fraction = {p["fraction"]: p for p in row["points"]}
        cells = [_point_cell(by_fraction.get(f, {})) for f in fractions]
        final = output_score.format_score(row["final"].get("score"))
        if row["final"].get("output"):
            final += f" ({row['final']['output']})"
        number = lambda x: "n/a" if x is None else f"{x:,}"
        choice = "-" if row.get("choice_s") is None else f"{row['choice_s']:.0f}"
        cells += [final] + ([choice_cell(row.get("choice"))] if choose_seconds else [])
        cells += [exploit_cell(row.get("exploit"))] if exploit_seconds else []
        lines.append(f"| {row['game']} | {row['method']} | {row['run']} | " + " | ".join(cells) +
                     f" | {number(row.get('env_steps'))} | {number(row.get('learner_steps'))} | {choice} |")
    return "\n".join(lines) + "\n"


def run_suite(games: Sequence[str], seconds: float, runs: int, out_dir: str, fractions: Sequence[float],
              budget: output_score.BoardBudget, train_fn: Callable[..., int] = train,
              methods: Optional[dict[str, tuple[str, ...]]] = None, parallel: int = 1, exploit_seconds: float = 0.0,
              exploit_uniform: bool = False, exploit_fn: Callable[..., dict] = exploit_run, choose_seconds: float = 0.0,
              choose_fn: Callable[..., dict] = choose_run) -> list[dict]:
    """Train and score every (game, run, method) not already in OUT/league_suite.jsonl, one at a time (or
    `parallel` at once), with the output chosen by best responses of `choose_seconds` each, a best response of
    `exploit_seconds` to each output (and, `exploit_uniform`, one row per game for the uniform policy); returns
    every row (old and new) and writes the table."""
    os.makedirs(os.path.join(out_dir, "runs"), exist_ok=True)
    rows = read_rows(out_dir)
    done = {(r["game"], r["method"], r["run"]) for r in rows}
    todo = [(game, method, run) for game in games for run in range(runs) for method in methods or METHODS
            if (game, method, run) not in done]
    jobs = []
    for game, method, run in todo:
        run_dir = os.path.join(out_dir, "runs", f"{safe_path_part(game.replace(':', '_'))}-{method}-{run}")
        jobs.append((train_command(game, run_dir, seconds, method, methods), run_dir))
    for (game, method, run), (command, run_dir), returncode in zip(
            todo, jobs, trained_in_order(jobs, seconds, parallel, train_fn)):
        row = dict(game=game, method=method, run=run, run_dir=run_dir, seconds=seconds,
                   command=command, returncode=returncode)
        row.update(score_run(run_dir, game, seconds, fractions, budget))
        if choose_seconds:
            row["choice"] = choose_fn(run_dir, game, choose_seconds, budget)
        if exploit_seconds:
            row["exploit"] = exploit_fn(run_dir, exploit_seconds)
        append_row(out_dir, row)
        rows.append(row)
        print(markdown_table([row], fractions, exploit_seconds, choose_seconds).splitlines()[-1], flush=True)
        if exploit_uniform and exploit_seconds and (game, UNIFORM, 0) not in done:
            done.add((game, UNIFORM, 0))
            uniform = dict(game=game, method=UNIFORM, run=0, run_dir=run_dir, seconds=seconds, points=[],
                           final=dict(score=None), exploit=exploit_fn(run_dir, exploit_seconds, UNIFORM))
            append_row(out_dir, uniform)
            rows.append(uniform)
            print(markdown_table([uniform], fractions, exploit_seconds, choose_seconds).splitlines()[-1], flush=True)
    table = markdown_table(rows, fractions, exploit_seconds, choose_seconds)
    with open(os.path.join(out_dir, TABLE_FILE), "w") as f:
        f.write(table)
    return rows


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", nargs="+", required=True, help="e.g. openspiel:kuhn_poker openspiel:connect_four")
    parser.add_argument("--seconds", type=float, default=600.0, help="wall-clock budget of every run")
    parser.add_argument("--runs", type=int, default=3, help="runs of each method per game")
    parser.add_argument("--out", required=True, help="directory for the runs, the JSON lines and the table")
    parser.add_argument("--at", type=float, nargs="*", default=[0.25, 0.5],
                        help="fractions of the budget scored from the snapshot nearest in time (the end is the final output)")
    parser.add_argument("--games-vs-random", type=int, default=50, help="board games: games against uniform random")
    parser.add_argument("--games-vs-mcts", type=int, default=10, help="board games: games against MCTS")
    parser.add_argument("--mcts-simulations", type=int, default=100)
    parser.add_argument("--methods", nargs="*", default=list(METHODS),
                        help=f"built-in methods to run, of {list(METHODS)} (none given: only the --method candidates)")
    parser.add_argument("--method", action="append", default=[], metavar="NAME=FLAGS",
                        help="also run a candidate: the default command plus FLAGS, e.g. "
                             "--method lowlr='--learner.learning-rate 1e-4' (repeatable)")
    parser.add_argument("--parallel", type=int, default=1,
                        help="runs trained at once, for a machine with cores to spare (a GPU box): they share it, "
                             "so compare methods only within one call, seeds side by side. On CPU give each run "
                             "one XLA thread pool: XLA_FLAGS=--xla_cpu_multi_thread_eigen=false JAX_PLATFORMS=cpu")
    parser.add_argument("--exploit-seconds", type=float, default=0.0,
                        help="after each run, a best response of this many seconds to its output (`seedleague "
                             "exploit`); 0: none")
    parser.add_argument("--exploit-uniform", action="store_true",
                        help="with --exploit-seconds, also measure each game's uniform random policy the same way")
    parser.add_argument("--choose-seconds", type=float, default=0.0,
                        help="after each run, choose its output by a best response of this many seconds to each "
                             "candidate (`seedleague exploit --choose`) and score the chosen one; 0: none")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.runs < 1 or args.parallel < 1 or not all(0 < f <= 1 for f in args.at):
        parser.error("--seconds must be > 0, --runs >= 1, --parallel >= 1 and every --at fraction in (0, 1]")
    if args.exploit_seconds < 0 or (args.exploit_uniform and not args.exploit_seconds):
        parser.error("--exploit-seconds must be >= 0, and --exploit-uniform needs --exploit-seconds > 0")
    if args.choose_seconds < 0:
        parser.error(f"--choose-seconds must be >= 0 (0: no choice), got {args.choose_seconds:g}")
    try:
        methods = parse_methods(args.methods, args.method)
    except ValueError as error:
        parser.error(str(error))
    budget = output_score.BoardBudget(args.games_vs_random, args.games_vs_mcts, args.mcts_simulations)
    rows = run_suite(args.games, args.seconds, args.runs, args.out, sorted(args.at), budget, methods=methods,
                     parallel=args.parallel, exploit_seconds=args.exploit_seconds, exploit_uniform=args.exploit_uniform,
                     choose_seconds=args.choose_seconds)
    print("\n" + markdown_table(rows, sorted(args.at), args.exploit_seconds, args.choose_seconds))
    print(f"rows: {os.path.join(args.out, ROWS_FILE)}; table: {os.path.join(args.out, TABLE_FILE)}")

if __name__ == "__main__":
    main()
