"""MovingAverage vs TensorFlow Addons' MovingAverage, run live (TF 2.15 + TFA 0.23 env).

Raw weights and averages are equal bit for bit where the average runs as TensorFlow's fused
kernel (every variable of up to 2^18 elements, and every variable with ``jit_compile=False``);
the average of a larger variable, compiled with XLA (the default), agrees to float32 tolerance.
"""

import numpy as np
import pytest
import tensorflow as tf

from optimizers import MovingAverage

import reference
from conftest import HAS_TFA, TOLERANCE, keras

if HAS_TFA:
    import tensorflow_addons as tfa

pytestmark = pytest.mark.tfa

RULES = reference.MOVING_AVERAGE_RULES
INNER = {
    "sgd": lambda: keras.optimizers.legacy.SGD(0.1, momentum=0.9),
    "adam": lambda: keras.optimizers.legacy.Adam(0.05),
}
SHAPE = (5, 3)
LARGE_SHAPE = (600, 500)  # over 2^18 elements: its average is compiled alone


def _gradients(sparse, steps=6, shape=SHAPE):
    rng = np.random.RandomState(1)
    if sparse:
        indices = tf.constant([0, 3, 3, 1])  # a repeated row
        return [tf.IndexedSlices(tf.constant(rng.randn(4, shape[1]).astype("float32")), indices,
                                 tf.constant(shape, tf.int64)) for _ in range(steps)]
    return [tf.constant(rng.randn(*shape).astype("float32")) for _ in range(steps)]


def _trajectory(opt, grads, in_function, shape=SHAPE):
    var = tf.Variable(np.random.RandomState(0).randn(*shape).astype("float32"))

    def apply(grad):
        opt.apply_gradients([(grad, var)])

    if in_function:
        apply = tf.function(apply)
    out = []
    for grad in grads:
        apply(grad)
        out.append((var.numpy(), opt.get_slot(var, "average").numpy()))
    return out


def _check(ours, theirs, exact):
    for step, ((raw, average), (tfa_raw, tfa_average)) in enumerate(zip(ours, theirs)):
        np.testing.assert_array_equal(raw, tfa_raw, err_msg=f"raw weights, step {step}")
        if exact:
            np.testing.assert_array_equal(average, tfa_average, err_msg=f"average, step {step}")
        else:
            np.testing.assert_allclose(average, tfa_average, err_msg=f"average, step {step}",
                                       **TOLERANCE[tf.float32])


@pytest.mark.parametrize("jit_compile", [False, True], ids=["plain", "xla"])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("rule", sorted(RULES))
@pytest.mark.parametrize("inner", sorted(INNER))
def test_equals_tfa_exactly_on_small_variables(inner, rule, sparse, jit_compile):
    grads = _gradients(sparse)
    ours = _trajectory(MovingAverage(INNER[inner](), jit_compile=jit_compile, **RULES[rule]), grads, False)
    theirs = _trajectory(tfa.optimizers.MovingAverage(INNER[inner](), **RULES[rule]), grads, False)
    _check(ours, theirs, exact=True)


@pytest.mark.parametrize("jit_compile", [False, True], ids=["plain", "xla"])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("inner", sorted(INNER))
def test_equals_tfa_on_a_large_variable_in_tf_function(inner, sparse, jit_compile):
    grads = _gradients(sparse, shape=LARGE_SHAPE)
    rule = RULES["dynamic_start"]
    ours = _trajectory(MovingAverage(INNER[inner](), jit_compile=jit_compile, **rule), grads, True, LARGE_SHAPE)
    theirs = _trajectory(tfa.optimizers.MovingAverage(INNER[inner](), **rule), grads, True, LARGE_SHAPE)
    _check(ours, theirs, exact=not jit_compile)


def test_assign_average_vars_equals_tfa():
    grads = _gradients(False)
    variables = []
    for opt in (MovingAverage(INNER["adam"](), jit_compile=False), tfa.optimizers.MovingAverage(INNER["adam"]())):
        var = tf.Variable(np.ones(SHAPE, "float32"))
        for grad in grads:
            opt.apply_gradients([(grad, var)])
        opt.assign_average_vars([var])
        variables.append(var.numpy())
    np.testing.assert_array_equal(*variables)


def _model():
    model = keras.Sequential([keras.layers.Dense(4, activation="tanh", input_shape=(3,)), keras.layers.Dense(1)])
    model.set_weights([np.full(w.shape, 0.1 * (i + 1), "float32") for i, w in enumerate(model.weights)])
    return model


def _data():
    rng = np.random.RandomState(3)
    x = rng.randn(32, 3).astype("float32")
    return x, x.sum(axis=1, keepdims=True) ** 2


def _fit(model, opt, epochs=2):
    x, y = _data()
    model.compile(opt, loss="mse")
    model.fit(x, y, batch_size=8, epochs=epochs, shuffle=False, verbose=0)
    return [(v.numpy(), model.optimizer.get_slot(v, "average").numpy()) for v in model.trainable_variables]


@pytest.mark.parametrize("jit_compile", [False, True], ids=["plain", "xla"])
def test_model_fit_equals_tfa(jit_compile):
    rule = dict(average_decay=0.9, dynamic_decay=True, start_step=1)
    ours = _fit(_model(), MovingAverage(INNER["adam"](), jit_compile=jit_compile, **rule))
    theirs = _fit(_model(), tfa.optimizers.MovingAverage(INNER["adam"](), **rule))
    _check(ours, theirs, exact=True)  # small variables: the fused kernel either way


def test_model_saved_with_tfa_loads_into_ours_and_trains_on_equally(tmp_path, monkeypatch):
    x, y = _data()
    tfa_model = _model()
    _fit(tfa_model, tfa.optimizers.MovingAverage(INNER["adam"](), average_decay=0.9))
    path = str(tmp_path / "tfa.h5")
    tfa_model.save(path)
    # TFA is imported here, so its class owns "Addons>MovingAverage"; without TFA the name maps to
    # ours (optimizers/tfa_compat.py): set the registry as it is then.
    monkeypatch.setitem(keras.utils.get_custom_objects(), "Addons>MovingAverage", MovingAverage)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded.optimizer, MovingAverage)
    for ours, theirs in zip(loaded.optimizer.get_weights(), tfa_model.optimizer.get_weights()):
        np.testing.assert_array_equal(ours, theirs)
    loaded.optimizer.jit_compile = False  # TFA's bits
    for model in (loaded, tfa_model):
        model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    for ours, theirs in zip(loaded.trainable_variables, tfa_model.trainable_variables):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
        np.testing.assert_array_equal(loaded.optimizer.get_slot(ours, "average").numpy(),
                                      tfa_model.optimizer.get_slot(theirs, "average").numpy())


def test_tfa_checkpoint_restores_into_ours(tmp_path):
    grads = _gradients(False)
    tfa_var, var = tf.Variable(np.ones(SHAPE, "float32")), tf.Variable(np.zeros(SHAPE, "float32"))
    tfa_opt = tfa.optimizers.MovingAverage(INNER["adam"](), average_decay=0.9)
    for grad in grads[:3]:
        tfa_opt.apply_gradients([(grad, tfa_var)])
    path = tf.train.Checkpoint(var=tfa_var, optimizer=tfa_opt).save(str(tmp_path / "tfa"))
    opt = MovingAverage(INNER["adam"](), average_decay=0.9, jit_compile=False)
    status = tf.train.Checkpoint(var=var, optimizer=opt).restore(path)
    status.assert_existing_objects_matched()  # what a migration script asserts, as with TFA itself
    opt.swap_weights()  # the averages restored before the first step are the wrapper's
    np.testing.assert_array_equal(var.numpy(), tfa_opt.get_slot(tfa_var, "average").numpy())
    opt.swap_weights()
    for grad in grads[3:]:
        tfa_opt.apply_gradients([(grad, tfa_var)])
        opt.apply_gradients([(grad, var)])
    status.assert_existing_objects_matched()
    assert int(opt.iterations.numpy()) == int(tfa_opt.iterations.numpy()) == len(grads)
    np.testing.assert_array_equal(var.numpy(), tfa_var.numpy())
    np.testing.assert_array_equal(opt.get_slot(var, "average").numpy(), tfa_opt.get_slot(tfa_var, "average").numpy())


def test_swap_without_strategy_where_tfa_raises():
    grads = _gradients(False)
    var, tfa_var = tf.Variable(np.ones(SHAPE, "float32")), tf.Variable(np.ones(SHAPE, "float32"))
    opt, tfa_opt = MovingAverage(INNER["sgd"]()), tfa.optimizers.MovingAverage(INNER["sgd"]())
    for grad in grads:
        opt.apply_gradients([(grad, var)])
        tfa_opt.apply_gradients([(grad, tfa_var)])
    with pytest.raises(ValueError, match="Swapping weights must occur under a tf.distribute.Strategy"):
        tfa_opt.swap_weights()
    average = opt.get_slot(var, "average").numpy()
    opt.swap_weights()
    np.testing.assert_array_equal(var.numpy(), average)
