"""RectifiedAdam (RAdam), TensorFlow Addons' ``RectifiedAdam`` successor; its warm-up is shared with AdaBelief."""

from __future__ import annotations

import functools
from numbers import Real
from typing import Any

import tensorflow as tf

from optimizers.hyperparameters import check_bool, check_epsilon, check_number
from optimizers.keras2_hyperparameters import constructor_epsilon
from optimizers.keras_compat import keras
from optimizers.rule import library_kernel
from optimizers.template import CustomOptimizerV2

__all__ = ["RectifiedAdam"]


def init_rectified(opt: CustomOptimizerV2, name: str, kwargs: dict, learning_rate: Any, beta_1: Any, beta_2: Any,
                   epsilon: float, weight_decay: Any, amsgrad: bool, sma_threshold: Any, total_steps: int,
                   warmup_proportion: Any, min_lr: Any) -> None:
    """The arguments RectifiedAdam and AdaBelief share, checked and stored (TFA's names)."""
    learning_rate, weight_decay = (keras.optimizers.schedules.deserialize(v) if isinstance(v, dict) else v
                                   for v in (learning_rate, weight_decay))
    epsilon = constructor_epsilon(epsilon)
    check_number("weight_decay", weight_decay, low=0.0)
    try:
        check_number("sma_threshold", sma_threshold, low=4.0)
    except ValueError as error:  # TFA accepts it, then steps with 2 < rho_t < 4 turn NaN
        raise ValueError(f"{error}. Below 4 the rectification r_t is the square root of a negative number "
                         "(TFA's weights turn NaN).") from None
    check_bool("amsgrad", amsgrad)
    if isinstance(total_steps, bool) or not isinstance(total_steps, Real) or total_steps < 0 or (
            not float(total_steps).is_integer()):
        raise ValueError(f"`total_steps` must be an integer >= 0. Received: total_steps={total_steps!r}")
    CustomOptimizerV2.__init__(opt, name, weight_decay=weight_decay, **kwargs)
    opt.add_hyperparameter("learning_rate", learning_rate, low=0.0)
    opt.add_hyperparameter("beta_1", beta_1, low=0.0, high=1.0, high_inclusive=False)
    opt.add_hyperparameter("beta_2", beta_2, low=0.0, high=1.0, high_inclusive=False)
    opt.add_hyperparameter("sma_threshold", sma_threshold, low=4.0)
    opt.add_hyperparameter("total_steps", float(total_steps), low=0.0)  # a checkpointed float, as in TFA
    opt.add_hyperparameter("warmup_proportion", warmup_proportion, low=0.0, high=1.0)
    opt.add_hyperparameter("min_lr", min_lr, low=0.0)
    opt.add_option("epsilon", epsilon, check_epsilon)
    opt.add_option("amsgrad", amsgrad, functools.partial(check_bool, "amsgrad"))


def config_value(opt: CustomOptimizerV2, pname: str) -> Any:
    """Config values as the template reads them, ``total_steps`` an int as in TFA's configs."""
    value = CustomOptimizerV2._config_value(opt, pname)
    return int(value) if pname == "total_steps" and isinstance(value, float) and value.is_integer() else value


def warmup_learning_rate(c: dict) -> Any:
    """TFA's linear warm-up to ``learning_rate``, then linear decay to ``min_lr`` (none if ``total_steps == 0``)."""
    lr, step, total = c["learning_rate"], c["step"], c["total_steps"]
    warmup = total * c["warmup_proportion"]
    decay_steps = tf.maximum(total - warmup, 1)
    decay_rate = (c["min_lr"] - lr) / decay_steps
    warm = tf.where(step <= warmup, lr * (step / warmup), lr + decay_rate * tf.minimum(step - warmup, decay_steps))
    return tf.where(total > 0, warm, lr)


def prepare_rectified(opt: CustomOptimizerV2, dtype: tf.DType, c: dict, sma_t: Any) -> None:
    """What RectifiedAdam's and AdaBelief's ``prepare`` share, from :math:`\rho_t` (``sma_t``): whether
    the step is rectified (also as a number, the fused kernel's input), the warm-up rate, epsilon."""
    c["rectified"] = sma_t >= c["sma_threshold"]  # >= 4, checked at each step when it is a callable
    c["rectified_number"] = tf.cast(c["rectified"], dtype)
    c["lr_t"] = warmup_learning_rate(c)
    c["epsilon"] = tf.constant(opt.epsilon, dtype)


def rectified_kernel(rule: CustomOptimizerV2, owner: type, var: tf.Variable, options: dict, corrections: tuple,
                     **attrs: Any) -> Any:
    """RectifiedAdam's or AdaBelief's (``owner``) dense step as one kernel of this library with TFA's
    bits, where it is built and ``var`` is on this process's CPU, outside XLA; not with AMSGrad.
    ``corrections``: the names of the two bias corrections ``prepare`` computes for it."""
    if rule.amsgrad:
        return None
    step = functools.partial(_rectified_kernel_step, corrections, dict(attrs, decayed=bool(options.get("decayed"))))
    return library_kernel(rule, owner, ("prepare", "update_dense", "_step"), var, f"FusedApply{owner.__name__}", step)


def _rectified_kernel_step(corrections, attrs, op, grad, var, slots, c):
    decay = c["weight_decay_factor"] if attrs["decayed"] else tf.zeros([], grad.dtype)
    return op(var=var.handle, m=slots["m"].handle, v=slots["v"].handle, lr=c["lr_t"], beta1=c["beta_1"],
              beta2=c["beta_2"], epsilon=c["epsilon"], c1=c[corrections[0]], c2=c[corrections[1]], r_t=c["r_t"],
              rectified=c["rectified_number"], weight_decay=decay, grad=grad, **attrs)


class RectifiedAdam(CustomOptimizerV2):
    r"""Rectified Adam (Liu et al., arXiv:1908.03265), TFA's numbers.

    Adam whose adaptive step is used only once the variance of :math:`1/\sqrt v` is
    tractable (:math:`\rho_t \ge \rho_\text{thr}`), scaled by :math:`r_t`; SGD with
    momentum before that. With the warm-up rate :math:`\eta_t` (see ``total_steps``):

    .. math::
        \begin{align*}
        m &\leftarrow \beta_1 m + (1-\beta_1)g, \quad v \leftarrow \beta_2 v + (1-\beta_2)g^2, \quad
            \hat m = \frac{m}{1-\beta_1^t}, \quad \hat v = \sqrt{\frac{v}{1-\beta_2^t}}
            \ (\text{AMSGrad: } v_{\max}) \\
        \rho_\infty &= \frac{2}{1-\beta_2} - 1, \quad \rho_t = \rho_\infty - \frac{2t\beta_2^t}{1-\beta_2^t},
            \quad r_t = \sqrt{\frac{(\rho_t-4)(\rho_t-2)\rho_\infty}{(\rho_\infty-4)(\rho_\infty-2)\rho_t}} \\
        \theta &\leftarrow \theta - \eta_t\Big(\Big[\rho_t \ge \rho_\text{thr}\ ?\
            \frac{r_t\hat m}{\hat v + \epsilon} : \hat m\Big] + \lambda\theta\Big)
        \end{align*}

    Warm-up (``total_steps > 0``): :math:`\eta_t` rises linearly to ``learning_rate``
    over ``warmup_proportion * total_steps`` steps, then falls linearly to
    ``min_lr`` at ``total_steps``. A sparse step (TFA's rule) decays the
    moments of every row and updates (and weight-decays) the touched rows only.
    Without AMSGrad, a dense step on this process's CPU is one kernel of this
    library (``optimizers.kernels``) with TFA's bits.

    Differences from TFA (fixes): ``sma_threshold < 4`` is refused (TFA's
    :math:`r_t` is then NaN whenever :math:`2 < \rho_t < 4`) and ``epsilon=0``
    too (TFA silently uses ``1e-7``).

    Args:
        learning_rate: :math:`\eta`: float, tensor, callable or schedule. Defaults to ``0.001``.
        beta_1: The first moment's decay, in ``[0, 1)``. Defaults to ``0.9``.
        beta_2: The second moment's decay, in ``[0, 1)``. Defaults to ``0.999``.
        epsilon: :math:`\epsilon`, a float ``> 0`` (``0`` or ``None`` means
            ``keras.backend.epsilon()``, as in Keras 2 and TFA). Defaults to ``1e-7``.
        weight_decay: :math:`\lambda \ge 0` (float, tensor, callable or schedule). Defaults to ``0.0``.
        amsgrad: Use AMSGrad (Reddi et al., arXiv:1904.09237). Defaults to ``False``.
        sma_threshold: :math:`\rho_\text{thr} \ge 4`. Defaults to ``5.0``.
        total_steps: Integer; ``> 0`` enables the warm-up. Defaults to ``0``.
        warmup_proportion: In ``[0, 1]``. Defaults to ``0.1``.
        min_lr: Learning rate at ``total_steps``. Defaults to ``0.0``.
        name: Defaults to ``"RectifiedAdam"``.
        **kwargs: ``exclude_from_weight_decay``, ``clipnorm``, ``clipvalue``,
            ``global_clipnorm``, ``decay``, ``updaters``, ``jit_compile``.

    Example:

    >>> import tensorflow as tf
    >>> from optimizers.rules.rectified_adam import RectifiedAdam
    >>> var = tf.Variable([1.0, -2.0])
    >>> _ = RectifiedAdam(learning_rate=0.1).apply_gradients([(tf.constant([0.5, -0.5]), var)])
    >>> [round(x, 5) for x in var.numpy().tolist()]  # step 1 (rho_1 = 1): SGD with momentum, lr * g
    [0.95, -1.95]
    """

    weight_decay_placement = "inside"
    decay_scaled_by_rule = True  # the learning rate multiplies the whole update
    _config_value = config_value

    def __init__(self, learning_rate: Any = 0.001, beta_1: Any = 0.9, beta_2: Any = 0.999, epsilon: float = 1e-7,
                 weight_decay: Any = 0.0, amsgrad: bool = False, sma_threshold: Any = 5.0, total_steps: int = 0,
                 warmup_proportion: Any = 0.1, min_lr: Any = 0.0, name: str = "RectifiedAdam", **kwargs: Any) -> None:
        init_rectified(self, name, kwargs, learning_rate, beta_1, beta_2, epsilon, weight_decay, amsgrad,
                       sma_threshold, total_steps, warmup_proportion, min_lr)

    def slot_specs(self, var):
        return ["m", "v", "vhat"] if self.amsgrad else ["m", "v"]

    def prepare(self, dtype, c):
        step, beta_2 = c["step"], c["beta_2"]
        beta_2_power = tf.pow(beta_2, step)
        c["recip_1"] = 1.0 / (1.0 - tf.pow(c["beta_1"], step))
        c["recip_2"] = 1.0 / (1.0 - beta_2_power)
        sma_inf = 2.0 / (1.0 - beta_2) - 1.0
        sma_t = sma_inf - 2.0 * step * beta_2_power * c["recip_2"]
        c["r_t"] = tf.sqrt((sma_t - 4.0) / (sma_inf - 4.0) * (sma_t - 2.0) / (sma_inf - 2.0) * sma_inf / sma_t)
        prepare_rectified(self, dtype, c, sma_t)

    def dense_kernel(self, var, options):
        """The dense step as one kernel with TFA's bits (``optimizers.kernels``), where it is built
        and ``var`` is on this process's CPU, outside XLA; not with AMSGrad."""
        return rectified_kernel(self, RectifiedAdam, var, options, ("recip_1", "recip_2"))

    def _step(self, var, m, v, c):
        """``lr_t`` times the update of ``var`` (rows) from the new moments (rows)."""
        m_corr = m * c["recip_1"]
        update = tf.where(c["rectified"], c["r_t"] * m_corr / (tf.sqrt(v * c["recip_2"]) + c["epsilon"]), m_corr)
        if c.get("decayed"):
            update += c["weight_decay_factor"] * var
        return c["lr_t"] * update

    def update_dense(self, grad, var, slots, c):
        m = c["beta_1"] * slots["m"] + (1.0 - c["beta_1"]) * grad
        v = c["beta_2"] * slots["v"] + (1.0 - c["beta_2"]) * tf.square(grad)
        slots["m"].assign(m)
        slots["v"].assign(v)
        if self.amsgrad:
            v = tf.maximum(slots["vhat"], v)
            slots["vhat"].assign(v)
        return var.assign_sub(self._step(var, m, v, c))

    def update_sparse(self, grad, var, indices, slots, c):
        m, v = slots["m"], slots["v"]
        m.assign(m * c["beta_1"])
        m.scatter_add(tf.IndexedSlices(grad * (1.0 - c["beta_1"]), indices))
        v.assign(v * c["beta_2"])
        v.scatter_add(tf.IndexedSlices((grad * grad) * (1.0 - c["beta_2"]), indices))
        v_rows = tf.gather(v, indices)
        if self.amsgrad:  # other rows: beta_2 v <= v <= vhat, unchanged
            v_rows = tf.maximum(tf.gather(slots["vhat"], indices), v_rows)
            slots["vhat"].scatter_update(tf.IndexedSlices(v_rows, indices))
        step = self._step(tf.gather(var, indices), tf.gather(m, indices), v_rows, c)
        return var.scatter_sub(tf.IndexedSlices(step, indices))
