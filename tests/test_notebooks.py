"""Every tutorial notebook in notebooks/ runs from top to bottom without an error.

The notebooks execute with nbclient in a kernel started by *this* Python
(``sys.executable``): a temporary kernelspec is registered for the test, so
the notebooks see the same environment as the tests whatever kernels the
machine has installed.
"""

import json
import os
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = os.path.join(ROOT, "notebooks")
KERNEL = "custom-optimizer-v2-tests"
BUDGET_SECONDS = 180  # each notebook must run in under three minutes on two CPU cores

pytestmark = [pytest.mark.default_stack_only, pytest.mark.slow]


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


@pytest.mark.parametrize("name", sorted(f for f in os.listdir(NOTEBOOKS) if f.endswith(".ipynb")))
def test_notebook_runs(name, kernel_name):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
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
