r"""``SWA``: stochastic weight averaging around any Keras 2 optimizer.

The drop-in successor of TensorFlow Addons' ``SWA``: the same constructor, the
same snapshots and running mean, the same checkpoint layout (inner optimizer
``awg_optimizer``, slot ``average``), also for float16/float64 variables,
which TFA's cannot average.
"""

from __future__ import annotations

import functools
from typing import Any

import tensorflow as tf

from optimizers.hyperparameters import check_integer
from optimizers.wrappers.averaging import AveragingWrapper

__all__ = ["SWA"]


_check_start = functools.partial(check_integer, "start_averaging", low=0)
_check_period = functools.partial(check_integer, "average_period", low=1)


def _compute_dtype(dtype: tf.DType) -> tf.DType:
    return tf.float32 if dtype in (tf.float16, tf.bfloat16) else dtype


class SWA(AveragingWrapper):
    r"""Stochastic weight averaging (Izmailov et al., arXiv:1803.05407).

    The inner optimizer updates the weights :math:`\theta` exactly as it would
    alone. With :math:`t` the number of steps taken before the current one,
    :math:`s` = ``start_averaging`` and :math:`c` = ``average_period``, the
    average :math:`a` takes a snapshot of the weights after the step whenever
    :math:`t \ge s` and :math:`c` divides :math:`t - s`:

    .. math::

        n = (t - s) / c, \qquad a \leftarrow \frac{n\,a + \theta}{n + 1}

    so :math:`a` is the mean of the snapshots taken after steps
    :math:`s, s+c, s+2c, \dots` (the first snapshot replaces :math:`a`). Until
    then :math:`a` holds the weights' values before the first step; a
    variable first stepped after :math:`n_0` snapshots (a layer added later)
    has its value then counted as those :math:`n_0` snapshots (the count is
    one per optimizer, not one per variable; TFA counts zeros). Call
    :meth:`assign_average_vars` (or :meth:`swap_weights`, or use
    ``AverageModelCheckpoint``) to give the model the averages; models with
    batch normalization need one more pass over the data afterwards to
    recompute its statistics (paper, section 3.2).

    TensorFlow Addons' ``SWA(optimizer, start_averaging=0, average_period=10,
    name="SWA")``: same arguments and snapshots; with ``jit_compile=False`` the
    same bits. Differences: float16 and float64 variables are averaged (TFA
    raises, mixing a float32 count into them; the mean of float16 and bfloat16
    weights is computed in float32); before the first snapshot the
    average is the initial weights (TFA: zeros, which ``assign_average_vars``
    would put into the model); clipping arguments are set on the inner
    optimizer, whose whole public step is taken.

    Args:
        optimizer: A Keras 2 optimizer, or a name such as ``"sgd"``.
        start_averaging: :math:`s`, an integer >= 0. Defaults to ``0``.
        average_period: :math:`c`, an integer >= 1. Defaults to ``10``.
        name: Defaults to ``"SWA"``.
        **kwargs: ``clipnorm``, ``clipvalue``, ``global_clipnorm`` (set on the
            inner optimizer) and ``jit_compile`` (default ``True``).

    Example, snapshots after steps 1 and 3 (the fast weights move by -1 a step):

    >>> import tensorflow as tf
    >>> import optimizers
    >>> var = tf.Variable([0.0])
    >>> opt = SWA(optimizers.SGD(1.0), start_averaging=0, average_period=2)
    >>> for _ in range(3):
    ...     _ = opt.apply_gradients([(tf.constant([1.0]), var)])
    >>> var.numpy().tolist(), opt.average_of(var).numpy().tolist()
    ([-3.0], [-2.0])
    """

    inner_checkpoint_name = "awg_optimizer"  # TFA's name: TFA checkpoints restore into this class

    def __init__(self, optimizer: Any, start_averaging: int = 0, average_period: int = 10, name: str = "SWA",
                 **kwargs: Any) -> None:
        _check_start(start_averaging)
        _check_period(average_period)
        super().__init__(optimizer, name, **kwargs)
        self.add_option("start_averaging", int(start_averaging), _check_start)
        self.add_option("average_period", int(average_period), _check_period)

    def prepare(self, dtype: tf.DType, coefficients: dict[str, Any]) -> None:
        """Whether this step takes a snapshot, and :math:`n`, from the exact int64 step counter."""
        since_start = coefficients["iterations"] - 1 - self.start_averaging  # t - s
        coefficients["snapshot"] = tf.logical_and(since_start >= 0, since_start % self.average_period == 0)
        # float16 and bfloat16 count exactly only to 2048 and 256: their mean is computed in float32.
        coefficients["snapshots"] = tf.cast(tf.maximum(since_start // self.average_period, 0), _compute_dtype(dtype))

    def average_step(self, average: tf.Variable, var: tf.Variable, coefficients: dict[str, Any]) -> Any:
        n = coefficients["snapshots"]

        def snapshot() -> Any:
            a, theta = tf.cast(average, n.dtype), tf.cast(var, n.dtype)  # no-ops but for float16 and bfloat16
            return average.assign(tf.cast((a * n + theta) / (n + 1.0), average.dtype), read_value=False)

        return tf.cond(coefficients["snapshot"], snapshot, tf.no_op)
