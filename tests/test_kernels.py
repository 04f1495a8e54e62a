"""Adam's fused kernels (``optimizers.kernels``) against TensorFlow's own kernels.

The reference is what TensorFlow Addons' AdamW and MovingAverage run: TensorFlow's
gradient-descent kernel with ``delta = var`` (the decay), then TensorFlow's
``ResourceApplyAdam``, then the average's gradient-descent kernel with ``delta = average - var``.
The fused kernels must give those bits exactly, in every dtype those kernels take, on small and
large variables (large ones were compiled with XLA before the kernels existed), eagerly and in
``tf.function``; inside a whole-step XLA compile, and where the kernels are off or cannot be
built, the step falls back.
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from optimizers import Adam, AdamW, MovingAverage, kernels

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = {"small": (300, 7), "large": (600, 1000)}  # the large one is over compiled.BATCH_MAX_ELEMENTS
DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)
BETA_1, BETA_2, STEPS = 0.8, 0.95, 3


def _problem(dtype, shape, seed=0):
    rng = np.random.RandomState(seed)
    init = rng.randn(*shape)
    grads = [tf.constant(rng.randn(*shape), dtype=dtype) for _ in range(STEPS)]
    return init, grads


def _reference(init, grads, dtype, weight_decay, learning_rate, epsilon, average_rate=None):
    """TensorFlow's kernels, as TensorFlow Addons' AdamW (and MovingAverage around it) calls them
    (hyperparameters in float32 variables, cast to the variable's dtype; epsilon a number,
    converted to it): ``var, m, v`` and, with ``average_rate``, the average (from ``init``)."""
    var = tf.Variable(init, dtype=dtype)
    m, v, average = tf.Variable(tf.zeros_like(var)), tf.Variable(tf.zeros_like(var)), tf.Variable(var)

    def c(x):
        return tf.cast(tf.constant(x, tf.float32), dtype)

    for step, grad in enumerate(grads, start=1):
        if weight_decay:
            tf.raw_ops.ResourceApplyGradientDescent(var=var.handle, alpha=c(weight_decay), delta=var.value())
        tf.raw_ops.ResourceApplyAdam(var=var.handle, m=m.handle, v=v.handle, grad=grad,
                                     beta1_power=tf.cast(c(BETA_1) ** step, dtype),
                                     beta2_power=tf.cast(c(BETA_2) ** step, dtype), lr=c(learning_rate),
                                     beta1=c(BETA_1), beta2=c(BETA_2), epsilon=tf.constant(epsilon, dtype))
        if average_rate is not None:
            tf.raw_ops.ResourceApplyGradientDescent(var=average.handle, alpha=c(average_rate), delta=average - var)
    return (var.numpy(), m.numpy(), v.numpy()) + ((average.numpy(),) if average_rate is not None else ())


FUSED_OPS = {"DecayedApplyAdam", "ApplyAdamAverage", "DecayedApplyAdamAverage"}


def _uses_fused_kernel(function, *args) -> bool:
    graph = function.get_concrete_function(*args).graph
    ops = {op.type for op in graph.get_operations()}
    for f in graph.as_graph_def().library.function:
        ops.update(node.op for node in f.node_def)
    return bool(FUSED_OPS & ops)


def _epsilon(dtype):
    return 1e-3 if dtype in (tf.float16, tf.bfloat16) else 1e-7


def _train(opt, var, grads, mode):
    """One ``apply_gradients`` per gradient, eagerly or in a ``tf.function`` that must hold a fused op."""
    def step(grad):
        opt.apply_gradients([(grad, var)])

    if mode == "function":
        step = tf.function(step)
        assert _uses_fused_kernel(step, grads[0])
    for grad in grads:
        step(grad)


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("size", sorted(SHAPES))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_the_fused_kernel_gives_the_bits_of_the_decay_op_then_tensorflows_adam_kernel(dtype, size, mode):
    assert kernels.fused_adam(tf.Variable(1.0), True, False) is not None, "the kernels build on this machine"
    epsilon = _epsilon(dtype)
    init, grads = _problem(dtype, SHAPES[size])
    var = tf.Variable(init, dtype=dtype)
    opt = AdamW(0.01, learning_rate=0.1, beta_1=BETA_1, beta_2=BETA_2, epsilon=epsilon)
    _train(opt, var, grads, mode)
    expected = _reference(init, grads, dtype, 0.01, 0.1, epsilon)
    for ours, theirs in zip((var, opt.get_slot(var, "m"), opt.get_slot(var, "v")), expected):
        np.testing.assert_array_equal(ours.numpy(), theirs)


def test_the_fused_kernel_decays_by_the_learning_rate_when_asked():
    init, grads = _problem(tf.float32, SHAPES["small"])
    var = tf.Variable(init, dtype=tf.float32)
    opt = AdamW(0.5, learning_rate=0.1, beta_1=BETA_1, beta_2=BETA_2, scale_weight_decay_by_lr=True)
    for grad in grads:
        opt.apply_gradients([(grad, var)])
    factor = float(np.float32(0.5) * np.float32(0.1))
    np.testing.assert_array_equal(var.numpy(), _reference(init, grads, tf.float32, factor, 0.1, 1e-7)[0])


def test_a_tensor_read_before_the_step_keeps_its_value():
    """Copy-on-write: the kernel updates the variable's buffer only when nothing else holds it."""
    var = tf.Variable(np.arange(6.0).reshape(2, 3), dtype=tf.float32)
    before = var.value()  # eagerly, the variable's own buffer
    AdamW(0.1, learning_rate=0.5).apply_gradients([(tf.ones([2, 3]), var)])
    np.testing.assert_array_equal(before.numpy(), np.arange(6.0).reshape(2, 3))
    assert not np.array_equal(var.numpy(), before.numpy())


def test_a_whole_step_compiled_with_xla_takes_the_decay_op_and_adams_kernel():
    """XLA cannot compile the library's kernel: inside ``jit_compile=True`` the step is the decay op
    and TensorFlow's Adam kernel, which XLA compiles."""
    init, grads = _problem(tf.float32, SHAPES["small"])
    var = tf.Variable(init, dtype=tf.float32)
    opt = AdamW(0.01, learning_rate=0.1, beta_1=BETA_1, beta_2=BETA_2)

    @tf.function(jit_compile=True)
    def step(grad):
        opt.apply_gradients([(grad, var)])

    assert not _uses_fused_kernel(step, grads[0])
    for grad in grads:
        step(grad)
    np.testing.assert_allclose(var.numpy(), _reference(init, grads, tf.float32, 0.01, 0.1, 1e-7)[0],
                               rtol=1e-6, atol=1e-7)


def test_under_mirrored_strategy_each_replica_takes_the_kernel(mirrored):
    init, grads = _problem(tf.float32, SHAPES["small"])
    with mirrored.scope():
        var = tf.Variable(init, dtype=tf.float32)
        opt = AdamW(0.01, learning_rate=0.1, beta_1=BETA_1, beta_2=BETA_2)

    @tf.function
    def step(grad):
        def replica_step():  # each replica's half of the gradient: summed, the whole of it
            opt.apply_gradients([(grad / 2, var)])
        mirrored.run(replica_step)

    assert _uses_fused_kernel(step, grads[0])
    for grad in grads:
        step(grad)
    expected = _reference(init, grads, tf.float32, 0.01, 0.1, 1e-7)[0]
    for replica_value in mirrored.experimental_local_results(var):
        np.testing.assert_array_equal(replica_value.numpy(), expected)


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("size", sorted(SHAPES))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("decayed", [True, False], ids=["adamw", "adam"])
def test_a_moving_average_fused_into_the_kernel_gives_the_bits_of_tensorflows_kernels(decayed, dtype, size, mode):
    """``MovingAverage(AdamW)`` and ``MovingAverage(Adam)``: the average runs in the inner kernel's
    pass, with the bits of the average's own gradient-descent kernel after the step."""
    epsilon = _epsilon(dtype)
    init, grads = _problem(dtype, SHAPES[size])
    var = tf.Variable(init, dtype=dtype)
    inner = (AdamW(0.01, learning_rate=0.1, beta_1=BETA_1, beta_2=BETA_2, epsilon=epsilon) if decayed
             else Adam(learning_rate=0.1, beta_1=BETA_1, beta_2=BETA_2, epsilon=epsilon))
    opt = MovingAverage(inner, average_decay=0.75)
    _train(opt, var, grads, mode)
    expected = _reference(init, grads, dtype, 0.01 if decayed else 0.0, 0.1, epsilon, average_rate=0.25)
    for ours, theirs in zip((var, inner.get_slot(var, "m"), inner.get_slot(var, "v"), opt.get_slot(var, "average")),
                            expected):
        np.testing.assert_array_equal(ours.numpy(), theirs)


_FALLBACK = textwrap.dedent("""
    import json, warnings
    import numpy as np, tensorflow as tf
    from optimizers import AdamW
    var = tf.Variable(np.linspace(-1.0, 1.0, 12).reshape(3, 4), dtype=tf.float32)
    opt = AdamW(0.01, learning_rate=0.1)
    step = tf.function(lambda g: opt.apply_gradients([(g, var)]) and None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            step(tf.ones([3, 4]))
    ops = {op.type for op in step.get_concrete_function(tf.ones([3, 4])).graph.get_operations()}
    print(json.dumps({"fused": bool({"DecayedApplyAdam", "DecayedApplyAdamAverage"} & ops), "var": var.numpy().tolist(),
                      "warnings": [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]}))
""")


def _run_fallback(**env) -> dict:
    import json

    result = subprocess.run([sys.executable, "-c", _FALLBACK], cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, **env})
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("why", ["turned_off", "build_fails"])
def test_without_the_kernel_the_step_falls_back_with_the_same_numbers(tmp_path, why):
    env = {"OPTIMIZERS_NATIVE_KERNELS": "0"} if why == "turned_off" else {"CXX": "/bin/false"}
    ours = _run_fallback(OPTIMIZERS_KERNEL_CACHE=str(tmp_path / "cache"), **env)  # nothing built there yet
    assert not ours["fused"]
    if why == "build_fails":  # said once, with what to expect
        assert len(ours["warnings"]) == 1 and "Adam's fused kernels are not available" in ours["warnings"][0]
        assert "Building" in ours["warnings"][0] and "failed" in ours["warnings"][0]
    else:
        assert ours["warnings"] == []
    fused = _run_fallback()  # the kernels this machine has built (the tests above use them)
    assert fused["fused"] and fused["warnings"] == []
    assert ours["var"] == fused["var"]
