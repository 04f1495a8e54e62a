"""Turn a real benchmark run into the docs' benchmark table and plot.

Usage, from the repository root, after ``.venv/bin/python benchmarks/run.py``
(``make bench``) wrote ``bench_output/results.json``::

    .venv/bin/python docs/make_bench_plot.py [bench_output/results.json]

It writes ``docs/img/benchmarks.png``, copies the JSON file to
``docs/img/benchmarks_results.json`` and replaces the table between the
``<!-- bench-table -->`` markers of ``docs/benchmarks.md``. Nothing is typed in
by hand: every number comes from the JSON file.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
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


def table(results: dict) -> str:
    machine = results["machine"]
    lines = [
        "| case | ours | peer | unit | peer | ratio | goal | met |",
        "|---|---:|---:|---|---|---:|---:|---|",
    ]
    for row in results["rows"]:  # times in ms per step; memory rows say their unit (MB)
        lines.append(f"| {row['case']} | {row['ours_ms']:.2f} | {row['peer_ms']:.2f} | {row.get('unit', 'ms')} | "
                     f"{row['peer']} | {row['ratio']:.2f} | {_goal(row)} | {_met(row)} |")
    lines.append("")
    lines.append(f"Machine (from the results file): {machine.get('cores')} CPU cores ({machine.get('cpu')}), "
                 f"Python {machine.get('python')}, TensorFlow {machine.get('tensorflow')}.")
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
    for p, row in zip(positions, rows):
        right = max(row["ratio"], row["goal"] if math.isfinite(row["goal"]) else 0.0)
        ax.text(right * 1.05, p, f"{row['ratio']:.2f}", va="center", fontsize=8)
        if math.isfinite(row["goal"]):
            ax.plot([row["goal"]] * 2, [p - 0.4, p + 0.4], color="black", lw=2)
    ax.axvline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.set_xlim(0.5, max(ratios) * 1.6)
    ticks = [t for t in (0.5, 1, 2, 5, 10, 20, 50, 100) if t <= max(ratios) * 1.6]
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.minorticks_off()
    ax.set_yticks(positions, [row["case"] for row in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ours / peer, time per step or peak memory (lower is better; black tick: goal; dashed: parity)")
    machine = results["machine"]
    ax.set_title(f"benchmarks/run.py, {machine.get('cores')} CPU cores, TF {machine.get('tensorflow')}", loc="left")
    fig.tight_layout()
    os.makedirs(os.path.dirname(PLOT), exist_ok=True)
    fig.savefig(PLOT, dpi=110)


def main(argv: list[str]) -> int:
    path = argv[1] if len(argv) > 1 else os.path.join("bench_output", "results.json")
    with open(path) as f:
        results = json.load(f)
    plot(results)
    shutil.copyfile(path, SOURCE)  # the numbers behind the page, kept beside it
    page = open(PAGE).read()
    if not MARKERS.search(page):
        raise SystemExit(f"{PAGE} lacks the <!-- bench-table:start --> / <!-- bench-table:end --> markers")
    with open(PAGE, "w") as f:
        f.write(MARKERS.sub(lambda m: m.group(1) + table(results) + m.group(2), page))
    print(f"wrote {PLOT} and the table in {PAGE} from {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
