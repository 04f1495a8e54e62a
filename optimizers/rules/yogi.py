"""Yogi: Adam with an additive second moment, TensorFlow Addons' ``Yogi`` successor."""

from __future__ import annotations

import functools
from numbers import Real
from typing import Any

import tensorflow as tf

from optimizers import slots as slots_lib
from optimizers.hyperparameters import check_number
from optimizers.rule import library_kernel
from optimizers.template import CustomOptimizerV2

__all__ = ["Yogi"]


def _check_activation(value: Any) -> None:
    if value not in ("sign", "tanh"):
        raise ValueError(f"`activation` must be 'sign' or 'tanh'. Received: activation={value!r}")


class Yogi(CustomOptimizerV2):
    r"""Yogi (Zaheer et al., NeurIPS 2018, "Adaptive Methods for Nonconvex Optimization",
    https://papers.nips.cc/paper/8186-adaptive-methods-for-nonconvex-optimization), TFA's numbers.

    :math:`v` moves towards :math:`g^2` by at most :math:`(1-\beta_2)g^2`, with
    :math:`s = \operatorname{sign}` or :math:`s(x) = \tanh(10x)`; then an
    optional proximal step for the l1/l2 penalties (:math:`\lambda_1, \lambda_2`):

    .. math::
        \begin{align*}
        m &\leftarrow \beta_1 m + (1-\beta_1)\,g \quad (m = g \text{ if } \beta_1 = 0), \qquad
            v \leftarrow v + (1-\beta_2)\,s(g^2 - v)\,g^2 \\
        \eta' &= \frac{\eta_t\sqrt{1-\beta_2^t}}{(1-\beta_1^t)(\sqrt v + \epsilon)}, \qquad
            u = \theta - \eta' m, \qquad
            \theta \leftarrow \frac{\operatorname{sign}(u)\max(|u| - \eta'\lambda_1,\, 0)}{1 + \eta'\lambda_2}
        \end{align*}

    A sparse step (TFA's rule): :math:`m` decays on every row, the touched rows
    get the gradient; :math:`v` and :math:`\theta` change on the touched rows only.
    Slots are created variable by variable (``v``, then ``m``), as TFA does, so
    ``get_weights()`` and ``.h5`` files line up with TFA's. A dense step on this
    process's CPU is one kernel of this library (``optimizers.kernels``; with
    :math:`\beta_1 > 0` and ``"sign"``) with TFA's bits; with ``jit_compile=False``
    every step has TFA's bits. Elsewhere the XLA dense step (the default) multiplies
    the last line through by :math:`\sqrt v + \epsilon` (one division, not two):
    equal within float rounding.

    Args:
        learning_rate: :math:`\eta`: float, tensor, callable or schedule. Defaults to ``0.01``.
        beta1: :math:`\beta_1`, in ``[0, 1)``; ``0.0`` keeps no ``m`` slot. Defaults to ``0.9``.
        beta2: :math:`\beta_2`, in ``[0, 1)``. Defaults to ``0.999``.
        epsilon: :math:`\epsilon`, ``>= 0``. Defaults to ``1e-3``.
        l1_regularization_strength: :math:`\lambda_1`, ``>= 0``. Defaults to ``0.0``.
        l2_regularization_strength: :math:`\lambda_2`, ``>= 0``. Defaults to ``0.0``.
        initial_accumulator_value: Starting value of :math:`v`, ``>= 0``. Defaults to ``1e-6``.
        activation: ``"sign"`` or ``"tanh"``. Defaults to ``"sign"``.
        name: Defaults to ``"Yogi"``.
        **kwargs: ``clipnorm``, ``clipvalue``, ``global_clipnorm``, ``decay``,
            ``weight_decay``, ``updaters``, ``jit_compile`` (see :class:`~optimizers.CustomOptimizerV2`).

    Example:

    >>> import tensorflow as tf
    >>> from optimizers.rules.yogi import Yogi
    >>> var = tf.Variable([1.0, -2.0])
    >>> _ = Yogi(learning_rate=0.1, epsilon=0.0, initial_accumulator_value=0.0).apply_gradients(
    ...     [(tf.constant([0.5, -0.5]), var)])
    >>> [round(x, 4) for x in var.numpy().tolist()]  # the first step moves each weight by lr
    [0.9, -1.9]
    """

    slot_order = "variable"  # TFA's order of optimizer weights (.h5 files keep it)

    def __init__(self, learning_rate: Any = 0.01, beta1: Any = 0.9, beta2: Any = 0.999, epsilon: Any = 1e-3,
                 l1_regularization_strength: Any = 0.0, l2_regularization_strength: Any = 0.0,
                 initial_accumulator_value: float = 1e-6, activation: str = "sign", name: str = "Yogi",
                 **kwargs: Any) -> None:
        check_number("beta1", beta1, low=0.0, high=1.0, high_inclusive=False)
        check_number("beta2", beta2, low=0.0, high=1.0, high_inclusive=False)
        super().__init__(name, **kwargs)
        self.add_hyperparameter("learning_rate", learning_rate, low=0.0)
        # TFA's hyperparameter (checkpoint) names are beta_1, beta_2; its arguments beta1, beta2.
        self.add_hyperparameter("beta_1", beta1, low=0.0, high=1.0, high_inclusive=False)
        self.add_hyperparameter("beta_2", beta2, low=0.0, high=1.0, high_inclusive=False)
        self.add_hyperparameter("epsilon", epsilon, low=0.0)
        self.add_hyperparameter("l1_regularization_strength", l1_regularization_strength, low=0.0)
        self.add_hyperparameter("l2_regularization_strength", l2_regularization_strength, low=0.0)
        self.add_option("initial_accumulator_value", initial_accumulator_value,
                        functools.partial(check_number, "initial_accumulator_value", low=0.0))
        self.add_option("activation", activation, _check_activation)
        self._has_m = not (isinstance(beta1, Real) and float(beta1) == 0.0)  # TFA: no m slot for beta1 == 0

    beta1 = property(lambda self: self._serialize_hyperparameter("beta_1"),
                     lambda self, value: setattr(self, "beta_1", value))
    beta2 = property(lambda self: self._serialize_hyperparameter("beta_2"),
                     lambda self, value: setattr(self, "beta_2", value))

    def slot_specs(self, var):
        value = self.initial_accumulator_value  # converted straight to the dtype, as TFA's constant initializer
        v = slots_lib.SlotSpec("v", lambda shape, dtype: tf.fill(
            shape, tf.cast(value, dtype) if tf.is_tensor(value) else tf.constant(value, dtype)))
        return [v, "m"] if self._has_m else [v]

    def prepare(self, dtype, coefficients):
        step, beta_1, beta_2 = coefficients["step"], coefficients["beta_1"], coefficients["beta_2"]
        coefficients["alpha"] = coefficients["learning_rate"] * tf.sqrt(1 - tf.pow(beta_2, step)) / (
            1 - tf.pow(beta_1, step))

    def dense_kernel(self, var, options):
        """The dense step as one kernel with TFA's bits (``optimizers.kernels``), where it is built
        and ``var`` is on this process's CPU, outside XLA; with an ``m`` slot and ``"sign"``."""
        if not self._has_m or self.activation != "sign":
            return None
        return library_kernel(self, Yogi, ("prepare", "update_dense", "_new_v", "_new_var"), var, "FusedApplyYogi",
                              self._kernel_step)

    @staticmethod
    def _kernel_step(op, grad, var, slots, c):
        return op(var=var.handle, v=slots["v"].handle, m=slots["m"].handle, alpha=c["alpha"], beta1=c["beta_1"],
                  beta2=c["beta_2"], epsilon=c["epsilon"], l1=c["l1_regularization_strength"],
                  l2=c["l2_regularization_strength"], grad=grad)

    def _new_v(self, grad2, v, coefficients):
        delta = grad2 - v
        s = tf.sign(delta) if self.activation == "sign" else tf.tanh(10 * delta)
        return v + (1 - coefficients["beta_2"]) * s * grad2

    def _new_var(self, var, m, v, coefficients, fast=False):
        if fast:  # the same step multiplied through by d = sqrt(v) + eps: one division per element, not two
            d, alpha = tf.sqrt(v) + coefficients["epsilon"], coefficients["alpha"]
            ud, l1 = var * d - alpha * m, coefficients["l1_regularization_strength"] * alpha
            shrunk = (ud - l1 * tf.sign(ud)) / (d + coefficients["l2_regularization_strength"] * alpha)
            return shrunk * tf.cast(tf.abs(ud) > l1, var.dtype)
        rate = coefficients["alpha"] / (tf.sqrt(v) + coefficients["epsilon"])
        u = var - rate * m
        l1 = coefficients["l1_regularization_strength"] * rate
        shrunk = (u - l1 * tf.sign(u)) / (1 + coefficients["l2_regularization_strength"] * rate)
        return shrunk * tf.cast(tf.abs(u) > l1, var.dtype)  # exactly u when l1 = l2 = 0

    def update_dense(self, grad, var, slots, coefficients):
        m = grad
        if self._has_m:
            m = slots["m"] * coefficients["beta_1"] + grad * (1 - coefficients["beta_1"])
        v = self._new_v(grad * grad, slots["v"], coefficients)
        new_var = self._new_var(var, m, v, coefficients, fast=self.jit_compile)
        if self._has_m:
            slots["m"].assign(m)
        slots["v"].assign(v)
        return var.assign(new_var)

    def update_sparse(self, grad, var, indices, slots, coefficients):
        writes, m_rows = [], grad
        if self._has_m:
            m = slots["m"]
            m.assign(m * coefficients["beta_1"])
            m_rows = tf.gather(m, indices) + grad * (1 - coefficients["beta_1"])
            writes.append(m.scatter_update(tf.IndexedSlices(m_rows, indices)))
        v_rows = self._new_v(grad * grad, tf.gather(slots["v"], indices), coefficients)
        writes.append(slots["v"].scatter_update(tf.IndexedSlices(v_rows, indices)))
        new_rows = self._new_var(tf.gather(var, indices), m_rows, v_rows, coefficients)
        with tf.control_dependencies(writes):
            return var.scatter_update(tf.IndexedSlices(new_rows, indices))
