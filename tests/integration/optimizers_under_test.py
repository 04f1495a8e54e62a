"""The one table of optimizers the integration suite runs over (optax's
``_OPTIMIZERS_UNDER_TEST``): adding an optimizer is one line here.

Each entry builds a fresh optimizer. Also here: the tiny model and data every
test trains (an embedding, so sparse gradients take part, then a dense layer),
and a custom training step, shared by the tests and the worker scripts.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np
import tensorflow as tf

import optimizers
from optimizers import SGD, Adam, keras


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[], Any]
    has_updaters: bool = False


OPTIMIZERS = [
    Case("sgd_nesterov", lambda: SGD(0.05, momentum=0.9, nesterov=True)),
    Case("adam_amsgrad", lambda: Adam(0.01, amsgrad=True)),
    Case("adam+rowwise_adagrad", lambda: Adam(0.01, updaters={"embeddings": optimizers.RowwiseAdagrad(0.1)}), True),
    Case("sgd+frozen_bias", lambda: SGD(0.05, momentum=0.5, updaters={"bias": optimizers.Frozen()}), True),
    Case("adamw", lambda: optimizers.AdamW(weight_decay=1e-3, learning_rate=0.01)),
    Case("adamw_lazy_scaled", lambda: optimizers.AdamW(weight_decay=0.05, learning_rate=0.01, lazy=True,
                                                      scale_weight_decay_by_lr=True)),
    Case("sgdw", lambda: optimizers.SGDW(weight_decay=1e-3, learning_rate=0.05, momentum=0.9)),
    Case("moving_average(adam)", lambda: optimizers.MovingAverage(Adam(0.01), average_decay=0.9)),
    Case("moving_average(adamw)", lambda: optimizers.MovingAverage(
        optimizers.AdamW(weight_decay=1e-3, learning_rate=0.01), average_decay=0.9, dynamic_decay=True)),
    Case("moving_average(sgdw+rowwise)", lambda: optimizers.MovingAverage(optimizers.SGDW(
        weight_decay=1e-3, learning_rate=0.05, momentum=0.9,
        updaters={"embeddings": optimizers.RowwiseAdagrad(0.1)})), True),
    Case("moving_average(keras_adam)", lambda: optimizers.MovingAverage(
        keras.optimizers.legacy.Adam(0.01), average_decay=0.9)),
]
BY_NAME = {case.name: case for case in OPTIMIZERS}
IDS = [case.name for case in OPTIMIZERS]

VOCAB, LENGTH, SAMPLES, BATCH = 8, 2, 32, 8


def data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Integer tokens and a float target that the model can fit."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, VOCAB, size=(SAMPLES, LENGTH)).astype("int32")
    y = (np.sin(x[:, :1]) + 0.1 * x[:, 1:]).astype("float32")
    return x, y


def model(seed: int = 0, dtype: str | None = None) -> Any:
    """Embedding (sparse gradients) -> Flatten -> Dense, built, same weights for a seed."""
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((LENGTH,), dtype="int32")
    hidden = keras.layers.Embedding(VOCAB, 3, name="embedding", dtype=dtype)(inputs)
    hidden = keras.layers.Flatten(dtype=dtype)(hidden)
    outputs = keras.layers.Dense(1, name="dense", dtype=dtype)(hidden)
    return keras.Model(inputs, outputs)


def train_step(net: Any, opt: Any) -> Callable:
    """A custom training step (mean squared error), to wrap in ``tf.function`` or not."""

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(net(x) - y))
        grads = tape.gradient(loss, net.trainable_variables)
        opt.apply_gradients(zip(grads, net.trainable_variables))
        return loss

    return step


def batches(x: np.ndarray, y: np.ndarray, steps: int):
    for i in range(steps):
        j = (i * BATCH) % SAMPLES
        yield tf.constant(x[j:j + BATCH]), tf.constant(y[j:j + BATCH])


def optimizer_state(opt: Any, variables: list) -> dict[str, np.ndarray]:
    """``iterations`` and every slot (the wrapped optimizer's too), keyed by
    optimizer, variable and slot name: independent of creation order and scopes."""
    state = {"iterations": opt.iterations.numpy()}
    for owner in (opt, getattr(opt, "inner_optimizer", None)):
        if owner is None:
            continue
        for slot_name in owner.get_slot_names():
            for var in variables:
                try:
                    state[f"{owner._name}/{var.name}/{slot_name}"] = owner.get_slot(var, slot_name).numpy()
                except KeyError:
                    pass
    return state
