"""Compiled (XLA) steps.

A rule's dense step written with plain TensorFlow ops runs as several kernels,
each a pass over memory; compiled with XLA it fuses into about one (see
``benchmarks/``). Compiled functions are cached by what their trace depends
on: the shapes and dtypes of the variables, the rule, and the per-variable
options (``UpdateRule.variable_options``), never the variables themselves,
so variables of one shape share one function.

Without a ``tf.distribute`` strategy, the small variables of one device are
updated by one compiled call per step: a call costs more than a small
variable's update. Large variables keep a call each, which TensorFlow runs in
parallel.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import tensorflow as tf

__all__ = ["CompiledSteps", "BATCH_MAX_ELEMENTS"]

# Variables up to this size share one XLA call per step (measured: 64 variables of
# 125k floats, 1.35x the fused Adam kernel with a call each, 1.05x batched; 8 of 1M,
# 1.16x with a call each, 1.3x batched).
BATCH_MAX_ELEMENTS = 2**18


def _token(*_: Any) -> tf.Tensor:
    # Compiled steps return a token, not a variable's new value: returning it would
    # make XLA copy the whole variable out of the compiled function.
    return tf.constant(True)


def _run_all(steps: tuple, args: list) -> tf.Tensor:
    for step, step_args in zip(steps, args):
        step(*step_args)
    return _token()


def signature(var: Any, options: dict) -> tuple:
    """What a compiled step of ``var`` depends on besides the rule."""
    return tuple(var.shape.as_list()), var.dtype.base_dtype, tuple(sorted(options.items()))


class CompiledSteps:
    """A cache of ``tf.function(jit_compile=True)`` functions, one per key."""

    def __init__(self) -> None:
        self._functions: dict[Hashable, Any] = {}

    def __len__(self) -> int:
        return len(self._functions)

    def function(self, key: Hashable, python_function: Callable[..., Any]) -> Any:
        """The compiled function cached under ``key`` (made from ``python_function`` once)."""
        compiled = self._functions.get(key)
        if compiled is None:
            compiled = self._functions[key] = tf.function(python_function, jit_compile=True)
        return compiled

    def run(self, step: Callable[..., Any], key: Hashable, *args: Any) -> Any:
        """``step(*args)`` compiled; ``key`` must identify ``step`` and the trace of ``args``."""
        return self.function(key, lambda *a: _token(step(*a)))(*args)

    def run_all(self, steps: list[Callable[..., Any]], keys: list[Hashable], args: list[tuple]) -> Any:
        """Every ``steps[i](*args[i])`` in one compiled call."""
        steps_tuple = tuple(steps)
        return self.function(("all", tuple(keys)), lambda a: _run_all(steps_tuple, a))(list(args))
