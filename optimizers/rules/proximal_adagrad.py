"""Proximal Adagrad (FOBOS with Adagrad's step sizes); TensorFlow Addons' ``ProximalAdagrad`` successor."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import tensorflow as tf

from optimizers.hyperparameters import check_constant
from optimizers.rule import library_kernel
from optimizers.slots import SlotSpec
from optimizers.template import CustomOptimizerV2

__all__ = ["ProximalAdagrad"]


class ProximalAdagrad(CustomOptimizerV2):
    r"""Proximal Adagrad (Duchi & Singer, "Efficient Learning using Forward-Backward Splitting",
    NeurIPS 2009), TensorFlow Addons' (and TensorFlow's ``ApplyProximalAdagrad``) numbers.

    An Adagrad step, then the proximal step of
    :math:`\ell_1\|\theta\|_1 + \frac{\ell_2}{2}\|\theta\|_2^2` (elementwise):

    .. math::
        \begin{align*}
        a &\leftarrow a + g^2, \qquad \gamma = \eta_t / \sqrt{a} \\
        \theta &\leftarrow \frac{\operatorname{sign}(\theta - \gamma g)\,
            \max\bigl(|\theta - \gamma g| - \gamma\,\ell_1,\ 0\bigr)}{1 + \gamma\,\ell_2}
        \end{align*}

    A sparse gradient updates only its rows (accumulator and weights; the
    other rows are not shrunk), as in TFA. Fix over TFA:
    ``from_config(get_config())`` works after training (TFA's config then
    holds numpy floats, which its constructor refuses); ours also builds from
    such a TFA config. A dense step on this process's CPU, in float32 or
    float64, is one kernel of this library (``optimizers.kernels``) with
    TFA's bits, one pass over memory; elsewhere the steps are the plain ops of
    ``_step``, compiled with XLA by default (equal within float rounding).

    Args:
        learning_rate: :math:`\eta`: float, tensor, callable or schedule.
            Defaults to ``0.001``.
        initial_accumulator_value: The starting value of :math:`a`, a float
            ``>= 0``. Defaults to ``0.1``.
        l1_regularization_strength: :math:`\ell_1 \ge 0`: float, tensor,
            callable or schedule. Defaults to ``0.0``.
        l2_regularization_strength: :math:`\ell_2 \ge 0`: float, tensor,
            callable or schedule. Defaults to ``0.0``.
        name: Defaults to ``"ProximalAdagrad"``.
        **kwargs: ``clipnorm``, ``clipvalue``, ``global_clipnorm``, ``decay``,
            ``updaters``, ``jit_compile`` (see :class:`~optimizers.CustomOptimizerV2`).

    Example:

    >>> import tensorflow as tf
    >>> from optimizers.rules.proximal_adagrad import ProximalAdagrad
    >>> var = tf.Variable([1.0, 0.52])
    >>> opt = ProximalAdagrad(learning_rate=0.5, initial_accumulator_value=0.0, l1_regularization_strength=0.1)
    >>> _ = opt.apply_gradients([(tf.constant([1.0, 1.0]), var)])
    >>> [round(x, 4) for x in var.numpy().tolist()]  # gamma = 0.5: 1 - 0.5 - 0.05, and 0.52 - 0.5 shrunk to 0
    [0.45, 0.0]
    """

    decay_variable = False  # TFA's checkpoints have no `decay` variable
    weight_decay_placement = "none"

    def __init__(self, learning_rate: Any = 0.001, initial_accumulator_value: float = 0.1,
                 l1_regularization_strength: Any = 0.0, l2_regularization_strength: Any = 0.0,
                 name: str = "ProximalAdagrad", **kwargs: Any) -> None:
        if isinstance(initial_accumulator_value, np.generic):
            initial_accumulator_value = initial_accumulator_value.item()
        check_constant("initial_accumulator_value", initial_accumulator_value, low=0.0)
        super().__init__(name, **kwargs)
        self.add_hyperparameter("learning_rate", learning_rate, low=0.0)
        self.add_hyperparameter("l1_regularization_strength", l1_regularization_strength, low=0.0)
        self.add_hyperparameter("l2_regularization_strength", l2_regularization_strength, low=0.0)
        self.add_option("initial_accumulator_value", initial_accumulator_value,
                        functools.partial(check_constant, "initial_accumulator_value", low=0.0))

    def slot_specs(self, var: tf.Variable) -> list:
        value = self.initial_accumulator_value
        return [SlotSpec("accumulator", lambda shape, dtype: tf.fill(shape, tf.constant(value, dtype)))]

    def dense_kernel(self, var, options):
        """The dense step as one kernel with TFA's bits (``optimizers.kernels``), where it is built
        and ``var`` is on this process's CPU, outside XLA."""
        return library_kernel(self, ProximalAdagrad, ("prepare", "update_dense", "_step"), var,
                              "FusedApplyProximalAdagrad", self._kernel_step)

    @staticmethod
    def _kernel_step(op, grad, var, slots, c):
        return op(var=var.handle, accumulator=slots["accumulator"].handle, lr=c["learning_rate"],
                  l1=c["l1_regularization_strength"], l2=c["l2_regularization_strength"], grad=grad)

    @staticmethod
    def _step(grad, var, accumulator, coefficients):
        """New (variable, accumulator): whole tensors, or rows."""
        accumulator = accumulator + tf.square(grad)
        gamma = coefficients["learning_rate"] * tf.math.rsqrt(accumulator)
        prox = var - grad * gamma
        l1, l2 = coefficients["l1_regularization_strength"], coefficients["l2_regularization_strength"]
        shrunk = tf.sign(prox) * tf.maximum(tf.abs(prox) - gamma * l1, 0)
        return tf.where(l1 > 0, shrunk, prox) / (1 + l2 * gamma), accumulator

    def update_dense(self, grad, var, slots, coefficients):
        new_var, accumulator = self._step(grad, var, slots["accumulator"], coefficients)
        return tf.group(slots["accumulator"].assign(accumulator), var.assign(new_var))

    def update_sparse(self, grad, var, indices, slots, coefficients):
        new_var, accumulator = self._step(grad, tf.gather(var, indices), tf.gather(slots["accumulator"], indices),
                                          coefficients)
        return tf.group(slots["accumulator"].scatter_update(tf.IndexedSlices(accumulator, indices)),
                        var.scatter_update(tf.IndexedSlices(new_var, indices)))
