"""Turn a real benchmark run into the docs' benchmark table and plot.

Usage, from the repository root, after one or several runs of
``.venv/bin/python benchmarks/run.py [--output FILE]`` (``make bench`` writes
``bench_output/results.json``)::

    .venv/bin/python docs/make_bench_plot.py [FILE ...]

Given several files (full runs, one after the other on the same machine), each row shows the
median ratio of the runs, the run that gave it, and the spread: the lowest and the highest ratio.
It writes ``docs/img/benchmarks.png``, writes the runs merged into
``docs/img/benchmarks_results.json`` (``rows``: the table; ``runs``: each run's own rows) and
replaces the table between the ``<!-- bench-table -->`` markers of ``docs/benchmarks.md``.
Nothing is typed in by hand: every number comes from the JSON files.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DOCS = os.path.dirname(os.path.abspath(__file__))
PAGE = os.path.join(DOCS, "benchmarks.md")
PLOT = os.path.join(DOCS, "img", "benchmarks.png")
SOURCE = os.path.join(DOCS, "img", "benchmarks_results.json")
MARKERS = re.compile(r"(<!-- bench-table:start -->\n).*?(<!-- bench-table:end -->)", re.S)


def _goal(row: dict) -> str:
    return f"{row['goal']:.2f}" if math.isfinite(row["goal"]) else "none"


def _met(row: dict) -> str:
    return ("yes" if row["met"] else "no") if math.isfinite(row["goal"]) else "-"


def merge(runs: list[dict]) -> dict:
    """One row per case (in the first run's order): the row of the run whose ratio is the median
    of the runs' (the lower middle one for an even count), with ``spread``, the lowest and the
    highest ratio, and ``runs``, how many runs had the case."""
    rows = []
    for first in runs[0]["rows"]:
        found = [row for run in runs for row in run["rows"] if row["case"] == first["case"]]
        ratios = sorted(row["ratio"] for row in found)
        middle = statistics.median_low(ratios)
        row = dict(next(row for row in found if row["ratio"] == middle))
        rows.append(dict(row, spread=[ratios[0], ratios[-1]], runs=len(found)))
    return dict(machine=runs[0]["machine"], rows=rows, runs=runs)


def _spread(row: dict) -> str:
    low, high = row["spread"]
    return f"{low:.2f}-{high:.2f}" if row["runs"] > 1 else "one run"


def table(results: dict) -> str:
    machine = results["machine"]
    lines = [
        "| case | ours | peer | unit | peer | ratio | spread | goal | met |",
        "|---|---:|---:|---|---|---:|---:|---:|---|",
    ]
    for row in results["rows"]:  # times in ms per step; memory rows say their unit (MB)
        lines.append(f"| {row['case']} | {row['ours_ms']:.2f} | {row['peer_ms']:.2f} | {row.get('unit', 'ms')} | "
                     f"{row['peer']} | {row['ratio']:.2f} | {_spread(row)} | {_goal(row)} | {_met(row)} |")
    lines.append("")
    runs = results["runs"]  # files written before run.py recorded its times have none: "?"
    when = "; ".join(f"{run.get('started', '?')} to {run.get('finished', '?')}" for run in runs)
    lines.append(f"Machine (from the results file): {machine.get('cores')} CPU cores ({machine.get('cpu')}), "
                 f"Python {machine.get('python')}, TensorFlow {machine.get('tensorflow')}. "
                 f"{len(runs)} full run(s): {when}. Ratio: the median run's; "
                 f"spread: the lowest and highest ratio of the runs; met: the median ratio is within the goal.")
    return "\n".join(lines) + "\n"


def plot(results: dict) -> None:
    """One bar per case: the ratio ours / peer (log scale), with the goal marked."""
    rows = results["rows"]
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(rows) + 1.6))
    positions = list(range(len(rows)))
    ratios = [row["ratio"] for row in rows]
    colors = ["C2" if row["met"] and math.isfinite(row["goal"]) else "C0" if not math.isfinite(row["goal"])
              else "C3" for row in rows]
    ax.barh(positions, ratios, color=colors, height=0.6)
    spreads = [row["spread"] for row in rows]
    ax.errorbar(ratios, positions, xerr=[[r - s[0] for r, s in zip(ratios, spreads)],
                                         [s[1] - r for r, s in zip(ratios, spreads)]],
                fmt="none", ecolor="black", elinewidth=0.8, capsize=2)
    for p, row, (_, high) in zip(positions, rows, spreads):
        right = max(high, row["goal"] if math.isfinite(row["goal"]) else 0.0)
        ax.text(right * 1.05, p, f"{row['ratio']:.2f}", va="center", fontsize=8)
        if math.isfinite(row["goal"]):
            ax.plot([row["goal"]] * 2, [p - 0.4, p + 0.4], color="black", lw=2)
    ax.axvline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xscale("log")
    bottom, top = min(0.5, 0.8 * min(s[0] for s in spreads)), max(s[1] for s in spreads)
    ax.set_xlim(bottom, top * 1.6)
    ticks = [t for t in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100) if bottom <= t <= top * 1.6]
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_yticks(positions, [row["case"] for row in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ours / peer, time per step or peak memory (lower is better; bar: median run, whiskers: "
                  "lowest and highest run; black tick: goal; dashed: parity)")
    machine = results["machine"]
    ax.set_title(f"benchmarks/run.py, {machine.get('cores')} CPU cores, TF {machine.get('tensorflow')}", loc="left")
    fig.tight_layout()
    os.makedirs(os.path.dirname(PLOT), exist_ok=True)
    fig.savefig(PLOT, dpi=110)


def main(argv: list[str]) -> int:
    paths = argv[1:] or [os.path.join("bench_output", "results.json")]
    runs = []
    for path in paths:
        with open(path) as f:
            runs.append(json.load(f))
    results = merge(runs)
    plot(results)
    with open(SOURCE, "w") as f:  # the numbers behind the page, kept beside it
        json.dump(results, f, indent=2)
    page = open(PAGE).read()
    if not MARKERS.search(page):
        raise SystemExit(f"{PAGE} lacks the <!-- bench-table:start --> / <!-- bench-table:end --> markers")
    with open(PAGE, "w") as f:
        f.write(MARKERS.sub(lambda m: m.group(1) + table(results) + m.group(2), page))
    print(f"wrote {PLOT}, {SOURCE} and the table in {PAGE} from {', '.join(paths)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
