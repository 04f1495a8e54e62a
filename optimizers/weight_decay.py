r"""Weight decay, a policy a rule declares, and variable masks any rule can query.

A :class:`~optimizers.CustomOptimizerV2` subclass says where decay happens
with its class attribute ``weight_decay_placement``:

* ``"before"`` (the default): decoupled decay applied by the template to each
  decayed variable *before* the rule's update (TensorFlow Addons' AdamW/SGDW):

  .. math::

      \text{default (TensorFlow Addons):}\quad & \theta \leftarrow \theta - \lambda_t\,\theta \\
      \text{scale\_weight\_decay\_by\_lr=True (Keras 3, PyTorch, optax):}\quad
          & \theta \leftarrow \theta - \eta_t\,\lambda_t\,\theta

* ``"inside"``: the template decays nothing; the rule reads
  ``coefficients["weight_decay_factor"]`` (:math:`\lambda_t`, or
  :math:`\eta_t\lambda_t`) and the per-variable flag ``coefficients["decayed"]``
  and uses them in its own update (LAMB adds :math:`\lambda\theta` to the
  update before its trust ratio).
* ``"none"``: the rule refuses a ``weight_decay`` argument.

:math:`\lambda_t` is ``weight_decay`` (float, tensor, callable or schedule,
evaluated at the step) and :math:`\eta_t` the learning rate. A sparse step
decays only the rows it touches. Variables with an updater are never decayed.
Which variables decay is a :class:`VariableMask`: all but those matching
``exclude_from_weight_decay``, or exactly ``decay_var_list`` when it is given
to ``apply_gradients``/``minimize``. ``exclude_from_weight_decay`` is also the
optimizer's attribute (:func:`exclude_attribute`), kept by the
:class:`DecoupledWeightDecay` the step and ``get_config`` read; once a step
has been built with it, it can no longer change.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import tensorflow as tf

from optimizers.hyperparameters import check_bool, option_change_error
from optimizers.tf_compat import distributed_container, variable_key

__all__ = ["VariableMask", "DecoupledWeightDecay", "PLACEMENTS", "check_patterns", "decay_policy", "exclude_attribute",
           "scale_attribute"]

PLACEMENTS = ("before", "inside", "none")


class VariableMask:
    """A set of variables: regexes searched in ``var.name``, and variable objects.

    Args:
        items: Regex strings and/or ``tf.Variable`` objects (``None``: empty).
        argument: The argument name that errors repeat.

    >>> import tensorflow as tf
    >>> from optimizers import VariableMask
    >>> kernel, bias = tf.Variable(1.0, name="dense/kernel"), tf.Variable(1.0, name="dense/bias")
    >>> mask = VariableMask(["bias"])
    >>> mask.matches(kernel), mask.matches(bias)
    (False, True)
    """

    def __init__(self, items: Iterable[Any] | None = None, argument: str = "mask", received: Any = None) -> None:
        items = [] if items is None else items
        received = items if received is None else received
        if isinstance(items, (str, tf.Variable)) or not isinstance(items, Iterable):
            raise TypeError(f"`{argument}` must be a list of regex strings or variables. "
                            f"Received: {argument}={received!r}")
        items = list(items)
        self.patterns: list[str] = []
        self._keys: set = set()
        self._matching: dict[str, tuple[str, ...]] = {}  # var.name -> the patterns found in it
        self._matched: dict[int, tuple] = {}  # id(var) -> (var, whether it is in the mask)
        for item in items:
            if isinstance(item, str):
                try:
                    re.compile(item)
                except re.error as error:
                    raise ValueError(f"`{argument}` holds an invalid regex {item!r} ({error}). "
                                     f"Received: {argument}={received!r}") from None
                self.patterns.append(item)
            elif isinstance(item, tf.Variable):
                self._keys.add(variable_key(item))
            else:
                raise TypeError(f"`{argument}` must be a list of regex strings or variables. "
                                f"Received: {argument}={received!r}")

    def matching_patterns(self, name: str) -> tuple[str, ...]:
        """The patterns found in ``name``, searched once per name."""
        found = self._matching.get(name)
        if found is None:
            found = self._matching[name] = tuple(p for p in self.patterns if re.search(p, name))
        return found

    def matches(self, var: tf.Variable) -> bool:
        """Whether ``var`` (or the distributed variable it belongs to) is in the mask; decided once
        per variable."""
        entry = self._matched.get(id(var))
        if entry is None or entry[0] is not var:
            found = (bool(self._keys) and variable_key(var) in self._keys) or (
                bool(self.patterns) and bool(self.matching_patterns(distributed_container(var).name)))
            entry = self._matched[id(var)] = (var, found)
        return entry[1]

    def __bool__(self) -> bool:
        return bool(self.patterns or self._keys)


def check_patterns(name: str, value: Any) -> list[str]:
    """``value`` (``None``, or a list or tuple of valid regexes) as a list; else an error naming ``name``."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)) or not all(isinstance(p, str) for p in value):
        raise TypeError(f"`{name}` must be a list of regex strings. Received: {name}={value!r}")
    return VariableMask(value, name).patterns  # refuses invalid regexes, naming the argument


class DecoupledWeightDecay:
    """Which variables decay, and by how much; held by ``CustomOptimizerV2``.

    Args:
        exclude_from_weight_decay: Regexes searched in ``var.name``.
        scale_by_lr: Multiply the decay by the learning rate.
    """

    def __init__(self, exclude_from_weight_decay: Iterable[str] | None = None, scale_by_lr: bool = False) -> None:
        patterns = check_patterns("exclude_from_weight_decay", exclude_from_weight_decay)
        check_scale_by_lr(None, scale_by_lr)
        self.exclude = VariableMask(patterns, "exclude_from_weight_decay")
        self.scale_by_lr = scale_by_lr
        self._decided = False  # whether a step was built with this policy (``exclude``, ``scale_by_lr``)

    @property
    def exclude_from_weight_decay(self) -> tuple[str, ...] | None:
        """The exclusion regexes, as a tuple (``None``: none): what steps, configs and files use."""
        return tuple(self.exclude.patterns) or None

    def set_exclude(self, value: Any, owner: str) -> None:
        """Exclude ``value`` instead, unless a step of ``owner`` (a class name) was built with
        another list: that step would go on deciding with the old one."""
        patterns = check_patterns("exclude_from_weight_decay", value)
        if self._decided and patterns != self.exclude.patterns:
            raise option_change_error(owner, "exclude_from_weight_decay", self.exclude_from_weight_decay, value)
        self.exclude = VariableMask(patterns, "exclude_from_weight_decay")

    def set_scale_by_lr(self, value: bool, owner: str) -> None:
        """Scale by the learning rate or not (``value``, a checked bool) instead, unless a step of
        ``owner`` (a class name) was built the other way."""
        if self._decided and value != self.scale_by_lr:
            raise option_change_error(owner, "scale_weight_decay_by_lr", self.scale_by_lr, value)
        self.scale_by_lr = value

    def applies_to(self, var: tf.Variable, decay_var_list: VariableMask | None = None) -> bool:
        """Whether ``var`` is decayed (``decay_var_list``, when given, decides alone)."""
        self._decided = True
        if decay_var_list is not None:
            return decay_var_list.matches(var)
        return not self.exclude.matches(var)

    def prepare(self, coefficients: dict[str, Any]) -> None:
        """Add ``"weight_decay_factor"``, what multiplies the variable, to ``coefficients``."""
        self._decided = True
        factor = coefficients["weight_decay"]
        if self.scale_by_lr:
            factor = factor * coefficients["learning_rate"]
        coefficients["weight_decay_factor"] = factor

    @staticmethod
    def decay_dense(var: tf.Variable, coefficients: dict[str, Any]) -> Any:
        """``var -= factor * var`` as TensorFlow's gradient-descent kernel: the bits of
        ``var.assign_sub(factor * var)`` in two graph ops instead of three (measured with
        ``benchmarks/bench_zoo.py transformer``: AdamW's steady step on 195 small variables
        went from 1.23x to 1.03x tf_keras's Adam)."""
        return tf.raw_ops.ResourceApplyGradientDescent(var=var.handle, alpha=coefficients["weight_decay_factor"],
                                                       delta=var.value())

    @staticmethod
    def decay_sparse(var: tf.Variable, indices: tf.Tensor, coefficients: dict[str, Any]) -> Any:
        rows = tf.gather(var, indices)
        return var.scatter_sub(tf.IndexedSlices(coefficients["weight_decay_factor"] * rows, indices))

    def get_config(self) -> dict[str, Any]:
        return {"exclude_from_weight_decay": list(self.exclude.patterns) or None,
                "scale_weight_decay_by_lr": self.scale_by_lr}


def refuse_exclude_without_decay(value: Any) -> None:
    if value:
        raise ValueError("`exclude_from_weight_decay` needs a `weight_decay`. "
                         f"Received: weight_decay=None, exclude_from_weight_decay={value!r}")


def exclude_attribute(holder: str) -> property:
    """The public ``exclude_from_weight_decay`` of an optimizer whose :class:`DecoupledWeightDecay`
    is its attribute ``holder`` (``None``: no weight decay): read and set there, where the step,
    ``get_config`` and saving read it."""

    def get(self: Any) -> tuple[str, ...] | None:
        decay = self.__dict__.get(holder)
        return None if decay is None else decay.exclude_from_weight_decay

    def set(self: Any, value: Any) -> None:
        decay = self.__dict__.get(holder)
        if decay is None:
            check_patterns("exclude_from_weight_decay", value)
            refuse_exclude_without_decay(value)
        else:
            decay.set_exclude(value, type(self).__name__)

    return property(get, set, doc="Regexes searched in ``var.name``: matching variables are not decayed "
                                  "(a tuple, or ``None``). Set it before the first step; after, only to "
                                  "the same list.")


def check_scale_by_lr(owner: Any, value: Any) -> None:
    """Refuse ``scale_weight_decay_by_lr=value`` for ``owner``: not a bool, or ``True`` where the rule
    multiplies its decay by the learning rate itself (``owner.decay_scaled_by_rule``)."""
    check_bool("scale_weight_decay_by_lr", value)
    if value and getattr(owner, "decay_scaled_by_rule", False):
        raise ValueError(f"{type(owner).__name__}'s rule multiplies its weight decay by the learning rate "
                         f"already. Received: scale_weight_decay_by_lr={value!r}")


def decay_policy(owner: Any, weight_decay: Any, exclude_from_weight_decay: Any,
                 scale_by_lr: bool) -> DecoupledWeightDecay | None:
    """The :class:`DecoupledWeightDecay` of a template optimizer ``owner`` built with these
    arguments (``None`` without ``weight_decay``), refusing what its placement cannot take."""
    check_scale_by_lr(owner, scale_by_lr)
    placement = owner.weight_decay_placement
    if placement not in PLACEMENTS:
        raise ValueError(f"`weight_decay_placement` of {type(owner).__name__} must be one of {PLACEMENTS}. "
                         f"Received: weight_decay_placement={placement!r}")
    if weight_decay is None:
        refuse_exclude_without_decay(exclude_from_weight_decay)
        return None
    if placement == "none":
        raise TypeError(f"{type(owner).__name__} takes no weight decay. Received: weight_decay={weight_decay!r}")
    return DecoupledWeightDecay(exclude_from_weight_decay, scale_by_lr)


def scale_attribute(holder: str) -> property:
    """The public ``scale_weight_decay_by_lr`` of an optimizer whose :class:`DecoupledWeightDecay`
    is its attribute ``holder``, as :func:`exclude_attribute` is its ``exclude_from_weight_decay``."""

    def get(self: Any) -> bool:
        decay = self.__dict__.get(holder)
        return False if decay is None else decay.scale_by_lr

    def set(self: Any, value: bool) -> None:
        check_scale_by_lr(self, value)
        decay = self.__dict__.get(holder)
        if decay is not None:
            decay.set_scale_by_lr(value, type(self).__name__)
        elif value:
            raise ValueError(f"`scale_weight_decay_by_lr` cannot be set on {type(self).__name__}, built without "
                             "weight decay (its step has none to scale): give `weight_decay` to the constructor. "
                             f"Received: scale_weight_decay_by_lr={value!r}")

    return property(get, set, doc="Whether the weight decay is multiplied by the learning rate (``False`` "
                                  "without weight decay). Set it before the first step; after, only to the "
                                  "same value.")
