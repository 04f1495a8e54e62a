"""Compiled (XLA) steps: the number of compiled functions is bounded by the signature groups
(rule, shape, dtype, options) of the variables, however the set of variables with a gradient
changes from step to step, and the compiled steps give the numbers of the plain-ops steps."""

import functools

import numpy as np
import pytest
import tensorflow as tf

import optimizers
from optimizers import compiled
from optimizers.compiled import compiled_function_count

# name, shape, dtype, how many: the "bias" variables are excluded from weight decay, an option of
# the rule, so they form groups of their own.
LAYOUT = [("kernel", (4, 3), "float32", 10), ("bias", (3,), "float32", 4), ("kernel64", (4, 3), "float64", 2)]
STEPS = 10


def _variables():
    rng = np.random.RandomState(0)
    return [tf.Variable(rng.randn(*shape).astype(dtype), name=f"{name}_{i}")
            for name, shape, dtype, count in LAYOUT for i in range(count)]


def _schedule(num_vars):
    """Per step, the gradients (``None`` for the variables left out): all at the first step, then
    random subsets, each different."""
    rng = np.random.RandomState(1)
    masks, seen = [np.ones(num_vars, bool)], set()
    while len(masks) < STEPS:
        mask = rng.rand(num_vars) < 0.6
        if mask.any() and mask.tobytes() not in seen:
            seen.add(mask.tobytes())
            masks.append(mask)
    dtypes = [dtype for _, _, dtype, count in LAYOUT for _ in range(count)]
    shapes = [shape for _, shape, _, count in LAYOUT for _ in range(count)]
    return [tuple(tf.constant(rng.randn(*s).astype(d)) if m else None for s, d, m in zip(shapes, dtypes, mask))
            for mask in masks]


def _groups():
    """The signature groups of LAYOUT: (shape, dtype, decayed)."""
    return {(shape, dtype, name != "bias") for name, shape, dtype, _ in LAYOUT}


class CompiledAdamW(optimizers.AdamW):
    """AdamW without its fused kernel: the compiled step every rule without a kernel takes."""

    def dense_kernel(self, var, options):
        return None


class CompiledMovingAverage(optimizers.MovingAverage):
    """MovingAverage without its kernels (TensorFlow's, and the library's average, alone or in the
    inner Adam's): the compiled after_step every wrapper without one takes."""

    def after_kernel(self, var):
        return None

    def after_step_as_average(self, var):
        return None


def _make(kind, jit_compile):
    if kind == "ma_keras_adam":  # the average's compiled step runs after the built-in's step, in its own chunks
        inner = optimizers.keras.optimizers.legacy.Adam(0.05)
        return CompiledMovingAverage(inner, average_decay=0.8, jit_compile=jit_compile)
    if kind == "kernels":  # AdamW's and the average's fused kernels: nothing to compile
        adamw = optimizers.AdamW(weight_decay=0.01, learning_rate=0.05, exclude_from_weight_decay=["bias"],
                                 jit_compile=jit_compile)
        return optimizers.MovingAverage(adamw, average_decay=0.8, jit_compile=jit_compile)
    adamw = CompiledAdamW(weight_decay=0.01, learning_rate=0.05, exclude_from_weight_decay=["bias"],
                          jit_compile=jit_compile)
    # Averaged ("ma_adamw"), the average is fused into the compiled step of each chunk.
    return adamw if kind == "compiled_adamw" else CompiledMovingAverage(adamw, average_decay=0.8,
                                                                        jit_compile=jit_compile)


def _train(kind, jit_compile, in_function):
    variables = _variables()
    optimizer = _make(kind, jit_compile)

    def step(grads):
        optimizer.apply_gradients([(g, v) for g, v in zip(grads, variables) if g is not None])

    if in_function:
        step = tf.function(step)  # one trace per pattern of None gradients
    for grads in _schedule(len(variables)):
        step(grads)
    averages = [optimizer.average_of(v) for v in variables] if kind != "compiled_adamw" else []
    return optimizer, [v.numpy() for v in variables], [a.numpy() for a in averages]


@functools.cache
def _plain(kind):
    """The plain-ops (``jit_compile=False``) run, eager: the numbers the compiled runs must give."""
    _, values, averages = _train(kind, False, False)
    return values, averages


@pytest.mark.parametrize("in_function", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("kind", ["compiled_adamw", "ma_adamw", "ma_keras_adam"])
def test_compiled_function_count_is_bounded_by_signature_groups(kind, in_function):
    optimizer, values, averages = _train(kind, True, in_function)
    # A template optimizer: at most len(CHUNK_SIZES) functions per group, a wrapper's after_step
    # fused into them. Around a built-in, the wrapper's own: len(CHUNK_SIZES) per (shape, dtype).
    if kind == "ma_keras_adam":
        bound = len({(shape, dtype) for _, shape, dtype, _ in LAYOUT}) * len(compiled.CHUNK_SIZES)
    else:
        bound = len(_groups()) * len(compiled.CHUNK_SIZES)
    count = compiled_function_count(optimizer)
    assert 0 < count <= bound
    # Keyed by every subset, as before this bound, the cache would have grown past it.
    assert len({tuple(g is None for g in grads) for grads in _schedule(len(values))}) > bound

    # The same numbers as the plain-ops steps (XLA may fuse a multiply and an add: float32 tolerance).
    plain_values, plain_averages = _plain(kind)
    for ours, plain in zip(values + averages, plain_values + plain_averages):
        tol = 1e-6 if ours.dtype == np.float32 else 1e-12
        np.testing.assert_allclose(ours, plain, rtol=tol, atol=tol)


@pytest.mark.parametrize("in_function", [False, True], ids=["eager", "tf_function"])
def test_fused_kernels_compile_nothing_and_give_the_plain_numbers_exactly(in_function):
    """MovingAverage(AdamW) on small variables: AdamW's decay and Adam kernels, then the
    average's kernel, with jit_compile=True, are the plain-ops steps bit for bit."""
    optimizer, values, averages = _train("kernels", True, in_function)
    assert compiled_function_count(optimizer) == 0
    plain_values, plain_averages = _plain("kernels")
    for ours, plain in zip(values + averages, plain_values + plain_averages):
        np.testing.assert_array_equal(ours, plain)


def test_a_wrapper_compiles_only_shapes_with_many_variables():
    """Shapes with fewer than AFTER_KERNEL_MAX_GROUP variables take the average's kernel; a
    shape with more compiles its chunks (a chunk of 8 and a chunk of 1: two functions)."""
    from optimizers.execution import AFTER_KERNEL_MAX_GROUP

    shapes = [(2,)] * (AFTER_KERNEL_MAX_GROUP + 1) + [(3,)] * 3
    results = []
    for jit_compile in (True, False):
        rng = np.random.RandomState(0)
        variables = [tf.Variable(rng.randn(*shape).astype("float32")) for shape in shapes]
        optimizer = optimizers.MovingAverage(optimizers.keras.optimizers.legacy.Adam(0.05), average_decay=0.8,
                                             jit_compile=jit_compile)
        for _ in range(3):
            optimizer.apply_gradients([(tf.constant(rng.randn(*v.shape).astype("float32")), v) for v in variables])
        results.append((compiled_function_count(optimizer), [optimizer.average_of(v).numpy() for v in variables]))
    (count, averages), (plain_count, plain_averages) = results
    assert (count, plain_count) == (len(compiled.CHUNK_SIZES), 0)
    for ours, plain in zip(averages, plain_averages):
        np.testing.assert_allclose(ours, plain, rtol=1e-6, atol=1e-6)


def test_count_of_a_builtin_optimizer_is_zero():
    var = tf.Variable([1.0])
    optimizer = optimizers.keras.optimizers.legacy.Adam(0.1)
    optimizer.apply_gradients([(tf.constant([1.0]), var)])
    assert compiled_function_count(optimizer) == 0


def test_chunks_split_a_group_greedily():
    sizes = compiled.chunks(2 * max(compiled.CHUNK_SIZES) + 3)
    assert sum(sizes) == 2 * max(compiled.CHUNK_SIZES) + 3
    assert set(sizes) <= set(compiled.CHUNK_SIZES) and sizes == sorted(sizes, reverse=True)
    assert compiled.chunks(0) == []
