"""SGD (momentum, Nesterov) on the template: the rule SGDW builds on."""

from __future__ import annotations

import functools
from typing import Any

import tensorflow as tf

from optimizers.hyperparameters import check_bool
from optimizers.rule import kernel_if_unchanged
from optimizers.template import CustomOptimizerV2

__all__ = ["SGD"]


class SGD(CustomOptimizerV2):
    r"""Stochastic gradient descent with momentum, Keras 2's numbers.

    .. math::
        \begin{align*}
        u &\leftarrow \mu\,u - \eta_t\,g \\
        \theta &\leftarrow \theta + u
            \qquad \text{(Nesterov: } \theta \leftarrow \theta + \mu\,u - \eta_t\,g)
        \end{align*}

    With ``momentum=0`` (a number) there is no velocity slot and the step is
    :math:`\theta \leftarrow \theta - \eta_t g`, as in Keras 2. A sparse
    gradient updates only its rows, velocity included. A dense step is
    TensorFlow's fused kernel, the one Keras 2's SGD runs (after the weight
    decay, if any): the same bits, at its speed; see
    :meth:`~optimizers.UpdateRule.dense_kernel` for when a compiled step fuses
    more into one pass instead.

    Args:
        learning_rate: :math:`\eta`: float, tensor, callable or schedule.
            Defaults to ``0.01``.
        momentum: :math:`\mu`, in ``[0, 1]``. Defaults to ``0.0``.
        nesterov: Use Nesterov momentum. Defaults to ``False``.
        name: Defaults to ``"SGD"``.
        **kwargs: ``weight_decay``, ``exclude_from_weight_decay``,
            ``scale_weight_decay_by_lr``, ``clipnorm``, ``clipvalue``,
            ``global_clipnorm``, ``decay``, ``updaters``, ``jit_compile`` (see
            :class:`~optimizers.CustomOptimizerV2`).

    Example:

    >>> import tensorflow as tf
    >>> import optimizers
    >>> var = tf.Variable([1.0, -2.0])
    >>> _ = optimizers.SGD(learning_rate=0.5).apply_gradients([(tf.constant([0.2, 0.2]), var)])
    >>> [round(x, 5) for x in var.numpy().tolist()]  # 1 - 0.5 * 0.2, -2 - 0.5 * 0.2
    [0.9, -2.1]
    """

    def __init__(self, learning_rate: Any = 0.01, momentum: Any = 0.0, nesterov: bool = False, name: str = "SGD",
                 **kwargs: Any) -> None:
        check_bool("nesterov", nesterov)
        super().__init__(name, **kwargs)
        self.add_hyperparameter("learning_rate", learning_rate, low=0.0)
        self.add_hyperparameter("momentum", momentum, low=0.0, high=1.0)
        self.add_option("nesterov", nesterov, functools.partial(check_bool, "nesterov"))
        # Keras 2 keeps a velocity slot only when momentum may be non-zero (checkpoints depend on it).
        self._has_momentum = tf.is_tensor(momentum) or callable(momentum) or momentum > 0

    def slot_specs(self, var: tf.Variable) -> list[str]:
        return ["momentum"] if self._has_momentum else []

    def _velocity_step(self, velocity, grad, coefficients):
        """(new velocity, the variable's increment)."""
        mu, lr = coefficients["momentum"], coefficients["learning_rate"]
        velocity = velocity * mu - lr * grad
        return velocity, (velocity * mu - lr * grad if self.nesterov else velocity)

    def dense_kernel(self, var, options):
        """TensorFlow's fused SGD kernels (Keras 2's SGD runs them): this rule's dense step,
        exactly, when a subclass changes none of it."""
        return kernel_if_unchanged(self, SGD, ("prepare", "update_dense", "_velocity_step"), var, self._fused_step)

    def _fused_step(self, grad, var, slots, coefficients):
        if not self._has_momentum:
            return tf.raw_ops.ResourceApplyGradientDescent(var=var.handle, alpha=coefficients["learning_rate"],
                                                           delta=grad)
        return tf.raw_ops.ResourceApplyKerasMomentum(var=var.handle, accum=slots["momentum"].handle,
                                                     lr=coefficients["learning_rate"], grad=grad,
                                                     momentum=coefficients["momentum"], use_nesterov=self.nesterov)

    def update_dense(self, grad, var, slots, coefficients):
        if not self._has_momentum:
            return var.assign_sub(coefficients["learning_rate"] * grad)
        velocity, increment = self._velocity_step(slots["momentum"], grad, coefficients)
        with tf.control_dependencies([slots["momentum"].assign(velocity)]):
            return var.assign_add(increment)

    def update_sparse(self, grad, var, indices, slots, coefficients):
        if not self._has_momentum:
            return var.scatter_sub(tf.IndexedSlices(coefficients["learning_rate"] * grad, indices))
        slot = slots["momentum"]
        velocity, increment = self._velocity_step(tf.gather(slot, indices), grad, coefficients)
        with tf.control_dependencies([slot.scatter_update(tf.IndexedSlices(velocity, indices))]):
            return var.scatter_add(tf.IndexedSlices(increment, indices))
