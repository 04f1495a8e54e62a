r"""``GradientAccumulation``: one optimizer step per ``accumulation_steps`` micro-batches.

Keras 3 has this as the ``gradient_accumulation_steps`` argument of every
optimizer; this wrapper gives it to any Keras 2 optimizer. The inner optimizer
takes its step inside ``tf.cond`` in cross-replica context, the pattern
Keras 2's ``LossScaleOptimizer`` uses to skip steps: a branch in replica context
cannot hold the inner step's synchronization.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import tensorflow as tf

from optimizers import compiled
from optimizers.base import after_checks, all_finite, check_grads_and_vars, index_checks
from optimizers.hyperparameters import check_integer
from optimizers.keras_compat import (
    create_hypers,
    hyper_dict,
    set_hyper,
)
from optimizers.tf_compat import (
    aggregates_in_apply_only,
    is_plain_resource_variable,
    maybe_merge_call,
    optimizer_chain,
    variable_key,
)
from optimizers.wrappers.base import OptimizerWrapper

__all__ = ["GradientAccumulation"]

_SLOT = "gradient_accumulator"  # Keras 3's name
_COUNT = "accumulated_steps"  # micro-batch gradients held by the accumulators (0 .. N-1 between calls)


class _Held:
    """Values a replica function must receive as they are (not split per replica)."""

    def __init__(self, variables: list, name: Any, kwargs: dict) -> None:
        self.variables, self.name, self.kwargs = variables, name, kwargs


_check_steps = functools.partial(check_integer, "accumulation_steps", low=1)


def _hyperparameter_checks(optimizer: Any) -> list:
    """The run-time hyperparameter checks of ``optimizer`` and the optimizers it wraps: a value
    the inner step would refuse is refused before the accumulators change."""
    return [check for each in optimizer_chain(optimizer) if hasattr(each, "checked_hyperparameters")
            for check in each.checked_hyperparameters(each.iterations)]


def _accumulate(acc: tf.Variable, grad: Any, first: tf.Tensor, reduction: str) -> Any:
    """``acc`` becomes ``grad`` on a window's first micro-step, else combines with it."""
    if isinstance(grad, tf.IndexedSlices):  # repeated rows are summed by scatter_add
        with tf.control_dependencies([grad.indices]):  # after the step's checks, as the gradient is
            reset = tf.cond(first, lambda: acc.assign(tf.zeros_like(acc), read_value=False), tf.no_op)
        with tf.control_dependencies([reset]):
            return acc.scatter_add(grad)
    combined = tf.maximum(acc, grad) if reduction == "max" else acc + grad
    return acc.assign(tf.where(first, grad, combined), read_value=False)


class GradientAccumulation(OptimizerWrapper):
    r"""Accumulate the gradients of :math:`N` calls, then take one step with their mean.

    Call :math:`k` (1-based) adds its gradients :math:`g_k` to a per-variable
    accumulator (slot ``"gradient_accumulator"``); every :math:`N`-th call the
    inner optimizer takes one step with

    .. math::

        \bar g = \frac{1}{N} \sum_{k=1}^{N} g_k

    and the accumulators start again. For a loss that is a mean over the batch,
    :math:`N` micro-batches of size :math:`B` take the step of one batch of
    :math:`NB`. ``iterations`` (shared with the inner optimizer, and read by
    its learning-rate schedules) counts the steps taken, not the calls;
    ``accumulated_steps`` (a checkpointed variable) counts the calls of the
    current window. Gradients are combined across replicas at every call.

    When the optimizer it wraps (at any depth of wrapping) has
    ``skip_non_finite=True``, a call whose gradients are not all finite is
    skipped: the accumulators, ``accumulated_steps``, the weights, the slots
    and ``iterations`` stay as they were, and that optimizer's
    ``skipped_steps`` counts the call, one per skipped call, as it counts a
    skipped step. The window goes on with the next calls, so its good
    micro-batches are kept.

    Variables with a variable updater combine their micro-batch values the way
    the updater combines replicas: ``OverwriteWithGradient()`` takes their
    mean, ``OverwriteWithGradient("max")`` their maximum (Keras 3 takes the
    maximum of the values and zero), ``Frozen`` variables are skipped. Sparse
    gradients are summed into the dense accumulator (repeated rows added), so
    the inner optimizer receives a dense mean. Every call must give gradients
    for the same variables (as ``model.fit`` does). Put this wrapper outermost
    (``GradientAccumulation(MovingAverage(...))``): another wrapper around it
    would act at every call. A ``LossScaleOptimizer`` around it skips calls
    with non-finite gradients and counts them in ``iterations``, as it counts
    skipped steps.

    Args:
        optimizer: A Keras 2 optimizer (built-in, template-made, a wrapper or a
            ``LossScaleOptimizer``) or a name such as ``"adam"``.
        accumulation_steps: :math:`N`, an integer >= 1.
        name: Defaults to ``"GradientAccumulation"``.
        **kwargs: ``clipnorm``, ``clipvalue``, ``global_clipnorm`` (set on the
            inner optimizer: they clip :math:`\bar g`) and ``jit_compile``
            (compile each accumulation with XLA; default ``True``).

    Example:

    >>> import tensorflow as tf
    >>> import optimizers
    >>> var = tf.Variable([0.0])
    >>> opt = GradientAccumulation(optimizers.SGD(1.0), accumulation_steps=2)
    >>> for grad in (1.0, 3.0):
    ...     _ = opt.apply_gradients([(tf.constant([grad]), var)])
    >>> var.numpy().tolist(), int(opt.iterations)  # one step, with the mean gradient 2
    ([-2.0], 1)
    """

    def __init__(self, optimizer: Any, accumulation_steps: int, name: str = "GradientAccumulation",
                 **kwargs: Any) -> None:
        _check_steps(accumulation_steps)
        super().__init__(optimizer, name, **kwargs)
        self.add_option("accumulation_steps", int(accumulation_steps), _check_steps)
        set_hyper(self, _COUNT, 0.0)  # a float32 variable, saved in every format like a hyperparameter

    @property
    def accumulated_steps(self) -> tf.Variable:
        """The number of calls whose gradients the accumulators hold."""
        create_hypers(self)
        return hyper_dict(self)[_COUNT]

    @property
    def weights(self) -> list[tf.Variable]:
        """``iterations``, ``accumulated_steps``, then the other weights (``.h5`` files keep them all)."""
        weights = super().weights
        count = hyper_dict(self).get(_COUNT)
        return weights[:1] + ([count] if isinstance(count, tf.Variable) else []) + weights[1:]

    def wraps(self, var: tf.Variable) -> bool:
        rule = self.updater_for(var)
        return rule is None or rule.reduction != "none"

    def slot_specs(self, var: tf.Variable) -> list[str]:
        return [_SLOT]

    def _create_all_weights(self, var_list: Iterable[tf.Variable]) -> None:
        create_hypers(self)  # before the slots: a SavedModel's restored slots hand it over
        super()._create_all_weights(var_list)

    @tf.autograph.experimental.do_not_convert  # plain Python: no per-variable conversion cost
    def apply_gradients(self, grads_and_vars: Iterable, name: str | None = None,
                        experimental_aggregate_gradients: bool = True, **kwargs: Any) -> Any:
        """Accumulate these gradients; every ``accumulation_steps``-th call, apply their mean.
        ``**kwargs`` (such as ``decay_var_list``) go to the inner optimizer's step."""
        if tf.distribute.has_strategy() and tf.distribute.in_cross_replica_context():  # as Keras 2 refuses
            raise RuntimeError("GradientAccumulation.apply_gradients() cannot be called in cross-replica context: "
                               "call it inside `strategy.run` (as model.fit does). Received: strategy="
                               f"{type(tf.distribute.get_strategy()).__name__}, in cross-replica context")
        grads_and_vars = check_grads_and_vars(grads_and_vars)
        pairs = [(g, v) for g, v in grads_and_vars if g is not None and self.wraps(v)]
        if not pairs:
            raise ValueError(f"No gradients provided for any variable. Received: grads_and_vars={grads_and_vars!r}")
        for grad, var in pairs:  # before anything is created or changed
            reduction = self._reduction(var)
            if isinstance(grad, tf.IndexedSlices) and reduction != "sum":
                raise ValueError(f"GradientAccumulation cannot combine sparse gradients by {reduction!r}: variable "
                                 f"{var.name!r} has an updater with reduction={reduction!r} (pass it dense "
                                 f"gradients). Received: grad={grad!r}")
        keys = frozenset(variable_key(v) for _, v in pairs)
        if self.__dict__.setdefault("_accumulated_keys", keys) != keys:  # an accumulator would miss a call
            raise ValueError("GradientAccumulation needs gradients for the same variables at every call (as "
                             f"model.fit gives). Received gradients for {sorted(v.name for _, v in pairs)}")
        self.create_weights([v for _, v in pairs])
        # Before the accumulators change (eagerly: raised here).
        checks = index_checks(pairs) + _hyperparameter_checks(self._optimizer)
        with tf.control_dependencies(checks if not tf.executing_eagerly() else []):
            if experimental_aggregate_gradients:
                pairs = self.combine_across_replicas(pairs)
            if not tf.executing_eagerly():
                pairs = after_checks(pairs, checks)
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        return maybe_merge_call(self._accumulate_and_step, tf.distribute.get_strategy(), pairs, name, kwargs)

    def _reduction(self, var: tf.Variable) -> str:
        rule = self.updater_for(var)
        return "sum" if rule is None else rule.reduction

    def _accumulate_and_step(self, strategy: tf.distribute.Strategy, pairs: list, name: Any, kwargs: dict) -> Any:
        """In cross-replica context (where a branch may hold the inner step's synchronization). With an
        inner optimizer that skips non-finite steps, a call whose gradients are not all finite is skipped
        and counted in its ``skipped_steps``."""
        if not getattr(self._optimizer, "skip_non_finite", False):  # at any depth, through the wrappers
            return self._accumulate_then_step(strategy, pairs, name, kwargs)

        def proceed() -> tf.Tensor:
            with tf.control_dependencies([self._accumulate_then_step(strategy, pairs, name, kwargs)]):
                return tf.constant(True)

        def skip() -> tf.Tensor:
            with tf.control_dependencies([self._optimizer.skipped_steps.assign_add(1, read_value=False)]):
                return tf.constant(False)

        return tf.group(tf.cond(all_finite(strategy, pairs), proceed, skip))

    def _accumulate_then_step(self, strategy: tf.distribute.Strategy, pairs: list, name: Any, kwargs: dict) -> Any:
        """Add the gradients to the accumulators; at a window's end, the inner step."""
        held = _Held([v for _, v in pairs], name, kwargs)
        count = self.accumulated_steps.read_value()
        first, step_now = tf.equal(count, 0.0), count + 1.0 >= self.accumulation_steps
        ops = []
        for grad, var in pairs:
            ops.extend(tf.nest.flatten(strategy.extended.update(
                self.get_slot(var, _SLOT), self._accumulate_fn, args=(grad, first, self._reduction(var)),
                group=False)))

        def step() -> tf.Tensor:
            if tf.distribute.in_cross_replica_context():
                update = strategy.extended.call_for_each_replica(self._inner_step, args=(held,))
            else:
                update = self._inner_step(held)
            with tf.control_dependencies([u for u in tf.nest.flatten(update) if u is not None]):
                return tf.constant(True)

        with tf.control_dependencies([op for op in ops if op is not None]):
            stepped = tf.cond(step_now, step, lambda: tf.constant(False))
        with tf.control_dependencies([stepped]):
            return self.accumulated_steps.assign(tf.where(step_now, 0.0, count + 1.0), read_value=False)

    def _accumulate_fn(self, acc: tf.Variable, grad: Any, first: tf.Tensor, reduction: str) -> Any:
        if self.jit_compile and is_plain_resource_variable(acc) and not isinstance(grad, tf.IndexedSlices):
            key = ("accumulate", reduction) + compiled.signature(acc, {})
            return self._compiled.run(lambda a, g, f: _accumulate(a, g, f, reduction), key, acc, grad, first)
        return _accumulate(acc, grad, first, reduction)

    def _inner_step(self, held: _Held) -> Any:
        """The inner optimizer's step with the combined gradients (in replica context)."""
        pairs = []
        for var in held.variables:
            combined = tf.convert_to_tensor(self.get_slot(var, _SLOT))
            pairs.append((combined if self._reduction(var) == "max" else combined / self.accumulation_steps, var))
        # The gradients are combined already. Keras 2 refuses to be told so under ParameterServerStrategy
        # (and CentralStorageStrategy); with one replica per step there, its own combination changes nothing.
        aggregate = aggregates_in_apply_only(tf.distribute.get_strategy())
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        if aggregate and replicas > 1:
            raise NotImplementedError(
                f"GradientAccumulation cannot run under {type(tf.distribute.get_strategy()).__name__} with more "
                f"than one replica per step: Keras 2 would combine the accumulated gradients again. "
                f"Received: num_replicas_in_sync={replicas}")
        return self._optimizer.apply_gradients(pairs, held.name, experimental_aggregate_gradients=aggregate,
                                               **held.kwargs)
