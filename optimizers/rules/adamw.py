"""AdamW: Adam with decoupled weight decay, TensorFlow Addons' ``AdamW`` successor.

The rule is :class:`~optimizers.Adam`'s; this class gives it TFA's signature
(``weight_decay`` first and required) and decays before each step.
"""

from __future__ import annotations

from typing import Any

from optimizers.hyperparameters import check_number
from optimizers.rules.adam import Adam

__all__ = ["AdamW"]


class AdamW(Adam):
    r"""Adam with decoupled weight decay (Loshchilov & Hutter, arXiv:1711.05101).

    Each step first decays the variable, then applies Adam (Kingma & Ba,
    arXiv:1412.6980) with :math:`\epsilon` outside the square root:

    .. math::
        \begin{align*}
        \theta &\leftarrow \theta - \lambda_t\,\theta
            && \text{default, TensorFlow Addons' rule} \\
        \theta &\leftarrow \theta - \eta_t\lambda_t\,\theta
            && \text{scale\_weight\_decay\_by\_lr=True (Keras 3, PyTorch, optax)} \\
        m &\leftarrow m + (1-\beta_1)(g - m), \qquad v \leftarrow v + (1-\beta_2)(g^2 - v) \\
        \theta &\leftarrow \theta - \eta_t\,\frac{\sqrt{1-\beta_2^t}}{1-\beta_1^t}\,
            \frac{m}{\sqrt{\hat v} + \epsilon},
            \qquad \hat v = v \text{ (AMSGrad: } \hat v \leftarrow \max(\hat v, v))
        \end{align*}

    Which decay rule? Keep the default to resume or reproduce a TensorFlow
    Addons run: the numbers are TFA's. With it, :math:`\lambda` is a fraction
    of the weights removed per step, independent of the learning rate, so a
    learning-rate schedule needs a matching ``weight_decay`` schedule (TFA's
    advice). For new work, ``scale_weight_decay_by_lr=True`` ties the decay to
    the learning rate (one schedule drives both) and matches the
    ``weight_decay`` values of papers and recipes written for PyTorch's or
    Keras 3's AdamW (typically ``1e-2`` to ``1e-1``; TFA-style values are
    ``lr`` times smaller).

    Sparse gradients (``tf.IndexedSlices``, e.g. from an embedding) are never
    turned into dense tensors, and only the touched rows are decayed. By
    default the moments of *every* row decay each step, as in Keras 2's and
    TFA's Adam, so the numbers equal theirs but a step costs a pass over the
    whole table. ``lazy=True`` updates only the touched rows' moments and
    weights (TFA's ``LazyAdam`` rule, plus the decay): a step's cost follows
    the touched rows, which suits large embedding tables.

    Differences from TFA (all fixes): ``decay_var_list`` given to
    :meth:`minimize` is honoured (TFA's ``minimize`` ignores it), and
    ``decay_var_list=[]`` decays nothing (TFA decays everything).

    Args:
        weight_decay: :math:`\lambda`: float, tensor, callable or
            ``LearningRateSchedule`` (evaluated at ``iterations``), ``>= 0``.
        learning_rate: :math:`\eta`: float, tensor, callable or schedule.
            Defaults to ``0.001``.
        beta_1: Decay of the first moment, in ``[0, 1)``. Defaults to ``0.9``.
        beta_2: Decay of the second moment, in ``[0, 1)``. Defaults to ``0.999``.
        epsilon: :math:`\epsilon`, a float ``> 0`` (``0`` or ``None`` means ``keras.backend.epsilon()``,
            as in Keras 2). Defaults to ``1e-7``.
        amsgrad: Use AMSGrad (Reddi et al., arXiv:1904.09237). Defaults to ``False``.
        name: Defaults to ``"AdamW"``.
        lazy: Keyword only. Sparse steps update only the touched rows' moments.
            Defaults to ``False``.
        **kwargs: ``exclude_from_weight_decay`` (regexes searched in
            ``var.name``), ``scale_weight_decay_by_lr``, ``clipnorm``,
            ``clipvalue``, ``global_clipnorm``, ``decay``, ``updaters``,
            ``jit_compile`` (see :class:`~optimizers.CustomOptimizerV2`).

    Example:

    >>> import tensorflow as tf
    >>> import optimizers
    >>> var = tf.Variable([1.0, -2.0])
    >>> opt = optimizers.AdamW(weight_decay=0.1, learning_rate=0.01)
    >>> _ = opt.apply_gradients([(tf.constant([0.5, 0.5]), var)])
    >>> [round(x, 5) for x in var.numpy().tolist()]  # 1 - 0.1 * 1 - 0.01, -2 + 0.2 - 0.01
    [0.89, -1.81]
    """

    def __init__(self, weight_decay: Any, learning_rate: Any = 0.001, beta_1: Any = 0.9, beta_2: Any = 0.999,
                 epsilon: float = 1e-7, amsgrad: bool = False, name: str = "AdamW", *, lazy: bool = False,
                 **kwargs: Any) -> None:
        check_number("weight_decay", weight_decay, low=0.0)
        super().__init__(learning_rate, beta_1, beta_2, epsilon, amsgrad, name, lazy=lazy,
                         weight_decay=weight_decay, **kwargs)
