"""The documentation site builds with warnings as errors, and its Python examples run.

Every ```` ```python ```` block of a page (and of README.md) is executed, in order, in one namespace per
page (blocks fenced as ```` ```py ```` are illustrations that are not run, for
example code that needs TensorFlow Addons).
"""

import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
PAGES = [os.path.join(DOCS, f) for f in sorted(os.listdir(DOCS)) if f.endswith(".md")]
PAGES.append(os.path.join(ROOT, "README.md"))  # its quickstart runs too
BLOCK = re.compile(r"^( *)```python[^\n]*\n(.*?)^\1```", re.S | re.M)

pytestmark = pytest.mark.default_stack_only


def _mkdocs() -> str:
    local = os.path.join(os.path.dirname(sys.executable), "mkdocs")
    return local if os.path.exists(local) else shutil.which("mkdocs") or "mkdocs"


@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path):
    result = subprocess.run([_mkdocs(), "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "api" / "index.html").exists()
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    # The docstrings' LaTeX reaches the page as arithmatex math, not as rST roles.
    assert 'class="arithmatex"' in api and ":math:" not in api


@pytest.mark.parametrize("path", [p for p in PAGES if BLOCK.search(open(p).read())], ids=os.path.basename)
def test_page_examples_run(path):
    page = os.path.relpath(path, ROOT)
    namespace: dict = {"__name__": "docs_example"}
    blocks = BLOCK.findall(open(path).read())
    for number, (_indent, code) in enumerate(blocks, start=1):
        code = textwrap.dedent(code)
        try:
            exec(compile(code, f"{page}, python block {number}", "exec"), namespace)
        except Exception as error:  # name the page and block in the failure
            raise AssertionError(f"{page}, python block {number} failed: {error!r}\n{code}") from error
