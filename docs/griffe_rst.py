"""A griffe extension for the API reference: renders the rST bits our docstrings use.

The library's docstrings are Google style with reStructuredText math and roles
(they read well in ``help()``). Before griffe parses them, this turns

* ``.. math::`` blocks into ``$$ ... $$`` blocks (``aligned`` when they hold ``&``;
  ``align*`` becomes ``aligned``, which display math accepts),
* ``:math:`x``` into ``\\(x\\)`` (both rendered by ``pymdownx.arithmatex``),
* ``:class:`X```, ``:meth:`X```, ``:func:`X```... into code spans,
* ``>>>`` doctest blocks outside an ``Examples:`` section into ``pycon`` fences,
* rST definition-list terms (a line that is only a ````code```` span, followed
  by an indented block) into Markdown definition lists.

Loaded by mkdocs.yml (``extensions: [docs/griffe_rst.py]``); not part of the library.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|meth|func|attr|mod|obj|data|exc|py:\w+):`~?([^`]+)`")
_MATH_ROLE = re.compile(r":math:`([^`]+)`")
_DIRECTIVE = re.compile(r"^(\s*)\.\. math::\s*(.*)$")
_TERM = re.compile(r"^(\s*)``[^`]+``\s*$")
_SECTION_EXAMPLES = re.compile(r"^\s*Examples?:\s*$")
_LIST_ITEM = re.compile(r"^(\s*)(?:[*+-]|\d+[.)])\s+\S")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _block_indent(out: list[str], indent: str) -> str:
    """The indent a Markdown block needs to stay where an rST block at ``indent`` was.

    rST continues a list item at the item's text column (``* item`` then 2 spaces);
    Python-Markdown wants 4 spaces past the marker, or the block leaves the list (and
    ``$$`` there is no longer math)."""
    for line in reversed(out):
        if line.strip() and _indent(line) < len(indent):
            item = _LIST_ITEM.match(line)
            return item.group(1) + "    " if item else indent
    return indent


def _math_block(indent: str, body: list[str]) -> list[str]:
    text = "\n".join(body).strip("\n")
    lines = text.splitlines()
    margin = min((_indent(line) for line in lines if line.strip()), default=0)
    lines = [line[margin:] for line in lines]
    # align/align* cannot sit inside display math (MathJax rejects the nesting): use aligned.
    lines = [re.sub(r"\\(begin|end)\{align\*?\}", r"\\\1{aligned}", line) for line in lines]
    joined = "\n".join(lines)
    if ("&" in joined or "\\\\" in joined) and not joined.lstrip().startswith("\\begin"):
        lines = ["\\begin{aligned}", *lines, "\\end{aligned}"]
    return ["", indent + "$$", *(indent + line for line in lines), indent + "$$", ""]


def convert(text: str) -> str:
    """Convert one docstring's rST math, roles, doctests and definition lists to Markdown."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    in_examples = False
    while i < len(lines):
        line = lines[i]
        directive = _DIRECTIVE.match(line)
        if directive:
            indent, inline = directive.groups()
            body = [inline] if inline.strip() else []
            i += 1
            while i < len(lines) and (not lines[i].strip() or _indent(lines[i]) > len(indent)):
                body.append(lines[i])
                i += 1
            out.extend(_math_block(_block_indent(out, indent), body))
            continue
        if _SECTION_EXAMPLES.match(line):
            in_examples = True
        if line.lstrip().startswith(">>>") and not in_examples:
            indent = line[: _indent(line)]
            block = []
            while i < len(lines) and lines[i].strip() and _indent(lines[i]) >= len(indent):
                block.append(lines[i][len(indent):])
                i += 1
            if out and out[-1].strip():
                out.append("")
            out.extend([indent + "```pycon", *(indent + b for b in block), indent + "```", ""])
            continue
        term = _TERM.match(line)
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if term and nxt.strip() and _indent(nxt) > len(term.group(1)):
            indent = term.group(1)
            out.extend(["", line])
            i += 1
            first = True
            while i < len(lines) and lines[i].strip() and _indent(lines[i]) > len(indent):
                prefix = ":   " if first else "    "
                out.append(indent + prefix + lines[i].strip())
                first = False
                i += 1
            out.append("")
            continue
        out.append(line)
        i += 1
    result = "\n".join(out)
    result = _MATH_ROLE.sub(lambda m: "\\(" + m.group(1) + "\\)", result)
    return _ROLE.sub(lambda m: "`" + m.group(1).split(".")[-1] + "`", result)


class RstToMarkdown(griffe.Extension):
    """Rewrite every docstring with :func:`convert` once the package is loaded."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        self._walk(pkg, set())

    def _walk(self, obj: Any, seen: set) -> None:
        if id(obj) in seen or getattr(obj, "is_alias", False):
            return
        seen.add(id(obj))
        if obj.docstring is not None:
            obj.docstring.value = convert(obj.docstring.value)
        for member in obj.members.values():
            self._walk(member, seen)
