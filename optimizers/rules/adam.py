"""Adam on the template: the rule AdamW (and any Adam variant) builds on."""

from __future__ import annotations

import functools
from typing import Any

import tensorflow as tf

from optimizers import kernels
from optimizers.hyperparameters import check_bool, check_epsilon
from optimizers.keras2_hyperparameters import constructor_epsilon
from optimizers.rule import kernel_if_unchanged, library_kernel
from optimizers.template import CustomOptimizerV2

__all__ = ["Adam"]


class Adam(CustomOptimizerV2):
    r"""Adam (Kingma & Ba, arXiv:1412.6980), Keras 2's numbers.

    With :math:`\epsilon` outside the square root, at step :math:`t`:

    .. math::
        \begin{align*}
        m &\leftarrow m + (1-\beta_1)(g - m), \qquad v \leftarrow v + (1-\beta_2)(g^2 - v) \\
        \theta &\leftarrow \theta - \eta_t\,\frac{\sqrt{1-\beta_2^t}}{1-\beta_1^t}\,
            \frac{m}{\sqrt{\hat v} + \epsilon},
            \qquad \hat v = v \text{ (AMSGrad: } \hat v \leftarrow \max(\hat v, v))
        \end{align*}

    A dense step without AMSGrad is TensorFlow's fused Adam kernel, the one
    Keras 2's Adam runs (after the weight decay, if any): the same bits, at its
    speed, with nothing to compile; see :meth:`~optimizers.UpdateRule.dense_kernel`
    for when a compiled step fuses more into one pass instead.

    Sparse gradients (``tf.IndexedSlices``, e.g. from an embedding) are never
    turned into dense tensors. By default the moments of *every* row decay each
    step, as in Keras 2's Adam, so the numbers equal Keras 2's but a step costs
    a pass over the whole table. ``lazy=True`` updates only the touched rows'
    moments and weights (TensorFlow Addons' ``LazyAdam`` rule): a step's cost
    follows the touched rows, which suits large embedding tables.

    Args:
        learning_rate: :math:`\eta`: float, tensor, callable or schedule.
            Defaults to ``0.001``.
        beta_1: Decay of the first moment, in ``[0, 1)``. Defaults to ``0.9``.
        beta_2: Decay of the second moment, in ``[0, 1)``. Defaults to ``0.999``.
        epsilon: :math:`\epsilon`, a float ``> 0`` (``0`` or ``None`` means ``keras.backend.epsilon()``,
            as in Keras 2). Defaults to ``1e-7``.
        amsgrad: Use AMSGrad (Reddi et al., arXiv:1904.09237). Defaults to ``False``.
        name: Defaults to ``"Adam"``.
        lazy: Keyword only. Sparse steps update only the touched rows' moments.
            Defaults to ``False``.
        **kwargs: ``weight_decay``, ``exclude_from_weight_decay``,
            ``scale_weight_decay_by_lr``, ``clipnorm``, ``clipvalue``,
            ``global_clipnorm``, ``decay``, ``updaters``, ``jit_compile`` (see
            :class:`~optimizers.CustomOptimizerV2`).

    Example:

    >>> import tensorflow as tf
    >>> import optimizers
    >>> var = tf.Variable([1.0, -2.0])
    >>> _ = optimizers.Adam(learning_rate=0.1).apply_gradients([(tf.constant([0.5, -0.5]), var)])
    >>> [round(x, 5) for x in var.numpy().tolist()]  # the first step moves each weight by lr
    [0.9, -1.9]
    """

    def __init__(self, learning_rate: Any = 0.001, beta_1: Any = 0.9, beta_2: Any = 0.999, epsilon: float = 1e-7,
                 amsgrad: bool = False, name: str = "Adam", *, lazy: bool = False, **kwargs: Any) -> None:
        epsilon = constructor_epsilon(epsilon)
        check_bool("amsgrad", amsgrad)
        check_bool("lazy", lazy)
        super().__init__(name, **kwargs)
        self.add_hyperparameter("learning_rate", learning_rate, low=0.0)
        self.add_hyperparameter("beta_1", beta_1, low=0.0, high=1.0, high_inclusive=False)
        self.add_hyperparameter("beta_2", beta_2, low=0.0, high=1.0, high_inclusive=False)
        self.add_option("epsilon", epsilon, check_epsilon)  # a number, converted per dtype like Keras 2's Adam
        self.add_option("amsgrad", amsgrad, functools.partial(check_bool, "amsgrad"))
        self.add_option("lazy", lazy, functools.partial(check_bool, "lazy"))

    def slot_specs(self, var: tf.Variable) -> list[str]:
        return ["m", "v", "vhat"] if self.amsgrad else ["m", "v"]

    def prepare(self, dtype: tf.DType, coefficients: dict) -> None:
        step, lr = coefficients["step"], coefficients["learning_rate"]
        beta_1_power = coefficients["beta_1_power"] = tf.pow(coefficients["beta_1"], step)
        beta_2_power = coefficients["beta_2_power"] = tf.pow(coefficients["beta_2"], step)
        coefficients["alpha"] = lr * tf.sqrt(1 - beta_2_power) / (1 - beta_1_power)
        coefficients["epsilon"] = tf.constant(self.epsilon, dtype)

    def dense_kernel(self, var, options):
        """TensorFlow's fused Adam kernel (Keras 2's Adam runs it): this rule's dense step, exactly,
        when a subclass changes none of it. Not with AMSGrad, whose kernel XLA cannot compile."""
        if self.amsgrad:
            return None
        return kernel_if_unchanged(self, Adam, ("prepare", "update_dense", "_update"), var, self._fused_step)

    def fused_dense_kernel(self, var, options, decay, average):
        """The decay, Adam's kernel and the average as one kernel (``optimizers.kernels``: the bits
        of TensorFlow's kernels in one pass over memory), where it is built and ``var`` is on this
        process's CPU, outside XLA."""
        op = kernels.fused_adam(var, decay, average) if self.dense_kernel(var, options) is not None else None
        return None if op is None else functools.partial(self._fused_kernel_step, op, decay)

    @staticmethod
    def _fused_extras(coefficients, decay, extra):
        """A fused op's inputs beside Adam's: the decay's factor (``decay``), the average's handle and rate."""
        if decay:
            extra["decay"] = coefficients["weight_decay_factor"]
        if "average" in extra:
            extra["average"] = extra["average"].handle
        return extra

    @staticmethod
    def _fused_kernel_step(op, decay, grad, var, slots, coefficients, **extra):
        return op(var=var.handle, m=slots["m"].handle, v=slots["v"].handle, grad=grad,
                  beta1_power=coefficients["beta_1_power"], beta2_power=coefficients["beta_2_power"],
                  lr=coefficients["learning_rate"], beta1=coefficients["beta_1"], beta2=coefficients["beta_2"],
                  epsilon=coefficients["epsilon"], **Adam._fused_extras(coefficients, decay, extra))

    def fused_sparse_kernel(self, var, options, decay, average):
        """Keras's sparse step (not lazy: every row's moments decay and every row moves) with the
        decay of the touched rows and the average as one kernel (``optimizers.kernels``: the bits
        of :meth:`update_sparse` and of the decay and average ops, each array read and written
        once), where it is available for ``var``; not with AMSGrad."""
        if self.lazy or self.amsgrad:
            return None
        op = kernels.fused_adam(var, decay, average, sparse=True)
        if op is None:
            return None
        return kernel_if_unchanged(self, Adam, ("prepare", "update_sparse", "_update"), var,
                                   functools.partial(self._sparse_kernel_step, op, decay=decay))

    def _fused_step(self, grad, var, slots, coefficients):
        return tf.raw_ops.ResourceApplyAdam(
            var=var.handle, m=slots["m"].handle, v=slots["v"].handle, grad=grad,
            beta1_power=coefficients["beta_1_power"], beta2_power=coefficients["beta_2_power"],
            lr=coefficients["learning_rate"], beta1=coefficients["beta_1"], beta2=coefficients["beta_2"],
            epsilon=coefficients["epsilon"])

    @staticmethod
    def _update(m, v, coefficients):
        return coefficients["alpha"] * m / (tf.sqrt(v) + coefficients["epsilon"])

    def update_dense(self, grad, var, slots, coefficients):
        m, v = slots["m"], slots["v"]
        # New values first, assignments last: XLA then reads each slot once.
        m_t = m + (grad - m) * (1 - coefficients["beta_1"])
        v_t = v + (tf.square(grad) - v) * (1 - coefficients["beta_2"])
        m.assign(m_t)
        v.assign(v_t)
        if self.amsgrad:
            v_t = tf.maximum(slots["vhat"], v_t)
            slots["vhat"].assign(v_t)
        return var.assign_sub(self._update(m_t, v_t, coefficients))

    def _lazy_kernel(self, var):
        """The lazy sparse step below as one kernel (``optimizers.kernels``: each touched row read and
        written once, the same bits), where it is available for ``var``; not with AMSGrad."""
        if self.amsgrad:
            return None
        return library_kernel(self, Adam, ("_update",), var, "FusedSparseApplyLazyAdam", self._sparse_kernel_step)

    @staticmethod
    def _sparse_kernel_step(op, grad, var, indices, slots, coefficients, decay=False, **extra):
        """A sparse kernel's call (lazy, or every row with ``decay`` and the average's ``extra``)."""
        return op(var=var.handle, m=slots["m"].handle, v=slots["v"].handle, alpha=coefficients["alpha"],
                  beta1=coefficients["beta_1"], beta2=coefficients["beta_2"], epsilon=coefficients["epsilon"],
                  grad=grad, indices=indices, **Adam._fused_extras(coefficients, decay, extra))

    def update_sparse(self, grad, var, indices, slots, coefficients):
        m, v = slots["m"], slots["v"]
        beta_1, beta_2 = coefficients["beta_1"], coefficients["beta_2"]
        if self.lazy:  # the touched rows only
            kernel = self._lazy_kernel(var)
            if kernel is not None:
                return kernel(grad, var, indices, slots, coefficients)
            m_rows = beta_1 * tf.gather(m, indices) + (1 - beta_1) * grad
            v_rows = beta_2 * tf.gather(v, indices) + (1 - beta_2) * tf.square(grad)
            writes = [m.scatter_update(tf.IndexedSlices(m_rows, indices)),
                      v.scatter_update(tf.IndexedSlices(v_rows, indices))]
            if self.amsgrad:
                v_rows = tf.maximum(tf.gather(slots["vhat"], indices), v_rows)
                writes.append(slots["vhat"].scatter_update(tf.IndexedSlices(v_rows, indices)))
            # The three scatters read only the rows computed above: none waits for another (as TFA).
            update = var.scatter_sub(tf.IndexedSlices(self._update(m_rows, v_rows, coefficients), indices))
            return tf.group(writes + [update])
        # Every row's moments decay, the gradient's rows are scattered in (Keras 2's sparse Adam).
        m.assign(m * beta_1)
        m_t = m.scatter_add(tf.IndexedSlices(grad * (1 - beta_1), indices))
        v.assign(v * beta_2)
        v_t = v.scatter_add(tf.IndexedSlices(tf.square(grad) * (1 - beta_2), indices))
        if self.amsgrad:
            v_t = slots["vhat"].assign(tf.maximum(slots["vhat"], v_t))
        return var.assign_sub(self._update(m_t, v_t, coefficients))
