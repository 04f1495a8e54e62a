"""Adan: adaptive Nesterov momentum, the authors' algorithm and defaults."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from optimizers.hyperparameters import check_epsilon, epsilon_in
from optimizers.template import CustomOptimizerV2

__all__ = ["Adan"]


class Adan(CustomOptimizerV2):
    r"""Adan, adaptive Nesterov momentum (Xie et al., arXiv:2208.06677, Algorithm 1).

    Nesterov momentum without a gradient at an extrapolated point: the
    gradient's change :math:`d = g - g_{prev}` (zero at the first step) stands
    in for the look-ahead. Four slots: the moments :math:`m, v, n` and the
    previous gradient. At step :math:`t`, with :math:`\hat x = x / (1-\beta^t)`
    for each moment's own :math:`\beta`:

    .. math::
        \begin{align*}
        m &\leftarrow \beta_1 m + (1-\beta_1)\,g, \qquad
        v \leftarrow \beta_2 v + (1-\beta_2)\,d, \qquad
        n \leftarrow \beta_3 n + (1-\beta_3)\,(g + \beta_2 d)^2 \\
        \theta &\leftarrow \frac{\theta - \eta_t\,(\hat m + \beta_2 \hat v)
            / (\sqrt{\hat n} + \epsilon)}{1 + \eta_t\lambda_t}
        \end{align*}

    The betas follow the code's convention (close to 1, as in Adam), the
    paper's are one minus them. The weight decay is the paper's proximal step
    (the division; ``scale_weight_decay_by_lr=False`` divides by
    :math:`1 + \lambda_t`). optax's ``adan`` (0.2.8) weighs :math:`d` by
    :math:`1-\beta_2` where the algorithm has :math:`\beta_2`, and decays
    :math:`\theta` by subtraction: the two agree at ``beta_2=0.5`` without
    weight decay. A sparse gradient takes the dense step with the gradient
    scattered into zeros (an untouched row's gradient changes to zero).

    Args:
        learning_rate: :math:`\eta`: float, tensor, callable or schedule.
            Defaults to ``0.001``.
        beta_1: :math:`\beta_1`, in ``[0, 1)``. Defaults to ``0.98``.
        beta_2: :math:`\beta_2`, in ``[0, 1)``. Defaults to ``0.92``.
        beta_3: :math:`\beta_3`, in ``[0, 1)``. Defaults to ``0.99``.
        epsilon: :math:`\epsilon`, a float ``> 0``. Defaults to ``1e-8`` (in
            float16, where it would be zero, float16's smallest positive number).
        name: Defaults to ``"Adan"``.
        **kwargs: ``weight_decay`` (:math:`\lambda`; ``None``, the default, for
            none; the paper uses ``0.02``), ``scale_weight_decay_by_lr``
            (defaults to ``True`` here), ``exclude_from_weight_decay``,
            ``clipnorm``, ``clipvalue``, ``global_clipnorm``, ``updaters``,
            ``jit_compile`` (see :class:`~optimizers.CustomOptimizerV2`).

    Example:

    >>> import tensorflow as tf
    >>> from optimizers.rules.adan import Adan
    >>> var = tf.Variable([1.0, -2.0])
    >>> _ = Adan(learning_rate=0.1).apply_gradients([(tf.constant([0.5, -0.5]), var)])
    >>> [round(x, 5) for x in var.numpy().tolist()]  # the first step moves each weight by lr
    [0.9, -1.9]
    """

    weight_decay_placement = "inside"

    def __init__(self, learning_rate: Any = 0.001, beta_1: Any = 0.98, beta_2: Any = 0.92, beta_3: Any = 0.99,
                 epsilon: float = 1e-8, name: str = "Adan", **kwargs: Any) -> None:
        kwargs.setdefault("scale_weight_decay_by_lr", True)
        super().__init__(name, **kwargs)
        self.add_hyperparameter("learning_rate", learning_rate, low=0.0)
        for beta, value in (("beta_1", beta_1), ("beta_2", beta_2), ("beta_3", beta_3)):
            self.add_hyperparameter(beta, value, low=0.0, high=1.0, high_inclusive=False)
        self.add_option("epsilon", epsilon, check_epsilon)

    def slot_specs(self, var):
        return ["m", "v", "n", "previous_gradient"]

    def prepare(self, dtype, c):
        for beta in ("beta_1", "beta_2", "beta_3"):
            c[beta + "_correction"] = 1 - tf.pow(c[beta], c["step"])
        c["not_first"] = tf.cast(c["step"] > 1, dtype)
        c["epsilon"] = epsilon_in(self.epsilon, dtype)

    def update_dense(self, grad, var, slots, c):
        m, v, n, previous = slots["m"], slots["v"], slots["n"], slots["previous_gradient"]
        beta_1, beta_2, beta_3 = c["beta_1"], c["beta_2"], c["beta_3"]
        diff = (grad - previous) * c["not_first"]
        m_t = m.assign(beta_1 * m + (1 - beta_1) * grad)
        v_t = v.assign(beta_2 * v + (1 - beta_2) * diff)
        n_t = n.assign(beta_3 * n + (1 - beta_3) * tf.square(grad + beta_2 * diff))
        previous.assign(grad)
        direction = m_t / c["beta_1_correction"] + beta_2 * (v_t / c["beta_2_correction"])
        step = c["learning_rate"] * direction / (tf.sqrt(n_t / c["beta_3_correction"]) + c["epsilon"])
        if c.get("decayed"):
            return var.assign((var - step) / (1 + c["weight_decay_factor"]))
        return var.assign_sub(step)
