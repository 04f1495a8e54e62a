"""Compiled (XLA) steps.

A rule's dense step written with plain TensorFlow ops runs as several kernels,
each a pass over memory; compiled with XLA it fuses into about one (see
``benchmarks/``). Compiled functions are cached by what their trace depends
on: the shapes and dtypes of the variables, the rule, and the per-variable
options (``UpdateRule.variable_options``), never the variables themselves,
so variables of one shape share one function. A rule with a hand-fused kernel
(``UpdateRule.dense_kernel``: Adam's, SGD's) compiles only the step of a
decayed variable compiled alone, which fuses the decay into its pass, and a
wrapper's ``after_step`` after the kernel (see
``optimizers.execution.StepRunner._dense_kernel``). A kernel may compile a piece of its own
step through the same cache (LAMB's direction, NovoGrad's scaling and
ConditionalGradient's step given the norm, on a variable compiled alone:
:meth:`CompiledSteps.evaluate`, :meth:`CompiledSteps.run`), also one function
per signature.

Without a ``tf.distribute`` strategy, the small variables of one device (up
to ``BATCH_MAX_ELEMENTS``) are grouped by signature (rule, shape, dtype,
options), and each group is updated in chunks of ``CHUNK_SIZES`` variables,
largest first: a compiled call costs more than a small variable's update, so
a chunk shares one call, and a chunk's function depends only on the group's
signature and the chunk's size. So a template optimizer compiles at most
``len(CHUNK_SIZES)`` functions per signature group, however many variables
the model has and whichever of them get a gradient in a step (a ``None``
gradient only changes how many chunks run). A wrapper's ``after_step`` (an
average update) is compiled into those same functions when the inner
optimizer is a template one; around any other inner optimizer it is chunked
the same way, at most ``len(CHUNK_SIZES)`` functions per shape and dtype.
Large variables keep a call each, which TensorFlow runs in parallel.
:func:`compiled_function_count` reads the count.

Why this mechanism (measured on 2 cores, ``benchmarks/bench_zoo.py``): XLA's
cost to compile a function is about 0.1 s of CPU per function plus about
35 ms per variable update inside it, so compile work follows the number of
updates traced, not the number of calls. One function over every small
variable of a step (the previous mechanism) compiled each variable's update
again in every new subset of variables with gradients (101 functions and
+1.2 GB after 100 eager steps with varying ``None`` gradients) and traced
2000 updates for a 2000-variable model (a first step of 85 s vs 5 s for
tf_keras's Adam). Chunks of 8 trace at most 9 updates per group; chunks of 64
cost about 2.5 s of compilation per group and measured no faster in steady
steps than chunks of 8 or a call per variable.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import tensorflow as tf

from optimizers.tf_compat import is_plain_resource_variable, optimizer_chain

__all__ = ["CompiledSteps", "BATCH_MAX_ELEMENTS", "CHUNK_SIZES", "batchable", "alone", "compiled_function_count"]

# Variables up to this size are updated in chunks of one signature group (measured: 64
# variables of 125k floats, 1.35x the fused Adam kernel with a call each, 1.05x batched;
# 8 of 1M, 1.16x with a call each, 1.3x batched).
BATCH_MAX_ELEMENTS = 2**18

# The number of variables one compiled call of a group updates, largest first; a group of n
# variables is split greedily (n = 19: two calls of 8, then three of 1).
CHUNK_SIZES = (8, 1)


def _token(*_: Any) -> tf.Tensor:
    # Compiled steps return a token, not a variable's new value: returning it would
    # make XLA copy the whole variable out of the compiled function.
    return tf.constant(True)


class _Step:
    """``step(*args)``, returning a token. A callable object, not a closure: TensorFlow's
    "frequent retracing" warning counts traces per code object, and each compiled function
    here is traced once (per signature), not retraced."""

    def __init__(self, step: Callable[..., Any]) -> None:
        self.step = step

    def __call__(self, *args: Any) -> tf.Tensor:
        return _token(self.step(*args))


class _Chunk(_Step):
    """``step(*item, shared)`` for every item of a chunk, returning a token."""

    def __call__(self, chunk: list, shared: Any) -> tf.Tensor:
        return _token(*[self.step(*item, shared) for item in chunk])


def signature(var: Any, options: dict) -> tuple:
    """What a compiled step of ``var`` depends on besides the rule."""
    return tuple(var.shape.as_list()), var.dtype.base_dtype, tuple(sorted(options.items()))


def batchable(var: Any) -> bool:
    """Whether ``var`` is updated in a chunk of its group: a plain resource variable of known size
    up to ``BATCH_MAX_ELEMENTS`` (larger ones keep a call each)."""
    size = var.shape.num_elements()
    return is_plain_resource_variable(var) and size is not None and size <= BATCH_MAX_ELEMENTS


def alone(owner: Any, var: Any) -> bool:
    """Whether ``owner`` (a rule or a wrapper) compiles ``var``'s step as a call of its own: with
    ``jit_compile``, for a plain resource variable too large for a chunk (where one compiled pass
    beats a fused kernel's passes plus another op's, and where TensorFlow's reductions beat XLA's)."""
    return getattr(owner, "jit_compile", False) and is_plain_resource_variable(var) and not batchable(var)


def chunks(n: int) -> list[int]:
    """The chunk sizes (from ``CHUNK_SIZES``) a group of ``n`` variables is updated in."""
    out = []
    for size in CHUNK_SIZES:
        count, n = divmod(n, size)
        out.extend([size] * count)
    return out


class CompiledSteps:
    """A cache of ``tf.function(jit_compile=True)`` functions, one per key."""

    def __init__(self) -> None:
        self._functions: dict[Hashable, Any] = {}
        self._concrete: dict[Hashable, Any] = {}

    def __len__(self) -> int:
        return len(self._functions)

    @property
    def function_count(self) -> int:
        """How many functions have been compiled: traces of every cached function (read-only)."""
        return sum(f.experimental_get_tracing_count() for f in self._functions.values())

    def function(self, key: Hashable, python_function: Callable[..., Any]) -> Any:
        """The compiled function cached under ``key`` (made from ``python_function`` once)."""
        compiled = self._functions.get(key)
        if compiled is None:
            compiled = self._functions[key] = tf.function(python_function, jit_compile=True)
        return compiled

    def _call(self, key: Hashable, python_function: Callable[..., Any], args: tuple) -> Any:
        """The function of ``key`` called through its concrete function: ``tf.function``'s dispatch
        on the arguments' types costs about 0.6 ms per eager call (measured on a chunk of 8), more
        than a chunk's update. Arguments of another structure or type under the same key are
        refused while binding them, before anything runs, and go through the ``tf.function``."""
        function = self.function(key, python_function)
        concrete = self._concrete.get(key)
        if concrete is None:
            concrete = self._concrete[key] = function.get_concrete_function(*args)
        try:
            return concrete(*args)
        except TypeError:
            return function(*args)

    def run(self, step: Callable[..., Any], key: Hashable, *args: Any) -> Any:
        """``step(*args)`` compiled; ``key`` must identify ``step`` and the trace of ``args``."""
        return self._call(key, _Step(step), args)

    def evaluate(self, step: Callable[..., Any], key: Hashable, *args: Any) -> Any:
        """``step(*args)`` compiled, returning what it returns: a tensor it computes for later ops,
        never a variable's new value (see ``_token``); ``key`` as for :meth:`run`."""
        return self._call(key, step, args)

    def run_group(self, step: Callable[..., Any], key: Hashable, items: list[tuple], shared: Any) -> list:
        """``step(*item, shared)`` for every item, in chunks (``CHUNK_SIZES``), one compiled call each;
        ``key`` must identify ``step`` and the trace of any one ``(*item, shared)``."""

        calls, start = [], 0
        for size in chunks(len(items)):
            calls.append(self._call(("group", size) + tuple(key), _Chunk(step), (items[start:start + size], shared)))
            start += size
        return calls


def compiled_function_count(optimizer: Any) -> int:
    """How many XLA functions ``optimizer`` has compiled for its steps: its own and, through
    wrappers (``inner_optimizer``), every inner optimizer's. Bounded, for a template optimizer,
    by ``len(CHUNK_SIZES)`` per signature group (rule, shape, dtype, options) of the variables it
    has updated (a wrapper's ``after_step`` fused in), or, for a wrapper around another optimizer,
    ``len(CHUNK_SIZES)`` per shape and dtype for its own compiled step."""
    steps = (getattr(each, "_compiled", None) for each in optimizer_chain(optimizer))
    return sum(s.function_count for s in steps if isinstance(s, CompiledSteps))
