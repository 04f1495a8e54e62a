"""Conditional gradient (Frank-Wolfe) in a norm ball; TensorFlow Addons' ``ConditionalGradient`` successor."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import tensorflow as tf

from optimizers import kernels
from optimizers.compiled import alone, signature
from optimizers.hyperparameters import check_epsilon
from optimizers.keras2_hyperparameters import constructor_epsilon
from optimizers.rule import kernel_if_unchanged, library_kernel, sum_of_squares
from optimizers.template import CustomOptimizerV2

__all__ = ["ConditionalGradient"]

ORDS = ("fro", "nuclear")


def check_ord(value: Any) -> None:
    if not isinstance(value, str) or value not in ORDS:
        raise ValueError(f"`ord` must be one of {ORDS}. Received: ord={value!r}")


def top_singular_direction(grad: tf.Tensor) -> tf.Tensor:
    """:math:`u_1 v_1^T` of ``grad`` seen as a matrix (a vector as one row; rank > 2: the last axis
    as columns), shaped like ``grad``."""
    matrix = tf.reshape(grad, [1, -1] if grad.shape.rank < 2 else [-1, tf.shape(grad)[-1]])
    _, u, v = tf.linalg.svd(matrix, full_matrices=False)
    return tf.reshape(tf.matmul(u[:, :1], v[:, :1], transpose_b=True), tf.shape(grad))


class ConditionalGradient(CustomOptimizerV2):
    r"""Conditional gradient (Frank-Wolfe) with a norm-ball constraint, TensorFlow Addons' numbers.

    A variable that starts in the ball :math:`\|\theta\| \le \lambda` (Frobenius
    norm, or nuclear norm) stays in it: each step moves it towards the ball's
    point that minimizes the linearized loss, :math:`-\lambda s`, with
    :math:`1-\eta` as the Frank-Wolfe step size (Frank & Wolfe, 1956; Jaggi,
    ICML 2013; TFA cites arXiv:1803.06453):

    .. math::
        \begin{align*}
        s &= \frac{g}{\|g\|_F + \epsilon} \quad \text{(ord="fro")}, \qquad
            s = u_1 v_1^{\top} \quad \text{(ord="nuclear": top singular vectors of } g) \\
        \theta &\leftarrow \eta_t\,\theta - (1-\eta_t)\,\lambda_t\, s
        \end{align*}

    So ``learning_rate`` is the fraction of :math:`\theta` *kept* (``1``: no
    change). For ``"nuclear"`` a vector is one row and a scalar a
    :math:`1 \times 1` matrix, as in TFA; a variable of rank > 2 (a
    convolution kernel) is a matrix whose columns are its last axis (TFA
    fails on it). A sparse gradient updates only its rows, with :math:`s`
    computed from those rows, as in TFA.

    A dense step (float32, float64, on this process's CPU, where this
    library's kernels are built) is the norm in one read of the gradient (the
    bits of TensorFlow's reduction), then one fused pass that reads the
    gradient and the variable and writes the variable: TFA's bits, in four
    passes over memory, where TFA's step runs six whole-array ops (a power, a
    sum, a quotient, two products and a difference). Without the kernels,
    the norm is computed outside XLA (XLA's CPU reductions are slow: a
    compiled step with it measured 1.15x TFA's on 8M parameters); on a
    variable compiled alone (``jit_compile``, over ``BATCH_MAX_ELEMENTS``) the
    rest of the step is one compiled pass, otherwise TFA's ops, except that
    :math:`\theta \mathrel{-}= (1-\eta_t)\lambda_t\, s` is TensorFlow's fused
    gradient-descent kernel (TFA's bits). With ``ord="nuclear"`` the fused
    pass follows TensorFlow's SVD kernel: XLA's CPU SVD took 30 s where
    TensorFlow's takes 11 ms (a 125 x 1000 gradient), and is less accurate
    in float64 (``jit_compile`` reads ``False``).

    Fixes over TFA: learning-rate schedules work (TFA raises), and the legacy
    ``decay`` argument applies to :math:`\eta` (TFA ignores it). TFA's unused
    all-zero slot ``"conditional_gradient"`` is not created; TFA's ``.h5``
    files still load (:meth:`set_weights` drops those zeros).

    Args:
        learning_rate: :math:`\eta` in ``[0, 1]``: float, tensor, callable or schedule. Required.
        lambda_: :math:`\lambda`, the radius of the ball, ``>= 0``: float,
            tensor, callable or schedule. Defaults to ``0.01``.
        epsilon: :math:`\epsilon`, a float ``> 0`` (``0`` or ``None`` means
            ``keras.backend.epsilon()``, as in Keras 2 and TFA). Defaults to ``1e-7``.
        ord: ``"fro"`` or ``"nuclear"``. Defaults to ``"fro"``.
        name: Defaults to ``"ConditionalGradient"``.
        **kwargs: ``clipnorm``, ``clipvalue``, ``global_clipnorm``, ``decay``,
            ``updaters``, ``jit_compile`` (see :class:`~optimizers.CustomOptimizerV2`).

    Example:

    >>> import tensorflow as tf
    >>> from optimizers.rules.conditional_gradient import ConditionalGradient
    >>> var = tf.Variable([1.0, 2.0])
    >>> _ = ConditionalGradient(learning_rate=0.5, lambda_=1.0).apply_gradients([(tf.constant([3.0, 4.0]), var)])
    >>> [round(x, 4) for x in var.numpy().tolist()]  # 0.5 * theta - 0.5 * g / 5
    [0.2, 0.6]
    """

    decay_variable = False  # TFA's checkpoints have no `decay` variable
    weight_decay_placement = "none"
    whole_variable = True  # norms of the whole variable: a shard of a sharded one is refused

    def __init__(self, learning_rate: Any, lambda_: Any = 0.01, epsilon: float = 1e-7, ord: str = "fro",
                 name: str = "ConditionalGradient", **kwargs: Any) -> None:
        epsilon = constructor_epsilon(epsilon)
        check_ord(ord)
        super().__init__(name, **kwargs)
        self.add_hyperparameter("learning_rate", learning_rate, low=0.0, high=1.0)
        self.add_hyperparameter("lambda_", lambda_, low=0.0)
        self.add_option("epsilon", epsilon, check_epsilon)
        self.add_option("ord", ord, check_ord)

    @property
    def jit_compile(self) -> bool:
        """Whether the steps are XLA-compiled: never with ``ord="nuclear"``."""
        return self.__dict__["_jit_compile"] and self.__dict__.get("ord") == "fro"

    @jit_compile.setter
    def jit_compile(self, value: bool) -> None:
        self.__dict__["_jit_compile"] = value

    def set_weights(self, weights: Any) -> None:
        """Keras' ``set_weights``; also takes the weights of TFA's ``.h5`` files, which hold, after the step
        counter, one unused all-zero slot ``"conditional_gradient"`` per variable (this class has no slots)."""
        weights = list(weights)
        if len(self.weights) == 1 and len(weights) > 1 and all(not np.any(w) for w in weights[1:]):
            weights = weights[:1]
        super().set_weights(weights)

    def prepare(self, dtype: tf.DType, coefficients: dict) -> None:
        lr = coefficients["learning_rate"]
        coefficients.update(step_size=(1 - lr) * coefficients["lambda_"], epsilon=tf.constant(self.epsilon, dtype))

    def _target(self, grad, coefficients, compiled=None, norm=None):
        """:math:`s` (``norm``: the gradient's, if computed already)."""
        if self.ord == "nuclear":
            return top_singular_direction(grad)
        if norm is None:
            norm = tf.sqrt(sum_of_squares(grad, self.jit_compile if compiled is None else compiled))
        return grad / (norm + coefficients["epsilon"])

    def dense_kernel(self, var, options):
        """The dense step outside the template's compiled step (see the class docstring), when a
        subclass changes none of it: the norm (or the SVD) then this library's fused pass; where
        that kernel is not available, plain ops, or on a variable compiled alone (``jit_compile``,
        over ``BATCH_MAX_ELEMENTS``) the norm in plain ops, then the step in one compiled pass."""
        hooks = ("prepare", "update_dense", "_target")
        step = library_kernel(self, ConditionalGradient, hooks, var, "FusedApplyConditionalGradient",
                              self._kernel_step)
        if step is not None:
            return step
        if alone(self, var):
            key = ("given norm",) + signature(var, options)
            return kernel_if_unchanged(self, ConditionalGradient, hooks, var, functools.partial(self._split_step, key))
        return kernel_if_unchanged(self, ConditionalGradient, hooks, var, self._plain_step)

    def _kernel_step(self, op, grad, var, slots, coefficients):
        # theta * eta - (s / denominator) * step_size in one pass: with "nuclear", s / 1 is s, exactly.
        if self.ord == "nuclear":
            target, denominator = top_singular_direction(grad), tf.ones([], grad.dtype)
        else:
            target, denominator = grad, tf.sqrt(kernels.op(var, "SumOfSquares")(grad)) + coefficients["epsilon"]
        return op(var=var.handle, lr=coefficients["learning_rate"], step_size=coefficients["step_size"],
                  denominator=denominator, grad=target)

    def _split_step(self, key, grad, var, slots, coefficients):
        norm = tf.sqrt(sum_of_squares(grad, compiled=False))
        return self._compiled.run(self._step_given_norm, key, grad, var, norm, coefficients)

    def _step_given_norm(self, grad, var, norm, coefficients):
        target = self._target(grad, coefficients, norm=norm)
        return var.assign(var * coefficients["learning_rate"] - coefficients["step_size"] * target)

    def _plain_step(self, grad, var, slots, coefficients):
        # TFA's bits in two passes fewer: eta * theta, then theta -= step_size * s in one kernel.
        target = self._target(grad, coefficients, compiled=False)
        with tf.control_dependencies([var.assign(var * coefficients["learning_rate"])]):
            return tf.raw_ops.ResourceApplyGradientDescent(var=var.handle, alpha=coefficients["step_size"],
                                                           delta=target)

    def update_dense(self, grad, var, slots, coefficients):
        return var.assign(var * coefficients["learning_rate"] - coefficients["step_size"] * self._target(grad, coefficients))

    def update_sparse(self, grad, var, indices, slots, coefficients):
        rows = tf.gather(var, indices) * coefficients["learning_rate"]
        return var.scatter_update(tf.IndexedSlices(rows - coefficients["step_size"] * self._target(grad, coefficients),
                                                   indices))
