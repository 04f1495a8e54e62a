"""Load what TensorFlow Addons saved, without TensorFlow Addons.

TFA registered its optimizers with Keras as ``"Addons>AdamW"``,
``"Addons>SGDW"`` and ``"Addons>MovingAverage"``; those names are written in
every ``.h5`` model (and SavedModel config) compiled with them. Importing
``optimizers`` maps each name to this library's class, so
``keras.models.load_model("tfa_model.h5")`` works with TFA absent and
training resumes with the same numbers: the constructor arguments, the
hyperparameter variables and the slot names (``m``, ``v``, ``vhat``,
``momentum``) are TFA's, and slots are created in the same order.
A ``tf.train.Checkpoint`` holding a TFA optimizer needs no names at all: build
ours with the same arguments and restore.

When TFA itself is installed and imported, its own classes keep their names
(registration here never replaces an existing entry).

>>> import optimizers
>>> optimizers.TFA_NAMES["Addons>AdamW"] is optimizers.AdamW
True
"""

from __future__ import annotations

from optimizers.keras_compat import keras
from optimizers.rules import SGDW, AdamW
from optimizers.wrappers import MovingAverage

__all__ = ["TFA_NAMES", "register_tfa_names"]

#: TFA's registered name -> this library's class.
TFA_NAMES: dict[str, type] = {"Addons>AdamW": AdamW, "Addons>SGDW": SGDW, "Addons>MovingAverage": MovingAverage}


def register_tfa_names() -> None:
    """Map TFA's saved names to this library's classes (done on ``import optimizers``)."""
    custom_objects = keras.utils.get_custom_objects()
    for name, cls in TFA_NAMES.items():
        custom_objects.setdefault(name, cls)


register_tfa_names()
