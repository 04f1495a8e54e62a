"""Mixed precision: a LossScaleOptimizer around our optimizers keeps their state
in every save format, and leaves overwrite-with-gradient values unscaled."""

import numpy as np
import pytest
import tensorflow as tf

import optimizers

from conftest import keras


@pytest.fixture
def mixed_float16():
    keras.mixed_precision.set_global_policy("mixed_float16")
    yield
    keras.mixed_precision.set_global_policy("float32")


class Amax(keras.layers.Layer):
    """Passes its input through; the gradient of its statistic is max |x| (an fp8-style amax)."""

    def build(self, shape):
        self.amax = self.add_weight("amax", shape=(), initializer="zeros", dtype="float32")
        self.amax.overwrite_with_gradient = True

    def call(self, x):
        @tf.custom_gradient
        def identity(x, amax):
            def grad(dy):
                return dy, tf.cast(tf.reduce_max(tf.abs(x)), tf.float32)

            return tf.identity(x), grad

        return identity(x, self.amax)


def _model(amax=True):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(3)(inputs)
    outputs = keras.layers.Dense(1, dtype="float32")(Amax()(hidden) if amax else hidden)
    return keras.Model(inputs, outputs)


def _data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(16, 4)).astype("float32"), rng.normal(size=(16, 1)).astype("float32")


def test_overwrite_statistic_is_not_divided_by_the_loss_scale(mixed_float16):
    model = _model()
    model.compile(optimizers.AdamW(weight_decay=0.01, learning_rate=0.01), "mse")
    assert isinstance(model.optimizer, keras.mixed_precision.LossScaleOptimizer)
    x, y = _data()
    hidden = model.layers[1](x[:4])  # what the Amax layer sees in the step, in float16
    model.fit(x[:4], y[:4], batch_size=4, verbose=0)
    expected = float(np.max(np.abs(hidden.numpy().astype(np.float32))))
    assert model.layers[2].amax.numpy() == pytest.approx(expected, rel=1e-3)
    assert float(model.optimizer.loss_scale) > 1.0  # the loss was scaled


@pytest.mark.parametrize("fmt", ["model.keras", "model.h5", "savedmodel"])
@pytest.mark.parametrize("make", [lambda: optimizers.AdamW(weight_decay=0.01, learning_rate=0.01),
                                  lambda: optimizers.MovingAverage(optimizers.Adam(0.01), average_decay=0.5)],
                         ids=["adamw", "moving_average"])
def test_loss_scale_optimizer_state_is_kept_in_every_format(mixed_float16, make, fmt, tmp_path):
    x, y = _data()
    model = _model(amax=False)
    model.compile(make(), "mse")
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)  # 4 steps
    model.save(str(tmp_path / fmt))
    loaded = keras.models.load_model(str(tmp_path / fmt))
    # One more step on both: equal weights (state included) and 5 steps counted.
    model.fit(x[:4], y[:4], batch_size=4, verbose=0)
    loaded.fit(x[:4], y[:4], batch_size=4, verbose=0)
    assert int(loaded.optimizer.iterations) == int(model.optimizer.iterations) == 5
    for ours, theirs in zip(loaded.weights, model.weights):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
