"""Optimizer-wide state and evaluation points, for the optimizer of either Keras.

A rule declares its optimizer-wide state with ``state_specs()`` and moves it with
``next_state(state, coefficients)`` (see :class:`~optimizers.UpdateRule`); :class:`RuleState`
holds its variables for the optimizer that runs the rule, computes the state after a step
before the step's updates (they read it) and stores it when they are done.

A rule with an ``evaluation_point`` evaluates its variables elsewhere than where it trains them.
:class:`EvaluationPoint` gives its optimizer the averaging wrappers' methods (``average_of``,
``assign_average_vars``, ``swap_weights``), so the same callbacks evaluate and save it there.
Its state then has one more value, ``"evaluating"``: 1 while ``swap_weights()`` has put the
evaluation point in the variables, saved with the rest, and a training step is refused then.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import tensorflow as tf

from optimizers.slots import StateSpec, as_state_specs

__all__ = ["EvaluationPoint", "RuleState", "update_on_every_replica"]

#: The state value that says the variables hold the evaluation point (``swap_weights()``).
EVALUATING = "evaluating"


class RuleState:
    """The optimizer-wide state of ``rule`` (none for most rules: then every method is a no-op)."""

    def __init__(self, rule: Any) -> None:
        taken = (*rule.hyperparameter_names, *rule.reserved_names, EVALUATING)
        specs = as_state_specs(rule.state_specs(), taken)
        if rule.has_evaluation_point:
            specs += (StateSpec(EVALUATING),)
        self.rule, self.specs, self.variables = rule, specs, {}
        self._moved: dict = {}  # id -> variable (held), for an evaluation point

    def create(self, make: Callable[[StateSpec], Any], var_list: Iterable[Any] = ()) -> None:
        """Each value's variable, made by ``make(spec)`` (the optimizer's own weights), once; with an
        evaluation point, ``var_list`` (a step's variables) is remembered for ``swap_weights()``."""
        for spec in self.specs:
            if spec.name not in self.variables:
                self.variables[spec.name] = make(spec)
        if EVALUATING in self.variables:
            self._moved.update((id(var), var) for var in var_list)

    @property
    def moved(self) -> list:
        """The variables of the steps so far (with an evaluation point), in order."""
        return list(self._moved.values())

    def values(self) -> dict[str, tf.Tensor] | None:
        """The state before the step (``None`` without any), as ``step_coefficients`` takes it."""
        return {name: tf.convert_to_tensor(var) for name, var in self.variables.items()} or None

    def next_values(self, iterations: Any) -> dict[str, tf.Tensor] | None:
        """The state after the step at ``iterations`` (``None`` without any)."""
        return self.rule.state_after_step(self.values(), iterations) if self.variables else None

    def checks(self) -> list:
        """A step is refused while the variables hold the evaluation point: eagerly raised, or an
        assertion the step's updates wait for."""
        flag = self.variables.get(EVALUATING)
        if flag is None:
            return []
        message = (f"{type(self.rule).__name__}: the variables hold the evaluation point (swap_weights() was "
                   "called): call swap_weights() again before training. Received: a training step")
        if tf.executing_eagerly():
            if flag.numpy():
                raise ValueError(message)
            return []
        return [tf.debugging.assert_equal(tf.convert_to_tensor(flag), tf.zeros([], flag.dtype), message=message)]

    def updated_after(self, iterations: Any, updates: Callable[[], Any]) -> Any:
        """Run ``updates`` (the step's), then store the state after the step, computed before them."""
        if not self.variables:
            return updates()
        new = self.next_values(iterations)
        done = updates()
        with tf.control_dependencies([done] if done is not None else []):
            return tf.group([self.variables[name].assign(value, read_value=False) for name, value in new.items()])

    def set_evaluating(self, value: bool) -> None:
        self.variables[EVALUATING].assign(tf.cast(value, self.variables[EVALUATING].dtype))

    def evaluating(self) -> bool:
        flag = self.variables.get(EVALUATING)
        return flag is not None and bool(flag.numpy())


def update_on_every_replica(updates: Iterable[tuple[Any, Callable, tuple]]) -> Any:
    """Run each ``fn(var, *args)`` of ``updates`` (``(var, fn, args)``) on every replica's copy of
    ``var`` (distributed ``args`` are given as the same replica's copies), from any context."""
    updates = list(updates)

    def run(strategy: tf.distribute.Strategy) -> Any:
        ops = []
        for var, fn, args in updates:
            ops.extend(tf.nest.flatten(strategy.extended.update(var, fn, args=args, group=False)))
        return tf.group([op for op in ops if op is not None])

    if tf.distribute.in_cross_replica_context():
        return run(tf.distribute.get_strategy())
    if not tf.distribute.has_strategy() and updates and hasattr(updates[0][0], "distribute_strategy"):
        with updates[0][0].distribute_strategy.scope():  # distributed variables, called outside their scope
            return run(tf.distribute.get_strategy())
    return tf.distribute.get_replica_context().merge_call(run)


class EvaluationPoint:
    """``average_of``, ``assign_average_vars`` and ``swap_weights`` of an optimizer whose rule has
    an ``evaluation_point``: the averaging wrappers' methods, so their callbacks
    (``MovingAverageCallback``, ``AverageModelCheckpoint``, ``averaged_weights``) evaluate and
    save the model there. The optimizer gives ``rule_state`` (its :class:`RuleState`),
    ``evaluated_variables()`` (the variables its rule moves, with slots) and
    ``evaluation_inputs(var)`` (its rule, the TensorFlow variable, its slots and coefficients, or
    ``None`` before the first step)."""

    def _point(self, var: Any, to_training: bool) -> tuple[Callable, tuple] | None:
        inputs = self.evaluation_inputs(var)
        if inputs is None:
            return None
        rule, target, slots, coefficients = inputs
        names = sorted(slots)

        def move(local: Any, *local_slots: Any) -> Any:
            own = dict(zip(names, local_slots))
            value = (rule.training_point(tf.convert_to_tensor(local), own, coefficients) if to_training
                     else rule.evaluation_point(local, own, coefficients))
            return local.assign(value, read_value=False)

        return target, move, tuple(slots[name] for name in names)

    def average_of(self, var: Any) -> tf.Tensor | None:
        """The evaluation point of ``var`` (``None`` for a variable the rule does not move, or before
        the first step); while ``swap_weights()`` holds it, ``var`` itself."""
        self._check_evaluation_point("average_of")
        inputs = self.evaluation_inputs(var)
        if inputs is None:
            return None
        if self.rule_state.evaluating():
            return tf.identity(var)
        rule, target, slots, coefficients = inputs
        return tf.identity(rule.evaluation_point(target, slots, coefficients))

    def assign_average_vars(self, var_list: Iterable[Any]) -> Any:
        """Set each variable of ``var_list`` to its evaluation point (the others are left as they are)."""
        self._check_evaluation_point("assign_average_vars")
        if self.rule_state.evaluating():
            return tf.no_op()
        return self._move(list(var_list), to_training=False)

    def _check_evaluation_point(self, method: str) -> None:
        if not self.has_evaluation_point:
            raise TypeError(f"{type(self).__name__} evaluates its variables where it trains them: {method}() is for "
                            "an optimizer with an evaluation point (ScheduleFreeAdamW...) or an averaging wrapper "
                            f"(MovingAverage, SWA). Received: {method}() on {type(self).__name__}")

    def swap_weights(self) -> None:
        """Put the evaluation point in the variables; called again, the training point back (from
        the evaluation point and the slots: within rounding of the trained values, as the
        authors' PyTorch implementation does; ``averaged_weights(model)`` and the callbacks
        keep a copy instead and give back the trained values bit for bit)."""
        self._check_evaluation_point("swap_weights")
        variables = self.evaluated_variables()
        if not variables:
            raise ValueError("swap_weights() needs the slots of the first training step. Received: an optimizer "
                             "that has taken no step")
        evaluating = self.rule_state.evaluating()
        self._move(variables, to_training=evaluating)
        self.rule_state.set_evaluating(not evaluating)

    def _move(self, var_list: list, to_training: bool) -> Any:
        moves = [self._point(var, to_training) for var in var_list]
        return update_on_every_replica(move for move in moves if move is not None)
