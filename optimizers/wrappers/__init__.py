"""Wrappers: what happens around a whole step of any Keras 2 optimizer, one module each."""

from optimizers.wrappers.averaging import AveragingWrapper
from optimizers.wrappers.base import OptimizerWrapper
from optimizers.wrappers.moving_average import MovingAverage

__all__ = ["AveragingWrapper", "MovingAverage", "OptimizerWrapper"]
