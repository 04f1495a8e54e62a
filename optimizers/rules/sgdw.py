"""SGDW: SGD (momentum, Nesterov) with decoupled weight decay, TensorFlow Addons' ``SGDW`` successor.

The rule is :class:`~optimizers.SGD`'s; this class gives it TFA's signature
(``weight_decay`` first and required) and decays before each step.
"""

from __future__ import annotations

from typing import Any

from optimizers.hyperparameters import check_number
from optimizers.rules.sgd import SGD

__all__ = ["SGDW"]


class SGDW(SGD):
    r"""SGD with momentum and decoupled weight decay (Loshchilov & Hutter, arXiv:1711.05101).

    Each step first decays the variable, then applies Keras 2's SGD:

    .. math::
        \begin{align*}
        \theta &\leftarrow \theta - \lambda_t\,\theta
            && \text{default, TensorFlow Addons' rule} \\
        \theta &\leftarrow \theta - \eta_t\lambda_t\,\theta
            && \text{scale\_weight\_decay\_by\_lr=True (Keras 3, PyTorch, optax)} \\
        u &\leftarrow \mu\,u - \eta_t\,g \\
        \theta &\leftarrow \theta + u
            \qquad \text{(Nesterov: } \theta \leftarrow \theta + \mu\,u - \eta_t\,g)
        \end{align*}

    With ``momentum=0`` (a number) there is no velocity slot and the step is
    :math:`\theta \leftarrow \theta - \eta_t g`, as in Keras 2. A sparse
    gradient updates (and decays) only its rows, velocity included.

    Which decay rule? The default reproduces TensorFlow Addons' numbers, with
    :math:`\lambda` independent of the learning rate (give it its own
    schedule); ``scale_weight_decay_by_lr=True`` is the decoupled rule of
    Keras 3, optax and PyTorch's AdamW, where one schedule drives both.
    (PyTorch's ``SGD(weight_decay=...)`` is an L2 penalty, not this.)

    Differences from TFA (all fixes): a sparse step with ``momentum=0``
    decays the touched rows (TFA skips the decay there), ``decay_var_list``
    given to :meth:`minimize` is honoured, and ``decay_var_list=[]`` decays
    nothing.

    Args:
        weight_decay: :math:`\lambda`: float, tensor, callable or
            ``LearningRateSchedule`` (evaluated at ``iterations``), ``>= 0``.
        learning_rate: :math:`\eta`: float, tensor, callable or schedule.
            Defaults to ``0.001``.
        momentum: :math:`\mu`, in ``[0, 1]``. Defaults to ``0.0``.
        nesterov: Use Nesterov momentum. Defaults to ``False``.
        name: Defaults to ``"SGDW"``.
        **kwargs: ``exclude_from_weight_decay``, ``scale_weight_decay_by_lr``,
            ``clipnorm``, ``clipvalue``, ``global_clipnorm``, ``decay``,
            ``updaters``, ``jit_compile`` (see :class:`~optimizers.CustomOptimizerV2`).

    Example:

    >>> import tensorflow as tf
    >>> import optimizers
    >>> var = tf.Variable([1.0, -2.0])
    >>> opt = optimizers.SGDW(weight_decay=0.1, learning_rate=0.5, momentum=0.9)
    >>> _ = opt.apply_gradients([(tf.constant([0.2, 0.2]), var)])
    >>> [round(x, 5) for x in var.numpy().tolist()]  # 1 - 0.1 * 1 - 0.5 * 0.2, -2 + 0.2 - 0.1
    [0.8, -1.9]
    """

    def __init__(self, weight_decay: Any, learning_rate: Any = 0.001, momentum: Any = 0.0, nesterov: bool = False,
                 name: str = "SGDW", **kwargs: Any) -> None:
        check_number("weight_decay", weight_decay, low=0.0)
        super().__init__(learning_rate, momentum, nesterov, name, weight_decay=weight_decay, **kwargs)
