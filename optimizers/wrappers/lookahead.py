"""``Lookahead``: k fast steps of any optimizer, then one step back towards slow weights.

The drop-in successor of TensorFlow Addons' ``Lookahead``. The class below is
also the worked example of ``docs/writing-a-wrapper.md``, which shows it
verbatim (``tests/test_docs_lookahead_tfa.py`` checks that the two agree).
"""

from __future__ import annotations

import functools
from typing import Any

import tensorflow as tf

from optimizers.hyperparameters import check_integer
from optimizers.slots import SlotSpec
from optimizers.wrappers.base import OptimizerWrapper

__all__ = ["Lookahead"]


_check_sync_period = functools.partial(check_integer, "sync_period", low=1)


class Lookahead(OptimizerWrapper):
    r"""Lookahead (Zhang, Lucas, Hinton & Ba, arXiv:1907.08610) around any Keras 2 optimizer.

    The inner optimizer updates the fast weights :math:`\theta` every step. The
    slow weights :math:`\phi` (slot ``"slow"``) start at :math:`\theta`'s value
    before the first step. After the inner optimizer's step :math:`t`
    (counted from 1), with :math:`k` = ``sync_period`` and :math:`\alpha` =
    ``slow_step_size``:

    .. math::

        t \bmod k = 0:\quad \phi \leftarrow \phi + \alpha\,(\theta - \phi),\quad \theta \leftarrow \phi

    and nothing otherwise. TensorFlow Addons' ``Lookahead(optimizer,
    sync_period=6, slow_step_size=0.5, name="Lookahead")``: same arguments,
    numbers, slot name and checkpoint name (``lh_base_optimizer``). Unlike
    TFA, the inner optimizer takes its whole public step (its own clipping,
    ``decay_var_list`` and variable updaters included), and the weights are
    written at synchronizations only.

    Args:
        optimizer: A Keras 2 optimizer, or a name such as ``"adam"``.
        sync_period: :math:`k`, an integer >= 1. Defaults to ``6``.
        slow_step_size: :math:`\alpha` in [0, 1] (float, tensor, callable or
            schedule). Defaults to ``0.5``.
        name: Defaults to ``"Lookahead"``.
        **kwargs: ``clipnorm``, ``clipvalue``, ``global_clipnorm`` (set on the
            inner optimizer) and ``jit_compile`` (default ``True``; ``False``
            gives TFA's bits exactly).
    """

    inner_checkpoint_name = "lh_base_optimizer"  # TFA's name: TFA checkpoints restore into this class

    def __init__(self, optimizer: Any, sync_period: int = 6, slow_step_size: Any = 0.5, name: str = "Lookahead",
                 **kwargs: Any) -> None:
        _check_sync_period(sync_period)
        super().__init__(optimizer, name, **kwargs)
        self.add_hyperparameter("slow_step_size", slow_step_size, low=0.0, high=1.0)
        self.add_option("sync_period", int(sync_period), _check_sync_period)

    def slot_specs(self, var):
        # The slow weights start at the variable's value before the first step.
        return [SlotSpec("slow", initializer=lambda shape, dtype: tf.identity(var))]

    def prepare(self, dtype, coefficients):
        # Once per step: has the inner optimizer just taken a multiple of sync_period steps?
        # coefficients["iterations"] counts the step being taken, an exact int64.
        coefficients["sync"] = tf.equal(coefficients["iterations"] % self.sync_period, 0)

    def after_step(self, var, slots, coefficients):
        slow = slots["slow"]

        def synchronize():
            new_slow = slow + coefficients["slow_step_size"] * (var - slow)
            with tf.control_dependencies([slow.assign(new_slow, read_value=False)]):
                return var.assign(new_slow, read_value=False)

        return tf.cond(coefficients["sync"], synchronize, tf.no_op)
