"""The averaging callbacks on Keras 3: ``MovingAverageCallback`` and ``AverageModelCheckpoint``
for a Keras 3 model compiled with ``optimizers.keras3.MovingAverage`` or ``SWA``."""

from __future__ import annotations

import keras

from optimizers import callbacks as keras2_callbacks
from optimizers import callbacks_swa as keras2_checkpoint
from optimizers.callbacks import EvaluatesAverages
from optimizers.callbacks_swa import SavesAverages
from optimizers.keras3.rule_optimizer import keras2_text

__all__ = ["AverageModelCheckpoint", "MovingAverageCallback"]


class MovingAverageCallback(EvaluatesAverages, keras.callbacks.Callback):
    __doc__ = ("Keras 3's ``MovingAverageCallback``: the arguments and behaviour of "
               ":class:`optimizers.MovingAverageCallback`, for a Keras 3 model.\n\n" + keras2_text(keras2_callbacks.MovingAverageCallback))


class AverageModelCheckpoint(SavesAverages, keras.callbacks.ModelCheckpoint):
    __doc__ = ("Keras 3's ``AverageModelCheckpoint``: the arguments and behaviour of "
               ":class:`optimizers.AverageModelCheckpoint` on Keras 3's ``ModelCheckpoint`` (a ``.keras`` or "
               "``.weights.h5`` filepath).\n\n" + keras2_text(keras2_checkpoint.AverageModelCheckpoint))
