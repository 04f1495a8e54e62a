"""LAMB, NovoGrad, COCOB, ConditionalGradient and ProximalAdagrad against numpy
references (tests/catalogue/ref_layerwise.py).

Runs on both stacks. Every case runs 4 steps on a kernel (dense, or sparse with
a repeated row per step and a row never touched) and a bias: float32 and
float64, eager and in a tf.function, with and without XLA. Tolerance:
conftest.TOLERANCE per dtype. Live TFA parity: test_layerwise_tfa.py.
"""

import contextlib
import json
import warnings

import numpy as np
import pytest
import tensorflow as tf

from catalogue import ref_layerwise as ref
from catalogue.trajectories import trajectory
from optimizers.rules.cocob import COCOB
from optimizers.rules.conditional_gradient import ConditionalGradient
from optimizers.rules.lamb import LAMB
from optimizers.rules.novograd import NovoGrad
from optimizers.rules.proximal_adagrad import ProximalAdagrad

from conftest import TOLERANCE, keras

CLASSES = {cls.__name__: cls for cls in (LAMB, NovoGrad, COCOB, ConditionalGradient, ProximalAdagrad)}
SHAPE = (5, 3)
STEP_INDICES = [[0, 2, 0], [1, 1, 3], [2, 0, 2], [3, 1, 1]]  # a repeated row each step; row 4 never touched


def _piecewise():  # iterations 0..2: 0.9, then 0.5 (both in the reference and in Keras)
    return keras.optimizers.schedules.PiecewiseConstantDecay([2], [0.9, 0.5])


def _piecewise_ref(iterations):
    return 0.9 if iterations <= 2 else 0.5


# name: (class name, constructor arguments, reference arguments (None: the same)).
# Together they take every branch of every rule.
CASES = {
    "lamb": ("LAMB", dict(learning_rate=0.1, beta_1=0.8, beta_2=0.95, epsilon=1e-3, weight_decay=0.05,
                          exclude_from_weight_decay=["bias"]), None),  # the bias: neither decayed nor adapted
    "lamb_split": ("LAMB", dict(learning_rate=0.05, beta_1=0.5, weight_decay=0.1, exclude_from_weight_decay=["bias"],
                                exclude_from_layer_adaptation=["kernel"]), None),
    "lamb_defaults": ("LAMB", dict(learning_rate=0.1), None),
    # 0 is read as keras.backend.epsilon(), as TFA meant to (its LAMB raises on 0) and as NovoGrad's and ConditionalGradient's
    "lamb_epsilon_zero": ("LAMB", dict(learning_rate=0.1, epsilon=0.0, weight_decay=0.01),
                          dict(learning_rate=0.1, epsilon=1e-7, weight_decay=0.01)),
    "novograd_decay": ("NovoGrad", dict(learning_rate=0.1, beta_1=0.8, beta_2=0.95, weight_decay=0.05), None),
    "novograd_averaging_amsgrad": ("NovoGrad", dict(learning_rate=0.1, beta_1=0.8, beta_2=0.5, epsilon=1e-3,
                                                    weight_decay=0.05, grad_averaging=True, amsgrad=True,
                                                    exclude_from_weight_decay=["bias"]), None),
    "novograd_defaults": ("NovoGrad", dict(learning_rate=0.1, grad_averaging=True), None),
    "cocob": ("COCOB", dict(), None),
    "cocob_alpha": ("COCOB", dict(alpha=2.5), None),  # both arms of max(G + L, alpha L)
    "cg_fro": ("ConditionalGradient", dict(learning_rate=0.9, lambda_=0.5), None),
    "cg_nuclear_decay": ("ConditionalGradient", dict(learning_rate=0.8, lambda_=2.0, ord="nuclear", decay=0.5), None),
    "cg_fro_schedule": ("ConditionalGradient", dict(learning_rate=_piecewise, lambda_=0.3, epsilon=1e-2),
                        dict(learning_rate=_piecewise_ref, lambda_=0.3, epsilon=1e-2)),
    "proximal_adagrad_l1_l2": ("ProximalAdagrad", dict(learning_rate=0.5, initial_accumulator_value=0.2,
                                                       l1_regularization_strength=0.3,
                                                       l2_regularization_strength=0.4), None),
    "proximal_adagrad_l2": ("ProximalAdagrad", dict(learning_rate=0.3, l2_regularization_strength=0.5), None),
}
RUNS = {  # (mode, jit_compile)
    "eager-plain": ("eager", False), "eager-xla": ("eager", True),
    "function-plain": ("function", False), "function-xla": ("function", True),
}
DTYPE_RUNS = [(tf.float32, "eager-plain"), (tf.float32, "function-plain"), (tf.float32, "function-xla"),
              (tf.float64, "eager-plain"), (tf.float64, "function-xla")]  # eager XLA: the LAMB and CG tests below


def build(case, **extra):
    kind, kwargs, _ = CASES[case]
    kwargs = {k: (v() if callable(v) else v) for k, v in kwargs.items()}  # schedules: a fresh one each time
    return CLASSES[kind](**kwargs, **extra)


def reference_rule(case):
    kind, kwargs, ref_kwargs = CASES[case]
    return getattr(ref, kind)(**(kwargs if ref_kwargs is None else ref_kwargs))


def gradients(sparse, dtype, seed=0):
    """``[(kernel gradient, bias gradient)]`` per step, as tensors."""
    rng = np.random.RandomState(seed)
    out = []
    for indices in STEP_INDICES:
        if sparse:
            values = rng.randn(len(indices), SHAPE[1]).astype(dtype.as_numpy_dtype)
            kernel = tf.IndexedSlices(tf.constant(values), tf.constant(indices), tf.constant(SHAPE))
        else:
            kernel = tf.constant(rng.randn(*SHAPE).astype(dtype.as_numpy_dtype))
        out.append((kernel, tf.constant(rng.randn(SHAPE[1]).astype(dtype.as_numpy_dtype))))
    return out


def make_variables(dtype):
    return (tf.Variable(np.linspace(-1, 1, 15).reshape(SHAPE), dtype=dtype, name="kernel"),
            tf.Variable([0.5, -0.5, 1.0], dtype=dtype, name="bias"))


def numpy_trajectory(rule, grads, dtype):
    kernel, bias = (v.numpy() for v in make_variables(dtype))
    steps = []
    for g, b in grads:
        kernel_grad = (g.values.numpy(), g.indices.numpy()) if isinstance(g, tf.IndexedSlices) else g.numpy()
        steps.append({"kernel": kernel_grad, "bias": b.numpy()})
    dtypes = {"kernel": dtype.as_numpy_dtype, "bias": dtype.as_numpy_dtype}
    return [(s["kernel"], s["bias"]) for s in ref.run(rule, {"kernel": kernel, "bias": bias}, steps, dtypes)]


def assert_trajectories(ours, expected, dtype, what, exact=False):
    assert len(ours) == len(expected)
    for step, ((k, b), (ek, eb)) in enumerate(zip(ours, expected), start=1):
        assert np.isfinite(k).all() and np.isfinite(b).all(), f"step {step}: not finite"
        if exact:
            np.testing.assert_array_equal(k, ek, err_msg=f"kernel vs {what}, step {step}")
            np.testing.assert_array_equal(b, eb, err_msg=f"bias vs {what}, step {step}")
        else:
            np.testing.assert_allclose(k, ek, err_msg=f"kernel vs {what}, step {step}", **TOLERANCE[dtype])
            np.testing.assert_allclose(b, eb, err_msg=f"bias vs {what}, step {step}", **TOLERANCE[dtype])


CASE_SPARSE = [(c, sparse) for c in sorted(CASES) for sparse in (False, True)]


@pytest.mark.parametrize("dtype,run", DTYPE_RUNS, ids=[f"{d.name}-{r}" for d, r in DTYPE_RUNS])
@pytest.mark.parametrize("case,sparse", CASE_SPARSE, ids=[f"{c}-{'sparse' if s else 'dense'}" for c, s in CASE_SPARSE])
def test_equals_numpy_reference(case, sparse, dtype, run):
    mode, jit_compile = RUNS[run]
    grads = gradients(sparse, dtype)
    ours = trajectory(build(case, jit_compile=jit_compile), grads, make_variables(dtype), mode)
    assert ours[-1][0].dtype == dtype.as_numpy_dtype
    assert_trajectories(ours, numpy_trajectory(reference_rule(case), grads, dtype), dtype, "numpy")


@pytest.mark.parametrize("case", sorted(CASES))
def test_config_round_trip_before_and_after_training(case):
    optimizer = build(case, clipnorm=2.0)
    config = optimizer.get_config()
    assert type(optimizer).from_config(config).get_config() == config
    trajectory(optimizer, gradients(True, tf.float32)[:2], make_variables(tf.float32), "function")
    trained = optimizer.get_config()
    json.dumps(trained)  # plain Python values: no numpy scalars (TFA's COCOB and ProximalAdagrad have them)
    rebuilt = type(optimizer).from_config(trained)
    assert rebuilt.get_config() == trained
    # The rebuilt optimizer takes the same steps as a fresh one.
    grads = gradients(False, tf.float32, seed=1)
    ours = trajectory(rebuilt, grads, make_variables(tf.float32))
    fresh = trajectory(build(case, clipnorm=2.0), grads, make_variables(tf.float32))
    assert_trajectories(ours, fresh, tf.float32, "fresh optimizer")


DISTRIBUTED = {
    "LAMB": dict(learning_rate=0.01, weight_decay=0.01, exclude_from_weight_decay=["bias"]),
    "NovoGrad": dict(learning_rate=0.01, amsgrad=True, grad_averaging=True),
    "COCOB": dict(),
    "ConditionalGradient": dict(learning_rate=0.9, ord="nuclear"),
}


@pytest.mark.parametrize("kind", sorted(DISTRIBUTED))
def test_mirrored_fit_equals_one_device(kind, mirrored):
    """model.fit with an embedding (sparse gradients, of unknown static shape under the strategy): the
    trust ratio's norms, NovoGrad's scalar slot, COCOB's slot order and the SVD of a sparse gradient."""
    rng = np.random.RandomState(0)
    x = rng.randint(0, 10, (32, 2)).astype("int32")
    y = (x.sum(axis=1, keepdims=True) / 10.0).astype("float32")
    weights = []
    for scope in (mirrored.scope(), contextlib.nullcontext()):
        with scope:
            inputs = keras.Input((2,), dtype="int32")
            hidden = keras.layers.Dense(3, activation="tanh")(keras.layers.Flatten()(keras.layers.Embedding(10, 4)(inputs)))
            model = keras.Model(inputs, keras.layers.Dense(1)(hidden))
            model.set_weights([np.full(w.shape, 0.1 * (i + 1), "float32") for i, w in enumerate(model.weights)])
            model.compile(CLASSES[kind](**DISTRIBUTED[kind]), loss="mse")
        model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
        weights.append(model.get_weights())
    for ours, one_device in zip(*weights):
        np.testing.assert_allclose(ours, one_device, **TOLERANCE[tf.float32])


# ----------------------------------------------------------------------------------------- LAMB


def test_lamb_exclusions_per_variable_share_no_compiled_step():
    """Four variables of one shape: decayed or not, adapted or not. Compiled steps are shared per
    shape and options, so a name-based branch inside the step would give all four one treatment."""
    names = ["dense/kernel", "norm/gamma", "dense/bias", "embedding/table"]
    kwargs = dict(learning_rate=0.1, weight_decay=0.1, exclude_from_weight_decay=["gamma", "bias"],
                  exclude_from_layer_adaptation=["bias", "table"])
    rng = np.random.RandomState(3)
    init = {n: rng.randn(4, 3) for n in names}
    grads = [{n: rng.randn(4, 3) for n in names} for _ in range(3)]
    expected = ref.run(ref.LAMB(**kwargs), init, grads, {n: np.float32 for n in names})
    for jit_compile in (True, False):
        variables = [tf.Variable(init[n].astype("float32"), name=n) for n in names]
        optimizer = LAMB(jit_compile=jit_compile, **kwargs)
        for step in grads:
            optimizer.apply_gradients([(tf.constant(step[n].astype("float32")), v) for n, v in zip(names, variables)])
        for n, v in zip(names, variables):
            np.testing.assert_allclose(v.numpy(), expected[-1][n], err_msg=n, **TOLERANCE[tf.float32])


@pytest.mark.parametrize("jit_compile", [True, False], ids=["xla", "plain"])
def test_lamb_trust_ratio_is_one_where_a_norm_is_zero(jit_compile):
    """A zero variable (||theta|| = 0) and a zero update (||u|| = 0) both take the ratio 1."""
    init = {"zero": np.zeros(3), "still": np.array([1.0, -2.0, 0.5])}
    grads = [{"zero": np.array([0.3, -0.1, 0.2]), "still": np.zeros(3)}, {"zero": np.zeros(3), "still": np.zeros(3)}]
    expected = ref.run(ref.LAMB(learning_rate=0.1), init, grads, {"zero": np.float64, "still": np.float64})
    variables = {n: tf.Variable(v, name=n) for n, v in init.items()}
    optimizer = LAMB(learning_rate=0.1, jit_compile=jit_compile)
    for step, want in zip(grads, expected):
        optimizer.apply_gradients([(tf.constant(step[n]), variables[n]) for n in init])
        for n in init:
            np.testing.assert_allclose(variables[n].numpy(), want[n], err_msg=n, **TOLERANCE[tf.float64])
    np.testing.assert_array_equal(variables["still"].numpy(), init["still"])  # u = 0: no step at all


def test_lamb_decay_var_list_chooses_the_decayed_variables():
    kwargs = dict(learning_rate=0.1, weight_decay=0.2, exclude_from_weight_decay=["bias"],
                  exclude_from_layer_adaptation=["nothing"])
    grads = gradients(False, tf.float32)
    ours = trajectory(LAMB(**kwargs), grads, make_variables(tf.float32), decay_var_list=[])  # no variable
    expected = numpy_trajectory(ref.LAMB(**kwargs, decayed=()), grads, tf.float32)
    assert_trajectories(ours, expected, tf.float32, "numpy, nothing decayed")
    optimizer, (kernel, bias) = LAMB(**kwargs), make_variables(tf.float32)
    for g, b in grads:
        optimizer.apply_gradients([(g, kernel), (b, bias)], decay_var_list=[bias])  # wins over the exclusion
    expected = numpy_trajectory(ref.LAMB(**kwargs, decayed=("bias",)), grads, tf.float32)
    assert_trajectories([(kernel.numpy(), bias.numpy())], expected[-1:], tf.float32, "numpy, bias decayed")


def test_lamb_tfa_argument_conventions():
    # exclude_from_layer_adaptation=None takes exclude_from_weight_decay's list (TFA's rule, kept).
    assert LAMB(exclude_from_weight_decay=["bias"]).get_config()["exclude_from_layer_adaptation"] == ["bias"]
    assert LAMB(exclude_from_weight_decay=["bias"], exclude_from_layer_adaptation=["norm"]).get_config()[
        "exclude_from_layer_adaptation"] == ["norm"]
    # epsilon=0 is keras.backend.epsilon() (TFA's NovoGrad and ConditionalGradient; its LAMB meant to, and raises).
    assert LAMB(epsilon=0.0).epsilon == NovoGrad(epsilon=0.0).epsilon == keras.backend.epsilon()
    assert ConditionalGradient(0.5, epsilon=0.0).epsilon == keras.backend.epsilon()
    # TFA's old argument name still works, with a warning.
    with pytest.warns(DeprecationWarning, match="weight_decay_rate"):
        old = LAMB(weight_decay_rate=0.25)
    assert old.get_config() == LAMB(weight_decay=0.25).get_config()


# ------------------------------------------------------------------------------------- NovoGrad


def test_novograd_slots_have_tfa_shapes():
    optimizer = NovoGrad(amsgrad=True)
    kernel, bias = make_variables(tf.float32)
    optimizer.apply_gradients([(tf.ones(SHAPE), kernel), (tf.ones(3), bias)])
    assert optimizer.get_slot(kernel, "v").shape == []  # one second moment per variable
    assert optimizer.get_slot(kernel, "m").shape == SHAPE and optimizer.get_slot(kernel, "vhat").shape == SHAPE
    assert [w.name.split("/")[-1] for w in optimizer.weights[1:]] == ["m:0", "m:0", "v:0", "v:0", "vhat:0", "vhat:0"]


def test_novograd_config_keeps_amsgrad_and_takes_tfa_values():
    assert NovoGrad.from_config(NovoGrad(amsgrad=True).get_config()).amsgrad is True  # TFA's config drops it
    # After training, TFA's config holds grad_averaging as a numpy bool.
    config = dict(NovoGrad(grad_averaging=True).get_config(), grad_averaging=np.bool_(True))
    assert NovoGrad.from_config(config).grad_averaging is True


# ---------------------------------------------------------------------------------------- COCOB


@pytest.mark.parametrize("case", ["cocob", "cocob_alpha"])
def test_cocob_sparse_step_equals_the_dense_step(case):
    """Rows a sparse step leaves alone would not change under the dense rule either (g = 0)."""
    sparse = gradients(True, tf.float64)
    dense = [(tf.convert_to_tensor(g), b) for g, b in sparse]
    ours = trajectory(build(case), sparse, make_variables(tf.float64))
    assert_trajectories(ours, trajectory(build(case), dense, make_variables(tf.float64)), tf.float64, "the dense step")


def test_cocob_slots_and_tfa_config_values():
    optimizer = COCOB()
    kernel, bias = make_variables(tf.float64)
    optimizer.apply_gradients([(tf.zeros(SHAPE, tf.float64), kernel), (tf.zeros(3, tf.float64), bias)])
    np.testing.assert_array_equal(optimizer.get_slot(kernel, "lr").numpy(), np.full(SHAPE, 1e-8))  # float64's 1e-8
    # Variable by variable, as TFA creates them (the order of the weights in a .h5 file).
    slots = ["lr", "grad_norm_sum", "gradients_sum", "tilde_w", "reward"]
    assert [w.name.split(":")[0].split("/")[-2:] for w in optimizer.weights[1:]] == (
        [["kernel", s] for s in slots] + [["bias", s] for s in slots])
    assert COCOB.from_config(dict(optimizer.get_config(), alpha=np.int32(100))).alpha == 100  # TFA's, after training


# -------------------------------------------------------------------------------- ConditionalGradient


@pytest.mark.parametrize("jit_compile", [True, False], ids=["xla", "plain"])
def test_conditional_gradient_nuclear_on_kernels_of_rank_3_and_on_scalars(jit_compile):
    rng = np.random.RandomState(5)
    init = {"conv": rng.randn(2, 3, 4), "scale": np.array(0.7)}
    grads = [{"conv": rng.randn(2, 3, 4), "scale": np.array(-0.4)} for _ in range(2)]
    kwargs = dict(learning_rate=0.7, lambda_=1.5, ord="nuclear")
    expected = ref.run(ref.ConditionalGradient(**kwargs), init, grads, {n: np.float64 for n in init})
    variables = {n: tf.Variable(v, name=n) for n, v in init.items()}
    optimizer = ConditionalGradient(jit_compile=jit_compile, **kwargs)
    for step in grads:
        optimizer.apply_gradients([(tf.constant(step[n]), variables[n]) for n in init])
    for n in init:
        np.testing.assert_allclose(variables[n].numpy(), expected[-1][n], err_msg=n, **TOLERANCE[tf.float64])


# ----------------------------------------------------------------------------------- bad input

BAD_INPUT = [
    (LAMB, dict(beta_1=1.0), ValueError, "beta_1=1.0"),
    (LAMB, dict(epsilon=-1e-6), ValueError, "epsilon=-1e-06"),
    (LAMB, dict(epsilon=tf.constant(1e-6)), TypeError, "epsilon="),
    (LAMB, dict(weight_decay=-0.1), ValueError, "weight_decay=-0.1"),
    (LAMB, dict(weight_decay=None), TypeError, "weight_decay=None"),
    (LAMB, dict(exclude_from_layer_adaptation="bias"), TypeError, "exclude_from_layer_adaptation='bias'"),
    (LAMB, dict(exclude_from_layer_adaptation=["("]), ValueError, r"exclude_from_layer_adaptation=\['\('\]"),
    (LAMB, dict(scale_weight_decay_by_lr=True), ValueError, "scale_weight_decay_by_lr=True"),
    (NovoGrad, dict(weight_decay=-0.1), ValueError, "weight_decay=-0.1"),
    (NovoGrad, dict(beta_2=1.5), ValueError, "beta_2=1.5"),
    (NovoGrad, dict(amsgrad="yes"), TypeError, "amsgrad='yes'"),
    (NovoGrad, dict(grad_averaging=1), TypeError, "grad_averaging=1"),
    (COCOB, dict(alpha=0.5), ValueError, "alpha=0.5"),
    (COCOB, dict(alpha="big"), TypeError, "alpha='big'"),
    (COCOB, dict(use_locking=None), TypeError, "use_locking=None"),
    (COCOB, dict(weight_decay=0.1), TypeError, "weight_decay=0.1"),
    (ConditionalGradient, dict(learning_rate=0.5, ord="l1"), ValueError, "ord='l1'"),
    (ConditionalGradient, dict(learning_rate=1.5), ValueError, "learning_rate=1.5"),
    (ConditionalGradient, dict(learning_rate=0.5, lambda_=-1.0), ValueError, "lambda_=-1.0"),
    (ConditionalGradient, dict(lambda_=0.1), TypeError, "learning_rate"),
    (ProximalAdagrad, dict(initial_accumulator_value=-0.1), ValueError, "initial_accumulator_value=-0.1"),
    (ProximalAdagrad, dict(l1_regularization_strength=-1.0), ValueError, "l1_regularization_strength=-1.0"),
    (ProximalAdagrad, dict(l2_regularization_strength="x"), TypeError, "l2_regularization_strength='x'"),
]


@pytest.mark.parametrize("kind,kwargs,error,match", BAD_INPUT,
                         ids=[f"{k.__name__}-{next(iter(a))}-{i}" for i, (k, a, _, _) in enumerate(BAD_INPUT)])
def test_bad_input_names_the_argument_and_value(kind, kwargs, error, match):
    with pytest.raises(error, match=match):
        kind(**kwargs)


def test_options_cannot_change_after_the_first_step():
    optimizer = ConditionalGradient(0.5)
    optimizer.ord = "nuclear"  # before the first step: checked, and taken
    with pytest.raises(ValueError, match="ord='spectral'"):
        optimizer.ord = "spectral"
    kernel, _ = make_variables(tf.float32)
    optimizer.apply_gradients([(tf.ones(SHAPE), kernel)])
    with pytest.raises(ValueError, match="ord='fro'"):
        optimizer.ord = "fro"


def test_no_deprecation_warning_by_default():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for cls in (LAMB, NovoGrad, COCOB, ProximalAdagrad):
            cls()
        ConditionalGradient(0.5)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_lamb_on_bfloat16_variables_follows_the_float32_run(jit_compile):
    """In bfloat16 0.999 is 1.0: LAMB's coefficients are computed in float32 and rounded, so the step
    is finite and follows the float32 run within bfloat16's precision (8 bits of mantissa)."""
    rng = np.random.default_rng(0)
    w0 = rng.normal(size=(8, 4)).astype("float32")
    grads = [rng.normal(size=(8, 4)).astype("float32") for _ in range(5)]
    runs = {}
    for dtype in (tf.bfloat16, tf.float32):
        var = tf.Variable(tf.cast(w0, dtype))
        opt = LAMB(learning_rate=0.01, jit_compile=jit_compile)
        for grad in grads:
            opt.apply_gradients([(tf.cast(grad, dtype), var)])
        runs[dtype] = tf.cast(var, tf.float32).numpy()
    assert np.isfinite(runs[tf.bfloat16]).all()
    assert not np.array_equal(runs[tf.float32], w0)
    np.testing.assert_allclose(runs[tf.bfloat16], runs[tf.float32], rtol=2e-2, atol=2e-2)
