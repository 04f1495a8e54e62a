"""Variable updaters: a per-variable rule that replaces the optimizer's rule.

An updater is attached to a variable in one of three ways (first match wins):

1. the optimizer's ``updaters=`` mapping: ``{variable or regex on var.name: rule}``
   (a variable matched by two regexes of different rules is refused);
2. :func:`set_updater` (``var`` carries the updater wherever it goes);
3. the Keras 3 convention ``var.overwrite_with_gradient = True``
   (means :class:`OverwriteWithGradient`).

The rule may be a :class:`VariableUpdater` or any optimizer written on the
template (:class:`~optimizers.CustomOptimizerV2`): both follow one protocol,
:class:`~optimizers.UpdateRule`, so "different optimizers for different
variables" is this mapping. A variable with an updater gets none of the
optimizer's slots (only the updater's own, named ``"<rule_name>/<slot>"``), is
exempt from the optimizer's gradient clipping and weight decay, and its
gradient is reduced across replicas by the rule's ``reduction``. The rule's
hyperparameters (schedules too) are evaluated at the optimizer's step.
"""

from __future__ import annotations

import re
import warnings
import weakref
from collections.abc import Mapping
from typing import Any

import tensorflow as tf

from optimizers import config as config_lib
from optimizers.rule import REDUCTIONS, UpdateRule
from optimizers.slots import SlotSpec
from optimizers.tf_compat import distributed_container, logical_variable, variable_key, variable_name
from optimizers.weight_decay import VariableMask

__all__ = [
    "VariableUpdater",
    "OverwriteWithGradient",
    "Frozen",
    "RowwiseAdagrad",
    "set_updater",
    "get_updater",
    "Routing",
]


class VariableUpdater(UpdateRule):
    """Base class of per-variable update rules that are not optimizers.

    Write the hooks of :class:`~optimizers.UpdateRule`: ``update_dense``
    (required), ``update_sparse`` (for speed), ``slot_specs(var)``,
    ``prepare``; declare hyperparameters with ``add_hyperparameter`` (floats,
    tensors, callables and schedules, evaluated at the optimizer's step); set
    ``reduction`` to say how the gradient is combined across replicas.
    ``get_config`` is read from the constructor's signature.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        config_lib.register(cls)

    def get_config(self) -> dict[str, Any]:
        def value_of(pname: str) -> Any:
            if pname in self.hyperparameter_names:
                return config_lib.serialize_hyperparameter(self._read_hyperparameter(pname))
            return config_lib.attribute_value(self, pname)

        return config_lib.signature_config(self, value_of)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> VariableUpdater:
        return cls(**config_lib.deserialize_values(config))

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.get_config() == other.get_config()  # type: ignore[union-attr]

    def __hash__(self) -> int:
        return hash(type(self))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


class OverwriteWithGradient(VariableUpdater):
    """The variable takes the value of its gradient (fp8 scales, running statistics).

    Across replicas the gradients are averaged (``reduction="mean"``), or their
    maximum is taken (``reduction="max"``, for amax-like statistics); never summed.
    A sparse gradient overwrites only its rows (repeated rows are summed first);
    across replicas, each row takes the mean or maximum of the values sent by the
    replicas whose gradient has that row.
    Under mixed precision, a ``LossScaleOptimizer`` does not unscale it (as in
    Keras 3): the variable takes the value computed in the forward pass.
    """

    gradient_is_value = True

    def __init__(self, reduction: str = "mean") -> None:
        if reduction not in ("mean", "max"):
            raise ValueError(f"`reduction` must be 'mean' or 'max'. Received: reduction={reduction!r}")
        self.reduction = reduction

    def update_dense(self, grad, var, slots, coefficients):
        return var.assign(tf.cast(grad, var.dtype), read_value=False)

    def update_sparse(self, grad, var, indices, slots, coefficients):
        return var.scatter_update(tf.IndexedSlices(tf.cast(grad, var.dtype), indices))


class Frozen(VariableUpdater):
    """The variable does not change; its gradient is ignored and never communicated."""

    reduction = "none"

    def update_dense(self, grad, var, slots, coefficients):
        return tf.no_op()

    def update_sparse(self, grad, var, indices, slots, coefficients):
        return tf.no_op()


class RowwiseAdagrad(VariableUpdater):
    r"""Adagrad with one accumulator per row: a cheap rule for huge embedding tables.

    For each touched row :math:`i` with gradient row :math:`g_i`:

    .. math::

        a_i \leftarrow a_i + \operatorname{mean}(g_i^2), \qquad
        w_i \leftarrow w_i - \eta\, g_i / (\sqrt{a_i} + \epsilon)

    Its slot has shape ``[rows, 1]``: one number per row instead of Adam's two
    per element. The variable must have rank >= 1.

    Args:
        learning_rate: :math:`\eta`: float, tensor, callable or schedule
            (evaluated at the optimizer's step). Defaults to ``0.01``.
        initial_accumulator_value: Defaults to ``0.1``.
        epsilon: Defaults to ``1e-7``.
    """

    def __init__(self, learning_rate: Any = 0.01, initial_accumulator_value: float = 0.1, epsilon: Any = 1e-7):
        if (isinstance(initial_accumulator_value, bool) or not isinstance(initial_accumulator_value, (int, float))
                or not initial_accumulator_value >= 0):
            raise ValueError("`initial_accumulator_value` must be a number >= 0. "
                             f"Received: initial_accumulator_value={initial_accumulator_value!r}")
        self.add_hyperparameter("learning_rate", learning_rate, low=0.0)
        self.add_hyperparameter("epsilon", epsilon, low=0.0)
        self.initial_accumulator_value = float(initial_accumulator_value)

    def slot_specs(self, var):
        if var.shape.rank == 0:
            raise ValueError(f"RowwiseAdagrad updates rows, so its variable needs rank >= 1. Received: var={var!r}")
        value = self.initial_accumulator_value
        return (SlotSpec("accumulator", initializer=lambda shape, dtype: tf.fill(shape, tf.cast(value, dtype)),
                         shape=lambda shape: shape[:1] + [1]),)

    @staticmethod
    def _step(grad, acc_rows, coefficients):
        grad2 = tf.reshape(grad, [tf.shape(grad)[0], -1])
        new_acc = acc_rows + tf.reduce_mean(tf.square(grad2), axis=1, keepdims=True)
        scale = coefficients["learning_rate"] / (tf.sqrt(new_acc) + coefficients["epsilon"])
        return new_acc, tf.reshape(grad2 * scale, tf.shape(grad))

    def update_dense(self, grad, var, slots, coefficients):
        acc = slots["accumulator"]
        new_acc, delta = self._step(grad, acc.read_value(), coefficients)
        return tf.group(acc.assign(new_acc), var.assign_sub(delta))

    def update_sparse(self, grad, var, indices, slots, coefficients):
        acc = slots["accumulator"]
        new_acc, delta = self._step(grad, tf.gather(acc, indices), coefficients)
        return tf.group(
            acc.scatter_update(tf.IndexedSlices(new_acc, indices)),
            var.scatter_sub(tf.IndexedSlices(delta, indices)),
        )


def check_updater(updater: object, argument: str = "updater") -> UpdateRule:
    """Return ``updater`` if it is a rule (a :class:`VariableUpdater` or a
    template optimizer), else raise ``TypeError``."""
    if not isinstance(updater, UpdateRule):
        raise TypeError(
            f"`{argument}` must be a VariableUpdater (for example optimizers.OverwriteWithGradient()) or an "
            f"optimizer written on CustomOptimizerV2. Received: {argument}={updater!r}"
        )
    clipping = {k: getattr(updater, k, None) for k in ("clipnorm", "clipvalue", "global_clipnorm")}
    clipping = {k: v for k, v in clipping.items() if v is not None}
    if clipping:
        raise ValueError(f"An optimizer used as an updater does not clip its variables' gradients; set clipping on "
                         f"the optimizer that routes them. Received: {argument}={updater!r} with {clipping}")
    if updater.reduction not in REDUCTIONS:
        raise ValueError(f"`reduction` of {type(updater).__name__} must be one of {REDUCTIONS}. "
                         f"Received: reduction={updater.reduction!r}")
    return updater


# Bumped by set_updater: optimizers resolve each variable's rule once, and again after it.
_attachments = [0]
# The updaters attached by set_updater: {id(variable): (weak reference to it, updater)}, held beside
# the variables, never on them, and dropped with the variable.
_ATTACHED: dict[int, tuple[weakref.ref, UpdateRule]] = {}


def _attached(var: Any) -> UpdateRule | None:
    entry = _ATTACHED.get(id(var))
    return entry[1] if entry is not None and entry[0]() is var else None


def _tf_variable(var: Any) -> Any:
    """``var``, or the TensorFlow variable of a Keras 3 variable (its ``value``)."""
    value = getattr(var, "value", None) if not isinstance(var, tf.Variable) else None
    return value if isinstance(value, tf.Variable) else var


def set_updater(var: tf.Variable, updater: UpdateRule | None) -> None:
    """Attach ``updater`` to ``var`` (``None`` detaches it); a Keras 3 variable: to its TensorFlow
    variable (``var.value``)."""
    if updater is not None:
        check_updater(updater)
    var = _tf_variable(var)
    if not isinstance(var, tf.Variable):
        raise TypeError(f"`var` must be a tf.Variable. Received: var={var!r}")
    container = distributed_container(var)
    if updater is None:
        _ATTACHED.pop(id(container), None)
    else:
        if _attached(container) is None:
            weakref.finalize(container, _ATTACHED.pop, id(container), None)
        _ATTACHED[id(container)] = (weakref.ref(container), updater)
    _attachments[0] += 1


def get_updater(var: tf.Variable) -> UpdateRule | None:
    """The updater attached to ``var`` by :func:`set_updater` or by the Keras 3
    ``overwrite_with_gradient`` attribute, or ``None``."""
    var = _tf_variable(var)
    candidates = (var, distributed_container(var), logical_variable(var))  # a shard: its sharded table's
    for candidate in candidates:
        updater = _attached(candidate)
        if updater is not None:
            return updater
    for candidate in candidates:
        if getattr(candidate, "overwrite_with_gradient", False) is True:
            return OverwriteWithGradient()
    return None


def _exact_pattern(name: str) -> str:
    """The regex that matches the variable name ``name`` alone."""
    return f"^{re.escape(name)}$"


class Routing:
    """The ``updaters=`` argument of an optimizer: which variables follow which rule.

    Args:
        updaters: ``{variable or regex searched in var.name: rule}``, or a
            list of ``(variable or regex, rule)`` pairs; ``None`` for none.
    """

    def __init__(self, updaters: Any = None) -> None:
        self.patterns: dict[str, UpdateRule] = {}
        self._by_key: dict[Any, UpdateRule] = {}
        self._exact: dict[str, UpdateRule] = {}  # a variable key's rule under its variable's exact-name regex
        self._names = VariableMask()
        self._resolved: dict[int, tuple] = {}  # id(var) -> (var, set_updater count, its rule)
        self._warned: set[str] = set()  # variable names whose own rule a config leaves out, warned about
        if updaters is None:
            return
        if isinstance(updaters, Mapping):
            pairs = list(updaters.items())
        elif isinstance(updaters, (list, tuple)) and all(isinstance(p, tuple) and len(p) == 2 for p in updaters):
            pairs = list(updaters)
        else:
            raise TypeError("`updaters` must be a mapping {var.ref() or regex: VariableUpdater} or a list of "
                            f"(variable or regex, VariableUpdater) pairs. Received: updaters={updaters!r}")
        for key, updater in pairs:
            check_updater(updater)
            if hasattr(key, "deref"):  # a variable's .ref()
                key = key.deref()
            if isinstance(key, str):
                self.patterns[key] = updater
            elif isinstance(key, tf.Variable):
                self._by_key[variable_key(key)] = updater
                self._exact[_exact_pattern(variable_name(key))] = updater
            else:
                raise TypeError("`updaters` keys must be variables (var.ref() in a dict) or regex strings. "
                                f"Received key {key!r} in updaters={updaters!r}")
        self._names = VariableMask(list(self.patterns), "updaters", received=updaters)

    def __bool__(self) -> bool:
        return bool(self.patterns or self._by_key)

    def lookup(self, var: tf.Variable) -> UpdateRule | None:
        """The rule for ``var``: the mapping first, then the variable's own updater. Resolved once
        per variable (and again after any :func:`set_updater`): a Keras 3 style
        ``overwrite_with_gradient`` attribute must be set before the variable's first step."""
        entry = self._resolved.get(id(var))
        if entry is None or entry[0] is not var or entry[1] != _attachments[0]:
            entry = self._resolved[id(var)] = (var, _attachments[0], self._resolve(var))
        return entry[2]

    def _resolve(self, var: tf.Variable) -> UpdateRule | None:
        if self._by_key:
            updater = self._by_key.get(variable_key(var))
            if updater is None and logical_variable(var) is not distributed_container(var):
                updater = self._by_key.get(variable_key(logical_variable(var)))  # a shard: its table's
            if updater is not None:
                return updater
        if self.patterns:
            name = variable_name(var)  # a shard is routed by its table's name
            matches = self._matching(name)
            if len({id(u) for _, u in matches}) > 1:
                raise ValueError(f"Variable {name!r} matches several `updaters` patterns with different rules: "
                                 f"{[p for p, _ in matches]}. Make the patterns exclusive. "
                                 f"Received: updaters={self.patterns!r}")
            if matches:
                return matches[0][1]
        return get_updater(var)

    def _matching(self, name: str) -> list[tuple[str, UpdateRule]]:
        """The ``(regex, rule)`` pairs of the mapping whose regex ``name`` matches."""
        return [(p, self.patterns[p]) for p in self._names.matching_patterns(name)] if self.patterns else []

    def unmatched_patterns(self, names: list[str]) -> list[str]:
        """The regexes of the mapping that none of ``names`` matches."""
        matched = {p for name in names for p, _ in self._matching(name)}
        return [p for p in self.patterns if p not in matched]

    def saved_patterns(self) -> dict[str, UpdateRule]:
        """What a config keeps of the routing: the regexes, then, for each variable this routing
        has resolved whose rule came from the variable itself (a ``var.ref()`` key,
        :func:`set_updater`, ``overwrite_with_gradient``), its exact name, so that a loaded model
        (new variables, same names) routes it alike. A variable whose exact name would clash (a
        regex or another variable of the same name routes it elsewhere) is left out, with a
        warning."""
        outcomes: dict[str, dict[int, UpdateRule | None]] = {}  # name -> the rules its variables take
        clashes = set()
        for var, _, _ in list(self._resolved.values()):
            rule, name = self.lookup(var), variable_name(var)
            by_pattern = [rule for _, rule in self._matching(name)]
            own = None if rule is None or (by_pattern and by_pattern[0] is rule) else rule
            if own is not None and by_pattern:
                clashes.add(name)
            outcomes.setdefault(name, {})[id(own)] = own
        clashes.update(name for name, rules in outcomes.items() if len(rules) > 1)
        for name in sorted(clashes - self._warned):
            self._warned.add(name)
            warnings.warn(f"The rule given to the variable object {name!r} (a `var.ref()` key, set_updater or "
                          "overwrite_with_gradient) is not kept by the optimizer's config, nor by a saved model: a "
                          "regex of `updaters=` or another variable of the same name routes that name elsewhere. "
                          "Give the variable a unique name, or route it by a regex.", stacklevel=3)
        exact = {name: rule for name, rules in outcomes.items() if name not in clashes
                 for rule in rules.values() if rule is not None}
        saved = dict(self.patterns)
        saved.update({_exact_pattern(name): rule for name, rule in exact.items()})
        return saved

    def named_rules(self) -> dict[str, UpdateRule]:
        """Every rule of the mapping under the regex a config keeps it by: its own regex, or for a
        variable key the regex of the variable's exact name (as :meth:`saved_patterns` writes it)."""
        return {**self.patterns, **self._exact}

    def rules(self) -> list[UpdateRule]:
        """Every rule named in the mapping."""
        return list(self.patterns.values()) + list(self._by_key.values())


def undo_unscaling(optimizer: Any, grads: list, variables: list, loss_scale: Any) -> list:
    """Multiply back by ``loss_scale`` the gradients of variables whose rule takes
    its gradient as a value (exact: the dynamic loss scale is a power of two)."""
    lookup = getattr(optimizer, "updater_for", None)
    if lookup is None:
        return grads
    out = []
    for grad, var in zip(grads, variables):
        rule = lookup(var) if grad is not None else None
        if rule is not None and rule.gradient_is_value:
            if isinstance(grad, tf.IndexedSlices):
                grad = tf.IndexedSlices(grad.values * tf.cast(loss_scale, grad.values.dtype), grad.indices,
                                        grad.dense_shape)
            else:
                grad = grad * tf.cast(loss_scale, grad.dtype)
        out.append(grad)
    return out
