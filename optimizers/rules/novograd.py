"""NovoGrad: one second moment per variable; TensorFlow Addons' ``NovoGrad`` successor."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import tensorflow as tf

from optimizers import kernels
from optimizers.compiled import alone, signature
from optimizers.hyperparameters import check_bool, check_epsilon, check_number
from optimizers.keras2_hyperparameters import constructor_epsilon
from optimizers.rule import kernel_if_unchanged, library_kernel, sum_of_squares
from optimizers.slots import SlotSpec
from optimizers.template import CustomOptimizerV2

__all__ = ["NovoGrad"]


def _as_bool(name: str, value: Any) -> bool:
    """A bool; numpy's too (TFA's configs hold ``grad_averaging`` as one after training)."""
    check_bool(name, value.item() if isinstance(value, np.bool_) else value)
    return bool(value)


class NovoGrad(CustomOptimizerV2):
    r"""NovoGrad (Ginsburg et al., arXiv:1905.11286), TensorFlow Addons' numbers.

    The second moment :math:`v` is one number per variable (``g`` its whole
    gradient); at step :math:`t` (:math:`t = 1` is the optimizer's first step):

    .. math::
        \begin{align*}
        v &\leftarrow \|g\|_2^2 \text{ if } t = 1, \text{ else } \beta_2 v + (1-\beta_2)\|g\|_2^2
            \qquad \hat v = v \text{ (AMSGrad: } \hat v \leftarrow \max(\hat v, v)) \\
        d &= \frac{g}{\sqrt{\hat v} + \epsilon} + \lambda_t\,\theta
            \qquad d \leftarrow (1-\beta_1)\,d \text{ if grad\_averaging and } t > 1 \\
        m &\leftarrow \beta_1 m - \eta_t\, d, \qquad \theta \leftarrow \theta + m
        \end{align*}

    :math:`\lambda_t\theta` is added only where :math:`\lambda_t > 0` (and not
    for variables excluded from weight decay). A sparse gradient updates only
    its rows (of :math:`m` and :math:`\theta`; :math:`v` sums the rows'
    squares), as in TFA. :math:`\hat v` has the variable's shape (every entry
    holds the same number), as in TFA, so TFA checkpoints restore. A dense
    step on a CPU (float32, float64, not AMSGrad) is two kernels of
    ``optimizers.kernels``: the norm in one read of :math:`g`, then
    :math:`d`, :math:`m` and :math:`\theta` in one pass, with TFA's bits.
    Elsewhere it computes :math:`d` in plain ops (on a large variable: the
    norm in plain ops, the rest in one compiled pass), then the update of
    :math:`m` and :math:`\theta` is TensorFlow's fused momentum kernel, as in TFA.

    Fixes over TFA: ``amsgrad=True`` works with sparse gradients (TFA raises),
    and ``get_config`` keeps ``amsgrad`` (TFA drops it, so a reloaded TFA
    optimizer silently loses AMSGrad).

    Args:
        learning_rate: :math:`\eta`: float, tensor, callable or schedule.
            Defaults to ``0.001``.
        beta_1: Momentum of :math:`m`, in ``[0, 1)``. Defaults to ``0.9``.
        beta_2: Decay of :math:`v`, in ``[0, 1)``. Defaults to ``0.999``.
        epsilon: :math:`\epsilon`, a float ``> 0`` (``0`` or ``None`` means
            ``keras.backend.epsilon()``, as in Keras 2 and TFA). Defaults to ``1e-7``.
        weight_decay: :math:`\lambda`: float, tensor, callable or schedule,
            ``>= 0``. Defaults to ``0.0``.
        grad_averaging: Scale :math:`d` by :math:`1-\beta_1` after the first
            step. Defaults to ``False``.
        amsgrad: Normalize by the running maximum of :math:`v`. Defaults to ``False``.
        name: Defaults to ``"NovoGrad"``.
        **kwargs: ``exclude_from_weight_decay`` (regexes searched in
            ``var.name``), ``clipnorm``, ``clipvalue``, ``global_clipnorm``,
            ``decay``, ``updaters``, ``jit_compile`` (see
            :class:`~optimizers.CustomOptimizerV2`).

    Example:

    >>> import tensorflow as tf
    >>> from optimizers.rules.novograd import NovoGrad
    >>> var = tf.Variable([1.0, 2.0])
    >>> _ = NovoGrad(learning_rate=0.1).apply_gradients([(tf.constant([3.0, 4.0]), var)])
    >>> [round(x, 4) for x in var.numpy().tolist()]  # first step: v = 25, theta -= 0.1 * g / 5
    [0.94, 1.92]
    """

    weight_decay_placement = "inside"  # the decay joins the normalized gradient
    decay_scaled_by_rule = True  # the learning rate multiplies the whole update
    whole_variable = True  # norms of the whole variable: a shard of a sharded one is refused

    def __init__(self, learning_rate: Any = 0.001, beta_1: Any = 0.9, beta_2: Any = 0.999, epsilon: float = 1e-7,
                 weight_decay: Any = 0.0, grad_averaging: bool = False, amsgrad: bool = False,
                 name: str = "NovoGrad", **kwargs: Any) -> None:
        epsilon = constructor_epsilon(epsilon)
        check_number("weight_decay", weight_decay, low=0.0)
        grad_averaging, amsgrad = _as_bool("grad_averaging", grad_averaging), _as_bool("amsgrad", amsgrad)
        super().__init__(name, weight_decay=weight_decay, **kwargs)
        self.add_hyperparameter("learning_rate", learning_rate, low=0.0)
        self.add_hyperparameter("beta_1", beta_1, low=0.0, high=1.0, high_inclusive=False)
        self.add_hyperparameter("beta_2", beta_2, low=0.0, high=1.0, high_inclusive=False)
        self.add_option("epsilon", epsilon, check_epsilon)
        self.add_option("grad_averaging", grad_averaging, functools.partial(check_bool, "grad_averaging"))
        self.add_option("amsgrad", amsgrad, functools.partial(check_bool, "amsgrad"))

    def slot_specs(self, var: tf.Variable) -> list:
        return ["m", SlotSpec("v", shape=lambda shape: [])] + (["vhat"] if self.amsgrad else [])

    def prepare(self, dtype: tf.DType, coefficients: dict) -> None:
        coefficients.update(one_minus_beta_1=1 - coefficients["beta_1"], one_minus_beta_2=1 - coefficients["beta_2"],
                            first_step=tf.equal(coefficients["step"], 1), epsilon=tf.constant(self.epsilon, dtype))

    def _direction(self, grad, var_rows, slots, coefficients, rows=None, compiled=None):
        """``d`` for the gradient rows ``grad`` (the whole gradient when ``rows`` is None), and the
        writes of the second moment."""
        compiled = self.jit_compile if compiled is None else compiled
        v_t, writes = self._second_moment(sum_of_squares(grad, compiled), slots, coefficients, rows)
        return self._scaled(grad, var_rows, v_t, coefficients, compiled), writes

    def _second_moment(self, g2, slots, coefficients, rows):
        """The second moment the step divides by (its ``rows``, when given), from ``g2``, the
        gradient's squared norm; and the writes of the slots ``v`` (and ``vhat``)."""
        v = slots["v"]
        v_t = tf.where(coefficients["first_step"], g2, v * coefficients["beta_2"] + g2 * coefficients["one_minus_beta_2"])
        writes = [v.assign(v_t)]
        if self.amsgrad:
            vhat_t = tf.maximum(slots["vhat"], v_t)
            writes.append(slots["vhat"].assign(vhat_t))
            v_t = vhat_t if rows is None else tf.gather(vhat_t, rows)
        return v_t, writes

    def _scaled(self, grad, var_rows, v_t, coefficients, compiled):
        # A select fuses into a compiled pass; in plain ops, tf.cond computes only the branch taken.
        choose = (lambda pred, a, b: tf.where(pred, a(), b())) if compiled else tf.cond
        direction = grad / (tf.sqrt(v_t) + coefficients["epsilon"])
        if coefficients.get("decayed", False):
            wd = coefficients["weight_decay_factor"]
            direction = choose(wd > 0, lambda: direction + wd * var_rows, lambda: direction)
        if self.grad_averaging:
            direction = choose(coefficients["first_step"], lambda: direction,
                               lambda: direction * coefficients["one_minus_beta_1"])
        return direction

    def dense_kernel(self, var, options):
        """This rule's dense step, exactly, when a subclass changes none of it. Where this
        library's kernels are built and ``var`` is on this process's CPU, outside XLA (float32,
        float64, not AMSGrad): the norm as one read of the gradient (the bits of TensorFlow's
        reduction), then one kernel for the direction and TensorFlow's momentum step. Else the
        direction, then TensorFlow's fused momentum kernel (TFA's NovoGrad runs it); the
        direction is TFA's plain ops, except on a variable compiled alone (``jit_compile``, over
        ``BATCH_MAX_ELEMENTS``): there the norm is TensorFlow's reduction and the scaling one
        compiled pass (reading the gradient and the variable once, writing ``d`` once)."""
        hooks = ("prepare", "update_dense", "_direction", "_second_moment", "_scaled")
        if not self.amsgrad:
            attrs = {"decayed": bool(options.get("decayed")), "grad_averaging": self.grad_averaging}
            step = library_kernel(self, NovoGrad, hooks, var, "FusedApplyNovoGrad",
                                  functools.partial(self._kernel_step, attrs))
            if step is not None:
                return step
        if alone(self, var):
            key = ("scaled",) + signature(var, options)
            return kernel_if_unchanged(self, NovoGrad, hooks, var, functools.partial(self._split_step, key))
        return kernel_if_unchanged(self, NovoGrad, hooks, var, self._fused_step)

    def _kernel_step(self, attrs, op, grad, var, slots, c):
        v_t, writes = self._second_moment(kernels.op(var, "SumOfSquares")(grad), slots, c, None)
        decay = c["weight_decay_factor"] if attrs["decayed"] else tf.zeros([], grad.dtype)
        with tf.control_dependencies(writes):
            return op(var=var.handle, m=slots["m"].handle, lr=c["learning_rate"], beta1=c["beta_1"],
                      denominator=tf.sqrt(v_t) + c["epsilon"], weight_decay=decay,
                      first_step=tf.cast(c["first_step"], grad.dtype), grad=grad, **attrs)

    def _fused_step(self, grad, var, slots, coefficients):
        return self._momentum_step(var, slots, coefficients, *self._direction(grad, var, slots, coefficients,
                                                                              compiled=False))

    def _split_step(self, key, grad, var, slots, coefficients):
        v_t, writes = self._second_moment(sum_of_squares(grad, compiled=False), slots, coefficients, None)
        direction = self._compiled.evaluate(self._scaled_compiled, key, grad, var, v_t, coefficients)
        return self._momentum_step(var, slots, coefficients, direction, writes)

    def _scaled_compiled(self, grad, var, v_t, coefficients):
        return self._scaled(grad, var, v_t, coefficients, compiled=True)

    @staticmethod
    def _momentum_step(var, slots, coefficients, direction, writes):
        with tf.control_dependencies(writes):
            return tf.raw_ops.ResourceApplyKerasMomentum(var=var.handle, accum=slots["m"].handle,
                                                         lr=coefficients["learning_rate"], grad=direction,
                                                         momentum=coefficients["beta_1"], use_nesterov=False)

    def update_dense(self, grad, var, slots, coefficients):
        direction, writes = self._direction(grad, var, slots, coefficients)
        m_t = slots["m"] * coefficients["beta_1"] - direction * coefficients["learning_rate"]
        with tf.control_dependencies(writes + [slots["m"].assign(m_t)]):
            return var.assign_add(m_t)

    def update_sparse(self, grad, var, indices, slots, coefficients):
        direction, writes = self._direction(grad, tf.gather(var, indices), slots, coefficients, indices)
        m_rows = tf.gather(slots["m"], indices) * coefficients["beta_1"] - direction * coefficients["learning_rate"]
        with tf.control_dependencies(writes + [slots["m"].scatter_update(tf.IndexedSlices(m_rows, indices))]):
            return var.scatter_add(tf.IndexedSlices(m_rows, indices))
