"""How a step runs each variable's update: a hand-fused kernel, a compiled (XLA) step, or plain ops.

:class:`StepRunner` runs a template optimizer's updates (``CustomOptimizerV2`` holds one);
:class:`AfterStep` runs a wrapper's ``after_step`` (``OptimizerWrapper`` holds one). A wrapper
around a template optimizer hands its ``AfterStep`` to the inner step
(``CustomOptimizerV2.running_after_each_update``): each wrapped variable's ``after_step`` then runs
right after the variable's update, in the same compiled function when both compile, or inside the
rule's fused kernel when it is a moving average (one pass over memory instead of two). Around any
other inner optimizer, the wrapper runs :meth:`AfterStep.run_all` after the inner step.

Which form runs where was measured (``benchmarks/bench_template.py``, ``bench_wrappers.py``); the
reasons are given beside each choice.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import tensorflow as tf

from optimizers import compiled, kernels
from optimizers.rule import UpdateRule, call_hook
from optimizers.tf_compat import is_plain_resource_variable

__all__ = ["AFTER_KERNEL_MAX_GROUP", "AfterStep", "StepRunner", "unless_non_finite"]

#: A wrapper's small variables of one shape and dtype take its ``after_kernel`` (uncompiled ops)
#: when they are fewer than this, else its compiled ``after_step`` in chunks. Measured with
#: ``MovingAverage(AdamW)`` on MLPs through ``train_on_batch`` (2 cores): with groups of 8
#: variables, the kernels' first step took 0.40 s against 0.82 s compiling the chunks, and their
#: steady step was as fast; with groups of 64 both were even; with groups of 300, tracing four
#: ops per variable (0.5 ms each in a large graph) cost more than compiling the chunks (11.9 s
#: against 10.3 s).
AFTER_KERNEL_MAX_GROUP = 64


def _average_kernel(op: Callable, slot: str, rate: str, var: tf.Variable, slots: dict, coefficients: dict) -> Any:
    """:math:`a \\leftarrow a - (a - \\theta)\\,r` by ``op``, the library's ``ApplyMovingAverage``."""
    return op(average=slots[slot].handle, average_rate=coefficients[rate], var=var)


class AfterStep:
    """A wrapper's ``after_step`` as a step runs it, through the wrapper's public hooks
    (``wraps``, ``slots_of``, ``step_coefficients``, ``after_step``, ``after_kernel``,
    ``after_step_as_average``, ``jit_compile``); ``steps`` caches its compiled functions."""

    def __init__(self, wrapper: Any, steps: compiled.CompiledSteps) -> None:
        self.wrapper, self.steps = wrapper, steps

    @property
    def jit_compile(self) -> bool:
        return self.wrapper.jit_compile

    def wraps(self, var: tf.Variable) -> bool:
        return self.wrapper.wraps(var)

    def slots(self, var: tf.Variable) -> dict[str, tf.Variable]:
        return self.wrapper.slots_of(var)

    def average(self, var: tf.Variable) -> tuple[str, str] | None:
        """``(slot, coefficient)`` of a moving average that a rule's fused kernel may run."""
        return self.wrapper.after_step_as_average(var)

    def coefficients(self, dtype: tf.DType, iterations: Any = None) -> dict[str, Any]:
        return self.wrapper.step_coefficients(dtype, iterations)

    def step(self, var: tf.Variable, slots: dict, coefficients: dict) -> Any:
        """The wrapper's ``after_step`` as written (what a compiled function traces)."""
        return call_hook(self.wrapper, "after_step", var, slots, coefficients)

    def kernel(self, var: tf.Variable) -> Callable | None:
        """The uncompiled ``after_step`` of ``var``: a moving average (``after_step_as_average``)
        as this library's one-pass kernel where it is available (as fast as a compiled pass,
        nothing to compile: a first step of ``MovingAverage`` on a large embedding table pays no
        XLA compilation); else the wrapper's ``after_kernel``, unless ``var`` is compiled alone:
        then one compiled pass (``MovingAverage(Adam)`` on 8 variables of 1M, 2 cores: 0.89x
        TensorFlow's two kernels)."""
        names = self.average(var)
        op = None if names is None else kernels.op(var, "ApplyMovingAverage")
        if op is not None:
            return functools.partial(_average_kernel, op, *names)
        if compiled.alone(self.wrapper, var):
            return None
        return self.wrapper.after_kernel(var)

    def run(self, var: tf.Variable, slots: dict[str, tf.Variable], coefficients: dict) -> Any:
        """``after_step`` of one variable: its kernel, if any, else compiled (one function per
        shape and dtype) with ``jit_compile``."""
        kernel = self.kernel(var)
        if kernel is not None:
            return kernel(var, slots, coefficients)
        if self.jit_compile and is_plain_resource_variable(var):
            key = ("after",) + compiled.signature(var, {})
            return self.steps.run(self.step, key, var, slots, coefficients)
        return self.step(var, slots, coefficients)

    def run_all(self, strategy: tf.distribute.Strategy, var_list: list, counted: Any, iterations: Any = None,
                update: Any = None) -> Any:
        """``after_step`` of every variable of ``var_list`` after the inner step (an inner
        optimizer not written on the template, or a template rule's hand-fused kernel, which
        passes ``iterations``: see the wrapper's ``step_coefficients``); ``counted`` (``True``
        or a boolean tensor) says whether the inner step counted the step. Without a strategy,
        the small variables of a shape and dtype run their kernel if they are fewer than
        :data:`AFTER_KERNEL_MAX_GROUP`, else compiled steps in chunks (see
        ``optimizers/compiled.py``). Returns them grouped with ``update`` (eagerly: ``update``)."""
        by_dtype = {dtype: self.coefficients(dtype, iterations) for dtype in {v.dtype.base_dtype for v in var_list}}
        groups: dict = {}
        direct: list = []
        if not tf.distribute.has_strategy():  # no update context to enter: each step runs as it is
            for var in var_list:
                if self.jit_compile and compiled.batchable(var):
                    groups.setdefault((var.device,) + compiled.signature(var, {}), []).append(var)
                else:
                    direct.append(var)
            for key, group in list(groups.items()):
                if len(group) < AFTER_KERNEL_MAX_GROUP and all(self.kernel(var) for var in group):
                    direct.extend(groups.pop(key))
                else:
                    groups[key] = [(var, self.slots(var)) for var in group]
            var_list = []

        def run_direct() -> Any:
            calls = []
            for key, items in groups.items():
                with tf.device(key[0]):
                    calls.extend(self.steps.run_group(self.wrapper.after_step, ("after",) + key[1:], items,
                                                      by_dtype[key[2]]))
            for var in direct:
                with tf.device(var.device):
                    calls.append(self.run(var, self.slots(var), by_dtype[var.dtype.base_dtype]))
            return tf.group(calls)

        ops = []
        if groups or direct:
            ops.append(run_direct() if counted is True else tf.cond(counted, run_direct, tf.no_op))
        for var in var_list:
            with strategy.extended.colocate_vars_with(var):
                ops.extend(tf.nest.flatten(strategy.extended.update(
                    var, self._in_update, args=(by_dtype[var.dtype.base_dtype], counted), group=False)))
        if tf.executing_eagerly():
            return update
        return tf.group([op for op in [update] + ops if op is not None])

    def _in_update(self, var: tf.Variable, coefficients: dict, counted: Any) -> Any:
        if counted is not True:  # a tensor: the inner optimizer may have skipped the step
            return tf.cond(counted, lambda: tf.group(self._in_update(var, coefficients, True)), tf.no_op)
        return self.run(var, self.slots(var), coefficients)


class StepRunner:
    """A template optimizer's updates of one step. ``inputs_of(var, apply_state)`` gives
    ``(rule, slots, coefficients, options)`` of ``var``; ``iterations()`` the host's step counter."""

    def __init__(self, inputs_of: Callable, iterations: Callable[[], tf.Variable]) -> None:
        self.inputs_of, self.iterations = inputs_of, iterations
        self.steps = compiled.CompiledSteps()
        self.after: AfterStep | None = None  # the running wrapper's after_step

    @contextlib.contextmanager
    def running_after(self, after: AfterStep) -> Iterator[None]:
        outer, self.after = self.after, after
        try:
            yield
        finally:
            self.after = outer

    # --------------------------------------------------------- one variable
    def dense(self, grad: tf.Tensor, var: tf.Variable, apply_state: dict | None) -> Any:
        inputs = rule, var_slots, coefficients, options = self.inputs_of(var, apply_state)
        kernel, with_after = self._kernel_of(rule, var, options, apply_state)
        if kernel is not None:
            update = kernel(grad, var, var_slots, coefficients)
            return update if with_after else self._then_after(update, var, apply_state)
        if getattr(rule, "jit_compile", False) and is_plain_resource_variable(var):
            step, var_slots, coefficients, key, complete = self._compiled_inputs(var, apply_state, inputs)
            update = self.steps.run(step, ("dense",) + key, grad, var, var_slots, coefficients)
            if complete:
                return update
        else:
            update = rule.apply_dense(grad, var, var_slots, coefficients)
        return self._then_after(update, var, apply_state)

    def sparse(self, grad: tf.Tensor, var: tf.Variable, indices: tf.Tensor, apply_state: dict | None) -> Any:
        rule, var_slots, coefficients, options = self.inputs_of(var, apply_state)
        kernel, with_after = self._kernel_of(rule, var, options, apply_state, sparse=True)
        if kernel is not None:
            update = kernel(grad, var, indices, var_slots, coefficients)
            return update if with_after else self._then_after(update, var, apply_state)
        return self._then_after(rule.apply_sparse(grad, var, indices, var_slots, coefficients), var, apply_state)

    # ------------------------------------------------------------ batched
    def batched(self, grads_and_vars: list, apply_state: dict | None) -> tuple[Any, list]:
        """Without a strategy: the hand-fused kernels run here, then the running wrapper's
        ``after_step`` of their variables in its own chunks; the compiled dense updates of the
        small variables of one device run in chunks of one signature group (see
        ``optimizers/compiled.py``). Returns ``(done, rest)``: an op standing for them (``None``
        eagerly) and the pairs left to the per-variable path."""
        groups: dict = {}
        rest, calls, averaged = [], [], []
        for grad, var in grads_and_vars:
            if isinstance(grad, tf.IndexedSlices) or var.constraint is not None:
                rest.append((grad, var))
                continue
            inputs = rule, var_slots, coefficients, options = self.inputs_of(var, apply_state)
            kernel, with_after = self._kernel_of(rule, var, options, apply_state)
            if kernel is not None:
                with tf.device(var.device):
                    calls.append(kernel(grad, var, var_slots, coefficients))
                if not with_after and self.after is not None and self.after.wraps(var):
                    averaged.append(var)
                continue
            if not compiled.batchable(var) or not getattr(rule, "jit_compile", False):
                rest.append((grad, var))
                continue
            step, var_slots, coefficients, key, complete = self._compiled_inputs(var, apply_state, inputs)
            if not complete:  # a wrapper's after_step that is not compiled: the per-variable path runs it
                rest.append((grad, var))
                continue
            groups.setdefault((var.device,) + key, (step, coefficients, []))[2].append((grad, var, var_slots))
        for key, (step, coefficients, items) in groups.items():
            with tf.device(key[0]):
                calls.extend(self.steps.run_group(step, key[1:], items, coefficients))
        # One op standing for many: each op created under it gets one control input, not one per update.
        done = tf.group(calls) if not tf.executing_eagerly() else None
        if averaged:
            with tf.control_dependencies([done] if done is not None else []):
                done = self.after.run_all(tf.distribute.get_strategy(), averaged, True, self.iterations())
        return done, rest

    # ----------------------------------------------------- which form runs
    def _kernel_of(self, rule: UpdateRule, var: tf.Variable, options: dict, apply_state: dict | None,
                   sparse: bool = False) -> tuple:
        """``(kernel, with_after)``: the dense (or ``sparse``) step of ``var`` as a hand-fused kernel
        (or ``None``), and whether it runs the running wrapper's ``after_step`` too: a moving
        average (``OptimizerWrapper.after_step_as_average``) fused into the rule's kernel
        (``UpdateRule.fused_dense_kernel``, ``fused_sparse_kernel``), one pass over memory instead
        of two. A sparse step has no kernel but the fused one: a decay it cannot fuse, or none,
        runs the rule's ``update_sparse``."""
        after = self.after
        names = after.average(var) if after is not None and after.wraps(var) else None
        decayed = bool(options.get("decayed"))
        fusable = not decayed or getattr(rule, "weight_decay_placement", None) == "before"
        fused_kernel = rule.fused_sparse_kernel if sparse else rule.fused_dense_kernel
        if names is not None and fusable:
            fused = fused_kernel(var, options, decayed, True)
            if fused is not None:
                _, after_slots, after_coefficients = self._after_inputs(var, apply_state)
                slot, rate = names
                return functools.partial(fused, average=after_slots[slot], average_rate=after_coefficients[rate]), True
        if sparse:
            return (fused_kernel(var, options, decayed, False) if fusable else None), False
        return self._dense_kernel(rule, var, options), False

    @staticmethod
    def _dense_kernel(rule: UpdateRule, var: tf.Variable, options: dict) -> Any:
        """The dense step of ``var`` as ``rule``'s hand-fused kernel (``UpdateRule.dense_kernel``),
        or ``None`` for the rule's own step (compiled or not).

        Measured (``benchmarks/bench_template.py``): the kernel reads and writes each array once,
        where a compiled step writes each array in a loop of its own, and it compiles nothing.
        A decayed variable takes the rule's ``fused_dense_kernel``, the decay and the kernel
        in one pass (AdamW's: faster than both alternatives, whatever the size), where the rule
        has one here; else, if it is large enough to be compiled alone, its compiled step fuses
        the decay (faster on 8 variables of 1M than the decay's pass plus the kernel's), and a
        smaller or uncompiled variable is decayed by an op of its own, then takes the kernel
        (faster than compiled chunks on 2000 small variables, and nothing to compile). A
        wrapper's ``after_step`` then runs after the kernel, so wrapping an optimizer never
        changes its own numbers."""
        kernel = rule.dense_kernel(var, options)
        placement = getattr(rule, "weight_decay_placement", None)
        if kernel is None or not options.get("decayed") or placement == "inside":  # "inside": the kernel decays
            return kernel
        if placement != "before":
            return None
        fused = rule.fused_dense_kernel(var, options, True, False)  # one pass: faster than the compiled step too
        if fused is not None:
            return fused
        if compiled.alone(rule, var):
            return None
        return _DecayThenKernel(rule.weight_decay_policy, kernel)

    def _compiled_inputs(self, var: tf.Variable, apply_state: dict | None, inputs: tuple) -> tuple:
        """``(step, slots, coefficients, key, complete)`` of the compiled dense step of ``var``,
        given its ``inputs_of``: its rule's ``apply_dense``, fused with the running wrapper's
        ``after_step`` when that one compiles too (else ``complete`` is false: the wrapper's
        ``after_step`` is still to run)."""
        rule, var_slots, coefficients, options = inputs
        key = (id(rule),) + compiled.signature(var, options)
        after = self._after_inputs(var, apply_state)
        if after is None or not after[0].jit_compile:
            return rule.apply_dense, var_slots, coefficients, key, after is None
        after_step, after_slots, after_coefficients = after
        return (_UpdateThenAfter(rule, after_step), (var_slots, after_slots), (coefficients, after_coefficients),
                key + (id(after_step.wrapper),), True)

    def _after_inputs(self, var: tf.Variable, apply_state: dict | None) -> tuple | None:
        """``(after, slots, coefficients)`` of the running wrapper's ``after_step`` of ``var``, or ``None``."""
        after = self.after
        if after is None or not after.wraps(var):
            return None
        device, dtype = var.device, var.dtype.base_dtype
        coefficients = (apply_state or {}).get((device, dtype, "after"))
        if coefficients is None:
            with tf.device(device):
                coefficients = after.coefficients(dtype, self.iterations())
            if apply_state is not None:
                apply_state[(device, dtype, "after")] = coefficients
        return after, after.slots(var), coefficients

    def _then_after(self, update: Any, var: tf.Variable, apply_state: dict | None) -> Any:
        """``update``, then the running wrapper's ``after_step`` of ``var``, if any."""
        after = self._after_inputs(var, apply_state)
        if after is None:
            return update
        after_step, after_slots, coefficients = after
        with tf.control_dependencies([update]):
            return after_step.run(var, after_slots, coefficients)


def unless_non_finite(finite: Any, skipped: tf.Variable, apply: Callable[[], Any]) -> Any:
    """``apply()`` if ``finite`` (every gradient of the step is finite, on every replica: one
    skips, all skip), else ``skipped`` counts one more skipped step and nothing else changes."""

    def run() -> tf.Tensor:
        with tf.control_dependencies([apply()]):
            return tf.constant(True)

    def skip() -> tf.Tensor:
        with tf.control_dependencies([skipped.assign_add(1)]):
            return tf.constant(False)

    if tf.executing_eagerly():
        return run() if bool(finite) else skip()
    # An op, as OptimizerV2's step returns in a graph (a LossScaleOptimizer's cond pairs it with its own).
    return tf.group(tf.cond(finite, run, skip))


class _UpdateThenAfter:
    """A rule's ``apply_dense``, then a wrapper's ``after_step`` of the same variable: one
    compiled function (``slots`` and ``coefficients`` are pairs: the rule's, the wrapper's)."""

    def __init__(self, rule: UpdateRule, after: AfterStep) -> None:
        self.rule, self.after = rule, after

    def __call__(self, grad: tf.Tensor, var: tf.Variable, slots: tuple, coefficients: tuple) -> Any:
        update = self.rule.apply_dense(grad, var, slots[0], coefficients[0])
        with tf.control_dependencies([update]):
            return self.after.step(var, slots[1], coefficients[1])


class _DecayThenKernel:
    """Decoupled weight decay, then a rule's hand-fused dense kernel: TensorFlow Addons' order."""

    def __init__(self, weight_decay: Any, kernel: Any) -> None:
        self.weight_decay, self.kernel = weight_decay, kernel

    def __call__(self, grad: tf.Tensor, var: tf.Variable, slots: dict, coefficients: dict) -> Any:
        with tf.control_dependencies([self.weight_decay.decay_dense(var, coefficients)]):
            return self.kernel(grad, var, slots, coefficients)
