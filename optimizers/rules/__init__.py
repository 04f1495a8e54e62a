"""Optimizer rules written on the template, one module each."""

from optimizers.rules.adam import Adam
from optimizers.rules.adamw import AdamW
from optimizers.rules.sgd import SGD
from optimizers.rules.sgdw import SGDW

__all__ = ["Adam", "AdamW", "SGD", "SGDW"]
