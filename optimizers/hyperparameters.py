"""Hyperparameters of rules and wrappers: numbers, tensors, callables and schedules.

One mechanism for every kind of public class: an optimizer rule
(:class:`~optimizers.CustomOptimizerV2`), a variable updater and a wrapper each
declare their hyperparameters with :meth:`Hyperparameters.add_hyperparameter`,
and read them as tensors with :meth:`Hyperparameters.hyperparameter`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

__all__ = ["Hyperparameters", "assertion", "check_bool", "check_constant", "check_epsilon", "check_integer", "check_number",
           "checked_value", "epsilon_in", "evaluate", "is_dynamic", "is_schedule", "option_change_error", "register_schedule_type"]

#: The learning-rate schedule classes of the Keras versions in use: a hyperparameter that is one
#: of them is called with the step, any other callable with nothing. Each Keras adapter registers
#: its own (``keras_compat`` Keras 2's), so this module imports no Keras.
SCHEDULE_TYPES: list[type] = []


def register_schedule_type(cls: type) -> None:
    """Treat instances of ``cls`` as schedules: called with the step (see :func:`evaluate`)."""
    if cls not in SCHEDULE_TYPES:
        SCHEDULE_TYPES.append(cls)


def is_schedule(value: Any) -> bool:
    return isinstance(value, tuple(SCHEDULE_TYPES))


def check_number(name: str, value: Any, low: float | None = None, high: float | None = None,
                 low_inclusive: bool = True, high_inclusive: bool = True) -> None:
    """Validate a hyperparameter: a number, tensor, callable or schedule, in range, also once
    rounded to float32, the precision a step uses it in (``0.999999999`` is ``1.0`` there).

    Raises ``TypeError``/``ValueError`` that name the argument and repeat the value.
    Callables and schedules are checked when called, not here.
    """
    if callable(value) and not tf.is_tensor(value):  # schedules too
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
    with np.errstate(over="ignore", under="ignore"):
        used = float(np.float32(number))  # the value a step uses: Keras keeps hyperparameters in float32
    for candidate, note in ((number, ""), (used, f" (as a float32, the precision it is used in: {used!r})")):
        if not math.isfinite(candidate):
            raise ValueError(f"`{name}` must be a finite number{note}. Received: {name}={value!r}")
        too_low = low is not None and (candidate < low or (not low_inclusive and candidate == low))
        too_high = high is not None and (candidate > high or (not high_inclusive and candidate == high))
        if too_low or too_high:
            raise ValueError(f"`{name}` must be in {_interval(low, high, low_inclusive, high_inclusive)}{note}. "
                             f"Received: {name}={value!r}")


def check_constant(name: str, value: Any, **bounds: Any) -> None:
    """A Python number (converted to each variable's dtype at the step), in range (``bounds`` as
    :func:`check_number`'s)."""
    if tf.is_tensor(value) or callable(value):
        raise TypeError(f"`{name}` must be a Python float. Received: {name}={value!r}")
    check_number(name, value, **bounds)


def check_epsilon(value: Any) -> None:
    """An ``epsilon`` (the fuzz factor of a denominator): a Python number ``> 0``. Zero would divide
    zero by zero where an element's gradient and moments are zero."""
    check_constant("epsilon", value, low=0.0, low_inclusive=False)


def epsilon_in(value: float, dtype: tf.DType) -> tf.Tensor:
    """An ``epsilon`` (> 0) as a ``dtype`` constant, never zero: where ``dtype`` rounds it to zero
    (``1e-8`` in float16), the smallest positive ``dtype`` number, so that a zero gradient's zero
    moments still give a zero step, not ``0 / 0``."""
    rounded = np.asarray(value, dtype.as_numpy_dtype)
    if rounded == 0:
        rounded = np.finfo(dtype.as_numpy_dtype).smallest_subnormal
    return tf.constant(rounded, dtype)


def check_integer(name: str, value: Any, low: int, allow_none: bool = False) -> None:
    """An integer option ``>= low`` (``None`` too where ``allow_none``); a bool is refused."""
    if allow_none and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        either = "None or " if allow_none else ""
        raise ValueError(f"`{name}` must be {either}an integer >= {low}. Received: {name}={value!r}")


def check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"`{name}` must be a bool. Received: {name}={value!r}")


def evaluate(value: Any, iterations: Any) -> Any:
    """The value of a hyperparameter at a step: schedules are called with
    ``iterations`` (the number of steps taken), other callables with nothing."""
    if is_schedule(value):
        return value(iterations)
    if callable(value) and not tf.is_tensor(value):
        return value()
    return value


def is_dynamic(value: Any) -> bool:
    """Whether ``value`` can change without being set again (so it is checked at each step)."""
    return (isinstance(value, tf.Variable) or (callable(value) and not tf.is_tensor(value))
            or (tf.is_tensor(value) and not hasattr(value, "numpy")))


def _interval(low: float | None, high: float | None, low_inclusive: bool, high_inclusive: bool) -> str:
    return "{}{}, {}{}".format("[" if low_inclusive else "(", "-inf" if low is None else low,
                               "inf" if high is None else high, "]" if high_inclusive else ")")


def checked_value(name: str, value: Any, low: float | None = None, high: float | None = None,
                  low_inclusive: bool = True, high_inclusive: bool = True) -> tf.Tensor:
    """``value`` (what a schedule or callable returned) as a tensor that carries
    its own run-time check: a number of rank 0, not NaN, in range.

    Type and shape are checked now; the range by an assertion that every use of
    the returned tensor waits for (eagerly: raised right away).
    """
    try:
        value = tf.convert_to_tensor(value)
    except (TypeError, ValueError):
        raise TypeError(f"`{name}` must evaluate to a number. Received: {name}={value!r}") from None
    if not (value.dtype.is_floating or value.dtype.is_integer):
        raise TypeError(f"`{name}` must evaluate to a number. Received: {name}={value!r}")
    if value.shape.rank not in (0, None):
        raise ValueError(f"`{name}` must evaluate to a scalar. Received: {name}={value!r}")
    number = tf.cast(value, tf.float64)
    ok = tf.math.is_finite(number)
    if low is not None:
        ok = tf.logical_and(ok, number >= low if low_inclusive else number > low)
    if high is not None:
        ok = tf.logical_and(ok, number <= high if high_inclusive else number < high)
    message = (f"`{name}` must be a finite number in {_interval(low, high, low_inclusive, high_inclusive)}. "
               f"Received: {name}=")
    if tf.executing_eagerly():
        if not bool(ok):
            raise ValueError(f"{message}{value.numpy().item()!r}")
        return value
    with tf.control_dependencies([assertion(ok, [message, value])]):
        return tf.identity(value)


def option_change_error(owner: str, name: str, current: Any, value: Any) -> ValueError:
    """The error of an option assigned a new value after ``owner`` (a class name) took a step."""
    return ValueError(f"`{name}` cannot change once {owner} has taken a step (the step is already built with "
                      f"{name}={current!r}); make a new optimizer instead. Received: {name}={value!r}")


def _same_option(old: Any, new: Any) -> bool:
    """Whether ``new`` is option value ``old`` again: the same object, or an equal plain value
    (``==``; a bool equals only a bool; tensors, variables and arrays only themselves)."""
    if old is new:
        return True
    if any(tf.is_tensor(x) or isinstance(x, np.ndarray) for x in (old, new)):
        return False  # compared elementwise, or on the device
    if isinstance(old, (bool, np.bool_)) != isinstance(new, (bool, np.bool_)):
        return False
    try:
        return bool(old == new)
    except (TypeError, ValueError):
        return False


def assertion(condition: tf.Tensor, data: list, summarize: int = 3) -> tf.Operation:
    """A graph assertion that fails the step with ``data`` unless ``condition``: the raw op, as
    ``tf.debugging.Assert`` wraps it in a conditional, one function call more in every step."""
    return tf.raw_ops.Assert(condition=condition, data=data, summarize=summarize)


class Hyperparameters:
    """Mixin: declared, range-checked hyperparameters, and options.

    A hyperparameter is checked when declared, whenever it is set again as an
    attribute (``obj.learning_rate = 0.1``), and, when it can change by itself
    (a schedule, a callable, a ``tf.Variable``), at every step. By default
    values are kept as given, in a dictionary, and from the first step on a
    number is also held in a scalar variable that steps read, so that setting it
    reaches a step already built (a ``tf.function``); an optimizer rule keeps them as
    OptimizerV2 hyperparameters (checkpointed variables) instead, which can then
    change by themselves (``keras.backend.set_value``), so they too are checked
    at every step.

    An *option* (:meth:`add_option`) is any other constructor argument, read
    when the step is built (``amsgrad``, ``epsilon``...): it is checked when set,
    and once the first step has been taken it can no longer change, since the
    change could not take effect.
    """

    #: Names a base class gives a meaning of its own (a coefficient it sets, an argument it
    #: keeps), with that meaning: no hyperparameter, and no variable option, may take them.
    reserved_names: dict[str, str] = {"step": 'coefficients["step"] is the 1-based step number'}

    def add_hyperparameter(self, name: str, value: Any, *, low: float | None = None, high: float | None = None,
                           low_inclusive: bool = True, high_inclusive: bool = True) -> None:
        """Declare hyperparameter ``name`` (call in ``__init__``).

        ``value`` may be a float, a tensor, a callable returning one, or a
        ``LearningRateSchedule`` (evaluated at the step). Numbers are checked
        against ``[low, high]`` now and whenever the attribute is set;
        schedules, callables and variables at each step.
        """
        if name in self.reserved_names:
            raise ValueError(f"Hyperparameter name {name!r} is taken: {self.reserved_names[name]}. Name it "
                             f"otherwise. Received: {name}={value!r}")
        if name in self.__dict__.get("_hyper_bounds", {}):
            raise ValueError(f"Hyperparameter {name!r} is already declared: declare each one once (to change its "
                             f"value, set the attribute). Received: {name}={value!r}")
        bounds = dict(low=low, high=high, low_inclusive=low_inclusive, high_inclusive=high_inclusive)
        check_number(name, value, **bounds)
        self.__dict__.setdefault("_hyper_bounds", {})[name] = bounds
        self._store_hyperparameter(name, value)

    def add_option(self, name: str, value: Any, check: Callable[[Any], None] | None = None) -> None:
        """Declare option ``name`` (call in ``__init__``): ``check(value)`` runs
        now and on every assignment; assignments after the first step raise."""
        self.__dict__.setdefault("_option_checks", {})[name] = check
        setattr(self, name, value)

    def lock_options(self) -> None:
        """Called when a step is built: options can no longer change, and from now on each
        hyperparameter that is a number is also held in a variable, which steps read (see :meth:`_hold`)."""
        if self.__dict__.get("_options_locked"):
            return
        self.__dict__["_options_locked"] = True
        for name, value in self.__dict__.get("_hyper_values", {}).items():
            if not is_dynamic(value):
                self._hold(name, value)

    def checked_hyperparameters(self, iterations: Any) -> list:
        """The run-time checks of the hyperparameters that can change by themselves."""
        return [self.hyperparameter(name, tf.float32, iterations) for name in self.hyperparameter_names
                if is_dynamic(self._read_hyperparameter(name))]

    @property
    def hyperparameter_names(self) -> tuple[str, ...]:
        """The declared hyperparameters, in declaration order."""
        return tuple(self.__dict__.get("_hyper_bounds", {}))

    def hyperparameter(self, name: str, dtype: tf.DType = tf.float32, iterations: Any = None) -> tf.Tensor:
        """The value of hyperparameter ``name`` as a ``dtype`` tensor, schedules
        evaluated at ``iterations`` (the steps taken so far)."""
        raw = self._read_hyperparameter(name)
        return tf.cast(self._checked(name, raw, evaluate(self._step_value(name), iterations)), dtype)

    def _checked(self, name: str, raw: Any, value: Any) -> Any:
        """``value`` of ``raw`` with its run-time check if ``raw`` can change by itself (a variable:
        an optimizer rule's own hyperparameter variables too, which ``keras.backend.set_value`` and
        Keras' learning-rate callbacks assign without this class seeing it)."""
        if is_dynamic(raw):
            return checked_value(name, value, **self.__dict__["_hyper_bounds"][name])
        return value

    def _store_hyperparameter(self, name: str, value: Any) -> None:
        if self.__dict__.get("_options_locked") and not is_dynamic(value):
            self._hold(name, value)
        self.__dict__.setdefault("_hyper_values", {})[name] = value

    def _read_hyperparameter(self, name: str) -> Any:
        """``name``'s value as set (what the config reports)."""
        return self.__dict__["_hyper_values"][name]

    def _hold(self, name: str, number: Any) -> None:
        """Hold ``number``, the value of ``name`` from now on, in a scalar variable that steps read, so
        that a step built before (a ``tf.function``, ``model.fit``'s train function) sees it too.

        Float64 holds the number as a step converted it before, bit for bit (a Python float as
        float32, a float64 as float64). Not trainable, not checkpointed: the config keeps the value."""
        with tf.init_scope():
            value = tf.cast(number, tf.float64)
            held = self.__dict__.setdefault("_held_hypers", {})
            if name in held:
                held[name].assign(value)
            else:
                held[name] = tf.Variable(value, trainable=False, name=name,
                                         aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

    def _step_value(self, name: str) -> Any:
        """What a step reads for ``name``: the variable holding its number, else its value as set."""
        raw = self._read_hyperparameter(name)
        held = self.__dict__.get("_held_hypers", {}).get(name)
        return held if held is not None and not is_dynamic(raw) else raw

    def _check_hyperparameter(self, name: str, value: Any) -> bool:
        """Check ``value`` if ``name`` is declared; return whether ``name`` is declared."""
        bounds = self.__dict__.get("_hyper_bounds", {}).get(name)
        if bounds is not None:
            check_number(name, value, **bounds)
        return bounds is not None

    def __setattr__(self, name: str, value: Any) -> None:
        options = self.__dict__.get("_option_checks", {})
        if name in options:
            if self.__dict__.get("_options_locked") and not _same_option(self.__dict__.get(name, value), value):
                raise option_change_error(type(self).__name__, name, self.__dict__[name], value)
            if options[name] is not None:
                options[name](value)
            self.__dict__[name] = value
        elif self._check_hyperparameter(name, value):
            self._store_hyperparameter(name, value)
        else:
            super().__setattr__(name, value)

    def __getattr__(self, name: str) -> Any:  # only called when ordinary lookup fails
        values = self.__dict__.get("_hyper_values", {})
        if name in values:
            return values[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
