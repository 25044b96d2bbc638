"""The league report: a leaderboard, a payoff heatmap, rating and exploitability curves.

This file owns rendering what the league and `seedleague eval` recorded into one
directory of Markdown and PNG files; it reads nothing itself:

    paths = write_report("runs/x/report", league.standings(), league.payoff(),
                         league.elo_history(), eval_history)
    # -> leaderboard.md, payoff_heatmap.png, ratings.png, exploitability.png, report.md

A large league's heatmap shows a readable subset of its keys (`heatmap_keys.pick_keys`)
and its leaderboard the rated rows first (`league.tables.rated_first`); report.md says
what each left out.

A plot with no data is left out (report.md says so). Plots are drawn on
matplotlib Figures with the Agg canvas, never through pyplot's global state.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np

from seedleague.artifacts.load import load_snapshot
from seedleague.eval.curve import as_eval_history, snapshot_curve
from seedleague.eval.heatmap_keys import NASH, KeySubset, pick_keys
from seedleague.eval.measure import is_poker, pool_keys, read_history
from seedleague.league.tables import rated_first
from seedleague.league.types import PayoffMatrix, Role, Standing

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ANNOTATE_UP_TO = 12  # payoff cells carry their value when the matrix has at most this many keys
LEGEND_UP_TO = 12  # rating curves named in the legend (best final Elo first)


def leaderboard_markdown(standings: Sequence[Standing], top: Optional[int] = None) -> str:
    """A Markdown table of the standings: rated rows (games > 0) first, best Elo first; with `top`,
    a long league shows at most `top` rated rows and says how many unrated ones it left out."""
    lines = ["| # | key | role | Elo | TrueSkill | games | win rate |", "|---:|---|---|---:|---:|---:|---:|"]
    board = rated_first(standings, top)
    for rank, row in enumerate(board.rows, start=1):
        lines.append(f"| {rank} | `{row.key}` | {Role(row.role).value} | {row.elo:.1f} | "
                     f"{row.trueskill_mu:.1f} ± {row.trueskill_sigma:.1f} | {row.games:.1f} | {row.win_rate:.3f} |")
    if not standings:
        lines.append("| | (no players yet) | | | | | |")
    notes = board.notes()
    return "\n".join(lines) + "\n" + ("\n" + "\n".join(notes) + " (all rows: leaderboard.md)\n" if notes else "")


def _figure(**kwargs) -> Figure:
    """A matplotlib Figure on the Agg canvas (no pyplot state); `kwargs` go to Figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # optional-heavy: matplotlib loads only to plot
    from matplotlib.figure import Figure  # optional-heavy: as above

    fig = Figure(**kwargs)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: str) -> str:
    fig.savefig(path, dpi=100, bbox_inches="tight")
    return path


def payoff_heatmap(payoff: PayoffMatrix, path: str, subset: Optional[KeySubset] = None) -> Optional[str]:
    """P[row beats column] over `subset`'s keys (default `pick_keys`: every key in a small league, at
    most 24 in a large one); cells with no games are hatched, not 0.5. None when there are no keys."""
    if not payoff.keys:
        return None
    subset = subset or pick_keys(payoff)
    n, shown = len(payoff.keys), np.asarray(subset.indices)
    pick = np.ix_(shown, shown)
    win_rate = np.asarray(payoff.win_rate, np.float64).reshape(n, n)[pick]
    played = np.asarray(payoff.games, np.float64).reshape(n, n)[pick] > 0
    labels = [payoff.keys[i] + (" *" if NASH in subset.reasons.get(i, ()) else "") for i in shown]
    k = len(shown)
    side = min(4 + 0.45 * k, 24)
    fig = _figure(figsize=(side + 1.5, side))
    ax = fig.add_subplot()
    ax.patch.set_facecolor("white")
    ax.patch.set_hatch("///")
    ax.patch.set_edgecolor("lightgrey")  # shows through the cells left blank: no games
    image = ax.imshow(np.ma.masked_array(win_rate, ~played), cmap="RdBu", vmin=0.0, vmax=1.0)
    fig.colorbar(image, ax=ax, label="P[row beats column]")
    font = max(4, 10 - k // 8)
    ax.set_xticks(range(k), labels, rotation=90, fontsize=font)
    ax.set_yticks(range(k), labels, fontsize=font)
    ax.set_xlabel("column: opponent")
    ax.set_ylabel("row: player")
    if k <= ANNOTATE_UP_TO:
        for i, j in zip(*np.nonzero(played)):
            shade = "white" if abs(win_rate[i, j] - 0.5) > 0.3 else "black"
            ax.text(j, i, f"{win_rate[i, j]:.2f}", ha="center", va="center", fontsize=8, color=shade)
    ax.set_title("payoff: decayed win rates" + ("" if subset.complete else f" ({k} of {n} keys)"))
    return _save(fig, path)


def ratings_plot(elo_history: dict[str, list[tuple[int, float]]], path: str) -> Optional[str]:
    """Elo of every key against the number of results counted; None when there is no history."""
    curves = {key: points for key, points in elo_history.items() if points}
    if not curves:
        return None
    fig = _figure(figsize=(9, 5))
    ax = fig.add_subplot()
    order = sorted(curves, key=lambda key: -curves[key][-1][1])
    for rank, key in enumerate(order):
        x, elo = zip(*curves[key])
        ax.plot(x, elo, marker="." if len(x) < 30 else None, label=key if rank < LEGEND_UP_TO else None)
    ax.set_xlabel("results counted")
    ax.set_ylabel("Elo")
    ax.set_title("ratings over results")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return _save(fig, path)


# The exploitabilities an eval entry may carry: (series name, results field).
# The run's output (what load_trained and serve give: a distilled network, a mixture, ...) is a point at the run's end,
# beside the curve of the networks it came from.
EXPLOITABILITIES = (("policy", "exploitability"), ("param average", "param_average_exploitability"),
                    ("average policy", "average_exploitability"), ("league Nash mixture", "nash_mixture_exploitability"),
                    ("mixture", "mixture_exploitability"), ("the run's output", "output_exploitability"))


def _exploitability_points(eval_history: Sequence[dict]) -> dict[str, list[dict]]:
    """{"policy": [...], "average policy": [...], ...}: entries carrying each exploitability, with x values."""
    series: dict[str, list[dict]] = {name: [] for name, _ in EXPLOITABILITIES}
    for entry in eval_history:
        results = entry.get("results", {})
        for name, field in EXPLOITABILITIES:
            if results.get(field) is not None:
                series[name].append(dict(value=float(results[field]), time=entry.get("time"),
                                         wall_s=entry.get("wall_s"), env_steps=entry.get("env_steps")))
    return {name: points for name, points in series.items() if points}


def exploitability_plot(eval_history: Sequence[dict], path: str) -> Optional[str]:
    """Exploitability against wall-clock seconds (the run's training time when recorded, else
    time since the first evaluation) and, when recorded, against env steps; None without data."""
    series = _exploitability_points(eval_history)
    points = [p for ps in series.values() for p in ps]
    if not points:
        return None
    use_wall = all(p["wall_s"] is not None for p in points)
    first = min((p["time"] or 0.0) for p in points)
    seconds = lambda p: p["wall_s"] if use_wall else (p["time"] or 0.0) - first
    with_steps = any(p["env_steps"] is not None for p in points)
    fig = _figure(figsize=(11 if with_steps else 6, 4.5), layout="constrained")
    axes = fig.subplots(1, 2 if with_steps else 1, squeeze=False, sharey=True)[0]
    for name, ps in series.items():
        ps = sorted(ps, key=seconds)
        axes[0].plot([seconds(p) for p in ps], [p["value"] for p in ps], marker="o", label=name)
        if with_steps:
            stepped = sorted((p for p in ps if p["env_steps"] is not None), key=lambda p: p["env_steps"])
            axes[1].plot([p["env_steps"] for p in stepped], [p["value"] for p in stepped], marker="o", label=name)
    axes[0].set_xlabel("training wall-clock seconds" if use_wall else "seconds since the first evaluation")
    if with_steps:
        axes[1].set_xlabel("env steps")
    axes[0].set_ylabel("exploitability (NashConv / 2)")
    axes[0].set_yscale("log" if min(p["value"] for p in points) > 0 else "linear")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("exploitability (lower is better)")
    return _save(fig, path)


def _report_markdown(standings: Sequence[Standing], payoff: PayoffMatrix, figures: dict[str, Optional[str]],
                     eval_history: Sequence[dict], subset: KeySubset) -> str:
    lines = ["# League report", "", f"{len(standings)} players and snapshots; {len(payoff.keys)} keys in the payoff "
             f"matrix; {len(eval_history)} evaluations.", "", "## Leaderboard", "",
             "[leaderboard.md](leaderboard.md)", "", leaderboard_markdown(standings, top=20)]
    captions = {"payoff_heatmap": "Payoff", "ratings": "Ratings", "exploitability": "Exploitability"}
    missing = {"payoff_heatmap": "no players yet", "ratings": "no rating history yet",
               "exploitability": "no exploitability evaluations yet (`seedleague eval` on a poker game)"}
    for name, caption in captions.items():
        lines += [f"## {caption}", ""]
        path = figures.get(name)
        lines += [f"![{caption}]({os.path.basename(path)})" if path else f"({missing[name]})", ""]
        if name == "payoff_heatmap" and path:
            lines += [subset.describe(), ""]
    latest = next((e for e in reversed(eval_history) if e.get("results")), None)
    if latest is not None:
        lines += ["## Latest evaluation", "", f"step {latest.get('step')} of `{latest.get('policy', '?')}`: "
                  f"{_summary(latest['results'])}", ""]
    return "\n".join(lines)


def _summary(results: dict) -> str:
    """One line of an eval entry's results: exploitabilities and match scores ((wins + draws/2) / games).

    A field that is absent or None (e.g. no param average in this run) is left out."""
    parts = [f"{name} exploitability {results[field]:.4g}" for name, field in EXPLOITABILITIES
             if results.get(field) is not None]
    matches = [("vs random", results.get("vs_random"))] + [
        (f"vs MCTS {sims}", stats) for sims, stats in (results.get("vs_mcts") or {}).items()]
    matches.append((f"vs {(results.get('head_to_head') or {}).get('opponent')}", results.get("head_to_head")))
    parts += [f"{label} score {stats['score']:.3f} over {stats.get('games', '?')} games"
              for label, stats in matches if stats and stats.get("score") is not None]
    return "; ".join(parts) or "(no results)"


def write_report(out_dir: str, standings: list[Standing], payoff: PayoffMatrix,
                 elo_history: dict[str, list[tuple[int, float]]], eval_history: list[dict]) -> list[str]:
    """Write leaderboard.md, the PNGs that have data, and report.md linking them; returns the paths written."""
    os.makedirs(out_dir, exist_ok=True)
    leaderboard = os.path.join(out_dir, "leaderboard.md")
    with open(leaderboard, "w") as f:
        f.write("# Leaderboard\n\n" + leaderboard_markdown(standings))
    subset = pick_keys(payoff)
    figures = {
        "payoff_heatmap": payoff_heatmap(payoff, os.path.join(out_dir, "payoff_heatmap.png"), subset),
        "ratings": ratings_plot(elo_history, os.path.join(out_dir, "ratings.png")),
        "exploitability": exploitability_plot(eval_history, os.path.join(out_dir, "exploitability.png")),
    }
    report = os.path.join(out_dir, "report.md")
    with open(report, "w") as f:
        f.write(_report_markdown(standings, payoff, figures, eval_history, subset))
    return [leaderboard] + [p for p in figures.values() if p] + [report]


def run_report(run_dir: str, league: Any, out_dir: Optional[str] = None) -> list[str]:
    """Write the report of `run_dir` from `league` (standings, payoff, elo history; None: empty
    league) and the run's eval history into `out_dir` (default `<run_dir>/report`); returns paths."""
    standings, payoff, elo = [], PayoffMatrix([], [], []), {}
    if league is not None:
        standings, payoff = league.standings(), league.payoff()
        elo = league.elo_history() if hasattr(league, "elo_history") else {}
    history = read_history(run_dir) + _pool_curve(run_dir)
    return write_report(out_dir or os.path.join(run_dir, "report"), standings, payoff, elo, history)


def _pool_curve(run_dir: str, max_points: int = 40) -> list[dict]:
    """Exploitability of the first player's snapshots over training, for poker runs (else [])."""
    player, keys = pool_keys(run_dir)
    if not keys or not is_poker(load_snapshot(run_dir, keys[0]).spec.env_name):
        return []
    return as_eval_history(snapshot_curve(run_dir, player, every=max(1, len(keys) // max_points)))
