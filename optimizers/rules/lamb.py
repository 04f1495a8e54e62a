"""LAMB: Adam's direction plus weight decay, rescaled per variable; TensorFlow Addons' ``LAMB`` successor."""

from __future__ import annotations

import functools
import warnings
from typing import Any

import tensorflow as tf

from optimizers import kernels
from optimizers.compiled import alone, signature
from optimizers.hyperparameters import check_epsilon, check_number
from optimizers.keras2_hyperparameters import constructor_epsilon
from optimizers.rule import kernel_if_unchanged, library_kernel, sum_of_squares
from optimizers.template import CustomOptimizerV2
from optimizers.weight_decay import VariableMask, check_patterns

__all__ = ["LAMB"]


_plain_squares = functools.partial(sum_of_squares, compiled=False)


class LAMB(CustomOptimizerV2):
    r"""LAMB (You et al., arXiv:1904.00962), TensorFlow Addons' numbers.

    Adam's bias-corrected direction, plus the weight decay, rescaled per
    variable by the trust ratio :math:`r`, at step :math:`t`:

    .. math::
        \begin{align*}
        m &\leftarrow \beta_1 m + (1-\beta_1)\,g, \qquad v \leftarrow \beta_2 v + (1-\beta_2)\,g^2 \\
        u &= \frac{m / (1-\beta_1^t)}{\sqrt{v / (1-\beta_2^t)} + \epsilon} + \lambda_t\,\theta
            && \lambda_t\theta \text{ unless excluded from weight decay} \\
        r &= \|\theta\|_2 / \|u\|_2 \text{ if both norms are } > 0 \text{, else } 1
            && r = 1 \text{ if excluded from layer adaptation} \\
        \theta &\leftarrow \theta - \eta_t\, r\, u
        \end{align*}

    Norms are over the whole variable. A sparse gradient gives the same step
    as its dense equivalent (every row's moments decay, as in TFA).

    As in TFA, ``exclude_from_layer_adaptation=None`` (or ``[]``) means "the
    same as ``exclude_from_weight_decay``" (configs and scripts written for TFA
    rely on it). ``decay_var_list`` (given to ``apply_gradients``/``minimize``)
    chooses the decayed variables; the layer adaptation still follows the
    exclusion lists. Fix over TFA: ``epsilon=0`` is used as given (TFA's LAMB
    raises ``AttributeError`` on it).

    Args:
        learning_rate: :math:`\eta`: float, tensor, callable or schedule.
            Defaults to ``0.001``.
        beta_1: Decay of the first moment, in ``[0, 1)``. Defaults to ``0.9``.
        beta_2: Decay of the second moment, in ``[0, 1)``. Defaults to ``0.999``.
        epsilon: :math:`\epsilon`, a float ``> 0`` (``0`` or ``None`` means
            ``keras.backend.epsilon()``, as in Keras 2 and TFA). Defaults to ``1e-6``.
        weight_decay: :math:`\lambda`: float, tensor, callable or schedule,
            ``>= 0``. Defaults to ``0.0``. TFA's old name ``weight_decay_rate``
            is accepted with a ``DeprecationWarning``.
        exclude_from_weight_decay: Regexes searched in ``var.name``; matching
            variables are not decayed. Defaults to ``None``. Also an attribute,
            settable before the first step (as in TFA, setting it then leaves
            ``exclude_from_layer_adaptation`` as constructed).
        exclude_from_layer_adaptation: Regexes searched in ``var.name``;
            matching variables take :math:`r = 1`. Defaults to ``None``
            (``exclude_from_weight_decay``'s list).
        name: Defaults to ``"LAMB"``.
        **kwargs: ``clipnorm``, ``clipvalue``, ``global_clipnorm``, ``decay``,
            ``updaters``, ``jit_compile`` (see :class:`~optimizers.CustomOptimizerV2`).

    Example:

    >>> import tensorflow as tf
    >>> from optimizers.rules.lamb import LAMB
    >>> var = tf.Variable([3.0, -4.0])  # norm 5
    >>> _ = LAMB(learning_rate=0.1).apply_gradients([(tf.constant([1.0, 1.0]), var)])
    >>> [round(x, 4) for x in var.numpy().tolist()]  # first step: u = g / |g| = [1, 1], r = 5 / sqrt(2)
    [2.6464, -4.3536]
    """

    weight_decay_placement = "inside"  # the decay is part of the direction the trust ratio rescales
    decay_scaled_by_rule = True  # the learning rate multiplies the whole update
    whole_variable = True  # norms of the whole variable: a shard of a sharded one is refused

    def __init__(self, learning_rate: Any = 0.001, beta_1: Any = 0.9, beta_2: Any = 0.999, epsilon: float = 1e-6,
                 weight_decay: Any = 0.0, exclude_from_weight_decay: list[str] | None = None,
                 exclude_from_layer_adaptation: list[str] | None = None, name: str = "LAMB",
                 **kwargs: Any) -> None:
        if "weight_decay_rate" in kwargs:
            warnings.warn("`weight_decay_rate` is deprecated (TFA renamed it), use `weight_decay` instead.",
                          DeprecationWarning, stacklevel=2)
            weight_decay = kwargs.pop("weight_decay_rate")
        epsilon = constructor_epsilon(epsilon)
        check_number("weight_decay", weight_decay, low=0.0)  # None too: LAMB always has a decay
        check_patterns("exclude_from_weight_decay", exclude_from_weight_decay)
        check_patterns("exclude_from_layer_adaptation", exclude_from_layer_adaptation)
        super().__init__(name, weight_decay=weight_decay, exclude_from_weight_decay=exclude_from_weight_decay,
                         **kwargs)
        self.add_hyperparameter("learning_rate", learning_rate, low=0.0)
        self.add_hyperparameter("beta_1", beta_1, low=0.0, high=1.0, high_inclusive=False)
        self.add_hyperparameter("beta_2", beta_2, low=0.0, high=1.0, high_inclusive=False)
        self.add_option("epsilon", epsilon, check_epsilon)
        self.add_option("exclude_from_layer_adaptation", exclude_from_layer_adaptation or exclude_from_weight_decay,
                        functools.partial(check_patterns, "exclude_from_layer_adaptation"))

    def slot_specs(self, var: tf.Variable) -> list[str]:
        return ["m", "v"]

    def variable_options(self, var: tf.Variable) -> dict[str, bool]:
        if "_not_adapted" not in self.__dict__:  # built at the first step, when the options are locked
            self._not_adapted = VariableMask(self.exclude_from_layer_adaptation, "exclude_from_layer_adaptation")
        return {"layer_adaptation": not self._not_adapted.matches(var)}

    def step_coefficients(self, dtype: tf.DType, iterations: Any, state: Any = None) -> dict[str, Any]:
        """For a bfloat16 variable the coefficients are computed in float32, then rounded: in
        bfloat16, ``0.999`` is ``1.0``, so ``1 - beta_2`` and the bias correction
        :math:`1 - \\beta_2^t` would be zero (a step of NaN), and steps past 256 are not exact."""
        if dtype != tf.bfloat16:
            return super().step_coefficients(dtype, iterations, state)
        coefficients = super().step_coefficients(tf.float32, iterations, state)
        return {k: tf.cast(v, dtype) if tf.is_tensor(v) and v.dtype == tf.float32 else v
                for k, v in coefficients.items()}

    def prepare(self, dtype: tf.DType, coefficients: dict) -> None:
        step, beta_1, beta_2 = coefficients["step"], coefficients["beta_1"], coefficients["beta_2"]
        coefficients.update(one_minus_beta_1=1 - beta_1, one_minus_beta_2=1 - beta_2,
                            m_correction=1 - tf.pow(beta_1, step), v_correction=1 - tf.pow(beta_2, step),
                            epsilon=tf.constant(self.epsilon, dtype))

    def dense_kernel(self, var, options):
        """Where this library's kernels are built and ``var`` is on this process's CPU, outside XLA
        (float32, float64): the direction :math:`u` as one kernel (its pass also writes :math:`m`
        and :math:`v`), the norms as one read each (the bits of TensorFlow's reductions) and the
        step as TensorFlow's gradient-descent kernel: TFA's bits. Else a variable compiled alone
        (``jit_compile``, over ``BATCH_MAX_ELEMENTS``) takes the same three pieces with the
        direction compiled and the norms as TensorFlow's reductions (XLA's CPU reductions of 8
        variables of 1M measured 3x slower: ``benchmarks/run.py "layerwise norms"``); smaller
        variables keep the compiled step in chunks."""
        hooks = ("prepare", "update_dense", "_direction", "_ratio")
        attrs = {"decayed": bool(options.get("decayed"))}
        step = library_kernel(self, LAMB, hooks, var, "FusedLambDirection", functools.partial(self._kernel_step, attrs))
        if step is not None or not alone(self, var):
            return step
        key = ("direction",) + signature(var, options)
        return kernel_if_unchanged(self, LAMB, hooks, var, functools.partial(self._split_step, key))

    def _kernel_step(self, attrs, op, grad, var, slots, c):
        decay = c["weight_decay_factor"] if attrs["decayed"] else tf.zeros([], grad.dtype)
        update = op(m=slots["m"].handle, v=slots["v"].handle, var=var.handle, beta1=c["beta_1"], beta2=c["beta_2"],
                    epsilon=c["epsilon"], c1=c["m_correction"], c2=c["v_correction"], weight_decay=decay, grad=grad,
                    **attrs)
        alpha = self._ratio(var, update, c, kernels.op(var, "SumOfSquares")) * c["learning_rate"]
        return tf.raw_ops.ResourceApplyGradientDescent(var=var.handle, alpha=alpha, delta=update)

    def _split_step(self, key, grad, var, slots, coefficients):
        update = self._compiled.evaluate(self._direction, key, grad, var, slots, coefficients)
        alpha = self._ratio(var, update, coefficients, _plain_squares) * coefficients["learning_rate"]
        return tf.raw_ops.ResourceApplyGradientDescent(var=var.handle, alpha=alpha, delta=update)

    def _direction(self, grad, var, slots, coefficients):
        """:math:`u`, after writing the new :math:`m` and :math:`v`."""
        m, v = slots["m"], slots["v"]
        m_t = m * coefficients["beta_1"] + grad * coefficients["one_minus_beta_1"]
        v_t = v * coefficients["beta_2"] + (grad * grad) * coefficients["one_minus_beta_2"]
        update = (m_t / coefficients["m_correction"]) / (
            tf.sqrt(v_t / coefficients["v_correction"]) + coefficients["epsilon"])
        if coefficients.get("decayed", False):  # Python bools: one compiled step per kind of variable
            update += coefficients["weight_decay_factor"] * var
        m.assign(m_t)
        v.assign(v_t)
        return update

    @staticmethod
    def _ratio(var, update, coefficients, squares):
        """The trust ratio :math:`r` (``1.0`` for a variable excluded from layer adaptation), with
        ``squares(x)`` the sum of the squares of ``x``."""
        if not coefficients["layer_adaptation"]:
            return 1.0
        w_norm = tf.sqrt(squares(var))
        u_norm = tf.sqrt(squares(update))
        return tf.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, tf.ones_like(w_norm))

    def update_dense(self, grad, var, slots, coefficients):
        update = self._direction(grad, var, slots, coefficients)
        ratio = self._ratio(var, update, coefficients, functools.partial(sum_of_squares, compiled=self.jit_compile))
        return var.assign(var - ratio * coefficients["learning_rate"] * update)
