"""The state an OptimizerV2 keeps beside its slots: the rule's optimizer-wide state
(:class:`~optimizers.StateSpec`) as weights, saved in every Keras 2 format; the rule's
evaluation point (a weight swap, :class:`~optimizers.optimizer_state.EvaluationPoint`); and
the count of steps skipped for non-finite gradients.

The template (:class:`~optimizers.CustomOptimizerV2`) keeps them here; what the state holds
and how a step changes it are :class:`~optimizers.optimizer_state.RuleState`'s.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import tensorflow as tf

from optimizers import saving
from optimizers.keras_compat import own_weights
from optimizers.optimizer_state import EvaluationPoint, RuleState
from optimizers.slots import StateSpec, as_slot_specs

__all__ = ["OptimizerV2State"]


class OptimizerV2State(EvaluationPoint):
    """A mixin of :class:`~optimizers.CustomOptimizerV2` (which sets ``skip_non_finite``)."""

    _skipped: tf.Variable | None = None

    @functools.cached_property
    def rule_state(self) -> RuleState:
        """The rule's optimizer-wide state (``state_specs``), its variables made at the first step."""
        return RuleState(self)

    def evaluated_variables(self) -> list[tf.Variable]:
        return [var for var in self.rule_state.moved if self.evaluation_inputs(var) is not None]

    def evaluation_inputs(self, var: tf.Variable) -> tuple | None:
        """``(rule, var, slots, coefficients)`` of ``var`` for its evaluation point; ``None`` for a variable
        this optimizer's rule has not moved."""
        if self.updater_for(var) is not None:
            return None
        try:
            slots = {spec.name: self.get_slot(var, spec.name) for spec in as_slot_specs(self.slot_specs(var))}
        except KeyError:
            return None
        coefficients = self.step_coefficients(var.dtype.base_dtype, self.iterations, self.rule_state.values())
        return self, var, slots, {**coefficients, **self.options_for(var)}

    @property
    def skipped_steps(self) -> tf.Variable:
        """The number of steps skipped for non-finite gradients (``skip_non_finite=True``); a
        constant 0 without ``skip_non_finite``, which makes no variable for it (it would be saved,
        and a checkpoint of the optimizer would hold one its restore does not expect)."""
        if self._skipped is None and not self.skip_non_finite:
            return tf.constant(0, tf.int64)
        if self._skipped is None:
            with tf.init_scope():
                self._skipped = self.add_weight("skipped_steps", shape=[], dtype=tf.int64, trainable=False,
                                                initializer="zeros",
                                                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        return self._skipped

    def _create_all_weights(self, var_list: Iterable[tf.Variable]) -> None:
        var_list = list(var_list)
        super()._create_all_weights(var_list)
        if self.skip_non_finite:
            _ = self.skipped_steps
        wide = tf.float64 if any(var.dtype.base_dtype == tf.float64 for var in var_list) else tf.float32
        self.rule_state.create(lambda spec: self._state_variable(spec, spec.dtype or wide), var_list)

    def _state_variable(self, spec: StateSpec, dtype: tf.DType) -> tf.Variable:
        loaded = saving.initial_state_value(self, spec.name)  # from a .keras file or a SavedModel
        var = self.add_weight(spec.name, shape=spec.shape, dtype=dtype, trainable=False,
                              initializer=tf.constant_initializer(spec.initial_value if loaded is None else loaded),
                              aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        own_weights(self).append(var)  # in `weights`, so .h5 files and get_weights() hold it
        return var
