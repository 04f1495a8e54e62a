"""Sharpness-Aware Minimization (``sam_gradients``, ``SAMModel`` for both Keras) against numpy.

The reference problem is least squares with a ``Dense(1)`` model, ``L(W, b) = mean((XW + b - y)^2)``,
whose gradient numpy computes analytically (``dL/dW = 2/n X^T r``, ``dL/db = 2/n sum(r)``,
``r = XW + b - y``); the inner optimizers follow ``tests/reference.py``. Other checks compare two
runs of this library (``rho=0`` against the inner optimizer alone, ``fit`` against a custom loop,
a resumed run against an uninterrupted one, two replicas against one device).
"""

from __future__ import annotations

import os
import types

import numpy as np
import pytest
import tensorflow as tf

import optimizers

import reference as ref
from conftest import TF_VERSION

RTOL = dict(rtol=2e-5, atol=1e-6)  # float32 steps against a float64 reference


def family(name):
    """The pieces of one Keras: its module, SAMModel, a plain SGD and this library's AdamW."""
    if name == "keras3":
        if TF_VERSION < (2, 16):
            pytest.skip("Keras 3 exists only beside TF >= 2.16")
        import keras

        from optimizers import keras3
        return types.SimpleNamespace(keras=keras, SAMModel=keras3.SAMModel, sgd=keras.optimizers.SGD,
                                     adamw=keras3.AdamW)
    keras = optimizers.keras
    return types.SimpleNamespace(keras=keras, SAMModel=optimizers.SAMModel, sgd=keras.optimizers.legacy.SGD,
                                 adamw=optimizers.AdamW)


KERAS = ["keras2", "keras3"]


@pytest.fixture(autouse=True)
def _clear_keras3():
    yield
    if TF_VERSION >= (2, 16):
        import keras

        keras.backend.clear_session()


# ----------------------------------------------------------------------------- numpy reference
def problem(n=12, d=3, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.randn(n, d).astype("float32")
    y = (x @ rng.randn(d, 1) + 0.3 * rng.randn(n, 1)).astype("float32")
    return x, y, [rng.randn(d, 1).astype("float32"), rng.randn(1).astype("float32")]


def loss_and_grads(params, x, y):
    w, b = params
    r = x @ w + b - y
    return float(np.mean(r ** 2)), [2 / len(x) * x.T @ r, 2 / len(x) * r.sum(axis=0)]


def perturbation(grads, params, rho, epsilon=1e-12, adaptive=False):
    if adaptive:
        scaled = [np.abs(p) * g for g, p in zip(grads, params)]
        norm = np.sqrt(sum(np.sum(s ** 2) for s in scaled))
        return [rho * np.abs(p) * s / (norm + epsilon) for s, p in zip(scaled, params)]
    norm = np.sqrt(sum(np.sum(g ** 2) for g in grads))
    return [rho * g / (norm + epsilon) for g in grads]


def sam_step(params, x, y, rho, adaptive=False):
    """The two-pass step's gradients: at w + e, e from the gradient at w; and the loss at w."""
    loss, grads = loss_and_grads(params, x, y)
    e = perturbation(grads, params, rho, adaptive=adaptive)
    return loss, loss_and_grads([p + d for p, d in zip(params, e)], x, y)[1]


class Inner:
    """The inner optimizer in numpy: plain SGD, or this library's AdamW (TFA's decay rule)."""

    def __init__(self, kind):
        self.kind, self.slots, self.step = kind, [{}, {}], 0

    def make(self, fam):
        return fam.sgd(0.1) if self.kind == "sgd" else fam.adamw(weight_decay=0.01, learning_rate=0.05)

    def apply(self, params, grads):
        self.step += 1
        out = []
        for i, (p, g) in enumerate(zip(params, grads)):
            if self.kind == "sgd":
                out.append(p - 0.1 * g)
            else:
                p, self.slots[i] = ref.adamw(p, g, self.slots[i], lr=0.05, weight_decay=0.01, step=self.step)
                out.append(p)
        return out


def linear(fam, params):
    keras = fam.keras
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.set_weights(params)
    return model


@pytest.mark.parametrize("adaptive", [False, True], ids=["sam", "asam"])
@pytest.mark.parametrize("inner", ["sgd", "adamw"])
@pytest.mark.parametrize("keras_name", KERAS)
def test_fit_takes_the_two_pass_step(keras_name, inner, adaptive):
    fam, (x, y, params) = family(keras_name), problem()
    sam = fam.SAMModel(linear(fam, params), rho=0.1, adaptive=adaptive)
    numpy_inner = Inner(inner)
    sam.compile(numpy_inner.make(fam), "mse")
    params = [p.astype("float64") for p in params]
    for step in range(1, 5):  # one batch per epoch: one step
        history = sam.fit(x, y, batch_size=len(x), epochs=1, shuffle=False, verbose=0)
        loss, grads = sam_step(params, x, y, rho=0.1, adaptive=adaptive)
        params = numpy_inner.apply(params, grads)
        for got, want in zip(sam.get_weights(), params):
            np.testing.assert_allclose(got, want, err_msg=f"step {step}", **RTOL)
        # fit reports the first pass's loss, at w (the second pass does not reach the loss metric)
        np.testing.assert_allclose(history.history["loss"][0], loss, rtol=1e-5)


@pytest.mark.parametrize("inner", ["sgd", "adamw"])
@pytest.mark.parametrize("keras_name", KERAS)
def test_reuse_gradient_takes_the_one_pass_step(keras_name, inner):
    """One gradient per batch, at w + e_{t-1}; e_t from it, kept for the next batch (zero at first)."""
    fam, (x, y, params) = family(keras_name), problem()
    sam = fam.SAMModel(linear(fam, params), rho=0.1, reuse_gradient=True)
    numpy_inner = Inner(inner)
    sam.compile(numpy_inner.make(fam), "mse")
    params = [p.astype("float64") for p in params]
    e = [np.zeros_like(p) for p in params]
    for step in range(1, 5):
        history = sam.fit(x, y, batch_size=len(x), epochs=1, shuffle=False, verbose=0)
        loss, grads = loss_and_grads([p + d for p, d in zip(params, e)], x, y)
        e = perturbation(grads, params, rho=0.1)
        params = numpy_inner.apply(params, grads)
        for got, want in zip(sam.model.get_weights(), params):
            np.testing.assert_allclose(got, want, err_msg=f"step {step}", **RTOL)
        for got, want in zip(sam.perturbation, e):
            np.testing.assert_allclose(np.asarray(got), want, err_msg=f"step {step}", **RTOL)
        np.testing.assert_allclose(history.history["loss"][0], loss, rtol=1e-5)


@pytest.mark.parametrize("adaptive", [False, True], ids=["sam", "asam"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sam_gradients_in_a_custom_loop_match_numpy(dtype, adaptive):
    x, y, params = problem()
    x, y, params = x.astype(dtype), y.astype(dtype), [p.astype(dtype) for p in params]
    w, b = tf.Variable(params[0]), tf.Variable(params[1])

    @tf.function
    def grads():
        return optimizers.sam_gradients(lambda: tf.reduce_mean((x @ w + b - y) ** 2), [w, b], rho=0.2,
                                        adaptive=adaptive)

    loss, (gw, gb) = grads()
    want_loss, want = sam_step([p.astype("float64") for p in params], x, y, rho=0.2, adaptive=adaptive)
    tolerance = RTOL if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)  # rho and epsilon kept in float64
    np.testing.assert_allclose(loss, want_loss, **tolerance)
    np.testing.assert_allclose(gw, want[0], **tolerance)
    np.testing.assert_allclose(gb, want[1], **tolerance)
    np.testing.assert_array_equal(w.numpy(), params[0])  # w restored, exactly
    np.testing.assert_array_equal(b.numpy(), params[1])


# ----------------------------------------------------------------------------- against this library
def mlp(fam, seed=0):
    keras = fam.keras
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)])


def data(n=32):
    rng = np.random.RandomState(1)
    x = rng.randn(n, 4).astype("float32")
    return x, (np.sin(x).sum(axis=1, keepdims=True)).astype("float32")


@pytest.mark.parametrize("keras_name", KERAS)
def test_rho_zero_is_the_inner_optimizer_alone(keras_name):
    fam, (x, y) = family(keras_name), data()
    plain, inner = mlp(fam), mlp(fam)
    sam = fam.SAMModel(inner, rho=0.0)
    plain.compile(fam.adamw(weight_decay=1e-3, learning_rate=0.01), "mse")
    sam.compile(fam.adamw(weight_decay=1e-3, learning_rate=0.01), "mse")
    a = plain.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0).history["loss"]
    b = sam.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0).history["loss"]
    assert a == b
    for got, want in zip(sam.get_weights(), plain.get_weights()):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("reuse", [False, True], ids=["two_pass", "reuse_gradient"])
@pytest.mark.parametrize("keras_name", KERAS)
def test_fit_trains_and_equals_the_custom_loop(keras_name, reuse):
    fam, (x, y) = family(keras_name), data()
    sam = fam.SAMModel(mlp(fam), rho=0.05, reuse_gradient=reuse)
    sam.compile(fam.adamw(weight_decay=1e-3, learning_rate=0.02), "mse")
    losses = sam.fit(x, y, batch_size=8, epochs=6, shuffle=False, verbose=0).history["loss"]
    assert losses[-1] < 0.7 * losses[0], losses

    model = mlp(fam)
    optimizer = fam.adamw(weight_decay=1e-3, learning_rate=0.02)
    mse = fam.keras.losses.MeanSquaredError()
    state = [tf.Variable(tf.zeros_like(v)) for v in model.trainable_variables] if reuse else None

    @tf.function
    def step(xb, yb):
        loss, grads = optimizers.sam_gradients(lambda: mse(yb, model(xb, training=True)), model.trainable_variables,
                                               rho=0.05, perturbation=state)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for _ in range(6):
        for start in range(0, len(x), 8):
            step(x[start:start + 8], y[start:start + 8])
    for got, want in zip(sam.model.get_weights(), model.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("reuse", [False, True], ids=["two_pass", "reuse_gradient"])
@pytest.mark.parametrize("keras_name", KERAS)
def test_saved_model_resumes_exactly(keras_name, reuse, tmp_path):
    fam, (x, y) = family(keras_name), data()
    keras = fam.keras
    sam = fam.SAMModel(mlp(fam), rho=0.05, reuse_gradient=reuse)
    sam.compile(fam.adamw(weight_decay=1e-3, learning_rate=0.02), "mse")
    sam.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)

    sam.save(tmp_path / "sam.keras")
    sam.model.save(tmp_path / "inner.keras")  # the wrapped model alone: a plain Keras model
    copies = [keras.models.load_model(tmp_path / "sam.keras")]
    inner = keras.models.load_model(tmp_path / "inner.keras")
    assert type(inner) is type(sam.model)
    for got, want in zip(inner.get_weights(), sam.model.get_weights()):
        np.testing.assert_array_equal(got, want)  # the unperturbed weights
    if keras_name == "keras2":  # a TensorFlow checkpoint of the model and its optimizer
        prefix = tf.train.Checkpoint(model=sam, optimizer=sam.optimizer).save(os.path.join(tmp_path, "ckpt"))
        copy = fam.SAMModel(keras.models.clone_model(sam.model), rho=0.05, reuse_gradient=reuse)
        copy.compile(fam.adamw(weight_decay=1e-3, learning_rate=0.02), "mse")
        tf.train.Checkpoint(model=copy, optimizer=copy.optimizer).restore(prefix)
        copies.append(copy)

    sam.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    for copy in copies:
        assert type(copy) is fam.SAMModel and copy.rho == 0.05 and copy.reuse_gradient is reuse
        copy.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        for got, want in zip(copy.get_weights(), sam.get_weights()):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("reuse", [False, True], ids=["two_pass", "reuse_gradient"])
@pytest.mark.parametrize("keras_name", KERAS)
def test_mirrored_strategy_equals_one_device(keras_name, reuse, mirrored):
    """Two replicas, each with half of every batch: the perturbation comes from the all-reduced
    gradient, so both replicas take the single device's step."""
    fam, (x, y) = family(keras_name), data()
    runs = []
    for strategy in (tf.distribute.get_strategy(), mirrored):
        with strategy.scope():
            sam = fam.SAMModel(mlp(fam), rho=0.05, reuse_gradient=reuse)
            sam.compile(fam.adamw(weight_decay=1e-3, learning_rate=0.02), "mse")
        losses = sam.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0).history["loss"]
        runs.append((losses, sam.get_weights()))
    (one_losses, one), (two_losses, two) = runs
    np.testing.assert_allclose(two_losses, one_losses, rtol=1e-5)
    for got, want in zip(two, one):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("keras_name", KERAS)
def test_mirrored_custom_loop_uses_the_all_reduced_gradient(keras_name, mirrored):
    """sam_gradients inside strategy.run: e from the global gradient, the same on each replica."""
    fam, (x, y, params) = family(keras_name), problem(n=8)
    with mirrored.scope():
        model = linear(fam, params)
    dataset = mirrored.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices((x, y)).batch(8))
    xb, yb = next(iter(dataset))

    @tf.function
    def grads(xb, yb):
        def replica_step(xb, yb):
            def loss_fn():
                per_example = tf.reduce_mean((model(xb) - yb) ** 2, axis=-1)
                return tf.reduce_sum(per_example) / 8  # each replica's share of the global mean
            return optimizers.sam_gradients(loss_fn, model.trainable_variables, rho=0.1)[1]
        return mirrored.run(replica_step, (xb, yb))

    per_replica = grads(xb, yb)
    summed = [mirrored.reduce("SUM", g, axis=None) for g in per_replica]
    want = sam_step([p.astype("float64") for p in params], x, y, rho=0.1)[1]
    for got, w in zip(summed, want):
        np.testing.assert_allclose(got, w, **RTOL)
    for got, p in zip(model.get_weights(), params):
        np.testing.assert_array_equal(got, p)  # restored on every replica


# ----------------------------------------------------------------------------- bad input
BAD = [("rho", -0.1), ("rho", "0.05"), ("rho", float("nan")), ("rho", True), ("rho", None),
       ("epsilon", -1e-12), ("epsilon", "tiny")]


@pytest.mark.parametrize("name, value", BAD, ids=[f"{n}={v!r}" for n, v in BAD])
@pytest.mark.parametrize("keras_name", KERAS)
def test_bad_rho_or_epsilon_is_refused(keras_name, name, value):
    fam = family(keras_name)
    model = mlp(fam)
    before = model.get_weights()
    with pytest.raises(ValueError, match=rf"`{name}` must be a finite number >= 0\. Received: {name}={value!r}$"):
        fam.SAMModel(model, **{name: value})
    var = tf.Variable([1.0, 2.0])
    with pytest.raises(ValueError, match=rf"Received: {name}={value!r}$"):
        optimizers.sam_gradients(lambda: tf.reduce_sum(var ** 2), [var], **{name: value})
    np.testing.assert_array_equal(var.numpy(), [1.0, 2.0])
    for got, want in zip(model.get_weights(), before):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("keras_name", KERAS)
def test_bad_model_or_flags_are_refused(keras_name):
    fam = family(keras_name)
    with pytest.raises(ValueError, match=r"`model` must be a .*Model\. Received: model='mlp'"):
        fam.SAMModel("mlp")
    with pytest.raises(ValueError, match=r"`adaptive` must be a bool\. Received: adaptive=1"):
        fam.SAMModel(mlp(fam), adaptive=1)
    unbuilt = fam.keras.Sequential([fam.keras.layers.Dense(1)])
    with pytest.raises(ValueError, match=r"`reuse_gradient=True` keeps a perturbation per weight: build the model"):
        fam.SAMModel(unbuilt, reuse_gradient=True)


def test_sparse_gradients_give_the_dense_equivalent():
    """An embedding lookup's gradient (IndexedSlices, a row twice) perturbs as its dense equivalent."""
    rng = np.random.RandomState(2)
    table = rng.randn(5, 2).astype("float32")
    ids, target = np.array([0, 3, 0, 1]), rng.randn(4, 2).astype("float32")
    sparse, dense = tf.Variable(table), tf.Variable(table)
    _, (g_sparse,) = optimizers.sam_gradients(
        lambda: tf.reduce_mean((tf.gather(sparse, ids) - target) ** 2), [sparse], rho=0.3)
    _, (g_dense,) = optimizers.sam_gradients(
        lambda: tf.reduce_mean((tf.one_hot(ids, 5) @ dense - target) ** 2), [dense], rho=0.3)
    assert isinstance(g_sparse, tf.IndexedSlices)
    np.testing.assert_allclose(tf.convert_to_tensor(g_sparse), g_dense, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(sparse.numpy(), table)


@pytest.mark.parametrize("keras_name", KERAS)
def test_loss_scale_optimizer_takes_the_unscaled_steps(keras_name):
    """Around a LossScaleOptimizer, both passes are scaled and the gradients unscaled: the steps of the
    optimizer alone (the perturbation does not depend on the gradient's scale, but for epsilon)."""
    fam, (x, y) = family(keras_name), data()
    runs = []
    for scaled in (False, True):
        optimizer = fam.sgd(0.05)
        if scaled:
            optimizer = (fam.keras.mixed_precision.LossScaleOptimizer(optimizer) if keras_name == "keras2"
                         else fam.keras.optimizers.LossScaleOptimizer(optimizer))
        sam = fam.SAMModel(mlp(fam), rho=0.05)
        sam.compile(optimizer, "mse")
        runs.append((sam.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0).history["loss"],
                     sam.get_weights()))
    np.testing.assert_allclose(runs[1][0], runs[0][0], rtol=1e-6)
    for got, want in zip(runs[1][1], runs[0][1]):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
