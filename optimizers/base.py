"""OptimizerV2 plumbing shared by the rule template and the wrapper base.

Both :class:`~optimizers.CustomOptimizerV2` and
:class:`~optimizers.OptimizerWrapper` derive from :class:`OptimizerBase`,
which registers every subclass, checks the ``(gradient, variable)`` pairs it
is given, keeps slots indexed for the ``.keras``/SavedModel state
(``optimizers/saving.py``), and reads ``get_config`` from the constructor.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from optimizers import config as config_lib
from optimizers import saving
from optimizers.keras_compat import KERAS3_HINT, OptimizerV2, install_saving_hooks, is_keras3_object

__all__ = ["OptimizerBase", "check_grads_and_vars"]


def check_grads_and_vars(grads_and_vars: list) -> None:
    """Refuse what no step can apply, before anything changes."""
    for pair in grads_and_vars:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"`grads_and_vars` must hold (gradient, variable) pairs. Received: {pair!r}")
        grad, var = pair
        if is_keras3_object(var):
            raise TypeError(f"Received a Keras 3 variable: var={var!r}. {KERAS3_HINT}")
        if grad is None:
            continue
        if not isinstance(var, tf.Variable):
            raise TypeError(f"Only tf.Variable objects can be updated. Received: var={var!r}")
        if not var.dtype.base_dtype.is_floating:
            raise ValueError(f"Variable {var.name!r} has dtype {var.dtype.name}; optimizers update floating "
                             f"point variables only. Received: var={var!r}")
        grad_shape = grad.values.shape[1:] if isinstance(grad, tf.IndexedSlices) else grad.shape
        var_shape = var.shape[1:] if isinstance(grad, tf.IndexedSlices) else var.shape
        if not grad_shape.is_compatible_with(var_shape):
            raise ValueError(f"The gradient of variable {var.name!r} (shape {var.shape}) has an incompatible "
                             f"shape. Received: grad={grad!r}")


class OptimizerBase(OptimizerV2):
    """Registration, slot index and state saving, config from the signature."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Register every subclass, so ``load_model`` needs no ``custom_objects``."""
        super().__init_subclass__(**kwargs)
        config_lib.register(cls)

    def add_slot(self, var: tf.Variable, slot_name: str, initializer: Any = "zeros", shape: Any = None) -> Any:
        """OptimizerV2's ``add_slot``; a slot loaded from ``.keras`` or a SavedModel
        starts from its loaded value (see ``optimizers/saving.py``)."""
        loaded = saving.initial_slot_value(self, var, slot_name)
        if loaded is not None:
            initializer = lambda shape, dtype: tf.constant(loaded, dtype)  # noqa: E731
        slot = super().add_slot(var, slot_name, initializer, shape)
        saving.slot_index(self)[(var.name, slot_name)] = (var, slot)
        return slot

    def save_own_variables(self, store: Any) -> None:
        """Write ``iterations``, hyperparameters and slots (``.keras`` format)."""
        saving.save_own_variables(self, store)

    def load_own_variables(self, store: Any) -> None:
        """Read what :meth:`save_own_variables` wrote; slots are filled when created."""
        saving.load_own_variables(self, store)

    def get_config(self) -> dict[str, Any]:
        """Config built from the constructor's signature; no override needed."""
        config = super().get_config()
        config.update(config_lib.signature_config(self, self._config_value))
        return config

    def _config_value(self, pname: str) -> Any:
        return config_lib.attribute_value(self, pname)

    def __repr__(self) -> str:
        return f"<{type(self).__module__}.{type(self).__name__} name={self._name!r}: a Keras 2 (OptimizerV2) optimizer>"


install_saving_hooks(lambda obj: isinstance(obj, OptimizerBase), saving.record_restored_slot)
