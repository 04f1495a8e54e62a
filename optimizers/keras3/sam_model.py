"""``SAMModel`` for Keras 3 (TensorFlow backend): ``fit`` takes Sharpness-Aware Minimization steps."""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf

from optimizers.keras3.compat import loss_tracker
from optimizers.sam import check_sam_arguments, sam_gradients

__all__ = ["SAMModel"]


@keras.saving.register_keras_serializable(package="optimizers")
class SAMModel(keras.Model):
    r"""Sharpness-Aware Minimization (Foret et al., arXiv:2010.01412) in ``fit``, around a Keras 3 model.

    The Keras 2 ``optimizers.SAMModel`` for Keras 3 models, with the same arguments and steps
    (see it for the math and the costs): :math:`g_{\mathrm{SAM}} = \nabla L(w + e)` with
    :math:`e = \rho\, g / (\lVert g\rVert_2 + \epsilon)`, applied at :math:`w` by the compiled
    Keras 3 optimizer (Keras 3's own or ``optimizers.keras3``'s; its ``loss_scale_factor`` and
    ``LossScaleOptimizer`` scale both passes). Runs on the TensorFlow backend.

    ``model.save`` stores :math:`w`; ``sam.model.save(...)`` saves the wrapped model alone.

    Args:
        model: The Keras 3 model to train.
        rho: :math:`\rho`, a number ``>= 0``. Defaults to ``0.05``.
        adaptive: ASAM's elementwise perturbation. Defaults to ``False``.
        epsilon: :math:`\epsilon`, a number ``>= 0``. Defaults to ``1e-12``.
        reuse_gradient: The one-pass variant (the model must be built). Defaults to ``False``.
        **kwargs: Keras ``Model`` arguments (``name``).

    Example:

    >>> import keras
    >>> import numpy as np
    >>> from optimizers import keras3
    >>> inner = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    >>> sam = keras3.SAMModel(inner, rho=0.05)
    >>> sam.compile(keras3.AdamW(weight_decay=1e-4), "mse")
    >>> history = sam.fit(np.ones((8, 3)), np.zeros((8, 1)), epochs=2, verbose=0)
    >>> len(history.history["loss"])
    2
    """

    def __init__(self, model: Any, rho: float = 0.05, adaptive: bool = False, epsilon: float = 1e-12,
                 reuse_gradient: bool = False, **kwargs: Any) -> None:
        rho, epsilon = check_sam_arguments(model, rho, epsilon, adaptive, reuse_gradient, keras.Model)
        super().__init__(**kwargs)
        self.model, self.rho, self.adaptive, self.epsilon, self.reuse_gradient = model, rho, adaptive, epsilon, reuse_gradient
        self.perturbation = None
        if reuse_gradient:
            self.perturbation = [self.add_weight(name=f"sam_perturbation_{i}", shape=v.shape, dtype=v.dtype,
                                                 initializer="zeros", trainable=False)
                                 for i, v in enumerate(model.trainable_variables)]

    def call(self, inputs, training=None):
        return self.model(inputs, training=training)

    def train_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        first = []  # the first pass's (loss, predictions): what fit reports

        def loss_fn():
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True)
            if not first:
                first.append((loss, y_pred))
            return self.optimizer.scale_loss(loss)

        variables = self.trainable_variables
        _, grads = sam_gradients(loss_fn, variables, self.rho, adaptive=self.adaptive, epsilon=self.epsilon,
                                 perturbation=self.perturbation)
        self.optimizer.apply_gradients(zip(grads, variables))
        loss, y_pred = first[0]
        # Keras 3's own train_step reports the loss through the model's loss tracker, unscaled from the
        # per-replica share that compute_loss returns under tf.distribute.
        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        batch = tf.shape(next(t for t in tf.nest.flatten(x) if t is not None))[0]
        loss_tracker(self).update_state(loss * tf.cast(replicas, loss.dtype), sample_weight=batch)
        return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    def get_config(self):
        return dict(model=keras.saving.serialize_keras_object(self.model), rho=self.rho, adaptive=self.adaptive,
                    epsilon=self.epsilon, reuse_gradient=self.reuse_gradient, name=self.name)

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        model = keras.saving.deserialize_keras_object(config.pop("model"), custom_objects=custom_objects)
        return cls(model, **config)
