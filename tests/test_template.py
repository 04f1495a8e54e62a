"""The template-written SGD and Adam equal tf_keras's built-in legacy optimizers
and the numpy reference, step by step: dense and sparse (repeated indices),
float16/32/64, eager and tf.function, with and without XLA."""

import numpy as np
import pytest
import tensorflow as tf
from catalogue.trajectories import numpy_gradient, trajectory

from optimizers import SGD, Adam

import reference
from conftest import TOLERANCE, keras

CASES = {
    "sgd": (dict(learning_rate=0.1), reference.sgd, "SGD"),
    "momentum": (dict(learning_rate=0.1, momentum=0.9), reference.sgd, "SGD"),
    "nesterov": (dict(learning_rate=0.1, momentum=0.9, nesterov=True), reference.sgd, "SGD"),
    "adam": (dict(learning_rate=0.1, beta_1=0.8, beta_2=0.95), reference.adam, "Adam"),
    "amsgrad": (dict(learning_rate=0.1, beta_1=0.8, beta_2=0.95, amsgrad=True), reference.adam, "Adam"),
}
OURS = {"SGD": SGD, "Adam": Adam}
STEPS = 4
SHAPE = (4, 3)
INDICES = np.array([0, 2, 0])  # row 0 is repeated


def _gradients(sparse, dtype, seed=0):
    rng = np.random.RandomState(seed)
    grads = []
    for _ in range(STEPS):
        # Every other step has a zero gradient somewhere: AMSGrad's max matters then.
        if sparse:
            values = rng.randn(len(INDICES), SHAPE[1]).astype(dtype.as_numpy_dtype)
            grads.append(tf.IndexedSlices(tf.constant(values), tf.constant(INDICES), tf.constant(SHAPE)))
        else:
            grads.append(tf.constant(rng.randn(*SHAPE).astype(dtype.as_numpy_dtype)))
    bias_grads = [tf.constant(rng.randn(3).astype(dtype.as_numpy_dtype)) for _ in range(STEPS)]
    return grads, bias_grads


def _variables(dtype):
    return tf.Variable(np.linspace(-1, 1, 12).reshape(SHAPE), dtype=dtype), tf.Variable([0.5, -0.5, 1.0], dtype=dtype)


def _numpy_trajectory(rule, hyper, grads, bias_grads, dtype):
    # Hyperparameters live in float32 variables (as in tf_keras), epsilon is a Python float.
    hyper = {k: (float(np.float32(v)) if k in ("momentum", "beta_1", "beta_2") else v)
             for k, v in hyper.items() if k != "learning_rate"}
    lr = float(np.float32(CASES_LR))
    np_dtype = np.float64  # the reference runs in float64
    kernel = np.linspace(-1, 1, 12).reshape(SHAPE).astype(dtype.as_numpy_dtype).astype(np_dtype)
    bias = np.array([0.5, -0.5, 1.0], dtype=dtype.as_numpy_dtype).astype(np_dtype)
    ks, bs, out = {}, {}, []
    for step, (g, b) in enumerate(zip(grads, bias_grads), start=1):
        g, _ = numpy_gradient(g, SHAPE)
        kernel, ks = rule(kernel, g, ks, lr, step=step, **hyper)
        bias, bs = rule(bias, b.numpy().astype(np_dtype), bs, lr, step=step, **hyper)
        out.append((kernel, bias))
    return out


CASES_LR = 0.1


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("dtype", [tf.float16, tf.float32, tf.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("jit_compile", [True, False], ids=["xla", "plain"])
def test_equals_builtin_and_numpy(case, sparse, dtype, mode, jit_compile):
    hyper, rule, kind = CASES[case]
    grads, bias_grads = _gradients(sparse, dtype)
    steps = list(zip(grads, bias_grads))
    ours = trajectory(OURS[kind](jit_compile=jit_compile, **hyper), steps, _variables(dtype), mode)
    builtin_cls = getattr(keras.optimizers.legacy, kind)
    builtin = trajectory(builtin_cls(**hyper), steps, _variables(dtype), mode)
    expected = _numpy_trajectory(rule, hyper, grads, bias_grads, dtype)
    tol = TOLERANCE[dtype]
    for step, ((k, b), (bk, bb), (nk, nb)) in enumerate(zip(ours, builtin, expected), start=1):
        np.testing.assert_allclose(k, bk, err_msg=f"kernel vs built-in, step {step}", **tol)
        np.testing.assert_allclose(b, bb, err_msg=f"bias vs built-in, step {step}", **tol)
        # float16 accumulates rounding over steps against a float64 reference.
        ref_tol = dict(rtol=1e-2, atol=1e-2) if dtype == tf.float16 else tol
        np.testing.assert_allclose(k, nk, err_msg=f"kernel vs numpy, step {step}", **ref_tol)
        np.testing.assert_allclose(b, nb, err_msg=f"bias vs numpy, step {step}", **ref_tol)
        assert k.dtype == dtype.as_numpy_dtype


def test_coefficients_prepared_once_per_device_and_dtype():
    calls = []

    class Counting(SGD):
        def prepare(self, dtype, coefficients):
            calls.append(dtype)

    opt = Counting(learning_rate=0.1)
    a32, b32 = tf.Variable([1.0]), tf.Variable([2.0])
    a64 = tf.Variable([1.0], dtype=tf.float64)
    opt.apply_gradients([(tf.constant([1.0]), a32), (tf.constant([1.0]), b32),
                         (tf.constant([1.0], tf.float64), a64)])
    assert sorted(d.name for d in calls) == ["float32", "float64"]


def test_schedule_callable_and_tensor_hyperparameters():
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.5)
    var = tf.Variable([1.0])
    opt = SGD(learning_rate=schedule)
    for _ in range(3):
        opt.apply_gradients([(tf.constant([1.0]), var)])
    np.testing.assert_allclose(var.numpy(), [1.0 - 0.1 - 0.05 - 0.025], rtol=1e-6)

    var = tf.Variable([1.0])
    opt = SGD(learning_rate=lambda: 0.25, momentum=tf.constant(0.0))
    opt.apply_gradients([(tf.constant([1.0]), var)])
    np.testing.assert_allclose(var.numpy(), [0.75])


def test_hyperparameter_attribute_is_live_and_validated():
    opt = SGD(learning_rate=0.1)
    var = tf.Variable([1.0])
    opt.apply_gradients([(tf.constant([1.0]), var)])
    opt.learning_rate = 0.5
    opt.apply_gradients([(tf.constant([1.0]), var)])
    np.testing.assert_allclose(var.numpy(), [0.4], rtol=1e-6)
    with pytest.raises(ValueError, match=r"`learning_rate` must be in \[0.0, inf\]. Received: learning_rate=-1"):
        opt.learning_rate = -1.0
    assert float(opt.learning_rate) == pytest.approx(0.5)


@pytest.mark.parametrize("kind", ["SGD", "Adam"])
def test_config_round_trip_with_schedule(kind):
    schedule = keras.optimizers.schedules.PiecewiseConstantDecay([10], [0.1, 0.01])
    opt = OURS[kind](learning_rate=schedule, clipnorm=1.0, decay=0.01)
    config = opt.get_config()
    again = OURS[kind].from_config(config)
    assert again.get_config() == config
    assert isinstance(again._get_hyper("learning_rate"), keras.optimizers.schedules.PiecewiseConstantDecay)
    serialized = keras.optimizers.serialize(opt)
    assert type(keras.optimizers.deserialize(serialized)) is OURS[kind]


def test_legacy_lr_alias():
    with pytest.warns(UserWarning, match="lr"):
        opt = SGD(lr=0.3)
    assert float(opt.learning_rate) == pytest.approx(0.3)


def test_sparse_default_needs_only_update_dense():
    class Plain(SGD):  # no update_sparse: the template's default is used
        pass

    var = tf.Variable(np.ones((3, 2), np.float32))
    grad = tf.IndexedSlices(tf.constant([[1.0, 2.0], [3.0, 4.0]]), tf.constant([2, 2]), tf.constant([3, 2]))
    Plain(learning_rate=1.0).apply_gradients([(grad, var)])
    np.testing.assert_allclose(var.numpy(), [[1, 1], [1, 1], [-3, -5]])


def test_constraint_is_applied_after_dense_update():
    var = tf.Variable([1.0, -1.0], constraint=lambda v: tf.clip_by_value(v, 0.0, 0.5))
    SGD(learning_rate=0.1).apply_gradients([(tf.constant([1.0, 1.0]), var)])
    np.testing.assert_allclose(var.numpy(), [0.5, 0.0])


def test_model_fit_and_h5_load_without_custom_objects(tmp_path):
    x = np.random.RandomState(0).randn(64, 4).astype("float32")
    y = x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")
    model = keras.Sequential([keras.layers.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=Adam(learning_rate=0.05), loss="mse")
    history = model.fit(x, y, epochs=20, batch_size=16, verbose=0)
    assert history.history["loss"][-1] < 0.2 * history.history["loss"][0]
    path = str(tmp_path / "model.h5")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert type(loaded.optimizer) is Adam
    assert int(loaded.optimizer.iterations.numpy()) == int(model.optimizer.iterations.numpy())


@pytest.mark.parametrize("jit_compile", [True, False], ids=["xla", "plain"])
def test_fit_mlp_with_variables_of_several_ranks_and_shapes(jit_compile):
    # Kernels (2-D) and biases (1-D) of different shapes go through the per-variable
    # XLA step in one traced train step (a regression: one relaxed tf.function failed).
    x = np.random.RandomState(0).randn(64, 5).astype("float32")
    y = np.sin(x[:, :1])
    model = keras.Sequential([keras.layers.Input((5,)), keras.layers.Dense(8, activation="tanh"),
                              keras.layers.Dense(3, activation="tanh"), keras.layers.Dense(1)])
    model.compile(optimizer=Adam(0.01, jit_compile=jit_compile), loss="mse")
    history = model.fit(x, y, epochs=5, batch_size=16, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
