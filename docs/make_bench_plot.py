"""Turn a real benchmark run into the docs' benchmark table and plot.

Usage, from the repository root, after ``.venv/bin/python benchmarks/run.py``
(``make bench``) wrote ``bench_output/results.json``::

    .venv/bin/python docs/make_bench_plot.py [bench_output/results.json]

It writes ``docs/img/benchmarks.png`` and replaces the table between the
``<!-- bench-table -->`` markers of ``docs/benchmarks.md``. Nothing is typed in
by hand: every number comes from the JSON file.
"""

from __future__ import annotations

import json
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DOCS = os.path.dirname(os.path.abspath(__file__))
PAGE = os.path.join(DOCS, "benchmarks.md")
PLOT = os.path.join(DOCS, "img", "benchmarks.png")
MARKERS = re.compile(r"(<!-- bench-table:start -->\n).*?(<!-- bench-table:end -->)", re.S)


def table(results: dict) -> str:
    machine = results["machine"]
    lines = [
        "| case | ours (ms / step) | peer (ms / step) | peer | ratio | goal | met |",
        "|---|---:|---:|---|---:|---:|---|",
    ]
    for row in results["rows"]:
        lines.append(f"| {row['case']} | {row['ours_ms']:.2f} | {row['peer_ms']:.2f} | {row['peer']} | "
                     f"{row['ratio']:.2f} | {row['goal']:.2f} | {'yes' if row['met'] else 'no'} |")
    lines.append("")
    lines.append(f"Machine (from the results file): {machine.get('cores')} CPU cores ({machine.get('cpu')}), "
                 f"Python {machine.get('python')}, TensorFlow {machine.get('tensorflow')}.")
    return "\n".join(lines) + "\n"


def plot(results: dict) -> None:
    rows = results["rows"]
    labels = [row["case"] for row in rows]
    fig, ax = plt.subplots(figsize=(9, 0.7 * len(rows) + 1.6))
    positions = range(len(rows))
    ax.barh([p + 0.2 for p in positions], [r["ours_ms"] for r in rows], height=0.4, label="ours")
    ax.barh([p - 0.2 for p in positions], [r["peer_ms"] for r in rows], height=0.4, label="peer")
    for p, row in zip(positions, rows):
        ax.text(max(row["ours_ms"], row["peer_ms"]) * 1.02, p, f"x{row['ratio']:.2f}", va="center")
    ax.set_yticks(list(positions), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("milliseconds per optimizer step (median, lower is better)")
    machine = results["machine"]
    ax.set_title(f"benchmarks/run.py, {machine.get('cores')} CPU cores, TF {machine.get('tensorflow')}", loc="left")
    ax.set_xlim(0, max(max(r["ours_ms"], r["peer_ms"]) for r in rows) * 1.18)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    os.makedirs(os.path.dirname(PLOT), exist_ok=True)
    fig.savefig(PLOT, dpi=110)


def main(argv: list[str]) -> int:
    path = argv[1] if len(argv) > 1 else os.path.join("bench_output", "results.json")
    with open(path) as f:
        results = json.load(f)
    plot(results)
    page = open(PAGE).read()
    if not MARKERS.search(page):
        raise SystemExit(f"{PAGE} lacks the <!-- bench-table:start --> / <!-- bench-table:end --> markers")
    with open(PAGE, "w") as f:
        f.write(MARKERS.sub(lambda m: m.group(1) + table(results) + m.group(2), page))
    print(f"wrote {PLOT} and the table in {PAGE} from {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
