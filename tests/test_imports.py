"""The package's import graph: no module of ``optimizers`` imports, at its top or inside a
function, a module that imports it back (directly or through others), so each can be read and
loaded on its own terms; and nothing inside ``optimizers`` imports the top-level ``slots``
(another project's package of that name must not break it)."""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.default_stack_only  # reads source files: the same on every stack


def _modules() -> dict[str, str]:
    """``{dotted module name: path}`` of every module of the package."""
    out = {}
    for folder, _, files in os.walk(os.path.join(ROOT, "optimizers")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                out[dotted.removesuffix(".__init__")] = path
    return out


def _imports(path: str, modules: dict[str, str]) -> set[str]:
    """The package's modules that the module at ``path`` imports, anywhere in it (``from a import
    b`` where ``b`` is a module counts as importing ``a.b`` only: ``a`` is its package)."""
    out = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            inner = [f"{node.module}.{alias.name}" for alias in node.names if f"{node.module}.{alias.name}" in modules]
            out.update(inner if len(inner) == len(node.names) else [node.module, *inner])
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return {name for name in out if name in modules}


def test_no_module_imports_one_that_imports_it_back():
    modules = _modules()
    graph = {name: {target for target in _imports(path, modules)
                    if target != name and not name.startswith(target + ".")}  # a package above it: loaded first
             for name, path in modules.items()}
    circles, state, stack = [], {}, []

    def visit(name: str) -> None:
        state[name] = "open"
        stack.append(name)
        for target in sorted(graph[name]):
            if state.get(target) == "open":
                circles.append(" -> ".join(stack[stack.index(target):] + [target]))
            elif target not in state:
                visit(target)
        stack.pop()
        state[name] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name)
    assert circles == []


def test_nothing_inside_optimizers_imports_the_top_level_slots():
    modules = _modules()
    offenders = []
    for name, path in modules.items():
        for node in ast.walk(ast.parse(open(path).read())):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 else
                     [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
            offenders += [f"{name}: {target}" for target in names if target == "slots" or
                          (target or "").startswith("slots.")]
    assert offenders == []
