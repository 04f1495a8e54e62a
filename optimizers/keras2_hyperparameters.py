"""Hyperparameters kept as OptimizerV2 keeps them: in its ``_hyper`` dictionary, as variables
once the optimizer creates its weights (saved in every Keras 2 format and in checkpoints), with
``learning_rate`` computed as Keras 2 computes it (schedules see the step in the variable's
dtype; the legacy ``decay`` argument applies).

The template (:class:`~optimizers.CustomOptimizerV2`) stores its hyperparameters here; the
declarations, range checks and evaluation at a step are :class:`~optimizers.hyperparameters.Hyperparameters`'.
"""

from __future__ import annotations

from numbers import Real
from typing import Any

import tensorflow as tf

from optimizers import config as config_lib
from optimizers.hyperparameters import Hyperparameters, check_epsilon, evaluate
from optimizers.keras_compat import hyper_dict, hypers_created, initial_decay, keras, set_hyper

__all__ = ["OptimizerV2Hyperparameters", "constructor_epsilon"]


def constructor_epsilon(value: Any) -> float:
    """A constructor's ``epsilon`` as Keras 2's and TensorFlow Addons' constructors read it: ``0``
    or ``None`` is ``keras.backend.epsilon()`` (``1e-7`` unless set); any other value is checked by
    :func:`check_epsilon`, and so is a value assigned later."""
    if value is None or (isinstance(value, Real) and not isinstance(value, bool) and value == 0):
        value = keras.backend.epsilon()
    check_epsilon(value)
    return value


class OptimizerV2Hyperparameters(Hyperparameters):
    """:class:`~optimizers.hyperparameters.Hyperparameters` stored as an OptimizerV2's (a mixin
    of an OptimizerV2 subclass)."""

    def _store_hyperparameter(self, name: str, value: Any) -> None:
        set_hyper(self, name, value)

    def _read_hyperparameter(self, name: str) -> Any:
        return hyper_dict(self)[name]

    def _set_hyper(self, name: str, value: Any) -> None:
        self._check_hyperparameter(name, value)
        hypers = hyper_dict(self)
        if callable(value) and not tf.is_tensor(value) and hypers_created(self) and name in hypers:
            hypers[name] = value  # OptimizerV2 would try to assign a callable to the variable
            return
        super()._set_hyper(name, value)

    def hyperparameter(self, name: str, dtype: tf.DType = tf.float32, iterations: Any = None) -> tf.Tensor:
        """The value of hyperparameter ``name`` as a ``dtype`` tensor at
        ``iterations`` (default: this optimizer's). ``learning_rate`` is
        computed as Keras 2 does: schedules see the step in ``dtype``, legacy
        ``decay`` applies."""
        if iterations is None:
            iterations = self.iterations
        if name != "learning_rate":
            return super().hyperparameter(name, dtype, iterations)
        local_step = tf.cast(iterations, dtype)
        raw = self._read_hyperparameter(name)
        lr = tf.cast(self._checked(name, raw, evaluate(raw, local_step)), dtype)
        if initial_decay(self) > 0.0:
            lr = lr / (1.0 + tf.cast(initial_decay(self), dtype) * local_step)
        return lr

    def _config_value(self, pname: str) -> Any:
        if pname in hyper_dict(self):
            return self._serialize_hyperparameter(pname)
        return super()._config_value(pname)

    def _serialize_hyperparameter(self, hyperparameter_name: str) -> Any:
        return config_lib.serialize_hyperparameter(hyper_dict(self)[hyperparameter_name])
