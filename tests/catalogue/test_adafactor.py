"""Adafactor against its numpy reference (tests/catalogue/ref_adafactor.py) and, on the default
stack, live against Keras 3's ``keras.optimizers.Adafactor``.

Every reference case runs 6 steps on three variables at once: a rank-2 kernel and a rank-3
kernel (factored second moments; dense gradients, or sparse ones with a repeated row per step
and a row never touched) and a rank-1 bias (full second moment). Tolerance: conftest.TOLERANCE
per dtype. Live Keras 3 parity at TOLERANCE too, in float32 and float64; in float64 with
hyperparameters exact in float32 (``FLOAT32_EXACT``): Keras 3 converts its Python-float constants
(``beta_2_decay=-0.8``, ``epsilon_1=1e-30``...) straight to float64, where this library, as Keras
2, keeps hyperparameters in float32 variables, a relative difference of order 1e-8 that the steps
carry into the weights.
"""

import re

import numpy as np
import pytest
import tensorflow as tf

import slots as slots_lib
from catalogue import ref_adafactor as ref
from catalogue.trajectories import numpy_gradient
from optimizers.rules.adafactor import Adafactor

import reference
from conftest import TOLERANCE, keras

STEPS = 6
SHAPES = {"kernel": (5, 3), "conv": (4, 2, 3), "bias": (3,)}
STEP_INDICES = [[0, 2, 0], [1, 1, 3], [2, 0, 2]] * 2  # a repeated row each step; the last row never touched


def _schedule():  # every value exact in float32 (see tests/reference.py ExponentialDecay)
    return keras.optimizers.schedules.ExponentialDecay(0.2, decay_steps=2, decay_rate=0.5, staircase=True)


# name: constructor arguments. Together they take every branch (test_cases_take_every_branch).
CASES = {
    "default": dict(),
    "clipped": dict(learning_rate=0.1, clip_threshold=0.5),
    "absolute_step": dict(learning_rate=0.05, relative_step=False, beta_2_decay=-0.5, epsilon_1=1e-3),
    "capped_floored": dict(learning_rate=1.0, epsilon_2=2.0, clip_threshold=2.0),
    "weight_decay": dict(learning_rate=0.1, weight_decay=0.5, exclude_from_weight_decay=["bias"]),
    "schedule_unscaled_decay": dict(learning_rate=_schedule(), weight_decay=0.05, scale_weight_decay_by_lr=False),
}
# All four executions for these; eager without XLA and tf.function with XLA for the others.
ALL_EXECUTIONS = ("default", "weight_decay")
EXECUTIONS = {"eager": ("eager", False), "eager-xla": ("eager", True), "function": ("function", False),
              "function-xla": ("function", True)}


def reference_rule(kwargs):
    kwargs = dict(kwargs)
    lr = kwargs.pop("learning_rate", 0.001)
    if not isinstance(lr, float):
        lr = reference.ExponentialDecay(0.2, decay_steps=2, decay_rate=0.5, staircase=True)
    kwargs.pop("exclude_from_weight_decay", None)
    scale = kwargs.pop("scale_weight_decay_by_lr", True)
    return ref.AdafactorRule(lr, scale_by_lr=scale, **kwargs)


def gradients(sparse, dtype, seed=0, scale=1.0):
    """``STEPS`` dicts ``{name: gradient}`` (kernel and conv sparse when ``sparse``)."""
    rng = np.random.RandomState(seed)
    np_dtype = dtype.as_numpy_dtype
    out = []
    for indices in STEP_INDICES:
        step = {}
        for name, shape in SHAPES.items():
            if sparse and name != "bias":
                values = tf.constant((scale * rng.randn(len(indices), *shape[1:])).astype(np_dtype))
                step[name] = tf.IndexedSlices(values, tf.constant(indices), tf.constant(shape))
            else:
                step[name] = tf.constant((scale * rng.randn(*shape)).astype(np_dtype))
        out.append(step)
    return out


def initial_values(dtype):
    return {name: np.linspace(-1, 1, int(np.prod(shape))).reshape(shape).astype(dtype.as_numpy_dtype) + 0.1
            for name, shape in SHAPES.items()}


def trajectory(optimizer, grads, dtype, mode="eager"):
    """``{name: value}`` after each step."""
    variables = {name: tf.Variable(value, name=name) for name, value in initial_values(dtype).items()}

    def step(g):
        optimizer.apply_gradients([(g[name], variables[name]) for name in SHAPES])

    if mode == "function":
        step = tf.function(step)
    out = []
    for g in grads:
        step(g)
        out.append({name: v.numpy().copy() for name, v in variables.items()})
    return out, variables


def numpy_trajectory(kwargs, grads, dtype, trace=None):
    rule = reference_rule(kwargs)
    excluded = kwargs.get("exclude_from_weight_decay") or []
    params = {name: value.astype(np.float64) for name, value in initial_values(dtype).items()}
    slots = {name: rule.initial_slots(p) for name, p in params.items()}
    out = []
    for iterations, g in enumerate(grads):
        for name, grad in g.items():
            grad, rows = numpy_gradient(grad, SHAPES[name])
            decayed = not any(re.search(p, name) for p in excluded)
            params[name], slots[name] = rule.step(params[name], grad, rows, slots[name], iterations,
                                                  dtype.as_numpy_dtype, decayed=decayed, trace=trace)
        out.append(dict(params))
    return out


def assert_trajectories(ours, expected, dtype, what, tol=None):
    tol = tol or TOLERANCE[dtype]
    for step, (got, want) in enumerate(zip(ours, expected), start=1):
        for name in SHAPES:
            np.testing.assert_allclose(got[name], want[name], err_msg=f"{name} vs {what}, step {step}", **tol)


def _params():
    out = []
    for case in sorted(CASES):
        for execution in EXECUTIONS:
            if case in ALL_EXECUTIONS or execution in ("eager", "function-xla"):
                out.append(pytest.param(case, execution, id=f"{case}-{execution}"))
    return out


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("case,execution", _params())
def test_equals_numpy_reference(case, execution, sparse, dtype):
    mode, jit_compile = EXECUTIONS[execution]
    grads = gradients(sparse, dtype)
    ours, _ = trajectory(Adafactor(jit_compile=jit_compile, **CASES[case]), grads, dtype, mode)
    assert all(v.dtype == dtype.as_numpy_dtype for v in ours[-1].values())
    assert_trajectories(ours, numpy_trajectory(CASES[case], grads, dtype), dtype, "numpy")


def test_cases_take_every_branch():
    """Update clipping on and off, the 1/sqrt(t) cap on and off, and the epsilon_2 floor occur."""
    seen = {}
    for case in ("default", "clipped", "capped_floored"):
        trace = []
        numpy_trajectory(CASES[case], gradients(False, tf.float64), tf.float64, trace)
        seen[case] = {key: {t[key] for t in trace} for key in ("clipped", "capped", "floored")}
    assert seen["default"]["clipped"] == {True, False} and seen["clipped"]["clipped"] == {True}
    assert seen["default"]["capped"] == {False} and seen["capped_floored"]["capped"] == {True, False}
    assert seen["default"]["floored"] == {False} and seen["capped_floored"]["floored"] == {True, False}


def test_slots_depend_on_rank_and_cost_rows_plus_columns():
    _, variables = trajectory(opt := Adafactor(), gradients(False, tf.float32)[:1], tf.float32)
    shapes = {(name, slot): opt.get_slot(variables[name], slot).shape.as_list()
              for name, slot_names in (("kernel", ("v_row", "v_col")), ("conv", ("v_row", "v_col")), ("bias", ("v",)))
              for slot in slot_names}
    assert shapes == {("kernel", "v_row"): [5], ("kernel", "v_col"): [3], ("conv", "v_row"): [4, 2],
                      ("conv", "v_col"): [4, 3], ("bias", "v"): [3]}
    assert slots_lib.slot_memory(opt) == {"v": 3 * 4, "v_col": (3 + 12) * 4, "v_row": (5 + 8) * 4}


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("scale", [1.0, 1e-5], ids=["unit", "tiny"])
def test_float16_is_stepped_in_float32(sparse, scale):
    """Tiny gradients (g**2 below float16's smallest number, epsilon_1 = 1e-30 too) still give
    finite float32 steps, equal to the reference's float32 step stored in float16."""
    kwargs = dict(learning_rate=0.1, weight_decay=0.1)
    grads = gradients(sparse, tf.float16, scale=scale)
    ours, variables = trajectory(Adafactor(**kwargs), grads, tf.float16, "function")
    assert ours[-1]["kernel"].dtype == np.float16
    assert all(np.all(np.isfinite(v)) for step in ours for v in step.values())
    assert_trajectories(ours, numpy_trajectory(kwargs, grads, tf.float16), tf.float16, "numpy")


@pytest.mark.parametrize("case", sorted(CASES))
def test_config_round_trip_and_same_steps(case):
    optimizer = Adafactor(jit_compile=False, **CASES[case])
    config = optimizer.get_config()
    rebuilt = Adafactor.from_config(config)
    assert rebuilt.get_config() == config
    assert set(config) >= {"learning_rate", "beta_2_decay", "epsilon_1", "epsilon_2", "clip_threshold",
                           "relative_step", "name"}
    grads = gradients(True, tf.float32)[:3]
    for ours, theirs in zip(trajectory(rebuilt, grads, tf.float32)[0], trajectory(optimizer, grads, tf.float32)[0]):
        for name in SHAPES:
            np.testing.assert_array_equal(ours[name], theirs[name])
    trained = optimizer.get_config()
    assert Adafactor.from_config(trained).get_config() == trained


@pytest.mark.parametrize("jit_compile", [False, True])
def test_jit_compile_defaults_to_false_and_round_trips(jit_compile):
    assert Adafactor().jit_compile is False  # measured faster on CPU (benchmarks/bench_adafactor.py)
    config = Adafactor(jit_compile=jit_compile).get_config()
    assert config["jit_compile"] is jit_compile
    assert Adafactor.from_config(config).jit_compile is jit_compile


def _model(seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((6, 2)), keras.layers.Conv1D(3, 2, name="conv"), keras.layers.Flatten(),
                             keras.layers.Dense(2, name="dense")])


DATA = (np.random.RandomState(1).randn(16, 6, 2).astype("float32"), np.random.RandomState(2).randn(16, 2).astype("float32"))


def _slot_values(opt, model):
    out = {}
    for var in model.trainable_variables:
        for slot in ("v_row", "v_col", "v"):
            try:
                out[f"{var.name}/{slot}"] = opt.get_slot(var, slot).numpy()
            except KeyError:
                pass
    return out


@pytest.mark.parametrize("fmt", ["keras", "checkpoint"])
def test_save_load_keeps_slots_and_training_continues_identically(fmt, tmp_path):
    model = _model()
    model.compile(Adafactor(learning_rate=0.05, weight_decay=0.01), "mse")
    model.fit(*DATA, batch_size=4, epochs=1, shuffle=False, verbose=0)
    if fmt == "checkpoint":
        path = tf.train.Checkpoint(model=model, optimizer=model.optimizer).save(str(tmp_path / "ckpt"))
        restored = keras.models.clone_model(model)
        restored.compile(Adafactor(learning_rate=0.05, weight_decay=0.01), "mse")
        tf.train.Checkpoint(model=restored, optimizer=restored.optimizer).restore(path)
    else:
        model.save(str(tmp_path / "m.keras"))
        restored = keras.models.load_model(str(tmp_path / "m.keras"))  # no custom_objects: registered
        assert type(restored.optimizer) is Adafactor
        assert restored.optimizer.get_config() == model.optimizer.get_config()
    # The slots are taken over at the first step (a .keras file's optimizer state waits for it); the
    # continued training is equal only if they were: a fresh optimizer would start them at zero.
    for copy in (model, restored):
        copy.fit(*DATA, batch_size=4, epochs=1, shuffle=False, verbose=0)
    assert int(restored.optimizer.iterations.numpy()) == int(model.optimizer.iterations.numpy()) == 8
    for a, b in zip(model.get_weights(), restored.get_weights()):
        np.testing.assert_array_equal(a, b)
    want, got = _slot_values(model.optimizer, model), _slot_values(restored.optimizer, restored)
    assert sorted(got) == sorted(want) and len(want) == 6  # conv and dense kernels: 2 each; biases: 1
    for key in want:
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)


BAD_INPUT = [
    (dict(learning_rate=-1.0), ValueError, "learning_rate=-1.0"),
    (dict(beta_2_decay=0.5), ValueError, "beta_2_decay=0.5"),
    (dict(epsilon_1=-1e-30), ValueError, "epsilon_1=-1e-30"),
    (dict(epsilon_2=-0.1), ValueError, "epsilon_2=-0.1"),
    (dict(clip_threshold=0.0), ValueError, "clip_threshold=0.0"),
    (dict(clip_threshold="one"), TypeError, "clip_threshold='one'"),
    (dict(relative_step="yes"), TypeError, "relative_step='yes'"),
    (dict(use_ema=True), TypeError, "use_ema=True"),  # Keras 3's EMA: use optimizers.MovingAverage
    (dict(weight_decay=-0.1), ValueError, "weight_decay=-0.1"),
]


@pytest.mark.parametrize("kwargs,error,received", BAD_INPUT, ids=[next(iter(k)) for k, _, _ in BAD_INPUT])
def test_bad_input_names_the_argument_and_repeats_the_value(kwargs, error, received):
    with pytest.raises(error, match=re.escape(received)):
        Adafactor(**kwargs)


def test_bad_values_later_leave_the_state_unchanged():
    optimizer = Adafactor(learning_rate=0.1)
    with pytest.raises(ValueError, match=r"Received: clip_threshold=-1\.0"):
        optimizer.clip_threshold = -1.0
    var = tf.Variable([[1.0, 2.0], [3.0, 4.0]])
    optimizer.apply_gradients([(tf.ones([2, 2]), var)])
    with pytest.raises(ValueError, match=r"relative_step.*Received: relative_step=False"):
        optimizer.relative_step = False  # the step is built with it
    before = var.numpy().copy()
    optimizer.beta_2_decay = lambda: 0.5  # a callable is checked at each step, before anything changes
    with pytest.raises(ValueError, match=r"beta_2_decay.*0\.5"):
        optimizer.apply_gradients([(tf.ones([2, 2]), var)])
    np.testing.assert_array_equal(var.numpy(), before)
    assert int(optimizer.iterations.numpy()) == 1


# ------------------------------------------------------------------------- live Keras 3 parity
def _keras3():
    import keras as keras3  # Keras 3 itself, not the tf_keras the library runs on

    assert keras3.__version__.startswith("3."), keras3.__version__
    return keras3


def keras3_trajectory(keras3, kwargs, grads, dtype, mode):
    kwargs = dict(kwargs)
    excluded = kwargs.pop("exclude_from_weight_decay", None)
    theirs = keras3.optimizers.Adafactor(**kwargs)
    if excluded:
        theirs.exclude_from_weight_decay(var_names=excluded)
    variables = {name: keras3.Variable(value, dtype=dtype.name, name=name)
                 for name, value in initial_values(dtype).items()}
    theirs.build(list(variables.values()))

    def step(g):  # Keras 3 gets the dense gradient: our sparse step promises the dense step's numbers
        theirs.apply_gradients([(tf.convert_to_tensor(g[name]), variables[name]) for name in SHAPES])

    step = tf.function(step) if mode == "function" else step
    out = []
    for g in grads:
        step(g)
        out.append({name: v.numpy().copy() for name, v in variables.items()})
    return out


KERAS3_CASES = ["default", "clipped", "capped_floored", "weight_decay"]
FLOAT32_EXACT = dict(beta_2_decay=-0.75, epsilon_1=2.0**-100, epsilon_2=2.0**-10)  # see the module docstring


# Every case dense in float32 (eager) and float64 (tf.function); sparse once per dtype (the
# reference tests already show that a sparse step is the dense one).
KERAS3_PARAMS = ([(case, False, tf.float32, "eager") for case in KERAS3_CASES]
                 + [(case, False, tf.float64, "function") for case in KERAS3_CASES]
                 + [("weight_decay", True, tf.float32, "function"), ("default", True, tf.float64, "eager")])


@pytest.mark.default_stack_only
@pytest.mark.parametrize("case,sparse,dtype,mode", KERAS3_PARAMS,
                         ids=[f"{c}-{'sparse' if s else 'dense'}-{d.name}-{m}" for c, s, d, m in KERAS3_PARAMS])
def test_equals_keras3_adafactor(case, sparse, dtype, mode):
    keras3 = _keras3()
    kwargs = CASES[case] if dtype == tf.float32 else {**FLOAT32_EXACT, **CASES[case]}
    grads = gradients(sparse, dtype)
    ours, _ = trajectory(Adafactor(**kwargs), grads, dtype, mode)
    assert_trajectories(ours, keras3_trajectory(keras3, kwargs, grads, dtype, mode), dtype, "Keras 3")


@pytest.mark.default_stack_only
def test_keras3_ignores_relative_step_false_and_ours_takes_the_absolute_step():
    """Keras 3's ``relative_step=False`` gives its relative step (our default); ours gives the
    paper's absolute step ``alpha_t = lr``, as the reference does."""
    keras3 = _keras3()
    kwargs = dict(learning_rate=0.1, relative_step=False)
    grads = gradients(False, tf.float32)
    theirs = keras3_trajectory(keras3, kwargs, grads, tf.float32, "eager")
    relative, _ = trajectory(Adafactor(learning_rate=0.1), grads, tf.float32)
    absolute, _ = trajectory(Adafactor(**kwargs), grads, tf.float32)
    assert_trajectories(relative, theirs, tf.float32, "Keras 3 with relative_step=False")
    assert_trajectories(absolute, numpy_trajectory(kwargs, grads, tf.float32), tf.float32, "numpy")
    assert not np.allclose(absolute[-1]["kernel"], relative[-1]["kernel"], rtol=1e-3)
