"""``AverageModelCheckpoint``: ``ModelCheckpoint`` that saves the averaged weights.

The drop-in successor of TensorFlow Addons' callback of the same name, for
this library's averaging wrappers (:class:`~optimizers.MovingAverage`,
``SWA``), also inside a ``LossScaleOptimizer``.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from optimizers.callbacks import averaging_optimizer
from optimizers.keras_compat import keras

__all__ = ["AverageModelCheckpoint", "SavesAverages"]

# ModelCheckpoint's method that writes a file (when, where and whether are decided there).
# TFA's callback overrides the same private method; checked at construction so that a Keras
# without it fails loudly instead of saving the trained weights.
_SAVE_HOOK = "_save_model"


class SavesAverages:
    """What :class:`AverageModelCheckpoint` does, on the ``ModelCheckpoint`` of either Keras (its base beside this one)."""

    def __init__(self, update_weights: bool, filepath: Any, monitor: str = "val_loss", verbose: int = 0,
                 save_best_only: bool = False, save_weights_only: bool = False, mode: str = "auto",
                 save_freq: Any = "epoch", **kwargs: Any) -> None:
        if not isinstance(update_weights, bool):
            raise TypeError(f"`update_weights` must be a bool. Received: update_weights={update_weights!r}")
        if not callable(getattr(super(), _SAVE_HOOK, None)):
            raise NotImplementedError(f"This Keras's ModelCheckpoint has no `{_SAVE_HOOK}` method, which "
                                      f"AverageModelCheckpoint extends. Received: {type(self).__mro__!r}")
        super().__init__(filepath, monitor, verbose, save_best_only, save_weights_only, mode, save_freq, **kwargs)
        self.update_weights = update_weights

    def set_model(self, model: Any) -> None:
        super().set_model(model)
        averaging_optimizer(model, "AverageModelCheckpoint")  # refuse a model without averages before training starts

    def _save_model(self, *args: Any, **kwargs: Any) -> Any:
        optimizer = averaging_optimizer(self.model, "AverageModelCheckpoint")
        variables = [v for v in self.model.trainable_weights if optimizer.average_of(v) is not None]
        trained = [] if self.update_weights else [tf.identity(v) for v in variables]  # copies, kept apart
        optimizer.assign_average_vars(variables)
        try:
            return super()._save_model(*args, **kwargs)
        finally:
            for var, value in zip(variables, trained):
                var.assign(value)


class AverageModelCheckpoint(SavesAverages, keras.callbacks.ModelCheckpoint):
    """``ModelCheckpoint`` that saves the model with its averaged weights.

    Whenever ``ModelCheckpoint`` would save (same ``filepath`` formatting,
    ``monitor``, ``save_best_only``, ``save_freq``...), the trainable weights
    that have averages are given them first. With ``update_weights=True`` they
    keep them, and training continues from the averages (TensorFlow Addons'
    behaviour); with ``False`` the trained weights are put back after the
    save, bit for bit. ``save_best_only`` compares the monitored value of the
    trained weights, as TFA does.

    TensorFlow Addons' ``AverageModelCheckpoint(update_weights, filepath,
    monitor="val_loss", verbose=0, save_best_only=False,
    save_weights_only=False, mode="auto", save_freq="epoch", **kwargs)``:
    same arguments; ``**kwargs`` (``options``, ``initial_value_threshold``)
    go to ``ModelCheckpoint``.

    Args:
        update_weights: Keep the averages in the model after saving.
        filepath: Where to save (see ``ModelCheckpoint``).
    """
