"""The small Keras 3 model and data the Keras 3 test modules train (imported by them only)."""

import numpy as np


def keras3_model():
    """Dense inputs and embedded ids, a hidden layer, one output: dense and sparse gradients."""
    import keras  # Keras 3: only the Keras 3 test modules call this

    inputs = keras.Input((5,))
    ids = keras.Input((2,), dtype="int32")
    embedded = keras.layers.Flatten()(keras.layers.Embedding(10, 3)(ids))
    hidden = keras.layers.Dense(8, activation="relu")(keras.layers.Concatenate()([inputs, embedded]))
    return keras.Model([inputs, ids], keras.layers.Dense(1)(hidden))


def keras3_data(n=64):
    """``([x, ids], y)`` for :func:`keras3_model`, the same on every call."""
    rng = np.random.default_rng(1)
    return [rng.normal(size=(n, 5)).astype("float32"), rng.integers(0, 10, size=(n, 2)).astype("int32")], \
        rng.normal(size=(n, 1)).astype("float32")
