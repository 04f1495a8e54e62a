"""Load what TensorFlow Addons saved, without TensorFlow Addons.

TFA 0.23 registered each optimizer with Keras as ``"Addons>" + class name``
(``"Addons>AdamW"``, ``"Addons>LAMB"``, ``"Addons>Lookahead"``...); those
names are written in every ``.h5`` model (and SavedModel config) compiled with
them. Importing ``optimizers`` maps every one of them to this library's class
of the same name (:data:`TFA_NAMES`), so ``keras.models.load_model("tfa_model.h5")``
works with TFA absent and training resumes with the same numbers: the
constructor arguments, the hyperparameter variables, the slot names and the
order of the optimizer's weights are TFA's. A ``tf.train.Checkpoint`` holding a
TFA optimizer needs no names at all: build ours with the same arguments and
restore (wrappers keep TFA's names for the inner optimizer).

When TFA itself is installed and imported, its own classes keep their names
(registration here never replaces an existing entry).

>>> import optimizers
>>> optimizers.TFA_NAMES["Addons>AdamW"] is optimizers.AdamW
True
"""

from __future__ import annotations

from optimizers.keras_compat import keras
from optimizers.rules import SGDW, AdamW
from optimizers.rules.adabelief import AdaBelief
from optimizers.rules.cocob import COCOB
from optimizers.rules.conditional_gradient import ConditionalGradient
from optimizers.rules.lamb import LAMB
from optimizers.rules.lazy_adam import LazyAdam
from optimizers.rules.novograd import NovoGrad
from optimizers.rules.proximal_adagrad import ProximalAdagrad
from optimizers.rules.rectified_adam import RectifiedAdam
from optimizers.rules.yogi import Yogi
from optimizers.schedules import (
    CyclicalLearningRate,
    ExponentialCyclicalLearningRate,
    Triangular2CyclicalLearningRate,
    TriangularCyclicalLearningRate,
)
from optimizers.wrappers import MovingAverage
from optimizers.wrappers.lookahead import Lookahead
from optimizers.wrappers.multi_optimizer import MultiOptimizer
from optimizers.wrappers.swa import SWA

__all__ = ["TFA_NAMES", "register_tfa_names"]

#: TFA's registered name -> this library's class.
TFA_NAMES: dict[str, type] = {
    "Addons>AdamW": AdamW, "Addons>SGDW": SGDW, "Addons>MovingAverage": MovingAverage,
    **{f"Addons>{cls.__name__}": cls for cls in (
        LazyAdam, Yogi, AdaBelief, RectifiedAdam, LAMB, NovoGrad, COCOB, ConditionalGradient, ProximalAdagrad,
        Lookahead, SWA, MultiOptimizer)},
    **{f"Addons>{cls.__name__}": cls for cls in (  # the cyclical learning-rate schedules
        CyclicalLearningRate, TriangularCyclicalLearningRate, Triangular2CyclicalLearningRate,
        ExponentialCyclicalLearningRate)},
}


def register_tfa_names() -> None:
    """Map TFA's saved names to this library's classes (done on ``import optimizers``)."""
    custom_objects = keras.utils.get_custom_objects()
    for name, cls in TFA_NAMES.items():
        custom_objects.setdefault(name, cls)


register_tfa_names()
