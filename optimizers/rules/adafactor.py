"""Adafactor: factored second moments, relative step size and update clipping, with Keras 3's signature."""

from __future__ import annotations

import functools
from typing import Any

import tensorflow as tf

from optimizers.hyperparameters import check_bool
from optimizers.slots import SlotSpec
from optimizers.template import CustomOptimizerV2

__all__ = ["Adafactor"]


def _rms(x: tf.Tensor) -> tf.Tensor:
    """sqrt(mean(x ** 2)) in one pass, without a temporary of x's size (``l2_loss`` is sum(x ** 2) / 2)."""
    return tf.sqrt(2 * tf.nn.l2_loss(x) / tf.cast(tf.size(x), x.dtype))


class Adafactor(CustomOptimizerV2):
    r"""Adafactor (Shazeer & Stern, arXiv:1804.04235), Keras 3's ``Adafactor`` numbers.

    A variable of rank :math:`\ge 2` keeps its second moment factored over its
    last two axes: slots ``v_row`` (the mean of :math:`G` over the last axis,
    shape ``[..., n]``) and ``v_col`` (over the second last, ``[..., m]``), so
    an ``[n, m]`` kernel costs :math:`n + m` numbers instead of :math:`nm`.
    Other variables keep the full second moment, slot ``v``. At step :math:`t`,
    with :math:`c` = ``beta_2_decay`` and :math:`d` = ``clip_threshold``:

    .. math::
        \begin{align*}
        \hat\beta_{2,t} &= 1 - t^{c}, \qquad G = g^2 + \epsilon_1 \\
        R &\leftarrow \hat\beta_{2,t} R + (1-\hat\beta_{2,t}) \operatorname{mean}_{\text{last axis}} G, \quad
        C \leftarrow \hat\beta_{2,t} C + (1-\hat\beta_{2,t}) \operatorname{mean}_{\text{second last axis}} G, \quad
        \hat V = \frac{R}{\operatorname{mean}(R)} \otimes C && \text{rank} \ge 2 \\
        \hat V = V &\leftarrow \hat\beta_{2,t} V + (1-\hat\beta_{2,t})\,G && \text{rank} < 2 \\
        u &= g / \sqrt{\hat V}, \qquad \hat u = u / \max\left(1, \operatorname{RMS}(u) / d\right) \\
        \alpha_t &= \max\left(\epsilon_2, \operatorname{RMS}(\theta)\right) \min\left(\eta_t, 1/\sqrt{t}\right)
            && \texttt{relative\_step=False: } \alpha_t = \eta_t \\
        \theta &\leftarrow \theta - \alpha_t\,\hat u
        \end{align*}

    :math:`\operatorname{RMS}` is over the whole variable. :math:`\hat\beta_{2,1} = 0`,
    so the zero-initialized slots need no bias correction. As in the paper,
    there is no first moment. ``relative_step=True`` (the default) is Keras 3's
    step: the paper's relative step size with :math:`\eta_t` as its cap (the
    paper's :math:`10^{-2}`). ``relative_step=False`` is the paper's absolute
    step :math:`\alpha_t = \eta_t` (schedule :math:`\eta` as you like). Keras 3
    ignores its ``relative_step`` argument and always takes the relative step,
    so its ``relative_step=False`` gives this class's ``relative_step=True``.

    Weight decay (optional) comes first, scaled by the learning rate by default
    as in Keras 3, and :math:`\operatorname{RMS}(\theta)` is taken after it:
    :math:`\theta \leftarrow \theta - \eta_t\lambda_t\theta`
    (``scale_weight_decay_by_lr=False``: :math:`\theta - \lambda_t\theta`).

    A sparse gradient (``tf.IndexedSlices``) takes the dense step with the
    gradient scattered into zeros, decay included: a row without gradient
    still moves the factored statistics of every row and column, and counts in
    :math:`\operatorname{RMS}(u)`, so no cheaper exact step exists.

    float16 and bfloat16 variables: the step is computed in float32
    (hyperparameters and step number too: :math:`\epsilon_1 = 10^{-30}` would
    be 0 in float16, and :math:`g^2` is 0 there for :math:`|g| < 1.7 \cdot 10^{-4}`); the
    variable and its slots are stored in their own dtype, so a float16 slot
    overflows for gradients above 256. Mixed precision (float32 variables)
    avoids both.

    Args:
        learning_rate: :math:`\eta`: float, tensor, callable or schedule.
            Defaults to ``0.001``.
        beta_2_decay: :math:`c`, ``<= 0``. Defaults to ``-0.8``.
        epsilon_1: :math:`\epsilon_1`, added to :math:`g^2`, ``>= 0``.
            Defaults to ``1e-30``.
        epsilon_2: :math:`\epsilon_2`, the smallest parameter scale of the
            relative step, ``>= 0``. Defaults to ``1e-3``.
        clip_threshold: :math:`d`, ``> 0``; independent of ``clipnorm``,
            ``clipvalue`` and ``global_clipnorm``. Defaults to ``1.0``.
        relative_step: Take the relative step size (see above). Defaults to ``True``.
        name: Defaults to ``"Adafactor"``.
        **kwargs: ``weight_decay`` (:math:`\lambda`, float, tensor, callable or
            schedule; ``None``, the default, for none), ``scale_weight_decay_by_lr``
            (defaults to ``True`` here), ``exclude_from_weight_decay``,
            ``clipnorm``, ``clipvalue``, ``global_clipnorm``, ``decay``,
            ``updaters``, ``jit_compile`` (see :class:`~optimizers.CustomOptimizerV2`;
            defaults to ``False`` here: on CPU, XLA's compiled reductions over
            whole variables make this step several times slower than TensorFlow's
            kernels, see ``benchmarks/bench_adafactor.py``). ``learning_rate``, ``beta_2_decay``, ``epsilon_1``, ``epsilon_2`` and
            ``clip_threshold`` are hyperparameters: float, tensor, callable or schedule.

    Example:

    >>> import tensorflow as tf
    >>> from optimizers.rules.adafactor import Adafactor
    >>> var = tf.Variable([1.0, -2.0])  # RMS 1.5811
    >>> _ = Adafactor(learning_rate=0.1).apply_gradients([(tf.constant([0.5, -0.5]), var)])
    >>> [round(x, 4) for x in var.numpy().tolist()]  # first step: u = sign(g), each weight moves by 0.1 * RMS
    [0.8419, -1.8419]
    >>> kernel = tf.Variable(tf.ones([4, 3]))
    >>> opt = Adafactor()
    >>> _ = opt.apply_gradients([(tf.ones([4, 3]), kernel)])
    >>> opt.get_slot(kernel, "v_row").shape.as_list(), opt.get_slot(kernel, "v_col").shape.as_list()
    ([4], [3])
    """

    weight_decay_placement = "inside"  # the parameter scale RMS(theta) is taken after the decay
    whole_variable = True  # RMS and factored moments of the whole variable: a shard of a sharded one is refused

    def __init__(self, learning_rate: Any = 0.001, beta_2_decay: Any = -0.8, epsilon_1: Any = 1e-30,
                 epsilon_2: Any = 1e-3, clip_threshold: Any = 1.0, relative_step: bool = True,
                 name: str = "Adafactor", **kwargs: Any) -> None:
        check_bool("relative_step", relative_step)
        kwargs.setdefault("scale_weight_decay_by_lr", True)
        kwargs.setdefault("jit_compile", False)  # measured: XLA's CPU reductions make the step slower here
        super().__init__(name, **kwargs)
        self.add_hyperparameter("learning_rate", learning_rate, low=0.0)
        self.add_hyperparameter("beta_2_decay", beta_2_decay, high=0.0)
        self.add_hyperparameter("epsilon_1", epsilon_1, low=0.0)
        self.add_hyperparameter("epsilon_2", epsilon_2, low=0.0)
        self.add_hyperparameter("clip_threshold", clip_threshold, low=0.0, low_inclusive=False)
        self.add_option("relative_step", relative_step, functools.partial(check_bool, "relative_step"))

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config["jit_compile"] = self.jit_compile  # always: this class's default is not the template's
        return config

    def slot_specs(self, var):
        if var.shape.rank >= 2:
            return [SlotSpec("v_row", shape=lambda s: s[:-1]), SlotSpec("v_col", shape=lambda s: s[:-2] + s[-1:])]
        return ["v"]

    def step_coefficients(self, dtype, iterations, state=None):
        """float32 coefficients for float16/bfloat16 variables (see the class docstring)."""
        return super().step_coefficients(tf.float32 if dtype in (tf.float16, tf.bfloat16) else dtype, iterations, state)

    def prepare(self, dtype, c):
        step, lr = c["step"], c["learning_rate"]
        c["beta_2_t"] = 1 - tf.pow(step, c["beta_2_decay"])
        if self.relative_step:
            c["rho_t"] = tf.minimum(lr, 1 / tf.sqrt(step))

    def update_dense(self, grad, var, slots, c):
        compute = c["learning_rate"].dtype  # float32 for float16/bfloat16 variables
        grad, theta = tf.cast(grad, compute), tf.cast(var, compute)
        decayed = c.get("decayed", False)
        if decayed:
            theta = theta - theta * c["weight_decay_factor"]
        beta, epsilon_1, g2 = c["beta_2_t"], c["epsilon_1"], tf.square(grad)
        new_slots = {}
        if var.shape.rank >= 2:  # a Python branch on the static shape: one compiled step per rank
            row, col = (tf.cast(slots[k], compute) for k in ("v_row", "v_col"))
            row = beta * row + (1 - beta) * (tf.reduce_mean(g2, axis=-1) + epsilon_1)  # mean(g2 + eps1)
            col = beta * col + (1 - beta) * (tf.reduce_mean(g2, axis=-2) + epsilon_1)
            new_slots.update(v_row=row, v_col=col)
            # u = g / sqrt(V), V = R C / mean(R): square roots of the n + m factors, not of n m numbers
            u = (grad * tf.expand_dims(1 / tf.sqrt(row / tf.reduce_mean(row, axis=-1, keepdims=True)), -1)
                 * tf.expand_dims(1 / tf.sqrt(col), -2))
        else:
            v = new_slots["v"] = beta * tf.cast(slots["v"], compute) + (1 - beta) * (g2 + epsilon_1)
            u = grad / tf.sqrt(v)
        alpha = tf.maximum(c["epsilon_2"], _rms(theta)) * c["rho_t"] if self.relative_step else c["learning_rate"]
        step = alpha / tf.maximum(tf.ones([], compute), _rms(u) / c["clip_threshold"])  # the clipped update's size
        for name, value in new_slots.items():
            slots[name].assign(tf.cast(value, slots[name].dtype))
        if decayed or compute != var.dtype:
            return var.assign(tf.cast(theta - step * u, var.dtype))
        return var.assign_sub(step * u)
