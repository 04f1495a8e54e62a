"""The library's fused kernels (``optimizers.kernels``) against the ops they replace.

Adam's: the reference is what TensorFlow Addons' AdamW and MovingAverage run: TensorFlow's
gradient-descent kernel with ``delta = var`` (the decay), then TensorFlow's
``ResourceApplyAdam``, then the average's gradient-descent kernel with ``delta = average - var``.
Yogi's, AdaBelief's, RectifiedAdam's, COCOB's, ProximalAdagrad's, LAMB's, NovoGrad's and
ConditionalGradient's and Lion's dense steps and LazyAdam's sparse step: the reference is the rule's own step in plain TensorFlow ops with the kernels off, whose bits are
TensorFlow Addons' (pinned live against TFA in ``catalogue/test_adamlike_tfa.py`` and
``catalogue/test_layerwise_tfa.py``, which on TF 2.15 run the kernels too). ``SumOfSquares``:
the reference is TensorFlow's ``reduce_sum(square(x))``, at several thread-pool sizes.
The fused kernels must give those bits exactly, in every dtype they take, on small and
large variables (large ones were compiled with XLA before the kernels existed), eagerly and in
``tf.function``; inside a whole-step XLA compile, and where the kernels are off or cannot be
built, the step falls back.
"""

import functools
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from optimizers import Adam, AdamW, MovingAverage, keras, kernels
from optimizers.compiled import compiled_function_count
from optimizers.rules.adabelief import AdaBelief
from optimizers.rules.cocob import COCOB
from optimizers.rules.conditional_gradient import ConditionalGradient
from optimizers.rules.lamb import LAMB
from optimizers.rules.lazy_adam import LazyAdam
from optimizers.rules.lion import Lion
from optimizers.rules.novograd import NovoGrad
from optimizers.rules.proximal_adagrad import ProximalAdagrad
from optimizers.rules.rectified_adam import RectifiedAdam
from optimizers.rules.yogi import Yogi

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


def _uses_fused_kernel(function, *args, fused_ops=FUSED_OPS) -> bool:
    graph = function.get_concrete_function(*args).graph
    ops = {op.type for op in graph.get_operations()}
    for f in graph.as_graph_def().library.function:
        ops.update(node.op for node in f.node_def)
    return bool(set(fused_ops) & ops)


def _bits(x):
    """``x``'s bit patterns, for comparisons that tell -0.0 from 0.0; every NaN as one (which NaN
    operand an instruction passes on, and so a NaN's sign bit, follows the compiler's operand
    order, which IEEE 754 leaves open)."""
    x = np.array(x)
    if x.dtype.kind == "f":
        x[np.isnan(x)] = np.nan
    return x.view(f"u{x.dtype.itemsize}")


def _epsilon(dtype):
    return 1e-3 if dtype in (tf.float16, tf.bfloat16) else 1e-7


def _train(opt, var, grads, mode, fused_ops=FUSED_OPS):
    """One ``apply_gradients`` per gradient, eagerly or in a ``tf.function`` that must hold one of
    ``fused_ops`` (none if empty)."""
    def step(grad):
        opt.apply_gradients([(grad, var)])

    if mode == "function":
        step = tf.function(step)
        assert _uses_fused_kernel(step, grads[0], fused_ops=fused_ops) == bool(fused_ops)
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


@pytest.mark.parametrize("jit_compile", [True, False], ids=["jit", "no_jit"])
@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("size", sorted(SHAPES))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_a_moving_average_after_another_step_is_one_kernel_with_the_bits_of_tensorflows(dtype, size, mode,
                                                                                        jit_compile):
    """After a step the average cannot run in (here tf_keras's SGD), ``MovingAverage`` runs the
    library's ``ApplyMovingAverage``: the bits of the subtraction and TensorFlow's gradient-descent
    kernel on the average, on large variables too (formerly compiled alone), compiling nothing."""
    init, grads = _problem(dtype, SHAPES[size])
    var = tf.Variable(init, dtype=dtype)
    opt = MovingAverage(keras.optimizers.legacy.SGD(0.1), average_decay=0.75, jit_compile=jit_compile)
    _train(opt, var, grads, mode, fused_ops=["ApplyMovingAverage"])
    assert compiled_function_count(opt) == 0
    weights, average = tf.Variable(init, dtype=dtype), tf.Variable(init, dtype=dtype)
    rate = tf.cast(tf.constant(0.25, tf.float32), dtype)  # 1 - average_decay, as the wrapper computes it
    for grad in grads:
        tf.raw_ops.ResourceApplyGradientDescent(var=weights.handle, alpha=tf.cast(0.1, dtype), delta=grad)
        tf.raw_ops.ResourceApplyGradientDescent(var=average.handle, alpha=rate, delta=average - weights)
    np.testing.assert_array_equal(var.numpy(), weights.numpy())
    np.testing.assert_array_equal(opt.get_slot(var, "average").numpy(), average.numpy())


# name: (the op, a maker of the optimizer). Non-default hyperparameters reach every branch of
# each kernel within STEPS_ADAPTIVE steps: l1 and l2 (Yogi), weight decay, beta_2 = 0.8 so that the
# rectified steps start at step 10 (rho_t >= 5), AdaBelief without rectification, COCOB with a small
# alpha, LAMB without decay or layer adaptation, NovoGrad's gradient averaging (after its first step).
ADAPTIVE = {
    "yogi": ("FusedApplyYogi", lambda **k: Yogi(learning_rate=0.1, beta1=0.8, beta2=0.95, epsilon=1e-2,
                                                 l1_regularization_strength=0.05, l2_regularization_strength=0.1, **k)),
    "yogi_defaults": ("FusedApplyYogi", lambda **k: Yogi(**k)),
    "adabelief": ("FusedApplyAdaBelief", lambda **k: AdaBelief(learning_rate=0.1, beta_1=0.8, beta_2=0.8,
                                                               epsilon=1e-8, weight_decay=0.05, **k)),
    "adabelief_unrectified": ("FusedApplyAdaBelief", lambda **k: AdaBelief(learning_rate=0.05, rectify=False, **k)),
    "radam": ("FusedApplyRectifiedAdam", lambda **k: RectifiedAdam(learning_rate=0.1, beta_1=0.8, beta_2=0.8,
                                                                   weight_decay=0.05, **k)),
    "radam_defaults": ("FusedApplyRectifiedAdam", lambda **k: RectifiedAdam(**k)),
    "cocob": ("FusedApplyCocob", lambda **k: COCOB(**k)),
    "cocob_alpha": ("FusedApplyCocob", lambda **k: COCOB(alpha=1.5, **k)),  # max(G + L, alpha L) takes both sides
    "proximal_adagrad": ("FusedApplyProximalAdagrad", lambda **k: ProximalAdagrad(
        learning_rate=0.5, l1_regularization_strength=0.3, l2_regularization_strength=0.1, **k)),
    "proximal_adagrad_l2": ("FusedApplyProximalAdagrad", lambda **k: ProximalAdagrad(
        learning_rate=0.5, l2_regularization_strength=0.1, **k)),
    "lamb": ("FusedLambDirection", lambda **k: LAMB(learning_rate=0.05, beta_1=0.8, beta_2=0.95, weight_decay=0.01,
                                                    **k)),
    "lamb_defaults": ("FusedLambDirection", lambda **k: LAMB(**k)),
    "lamb_not_adapted": ("FusedLambDirection", lambda **k: LAMB(weight_decay=0.01,
                                                                exclude_from_layer_adaptation=["Variable"], **k)),
    "novograd": ("FusedApplyNovoGrad", lambda **k: NovoGrad(learning_rate=0.1, beta_1=0.8, beta_2=0.9,
                                                            weight_decay=0.05, grad_averaging=True, **k)),
    "novograd_defaults": ("FusedApplyNovoGrad", lambda **k: NovoGrad(**k)),
    "conditional_gradient": ("FusedApplyConditionalGradient", lambda **k: ConditionalGradient(
        learning_rate=0.9, lambda_=0.5, **k)),
    "conditional_gradient_nuclear": ("FusedApplyConditionalGradient", lambda **k: ConditionalGradient(
        learning_rate=0.9, lambda_=0.5, ord="nuclear", **k)),
    "lion": ("FusedApplyLion", lambda **k: Lion(learning_rate=0.1, beta_1=0.8, beta_2=0.95, weight_decay=0.5, **k)),
    "lion_defaults": ("FusedApplyLion", lambda **k: Lion(**k)),
    "lion_decay_unscaled": ("FusedApplyLion", lambda **k: Lion(weight_decay=0.05, scale_weight_decay_by_lr=False,
                                                               **k)),
    "lion_not_decayed": ("FusedApplyLion", lambda **k: Lion(weight_decay=0.05, exclude_from_weight_decay=["Variable"],
                                                            **k)),
}
STEPS_ADAPTIVE = 12


def _adaptive_states(make, dtype, shape, mode, fused_ops):
    rng = np.random.RandomState(1)
    var = tf.Variable(rng.randn(*shape), dtype=dtype)
    grads = [tf.constant(rng.randn(*shape), dtype=dtype) for _ in range(STEPS_ADAPTIVE)]
    opt = make()
    _train(opt, var, grads, mode, fused_ops)
    return [var.numpy()] + opt.get_weights()


# Small, and large with a last packet cut short (999999 elements: Rsqrt's scalar tail, after blocks
# of packets split between threads). The large variable runs the kernel once, in a tf.function with
# jit_compile off: eager calls and jit_compile=True reach the same kernel call, which the small
# variable checks in every combination.
ADAPTIVE_SHAPES = {"small": SHAPES["small"], "large": (999, 1001)}
ADAPTIVE_RUNS = {("small", "eager"): (True, False), ("small", "function"): (True, False),
                 ("large", "function"): (False,)}


@pytest.mark.parametrize("size, mode", sorted(ADAPTIVE_RUNS), ids="-".join)
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("name", sorted(ADAPTIVE))
def test_adaptive_kernels_give_the_bits_of_the_rules_own_step(name, dtype, size, mode, monkeypatch):
    op, make = ADAPTIVE[name]
    with monkeypatch.context() as patch:  # the library's kernels off: the rule's step in plain ops
        patch.setattr(kernels, "op", lambda var, name: None)
        expected = _adaptive_states(lambda: make(jit_compile=False), dtype, ADAPTIVE_SHAPES[size], mode, [])
    for jit_compile in ADAPTIVE_RUNS[size, mode]:  # the kernel is the dense step either way, on this CPU
        ours = _adaptive_states(functools.partial(make, jit_compile=jit_compile), dtype, ADAPTIVE_SHAPES[size], mode,
                                [op])
        assert len(ours) == len(expected)
        for i, (a, b) in enumerate(zip(ours, expected)):
            np.testing.assert_array_equal(_bits(a), _bits(b), err_msg=f"{name}, jit_compile={jit_compile}: array {i} (0: the "
                                                        "variable, 1: iterations, then the slots)")


@pytest.mark.parametrize("name", sorted(ADAPTIVE))
def test_adaptive_kernels_carry_nan_inf_and_zero_gradients_as_the_rules_own_step(name, monkeypatch):
    op, make = ADAPTIVE[name]
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e-30, 2.0], np.float32)

    def states(fused_ops):
        var = tf.Variable(np.linspace(-1.0, 1.0, 8), dtype=tf.float32)
        opt = make(jit_compile=False)
        _train(opt, var, [tf.constant(special[::-1]), tf.constant(special), tf.ones([8])], "function", fused_ops)
        return [var.numpy()] + opt.get_weights()

    ours = states([op])
    with monkeypatch.context() as patch:
        patch.setattr(kernels, "op", lambda var, name: None)
        expected = states([])
    for i, (a, b) in enumerate(zip(ours, expected)):
        np.testing.assert_array_equal(_bits(a), _bits(b), err_msg=f"{name}: array {i}")


@pytest.mark.parametrize("make", [
    lambda: Yogi(activation="tanh"), lambda: Yogi(beta1=0.0), lambda: AdaBelief(amsgrad=True),
    lambda: RectifiedAdam(amsgrad=True), lambda: NovoGrad(amsgrad=True)],
    ids=["yogi_tanh", "yogi_no_momentum", "adabelief_amsgrad", "radam_amsgrad", "novograd_amsgrad"])
def test_steps_the_adaptive_kernels_do_not_cover_keep_the_rules_own_step(make):
    var = tf.Variable(tf.ones([4, 3]))
    opt = make()
    step = tf.function(lambda g: opt.apply_gradients([(g, var)]) and None)
    assert not _uses_fused_kernel(step, tf.ones([4, 3]), fused_ops=[op for op, _ in ADAPTIVE.values()])


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16], ids=lambda d: d.name)
def test_16_bit_variables_keep_the_adaptive_rules_own_step(dtype):
    assert all(kernels.op(tf.Variable(tf.ones([2], dtype)), op) is None for op, _ in ADAPTIVE.values())
    assert kernels.op(tf.Variable(tf.ones([2], tf.float32)), "FusedApplyYogi") is not None


def _sparse_states(make, dtype, index_dtype, rows, mode, fused_ops):
    """``STEPS_ADAPTIVE`` sparse steps on a ``rows``-row table: a quarter of the rows each step,
    some of them twice (summed before the step), the first step's rows touched again later."""
    rng = np.random.RandomState(2)
    var = tf.Variable(rng.randn(rows, 5), dtype=dtype)
    grads = []
    for _ in range(STEPS_ADAPTIVE):
        touched = rng.choice(rows, rows // 4, replace=False)
        indices = np.concatenate([touched, touched[:3]])
        grads.append(tf.IndexedSlices(tf.constant(rng.randn(len(indices), 5), dtype), tf.constant(indices, index_dtype),
                                      tf.constant([rows, 5], index_dtype)))
    opt = make()
    _train(opt, var, grads, mode, fused_ops)
    return [var.numpy()] + opt.get_weights()


LAZY = {"lazy_adam": lambda: LazyAdam(learning_rate=0.1, beta_1=0.8, beta_2=0.95, epsilon=1e-3),
        "lazy_adamw": lambda: AdamW(0.05, learning_rate=0.1, beta_1=0.8, lazy=True)}


@pytest.mark.parametrize("rows, mode", [(40, "eager"), (40, "function"), (200_000, "function")], ids=str)
@pytest.mark.parametrize("index_dtype", [tf.int32, tf.int64], ids=lambda d: d.name)
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("name", sorted(LAZY))
def test_the_lazy_sparse_kernel_gives_the_bits_of_the_rules_own_step(name, dtype, index_dtype, rows, mode,
                                                                     monkeypatch):
    """TFA's LazyAdam gathers, computes and scatters each row in plain ops (``update_sparse``, whose
    bits are TFA's: ``catalogue/test_adamlike_tfa.py``); the kernel reads and writes each row once.
    The large table spreads its 50000 rows a step over the thread pool."""
    with monkeypatch.context() as patch:
        patch.setattr(kernels, "op", lambda var, name: None)
        expected = _sparse_states(LAZY[name], dtype, index_dtype, rows, mode, [])
    ours = _sparse_states(LAZY[name], dtype, index_dtype, rows, mode, ["FusedSparseApplyLazyAdam"])
    assert len(ours) == len(expected)
    for i, (a, b) in enumerate(zip(ours, expected)):
        np.testing.assert_array_equal(_bits(a), _bits(b), err_msg=f"{name}: array {i} (0: the variable, 1: iterations, then slots)")


SPARSE = {"adam": (lambda: Adam(learning_rate=0.1, beta_1=0.8, beta_2=0.95, epsilon=1e-3), "FusedSparseApplyAdam"),
          "adamw": (lambda: AdamW(0.05, learning_rate=0.1, beta_1=0.8), "DecayedSparseApplyAdam"),
          # jit_compile=False: without the kernels, the average of the large table is TFA's ops, not compiled
          # (XLA may contract it to a fused multiply-add)
          "moving_average_adam": (lambda: MovingAverage(Adam(0.1, beta_2=0.95), average_decay=0.7, jit_compile=False),
                                  "SparseApplyAdamAverage"),
          "moving_average_adamw": (lambda: MovingAverage(AdamW(0.05, 0.1), average_decay=0.7, dynamic_decay=True,
                                                         jit_compile=False), "DecayedSparseApplyAdamAverage")}


@pytest.mark.parametrize("rows, mode", [(40, "eager"), (40, "function"), (200_000, "function")], ids=str)
@pytest.mark.parametrize("index_dtype", [tf.int32, tf.int64], ids=lambda d: d.name)
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("name", sorted(SPARSE))
def test_the_sparse_adam_kernel_gives_the_bits_of_the_decay_the_rules_own_step_and_the_average(
        name, dtype, index_dtype, rows, mode, monkeypatch):
    """Keras's sparse Adam (``update_sparse``, not lazy) decays every row's moments and moves every
    row, an op per operation over the whole table; TFA's sparse decay gathers and scatters the
    touched rows, and the average takes its own pass. The kernel does it all in one pass over the
    table, in parallel over row ranges, a repeated index's rows summed first as in the ops."""
    make, op = SPARSE[name]
    with monkeypatch.context() as patch:
        patch.setattr(kernels, "op", lambda var, name: None)
        expected = _sparse_states(make, dtype, index_dtype, rows, mode, [])
    ours = _sparse_states(make, dtype, index_dtype, rows, mode, [op])
    assert len(ours) == len(expected) > 3
    for i, (a, b) in enumerate(zip(ours, expected)):
        np.testing.assert_array_equal(_bits(a), _bits(b), err_msg=f"{name}: array {i} (0: the variable, then weights)")


@pytest.mark.parametrize("decay", [0.0, 0.1])
def test_the_sparse_adam_kernel_adds_repeated_indices_in_order_and_decays_once_per_occurrence(decay):
    """Called directly with repeated indices (the optimizer sums them first), the kernel gives what
    the ops give on them: ``scatter_add`` adds the rows in their order, the decay's ``scatter_sub``
    subtracts the decay of the row's value before the step once per occurrence."""
    rng = np.random.RandomState(3)
    grad = tf.constant(rng.randn(5, 3), tf.float32)
    indices = tf.constant([4, 1, 4, 0, 4])
    scalars = dict(alpha=tf.constant(0.1), beta1=tf.constant(0.8), beta2=tf.constant(0.95), epsilon=tf.constant(1e-3))
    init = [rng.randn(6, 3).astype("float32"), rng.rand(6, 3).astype("float32"), rng.rand(6, 3).astype("float32")]
    var, m, v = (tf.Variable(x) for x in init)
    kernels.op(var, "DecayedSparseApplyAdam")(var=var.handle, m=m.handle, v=v.handle, grad=grad, indices=indices,
                                              decay=tf.constant(decay), **scalars)
    expected_var, expected_m, expected_v = (tf.Variable(x) for x in init)
    expected_var.scatter_sub(tf.IndexedSlices(decay * tf.gather(expected_var, indices), indices))
    expected_m.assign(expected_m * scalars["beta1"])
    expected_m.scatter_add(tf.IndexedSlices(grad * (1 - scalars["beta1"]), indices))
    expected_v.assign(expected_v * scalars["beta2"])
    expected_v.scatter_add(tf.IndexedSlices(tf.square(grad) * (1 - scalars["beta2"]), indices))
    expected_var.assign_sub(scalars["alpha"] * expected_m / (tf.sqrt(expected_v) + scalars["epsilon"]))
    for a, b in zip((var, m, v), (expected_var, expected_m, expected_v)):
        np.testing.assert_array_equal(_bits(a.numpy()), _bits(b.numpy()))


def test_the_lazy_sparse_kernel_carries_nan_inf_and_zero_gradients_as_the_rules_own_step(monkeypatch):
    special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e-30, 2.0], np.float32).reshape(4, 2)

    def states():
        var = tf.Variable(np.linspace(-1.0, 1.0, 12).reshape(6, 2), dtype=tf.float32)
        opt = LazyAdam(learning_rate=0.1)
        for values, rows in [(special, [5, 0, 2, 3]), (special[::-1], [1, 2, 3, 4]), (np.ones((4, 2)), [0, 1, 4, 5])]:
            opt.apply_gradients([(tf.IndexedSlices(tf.constant(values, tf.float32), tf.constant(rows)), var)])
        return [var.numpy()] + opt.get_weights()

    ours = states()
    with monkeypatch.context() as patch:
        patch.setattr(kernels, "op", lambda var, name: None)
        expected = states()
    for i, (a, b) in enumerate(zip(ours, expected)):
        np.testing.assert_array_equal(_bits(a), _bits(b), err_msg=f"array {i}")


@pytest.mark.parametrize("index", [-1, 6])
def test_the_lazy_sparse_kernel_refuses_an_index_out_of_range_and_changes_nothing(index):
    var, m, v = (tf.Variable(tf.fill([6, 2], x)) for x in (1.0, 0.5, 0.25))
    op = kernels.op(var, "FusedSparseApplyLazyAdam")
    scalars = dict(alpha=tf.constant(0.1), beta1=tf.constant(0.9), beta2=tf.constant(0.999), epsilon=tf.constant(1e-7))
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"indices\[1\] = {index} is not in \[0, 6\)"):
        op(var=var.handle, m=m.handle, v=v.handle, grad=tf.ones([2, 2]), indices=tf.constant([2, index]), **scalars)
    assert [x.numpy().tolist() for x in (var, m, v)] == [[[x] * 2] * 6 for x in (1.0, 0.5, 0.25)]
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"grad must hold one row of var per index, shape \[2,2\]"):
        op(var=var.handle, m=m.handle, v=v.handle, grad=tf.ones([2, 3]), indices=tf.constant([2, 3]), **scalars)


def test_lazy_adam_with_amsgrad_keeps_its_own_sparse_step():
    var = tf.Variable(tf.ones([4, 3]))
    opt = LazyAdam(amsgrad=True)
    step = tf.function(lambda g: opt.apply_gradients([(g, var)]) and None)
    grad = tf.IndexedSlices(tf.ones([2, 3]), tf.constant([0, 2]), tf.constant([4, 3]))
    assert not _uses_fused_kernel(step, grad, fused_ops=["FusedSparseApplyLazyAdam"])


_SUM_OF_SQUARES = textwrap.dedent("""
    import sys
    import numpy as np, tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[1]))
    from optimizers import kernels
    rng, differ = np.random.default_rng(0), []
    for dtype in (tf.float32, tf.float64):
        for shape in [(0,), (1,), (7,), (1025,), (8193,), (100003,), (999, 1001), (8_000_000,)]:
            x = tf.constant(rng.standard_normal(shape) * 1e3, dtype)
            ours = tf.function(kernels.op(x, "SumOfSquares"))(x).numpy()
            if ours.tobytes() != tf.reduce_sum(tf.square(x)).numpy().tobytes():
                differ.append(f"{dtype.name} {shape}")
    print(differ)
""")


@pytest.mark.parametrize("threads", ["1", "3", "16"])
def test_sum_of_squares_gives_the_bits_of_tensorflows_reduction_at_any_thread_pool_size(threads):
    """The norm of LAMB and NovoGrad: the bits of Sum over Square, which split the sum between as
    many threads as the cost model gives at the pool's size (on 8M float32 elements, 1 or 2 threads
    give other bits than 3 or more: measured), in one read of ``x``."""
    result = subprocess.run([sys.executable, "-c", _SUM_OF_SQUARES, threads],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"


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


def run_adamw(**env) -> dict:
    """Three traced AdamW steps in a process of their own with ``env``: whether a fused kernel ran,
    the weights, the RuntimeWarnings and the process's stderr (tests/test_kernel_cache.py too)."""
    import json

    result = subprocess.run([sys.executable, "-c", _FALLBACK], cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, **env})
    assert result.returncode == 0, result.stderr[-3000:]
    return {**json.loads(result.stdout.strip().splitlines()[-1]), "stderr": result.stderr}


@pytest.mark.parametrize("why", ["turned_off", "build_fails"])
def test_without_the_kernel_the_step_falls_back_with_the_same_numbers(tmp_path, why):
    env = {"OPTIMIZERS_NATIVE_KERNELS": "Off"} if why == "turned_off" else {"CXX": "/bin/false"}
    ours = run_adamw(OPTIMIZERS_KERNEL_CACHE=str(tmp_path / "cache"), **env)  # nothing built there yet
    assert not ours["fused"]
    if why == "build_fails":  # said once, with what to expect
        assert len(ours["warnings"]) == 1 and "fused kernels are not available" in ours["warnings"][0]
        assert "Building" in ours["warnings"][0] and "failed" in ours["warnings"][0]
    else:
        assert ours["warnings"] == []
    fused = run_adamw()  # the kernels this machine has built (the tests above use them)
    assert fused["fused"] and fused["warnings"] == []
    assert ours["var"] == fused["var"]
