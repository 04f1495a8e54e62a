"""Schedule-free AdamW and SGD: no learning-rate schedule, an average to evaluate."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from optimizers.hyperparameters import check_epsilon, check_integer, epsilon_in
from optimizers.slots import SlotSpec, StateSpec
from optimizers.template import CustomOptimizerV2

__all__ = ["ScheduleFreeAdamW", "ScheduleFreeSGD"]


class _ScheduleFree(CustomOptimizerV2):
    r"""Schedule-free learning (Defazio et al., arXiv:2405.15682): the base step moves a sequence
    :math:`z`, the evaluation point :math:`x` averages it, and the gradient is taken at their
    interpolation :math:`y`, the variable itself. At step :math:`t` (1-based), with the base
    step's direction :math:`u_t` (the subclass's) and learning rate :math:`\eta_t`:

    .. math::
        \begin{align*}
        z_t &= z_{t-1} - \eta_t\,(u_t + \lambda\,y_{t-1}), \qquad
        x_{t-1} = \bigl(y_{t-1} - (1-\beta_1)\,z_{t-1}\bigr) / \beta_1 \\
        x_t &= (1 - c_t)\,x_{t-1} + c_t\,z_t, \qquad
        y_t = \beta_1 x_t + (1-\beta_1)\,z_t \\
        c_t &= \frac{m_t^{p}}{\sum_{s \le t} m_s^{p}}, \qquad m_t = \max_{s \le t} \eta'_s
        \end{align*}

    The slot :math:`z` starts at the variable's value; :math:`x` is not stored but formed from
    :math:`y` and :math:`z`, so the memory is the base optimizer's. The running maximum
    :math:`m_t` (``max_learning_rate``) and the weight sum (``weight_sum``) are optimizer-wide
    state. ``warmup_steps`` :math:`W` scales the learning rate by :math:`\min(s, W)/W` at step
    count :math:`s`; as in optax, the base step reads the count of steps taken (:math:`t-1`, so
    the first step with a warm-up moves nothing) and the average's weight :math:`\eta'_t` the
    count one ahead (:math:`t`), schedules included (on Keras 3, whose learning rate the rule
    reads at the step only, this step's rate). Evaluate at :math:`x`: ``swap_weights()``, or
    the averaging callbacks (``MovingAverageCallback``, ``averaged_weights``). The weight decay
    :math:`\lambda` is scaled by the learning rate, taken at :math:`y` (optax's). A sparse
    gradient takes the dense step (every row moves towards the average).
    """

    weight_decay_placement = "inside"
    decay_scaled_by_rule = True  # the decay joins the base step, which the learning rate scales

    def __init__(self, name: str, learning_rate: Any, warmup_steps: int | None, beta_1: Any, weight_lr_power: Any,
                 **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.add_hyperparameter("learning_rate", learning_rate, low=0.0)
        self.add_hyperparameter("beta_1", beta_1, low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)
        self.add_hyperparameter("weight_lr_power", weight_lr_power, low=0.0)
        self.add_option("warmup_steps", warmup_steps, lambda value: check_integer("warmup_steps", value, 1, True))

    def state_specs(self):
        return [StateSpec("max_learning_rate"), StateSpec("weight_sum")]

    def _warm(self, lr: tf.Tensor, count: tf.Tensor) -> tf.Tensor:
        if self.warmup_steps is None:
            return lr
        return lr * tf.minimum(count, self.warmup_steps) / self.warmup_steps

    def next_state(self, state, c):
        step = c["step"]
        lr = self._warm(self.hyperparameter("learning_rate", step.dtype, step), step)
        return {"max_learning_rate": tf.maximum(state["max_learning_rate"], lr),
                "weight_sum": state["weight_sum"] + tf.maximum(state["max_learning_rate"], lr) ** c["weight_lr_power"]}

    def slot_specs(self, var):
        return [SlotSpec("z", initializer=lambda shape, dtype: tf.identity(var))] + self.base_slots()

    def base_slots(self) -> list:
        """The base step's slots (beside ``z``)."""
        return []

    def prepare(self, dtype, c):
        weight = c["max_learning_rate"] ** tf.cast(c["weight_lr_power"], c["max_learning_rate"].dtype)
        c["average_rate"] = tf.cast(tf.math.divide_no_nan(weight, c["weight_sum"]), dtype)
        c["learning_rate"] = self._warm(c["learning_rate"], c["step"] - 1)

    def direction(self, grad: tf.Tensor, slots: dict, c: dict) -> tf.Tensor:
        """:math:`u_t`, the base step's direction (updating its slots)."""
        raise NotImplementedError

    def update_dense(self, grad, var, slots, c):
        z, beta_1 = slots["z"], c["beta_1"]
        direction = self.direction(grad, slots, c)
        if c.get("decayed"):
            direction += c["weight_decay_factor"] * var
        x = (var - (1 - beta_1) * z) / beta_1
        z_t = z.assign(z - c["learning_rate"] * direction)
        x_t = (1 - c["average_rate"]) * x + c["average_rate"] * z_t
        return var.assign(beta_1 * x_t + (1 - beta_1) * z_t)

    def evaluation_point(self, var, slots, c):
        return (var - (1 - c["beta_1"]) * slots["z"]) / c["beta_1"]

    def training_point(self, evaluation, slots, c):
        return c["beta_1"] * evaluation + (1 - c["beta_1"]) * slots["z"]


class ScheduleFreeAdamW(_ScheduleFree):
    __doc__ = _ScheduleFree.__doc__ + r"""
    Here the base step is Adam's without momentum: :math:`\nu_t = \beta_2\nu_{t-1} +
    (1-\beta_2)\,g_t^2` and :math:`u_t = g_t / (\sqrt{\nu_t / (1-\beta_2^t)} + \epsilon)`.

    Args:
        learning_rate: :math:`\eta`: float, tensor, callable or schedule (flat: the average
            replaces the decay). Defaults to ``0.0025``.
        warmup_steps: :math:`W`, steps, or ``None`` (the default) for none.
        beta_1: :math:`\beta_1`, in ``(0, 1)``. Defaults to ``0.9``.
        beta_2: :math:`\beta_2`, in ``[0, 1)``. Defaults to ``0.999``.
        epsilon: :math:`\epsilon`, a float ``> 0``. Defaults to ``1e-8``.
        weight_lr_power: :math:`p`, ``>= 0``. Defaults to ``2.0``.
        name: Defaults to ``"ScheduleFreeAdamW"``.
        **kwargs: ``weight_decay`` (:math:`\lambda`; ``None``, the default, for none),
            ``exclude_from_weight_decay``, ``clipnorm``, ``clipvalue``, ``global_clipnorm``,
            ``updaters``, ``jit_compile`` (see :class:`~optimizers.CustomOptimizerV2`).

    Example:

    >>> import tensorflow as tf
    >>> import optimizers
    >>> var = tf.Variable([1.0, -2.0])
    >>> opt = optimizers.ScheduleFreeAdamW(learning_rate=0.1)
    >>> _ = opt.apply_gradients([(tf.constant([0.5, -0.5]), var)])
    >>> [round(x, 5) for x in var.numpy().tolist()]  # y: 0.9 x + 0.1 z, z moved by lr, x = z (c = 1)
    [0.9, -1.9]
    >>> opt.swap_weights()  # the evaluation point x
    >>> [round(x, 5) for x in var.numpy().tolist()]
    [0.9, -1.9]
    """

    def __init__(self, learning_rate: Any = 0.0025, warmup_steps: int | None = None, beta_1: Any = 0.9,
                 beta_2: Any = 0.999, epsilon: float = 1e-8, weight_lr_power: Any = 2.0,
                 name: str = "ScheduleFreeAdamW", **kwargs: Any) -> None:
        super().__init__(name, learning_rate, warmup_steps, beta_1, weight_lr_power, **kwargs)
        self.add_hyperparameter("beta_2", beta_2, low=0.0, high=1.0, high_inclusive=False)
        self.add_option("epsilon", epsilon, check_epsilon)

    def base_slots(self):
        return ["nu"]

    def direction(self, grad, slots, c):
        beta_2 = c["beta_2"]
        nu = slots["nu"].assign(beta_2 * slots["nu"] + (1 - beta_2) * tf.square(grad))
        return grad / (tf.sqrt(nu / (1 - tf.pow(beta_2, c["step"]))) + epsilon_in(self.epsilon, grad.dtype))


class ScheduleFreeSGD(_ScheduleFree):
    __doc__ = _ScheduleFree.__doc__ + r"""
    Here the base step is plain gradient descent: :math:`u_t = g_t`.

    Args:
        learning_rate: :math:`\eta`: float, tensor, callable or schedule. Defaults to ``1.0``.
        warmup_steps: :math:`W`, steps, or ``None`` (the default) for none.
        beta_1: :math:`\beta_1`, in ``(0, 1)``. Defaults to ``0.9``.
        weight_lr_power: :math:`p`, ``>= 0``. Defaults to ``2.0``.
        name: Defaults to ``"ScheduleFreeSGD"``.
        **kwargs: ``weight_decay`` (:math:`\lambda`), ``exclude_from_weight_decay``, ``clipnorm``,
            ``clipvalue``, ``global_clipnorm``, ``updaters``, ``jit_compile`` (see
            :class:`~optimizers.CustomOptimizerV2`).

    Example:

    >>> import tensorflow as tf
    >>> import optimizers
    >>> var = tf.Variable([1.0])
    >>> opt = optimizers.ScheduleFreeSGD(learning_rate=0.5)
    >>> _ = opt.apply_gradients([(tf.constant([1.0]), var)])
    >>> var.numpy().tolist()  # z = 0.5 and x = z (the first average), y = 0.9 x + 0.1 z
    [0.5]
    """

    def __init__(self, learning_rate: Any = 1.0, warmup_steps: int | None = None, beta_1: Any = 0.9,
                 weight_lr_power: Any = 2.0, name: str = "ScheduleFreeSGD", **kwargs: Any) -> None:
        super().__init__(name, learning_rate, warmup_steps, beta_1, weight_lr_power, **kwargs)

    def direction(self, grad, slots, c):
        return grad
