"""The cyclical learning rates against the numpy reference (tests/catalogue/ref_schedules.py).

Runs on both stacks. Each schedule is evaluated over three cycles (every rising and
falling step, the peaks and the troughs) with the step given as a Python int, an int64
tensor, a float32 and a float64 tensor (what Keras 2 passes for float32 and float64
variables), eagerly and in a tf.function. Tolerance: conftest.TOLERANCE of the schedule's
dtype, with atol raised to 1e-6 for float32 (rates near a trough are differences of
rounded terms). Also: configs (TFA's keys plus ``name``) round-trip through
``from_config``, ``keras.optimizers.schedules.serialize/deserialize`` (both formats) and an
optimizer's config saved in ``.h5``/``.keras``; a user ``scale_fn`` round-trips when
registered, and otherwise copies in memory and gives a clear error when written to a file; bad
input is refused, naming the argument.
Live TFA parity: test_schedules_tfa.py.
"""

import numpy as np
import pytest
import tensorflow as tf

import optimizers
from catalogue import ref_schedules as ref
from optimizers.schedules import (
    CyclicalLearningRate,
    ExponentialCyclicalLearningRate,
    Triangular2CyclicalLearningRate,
    TriangularCyclicalLearningRate,
)

from conftest import TOLERANCE, keras

STEP_SIZE = 3
STEPS = range(0, 6 * STEP_SIZE + 2)  # three cycles and the start of a fourth


@keras.utils.register_keras_serializable(package="test_schedules")
def halving(u):
    """A registered user scale function (the paper's triangular2)."""
    return 1 / tf.pow(tf.cast(2.0, u.dtype), u - 1)


@keras.utils.register_keras_serializable(package="test_schedules")
class Power:
    """A registered callable object with a config."""

    def __init__(self, base):
        self.base = base

    def __call__(self, u):
        return tf.pow(tf.cast(self.base, u.dtype), u)

    def get_config(self):
        return {"base": self.base}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


# name: (make(lo, hi, step_size), reference policy, scale_mode, gamma)
CASES = {
    "triangular": (lambda lo, hi, s: TriangularCyclicalLearningRate(lo, hi, s), "triangular", "cycle", 1.0),
    "triangular_iterations": (lambda lo, hi, s: TriangularCyclicalLearningRate(lo, hi, s, scale_mode="iterations"),
                              "triangular", "iterations", 1.0),
    "triangular2": (lambda lo, hi, s: Triangular2CyclicalLearningRate(lo, hi, s), "triangular2", "cycle", 1.0),
    "exponential": (lambda lo, hi, s: ExponentialCyclicalLearningRate(lo, hi, s, gamma=0.75), "exp_range",
                    "iterations", 0.75),
    "exponential_cycle": (lambda lo, hi, s: ExponentialCyclicalLearningRate(lo, hi, s, scale_mode="cycle",
                                                                            gamma=0.5), "exp_range", "cycle", 0.5),
    "generic_registered_fn": (lambda lo, hi, s: CyclicalLearningRate(lo, hi, s, halving), "triangular2", "cycle",
                              1.0),
    "generic_object_iterations": (lambda lo, hi, s: CyclicalLearningRate(lo, hi, s, Power(0.75),
                                                                         scale_mode="iterations"),
                                  "exp_range", "iterations", 0.75),
}
STEP_KINDS = {
    "int": lambda t: t,
    "int64": lambda t: tf.constant(t, tf.int64),
    "float32": lambda t: tf.constant(t, tf.float32),
    "float64": lambda t: tf.constant(t, tf.float64),
}


def _tolerance(dtype):
    tol = dict(TOLERANCE[dtype])
    if dtype == tf.float32:
        tol["atol"] = 1e-6
    return tol


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("case", sorted(CASES))
def test_equals_numpy_reference(case, dtype, mode):
    make, policy, scale_mode, gamma = CASES[case]
    lo, hi = 0.1, 0.7  # a Python float makes a float32 schedule; float64 tensors a float64 one
    if dtype == tf.float64:
        schedule = make(tf.constant(lo, tf.float64), tf.constant(hi, tf.float64), tf.constant(STEP_SIZE, tf.float64))
    else:
        schedule = make(lo, hi, STEP_SIZE)
    call = tf.function(schedule) if mode == "function" else schedule
    for t in STEPS:
        expected = ref.cyclical(t, lo, hi, STEP_SIZE, policy, scale_mode, gamma, dtype.as_numpy_dtype)
        for kind, make_step in STEP_KINDS.items():
            got = call(make_step(t))
            assert got.dtype == dtype
            np.testing.assert_allclose(got.numpy(), expected, err_msg=f"step {t} as {kind}", **_tolerance(dtype))


def test_reference_shapes():
    """The cases take every shape of the policy: troughs at multiples of 2s, peaks at odd multiples of s,
    triangular2's peaks halve and exp_range's shrink by gamma ** t."""
    peaks = [ref.cyclical(t, 0.1, 0.7, 3, "triangular2") for t in (3, 9, 15)]
    np.testing.assert_allclose(np.array(peaks) - 0.1, [0.6, 0.3, 0.15], rtol=1e-6)
    assert ref.cyclical(6, 0.1, 0.7, 3, "triangular") == pytest.approx(0.1)
    assert ref.cyclical(3, 0.1, 0.7, 3, "exp_range", "iterations", 0.5) == pytest.approx(0.1 + 0.6 * 0.125)


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=lambda d: d.name)
def test_drives_an_optimizer_like_the_reference(dtype):
    """SGD with a triangular2 rate: each step moves the weight by lr(iterations) * g (Keras 2 passes the
    step in the variable's dtype; the schedule computes in float32 and the rate is cast)."""
    var = tf.Variable([1.0, -1.0], dtype=dtype)
    opt = optimizers.SGD(Triangular2CyclicalLearningRate(0.1, 0.7, STEP_SIZE))
    expected = var.numpy().astype(np.float64)
    grad = np.array([0.5, -0.25])
    for t in STEPS:
        opt.apply_gradients([(tf.constant(grad, dtype), var)])
        lr = np.float32(ref.cyclical(t, 0.1, 0.7, STEP_SIZE, "triangular2"))
        expected = expected - float(lr) * grad
        # the rate is a float32 computation (a Python-number schedule): its tolerance, for either variable
        np.testing.assert_allclose(var.numpy(), expected, err_msg=f"step {t}", **_tolerance(tf.float32))


# ------------------------------------------------------------------------------- configs
TFA_KEYS = {
    TriangularCyclicalLearningRate: ["initial_learning_rate", "maximal_learning_rate", "step_size", "scale_mode"],
    Triangular2CyclicalLearningRate: ["initial_learning_rate", "maximal_learning_rate", "step_size", "scale_mode"],
    ExponentialCyclicalLearningRate: ["initial_learning_rate", "maximal_learning_rate", "step_size", "scale_mode",
                                      "gamma"],
}


def _schedules():
    return [TriangularCyclicalLearningRate(0.01, 0.1, 5, name="tri"),
            Triangular2CyclicalLearningRate(0.01, 0.1, 5, scale_mode="iterations"),
            ExponentialCyclicalLearningRate(tf.constant(0.01, tf.float64), 0.1, 5.0, gamma=0.9),
            CyclicalLearningRate(0.01, 0.1, 5, halving, name="mine"),
            CyclicalLearningRate(0.01, 0.1, 5, Power(0.5), scale_mode="iterations")]


def _same_values(a, b):
    for t in STEPS:
        np.testing.assert_array_equal(a(t).numpy(), b(t).numpy())


@pytest.mark.parametrize("index", range(5))
def test_config_round_trips(index):
    schedule = _schedules()[index]
    config = schedule.get_config()
    assert set(TFA_KEYS.get(type(schedule), [])) | {"name"} <= set(config)
    assert config["name"] == schedule.name
    rebuilt = type(schedule).from_config(config)
    assert rebuilt.get_config() == config
    _same_values(schedule, rebuilt)
    for legacy in (False, True):
        serialized = keras.optimizers.schedules.serialize(schedule, use_legacy_format=legacy)
        restored = keras.optimizers.schedules.deserialize(serialized, use_legacy_format=legacy)
        assert type(restored) is type(schedule) and restored.get_config() == config
        _same_values(schedule, restored)


def test_registered_names():
    for cls in TFA_KEYS.keys() | {CyclicalLearningRate}:
        assert keras.utils.get_registered_name(cls) == f"optimizers>{cls.__name__}"
        assert keras.utils.get_registered_object(f"optimizers>{cls.__name__}") is cls


@pytest.mark.default_stack_only  # with TFA imported (TF 2.15), TFA's classes keep their names
def test_tfa_names_resolve_to_ours():
    for cls in TFA_KEYS.keys() | {CyclicalLearningRate}:
        assert optimizers.TFA_NAMES[f"Addons>{cls.__name__}"] is cls
        assert keras.utils.get_registered_object(f"Addons>{cls.__name__}") is cls
    config = {"class_name": "Addons>Triangular2CyclicalLearningRate",  # a TFA config: no name
              "config": {"initial_learning_rate": 0.01, "maximal_learning_rate": 0.1, "step_size": 5,
                         "scale_mode": "cycle"}}
    schedule = keras.optimizers.schedules.deserialize(config, use_legacy_format=True)
    assert type(schedule) is Triangular2CyclicalLearningRate and schedule.name == "Triangular2CyclicalLearningRate"


def _unregistered(c):
    return 1.0 / c


@pytest.mark.parametrize("scale_fn", [lambda c: 1.0 / c, _unregistered], ids=["lambda", "function"])
def test_an_unsaved_scale_fn_copies_in_memory_and_is_refused_in_a_file(scale_fn, tmp_path):
    # TFA's get_config() held the function: in-memory copies (of the schedule, of an optimizer) work.
    schedule = CyclicalLearningRate(0.01, 0.1, 2, scale_fn, name="clr")
    config = schedule.get_config()
    assert float(config["scale_fn"](tf.constant(4.0))) == float(scale_fn(tf.constant(4.0)))
    assert CyclicalLearningRate.from_config(config).scale_fn is scale_fn
    copied = optimizers.Adam.from_config(optimizers.Adam(schedule).get_config())
    rebuilt = copied._get_hyper("learning_rate")
    assert rebuilt.scale_fn is scale_fn and rebuilt.get_config() == config
    assert [float(rebuilt(t)) for t in range(8)] == [float(schedule(t)) for t in range(8)]
    # No file can name it: saving says so, with how to make it savable.
    net = keras.Sequential([keras.layers.Dense(1, input_shape=(2,))])
    net.compile(optimizers.Adam(schedule), "mse")
    net.fit(np.ones((4, 2), np.float32), np.zeros((4, 1), np.float32), verbose=0)
    for filename in ("m.h5", "m.keras"):
        with pytest.raises(ValueError, match=r"`scale_fn` cannot be written to a file.*register_keras_serializable"
                                             r".*Received: scale_fn=<function"):
            net.save(str(tmp_path / filename))


def test_user_scale_fn_rules():
    def unregistered(c):
        return 1.0

    # A file written by TFA holds a function's name ("<lambda>" for a lambda): it loads with
    # custom_objects, else a clear error.
    config = {"initial_learning_rate": 0.01, "maximal_learning_rate": 0.1, "step_size": 5, "scale_fn": "<lambda>",
              "scale_mode": "cycle"}
    with pytest.raises(ValueError, match=r"`scale_fn` names no registered function.*Received: scale_fn='<lambda>'"):
        CyclicalLearningRate.from_config(config)
    with keras.utils.custom_object_scope({"<lambda>": unregistered}):
        assert CyclicalLearningRate.from_config(config).scale_fn is unregistered
    # A function given by its own name in custom_objects also saves again under that name.
    with keras.utils.custom_object_scope({"unregistered": unregistered}):
        schedule = CyclicalLearningRate.from_config({**config, "scale_fn": "unregistered"})
        assert schedule.get_config()["scale_fn"] == "unregistered"
        assert CyclicalLearningRate.from_config(schedule.get_config()).scale_fn is unregistered


@pytest.mark.parametrize("optimizer", ["ours", "keras"])
@pytest.mark.parametrize("filename", ["m.h5", "m.keras"])
def test_inside_a_saved_optimizer(optimizer, filename, tmp_path):
    schedule = CyclicalLearningRate(0.01, 0.1, 2, halving, name="clr")
    opt = optimizers.Adam(schedule) if optimizer == "ours" else keras.optimizers.legacy.Adam(schedule)
    net = keras.Sequential([keras.layers.Dense(1, input_shape=(2,))])
    net.compile(opt, "mse")
    x, y = np.ones((8, 2), np.float32), np.zeros((8, 1), np.float32)
    net.fit(x, y, batch_size=4, epochs=2, verbose=0)
    net.save(str(tmp_path / filename))
    loaded = keras.models.load_model(str(tmp_path / filename))  # no custom_objects
    assert loaded.optimizer.get_config() == net.optimizer.get_config()
    restored = loaded.optimizer._get_hyper("learning_rate")
    assert type(restored) is CyclicalLearningRate and restored.scale_fn is halving and restored.name == "clr"
    if optimizer == "keras" and filename == "m.keras":
        return  # Keras 2 drops a built-in legacy optimizer's state (iterations, slots) in .keras files
    net.fit(x, y, batch_size=4, epochs=1, verbose=0)
    loaded.fit(x, y, batch_size=4, epochs=1, verbose=0)
    for a, b in zip(net.get_weights(), loaded.get_weights()):
        np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------------------- bad input
BAD = [
    (lambda: TriangularCyclicalLearningRate(0.01, 0.1, 0), ValueError, r"`step_size` must be a finite number > 0. "
                                                                       r"Received: step_size=0"),
    (lambda: TriangularCyclicalLearningRate(0.01, 0.1, -2.0), ValueError, r"Received: step_size=-2.0"),
    (lambda: TriangularCyclicalLearningRate(0.01, 0.1, float("inf")), ValueError, r"Received: step_size=inf"),
    (lambda: Triangular2CyclicalLearningRate(float("nan"), 0.1, 2), ValueError,
     r"`initial_learning_rate` must be a finite number >= 0. Received: initial_learning_rate=nan"),
    (lambda: Triangular2CyclicalLearningRate(0.01, float("inf"), 2), ValueError,
     r"Received: maximal_learning_rate=inf"),
    (lambda: Triangular2CyclicalLearningRate(-0.01, 0.1, 2), ValueError, r"Received: initial_learning_rate=-0.01"),
    (lambda: TriangularCyclicalLearningRate(tf.constant([0.1, 0.2]), 0.1, 2), TypeError,
     r"`initial_learning_rate` must be a number or a scalar float tensor"),
    (lambda: TriangularCyclicalLearningRate(lambda: 0.1, 0.1, 2), TypeError,
     r"`initial_learning_rate` must be a number or a scalar float tensor. Received: initial_learning_rate=<function"),
    (lambda: TriangularCyclicalLearningRate(0.01, "0.1", 2), TypeError, r"Received: maximal_learning_rate='0.1'"),
    (lambda: TriangularCyclicalLearningRate(0.01, 0.1, 2, scale_mode="epoch"), ValueError,
     r"`scale_mode` must be one of \('cycle', 'iterations'\). Received: scale_mode='epoch'"),
    (lambda: ExponentialCyclicalLearningRate(0.01, 0.1, 2, gamma=0.0), ValueError,
     r"`gamma` must be a finite number > 0. Received: gamma=0.0"),
    (lambda: ExponentialCyclicalLearningRate(0.01, 0.1, 2, gamma=float("nan")), ValueError, r"Received: gamma=nan"),
    (lambda: CyclicalLearningRate(0.01, 0.1, 2, scale_fn=2.0), TypeError,
     r"`scale_fn` must be a callable of one tensor. Received: scale_fn=2.0"),
    (lambda: TriangularCyclicalLearningRate(0.01, 0.1, 2, name=3), TypeError, r"`name` must be a string. "
                                                                              r"Received: name=3"),
]


@pytest.mark.parametrize("index", range(len(BAD)))
def test_bad_input_is_refused_naming_the_argument(index):
    make, error, message = BAD[index]
    with pytest.raises(error, match=message):
        make()
