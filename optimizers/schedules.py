r"""Cyclical learning rates (Smith, arXiv:1506.01186), TensorFlow Addons' schedules' successors.

Four Keras 2 ``LearningRateSchedule`` classes with TFA 0.23's names,
constructor signatures and numbers: :class:`CyclicalLearningRate` (any scale
function), :class:`TriangularCyclicalLearningRate`,
:class:`Triangular2CyclicalLearningRate` and
:class:`ExponentialCyclicalLearningRate`. Unlike TFA's, their configs hold no
Python function and keep ``name``, so they survive ``get_config``/
``from_config``, ``keras.optimizers.schedules.serialize``/``deserialize`` and an
optimizer's config saved in ``.h5``/``.keras`` files; TFA's saved names
(``"Addons>TriangularCyclicalLearningRate"``, ...) resolve to these classes.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from optimizers import config as config_lib
from optimizers.keras_compat import LearningRateSchedule, keras

__all__ = ["CyclicalLearningRate", "TriangularCyclicalLearningRate", "Triangular2CyclicalLearningRate",
           "ExponentialCyclicalLearningRate", "UnsavedFunction"]

SCALE_MODES = ("cycle", "iterations")


def _check_scalar(name: str, value: Any, positive: bool = False) -> Any:
    """A finite (``positive``: > 0, else >= 0) number or scalar float tensor; Python numbers as floats."""
    if isinstance(value, (bool, np.bool_)) or isinstance(value, str) or value is None or callable(value):
        raise TypeError(f"`{name}` must be a number or a scalar float tensor. Received: {name}={value!r}")
    if tf.is_tensor(value):
        if not (value.dtype.is_floating or value.dtype.is_integer) or value.shape.rank not in (0, None):
            raise TypeError(f"`{name}` must be a number or a scalar float tensor. Received: {name}={value!r}")
        if not hasattr(value, "numpy"):
            return value  # symbolic: cannot be checked now
        number = float(value.numpy())
    else:
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"`{name}` must be a number or a scalar float tensor. Received: {name}={value!r}") from None
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        raise ValueError(f"`{name}` must be a finite number {'> 0' if positive else '>= 0'}. "
                         f"Received: {name}={value!r}")
    return value


def _config_number(value: Any) -> Any:
    """A config value: tensors and numpy scalars as Python numbers."""
    if tf.is_tensor(value) and hasattr(value, "numpy"):
        value = value.numpy()
    return value.item() if isinstance(value, (np.generic, np.ndarray)) else value


def _in_dtype(value: Any, dtype: tf.DType) -> tf.Tensor:
    """A tensor cast to ``dtype``; a Python number converted straight to it (TFA rounds it through float32)."""
    return tf.cast(value, dtype) if tf.is_tensor(value) else tf.constant(value, dtype)


def _unsaved_message(scale_fn: Callable) -> str:
    return ("A CyclicalLearningRate's `scale_fn` cannot be written to a file: only a registered function (or a "
            "registered callable object with get_config) can be named in a config. Define it at module level and "
            "decorate it with @keras.utils.register_keras_serializable(package='...'), or use "
            "TriangularCyclicalLearningRate, Triangular2CyclicalLearningRate or ExponentialCyclicalLearningRate. "
            f"Received: scale_fn={scale_fn!r}")


class UnsavedFunction:
    """A ``scale_fn`` that no config can name (a lambda, an unregistered function) as
    ``get_config()`` gives it: it calls the function, so that ``from_config(get_config())`` in
    memory (copying a schedule or an optimizer) rebuilds it with the same function, as TensorFlow
    Addons' configs held the function itself. Written to a file (Keras asks each object it writes
    for its ``get_config()``), it raises a ``ValueError`` that says how to make it savable."""

    def __init__(self, function: Callable) -> None:
        self.function = function

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, UnsavedFunction) and other.function is self.function

    def __hash__(self) -> int:
        return hash(self.function)

    def __repr__(self) -> str:
        return f"UnsavedFunction({self.function!r})"

    def get_config(self) -> dict[str, Any]:
        raise config_lib.UnsavableError(_unsaved_message(self.function))


def _serialize_scale_fn(scale_fn: Callable) -> Any:
    """A registered function as its registered name; a registered object with ``get_config`` as
    ``{"class_name", "config"}``; anything else as an :class:`UnsavedFunction`."""
    if inspect.isfunction(scale_fn) or inspect.isbuiltin(scale_fn):
        name = keras.utils.get_registered_name(scale_fn)
        if keras.utils.get_registered_object(name) is scale_fn:
            return name
    elif hasattr(scale_fn, "get_config"):
        name = keras.utils.get_registered_name(type(scale_fn))
        if keras.utils.get_registered_object(name) is type(scale_fn):
            return {"class_name": name, "config": scale_fn.get_config()}
    return UnsavedFunction(scale_fn)


def _deserialize_scale_fn(value: Any) -> Callable:
    """Inverse of :func:`_serialize_scale_fn` (a callable is returned as it is)."""
    if isinstance(value, UnsavedFunction):
        return value.function
    if callable(value):
        return value
    found = None
    if isinstance(value, str):
        found = keras.utils.get_registered_object(value)
    elif isinstance(value, dict) and isinstance(value.get("class_name"), str):
        cls = keras.utils.get_registered_object(value["class_name"])
        if isinstance(cls, type) and hasattr(cls, "from_config"):
            found = cls.from_config(value.get("config", {}))
    if not callable(found):
        raise ValueError("CyclicalLearningRate config: `scale_fn` names no registered function. Register it with "
                         "@keras.utils.register_keras_serializable, or pass it in `custom_objects` (a file written "
                         "by TensorFlow Addons holds only a function's name, '<lambda>' for a lambda). "
                         f"Received: scale_fn={value!r}")
    return found


class CyclicalLearningRate(LearningRateSchedule):
    r"""A cyclical learning rate with any scale function (Smith, arXiv:1506.01186).

    The rate goes from ``initial_learning_rate`` (:math:`\eta_0`) up to
    ``maximal_learning_rate`` (:math:`\eta_1`) in ``step_size`` (:math:`s`)
    steps and back, scaled by :math:`f` (``scale_fn``). At step :math:`t`:

    .. math::
        \begin{align*}
        c &= \left\lfloor 1 + \frac{t}{2s} \right\rfloor, \qquad
        x = \left| \frac{t}{s} - 2c + 1 \right| \\
        \eta(t) &= \eta_0 + (\eta_1 - \eta_0)\,\max(0, 1 - x)\,f(u),
        \qquad u = c \text{ (scale\_mode="cycle") or } t \text{ ("iterations")}
        \end{align*}

    Everything is computed in the dtype of ``initial_learning_rate``
    (``float32`` for a Python number), as in TensorFlow Addons; the numbers are
    TFA's. Differences from TFA (all fixes): ``scale_fn`` receives :math:`t`
    in that dtype also with ``scale_mode="iterations"`` (TFA passes the raw
    step, which fails for ``float64`` variables), in a ``float64`` schedule
    the other Python numbers are not rounded to ``float32`` first, and the
    config keeps ``name`` and the dtype and holds no Python function.

    Saving: ``get_config()`` names ``scale_fn`` by its registered name, so a
    module-level function decorated with
    ``@keras.utils.register_keras_serializable(package=...)`` (or a
    registered callable object with ``get_config``) round-trips through
    configs, ``.h5`` and ``.keras`` files. A lambda or an unregistered
    function cannot be named in a file: ``get_config()`` holds it as an
    :class:`UnsavedFunction`, which ``from_config`` takes back (in-memory
    copies work, as with TFA's configs, which held the function), and saving
    the config to a file raises a ``ValueError`` naming ``scale_fn`` (TFA
    wrote the function's name, which no file could load back without
    ``custom_objects``). The three subclasses need no ``scale_fn``.

    Args:
        initial_learning_rate: :math:`\eta_0`, a finite number ``>= 0`` or a
            scalar float tensor (its dtype is the schedule's).
        maximal_learning_rate: :math:`\eta_1`, a finite number ``>= 0``.
        step_size: :math:`s`, steps from :math:`\eta_0` to :math:`\eta_1`, ``> 0``.
        scale_fn: :math:`f`, a callable of one tensor.
        scale_mode: ``"cycle"`` or ``"iterations"``: what ``scale_fn``
            receives. Defaults to ``"cycle"``.
        name: Name scope of the computation. Defaults to ``"CyclicalLearningRate"``.

    Example:

    >>> import optimizers
    >>> from optimizers.schedules import CyclicalLearningRate
    >>> schedule = CyclicalLearningRate(0.1, 0.5, step_size=4, scale_fn=lambda c: 1.0)
    >>> tuple(round(float(schedule(t)), 4) for t in (0, 2, 4, 6, 8))
    (0.1, 0.3, 0.5, 0.3, 0.1)
    """

    def __init__(self, initial_learning_rate: Any, maximal_learning_rate: Any, step_size: Any,
                 scale_fn: Callable, scale_mode: str = "cycle", name: str = "CyclicalLearningRate") -> None:
        super().__init__()
        _check_scalar("initial_learning_rate", initial_learning_rate)
        _check_scalar("maximal_learning_rate", maximal_learning_rate)
        _check_scalar("step_size", step_size, positive=True)
        if not callable(scale_fn):
            raise TypeError(f"`scale_fn` must be a callable of one tensor. Received: scale_fn={scale_fn!r}")
        if scale_mode not in SCALE_MODES:
            raise ValueError(f"`scale_mode` must be one of {SCALE_MODES}. Received: scale_mode={scale_mode!r}")
        if name is not None and not isinstance(name, str):
            raise TypeError(f"`name` must be a string. Received: name={name!r}")
        self.initial_learning_rate = initial_learning_rate
        self.maximal_learning_rate = maximal_learning_rate
        self.step_size = step_size
        self.scale_fn = scale_fn
        self.scale_mode = scale_mode
        self.name = name

    def _dtype(self) -> tf.DType:
        value = self.initial_learning_rate
        if tf.is_tensor(value) and value.dtype.is_floating:
            return value.dtype.base_dtype
        return tf.float32

    def __call__(self, step: Any) -> tf.Tensor:
        with tf.name_scope(self.name or type(self).__name__):
            dtype = self._dtype()
            low, high, size = (_in_dtype(v, dtype) for v in (self.initial_learning_rate,
                                                             self.maximal_learning_rate, self.step_size))
            t = tf.cast(step, dtype)
            cycle = tf.floor(1 + t / (2 * size))
            x = tf.abs(t / size - 2 * cycle + 1)
            scale = self.scale_fn(cycle if self.scale_mode == "cycle" else t)
            return low + (high - low) * tf.maximum(tf.cast(0, dtype), 1 - x) * scale

    def _base_config(self) -> dict[str, Any]:
        config = {"initial_learning_rate": _config_number(self.initial_learning_rate),
                  "maximal_learning_rate": _config_number(self.maximal_learning_rate),
                  "step_size": _config_number(self.step_size)}
        if self._dtype() != tf.float32:  # a float64 schedule stays one (TFA's config held the tensor itself)
            config["dtype"] = self._dtype().name
        return config

    def get_config(self) -> dict[str, Any]:
        """TFA's keys plus ``name``; ``scale_fn`` by its registered name (see the class docstring)."""
        return {**self._base_config(), "scale_fn": _serialize_scale_fn(self.scale_fn),
                "scale_mode": self.scale_mode, "name": self.name}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> CyclicalLearningRate:
        """Inverse of :meth:`get_config`; also reads TFA's configs (no ``name``). A ``dtype``
        key (written for a schedule not in float32) makes ``initial_learning_rate`` a tensor of it."""
        config = dict(config)
        if "dtype" in config:  # written for a schedule computed in another dtype than float32
            dtype = tf.as_dtype(config.pop("dtype"))
            config["initial_learning_rate"] = tf.constant(config["initial_learning_rate"], dtype)
        if "scale_fn" in config:
            config["scale_fn"] = _deserialize_scale_fn(config["scale_fn"])
        return cls(**config)


class TriangularCyclicalLearningRate(CyclicalLearningRate):
    r"""The triangular cyclical learning rate (Smith, arXiv:1506.01186): constant amplitude.

    :class:`CyclicalLearningRate` with :math:`f(u) = 1`:

    .. math::
        \eta(t) = \eta_0 + (\eta_1 - \eta_0)\,\max(0, 1 - x),
        \qquad x = \left| \frac{t}{s} - 2\left\lfloor 1 + \frac{t}{2s} \right\rfloor + 1 \right|

    Args:
        initial_learning_rate: :math:`\eta_0`, a finite number ``>= 0`` or a
            scalar float tensor (its dtype is the schedule's).
        maximal_learning_rate: :math:`\eta_1`, a finite number ``>= 0``.
        step_size: :math:`s`, steps from :math:`\eta_0` to :math:`\eta_1`, ``> 0``.
        scale_mode: ``"cycle"`` or ``"iterations"`` (no effect here, kept for
            TFA's signature). Defaults to ``"cycle"``.
        name: Defaults to ``"TriangularCyclicalLearningRate"``.

    Example:

    >>> from optimizers.schedules import TriangularCyclicalLearningRate
    >>> schedule = TriangularCyclicalLearningRate(0.1, 0.5, step_size=2)
    >>> tuple(round(float(schedule(t)), 4) for t in range(5))
    (0.1, 0.3, 0.5, 0.3, 0.1)
    """

    def __init__(self, initial_learning_rate: Any, maximal_learning_rate: Any, step_size: Any,
                 scale_mode: str = "cycle", name: str = "TriangularCyclicalLearningRate") -> None:
        super().__init__(initial_learning_rate, maximal_learning_rate, step_size, self._scale, scale_mode, name)

    @staticmethod
    def _scale(u: tf.Tensor) -> float:
        return 1.0

    def get_config(self) -> dict[str, Any]:
        return {**self._base_config(), "scale_mode": self.scale_mode, "name": self.name}


class Triangular2CyclicalLearningRate(CyclicalLearningRate):
    r"""The triangular2 cyclical learning rate (Smith, arXiv:1506.01186): amplitude halved each cycle.

    :class:`CyclicalLearningRate` with :math:`f(u) = 2^{-(u - 1)}`
    (with the default ``scale_mode="cycle"``, :math:`u = c`, the cycle number from 1):

    .. math::
        \eta(t) = \eta_0 + (\eta_1 - \eta_0)\,\max(0, 1 - x)\,\frac{1}{2^{\,u - 1}}

    Args:
        initial_learning_rate: :math:`\eta_0`, a finite number ``>= 0`` or a
            scalar float tensor (its dtype is the schedule's).
        maximal_learning_rate: :math:`\eta_1`, a finite number ``>= 0``.
        step_size: :math:`s`, steps from :math:`\eta_0` to :math:`\eta_1`, ``> 0``.
        scale_mode: ``"cycle"`` or ``"iterations"``. Defaults to ``"cycle"``.
        name: Defaults to ``"Triangular2CyclicalLearningRate"``.

    Example:

    >>> from optimizers.schedules import Triangular2CyclicalLearningRate
    >>> schedule = Triangular2CyclicalLearningRate(0.1, 0.5, step_size=2)
    >>> [round(float(schedule(t)), 4) for t in (2, 6, 10)]  # the peaks of cycles 1, 2, 3
    [0.5, 0.3, 0.2]
    """

    def __init__(self, initial_learning_rate: Any, maximal_learning_rate: Any, step_size: Any,
                 scale_mode: str = "cycle", name: str = "Triangular2CyclicalLearningRate") -> None:
        super().__init__(initial_learning_rate, maximal_learning_rate, step_size, self._scale, scale_mode, name)

    @staticmethod
    def _scale(u: tf.Tensor) -> tf.Tensor:
        return 1 / tf.pow(tf.cast(2.0, u.dtype), u - 1)

    def get_config(self) -> dict[str, Any]:
        return {**self._base_config(), "scale_mode": self.scale_mode, "name": self.name}


class ExponentialCyclicalLearningRate(CyclicalLearningRate):
    r"""The exponential-range cyclical learning rate (Smith, arXiv:1506.01186).

    :class:`CyclicalLearningRate` with :math:`f(u) = \gamma^{u}` (with the
    default ``scale_mode="iterations"``, :math:`u = t`, the step):

    .. math::
        \eta(t) = \eta_0 + (\eta_1 - \eta_0)\,\max(0, 1 - x)\,\gamma^{u}

    Args:
        initial_learning_rate: :math:`\eta_0`, a finite number ``>= 0`` or a
            scalar float tensor (its dtype is the schedule's).
        maximal_learning_rate: :math:`\eta_1`, a finite number ``>= 0``.
        step_size: :math:`s`, steps from :math:`\eta_0` to :math:`\eta_1`, ``> 0``.
        scale_mode: ``"cycle"`` or ``"iterations"``. Defaults to ``"iterations"``.
        gamma: :math:`\gamma`, a finite number ``> 0``. Defaults to ``1.0``.
        name: Defaults to ``"ExponentialCyclicalLearningRate"``.

    Example:

    >>> from optimizers.schedules import ExponentialCyclicalLearningRate
    >>> schedule = ExponentialCyclicalLearningRate(0.1, 0.5, step_size=2, gamma=0.5)
    >>> round(float(schedule(2)), 4)  # 0.1 + 0.4 * 1 * 0.5 ** 2
    0.2
    """

    def __init__(self, initial_learning_rate: Any, maximal_learning_rate: Any, step_size: Any,
                 scale_mode: str = "iterations", gamma: Any = 1.0,
                 name: str = "ExponentialCyclicalLearningRate") -> None:
        _check_scalar("gamma", gamma, positive=True)
        self.gamma = gamma
        super().__init__(initial_learning_rate, maximal_learning_rate, step_size, self._scale, scale_mode, name)

    def _scale(self, u: tf.Tensor) -> tf.Tensor:
        return tf.pow(_in_dtype(self.gamma, u.dtype), u)  # as TFA's ``gamma ** u``

    def get_config(self) -> dict[str, Any]:
        return {**self._base_config(), "scale_mode": self.scale_mode, "gamma": _config_number(self.gamma),
                "name": self.name}


for _cls in (CyclicalLearningRate, TriangularCyclicalLearningRate, Triangular2CyclicalLearningRate,
             ExponentialCyclicalLearningRate):
    config_lib.register(_cls)
