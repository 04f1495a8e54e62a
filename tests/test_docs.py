"""The documentation site builds with warnings as errors, reads right as built, and its Python examples run.

The site is built once (a module fixture) and its pages are checked as a reader gets them:
every formula typeset by KaTeX at build time (no raw TeX left, nothing fetched from outside
the site to show a page), internal links and anchors resolve, and the API reference shows
the signature of each class and function it documents. A tiny site of its own shows that the
math hook (docs/hooks/math.py) fails a build that would leave raw TeX on a page.

Every ```` ```python ```` block of a page (and of README.md) is executed, in order, in one namespace per
page (blocks fenced as ```` ```py ```` are illustrations that are not run, for
example code that needs TensorFlow Addons).
"""

import html
import importlib
import inspect
import os
import posixpath
import re
import shutil
import subprocess
import sys
import textwrap
from html.parser import HTMLParser
from urllib.parse import unquote, urlsplit

import pytest

import optimizers

from conftest import TF_VERSION

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
PAGES = [os.path.join(DOCS, f) for f in sorted(os.listdir(DOCS)) if f.endswith(".md")]
PAGES.append(os.path.join(ROOT, "README.md"))  # its quickstart runs too
BLOCK = re.compile(r"^( *)```python[^\n]*\n(.*?)^\1```", re.S | re.M)

pytestmark = pytest.mark.default_stack_only


def _mkdocs() -> str:
    local = os.path.join(os.path.dirname(sys.executable), "mkdocs")
    return local if os.path.exists(local) else shutil.which("mkdocs") or "mkdocs"


HOOK = os.path.join(DOCS, "hooks", "math.py")
# Where TeX-looking text is fine on a page: code, scripts, styles, and MathML's annotation (the source).
NOT_SHOWN = re.compile(r"<(pre|code|script|style|textarea|annotation)\b[^>]*>.*?</\1>", re.S | re.I)
RAW_TEX = re.compile(r"\\[()\[\]]|\$\$")
FENCE = re.compile(r"^( *)(```|~~~).*?^\1\2", re.S | re.M)
# Tags whose attribute loads something when the page is shown (an <a href> only links).
LOADS = {("script", "src"), ("link", "href"), ("img", "src"), ("iframe", "src"), ("source", "src"),
         ("video", "src"), ("audio", "src"), ("embed", "src"), ("object", "data"), ("image", "href")}
CSS_URL = re.compile(r"""url\(\s*['"]?([^'")]+)['"]?\s*\)|@import\s+['"]([^'"]+)['"]""")


def _build(site_dir, cwd=ROOT, strict=True):
    command = [_mkdocs(), "build", "--site-dir", str(site_dir)] + (["--strict"] if strict else [])
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site, built once with --strict, as ``(site_dir, build result)``."""
    site_dir = tmp_path_factory.mktemp("docs") / "site"
    return site_dir, _build(site_dir)


@pytest.fixture(scope="module")
def pages(site):
    """``{path in the site: parsed page}`` for every HTML page of the built site."""
    site_dir, result = site
    assert result.returncode == 0, result.stdout + result.stderr
    found = {}
    for folder, _dirs, names in os.walk(site_dir):
        for name in names:
            if name.endswith(".html"):
                path = os.path.join(folder, name)
                found[os.path.relpath(path, site_dir).replace(os.sep, "/")] = _Page(open(path, encoding="utf-8").read())
    return found


class _Page(HTMLParser):
    """A built page: its text, its ids, and what it links to or loads."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.text, self.ids, self.links, self.loads = text, set(), [], []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.ids.update(attrs[key] for key in ("id", "name") if attrs.get(key))
        if tag == "a" and attrs.get("href"):
            self.links.append(attrs["href"])
        for load_tag, key in LOADS:
            if tag == load_tag and attrs.get(key) and not (tag == "link" and attrs.get("rel") == "canonical"):
                self.loads.append(attrs[key])


def _is_external(url):
    parts = urlsplit(url)
    return bool(parts.netloc) or parts.scheme not in ("", "data")


def _resolve(site_dir, page_path, url):
    """The site file ``url`` points to from ``page_path`` (None if outside the site), and its fragment."""
    parts = urlsplit(url)
    if parts.scheme == "data":
        return None, ""
    if not parts.path:
        return page_path, unquote(parts.fragment)
    base = "" if parts.path.startswith("/") else posixpath.dirname(page_path)
    target = posixpath.normpath(posixpath.join(base, unquote(parts.path).lstrip("/")))
    if parts.path.endswith("/") or os.path.isdir(os.path.join(site_dir, target)):
        target = posixpath.join(target, "index.html")
    return target, unquote(parts.fragment)


@pytest.mark.slow
@pytest.mark.xdist_group("docs_site")
def test_mkdocs_build_strict(site):
    site_dir, result = site
    assert result.returncode == 0, result.stdout + result.stderr
    assert (site_dir / "api" / "index.html").exists()
    api = (site_dir / "api" / "index.html").read_text()
    # The docstrings' LaTeX reaches the page as typeset math, not as rST roles or TeX.
    assert 'class="katex-mathml"' in api and ":math:" not in api


@pytest.mark.slow
@pytest.mark.xdist_group("docs_site")
def test_every_formula_is_typeset(pages):
    """No raw TeX on any page; every arithmatex element holds KaTeX's HTML and MathML; no formula lost."""
    for path, page in pages.items():
        shown = NOT_SHOWN.sub(" ", page.text)
        raw = [shown[max(0, m.start() - 60):m.end() + 60] for m in RAW_TEX.finditer(shown)]
        assert not raw, f"{path} shows raw TeX: {raw[:5]}"
        assert "katex-error" not in page.text, path
        formulas = page.text.count('class="arithmatex"')
        assert page.text.count('<span class="katex-mathml"><math') == formulas, path
        assert page.text.count('<span class="katex-html" aria-hidden="true">') == formulas, path
    for md in PAGES[:-1]:  # each formula of a page's source is on the built page
        source = FENCE.sub("", open(md).read())
        expected = source.count("\\(") + len(re.findall(r"^\s*\$\$\s*$", source, re.M)) // 2
        name = os.path.splitext(os.path.basename(md))[0]
        built = pages["index.html" if name == "index" else f"{name}/index.html"].text.count('class="arithmatex"')
        assert built >= expected, f"{name}.md has {expected} formulas, its page {built}"
    assert pages["adamw/index.html"].text.count('<span class="katex-display">') >= 2


@pytest.mark.slow
@pytest.mark.xdist_group("docs_site")
def test_nothing_is_loaded_from_outside_the_site(site, pages):
    """Scripts, style sheets, fonts and images all come from the site: pages read the same offline."""
    site_dir, _ = site
    for path, page in pages.items():
        outside = [url for url in page.loads if _is_external(url)]
        assert not outside, f"{path} loads {outside}"
        missing = [url for url in page.loads
                   if (t := _resolve(site_dir, path, url)[0]) and not (site_dir / t).is_file()]
        assert not missing, f"{path} loads files the site lacks: {missing}"
    for folder, _dirs, names in os.walk(site_dir):
        for name in (n for n in names if n.endswith(".css")):
            css_path = os.path.relpath(os.path.join(folder, name), site_dir).replace(os.sep, "/")
            css = open(os.path.join(folder, name), encoding="utf-8").read()
            for url in (a or b for a, b in CSS_URL.findall(css)):
                assert not _is_external(url), f"{css_path} loads {url}"
                target, _ = _resolve(site_dir, css_path, url)
                assert target is None or (site_dir / target).is_file(), f"{css_path}: {url} is not in the site"
    assert "fonts.googleapis" not in pages["index.html"].text


@pytest.mark.slow
@pytest.mark.xdist_group("docs_site")
def test_internal_links_and_anchors_resolve(site, pages):
    site_dir, _ = site
    broken = []
    for path, page in pages.items():
        if path == "404.html":  # written for the server's root, whatever the URL that was not found
            continue
        for url in page.links:
            if _is_external(url):
                continue
            target, fragment = _resolve(site_dir, path, url)
            if target not in pages and not (site_dir / target).is_file():
                broken.append(f"{path}: {url} (no {target})")
            elif fragment and target in pages and fragment not in pages[target].ids:
                broken.append(f"{path}: {url} (no #{fragment} in {target})")
    assert not broken, "\n".join(broken)


def _documented():
    """``(page, identifier, members)`` for every ``::: identifier`` block of the docs."""
    import yaml  # mkdocs' dependency: the default stack only, like this file's tests

    found = []
    for md in PAGES[:-1]:
        text = open(md).read()
        for match in re.finditer(r"^::: (\S+)\n((?:[ ]{4}.*\n|\s*\n)*)", text, re.M):
            options = (yaml.safe_load(textwrap.dedent(match.group(2))) or {}).get("options", {}) or {}
            members = options.get("members")
            found.append((os.path.basename(md), match.group(1), members if isinstance(members, list) else []))
    return found


def _lookup(identifier):
    parts = identifier.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(identifier)


def _section(page_text, identifier):
    """The HTML from ``identifier``'s heading to the next documented object's heading."""
    start = page_text.index(">", page_text.index(f'id="{identifier}"'))  # past the heading's own tag
    end = page_text.find('class="doc doc-heading"', start)
    return page_text[start:end if end > 0 else len(page_text)]


def _signature(section):
    match = re.search(r'<div class="doc-signature[^"]*">(.*?)</div>', section, re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", match.group(1))) if match else None


@pytest.mark.slow
@pytest.mark.xdist_group("docs_site")
def test_api_pages_show_signatures(pages):
    """Each class and function an API page documents shows its signature, with every parameter."""
    documented = _documented()
    assert len(documented) > 20
    for md, identifier, members in documented:
        page = pages[f"{os.path.splitext(md)[0]}/index.html"].text
        assert f'id="{identifier}"' in page, f"{md}: no heading for {identifier}"
        obj = _lookup(identifier)
        signature = _signature(_section(page, identifier))
        # A class built with no argument (UpdateRule, Frozen) gets no signature from mkdocstrings.
        if (inspect.isclass(obj) or inspect.isfunction(obj)) and (signature or inspect.signature(obj).parameters):
            assert signature is not None, f"{md}: {identifier} has no signature"
            name = identifier.rsplit(".", 1)[-1]
            assert re.search(rf"\b{name}\(", signature), f"{md}: {identifier}: {signature}"
            for parameter in inspect.signature(obj).parameters:
                assert re.search(rf"\b{parameter}\b", signature), f"{md}: {identifier} lacks {parameter}: {signature}"
        for member in members:
            member_id = f"{identifier}.{member}"
            assert f'id="{member_id}"' in page, f"{md}: no heading for {member_id}"
            signature = _signature(_section(page, member_id))
            assert signature is not None and member in signature, f"{md}: {member_id}: {signature}"
            if inspect.isroutine(inspect.getattr_static(obj, member, None)):
                assert f"{member}(" in signature, f"{md}: {member_id}: {signature}"


def _tiny_site(tmp_path, page):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text(page)
    (tmp_path / "mkdocs.yml").write_text(
        "site_name: tiny\ntheme:\n  name: mkdocs\nmarkdown_extensions:\n"
        f"  - pymdownx.arithmatex:\n      generic: true\nhooks:\n  - {HOOK}\n")
    return _build(tmp_path / "site", cwd=tmp_path, strict=False)


@pytest.mark.slow
@pytest.mark.parametrize("page, error", [
    ("# Fine\n\nInline \\(x^2\\) and display:\n\n$$\n\\frac{1}{2}\n$$\n", None),
    # TeX that arithmatex does not see (here raw HTML) reaches the page as it was written.
    ("# Raw\n\nTypeset \\(x^2\\).\n\n<p>Not typeset: \\(y^2\\)</p>\n", "index.md still shows raw TeX in 2 place"),
    ("# Raw\n\n<div>$$ z $$</div>\n", "index.md still shows raw TeX"),
    ("# Bad\n\n\\(\\frac{1}\\)\n", "KaTeX cannot typeset 1 formula(s) of index.md"),
], ids=["typeset", "raw-inline", "raw-display", "katex-error"])
def test_math_hook_fails_the_build_on_raw_tex(tmp_path, page, error):
    """Not only --strict: any build that would leave raw TeX on a page, or TeX KaTeX rejects, fails."""
    result = _tiny_site(tmp_path, page)
    output = result.stdout + result.stderr
    if error is None:
        assert result.returncode == 0, output
        built = (tmp_path / "site" / "index.html").read_text()
        assert built.count('<span class="katex-mathml"><math') == 2
        assert (tmp_path / "site" / "assets" / "katex" / "katex.min.css").is_file()
    else:
        assert result.returncode != 0 and error in output, output


@pytest.mark.skipif(TF_VERSION < (2, 16), reason="Keras 3 exists only beside TF >= 2.16")
def test_keras3_compile_error_says_the_fix():
    """A Keras 3 model compiled with our optimizer: Keras 3's error quotes our repr, which gives the fix,
    exactly as the Getting started page shows it."""
    import keras as keras3

    model = keras3.Sequential([keras3.Input((2,)), keras3.layers.Dense(1)])
    with pytest.raises(ValueError) as error:
        model.compile(optimizer=optimizers.AdamW(weight_decay=0.01), loss="mse")
    expected = ("Could not interpret optimizer identifier: <optimizers.rules.adamw.AdamW name='AdamW': "
                "a Keras 2 (OptimizerV2) optimizer, for tf_keras models; a Keras 3 model (`import keras`) "
                "takes the class of the same name from `optimizers.keras3`>")
    assert str(error.value) == expected
    assert f"ValueError: {expected}" in open(os.path.join(DOCS, "index.md")).read()


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
