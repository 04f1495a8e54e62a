"""``UpdateRule``: what happens to one variable in one step.

One protocol for every rule: an optimizer written on the template
(:class:`~optimizers.CustomOptimizerV2`) and a variable updater
(:class:`~optimizers.VariableUpdater`) are both rules, so any template
optimizer can also be used as the updater of chosen variables.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from optimizers import kernels
from optimizers.hyperparameters import Hyperparameters
from optimizers.slots import SlotSpec, StateSpec

__all__ = ["UpdateRule", "REDUCTIONS", "KERNEL_DTYPES", "call_hook", "kernel_if_unchanged", "library_kernel",
           "sum_of_squares"]

#: How a rule's gradients are combined across replicas.
REDUCTIONS = ("sum", "mean", "max", "none")

#: The dtypes TensorFlow's fused optimizer kernels (``tf.raw_ops.ResourceApply*``) take on every device.
KERNEL_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)


def call_hook(rule: Any, hook: str, *args: Any) -> Any:
    """``rule.<hook>(*args)``, a step hook whose last two arguments are ``slots`` and
    ``coefficients`` (``update_dense``, ``update_sparse``, ``after_step``). A hook that returns
    nothing gets a no-op (its assignments run anyway, in order: eagerly, and by ``tf.function``'s
    automatic control dependencies); a ``KeyError`` for a name that is neither a slot nor a
    coefficient says which ones there are."""
    slots, coefficients = args[-2], args[-1]
    try:
        update = getattr(rule, hook)(*args)
    except KeyError as error:
        key = error.args[0] if len(error.args) == 1 else None
        if isinstance(key, str) and key not in slots and key not in coefficients:
            raise KeyError(f"{type(rule).__name__}.{hook} read {key!r}, which is neither a slot (this variable's: "
                           f"{sorted(slots)}, declared by slot_specs(var)) nor a coefficient ({sorted(coefficients)}: "
                           f"the hyperparameters, 'step', prepare's values and variable_options). Received: "
                           f"{key!r}") from error
        raise
    return tf.no_op() if update is None else update


def kernel_if_unchanged(rule: Any, owner: type, hooks: Sequence[str], var: tf.Variable,
                        kernel: Callable) -> Callable | None:
    """``kernel`` (``owner``'s uncompiled step of ``var``: ``UpdateRule.dense_kernel``,
    ``OptimizerWrapper.after_kernel``, or what stands for it: ``after_step_as_average``'s names) if ``rule``'s class still has ``owner``'s ``hooks`` (a
    subclass that changes the step must not inherit the kernel) and ``var``'s dtype is one of
    :data:`KERNEL_DTYPES`; else ``None``."""
    unchanged = all(getattr(type(rule), hook) is getattr(owner, hook) for hook in hooks)
    return kernel if unchanged and var.dtype.base_dtype in KERNEL_DTYPES else None


def library_kernel(rule: Any, owner: type, hooks: Sequence[str], var: tf.Variable, name: str,
                   step: Callable) -> Callable | None:
    """``step`` with this library's op ``name`` (``optimizers.kernels.op``) as its first argument, as
    ``rule``'s dense kernel of ``var`` (see :func:`kernel_if_unchanged`); ``None`` where the op is
    not available for ``var`` or ``rule``'s class changed ``owner``'s ``hooks``."""
    op = kernels.op(var, name)
    return None if op is None else kernel_if_unchanged(rule, owner, hooks, var, functools.partial(step, op))


def sum_of_squares(x: tf.Tensor, compiled: bool = True) -> tf.Tensor:
    """The sum of the squares of all entries of ``x`` (a squared L2 norm).

    ``compiled=True`` (for a rule compiled with XLA: pass its ``jit_compile``) computes it as
    one dot product: under XLA on CPU, ``tf.reduce_sum(tf.square(x))`` writes ``x * x`` out
    in full before reducing it (measured in the compiled HLO), two more passes over memory
    than the dot product, which reads ``x`` once; half-precision values are then summed in
    float32. ``compiled=False`` is ``tf.reduce_sum(tf.square(x))``, the plain-ops form (the
    bits of TensorFlow Addons' rules).
    """
    if not compiled:
        return tf.reduce_sum(tf.square(x))
    dtype = x.dtype
    flat = tf.reshape(x, [-1])
    if dtype in (tf.float16, tf.bfloat16):
        flat = tf.cast(flat, tf.float32)
    return tf.cast(tf.tensordot(flat, flat, 1), dtype)


class UpdateRule(Hyperparameters):
    """The hooks of a per-variable update rule.

    ``slot_specs(self, var) -> Sequence[SlotSpec | str]``
        The slots ``var`` gets (names, or :class:`~slots.SlotSpec` values whose
        initializer may read ``var``). May depend on the variable's shape or
        value. Defaults to none.
    ``variable_options(self, var) -> Mapping[str, Hashable]``
        Optional. Per-variable Python facts the rule branches on (for example
        "is this variable excluded from layer adaptation"): they are added to
        the ``coefficients`` the update hooks receive. Compiled steps are shared
        by variables of one shape and dtype, so the update hooks must read such
        facts from ``coefficients``, never from ``var``'s name or attributes.
    ``prepare(self, dtype, coefficients) -> None``
        Optional. Runs once per (device, dtype) per step. ``coefficients``
        already holds every hyperparameter as a ``dtype`` tensor (schedules
        evaluated at the step) and ``"step"``, the 1-based step number; add
        derived values to it.
    ``update_dense(self, grad, var, slots, coefficients) -> op``
        Required. ``slots`` maps slot names to this variable's slots.
    ``update_sparse(self, grad, var, indices, slots, coefficients) -> op``
        Optional. ``grad`` holds the rows ``indices``, which are unique
        (repeated indices were summed). The default scatters the rows into a
        dense gradient and calls ``update_dense``.

    ``dense_kernel(self, var, options) -> Callable | None``
        Optional. This rule's dense step of ``var`` (given its
        ``variable_options``) as TensorFlow ops run as they are, outside the
        template's compiled step (a hand-fused kernel, plain ops measured faster
        than the compiled step, or pieces of both), computing exactly what
        ``update_dense`` does, called as
        ``kernel(grad, var, slots, coefficients)``; ``None`` (the default) when
        there is none. The template runs it instead of ``update_dense`` (after
        the weight decay, if any, unless the rule's ``weight_decay_placement``
        is ``"inside"``, and before a wrapper's ``after_step``), except
        for a decayed variable compiled alone, whose compiled step fuses the
        decay into its pass: one kernel that reads and writes each array once,
        where an XLA step on CPU writes each array in a loop of its own, and
        nothing to compile.
    ``fused_dense_kernel``, ``fused_sparse_kernel``
        Optional. The dense or sparse step with the weight decay before it
        and a wrapper's moving average after it, as one kernel (Adam's).

    ``state_specs(self) -> Sequence[StateSpec | str]``
        Optional. The rule's optimizer-wide state: values kept once per
        optimizer, not per variable (a running sum over the steps), created
        with the slots and saved with them. Defaults to none.
    ``next_state(self, state, coefficients) -> Mapping[str, tf.Tensor]``
        Optional. The state after this step, from ``state`` (its values before
        the step) and the step's ``coefficients`` (hyperparameters and
        ``"step"``, in the state's widest dtype); names it leaves out keep their value. Runs once per step,
        before any variable moves; ``prepare`` and the update hooks read its
        values as ``coefficients[name]`` (in the state's own dtype), and the
        optimizer stores them when the step's updates are done. It sees only
        values every replica shares, so the state is the same on every replica.
    ``evaluation_point(self, var, slots, coefficients) -> tf.Tensor | None``
        Optional. Where ``var`` is evaluated, when that is not where it trains
        (schedule-free's :math:`x`, where the gradients are taken at
        :math:`y`); ``None`` (the default) for a rule that evaluates where it
        trains. With :meth:`training_point`, its inverse, it gives the
        optimizer ``swap_weights()`` and the averaging callbacks.

    ``reduction`` (class attribute) says how the gradient is combined across
    replicas: ``"sum"`` (Keras 2's default), ``"mean"``, ``"max"``, or
    ``"none"`` when the gradient is not used. ``gradient_is_value`` (class
    attribute, default ``False``) marks a rule whose "gradient" is a value to
    take rather than a gradient: mixed precision's loss scaling leaves it alone.
    ``whole_variable`` (class attribute, default ``False``) marks a rule that reads
    statistics of the whole variable (a norm, factored moments): it refuses a shard
    of a ``ShardedVariable``, whose statistics would be the shard's alone.
    """

    reduction: str = "sum"
    #: The "gradient" is a value to take (an overwrite statistic), not a gradient:
    #: a ``LossScaleOptimizer`` leaves it unscaled.
    gradient_is_value: bool = False
    #: The rule reads statistics of the whole variable: a shard of a sharded variable is refused.
    whole_variable: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if len(inspect.signature(cls.slot_specs).parameters) < 2:
            raise TypeError(f"{cls.__name__}.slot_specs must take the variable: def slot_specs(self, var). "
                            f"Received: slot_specs{inspect.signature(cls.slot_specs)}")

    def slot_specs(self, var: tf.Variable) -> Sequence[SlotSpec | str]:
        """The slots ``var`` gets under this rule. Defaults to none."""
        return ()

    def variable_options(self, var: tf.Variable) -> Mapping[str, Hashable]:
        """Per-variable Python facts added to ``coefficients``. Defaults to none."""
        return {}

    def prepare(self, dtype: tf.DType, coefficients: dict[str, Any]) -> None:
        """Add derived per-step coefficients for variables of ``dtype``. Optional."""

    def update_dense(self, grad: tf.Tensor, var: tf.Variable, slots: dict[str, tf.Variable],
                     coefficients: dict[str, Any]) -> Any:
        """Apply the rule for a dense gradient and return the update."""
        raise NotImplementedError(f"{type(self).__name__} must implement "
                                  "update_dense(grad, var, slots, coefficients)")

    def update_sparse(self, grad: tf.Tensor, var: tf.Variable, indices: tf.Tensor,
                      slots: dict[str, tf.Variable], coefficients: dict[str, Any]) -> Any:
        """Apply the rule to rows ``indices`` (unique). Defaults to the dense
        rule on the gradient scattered into zeros; override for speed."""
        dense = tf.scatter_nd(tf.expand_dims(indices, -1), grad, tf.shape(var, out_type=indices.dtype))
        return self.update_dense(dense, var, slots, coefficients)

    def dense_kernel(self, var: tf.Variable, options: Mapping[str, Hashable]) -> Callable | None:
        """This rule's dense step of ``var`` as ops run outside the template's compiled step (a fused
        kernel). Defaults to none."""
        return None

    def fused_dense_kernel(self, var: tf.Variable, options: Mapping[str, Hashable], decay: bool,
                           average: bool) -> Callable | None:
        """:meth:`dense_kernel` with what runs beside it in one pass over memory: when ``decay``,
        the decoupled weight decay before it (``weight_decay_placement = "before"``; its factor is
        ``coefficients["weight_decay_factor"]``), and when ``average``, a moving average of the
        variable after it, :math:`a \\leftarrow a - (a - \\theta)\\,r`. Called as
        ``kernel(grad, var, slots, coefficients)``, with ``average`` (the slot :math:`a`) and
        ``average_rate`` (:math:`r`) as keyword arguments when ``average``. Defaults to none: the
        template then runs them as ops of their own, around :meth:`dense_kernel`."""
        return None

    def fused_sparse_kernel(self, var: tf.Variable, options: Mapping[str, Hashable], decay: bool,
                            average: bool) -> Callable | None:
        """The sparse step of ``var`` as one kernel, with the decay (of the touched rows) and the
        average as in :meth:`fused_dense_kernel`: called as ``kernel(grad, var, indices, slots,
        coefficients)`` (``indices`` unique), plus ``average`` and ``average_rate``. Defaults to
        none: the template runs :meth:`update_sparse` and the decay and average ops around it."""
        return None

    def state_specs(self) -> Sequence[StateSpec | str]:
        """The rule's optimizer-wide state. Defaults to none."""
        return ()

    def next_state(self, state: dict[str, tf.Tensor], coefficients: dict[str, Any]) -> Mapping[str, Any]:
        """The optimizer-wide state after this step. Defaults to no change."""
        return {}

    def evaluation_point(self, var: tf.Variable, slots: dict[str, tf.Variable],
                         coefficients: dict[str, Any]) -> tf.Tensor | None:
        """Where ``var`` is evaluated, if not at its value. Defaults to ``None``."""
        return None

    def training_point(self, evaluation: tf.Tensor, slots: dict[str, tf.Variable],
                       coefficients: dict[str, Any]) -> tf.Tensor:
        """The training value of a variable from its :meth:`evaluation_point`: the inverse, used
        when ``swap_weights()`` swaps back."""
        raise NotImplementedError(f"{type(self).__name__} has an evaluation_point and must implement "
                                  "training_point(evaluation, slots, coefficients)")

    @property
    def has_evaluation_point(self) -> bool:
        """Whether the rule evaluates its variables elsewhere than where it trains them."""
        return type(self).evaluation_point is not UpdateRule.evaluation_point

    @property
    def rule_name(self) -> str:
        """Prefix (``"<rule_name>/"``) of this rule's slots when it is a variable's updater."""
        return type(self).__name__

    # ----------------------------------------------- called by the host optimizer
    def step_coefficients(self, dtype: tf.DType, iterations: Any,
                          state: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Every hyperparameter as a ``dtype`` tensor, ``"step"``, the optimizer-wide ``state`` (its
        values after this step: :meth:`state_after_step`), then :meth:`prepare`'s values."""
        coefficients = self._base_coefficients(dtype, iterations)
        coefficients.update(state or {})
        self.prepare(dtype, coefficients)
        return coefficients

    def state_after_step(self, state: Mapping[str, Any], iterations: Any) -> dict[str, tf.Tensor]:
        """:meth:`next_state` of ``state`` (the values before the step), every name included, in
        the state's dtypes."""
        dtype = tf.float64 if any(value.dtype == tf.float64 for value in state.values()) else tf.float32
        new = self.next_state(dict(state), self._base_coefficients(dtype, iterations))
        unknown = sorted(set(new) - set(state))
        if unknown:
            raise KeyError(f"{type(self).__name__}.next_state returned {unknown}, which state_specs() does not "
                           f"declare (its state: {sorted(state)}). Received: {unknown}")
        return {name: tf.cast(new.get(name, value), value.dtype) for name, value in state.items()}

    def _base_coefficients(self, dtype: tf.DType, iterations: Any) -> dict[str, Any]:
        coefficients = {name: tf.identity(self.hyperparameter(name, dtype, iterations))
                        for name in self.hyperparameter_names}
        coefficients["step"] = tf.cast(iterations + 1, dtype)
        return coefficients

    def options_for(self, var: tf.Variable) -> dict[str, Any]:
        """:meth:`variable_options` of ``var``, plus the template's own (``"decayed"``)."""
        return dict(self.variable_options(var))

    def apply_dense(self, grad: tf.Tensor, var: tf.Variable, slots: dict, coefficients: dict) -> Any:
        """The whole dense step of this rule for one variable (the template adds weight decay)."""
        return call_hook(self, "update_dense", grad, var, slots, coefficients)

    def apply_sparse(self, grad: tf.Tensor, var: tf.Variable, indices: tf.Tensor, slots: dict,
                     coefficients: dict) -> Any:
        """The whole sparse step of this rule for one variable."""
        return call_hook(self, "update_sparse", grad, var, indices, slots, coefficients)
