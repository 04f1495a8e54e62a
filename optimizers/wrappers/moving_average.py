r"""``MovingAverage``: keep an exponential moving average of the trained weights.

The drop-in successor of TensorFlow Addons' ``MovingAverage``: the same
constructor, the same numbers, the same checkpoint layout, plus swaps that
work in any context and restore the weights bit for bit.
"""

from __future__ import annotations

import functools
from typing import Any

import tensorflow as tf

from optimizers.hyperparameters import check_bool, evaluate
from optimizers.rule import kernel_if_unchanged
from optimizers.wrappers.averaging import AveragingWrapper

__all__ = ["MovingAverage"]


def _check_num_updates(value: Any) -> None:
    if isinstance(value, tf.Variable):
        if not value.dtype.is_integer:
            raise TypeError(f"`num_updates` must be an int or an integer tf.Variable. Received: num_updates={value!r}")
        return
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise TypeError(f"`num_updates` must be None, an int or an integer tf.Variable. Received: num_updates={value!r}")
    if value is not None and value < 0:
        raise ValueError(f"`num_updates` must be >= 0. Received: num_updates={value!r}")


def _check_start_step(value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"`start_step` must be an int. Received: start_step={value!r}")
    if value < 0:
        raise ValueError(f"`start_step` must be >= 0. Received: start_step={value!r}")


class MovingAverage(AveragingWrapper):
    r"""Wrap an optimizer and keep an exponential moving average of each weight.

    The inner optimizer updates the weights :math:`\theta_t` exactly as it
    would alone (this wrapper calls its public ``apply_gradients``). Then each
    average :math:`a` (it starts at the weight's value before the first step)
    follows, with :math:`t` the number of steps taken before this one:

    .. math::

        d_t &= \begin{cases} 0 & t < s \\
              \min\left(\delta, \frac{1+n}{10+n}, \frac{1+t-s}{10+t-s}\right) & t \ge s \end{cases} \\
        a &\leftarrow a - (a - \theta_t)(1 - d_t)

    where :math:`\delta` is ``average_decay``, :math:`s` is ``start_step``, the
    :math:`n` term applies only when ``num_updates`` is given and the
    :math:`t-s` term only when ``dynamic_decay=True``; :math:`d_t` is computed
    in float32, as TensorFlow Addons does. Variables with a variable updater
    (see ``optimizers.updaters``) get no average. Built on
    :class:`~optimizers.AveragingWrapper`: it shares the inner optimizer's
    ``iterations``, and its averages and the inner optimizer's state are kept
    by every save format.

    Differences from TFA: ``swap_weights()`` works with or without a
    distribution strategy and swaps through a copy (bit-exact);
    ``shadow_copy`` starts averages at the weights' values (TFA: zeros); a
    ``num_updates`` variable is read at every step (TFA: once); clipping
    arguments given to the wrapper are set on the inner optimizer (TFA ignored
    the inner optimizer's own clipping).

    Args:
        optimizer: A Keras 2 optimizer (built-in, template-made or this
            library's) or a name such as ``"adam"`` (the legacy Keras 2 one).
        average_decay: :math:`\delta` in [0, 1]. Defaults to ``0.99``.
        num_updates: ``None``, an int or an integer ``tf.Variable``:
            :math:`n`, caps the decay at :math:`(1+n)/(10+n)`. Defaults to
            ``None``.
        start_step: :math:`s`: before it the average copies the weights.
            Defaults to ``0``.
        dynamic_decay: Cap the decay at :math:`(1+t-s)/(10+t-s)`, so it starts
            at 0.1 and grows. Defaults to ``False``.
        name: Defaults to ``"MovingAverage"``.
        **kwargs: ``clipnorm``, ``clipvalue``, ``global_clipnorm`` (set on the
            inner optimizer) and ``jit_compile``: compile the average update
            with XLA inside a template optimizer's compiled step and, where
            this library's kernels (``optimizers.kernels``) are not available,
            on a variable of over 2^18 elements (one pass over memory instead
            of three). Defaults to ``True``. Elsewhere, and everywhere with
            ``jit_compile=False``, the average is one kernel with TFA's bits
            exactly and nothing to compile: inside the inner Adam's or AdamW's
            own fused kernel, else this library's one-pass average kernel,
            else TensorFlow's fused gradient-descent kernel
            (:meth:`after_kernel`). XLA may fuse the multiply and subtract
            (FMA), so compiled averages can differ from TFA's in the last bit.

    Example:

    >>> import tensorflow as tf
    >>> import optimizers
    >>> var = tf.Variable([1.0])
    >>> opt = optimizers.MovingAverage(optimizers.keras.optimizers.legacy.SGD(1.0), average_decay=0.5)
    >>> _ = opt.apply_gradients([(tf.constant([1.0]), var)])
    >>> var.numpy().tolist(), opt.get_slot(var, "average").numpy().tolist()
    ([0.0], [0.5])
    >>> opt.swap_weights()
    >>> var.numpy().tolist()
    [0.5]
    """

    inner_checkpoint_name = "awg_optimizer"  # TFA's name: TFA checkpoints restore into this class

    def __init__(self, optimizer: Any, average_decay: Any = 0.99, num_updates: Any = None, start_step: int = 0,
                 dynamic_decay: bool = False, name: str = "MovingAverage", **kwargs: Any) -> None:
        _check_num_updates(num_updates)
        _check_start_step(start_step)
        check_bool("dynamic_decay", dynamic_decay)
        super().__init__(optimizer, name, **kwargs)
        self.add_hyperparameter("average_decay", average_decay, low=0.0, high=1.0)
        self.add_option("num_updates", num_updates, _check_num_updates)
        self.add_option("start_step", start_step, _check_start_step)
        self.add_option("dynamic_decay", dynamic_decay, functools.partial(check_bool, "dynamic_decay"))

    def prepare(self, dtype: tf.DType, coefficients: dict[str, Any]) -> None:
        """:math:`d_t` (``"decay"``), computed in float32 from :math:`t` (the steps before this
        one), and :math:`1 - d_t` (``"one_minus_decay"``)."""
        step = tf.cast(coefficients["iterations"] - 1, tf.float32)
        decay = tf.cast(evaluate(self._step_value("average_decay"), step), tf.float32)
        if self.num_updates is not None:
            n = tf.cast(self.num_updates, tf.float32)
            decay = tf.minimum(decay, (1.0 + n) / (10.0 + n))
        if self.dynamic_decay:
            count = step - self.start_step
            decay = tf.minimum(decay, (1.0 + count) / (10.0 + count))
        coefficients["decay"] = tf.cast(tf.where(step < self.start_step, tf.zeros_like(decay), decay), dtype)
        coefficients["one_minus_decay"] = 1 - coefficients["decay"]

    def average_step(self, average: tf.Variable, var: tf.Variable, coefficients: dict[str, Any]) -> Any:
        return average.assign_sub((average - var) * coefficients["one_minus_decay"], read_value=False)

    def after_kernel(self, var):
        r""":math:`a - \theta_t`, then TensorFlow's fused gradient-descent kernel on :math:`a` with
        step :math:`1 - d_t`: TFA's bits, nothing to compile (when a subclass changes none of it)."""
        return kernel_if_unchanged(self, MovingAverage, ("prepare", "after_step", "average_step"), var,
                                   self._average_kernel)

    def after_step_as_average(self, var):
        """The average is :math:`a \\leftarrow a - (a - \\theta_t)(1 - d_t)`: the inner Adam's fused
        kernel runs it in its own pass (when a subclass changes none of it)."""
        return kernel_if_unchanged(self, MovingAverage, ("prepare", "after_step", "average_step"), var,
                                   ("average", "one_minus_decay"))

    def _average_kernel(self, var, slots, coefficients):
        average = slots["average"]
        return tf.raw_ops.ResourceApplyGradientDescent(var=average.handle, alpha=coefficients["one_minus_decay"],
                                                       delta=average - var)

    def _config_value(self, pname: str) -> Any:
        if pname == "num_updates" and isinstance(self.num_updates, tf.Variable):
            return int(self.num_updates.numpy())
        return super()._config_value(pname)
