r"""Decoupled weight decay, a piece of the template usable by any optimizer.

Two rules, applied to each decayed variable *before* the optimizer's update:

.. math::

    \text{default (TensorFlow Addons):}\quad & \theta \leftarrow \theta - \lambda_t\,\theta \\
    \text{scale\_weight\_decay\_by\_lr=True (Keras 3, PyTorch, optax):}\quad
        & \theta \leftarrow \theta - \eta_t\,\lambda_t\,\theta

:math:`\lambda_t` is ``weight_decay`` (float, tensor, callable or schedule,
evaluated at the step) and :math:`\eta_t` the learning rate. A sparse step
decays only the rows it touches. Variables with an updater are never decayed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

__all__ = ["DecoupledWeightDecay"]


class DecoupledWeightDecay:
    """Which variables decay, and by how much; held by ``CustomOptimizerV2``.

    Args:
        weight_decay: :math:`\\lambda` (the value is kept by the optimizer as a
            hyperparameter; here it is only checked for presence).
        exclude_from_weight_decay: Regexes searched in ``var.name``.
        scale_by_lr: Multiply the decay by the learning rate.
    """

    def __init__(self, weight_decay: Any, exclude_from_weight_decay: Sequence[str] | None = None,
                 scale_by_lr: bool = False) -> None:
        if exclude_from_weight_decay is None:
            exclude_from_weight_decay = []
        if isinstance(exclude_from_weight_decay, str) or not all(
                isinstance(p, str) for p in exclude_from_weight_decay):
            raise TypeError("`exclude_from_weight_decay` must be a list of regex strings. "
                            f"Received: exclude_from_weight_decay={exclude_from_weight_decay!r}")
        for pattern in exclude_from_weight_decay:
            try:
                re.compile(pattern)
            except re.error as error:
                raise ValueError(f"`exclude_from_weight_decay` holds an invalid regex {pattern!r} ({error}). "
                                 f"Received: exclude_from_weight_decay={exclude_from_weight_decay!r}") from None
        if not isinstance(scale_by_lr, bool):
            raise TypeError(f"`scale_weight_decay_by_lr` must be a bool. Received: "
                            f"scale_weight_decay_by_lr={scale_by_lr!r}")
        self.exclude_from_weight_decay = list(exclude_from_weight_decay)
        self.scale_by_lr = scale_by_lr

    def applies_to(self, var_name: str) -> bool:
        """Whether a variable named ``var_name`` is decayed."""
        return not any(re.search(pattern, var_name) for pattern in self.exclude_from_weight_decay)

    def prepare(self, coefficients: dict[str, tf.Tensor]) -> None:
        """Add ``"decay"``, the factor that multiplies the variable, to ``coefficients``."""
        decay = coefficients["weight_decay"]
        if self.scale_by_lr:
            decay = decay * coefficients["lr_t"]
        coefficients["decay"] = decay

    @staticmethod
    def decay_dense(var: tf.Variable, coefficients: dict[str, tf.Tensor]) -> Any:
        return var.assign_sub(coefficients["decay"] * var, read_value=False)

    @staticmethod
    def decay_sparse(var: tf.Variable, indices: tf.Tensor, coefficients: dict[str, tf.Tensor]) -> Any:
        rows = tf.gather(var, indices)
        return var.scatter_sub(tf.IndexedSlices(coefficients["decay"] * rows, indices))

    def get_config(self) -> dict[str, Any]:
        return {"exclude_from_weight_decay": self.exclude_from_weight_decay or None,
                "scale_weight_decay_by_lr": self.scale_by_lr}
