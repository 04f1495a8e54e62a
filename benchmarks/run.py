"""Run every ``benchmarks/bench_*.py`` case and print ours/peer ratios.

Usage: ``make bench`` (or ``python benchmarks/run.py [substring] [--output PATH]``).
Writes ``bench_output/results.json`` (or ``PATH``) for the docs' benchmark page, which
takes several such files to show the spread between runs (``docs/make_bench_plot.py``). A case with a
``unit`` attribute of ``"MB"`` (the model zoo's peak memory) reports bytes, printed
and stored in MiB (the ``unit`` key of its row); every other case reports seconds,
printed and stored in ms.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from benchmarks.common import Case  # noqa: E402


def main(argv: list[str]) -> int:
    args = argv[1:]
    output = os.path.join("bench_output", "results.json")
    if "--output" in args:
        at = args.index("--output")
        output = args[at + 1]
        del args[at:at + 2]
    pattern = args[0] if args else ""
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    modules = sorted(f[:-3] for f in os.listdir(HERE) if f.startswith("bench_") and f.endswith(".py"))
    cases: list[Case] = []
    for name in modules:
        cases.extend(importlib.import_module(f"benchmarks.{name}").cases())
    rows = []
    header = f"{'case':58} {'ours ms':>9} {'peer ms':>9} {'ratio':>7} {'goal':>6}  peer"
    print(header)
    print("-" * len(header))
    for case in cases:
        if pattern not in case.name:
            continue
        ours, peer = case.run()
        ratio = ours / peer
        ok = "ok" if ratio <= case.goal else "MISSED"
        unit = getattr(case, "unit", "ms")  # "ms": seconds shown in ms; "MB": bytes shown in MiB
        scale = 1e3 if unit == "ms" else 2.0**-20
        suffix = "" if unit == "ms" else f" {unit}"
        print(f"{case.name:58} {ours * scale:9.2f} {peer * scale:9.2f} {ratio:7.2f} {case.goal:6.2f}  {case.peer}{suffix}"
              f" [{ok}]", flush=True)
        rows.append(dict(case=case.name, peer=case.peer, ours_ms=ours * scale, peer_ms=peer * scale, ratio=ratio,
                         goal=case.goal, met=ratio <= case.goal, unit=unit))
    os.makedirs(os.path.dirname(output) or ".", exist_ok=True)
    machine = dict(cpu=platform.processor() or platform.machine(), cores=os.cpu_count(), python=platform.python_version())
    import tensorflow as tf

    machine["tensorflow"] = tf.__version__
    finished = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    with open(output, "w") as f:
        json.dump(dict(machine=machine, started=started, finished=finished, rows=rows), f, indent=2)
    print(f"\nmachine: {machine}\nwrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
