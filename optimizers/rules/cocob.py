"""COCOB-Backprop: learning-rate-free coin betting; TensorFlow Addons' ``COCOB`` successor."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import tensorflow as tf

from optimizers.hyperparameters import check_bool, check_constant
from optimizers.rule import library_kernel
from optimizers.slots import SlotSpec
from optimizers.template import CustomOptimizerV2

__all__ = ["COCOB"]

SLOTS = ("lr", "grad_norm_sum", "gradients_sum", "tilde_w", "reward")  # TFA's names (checkpoints)


def _initial_lr(shape, dtype):
    return tf.fill(shape, tf.constant(1e-8, dtype))


class COCOB(CustomOptimizerV2):
    r"""COCOB-Backprop (Orabona & Tommasi, arXiv:1705.07795), TensorFlow Addons' numbers.

    No learning rate: each weight bets on the sign of its gradients. Per
    element, with :math:`\theta_1` the weight's value at its first step,
    :math:`L` the largest :math:`|g|` seen (from ``1e-8``), :math:`G` the sum
    of :math:`|g|`, :math:`S` the sum of :math:`g` and :math:`R` the reward:

    .. math::
        \begin{align*}
        L &\leftarrow \max(L, |g|), \qquad G \leftarrow G + |g|, \qquad S \leftarrow S + g \\
        R &\leftarrow \max\bigl(R - g\,(\theta - \theta_1),\ 0\bigr) \\
        \theta &\leftarrow \theta_1 - \frac{S}{L\,\max(G + L,\ \alpha L)}\,(R + L)
        \end{align*}

    The slot ``tilde_w`` holds :math:`\theta - \theta_1` (TFA's slot names:
    ``lr`` is :math:`L`, ``grad_norm_sum`` :math:`G`, ``gradients_sum``
    :math:`S`, ``reward`` :math:`R`; created variable by variable, as TFA
    does, so a TFA ``.h5`` file loads). A sparse gradient (TFA has no sparse
    path) updates only its rows: on the others the rule above, with
    :math:`g = 0`, changes nothing. A dense step on this process's CPU, in
    float32 or float64, is one kernel of this library (``optimizers.kernels``)
    with TFA's bits, one pass over memory; elsewhere the steps are the plain
    ops above, compiled with XLA by default.

    Fix over TFA: ``from_config(get_config())`` works after training (TFA's
    config then holds ``alpha`` as a numpy integer, which its constructor
    refuses); ours also builds from such a TFA config.

    Args:
        alpha: :math:`\alpha \ge 1`, a float: bounds the first steps (larger
            is more cautious). Defaults to ``100``, the paper's value.
        use_locking: Accepted for TFA's signature; no effect (TensorFlow 2's
            resource updates). Defaults to ``False``.
        name: Defaults to ``"COCOB"``.
        **kwargs: ``clipnorm``, ``clipvalue``, ``global_clipnorm``,
            ``updaters``, ``jit_compile`` (see :class:`~optimizers.CustomOptimizerV2`).

    Example:

    >>> import tensorflow as tf
    >>> from optimizers.rules.cocob import COCOB
    >>> var = tf.Variable([1.0, -1.0])
    >>> _ = COCOB().apply_gradients([(tf.constant([0.5, -2.0]), var)])
    >>> [round(x, 4) for x in var.numpy().tolist()]  # first step: theta_1 - sign(g) / alpha
    [0.99, -0.99]
    """

    weight_decay_placement = "none"
    slot_order = "variable"  # TFA creates one variable's five slots, then the next's: .h5 files keep that order
    decay_variable = False  # TFA's COCOB checkpoints have no `decay` variable

    def __init__(self, alpha: float = 100, use_locking: bool = False, name: str = "COCOB", **kwargs: Any) -> None:
        alpha = alpha.item() if isinstance(alpha, np.generic) else alpha
        check_constant("alpha", alpha, low=1.0)
        check_bool("use_locking", use_locking)
        super().__init__(name, **kwargs)
        self.add_option("alpha", alpha, functools.partial(check_constant, "alpha", low=1.0))
        self.add_option("use_locking", use_locking, functools.partial(check_bool, "use_locking"))

    def slot_specs(self, var: tf.Variable) -> list:
        return [SlotSpec("lr", _initial_lr)] + list(SLOTS[1:])

    def prepare(self, dtype: tf.DType, coefficients: dict) -> None:
        coefficients["alpha"] = tf.constant(self.alpha, dtype)

    def dense_kernel(self, var, options):
        """The dense step as one kernel with TFA's bits (``optimizers.kernels``), where it is built
        and ``var`` is on this process's CPU, outside XLA."""
        return library_kernel(self, COCOB, ("prepare", "update_dense", "_step"), var, "FusedApplyCocob",
                              self._kernel_step)

    @staticmethod
    def _kernel_step(op, grad, var, slots, c):
        return op(var=var.handle, alpha=c["alpha"], grad=grad, **{name: slots[name].handle for name in SLOTS})

    @staticmethod
    def _step(grad, var, state, alpha):
        """New (variable, slots) from the old ones: whole tensors, or rows."""
        lr, grad_norm_sum, gradients_sum, tilde_w, reward = (state[name] for name in SLOTS)
        lr = tf.maximum(lr, tf.abs(grad))
        gradients_sum = gradients_sum + grad
        grad_norm_sum = grad_norm_sum + tf.abs(grad)
        reward = tf.maximum(reward - grad * tilde_w, 0)
        new_w = -gradients_sum / (lr * tf.maximum(grad_norm_sum + lr, alpha * lr)) * (reward + lr)
        return var - tilde_w + new_w, dict(zip(SLOTS, (lr, grad_norm_sum, gradients_sum, new_w, reward)))

    def update_dense(self, grad, var, slots, coefficients):
        new_var, new_slots = self._step(grad, var, slots, coefficients["alpha"])
        return tf.group([slots[name].assign(value) for name, value in new_slots.items()] + [var.assign(new_var)])

    def update_sparse(self, grad, var, indices, slots, coefficients):
        rows = {name: tf.gather(slot, indices) for name, slot in slots.items()}
        new_var, new_slots = self._step(grad, tf.gather(var, indices), rows, coefficients["alpha"])
        writes = [slots[name].scatter_update(tf.IndexedSlices(value, indices)) for name, value in new_slots.items()]
        return tf.group(writes + [var.scatter_update(tf.IndexedSlices(new_var, indices))])
