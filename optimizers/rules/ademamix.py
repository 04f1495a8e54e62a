"""AdEMAMix: Adam with a second, slow momentum mixed in."""

from __future__ import annotations

import math
from typing import Any

import tensorflow as tf

from optimizers.hyperparameters import check_epsilon, check_integer, epsilon_in
from optimizers.template import CustomOptimizerV2

__all__ = ["AdEMAMix"]


class AdEMAMix(CustomOptimizerV2):
    r"""AdEMAMix (Pagliardini et al., arXiv:2409.03137): Adam's fast momentum plus a slow one.

    Three slots: the fast momentum :math:`m_1`, the slow momentum :math:`m_2`
    (not bias-corrected: it fills slowly) and Adam's second moment :math:`\nu`.
    At step :math:`t`:

    .. math::
        \begin{align*}
        m_1 &\leftarrow \beta_1 m_1 + (1-\beta_1)\,g, \qquad
        m_2 \leftarrow \beta_{3,t} m_2 + (1-\beta_{3,t})\,g, \qquad
        \nu \leftarrow \beta_2 \nu + (1-\beta_2)\,g^2 \\
        \theta &\leftarrow \theta - \eta_t\lambda_t\,\theta
            - \eta_t\,\frac{m_1/(1-\beta_1^t) + \alpha_t\,m_2}{\sqrt{\nu/(1-\beta_2^t)} + \epsilon}
        \end{align*}

    With ``alpha_warmup`` :math:`T_\alpha`, :math:`\alpha_t = \alpha\,t/T_\alpha`
    while :math:`t < T_\alpha`; with ``beta_3_warmup`` :math:`T_3`, the slow
    momentum's half-life :math:`h(\beta) = \ln\frac12 / \ln(\beta + 10^{-8}) - 1`
    grows linearly from :math:`\beta_1`'s to :math:`\beta_3`'s while
    :math:`t < T_3`, :math:`\beta_{3,t} = 2^{-1/(1 + (1-a)h(\beta_1) + a\,h(\beta_3))}`
    with :math:`a = t/T_3` (the authors' schedulers; the paper warms both up
    over the same steps). After the warm-ups, :math:`\alpha` and :math:`\beta_3`.
    The decay is decoupled and scaled by the learning rate, as in AdamW. A
    sparse gradient takes the dense step with the gradient scattered into zeros.

    Args:
        learning_rate: :math:`\eta`: float, tensor, callable or schedule.
            Defaults to ``0.001``.
        beta_1: :math:`\beta_1`, in ``[0, 1)``. Defaults to ``0.9``.
        beta_2: :math:`\beta_2`, in ``[0, 1)``. Defaults to ``0.999``.
        beta_3: :math:`\beta_3`, in ``[0, 1)``. Defaults to ``0.9999``.
        alpha: :math:`\alpha`, ``>= 0``. Defaults to ``5.0``.
        alpha_warmup: :math:`T_\alpha`, steps, or ``None`` (the default) for none.
        beta_3_warmup: :math:`T_3`, steps, or ``None`` (the default) for none.
        epsilon: :math:`\epsilon`, a float ``> 0``. Defaults to ``1e-8`` (in
            float16, where it would be zero, float16's smallest positive number).
        name: Defaults to ``"AdEMAMix"``.
        **kwargs: ``weight_decay`` (:math:`\lambda`; ``None``, the default, for
            none), ``scale_weight_decay_by_lr`` (defaults to ``True`` here),
            ``exclude_from_weight_decay``, ``clipnorm``, ``clipvalue``,
            ``global_clipnorm``, ``updaters``, ``jit_compile`` (see
            :class:`~optimizers.CustomOptimizerV2`).

    Example:

    >>> import tensorflow as tf
    >>> from optimizers.rules.ademamix import AdEMAMix
    >>> var = tf.Variable([1.0, -2.0])
    >>> _ = AdEMAMix(learning_rate=0.1, alpha=0.0).apply_gradients([(tf.constant([0.5, -0.5]), var)])
    >>> [round(x, 5) for x in var.numpy().tolist()]  # alpha=0: Adam's first step, lr per weight
    [0.9, -1.9]
    """

    weight_decay_placement = "inside"

    def __init__(self, learning_rate: Any = 0.001, beta_1: Any = 0.9, beta_2: Any = 0.999, beta_3: Any = 0.9999,
                 alpha: Any = 5.0, alpha_warmup: int | None = None, beta_3_warmup: int | None = None,
                 epsilon: float = 1e-8, name: str = "AdEMAMix", **kwargs: Any) -> None:
        kwargs.setdefault("scale_weight_decay_by_lr", True)
        super().__init__(name, **kwargs)
        self.add_hyperparameter("learning_rate", learning_rate, low=0.0)
        for beta, value in (("beta_1", beta_1), ("beta_2", beta_2), ("beta_3", beta_3)):
            self.add_hyperparameter(beta, value, low=0.0, high=1.0, high_inclusive=False)
        self.add_hyperparameter("alpha", alpha, low=0.0)
        self.add_option("alpha_warmup", alpha_warmup, lambda value: check_integer("alpha_warmup", value, 1, True))
        self.add_option("beta_3_warmup", beta_3_warmup, lambda value: check_integer("beta_3_warmup", value, 1, True))
        self.add_option("epsilon", epsilon, check_epsilon)

    def slot_specs(self, var):
        return ["m_1", "m_2", "nu"]

    def prepare(self, dtype, c):
        step = c["step"]
        c["beta_1_correction"] = 1 - tf.pow(c["beta_1"], step)
        c["beta_2_correction"] = 1 - tf.pow(c["beta_2"], step)
        c["epsilon"] = epsilon_in(self.epsilon, dtype)
        # The warm-ups in float32 at least: a half-life is ill-conditioned near 1, float16 loses it.
        work = tf.float64 if dtype == tf.float64 else tf.float32
        step = tf.cast(step, work)
        if self.alpha_warmup is not None:
            alpha = tf.cast(c["alpha"], work)
            c["alpha"] = tf.cast(tf.where(step < self.alpha_warmup, alpha * step / self.alpha_warmup, alpha), dtype)
        if self.beta_3_warmup is not None:
            def half_life(beta):
                return math.log(0.5) / tf.math.log(tf.cast(beta, work) + 1e-8) - 1

            a = step / self.beta_3_warmup
            warm = tf.pow(tf.constant(0.5, work), 1 / ((1 - a) * half_life(c["beta_1"]) + a * half_life(c["beta_3"]) + 1))
            c["beta_3"] = tf.where(step < self.beta_3_warmup, tf.cast(warm, dtype), c["beta_3"])

    def update_dense(self, grad, var, slots, c):
        m_1, m_2, nu, beta_3 = slots["m_1"], slots["m_2"], slots["nu"], c["beta_3"]
        m_1_t = m_1.assign(c["beta_1"] * m_1 + (1 - c["beta_1"]) * grad)
        m_2_t = m_2.assign(beta_3 * m_2 + (1 - beta_3) * grad)
        nu_t = nu.assign(c["beta_2"] * nu + (1 - c["beta_2"]) * tf.square(grad))
        direction = m_1_t / c["beta_1_correction"] + c["alpha"] * m_2_t
        step = c["learning_rate"] * direction / (tf.sqrt(nu_t / c["beta_2_correction"]) + c["epsilon"])
        if c.get("decayed"):
            return var.assign(var - var * c["weight_decay_factor"] - step)
        return var.assign_sub(step)
