"""The cyclical learning rates vs TensorFlow Addons 0.23, run live (`make test-tf215`).

Ours and ``tfa.optimizers.<Name>`` get the same arguments and steps; TFA is the source of
every expected number here, and the values are equal bit for bit: over three cycles, with
the step as Keras 2 passes it (a float32 tensor for float32 variables, a float64 tensor for
float64 ones), and as a Python int or an int64 tensor where TFA accepts them, in float32 and
float64 schedules, eagerly and in a tf.function, alone and driving Keras's SGD. TFA's configs
build ours, and an ``.h5`` model saved by TFA with one of them loads with ours in its place.
Where we deliberately differ from TFA (the step TFA hands ``scale_fn`` in
``scale_mode="iterations"``), a test pins TFA's failure and our value.
"""

import numpy as np
import pytest
import tensorflow as tf

from optimizers import schedules

from conftest import HAS_TFA, keras

if HAS_TFA:
    import tensorflow_addons as tfa

pytestmark = pytest.mark.tfa

STEPS = range(0, 6 * 3 + 2)

# name: (class name, keyword arguments); step_size 3 in every case
CASES = {
    "triangular": ("TriangularCyclicalLearningRate", {}),
    "triangular_iterations": ("TriangularCyclicalLearningRate", dict(scale_mode="iterations")),
    "triangular2": ("Triangular2CyclicalLearningRate", {}),
    "triangular2_iterations": ("Triangular2CyclicalLearningRate", dict(scale_mode="iterations")),
    "exponential": ("ExponentialCyclicalLearningRate", dict(gamma=0.9)),
    "exponential_cycle": ("ExponentialCyclicalLearningRate", dict(scale_mode="cycle", gamma=0.8)),
    "generic_cycle": ("CyclicalLearningRate", dict(scale_fn=lambda c: 1.0 / (1.0 + c))),
    "generic_iterations": ("CyclicalLearningRate", dict(scale_fn=lambda t: tf.exp(-0.1 * t), scale_mode="iterations")),
}


def _pair(case, dtype=tf.float32):
    cls_name, kwargs = CASES[case]
    if dtype == tf.float64:
        args = [tf.constant(v, tf.float64) for v in (0.1, 0.7, 3.0)]
    else:
        args = [0.1, 0.7, 3]
    return getattr(schedules, cls_name)(*args, **kwargs), getattr(tfa.optimizers, cls_name)(*args, **kwargs)


# TFA's ``scale_mode="iterations"`` hands the raw step to the scale function, which works for a
# step of the schedule's own float dtype only (pinned below); these cases also take integer steps.
INTEGER_STEPS = {"triangular", "triangular_iterations", "triangular2", "exponential_cycle", "generic_cycle"}


def _step_kinds(case, dtype):
    kinds = {dtype.name: lambda t: tf.constant(t, dtype)}
    if case in INTEGER_STEPS:
        kinds["int"] = lambda t: t
        kinds["int64"] = lambda t: tf.constant(t, tf.int64)
    return kinds


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("case", sorted(CASES))
def test_equals_tfa_bit_for_bit(case, dtype, mode):
    ours, theirs = _pair(case, dtype)
    if mode == "function":
        ours, theirs = tf.function(ours), tf.function(theirs)
    for kind, make_step in _step_kinds(case, dtype).items():
        for t in STEPS:
            expected = theirs(make_step(t))
            got = ours(make_step(t))
            assert got.dtype == expected.dtype == dtype
            np.testing.assert_array_equal(got.numpy(), expected.numpy(), err_msg=f"step {t} as {kind}")


@pytest.mark.parametrize("case", ["triangular2_iterations", "exponential"])
def test_iterations_mode_works_where_tfa_fails(case):
    """TFA hands the raw step to ``scale_fn``: a float64 step (a float64 variable's) or an int64 one
    (``iterations``, as used for a ``weight_decay`` schedule) fails there; ours computes the
    float32 step's value."""
    ours, theirs = _pair(case)
    for step in (tf.constant(4.0, tf.float64), tf.constant(4, tf.int64)):
        with pytest.raises((TypeError, tf.errors.InvalidArgumentError)):
            theirs(step)
        np.testing.assert_array_equal(ours(step).numpy(), theirs(tf.constant(4.0)).numpy())


def _sgd_trajectory(schedule, dtype):
    var = tf.Variable([1.0, -1.0], dtype=dtype)
    opt = keras.optimizers.legacy.SGD(schedule, momentum=0.5)

    @tf.function
    def step(grad):
        opt.apply_gradients([(grad, var)])

    trajectory = []
    for t in STEPS:
        step(tf.constant([0.5, -0.25 * t], dtype))
        trajectory.append(var.numpy().copy())
    return np.array(trajectory)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("case", ["triangular", "triangular2", "exponential_cycle"])
def test_driving_keras_sgd_equals_tfa(case, dtype):
    ours, theirs = _pair(case)
    np.testing.assert_array_equal(_sgd_trajectory(ours, dtype), _sgd_trajectory(theirs, dtype))


@pytest.mark.parametrize("case", sorted(CASES))
def test_tfa_config_builds_ours(case):
    ours, theirs = _pair(case)
    config = theirs.get_config()  # TFA's: no name; the generic one holds the function itself
    rebuilt = type(ours).from_config(config)
    if not case.startswith("generic"):  # ours cannot name a lambda in a config (tests/test_schedules.py)
        assert set(config) | {"name"} == set(ours.get_config()) - {"dtype"}
    for t in STEPS:
        np.testing.assert_array_equal(rebuilt(tf.constant(float(t))).numpy(), theirs(tf.constant(float(t))).numpy())


def test_tfa_h5_model_loads_with_ours(tmp_path):
    """A model compiled by TFA's user with a TFA schedule, saved as .h5, loads with ours mapped to TFA's
    name (what ``import optimizers`` does when TFA is absent) and trains on exactly as TFA's."""
    x, y = np.ones((8, 2), np.float32), np.zeros((8, 1), np.float32)
    keras.utils.set_random_seed(0)
    net = keras.Sequential([keras.layers.Dense(1, input_shape=(2,))])
    schedule = tfa.optimizers.Triangular2CyclicalLearningRate(0.01, 0.1, 2)
    net.compile(keras.optimizers.legacy.Adam(schedule), "mse")
    net.fit(x, y, batch_size=4, epochs=2, verbose=0)
    net.save(str(tmp_path / "tfa.h5"))
    loaded = keras.models.load_model(
        str(tmp_path / "tfa.h5"),
        custom_objects={"Addons>Triangular2CyclicalLearningRate": schedules.Triangular2CyclicalLearningRate})
    assert type(loaded.optimizer._get_hyper("learning_rate")) is schedules.Triangular2CyclicalLearningRate
    net.fit(x, y, batch_size=4, epochs=2, verbose=0)
    loaded.fit(x, y, batch_size=4, epochs=2, verbose=0)
    for a, b in zip(net.get_weights(), loaded.get_weights()):
        np.testing.assert_array_equal(a, b)
