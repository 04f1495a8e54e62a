"""AdamW and SGDW against the numpy reference (tests/reference.py) and tf_keras's built-ins.

Runs on both stacks. Tolerances: conftest.TOLERANCE per dtype between TF
computations; against the float64 numpy reference the same, except float16
(1e-2, rounding accumulates over the steps). Hyperparameters that live in
float32 variables (as in Keras 2 and TFA) are rounded to float32 for the reference.
"""

import numpy as np
import pytest
import tensorflow as tf
from catalogue.trajectories import numpy_gradient, trajectory

import optimizers
from optimizers import SGDW, AdamW

import reference
from conftest import TOLERANCE, keras

STEPS = 4
SHAPE = (5, 3)
# Repeated rows within a step, different rows across steps, row 4 never touched.
STEP_INDICES = [[0, 2, 0], [1, 1, 3], [2, 0, 2], [3, 1, 1]]
ADAM = dict(learning_rate=0.1, beta_1=0.8, beta_2=0.95)
CASES = {
    "adamw": (AdamW, dict(weight_decay=0.05, **ADAM)),
    "adamw_amsgrad": (AdamW, dict(weight_decay=0.05, amsgrad=True, **ADAM)),
    "adamw_lazy": (AdamW, dict(weight_decay=0.05, lazy=True, **ADAM)),
    "adamw_lazy_amsgrad": (AdamW, dict(weight_decay=0.05, lazy=True, amsgrad=True, **ADAM)),
    "adamw_lr_scaled": (AdamW, dict(weight_decay=0.5, scale_weight_decay_by_lr=True, **ADAM)),
    "sgdw": (SGDW, dict(weight_decay=0.05, learning_rate=0.1)),
    "sgdw_momentum": (SGDW, dict(weight_decay=0.05, learning_rate=0.1, momentum=0.9)),
    "sgdw_nesterov": (SGDW, dict(weight_decay=0.05, learning_rate=0.1, momentum=0.9, nesterov=True)),
    "sgdw_lr_scaled": (SGDW, dict(weight_decay=0.5, learning_rate=0.1, momentum=0.9, scale_weight_decay_by_lr=True)),
}


def _f32(x):
    return float(np.float32(x))


def gradients(sparse, dtype, seed=0):
    rng = np.random.RandomState(seed)
    np_dtype = dtype.as_numpy_dtype
    kernel_grads, bias_grads = [], []
    for indices in STEP_INDICES:
        if sparse:
            values = rng.randn(len(indices), SHAPE[1]).astype(np_dtype)
            kernel_grads.append(tf.IndexedSlices(tf.constant(values), tf.constant(indices), tf.constant(SHAPE)))
        else:
            kernel_grads.append(tf.constant(rng.randn(*SHAPE).astype(np_dtype)))
        bias_grads.append(tf.constant(rng.randn(SHAPE[1]).astype(np_dtype)))
    return kernel_grads, bias_grads


def make_variables(dtype):
    kernel = tf.Variable(np.linspace(-1, 1, 15).reshape(SHAPE), dtype=dtype, name="kernel")
    bias = tf.Variable([0.5, -0.5, 1.0], dtype=dtype, name="bias")
    return kernel, bias


def numpy_trajectory(kind, kwargs, kernel_grads, bias_grads, dtype, decayed=("kernel", "bias")):
    """The float64 reference; ``decayed`` names the variables that are weight-decayed."""
    hyper = {"lr": _f32(kwargs["learning_rate"]), "weight_decay": _f32(kwargs["weight_decay"]),
             "scale_by_lr": kwargs.get("scale_weight_decay_by_lr", False)}
    if kind is AdamW:
        rule = reference.adamw
        hyper.update(beta_1=_f32(kwargs["beta_1"]), beta_2=_f32(kwargs["beta_2"]), amsgrad=kwargs.get("amsgrad", False),
                     lazy=kwargs.get("lazy", False))
    else:
        rule = reference.sgdw
        hyper.update(momentum=_f32(kwargs.get("momentum", 0.0)), nesterov=kwargs.get("nesterov", False))
    kernel, bias = (v.numpy().astype(np.float64) for v in make_variables(dtype))
    kernel_slots, bias_slots, out = {}, {}, []
    for step, (g, b) in enumerate(zip(kernel_grads, bias_grads), start=1):
        g, rows = numpy_gradient(g, SHAPE)
        wd = hyper["weight_decay"]
        kernel, kernel_slots = rule(kernel, g, kernel_slots, step=step, rows=rows,
                                    **{**hyper, "weight_decay": wd if "kernel" in decayed else 0.0})
        bias, bias_slots = rule(bias, b.numpy().astype(np.float64), bias_slots, step=step,
                                **{**hyper, "weight_decay": wd if "bias" in decayed else 0.0})
        out.append((kernel, bias))
    return out


def assert_trajectories(ours, expected, dtype, what):
    tol = TOLERANCE[dtype]
    if dtype == tf.float16 and what == "numpy":
        tol = dict(rtol=1e-2, atol=1e-2)
    for step, ((k, b), (ek, eb)) in enumerate(zip(ours, expected), start=1):
        np.testing.assert_allclose(k, ek, err_msg=f"kernel vs {what}, step {step}", **tol)
        np.testing.assert_allclose(b, eb, err_msg=f"bias vs {what}, step {step}", **tol)


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("dtype", [tf.float16, tf.float32, tf.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_equals_numpy_reference(case, sparse, dtype, mode):
    kind, kwargs = CASES[case]
    kernel_grads, bias_grads = gradients(sparse, dtype)
    ours = trajectory(kind(**kwargs), zip(kernel_grads, bias_grads), make_variables(dtype), mode)
    assert ours[-1][0].dtype == dtype.as_numpy_dtype
    assert_trajectories(ours, numpy_trajectory(kind, kwargs, kernel_grads, bias_grads, dtype), dtype, "numpy")


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("kwargs", [dict(), dict(amsgrad=True)], ids=["adam", "amsgrad"])
@pytest.mark.parametrize("jit_compile", [True, False], ids=["xla", "plain"])
def test_adamw_without_decay_equals_builtin_adam(kwargs, sparse, dtype, jit_compile):
    kernel_grads, bias_grads = gradients(sparse, dtype)
    grads = list(zip(kernel_grads, bias_grads))
    ours = trajectory(AdamW(0.0, jit_compile=jit_compile, **ADAM, **kwargs), grads, make_variables(dtype))
    builtin = trajectory(keras.optimizers.legacy.Adam(**ADAM, **kwargs), grads, make_variables(dtype))
    assert_trajectories(ours, builtin, dtype, "tf_keras Adam")


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("kwargs", [dict(), dict(momentum=0.9), dict(momentum=0.9, nesterov=True)],
                         ids=["plain", "momentum", "nesterov"])
def test_sgdw_without_decay_equals_builtin_sgd(kwargs, sparse, dtype):
    kernel_grads, bias_grads = gradients(sparse, dtype)
    grads = list(zip(kernel_grads, bias_grads))
    ours = trajectory(SGDW(0.0, learning_rate=0.1, **kwargs), grads, make_variables(dtype))
    builtin = trajectory(keras.optimizers.legacy.SGD(learning_rate=0.1, **kwargs), grads, make_variables(dtype))
    assert_trajectories(ours, builtin, dtype, "tf_keras SGD")


@pytest.mark.parametrize("kind", [AdamW, SGDW], ids=lambda k: k.__name__)
def test_exclude_from_weight_decay_and_decay_var_list(kind):
    kwargs = dict(CASES["adamw" if kind is AdamW else "sgdw_momentum"][1], exclude_from_weight_decay=["bias"])
    kernel_grads, bias_grads = gradients(False, tf.float32)

    ours = trajectory(kind(**kwargs), zip(kernel_grads, bias_grads), make_variables(tf.float32))
    expected = numpy_trajectory(kind, kwargs, kernel_grads, bias_grads, tf.float32, decayed=("kernel",))
    assert_trajectories(ours, expected, tf.float32, "numpy, bias excluded")

    # decay_var_list wins over the exclusions.
    optimizer = kind(**kwargs)
    kernel, bias = make_variables(tf.float32)
    for g, b in zip(kernel_grads, bias_grads):
        optimizer.apply_gradients([(g, kernel), (b, bias)], decay_var_list=[bias])
    expected = numpy_trajectory(kind, kwargs, kernel_grads, bias_grads, tf.float32, decayed=("bias",))
    np.testing.assert_allclose(kernel.numpy(), expected[-1][0], **TOLERANCE[tf.float32])
    np.testing.assert_allclose(bias.numpy(), expected[-1][1], **TOLERANCE[tf.float32])


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("kind", [AdamW, SGDW], ids=lambda k: k.__name__)
def test_exclude_from_weight_decay_set_before_the_first_step_acts_as_the_argument(kind, mode):
    """TFA's public attribute: read, set, and then used by the step, get_config and from_config alike."""
    kwargs = CASES["adamw" if kind is AdamW else "sgdw_momentum"][1]
    kernel_grads, bias_grads = gradients(False, tf.float32)
    optimizer = kind(**kwargs)
    assert optimizer.exclude_from_weight_decay is None
    optimizer.exclude_from_weight_decay = ["bias"]
    assert optimizer.exclude_from_weight_decay == ("bias",)
    config = optimizer.get_config()
    assert config["exclude_from_weight_decay"] == ["bias"]
    expected = numpy_trajectory(kind, kwargs, kernel_grads, bias_grads, tf.float32, decayed=("kernel",))
    for opt in (optimizer, kind.from_config(config)):
        ours = trajectory(opt, zip(kernel_grads, bias_grads), make_variables(tf.float32), mode)
        assert_trajectories(ours, expected, tf.float32, "numpy, bias excluded")


def test_exclude_from_weight_decay_is_fixed_once_a_step_is_built():
    optimizer = AdamW(0.5, learning_rate=0.0, exclude_from_weight_decay=["bias"])
    bias = tf.Variable([1.0], name="bias")
    optimizer.apply_gradients([(tf.constant([0.0]), bias)])
    optimizer.exclude_from_weight_decay = ("bias",)  # the same list: accepted
    with pytest.raises(ValueError, match=r"`exclude_from_weight_decay` cannot change once AdamW has taken a step "
                                         r"\(the step is already built with exclude_from_weight_decay=\('bias',\)\)"
                                         r".*Received: exclude_from_weight_decay=\[\]"):
        optimizer.exclude_from_weight_decay = []
    assert optimizer.exclude_from_weight_decay == ("bias",)
    assert optimizer.get_config()["exclude_from_weight_decay"] == ["bias"]
    optimizer.apply_gradients([(tf.constant([0.0]), bias)])
    np.testing.assert_array_equal(bias.numpy(), [1.0])  # learning rate 0 and excluded: never changes


@pytest.mark.parametrize("value, error, message", [
    ("bias", TypeError, r"`exclude_from_weight_decay` must be a list of regex strings. "
                        r"Received: exclude_from_weight_decay='bias'"),
    (5, TypeError, r"must be a list of regex strings. Received: exclude_from_weight_decay=5"),
    ([1], TypeError, r"must be a list of regex strings. Received: exclude_from_weight_decay=\[1\]"),
    (["("], ValueError, r"invalid regex '\('.*Received: exclude_from_weight_decay=\['\('\]"),
])
def test_bad_exclude_from_weight_decay_assignment_is_refused(value, error, message):
    optimizer = AdamW(0.5, exclude_from_weight_decay=["bias"])
    with pytest.raises(error, match=message):
        optimizer.exclude_from_weight_decay = value
    assert optimizer.exclude_from_weight_decay == ("bias",)
    with pytest.raises(error, match=message):
        AdamW(0.5, exclude_from_weight_decay=value)  # the constructor's check
    with pytest.raises(ValueError, match=r"needs a `weight_decay`. Received: weight_decay=None, "
                                         r"exclude_from_weight_decay=\['bias'\]"):
        optimizers.Adam().exclude_from_weight_decay = ["bias"]


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("kind", [AdamW, SGDW], ids=lambda k: k.__name__)
def test_scale_weight_decay_by_lr_set_before_the_first_step_acts_as_the_argument(kind, mode):
    """Set after construction, it is what the step, get_config and from_config use (it was ignored)."""
    case = "adamw_lr_scaled" if kind is AdamW else "sgdw_lr_scaled"
    kwargs = CASES[case][1]
    kernel_grads, bias_grads = gradients(False, tf.float32)
    optimizer = kind(**{k: v for k, v in kwargs.items() if k != "scale_weight_decay_by_lr"})
    assert optimizer.scale_weight_decay_by_lr is False
    optimizer.scale_weight_decay_by_lr = True
    assert optimizer.scale_weight_decay_by_lr is True
    config = optimizer.get_config()
    assert config["scale_weight_decay_by_lr"] is True
    expected = numpy_trajectory(kind, kwargs, kernel_grads, bias_grads, tf.float32)
    for opt in (optimizer, kind.from_config(config)):
        ours = trajectory(opt, zip(kernel_grads, bias_grads), make_variables(tf.float32), mode)
        assert_trajectories(ours, expected, tf.float32, "numpy, decay scaled by the learning rate")


def test_scale_weight_decay_by_lr_is_fixed_once_a_step_is_built():
    optimizer = AdamW(0.5, learning_rate=0.1)
    var = tf.Variable([1.0])
    optimizer.apply_gradients([(tf.constant([0.0]), var)])
    optimizer.scale_weight_decay_by_lr = False  # the same value: accepted
    with pytest.raises(ValueError, match=r"`scale_weight_decay_by_lr` cannot change once AdamW has taken a step "
                                         r"\(the step is already built with scale_weight_decay_by_lr=False\)"
                                         r".*Received: scale_weight_decay_by_lr=True"):
        optimizer.scale_weight_decay_by_lr = True
    assert optimizer.get_config()["scale_weight_decay_by_lr"] is False


@pytest.mark.parametrize("make, value, error, message", [
    (lambda: AdamW(0.5), 1, TypeError, r"`scale_weight_decay_by_lr` must be a bool. Received: "
                                       r"scale_weight_decay_by_lr=1"),
    (lambda: optimizers.Adam(), True, ValueError, r"cannot be set on Adam, built without weight decay.*"
                                                  r"Received: scale_weight_decay_by_lr=True"),
    (lambda: optimizers.LAMB(), True, ValueError, r"LAMB's rule multiplies its weight decay by the learning rate "
                                                  r"already. Received: scale_weight_decay_by_lr=True"),
    (lambda: optimizers.RectifiedAdam(weight_decay=0.1), True, ValueError,
     r"RectifiedAdam's rule multiplies.*Received: scale_weight_decay_by_lr=True"),
])
def test_bad_scale_weight_decay_by_lr_assignment_is_refused(make, value, error, message):
    optimizer = make()
    before = optimizer.get_config()
    with pytest.raises(error, match=message):
        optimizer.scale_weight_decay_by_lr = value
    assert optimizer.get_config() == before
    wrapped = optimizers.MovingAverage(make())  # through a wrapper: the inner optimizer's check
    with pytest.raises(error, match=message):
        wrapped.scale_weight_decay_by_lr = value


def test_scale_weight_decay_by_lr_set_through_a_wrapper_reaches_the_inner_optimizer():
    wrapped = optimizers.MovingAverage(AdamW(0.5, learning_rate=0.1))
    wrapped.scale_weight_decay_by_lr = True
    assert wrapped.inner_optimizer.get_config()["scale_weight_decay_by_lr"] is True
    var = tf.Variable([1.0])
    wrapped.apply_gradients([(tf.constant([0.0]), var)])
    np.testing.assert_allclose(var.numpy(), [1.0 - _f32(0.5) * _f32(0.1)], rtol=1e-6)


def test_minimize_with_tape_honours_decay_var_list():
    kwargs = CASES["sgdw_momentum"][1]
    kernel_grads, bias_grads = gradients(False, tf.float32)
    optimizer = SGDW(**kwargs)
    kernel, bias = make_variables(tf.float32)
    for g, b in zip(kernel_grads, bias_grads):
        with tf.GradientTape() as tape:  # the loss's gradients are exactly g and b
            loss = tf.reduce_sum(kernel * g) + tf.reduce_sum(bias * b)
        optimizer.minimize(loss, [kernel, bias], tape=tape, decay_var_list=[kernel])
    expected = numpy_trajectory(SGDW, kwargs, kernel_grads, bias_grads, tf.float32, decayed=("kernel",))
    np.testing.assert_allclose(kernel.numpy(), expected[-1][0], **TOLERANCE[tf.float32])
    np.testing.assert_allclose(bias.numpy(), expected[-1][1], **TOLERANCE[tf.float32])


def test_empty_decay_var_list_decays_nothing():
    kernel, bias = make_variables(tf.float32)
    before = kernel.numpy()
    SGDW(0.5, learning_rate=0.0).apply_gradients([(tf.ones(SHAPE), kernel)], decay_var_list=[])
    np.testing.assert_array_equal(kernel.numpy(), before)


def test_schedule_and_callable_weight_decay():
    lr = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.5)
    wd = keras.optimizers.schedules.PiecewiseConstantDecay([1], [0.2, 0.1])
    var = tf.Variable([1.0])
    optimizer = SGDW(weight_decay=wd, learning_rate=lr)
    expected = 1.0
    for step in range(3):
        optimizer.apply_gradients([(tf.constant([1.0]), var)])
        expected = expected - float(wd(step)) * expected - float(lr(step))  # both evaluated at `iterations`
    np.testing.assert_allclose(var.numpy(), [expected], rtol=1e-6)

    factor = tf.Variable(0.5)
    var = tf.Variable([2.0])
    optimizer = SGDW(weight_decay=lambda: factor * 1.0, learning_rate=0.0)
    optimizer.apply_gradients([(tf.constant([0.0]), var)])
    factor.assign(0.25)
    optimizer.apply_gradients([(tf.constant([0.0]), var)])
    np.testing.assert_allclose(var.numpy(), [2.0 * 0.5 * 0.75])


def _all_ops(graph):
    ops = list(graph.get_operations())
    for function in getattr(graph, "_functions", {}).values():
        inner = getattr(function, "graph", None)
        if inner is not None:
            ops.extend(_all_ops(inner))
    return ops


@pytest.mark.parametrize("make", [lambda: AdamW(0.1), lambda: AdamW(0.1, lazy=True),
                                  lambda: AdamW(0.1, lazy=True, amsgrad=True), lambda: SGDW(0.1),
                                  lambda: SGDW(0.1, momentum=0.9)],
                         ids=["adamw", "adamw_lazy", "adamw_lazy_amsgrad", "sgdw", "sgdw_momentum"])
def test_sparse_step_never_densifies_the_gradient(make):
    optimizer, rows = make(), 1000
    table = tf.Variable(tf.ones((rows, 4)))
    grad = tf.IndexedSlices(tf.ones((3, 4)), tf.constant([5, 7, 5]), tf.constant([rows, 4]))

    @tf.function
    def step():
        optimizer.apply_gradients([(grad, table)])

    step()  # create the slots first
    ops = _all_ops(step.get_concrete_function().graph)
    assert not {"ScatterNd", "SparseToDense", "TensorScatterAdd", "TensorScatterUpdate"} & {op.type for op in ops}
    lazy = getattr(optimizer, "lazy", True)  # SGDW's sparse step is row-wise too
    if lazy:  # the step's cost follows the touched rows: no tensor as large as the table
        full = [op for op in ops for t in op.outputs if t.shape.rank and t.shape[0] == rows]
        assert not full, [op.type for op in full]


def test_validation_errors_repeat_the_value():
    with pytest.raises(ValueError, match=r"`weight_decay` must be in \[0.0, inf\]. Received: weight_decay=-0.1"):
        AdamW(weight_decay=-0.1)
    with pytest.raises(TypeError, match="Received: weight_decay=None"):
        SGDW(weight_decay=None)
    with pytest.raises(ValueError, match=r"`beta_1` must be in \[0.0, 1.0\). Received: beta_1=1.5"):
        AdamW(0.1, beta_1=1.5)
    with pytest.raises(ValueError, match="Received: epsilon=-1"):
        AdamW(0.1, epsilon=-1.0)
    with pytest.raises(TypeError, match="Received: lazy='yes'"):
        AdamW(0.1, lazy="yes")
    with pytest.raises(ValueError, match=r"`momentum` must be in \[0.0, 1.0\]. Received: momentum=1.5"):
        SGDW(0.1, momentum=1.5)
    with pytest.raises(TypeError, match="Received: nesterov=1"):
        SGDW(0.1, nesterov=1)
    with pytest.raises(TypeError, match="Received: exclude_from_weight_decay='bias'"):
        AdamW(0.1, exclude_from_weight_decay="bias")


def test_invalid_assignment_leaves_optimizer_and_variables_unchanged():
    optimizer = SGDW(0.5, learning_rate=0.0)
    var = tf.Variable([2.0])
    with pytest.raises(ValueError, match="Received: weight_decay=-1"):
        optimizer.weight_decay = -1.0
    np.testing.assert_array_equal(var.numpy(), [2.0])
    optimizer.apply_gradients([(tf.constant([0.0]), var)])
    np.testing.assert_allclose(var.numpy(), [1.0])


def test_slots():
    var = tf.Variable(tf.ones((2, 2)))
    for optimizer, names in [(SGDW(0.1), set()), (SGDW(0.1, momentum=0.9), {"momentum"}),
                             (AdamW(0.1), {"m", "v"}), (AdamW(0.1, amsgrad=True), {"m", "v", "vhat"})]:
        optimizer.apply_gradients([(tf.ones((2, 2)), var)])
        assert set(optimizer.get_slot_names()) == names


@pytest.mark.parametrize("kind", [AdamW, SGDW], ids=lambda k: k.__name__)
def test_config_round_trip_with_schedules(kind):
    lr = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=10, decay_rate=0.5)
    wd = keras.optimizers.schedules.PiecewiseConstantDecay([10], [1e-2, 1e-3])
    extra = dict(amsgrad=True, lazy=True) if kind is AdamW else dict(momentum=0.9, nesterov=True)
    optimizer = kind(weight_decay=wd, learning_rate=lr, exclude_from_weight_decay=["bias"],
                     scale_weight_decay_by_lr=True, clipnorm=1.0, **extra)
    config = optimizer.get_config()
    again = kind.from_config(config)
    assert again.get_config() == config
    assert isinstance(again._get_hyper("weight_decay"), keras.optimizers.schedules.PiecewiseConstantDecay)
    assert type(keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))) is kind
    for key, value in extra.items():
        assert config[key] == value


def _fit_problem():
    rng = np.random.RandomState(0)
    x = rng.randn(32, 4).astype("float32")
    y = x @ rng.randn(4, 2).astype("float32")
    return x, y


@pytest.mark.parametrize("kind", [AdamW, SGDW], ids=lambda k: k.__name__)
def test_fit_save_load_and_resume_identically(kind, tmp_path):
    x, y = _fit_problem()
    kwargs = dict(CASES["adamw_amsgrad" if kind is AdamW else "sgdw_nesterov"][1], exclude_from_weight_decay=["bias"])
    kwargs["learning_rate"] = 0.01
    init = keras.initializers.GlorotUniform(seed=1)  # fixed weights: the test must not depend on test order
    model = keras.Sequential([keras.layers.Input((4,)), keras.layers.Dense(3, kernel_initializer=init),
                              keras.layers.Dense(2, kernel_initializer=init)])
    model.compile(optimizer=kind(**kwargs), loss="mse")
    history = model.fit(x, y, batch_size=8, epochs=5, shuffle=False, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    path = str(tmp_path / "model.h5")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert type(loaded.optimizer) is kind
    model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    loaded.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    for got, want in zip(loaded.get_weights(), model.get_weights()):
        np.testing.assert_allclose(got, want, **TOLERANCE[tf.float32])


def test_tfa_names_map_to_these_classes_unless_tfa_owns_them():
    objects = keras.utils.get_custom_objects()
    for name, cls in optimizers.TFA_NAMES.items():
        assert objects[name] is cls or objects[name].__module__.startswith("tensorflow_addons"), name


def _doubled(grad):
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values * 2, grad.indices, grad.dense_shape)
    return grad * 2


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("case", ["adamw", "adamw_lazy_amsgrad", "sgdw_nesterov"])
def test_mirrored_strategy_equals_one_device_with_summed_gradients(case, sparse, mirrored):
    kind, kwargs = CASES[case]
    kernel_grads, bias_grads = gradients(sparse, tf.float32)
    # Two replicas with the same gradient: Keras 2 sums them.
    expected = trajectory(kind(**kwargs), [(_doubled(g), _doubled(b)) for g, b in zip(kernel_grads, bias_grads)],
                          make_variables(tf.float32))
    with mirrored.scope():
        optimizer = kind(**kwargs)
        kernel, bias = make_variables(tf.float32)

    def replica_step(g, b):  # each replica builds its gradients (tensors from outside cannot be all-reduced)
        if isinstance(g, tf.IndexedSlices):
            g = tf.IndexedSlices(tf.constant(g.values.numpy()), tf.constant(g.indices.numpy()), tf.constant(SHAPE))
        else:
            g = tf.constant(g.numpy())
        optimizer.apply_gradients([(g, kernel), (tf.constant(b.numpy()), bias)])

    ours = []
    for g, b in zip(kernel_grads, bias_grads):
        tf.function(lambda: mirrored.run(replica_step, args=(g, b)))()  # noqa: B023
        ours.append((kernel.numpy().copy(), bias.numpy().copy()))
    assert_trajectories(ours, expected, tf.float32, "one device")
