"""Hyperparameters of rules and wrappers: numbers, tensors, callables and schedules.

One mechanism for every kind of public class: an optimizer rule
(:class:`~optimizers.CustomOptimizerV2`), a variable updater and a wrapper each
declare their hyperparameters with :meth:`Hyperparameters.add_hyperparameter`,
and read them as tensors with :meth:`Hyperparameters.hyperparameter`.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import tensorflow as tf

from optimizers.keras_compat import LearningRateSchedule

__all__ = ["Hyperparameters", "check_number", "evaluate"]


def check_number(name: str, value: Any, low: float | None = None, high: float | None = None,
                 low_inclusive: bool = True, high_inclusive: bool = True) -> None:
    """Validate a hyperparameter: a number, tensor, callable or schedule, in range.

    Raises ``TypeError``/``ValueError`` that name the argument and repeat the value.
    Callables and schedules are checked when called, not here.
    """
    if isinstance(value, LearningRateSchedule) or (callable(value) and not tf.is_tensor(value)):
        return
    if isinstance(value, (bool, np.bool_)) or isinstance(value, str) or value is None:
        raise TypeError(f"`{name}` must be a float, a tensor, a callable or a LearningRateSchedule. "
                        f"Received: {name}={value!r}")
    if tf.is_tensor(value):
        if not (value.dtype.is_floating or value.dtype.is_integer) or value.shape.rank not in (0, None):
            raise TypeError(f"`{name}` must be a scalar float tensor. Received: {name}={value!r}")
        if isinstance(value, tf.Variable) or not hasattr(value, "numpy"):
            return  # symbolic, or a variable the user may change: checked by its owner
        number = float(value.numpy())
    else:
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"`{name}` must be a float, a tensor, a callable or a LearningRateSchedule. "
                            f"Received: {name}={value!r}") from None
    if math.isnan(number):
        raise ValueError(f"`{name}` must not be NaN. Received: {name}={value!r}")
    too_low = low is not None and (number < low or (not low_inclusive and number == low))
    too_high = high is not None and (number > high or (not high_inclusive and number == high))
    if too_low or too_high:
        interval = "{}{}, {}{}".format("[" if low_inclusive else "(", "-inf" if low is None else low,
                                       "inf" if high is None else high, "]" if high_inclusive else ")")
        raise ValueError(f"`{name}` must be in {interval}. Received: {name}={value!r}")


def evaluate(value: Any, iterations: Any) -> Any:
    """The value of a hyperparameter at a step: schedules are called with
    ``iterations`` (the number of steps taken), other callables with nothing."""
    if isinstance(value, LearningRateSchedule):
        return value(iterations)
    if callable(value) and not tf.is_tensor(value):
        return value()
    return value


class Hyperparameters:
    """Mixin: declared, range-checked hyperparameters.

    A value is checked when declared and whenever it is set again as an
    attribute (``obj.learning_rate = 0.1``). By default values are kept as
    given, in a dictionary; an optimizer rule keeps them as OptimizerV2
    hyperparameters (checkpointed variables) instead.
    """

    def add_hyperparameter(self, name: str, value: Any, *, low: float | None = None, high: float | None = None,
                           low_inclusive: bool = True, high_inclusive: bool = True) -> None:
        """Declare hyperparameter ``name`` (call in ``__init__``).

        ``value`` may be a float, a tensor, a callable returning one, or a
        ``LearningRateSchedule`` (evaluated at the step). Numbers are checked
        against ``[low, high]`` now and whenever the attribute is set.
        """
        check = functools.partial(check_number, name, low=low, high=high, low_inclusive=low_inclusive,
                                  high_inclusive=high_inclusive)
        check(value)
        self.__dict__.setdefault("_hyper_checks", {})[name] = check
        self._store_hyperparameter(name, value)

    @property
    def hyperparameter_names(self) -> tuple[str, ...]:
        """The declared hyperparameters, in declaration order."""
        return tuple(self.__dict__.get("_hyper_checks", {}))

    def hyperparameter(self, name: str, dtype: tf.DType = tf.float32, iterations: Any = None) -> tf.Tensor:
        """The value of hyperparameter ``name`` as a ``dtype`` tensor, schedules
        evaluated at ``iterations`` (the steps taken so far)."""
        return tf.cast(evaluate(self._read_hyperparameter(name), iterations), dtype)

    def _store_hyperparameter(self, name: str, value: Any) -> None:
        self.__dict__.setdefault("_hyper_values", {})[name] = value

    def _read_hyperparameter(self, name: str) -> Any:
        return self.__dict__["_hyper_values"][name]

    def _check_hyperparameter(self, name: str, value: Any) -> bool:
        """Check ``value`` if ``name`` is declared; return whether it is."""
        check = self.__dict__.get("_hyper_checks", {}).get(name)
        if check is not None:
            check(value)
        return check is not None

    def __setattr__(self, name: str, value: Any) -> None:
        if self._check_hyperparameter(name, value):
            self._store_hyperparameter(name, value)
        else:
            super().__setattr__(name, value)

    def __getattr__(self, name: str) -> Any:  # only called when ordinary lookup fails
        values = self.__dict__.get("_hyper_values", {})
        if name in values:
            return values[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
