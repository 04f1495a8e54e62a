"""Wrappers: what happens around a whole step of any Keras 2 optimizer, one module each."""

from optimizers.wrappers.averaging import AveragingWrapper
from optimizers.wrappers.base import OptimizerWrapper
from optimizers.wrappers.gradient_accumulation import GradientAccumulation
from optimizers.wrappers.lookahead import Lookahead
from optimizers.wrappers.moving_average import MovingAverage
from optimizers.wrappers.multi_optimizer import MultiOptimizer
from optimizers.wrappers.swa import SWA

__all__ = ["SWA", "AveragingWrapper", "GradientAccumulation", "Lookahead", "MovingAverage", "MultiOptimizer",
           "OptimizerWrapper"]
