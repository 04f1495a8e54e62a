"""``AveragingWrapper``: the base of wrappers that keep an average of each weight."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import tensorflow as tf

from optimizers import saving
from optimizers.optimizer_state import update_on_every_replica
from optimizers.slots import SlotSpec
from optimizers.wrappers.base import OptimizerWrapper

__all__ = ["AveragingWrapper"]


#: The error of ``swap_weights()`` before any average exists.
NO_AVERAGES = ("swap_weights() needs averages, which are created by the first training step, or by "
               "shadow_copy(model.trainable_weights): equal to the weights, or after loading a model, "
               "to the averages it saved. Received: an optimizer with no averages yet.")


def swap_values(var: tf.Variable, average: tf.Variable) -> Any:
    """Exchange the values of ``var`` and ``average``, through a copy (bit-exact)."""
    saved = tf.identity(var)  # a snapshot: the assignment below does not change it
    with tf.control_dependencies([saved]):
        assigned = var.assign(average, read_value=False)
    with tf.control_dependencies([assigned]):
        return average.assign(saved, read_value=False)


def assign_average(var: tf.Variable, average: tf.Variable) -> Any:
    return var.assign(average, read_value=False)


class AveragingWrapper(OptimizerWrapper):
    """Base of wrappers that keep an ``"average"`` slot per weight (moving
    average, stochastic weight averaging) and can give the model its averages.

    A subclass writes :meth:`average_step` (and, if it needs per-step values,
    ``prepare``). Each average starts at its weight's value before the first
    step. Swaps work with or without a ``tf.distribute`` strategy and go
    through a copy, so two swaps restore both sets of values bit for bit.
    """

    def slot_specs(self, var: tf.Variable) -> list[SlotSpec]:
        return [SlotSpec("average", initializer=lambda shape, dtype: tf.identity(var))]

    def average_step(self, average: tf.Variable, var: tf.Variable, coefficients: dict[str, Any]) -> Any:
        """Update ``average`` from ``var`` after the inner step. Override."""
        raise NotImplementedError(f"{type(self).__name__} must implement average_step(average, var, coefficients)")

    def after_step(self, var: tf.Variable, slots: dict[str, tf.Variable], coefficients: dict[str, Any]) -> Any:
        return self.average_step(slots["average"], var, coefficients)

    def average_of(self, var: tf.Variable) -> tf.Variable | None:
        """The average of ``var``, or ``None`` if it has none (yet). An average that a loaded
        model or checkpoint holds is created from it now (else it waits for the first step)."""
        try:
            return self.get_slot(var, "average")
        except KeyError:
            if not saving.has_loaded_slot(self, var, "average"):
                return None
        self.shadow_copy([var])
        return self.get_slot(var, "average")

    @property
    def has_shadow_copy(self) -> bool:
        """Whether averages exist (after a step, :meth:`shadow_copy` or a restore)."""
        return bool(self.wrapped_variables())

    def shadow_copy(self, model_weights: Iterable[tf.Variable]) -> None:
        """Create the averages of ``model_weights`` now, equal to their values (an average that a
        loaded model or checkpoint holds: to its saved value)."""
        with tf.init_scope():
            self._create_slots(list(model_weights))

    def _for_each_average(self, var_list: list, fn: Any) -> Any:
        """Run ``fn(var, average)`` on every replica's copy, from any context."""
        pairs = [(v, self.average_of(v)) for v in var_list]
        return update_on_every_replica((var, fn, (average,)) for var, average in pairs if average is not None)

    def assign_average_vars(self, var_list: Iterable[tf.Variable]) -> Any:
        """Set each variable of ``var_list`` to its average (variables without
        one, such as non-trainable or updater-owned ones, are left as they are)."""
        return self._for_each_average(list(var_list), assign_average)

    def swap_weights(self) -> None:
        """Exchange the averaged weights and the trained ones; twice restores
        both exactly. Works with or without a ``tf.distribute`` strategy."""
        variables = self.wrapped_variables()
        if not variables:
            raise ValueError(NO_AVERAGES)
        self._for_each_average(variables, swap_values)
