"""AdaBelief, TensorFlow Addons' ``AdaBelief`` successor (warm-up shared with RectifiedAdam)."""

from __future__ import annotations

import functools
from typing import Any

import tensorflow as tf

from optimizers.hyperparameters import check_bool
from optimizers.rules.rectified_adam import config_value, init_rectified, prepare_rectified, rectified_kernel
from optimizers.template import CustomOptimizerV2

__all__ = ["AdaBelief"]


class AdaBelief(CustomOptimizerV2):
    r"""AdaBelief (Zhuang et al., arXiv:2010.07468), TFA's numbers.

    Adam whose second moment :math:`s` tracks :math:`(g - m)^2`, the "belief"
    in the gradient, with :math:`\epsilon` inside the moment *and* outside the
    square root; optionally rectified as RAdam (see :class:`RectifiedAdam`
    for :math:`\rho_t`, :math:`r_t` and the warm-up rate :math:`\eta_t`):

    .. math::
        \begin{align*}
        m &\leftarrow \beta_1 m + (1-\beta_1)g, \qquad s \leftarrow \beta_2 s + (1-\beta_2)(g - m)^2 + \epsilon,
            \qquad \hat m = \frac{m}{1-\beta_1^t}, \qquad \hat s = \sqrt{\frac{s}{1-\beta_2^t}}
            \ (\text{AMSGrad: } s_{\max}) \\
        \theta &\leftarrow \theta - \eta_t\Big(\Big[\text{rectify and } \rho_t < \rho_\text{thr}\ ?\
            \hat m : \frac{r\,\hat m}{\hat s + \epsilon}\Big] + \lambda\theta\Big),
            \qquad r = r_t \text{ if rectify else } 1
        \end{align*}

    A sparse step (TFA's rule): :math:`m` and :math:`s` decay on every row,
    the touched rows get the gradient terms (and :math:`\epsilon`); only the
    touched rows of :math:`\theta` move (and are weight-decayed). Without
    AMSGrad, a dense step on this process's CPU is one kernel of this library
    (``optimizers.kernels``) with TFA's bits; with ``jit_compile=False``
    every step has TFA's bits. Elsewhere the XLA dense step (the default) adds
    :math:`s`'s terms in the sparse step's order (XLA then keeps no copy of the
    slot) and multiplies by per-step reciprocals instead of dividing: equal
    within float rounding.

    Differences from TFA (fixes): ``sma_threshold < 4`` is refused (TFA's
    :math:`r_t` is then NaN whenever :math:`2 < \rho_t < 4`) and ``epsilon=0``
    too (TFA silently uses ``1e-7``).

    Args:
        learning_rate: :math:`\eta`: float, tensor, callable or schedule. Defaults to ``0.001``.
        beta_1: The first moment's decay, in ``[0, 1)``. Defaults to ``0.9``.
        beta_2: The second moment's decay, in ``[0, 1)``. Defaults to ``0.999``.
        epsilon: :math:`\epsilon`, a float ``> 0`` (``0`` or ``None`` means
            ``keras.backend.epsilon()``, as in Keras 2 and TFA). Defaults to ``1e-14``.
        weight_decay: :math:`\lambda \ge 0` (float, tensor, callable or schedule). Defaults to ``0.0``.
        amsgrad: Use AMSGrad (Reddi et al., arXiv:1904.09237). Defaults to ``False``.
        rectify: Rectify as RAdam (Liu et al., arXiv:1908.03265). Defaults to ``True``.
        sma_threshold: :math:`\rho_\text{thr} \ge 4`. Defaults to ``5.0``.
        total_steps: Integer; ``> 0`` enables the warm-up. Defaults to ``0``.
        warmup_proportion: In ``[0, 1]``. Defaults to ``0.1``.
        min_lr: Learning rate at ``total_steps``. Defaults to ``0.0``.
        name: Defaults to ``"AdaBelief"``.
        **kwargs: ``exclude_from_weight_decay``, ``clipnorm``, ``clipvalue``,
            ``global_clipnorm``, ``decay``, ``updaters``, ``jit_compile``.

    Example:

    >>> import tensorflow as tf
    >>> from optimizers.rules.adabelief import AdaBelief
    >>> var = tf.Variable([1.0, -2.0])
    >>> _ = AdaBelief(learning_rate=0.1, rectify=False).apply_gradients([(tf.constant([0.5, -0.5]), var)])
    >>> [round(x, 5) for x in var.numpy().tolist()]  # step 1: lr g / |g - m| = lr / beta_1
    [0.88889, -1.88889]
    """

    weight_decay_placement = "inside"
    decay_scaled_by_rule = True  # the learning rate multiplies the whole update
    _config_value = config_value

    def __init__(self, learning_rate: Any = 0.001, beta_1: Any = 0.9, beta_2: Any = 0.999, epsilon: float = 1e-14,
                 weight_decay: Any = 0.0, amsgrad: bool = False, rectify: bool = True, sma_threshold: Any = 5.0,
                 total_steps: int = 0, warmup_proportion: Any = 0.1, min_lr: Any = 0.0, name: str = "AdaBelief",
                 **kwargs: Any) -> None:
        check_bool("rectify", rectify)
        init_rectified(self, name, kwargs, learning_rate, beta_1, beta_2, epsilon, weight_decay, amsgrad,
                       sma_threshold, total_steps, warmup_proportion, min_lr)
        self.add_option("rectify", rectify, functools.partial(check_bool, "rectify"))

    def slot_specs(self, var):
        return ["m", "v", "vhat"] if self.amsgrad else ["m", "v"]

    def prepare(self, dtype, c):
        step, beta_2 = c["step"], c["beta_2"]
        beta_2_power = tf.pow(beta_2, step)
        c["bias_1"], c["bias_2"] = 1.0 - tf.pow(c["beta_1"], step), 1.0 - beta_2_power
        sma_inf = 2.0 / (1.0 - beta_2) - 1.0
        sma_t = sma_inf - 2.0 * step * beta_2_power / (1.0 - beta_2_power)
        c["r_t"] = tf.sqrt((sma_t - 4.0) * (sma_t - 2.0) * sma_inf / ((sma_inf - 4.0) * (sma_inf - 2.0) * sma_t))
        prepare_rectified(self, dtype, c, sma_t)
        c["inv_bias_1"], c["inv_sqrt_bias_2"] = 1.0 / c["bias_1"], tf.math.rsqrt(c["bias_2"])

    def dense_kernel(self, var, options):
        """The dense step as one kernel with TFA's bits (``optimizers.kernels``), where it is built
        and ``var`` is on this process's CPU, outside XLA; not with AMSGrad."""
        return rectified_kernel(self, AdaBelief, var, options, ("bias_1", "bias_2"), rectify=self.rectify)

    def _step(self, var, m, v, c, fast=False):
        """``lr_t`` times the update of ``var`` (rows) from the new moments (rows); ``fast`` (XLA):
        multiplications by per-step reciprocals instead of two divisions per element (TFA's)."""
        eps = c["epsilon"]
        if fast:
            m_corr, v_corr = m * c["inv_bias_1"], tf.sqrt(v) * c["inv_sqrt_bias_2"]
        else:
            m_corr, v_corr = m / c["bias_1"], tf.sqrt(v / c["bias_2"])
        if self.rectify:
            update = tf.where(c["rectified"], c["r_t"] * m_corr / (v_corr + eps), m_corr)
        else:
            update = m_corr / (v_corr + eps)
        if c.get("decayed"):
            update += c["weight_decay_factor"] * var
        return c["lr_t"] * update

    def update_dense(self, grad, var, slots, c):
        m = c["beta_1"] * slots["m"] + (1.0 - c["beta_1"]) * grad
        belief = (1.0 - c["beta_2"]) * tf.square(grad - m)
        if self.jit_compile:  # the same sum grouped as in a sparse step: XLA then keeps no copy of the slot
            v = c["beta_2"] * slots["v"] + (belief + c["epsilon"])
        else:  # TFA's grouping, for its bits
            v = c["beta_2"] * slots["v"] + belief + c["epsilon"]
        slots["m"].assign(m)
        slots["v"].assign(v)
        if self.amsgrad:
            v = tf.maximum(slots["vhat"], v)
            slots["vhat"].assign(v)
        return var.assign_sub(self._step(var, m, v, c, fast=self.jit_compile))

    def update_sparse(self, grad, var, indices, slots, c):
        m, v = slots["m"], slots["v"]
        m.assign(m * c["beta_1"])
        m.scatter_add(tf.IndexedSlices(grad * (1 - c["beta_1"]), indices))
        m_rows = tf.gather(m, indices)
        v.assign(v * c["beta_2"])
        v.scatter_add(tf.IndexedSlices(tf.square(grad - m_rows) * (1 - c["beta_2"]) + c["epsilon"], indices))
        v_rows = tf.gather(v, indices)
        if self.amsgrad:  # other rows: beta_2 v <= v <= vhat, unchanged
            v_rows = tf.maximum(tf.gather(slots["vhat"], indices), v_rows)
            slots["vhat"].scatter_update(tf.IndexedSlices(v_rows, indices))
        return var.scatter_sub(tf.IndexedSlices(self._step(tf.gather(var, indices), m_rows, v_rows, c), indices))
