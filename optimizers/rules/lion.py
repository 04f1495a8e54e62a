"""Lion: the sign of an interpolated momentum, with Keras 3's ``Lion`` signature and numbers."""

from __future__ import annotations

import functools
from typing import Any

import tensorflow as tf

from optimizers.rule import library_kernel
from optimizers.template import CustomOptimizerV2

__all__ = ["Lion"]


class Lion(CustomOptimizerV2):
    r"""Lion, EvoLved Sign Momentum (Chen et al., arXiv:2302.06675), Keras 3's numbers.

    One slot, the momentum :math:`m`. Every weight moves by :math:`\pm\eta_t`;
    the decay (optional) is decoupled and, by default, scaled by the learning
    rate as in the paper and Keras 3:

    .. math::
        \begin{align*}
        c &= \beta_1 m + (1-\beta_1)\,g \\
        \theta &\leftarrow \theta - \eta_t\lambda_t\,\theta - \eta_t\operatorname{sign}(c)
            \qquad (\texttt{scale\_weight\_decay\_by\_lr=False: } \theta - \lambda_t\theta
            - \eta_t\operatorname{sign}(c)) \\
        m &\leftarrow \beta_2 m + (1-\beta_2)\,g
        \end{align*}

    On a CPU of this process, outside XLA, the dense step is one kernel with
    the bits of these operations, in one pass over memory.

    A sparse gradient (``tf.IndexedSlices``) takes the dense step with the
    gradient scattered into zeros, decay included: every row moves by the
    sign of its momentum anyway. The paper advises a learning rate 3-10x
    smaller than AdamW's and a weight decay 3-10x larger.

    Args:
        learning_rate: :math:`\eta`: float, tensor, callable or schedule.
            Defaults to ``0.001``.
        beta_1: :math:`\beta_1`, in ``(0, 1]`` (0 would be signSGD). Defaults to ``0.9``.
        beta_2: :math:`\beta_2`, in ``[0, 1]``. Defaults to ``0.99``.
        name: Defaults to ``"Lion"``.
        **kwargs: ``weight_decay`` (:math:`\lambda`, float, tensor, callable or
            schedule; ``None``, the default, for none), ``scale_weight_decay_by_lr``
            (defaults to ``True`` here), ``exclude_from_weight_decay``,
            ``clipnorm``, ``clipvalue``, ``global_clipnorm``, ``decay``,
            ``updaters``, ``jit_compile`` (see :class:`~optimizers.CustomOptimizerV2`).

    Example:

    >>> import tensorflow as tf
    >>> from optimizers.rules.lion import Lion
    >>> var = tf.Variable([1.0, -2.0])
    >>> _ = Lion(learning_rate=0.1).apply_gradients([(tf.constant([0.5, -0.5]), var)])
    >>> [round(x, 5) for x in var.numpy().tolist()]  # every weight moves by lr
    [0.9, -1.9]
    """

    weight_decay_placement = "inside"

    def __init__(self, learning_rate: Any = 0.001, beta_1: Any = 0.9, beta_2: Any = 0.99, name: str = "Lion",
                 **kwargs: Any) -> None:
        kwargs.setdefault("scale_weight_decay_by_lr", True)
        super().__init__(name, **kwargs)
        self.add_hyperparameter("learning_rate", learning_rate, low=0.0)
        self.add_hyperparameter("beta_1", beta_1, low=0.0, high=1.0, low_inclusive=False)
        self.add_hyperparameter("beta_2", beta_2, low=0.0, high=1.0)

    def slot_specs(self, var):
        return ["momentum"]

    def dense_kernel(self, var, options):
        """The dense step as one kernel with the bits of ``update_dense``'s ops (``optimizers.kernels``),
        where it is built and ``var`` is on this process's CPU, outside XLA."""
        step = functools.partial(self._kernel_step, bool(options.get("decayed")))
        return library_kernel(self, Lion, ("prepare", "update_dense"), var, "FusedApplyLion", step)

    @staticmethod
    def _kernel_step(decayed, op, grad, var, slots, c):
        decay = c["weight_decay_factor"] if decayed else tf.zeros([], var.dtype.base_dtype)
        return op(var=var.handle, momentum=slots["momentum"].handle, lr=c["learning_rate"], beta1=c["beta_1"],
                  beta2=c["beta_2"], weight_decay=decay, grad=grad, decayed=decayed)

    def update_dense(self, grad, var, slots, c):
        m, beta_1, beta_2 = slots["momentum"], c["beta_1"], c["beta_2"]
        step = c["learning_rate"] * tf.sign(m * beta_1 + grad * (1 - beta_1))
        m.assign(m * beta_2 + grad * (1 - beta_2))
        if c.get("decayed"):
            return var.assign(var - var * c["weight_decay_factor"] - step)
        return var.assign_sub(step)
