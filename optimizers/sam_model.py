"""``SAMModel``: a Keras 2 model whose ``fit`` takes Sharpness-Aware Minimization steps."""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from optimizers.keras_compat import is_loss_scale_optimizer, keras
from optimizers.sam import check_sam_arguments, sam_gradients

__all__ = ["SAMModel"]


@keras.utils.register_keras_serializable(package="optimizers")
class SAMModel(keras.Model):
    r"""Sharpness-Aware Minimization (Foret et al., arXiv:2010.01412) in ``fit``, around a Keras 2 model.

    Each training step takes the gradients of :func:`optimizers.sam.sam_gradients`: with
    :math:`g = \nabla L(w)` and :math:`e = \rho\, g / (\lVert g\rVert_2 + \epsilon)` (the global
    norm over the trainable variables), :math:`g_{\mathrm{SAM}} = \nabla L(w + e)`; the weights
    are restored to :math:`w`, and the compiled optimizer (any Keras 2 optimizer: this library's,
    the built-ins, a wrapper) applies :math:`g_{\mathrm{SAM}}` there. SAM needs the loss twice, so
    it is a step of the model, not an optimizer: a model wraps the one you have, and its
    weights are that model's.

    Two forward and backward passes per batch, plus a copy of the weights; with
    ``reuse_gradient=True`` one pass, at :math:`w + e` with :math:`e` from the previous batch's
    gradient (zero at the first step), kept in one non-trainable variable per weight (checkpointed
    with the model). The loss and metrics ``fit`` reports are those of the first pass (at
    :math:`w`, or at :math:`w + e` with ``reuse_gradient``). Layers that update state in training
    (``BatchNormalization``'s moving statistics) update it at each pass. Under ``tf.distribute``,
    :math:`e` comes from the gradient all-reduced across replicas (the global batch's sharpness).
    Around a ``LossScaleOptimizer`` both passes are scaled, and the gradients unscaled before
    they are applied.

    ``model.save`` / ``save_weights`` store :math:`w` (the perturbation is undone within the
    step); save the wrapped model (``sam.model.save(...)``) for a plain Keras model, or this one
    (``.keras``; ``load_model`` finds the class by its registered name).

    Args:
        model: The Keras 2 model to train.
        rho: :math:`\rho`, a number ``>= 0`` (``0``: the inner optimizer's plain steps). Defaults to ``0.05``.
        adaptive: ASAM's elementwise :math:`e = \rho\, w^2 g / (\lVert w\, g\rVert_2 + \epsilon)`
            (arXiv:2102.11600). Defaults to ``False``.
        epsilon: :math:`\epsilon`, a number ``>= 0``. Defaults to ``1e-12``.
        reuse_gradient: The one-pass variant (the model must be built). Defaults to ``False``.
        **kwargs: Keras ``Model`` arguments (``name``).

    Example:

    >>> import numpy as np
    >>> import optimizers
    >>> keras = optimizers.keras  # Keras 2
    >>> inner = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    >>> sam = optimizers.SAMModel(inner, rho=0.05)
    >>> sam.compile(optimizers.AdamW(weight_decay=1e-4), "mse")
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
        scales = is_loss_scale_optimizer(self.optimizer)

        def loss_fn():
            # The compiled loss's metrics exist once it has run: after the first pass.
            tracked = [v for m in getattr(self.compiled_loss, "metrics", []) for v in m.variables] if first else []
            kept = [tf.identity(v) for v in tracked] if first else None
            y_pred = self(x, training=True)
            loss = self.compute_loss(x, y, y_pred, sample_weight)
            if kept is not None:  # the second pass's loss is not reported: the loss metrics as before it
                for var, value in zip(tracked, kept):
                    var.assign(value)
            else:
                first.append((loss, y_pred))
            return self.optimizer.get_scaled_loss(loss) if scales else loss

        variables = self.trainable_variables
        _, grads = sam_gradients(loss_fn, variables, self.rho, adaptive=self.adaptive, epsilon=self.epsilon,
                                 perturbation=self.perturbation)
        if scales:
            grads = self.optimizer.get_unscaled_gradients(grads)
        self.optimizer.apply_gradients(zip(grads, variables))
        return self.compute_metrics(x, y, first[0][1], sample_weight)

    def get_config(self):
        return dict(model=keras.layers.serialize(self.model), rho=self.rho, adaptive=self.adaptive,
                    epsilon=self.epsilon, reuse_gradient=self.reuse_gradient, name=self.name)

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        model = keras.layers.deserialize(config.pop("model"), custom_objects=custom_objects)
        return cls(model, **config)
