"""custom-optimizer-v2: write Keras 2 (OptimizerV2) optimizers from a few public hooks.

Two kinds of public classes:

* **rules** say what happens to one variable in one step: optimizers written on
  :class:`CustomOptimizerV2` (``Adam``, ``SGD``, ``AdamW``, ``SGDW``, ``LAMB``...,
  ``MultiOptimizer``) and variable updaters (:class:`VariableUpdater`); both
  follow :class:`UpdateRule`;
* **wrappers** say what happens around a whole step of any Keras 2 optimizer:
  :class:`OptimizerWrapper` (``Lookahead``, ``GradientAccumulation``;
  ``MovingAverage`` and ``SWA`` on :class:`AveragingWrapper`).

Sharpness-Aware Minimization, which takes each gradient twice, is a training step, not an
optimizer: :func:`sam_gradients` for custom loops, :class:`SAMModel` for ``fit``.

Also TensorFlow Addons' cyclical learning-rate schedules and its decoupled
weight decay for any Keras 2 optimizer class (``extend_with_decoupled_weight_decay``).

``__all__`` below is the one list of public names.
"""

from optimizers.callbacks import MovingAverageCallback, averaged_weights
from optimizers.callbacks_swa import AverageModelCheckpoint
from optimizers.decoupled import DecoupledWeightDecayExtension, extend_with_decoupled_weight_decay
from optimizers.keras_compat import TF_VERSION, check_keras2_model, keras
from optimizers.rule import UpdateRule
from optimizers.rules import (
    COCOB,
    LAMB,
    SGD,
    SGDW,
    AdaBelief,
    Adafactor,
    Adam,
    AdamW,
    Adan,
    AdEMAMix,
    ConditionalGradient,
    LazyAdam,
    Lion,
    Muon,
    NovoGrad,
    ProximalAdagrad,
    RectifiedAdam,
    ScheduleFreeAdamW,
    ScheduleFreeSGD,
    Yogi,
)
from optimizers.sam import sam_gradients
from optimizers.sam_model import SAMModel
from optimizers.schedules import (
    CyclicalLearningRate,
    ExponentialCyclicalLearningRate,
    Triangular2CyclicalLearningRate,
    TriangularCyclicalLearningRate,
)
from optimizers.slots import SlotSpec, StateSpec
from optimizers.template import CustomOptimizerV2
from optimizers.tf_compat import variable_key
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
from optimizers.wrappers import (
    SWA,
    AveragingWrapper,
    GradientAccumulation,
    Lookahead,
    MovingAverage,
    MultiOptimizer,
    OptimizerWrapper,
)

__all__ = [
    "AdaBelief",
    "Adafactor",
    "Adam",
    "AdamW",
    "Adan",
    "AdEMAMix",
    "averaged_weights",
    "AverageModelCheckpoint",
    "AveragingWrapper",
    "check_keras2_model",
    "COCOB",
    "ConditionalGradient",
    "CustomOptimizerV2",
    "CyclicalLearningRate",
    "DecoupledWeightDecayExtension",
    "ExponentialCyclicalLearningRate",
    "extend_with_decoupled_weight_decay",
    "Frozen",
    "get_updater",
    "GradientAccumulation",
    "keras",
    "LAMB",
    "LazyAdam",
    "Lion",
    "Lookahead",
    "MovingAverage",
    "MovingAverageCallback",
    "MultiOptimizer",
    "Muon",
    "NovoGrad",
    "OptimizerWrapper",
    "OverwriteWithGradient",
    "ProximalAdagrad",
    "RectifiedAdam",
    "RowwiseAdagrad",
    "sam_gradients",
    "SAMModel",
    "ScheduleFreeAdamW",
    "ScheduleFreeSGD",
    "set_updater",
    "SGD",
    "SGDW",
    "SlotSpec",
    "StateSpec",
    "SWA",
    "TF_VERSION",
    "TFA_NAMES",
    "Triangular2CyclicalLearningRate",
    "TriangularCyclicalLearningRate",
    "UpdateRule",
    "variable_key",
    "VariableMask",
    "VariableUpdater",
    "Yogi",
]

__version__ = "0.2.0"
