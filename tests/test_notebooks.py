"""Every tutorial notebook in notebooks/ runs from top to bottom without an error, on both stacks
(a Keras 3 notebook on the default stack, the one with Keras 3).

Each notebook says in its first cell which stacks it runs on; `make test` runs this file in the
default environment (TF 2.16+ with tf-keras) and in the TF 2.15 one, so that statement holds.
The notebooks execute with nbclient in a kernel started by *this* Python
(``sys.executable``): a temporary kernelspec is registered for the test, so
the notebooks see the same environment as the tests whatever kernels the
machine has installed.
"""

import json
import os
import sys
import time

import nbclient  # installed on both stacks: the `test` extra, and the Makefile's TF 2.15 line
import nbformat
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = os.path.join(ROOT, "notebooks")
KERNEL = "custom-optimizer-v2-tests"
BUDGET_SECONDS = 180  # each notebook must run in under three minutes on two CPU cores
NAMES = sorted(f for f in os.listdir(NOTEBOOKS) if f.endswith(".ipynb"))
# What the first cell says: a Keras 3 notebook runs where Keras 3 is (TF 2.16+), every other on both stacks.
STACKS = {name: "Runs on the default stack only" if "keras3" in name else "Runs on both stacks" for name in NAMES}
RUNS = [pytest.param(name, marks=pytest.mark.default_stack_only) if "keras3" in name else name for name in NAMES]

pytestmark = pytest.mark.slow


@pytest.fixture
def kernel_name(tmp_path, monkeypatch):
    spec_dir = tmp_path / "jupyter" / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "custom-optimizer-v2 (tests)", "language": "python"}
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    return KERNEL


@pytest.mark.parametrize("name", NAMES)
def test_notebook_says_its_stacks(name):
    first = nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4).cells[0]
    assert first.cell_type == "markdown" and STACKS[name] in first.source, \
        f"{name}: the first cell must say {STACKS[name]!r}"


@pytest.mark.parametrize("name", RUNS)
def test_notebook_runs(name, kernel_name):
    notebook = nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)
    client = nbclient.NotebookClient(notebook, kernel_name=kernel_name, timeout=BUDGET_SECONDS,
                                     resources={"metadata": {"path": NOTEBOOKS}})
    start = time.time()
    client.execute()  # raises CellExecutionError, naming the cell, on any error
    elapsed = time.time() - start
    assert elapsed < BUDGET_SECONDS, f"{name} took {elapsed:.0f} s"
    errors = [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, errors
