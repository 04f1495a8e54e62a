"""custom-optimizer-v2: write Keras 2 (OptimizerV2) optimizers from a few public hooks.

Public names (one list, here):
"""

from optimizers.adamw import AdamW
from optimizers.callbacks import MovingAverageCallback, averaged_weights
from optimizers.keras_compat import TF_VERSION, check_keras2_model, keras
from optimizers.moving_average import MovingAverage
from optimizers.sgdw import SGDW
from optimizers.template import CustomOptimizerV2, variable_key
from optimizers.tfa_compat import TFA_NAMES  # importing it registers TFA's saved names ("Addons>AdamW", ...)
from optimizers.updaters import (
    Frozen,
    OverwriteWithGradient,
    RowwiseAdagrad,
    VariableUpdater,
    get_updater,
    set_updater,
)
from optimizers.weight_decay import DecoupledWeightDecay

__all__ = [
    "AdamW",
    "SGDW",
    "TFA_NAMES",
    "TF_VERSION",
    "CustomOptimizerV2",
    "MovingAverage",
    "MovingAverageCallback",
    "averaged_weights",
    "DecoupledWeightDecay",
    "Frozen",
    "OverwriteWithGradient",
    "RowwiseAdagrad",
    "VariableUpdater",
    "check_keras2_model",
    "get_updater",
    "keras",
    "set_updater",
    "variable_key",
]

__version__ = "0.1.0"
