"""LazyAdam, Yogi, AdaBelief, RectifiedAdam, Lion, Adan and AdEMAMix against numpy references
(tests/catalogue/ref_adamlike.py).

Runs on both stacks. Every case runs 8 steps on a kernel (dense, or sparse with a
repeated row per step and a row never touched) and a bias, eager and in a
tf.function, with and without XLA. Tolerance: conftest.TOLERANCE per dtype;
float16 against the float64 reference 1e-2. Lion is also compared live with
Keras 3's ``keras.optimizers.Lion`` on the default stack (Keras 3 is not
installed next to TF 2.15). Live TFA parity: test_adamlike_tfa.py.
"""

import re

import numpy as np
import pytest
import tensorflow as tf

from catalogue import ref_adamlike as ref
from catalogue.trajectories import numpy_gradient, trajectory
from optimizers.rules.adabelief import AdaBelief
from optimizers.rules.adan import Adan
from optimizers.rules.ademamix import AdEMAMix
from optimizers.rules.lazy_adam import LazyAdam
from optimizers.rules.lion import Lion
from optimizers.rules.rectified_adam import RectifiedAdam
from optimizers.rules.yogi import Yogi

from conftest import TOLERANCE, keras

CLASSES = {cls.__name__: cls for cls in (LazyAdam, Yogi, AdaBelief, RectifiedAdam, Lion, Adan, AdEMAMix)}
STEPS = 8
SHAPE = (5, 3)
STEP_INDICES = [[0, 2, 0], [1, 1, 3], [2, 0, 2], [3, 1, 1]] * 2  # a repeated row each step; row 4 never touched

# name: (class name, constructor arguments). Together they take every branch of every rule.
CASES = {
    "lazy_adam": ("LazyAdam", dict(learning_rate=0.1, beta_1=0.8, beta_2=0.95, epsilon=1e-3)),
    "lazy_adam_amsgrad": ("LazyAdam", dict(learning_rate=0.1, beta_1=0.8, beta_2=0.95, amsgrad=True)),
    "yogi_sign": ("Yogi", dict(learning_rate=0.1, beta1=0.8, beta2=0.95, epsilon=1e-2)),
    "yogi_tanh_l1_l2": ("Yogi", dict(learning_rate=0.1, beta1=0.8, beta2=0.95, l1_regularization_strength=0.5,
                                     l2_regularization_strength=0.2, initial_accumulator_value=0.1,
                                     activation="tanh")),
    "yogi_beta1_zero_l2": ("Yogi", dict(learning_rate=0.05, beta1=0.0, l2_regularization_strength=0.3)),
    "adabelief_rectified_wd": ("AdaBelief", dict(learning_rate=0.1, beta_1=0.8, beta_2=0.8, epsilon=1e-8,
                                                 weight_decay=0.05, exclude_from_weight_decay=["bias"])),
    "adabelief_plain_amsgrad": ("AdaBelief", dict(learning_rate=0.05, beta_1=0.8, beta_2=0.95, epsilon=1e-6,
                                                  rectify=False, amsgrad=True)),
    "adabelief_warmup": ("AdaBelief", dict(learning_rate=0.1, beta_2=0.8, epsilon=1e-6, weight_decay=0.01,
                                           amsgrad=True, sma_threshold=4.5, total_steps=6, warmup_proportion=0.3,
                                           min_lr=0.01)),
    "radam_rectified_wd": ("RectifiedAdam", dict(learning_rate=0.1, beta_1=0.8, beta_2=0.8, weight_decay=0.05,
                                                 exclude_from_weight_decay=["bias"])),
    "radam_warmup_amsgrad": ("RectifiedAdam", dict(learning_rate=0.1, beta_2=0.8, epsilon=1e-5, amsgrad=True,
                                                   sma_threshold=4.5, total_steps=6, warmup_proportion=0.3,
                                                   min_lr=0.01)),
    "lion": ("Lion", dict(learning_rate=0.1, beta_1=0.8, beta_2=0.95)),
    "lion_wd": ("Lion", dict(learning_rate=0.1, beta_1=0.8, beta_2=0.95, weight_decay=0.5,
                             exclude_from_weight_decay=["bias"])),
    "lion_wd_unscaled": ("Lion", dict(learning_rate=0.1, weight_decay=0.05, scale_weight_decay_by_lr=False)),
    "adan": ("Adan", dict(learning_rate=0.1)),
    "adan_wd": ("Adan", dict(learning_rate=0.1, beta_1=0.8, beta_2=0.7, beta_3=0.9, epsilon=1e-6, weight_decay=0.5,
                             exclude_from_weight_decay=["bias"])),
    "adan_wd_unscaled": ("Adan", dict(learning_rate=0.05, weight_decay=0.05, scale_weight_decay_by_lr=False)),
    "ademamix": ("AdEMAMix", dict(learning_rate=0.1, beta_3=0.99)),
    # Both warm-ups end within the steps (alpha's at 3, beta_3's at 6), the decay on the kernel only.
    "ademamix_warmups_wd": ("AdEMAMix", dict(learning_rate=0.1, beta_1=0.5, beta_2=0.9, beta_3=0.9, alpha=8.0,
                                             alpha_warmup=3, beta_3_warmup=6, weight_decay=0.1,
                                             epsilon=1e-6, exclude_from_weight_decay=["bias"])),
}
FLOAT16_CASES = ["lazy_adam_amsgrad", "yogi_sign", "adabelief_plain_amsgrad", "radam_rectified_wd", "lion_wd", "adan_wd",
                 "ademamix_warmups_wd"]


def gradients(sparse, dtype, seed=0):
    """``STEPS`` pairs (kernel gradient, bias gradient)."""
    rng = np.random.RandomState(seed)
    np_dtype = dtype.as_numpy_dtype
    out = []
    for indices in STEP_INDICES:
        if sparse:
            values = tf.constant(rng.randn(len(indices), SHAPE[1]).astype(np_dtype))
            kernel = tf.IndexedSlices(values, tf.constant(indices), tf.constant(SHAPE))
        else:
            kernel = tf.constant(rng.randn(*SHAPE).astype(np_dtype))
        out.append((kernel, tf.constant(rng.randn(SHAPE[1]).astype(np_dtype))))
    return out


def make_variables(dtype):
    return (tf.Variable(np.linspace(-1, 1, 15).reshape(SHAPE), dtype=dtype, name="kernel"),
            tf.Variable([0.5, -0.5, 1.0], dtype=dtype, name="bias"))


def numpy_trajectory(cls_name, kwargs, grads, dtype):
    rule = ref.rule_for(cls_name, kwargs)
    excluded = kwargs.get("exclude_from_weight_decay") or []
    params = {v.name.split(":")[0]: v.numpy().astype(np.float64) for v in make_variables(dtype)}
    slots = {name: rule.initial_slots(p) for name, p in params.items()}
    out = []
    for t, (g, b) in enumerate(grads, start=1):
        for name, grad in (("kernel", g), ("bias", b)):
            grad, rows = numpy_gradient(grad, SHAPE)
            decayed = not any(re.search(p, name) for p in excluded)
            params[name], slots[name] = rule.step(params[name], grad, rows, slots[name], t, decayed)
        out.append((params["kernel"], params["bias"]))
    return out


def assert_trajectories(ours, expected, dtype, what, tol=None):
    tol = tol or TOLERANCE[dtype]
    for step, ((k, b), (ek, eb)) in enumerate(zip(ours, expected), start=1):
        np.testing.assert_allclose(k, ek, err_msg=f"kernel vs {what}, step {step}", **tol)
        np.testing.assert_allclose(b, eb, err_msg=f"bias vs {what}, step {step}", **tol)


@pytest.mark.parametrize("mode,jit_compile", [("eager", False), ("eager", True), ("function", False),
                                              ("function", True)], ids=["eager", "eager-xla", "function",
                                                                        "function-xla"])
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_equals_numpy_reference(case, sparse, dtype, mode, jit_compile):
    cls_name, kwargs = CASES[case]
    grads = gradients(sparse, dtype)
    ours = trajectory(CLASSES[cls_name](jit_compile=jit_compile, **kwargs), grads, make_variables(dtype), mode)
    assert ours[-1][0].dtype == dtype.as_numpy_dtype
    assert_trajectories(ours, numpy_trajectory(cls_name, kwargs, grads, dtype), dtype, "numpy")


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("case", FLOAT16_CASES)
def test_float16_equals_numpy_reference(case, sparse):
    cls_name, kwargs = CASES[case]
    grads = gradients(sparse, tf.float16)
    ours = trajectory(CLASSES[cls_name](**kwargs), grads, make_variables(tf.float16), "function")
    assert ours[-1][0].dtype == np.float16
    assert_trajectories(ours, numpy_trajectory(cls_name, kwargs, grads, tf.float16), tf.float16, "numpy",
                        tol=dict(rtol=1e-2, atol=1e-2))


def test_cases_take_every_branch():
    """The rectified and the momentum-only steps, and the three phases of the warm-up, all occur within STEPS."""
    for case in ("adabelief_rectified_wd", "adabelief_warmup", "radam_rectified_wd", "radam_warmup_amsgrad"):
        cls_name, kwargs = CASES[case]
        rule = ref.rule_for(cls_name, kwargs)
        assert {rule.branch(t) for t in range(1, STEPS + 1)} == {False, True}, case
    total, proportion = 6, 0.3  # the warm-up cases: rise at step 1, fall over steps 2-6, min_lr at steps 7-8
    assert [t <= total * proportion for t in range(1, STEPS + 1)].count(True) == 1
    assert ref.warmup_lr(0.1, 7, total, ref.f32(proportion), 0.01) == pytest.approx(0.01)
    # Yogi's l1 step sets weights to exactly zero in its case
    kernel = trajectory(Yogi(**CASES["yogi_tanh_l1_l2"][1]), gradients(False, tf.float32),
                        make_variables(tf.float32))[-1][0]
    assert np.any(kernel == 0.0)


@pytest.mark.parametrize("case", sorted(CASES))
def test_config_round_trip_and_same_steps(case):
    cls_name, kwargs = CASES[case]
    cls = CLASSES[cls_name]
    optimizer = cls(jit_compile=False, **kwargs)
    config = optimizer.get_config()
    rebuilt = cls.from_config(config)
    assert rebuilt.get_config() == config
    grads = gradients(True, tf.float32)
    ours_run = trajectory(rebuilt, grads, make_variables(tf.float32))
    for ours, theirs in zip(ours_run, trajectory(optimizer, grads, make_variables(tf.float32))):
        np.testing.assert_array_equal(ours[0], theirs[0])
        np.testing.assert_array_equal(ours[1], theirs[1])


@pytest.mark.parametrize("cls", list(CLASSES.values()), ids=lambda c: c.__name__)
def test_config_round_trip_with_schedules(cls):
    kwargs = dict(learning_rate=keras.optimizers.schedules.ExponentialDecay(0.1, 2, 0.5), clipnorm=1.0)
    if cls in (AdaBelief, RectifiedAdam, Lion, Adan, AdEMAMix):
        kwargs["weight_decay"] = keras.optimizers.schedules.PiecewiseConstantDecay([2], [0.1, 0.01])
    optimizer = cls(**kwargs)
    config = optimizer.get_config()
    assert cls.from_config(config).get_config() == config
    assert config["name"] == cls.__name__


def test_yogi_takes_tfa_argument_names_over_its_hyperparameters():
    optimizer = Yogi(beta1=0.5, beta2=0.75)
    assert (optimizer.beta1, optimizer.beta2) == (0.5, 0.75)
    optimizer.beta1 = 0.25
    assert optimizer.get_config()["beta1"] == 0.25 and "beta_1" not in optimizer.get_config()
    with pytest.raises(ValueError, match=r"beta_1.*Received: beta_1=1\.5"):
        optimizer.beta1 = 1.5


@pytest.mark.parametrize("cls", [AdaBelief, RectifiedAdam], ids=lambda c: c.__name__)
def test_sma_threshold_below_4_is_refused_also_when_set_later(cls):
    with pytest.raises(ValueError, match=r"sma_threshold=3\.0.*square root of a negative"):
        cls(sma_threshold=3.0)
    optimizer = cls(sma_threshold=4.0)  # r_t = 0 at rho_t = 4: allowed
    with pytest.raises(ValueError, match=r"Received: sma_threshold=3\.5"):
        optimizer.sma_threshold = 3.5
    var = tf.Variable([1.0, 2.0])
    optimizer = cls(sma_threshold=lambda: 3.0)  # a callable is checked at each step, before anything changes
    with pytest.raises(ValueError, match=r"sma_threshold.*4\.0.*3\.0"):
        optimizer.apply_gradients([(tf.constant([0.5, 0.5]), var)])
    np.testing.assert_array_equal(var.numpy(), [1.0, 2.0])


BAD_INPUT = [
    (LazyAdam, dict(lazy=False), TypeError, "lazy=False"),
    (LazyAdam, dict(amsgrad="yes"), TypeError, "amsgrad='yes'"),
    (LazyAdam, dict(beta_1=1.0), ValueError, "beta_1=1.0"),
    (Yogi, dict(beta1=1.0), ValueError, "beta1=1.0"),
    (Yogi, dict(beta2=-0.1), ValueError, "beta2=-0.1"),
    (Yogi, dict(activation="relu"), ValueError, "activation='relu'"),
    (Yogi, dict(initial_accumulator_value=-1.0), ValueError, "initial_accumulator_value=-1.0"),
    (Yogi, dict(l1_regularization_strength=-0.1), ValueError, "l1_regularization_strength=-0.1"),
    (Yogi, dict(epsilon="small"), TypeError, "epsilon='small'"),
    (AdaBelief, dict(epsilon=-1e-7), ValueError, "epsilon=-1e-07"),
    (AdaBelief, dict(rectify=1), TypeError, "rectify=1"),
    (AdaBelief, dict(total_steps=2.5), ValueError, "total_steps=2.5"),
    (AdaBelief, dict(total_steps=-1), ValueError, "total_steps=-1"),
    (AdaBelief, dict(weight_decay=None), TypeError, "weight_decay=None"),
    (AdaBelief, dict(weight_decay=0.1, scale_weight_decay_by_lr=True), ValueError, "scale_weight_decay_by_lr=True"),
    (RectifiedAdam, dict(epsilon=tf.constant(1e-7)), TypeError, "epsilon=<tf.Tensor"),
    (RectifiedAdam, dict(warmup_proportion=1.5), ValueError, "warmup_proportion=1.5"),
    (RectifiedAdam, dict(min_lr=-1.0), ValueError, "min_lr=-1.0"),
    (RectifiedAdam, dict(total_steps=True), ValueError, "total_steps=True"),
    (Lion, dict(beta_1=0.0), ValueError, "beta_1=0.0"),
    (Lion, dict(beta_2=1.5), ValueError, "beta_2=1.5"),
    (Lion, dict(learning_rate=-1.0), ValueError, "learning_rate=-1.0"),
    (Adan, dict(beta_3=1.0), ValueError, "beta_3=1.0"),
    (Adan, dict(epsilon=0.0), ValueError, "epsilon=0.0"),
    (AdEMAMix, dict(alpha=-1.0), ValueError, "alpha=-1.0"),
    (AdEMAMix, dict(alpha_warmup=0), ValueError, "alpha_warmup=0"),
    (AdEMAMix, dict(beta_3_warmup=2.5), ValueError, "beta_3_warmup=2.5"),
]


@pytest.mark.parametrize("cls,kwargs,error,received", BAD_INPUT,
                         ids=[f"{c.__name__}-{next(iter(k))}-{i}" for i, (c, k, _, _) in enumerate(BAD_INPUT)])
def test_bad_input_names_the_argument_and_repeats_the_value(cls, kwargs, error, received):
    with pytest.raises(error, match=re.escape(received)):
        cls(**kwargs)


@pytest.mark.default_stack_only
@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("case", ["lion", "lion_wd"])
def test_lion_equals_keras3_lion(case, sparse, dtype, mode):
    import keras as keras3  # Keras 3 itself, not the tf_keras the library runs on

    assert keras3.__version__.startswith("3."), keras3.__version__
    kwargs = dict(CASES[case][1])
    excluded = kwargs.pop("exclude_from_weight_decay", None)
    grads = gradients(sparse, dtype)
    ours = trajectory(Lion(**CASES[case][1]), grads, make_variables(dtype), mode)
    theirs_opt = keras3.optimizers.Lion(**kwargs)
    if excluded:
        theirs_opt.exclude_from_weight_decay(var_names=excluded)
    kernel, bias = (keras3.Variable(v.numpy(), dtype=dtype.name, name=v.name.split(":")[0])
                    for v in make_variables(dtype))
    theirs_opt.build([kernel, bias])

    def step(g, b):  # Keras 3 gets the dense gradient: our sparse step promises the dense step's numbers
        theirs_opt.apply_gradients([(tf.convert_to_tensor(g), kernel), (b, bias)])

    step = tf.function(step) if mode == "function" else step
    theirs = []
    for g, b in grads:
        step(g, b)
        theirs.append((kernel.numpy().copy(), bias.numpy().copy()))
    assert_trajectories(ours, theirs, dtype, "Keras 3 Lion")
