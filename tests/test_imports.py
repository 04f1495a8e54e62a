"""The package's shape: no module of ``optimizers`` imports, at its top or inside a function, a
module that imports it back (directly or through others), so each can be read and loaded on its
own terms; nothing inside ``optimizers`` imports the top-level ``slots`` (another project's
package of that name must not break it); the core imports no Keras; private state of Keras and
TensorFlow is read in the compat modules only; and no module outgrows one reader's attention."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

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


#: The Keras-free core: the rule protocol, hyperparameters, slots, weight decay, the step's
#: execution (kernels, compiled steps, plain ops) and TensorFlow's internals. The Keras adapters
#: (the template, wrappers, saving, config) are built on it.
CORE = ("optimizers.rule", "optimizers.hyperparameters", "optimizers.slots", "optimizers.weight_decay",
        "optimizers.compiled", "optimizers.execution", "optimizers.kernels", "optimizers.kernels.cache",
        "optimizers.tf_compat")


def test_the_core_imports_only_the_core_at_its_top():
    modules = _modules()
    outside = {name: sorted(target for target in _top_level_imports(modules[name], modules) if target not in CORE)
               for name in CORE}
    assert {name: targets for name, targets in outside.items() if targets} == {}


def _top_level_imports(path: str, modules: dict[str, str]) -> set[str]:
    tree = ast.parse(open(path).read())
    top = ast.Module(body=[node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))],
                     type_ignores=[])
    out = set()
    for node in ast.walk(top):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.update(f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                       for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return {name for name in out if name in modules or name.split(".")[0] in ("keras", "tf_keras")}


def test_the_core_loads_and_steps_where_no_keras_can_be_imported():
    """The core's modules, loaded without the package's ``__init__`` (which brings the Keras 2
    adapter) in a process where ``import keras`` and ``import tf_keras`` fail, run a rule's step."""
    script = f"""
import importlib, sys, types
sys.modules["keras"] = None
sys.modules["tf_keras"] = None
package = types.ModuleType("optimizers")
package.__path__ = [{os.path.join(ROOT, "optimizers")!r}]
sys.modules["optimizers"] = package
for name in {CORE!r}:
    importlib.import_module(name)
import tensorflow as tf
from optimizers.rule import UpdateRule

class PlainSGD(UpdateRule):
    def __init__(self):
        self.add_hyperparameter("learning_rate", 0.5, low=0.0)
    def update_dense(self, grad, var, slots, coefficients):
        return var.assign_sub(coefficients["learning_rate"] * grad)

var = tf.Variable([1.0, 2.0])
rule = PlainSGD()
rule.apply_dense(tf.constant([1.0, -1.0]), var, {{}}, rule.step_coefficients(tf.float32, tf.constant(0, tf.int64)))
print(var.numpy().tolist(), sorted(m for m in sys.modules if m.split(".")[0] in ("keras", "tf_keras") and sys.modules[m]))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "[0.5, 2.5] []"


#: The modules that may read another library's private state: each read there says why.
COMPAT = ("optimizers.keras_compat", "optimizers.tf_compat", "optimizers.keras3.compat")


def _names_of_the_package(trees: dict) -> set[str]:
    """Every name the package itself defines or assigns (functions, classes, attributes, string keys)."""
    own = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                own.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                own.add(node.value)  # a key of __dict__, a getattr name
    return own


def test_private_state_of_keras_and_tensorflow_is_read_only_in_the_compat_modules():
    """Outside the compat modules no ``obj._name`` is read where ``_name`` is no name the package
    defines (a private attribute of tf_keras, Keras 3 or TensorFlow, on ``self`` or on any object),
    and no underscore attribute of an object other than ``self``/``cls``/``super()`` is read at all,
    unless it belongs to a class of the package read through that class."""
    modules = _modules()
    trees = {name: ast.parse(open(path).read()) for name, path in modules.items()}
    own, classes = _names_of_the_package(trees), {
        node.name for tree in trees.values() for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    foreign, reached = [], []
    for name, tree in trees.items():
        if name in COMPAT:
            continue
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
                continue
            where = f"{name}:{node.lineno}: {ast.unparse(node)}"
            if node.attr not in own:
                foreign.append(where)
            value = node.value
            if not ((isinstance(value, ast.Name) and value.id in ("self", "cls", *classes))
                    or (isinstance(value, ast.Call) and ast.unparse(value.func) == "super")):
                reached.append(where)
    assert foreign == []
    assert reached == []


def test_no_module_is_longer_than_450_lines_and_the_template_class_than_350():
    long = {name: n for name, path in _modules().items() if (n := len(open(path).read().splitlines())) > 450}
    assert long == {}
    tree = ast.parse(open(os.path.join(ROOT, "optimizers", "template.py")).read())
    template = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "CustomOptimizerV2")
    assert template.end_lineno - template.lineno + 1 < 350
