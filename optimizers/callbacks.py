"""Keras callbacks for averaging wrappers (:class:`~optimizers.MovingAverage`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import tensorflow as tf

from optimizers.keras_compat import keras
from optimizers.tf_compat import optimizer_chain
from optimizers.wrappers.averaging import AveragingWrapper

__all__ = ["EvaluatesAverages", "MovingAverageCallback", "averaged_weights"]


def _averages(optimizer: Any) -> bool:
    """Whether ``optimizer`` evaluates the weights at another point than it trains them: an
    :class:`~optimizers.AveragingWrapper`, or an optimizer with its methods (its Keras 3 class,
    ``optimizers.keras3.MovingAverage``..., or one whose rule has an evaluation point: ScheduleFreeAdamW)."""
    return isinstance(optimizer, AveragingWrapper) or getattr(optimizer, "has_evaluation_point", True) and all(
        callable(getattr(type(optimizer), name, None)) for name in ("average_of", "assign_average_vars", "swap_weights"))


def averaging_optimizer(model: Any, user: str) -> AveragingWrapper:
    """The averaging wrapper ``model`` is compiled with, also inside a ``LossScaleOptimizer`` or
    other wrappers (``GradientAccumulation(MovingAverage(...))``); else a ``TypeError`` that
    names ``user``."""
    optimizer = next((each for each in optimizer_chain(model.optimizer) if _averages(each)), None)
    if optimizer is None:
        raise TypeError(f"{user} needs a model compiled with an averaging wrapper (MovingAverage or SWA) or an "
                        f"optimizer with an evaluation point (ScheduleFreeAdamW, ScheduleFreeSGD), possibly "
                        f"inside a LossScaleOptimizer or another wrapper. Received: model.optimizer={model.optimizer!r}")
    return optimizer


@contextlib.contextmanager
def averaged_weights(model: Any) -> Iterator[None]:
    """Give ``model`` its averaged weights inside the ``with`` block.

    The trained weights are copied first and put back afterwards, bit for bit;
    the optimizer's averages are untouched, so a model saved inside the block
    holds the averages both as weights and as optimizer state.
    """
    optimizer = averaging_optimizer(model, "averaged_weights")
    variables = [v for v in model.variables if optimizer.average_of(v) is not None]
    trained = [tf.identity(v) for v in variables]  # copies: assign_average_vars does not change them
    optimizer.assign_average_vars(variables)
    try:
        yield
    finally:
        for var, value in zip(variables, trained):
            var.assign(value)


class EvaluatesAverages:
    """What :class:`MovingAverageCallback` does, on the ``Callback`` of either Keras (its base beside this one)."""

    def __init__(self, filepath: str | None = None, save_weights_only: bool = False, validation_data: Any = None,
                 batch_size: int | None = None, verbose: int = 0) -> None:
        super().__init__()
        if filepath is not None and not isinstance(filepath, str):
            raise TypeError(f"`filepath` must be a string or None. Received: filepath={filepath!r}")
        if not isinstance(save_weights_only, bool):
            raise TypeError(f"`save_weights_only` must be a bool. Received: save_weights_only={save_weights_only!r}")
        self.filepath = filepath
        self.save_weights_only = save_weights_only
        self.validation_data = validation_data
        self.batch_size = batch_size
        self.verbose = verbose

    def _evaluate(self) -> dict[str, float]:
        data = self.validation_data
        if isinstance(data, (tuple, list)):
            results = self.model.evaluate(*data, batch_size=self.batch_size, verbose=0, return_dict=True)
        else:
            results = self.model.evaluate(data, batch_size=self.batch_size, verbose=0, return_dict=True)
        return {f"average_{name}": float(value) for name, value in results.items()}

    def on_train_begin(self, logs: dict | None = None) -> None:
        averaging_optimizer(self.model, "MovingAverageCallback")  # refused before training, not after an epoch

    def on_epoch_end(self, epoch: int, logs: dict | None = None) -> None:
        logs = logs if logs is not None else {}
        with averaged_weights(self.model):
            if self.validation_data is not None:
                logs.update(self._evaluate())
            if self.filepath is not None:
                path = self.filepath.format(epoch=epoch + 1, **logs)
                if self.save_weights_only:
                    self.model.save_weights(path)
                else:
                    self.model.save(path)
                if self.verbose:
                    print(f"Epoch {epoch + 1}: saved the model with averaged weights to {path}")


class MovingAverageCallback(EvaluatesAverages, keras.callbacks.Callback):
    """At the end of each epoch, evaluate and/or save the model with its averaged
    weights, then give it back its trained weights (bit for bit).

    Args:
        filepath: Where to save, formatted with ``epoch`` (1-based) and the
            epoch's logs like ``ModelCheckpoint`` (``"avg-{epoch:02d}.h5"``);
            ``None`` to not save. Defaults to ``None``.
        save_weights_only: Save only the weights (``model.save_weights``)
            rather than the whole model. Defaults to ``False``.
        validation_data: Data for ``model.evaluate`` (a dataset, or an
            ``(x, y)`` tuple); its results go into the epoch's logs as
            ``average_<metric>``. Defaults to ``None``: no evaluation.
        batch_size: ``batch_size`` for ``model.evaluate``. Defaults to ``None``.
        verbose: Print where the model was saved. Defaults to ``0``.

    >>> import numpy as np
    >>> import optimizers
    >>> keras = optimizers.keras
    >>> model = keras.Sequential([keras.layers.Dense(1, input_shape=(2,))])
    >>> model.compile(optimizers.MovingAverage("sgd"), loss="mse")
    >>> x, y = np.ones((8, 2)), np.ones((8, 1))
    >>> history = model.fit(x, y, epochs=1, verbose=0,
    ...                     callbacks=[optimizers.MovingAverageCallback(validation_data=(x, y))])
    >>> "average_loss" in history.history
    True
    """
