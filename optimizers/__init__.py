"""custom-optimizer-v2: write Keras 2 (OptimizerV2) optimizers from a few public hooks.

Two kinds of public classes:

* **rules** say what happens to one variable in one step: optimizers written on
  :class:`CustomOptimizerV2` (``Adam``, ``SGD``, ``AdamW``, ``SGDW``) and
  variable updaters (:class:`VariableUpdater`); both follow :class:`UpdateRule`;
* **wrappers** say what happens around a whole step of any Keras 2 optimizer:
  :class:`OptimizerWrapper` (``MovingAverage``, on :class:`AveragingWrapper`).

``__all__`` below is the one list of public names.
"""

from optimizers.callbacks import MovingAverageCallback, averaged_weights
from optimizers.keras_compat import TF_VERSION, check_keras2_model, keras, variable_key
from optimizers.rule import UpdateRule
from optimizers.rules import SGD, SGDW, Adam, AdamW
from optimizers.template import CustomOptimizerV2
from optimizers.tfa_compat import TFA_NAMES  # importing it registers TFA's saved names ("Addons>AdamW", ...)
from optimizers.updaters import (
    Frozen,
    OverwriteWithGradient,
    RowwiseAdagrad,
    VariableUpdater,
    get_updater,
    set_updater,
)
from optimizers.weight_decay import VariableMask
from optimizers.wrappers import AveragingWrapper, MovingAverage, OptimizerWrapper
from slots import SlotSpec

__all__ = [
    "Adam",
    "AdamW",
    "AveragingWrapper",
    "CustomOptimizerV2",
    "Frozen",
    "MovingAverage",
    "MovingAverageCallback",
    "OptimizerWrapper",
    "OverwriteWithGradient",
    "RowwiseAdagrad",
    "SGD",
    "SGDW",
    "SlotSpec",
    "TFA_NAMES",
    "TF_VERSION",
    "UpdateRule",
    "VariableMask",
    "VariableUpdater",
    "averaged_weights",
    "check_keras2_model",
    "get_updater",
    "keras",
    "set_updater",
    "variable_key",
]

__version__ = "0.2.0"
