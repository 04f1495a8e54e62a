"""``make demo`` (``python examples/demo.py``) trains, prints its table and writes its plot."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.default_stack_only, pytest.mark.slow]  # needs scikit-learn and matplotlib

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "demo.py"


def load_demo():
    """The script as a module, loaded from its path: ``examples/`` is not a package."""
    spec = importlib.util.spec_from_file_location("examples_demo", DEMO)
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    return demo


def test_demo_prints_table_and_writes_plot(tmp_path, capsys):
    demo = load_demo()

    assert demo.main(["--epochs", "2", "--output-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = {}
    for name in ("tf_keras legacy Adam (built-in)", "MovingAverage(AdamW), trained weights",
                 "MovingAverage(AdamW), averaged weights"):
        match = re.search(re.escape(name) + r"\s+([0-9.]+)\s+([0-9.]+)", out)
        assert match, f"row {name!r} missing from the table:\n{out}"
        rows[name] = float(match.group(2))
    # Ten classes: two epochs of any working optimizer are far better than chance (0.1).
    assert all(accuracy > 0.5 for accuracy in rows.values()), rows
    plot = tmp_path / "demo_curves.png"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(plot) in out  # the demo says where it wrote the plot
    # The overwrite-with-gradient statistic holds the last batch's max |activation| (>= 0, ReLU).
    assert re.search(r"max \|activation\| of the last batch, [0-9.]+", out)


def test_demo_rejects_bad_epochs():
    # Run as ``make demo`` does: a script from the repository root, importing the installed package.
    result = subprocess.run([sys.executable, "examples/demo.py", "--epochs", "0"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    assert "--epochs must be >= 1. Received: --epochs=0" in result.stderr
