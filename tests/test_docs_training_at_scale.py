"""The examples of docs/training-at-scale.md run, each in a process of its own (a strategy, and a cluster
connection, changes the process it runs in): MirroredStrategy and ParameterServerStrategy as written; the
MultiWorkerMirroredStrategy script as two worker processes, which must end with identical weights."""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from conftest import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "training-at-scale.md")
# The page's examples are fenced ```py (tests/test_docs.py runs ```python blocks in its own process).
BLOCK = re.compile(r"^```py\n(.*?)^```", re.S | re.M)


def examples():
    """``{section title without its parenthesis: the section's py block}``."""
    out = {}
    for section in re.split(r"^## ", open(PAGE).read(), flags=re.M)[1:]:
        title, _, body = section.partition("\n")
        for code in BLOCK.findall(body):
            out[title.split(" (")[0]] = textwrap.dedent(code)
    return out


def _run(code, tmp_path, name, env=None):
    script = tmp_path / f"{name}.py"
    script.write_text(code)
    return subprocess.Popen([sys.executable, str(script)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=dict(os.environ, PYTHONPATH=ROOT, **(env or {})))


def test_page_has_the_three_strategies():
    assert sorted(examples()) == ["MirroredStrategy", "MultiWorkerMirroredStrategy", "ParameterServerStrategy"]


@pytest.mark.parametrize("title", ["MirroredStrategy", "ParameterServerStrategy"])
def test_example_runs(title, tmp_path):
    proc = _run(examples()[title], tmp_path, "example")
    out = proc.communicate(timeout=300)[0].decode(errors="replace")
    assert proc.returncode == 0, out[-3000:]


@pytest.mark.slow
def test_multi_worker_example_runs_on_two_workers(tmp_path):
    cluster = {"worker": [f"localhost:{free_port()}" for _ in range(2)]}
    procs = [_run(examples()["MultiWorkerMirroredStrategy"], tmp_path, f"worker{i}", env={"TF_CONFIG": json.dumps(
        {"cluster": cluster, "task": {"type": "worker", "index": i}})}) for i in range(2)]
    try:
        outputs = [p.communicate(timeout=300)[0].decode(errors="replace") for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-3000:]
    weights = [json.loads([line for line in out.splitlines() if line.startswith("[[")][-1]) for out in outputs]
    assert weights[0] == weights[1]
