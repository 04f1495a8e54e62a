"""Lookahead, SWA, GradientAccumulation, MultiOptimizer and AverageModelCheckpoint (both stacks).

* Step by step against numpy references written here from the papers' rules,
  around this library's Adam (whose reference, ``reference.adam``, has Keras 2's
  numbers; a sparse gradient is its densified sum): dense and sparse gradients
  (a repeated row each step, a row never touched), float32 and float64, eagerly
  and in a tf.function, with and without XLA. Hyperparameters are powers of two
  so that float32 and float64 steps see the same values.
* GradientAccumulation also equals one step on the concatenated batch
  (``model.fit``), under MirroredStrategy, with a LossScaleOptimizer in both
  orders, and, on the default stack, Keras 3's ``gradient_accumulation_steps``.
* Configs round-trip; ``.h5``, ``.keras``, SavedModel and ``tf.train.Checkpoint``
  keep the whole state (mid-period, mid-window) and training continues equally,
  around a built-in inner optimizer too.

Live TFA parity: ``test_wrappers_tfa.py`` (and ``tests/test_docs_lookahead_tfa.py``).
"""

import os

import numpy as np
import pytest
import tensorflow as tf

import optimizers
from catalogue.trajectories import scaled_step
from optimizers.callbacks_swa import AverageModelCheckpoint
from optimizers.wrappers.gradient_accumulation import GradientAccumulation
from optimizers.wrappers.lookahead import Lookahead
from optimizers.wrappers.multi_optimizer import MultiOptimizer
from optimizers.wrappers.swa import SWA

import reference
from conftest import TOLERANCE, keras

SHAPE = (5, 3)
CALLS = 7
INDICES = [[0, 2, 0], [1, 1, 3], [2, 0, 2], [3, 1, 1]]  # a repeated row each step; row 4 never touched
ADAM = dict(lr=0.125, beta_1=0.5, beta_2=0.75, epsilon=1e-7)
SGD = dict(lr=0.125, momentum=0.5)
KINDS = ["lookahead", "swa", "gradient_accumulation", "multi_optimizer"]


# ------------------------------------------------------------------------------------- references
class NumpyAdam:
    """The inner optimizer: Keras 2's Adam, one step counter, on dense gradients."""

    def __init__(self):
        self.t, self.slots = 0, {}

    def apply(self, params, grads):
        self.t += 1
        for name, grad in grads.items():
            params[name], self.slots[name] = reference.adam(params[name], grad, self.slots.get(name, {}),
                                                            step=self.t, **ADAM)


def ref_lookahead(params, calls, sync_period=3, alpha=0.5):
    inner, slow, out = NumpyAdam(), {n: p.copy() for n, p in params.items()}, []
    for t, grads in enumerate(calls, start=1):
        inner.apply(params, grads)
        if t % sync_period == 0:
            for n in params:
                slow[n] = slow[n] + alpha * (params[n] - slow[n])
                params[n] = slow[n].copy()
        out.append({**params, **{f"slow/{n}": s for n, s in slow.items()}})
    return out


def ref_swa(params, calls, start=1, period=2):
    inner, average, out = NumpyAdam(), {n: p.copy() for n, p in params.items()}, []
    for t, grads in enumerate(calls):  # t: steps taken before this one
        inner.apply(params, grads)
        if t >= start and (t - start) % period == 0:
            n = (t - start) // period
            average = {k: (a * n + params[k]) / (n + 1) for k, a in average.items()}
        out.append({**params, **{f"average/{n}": a for n, a in average.items()}})
    return out


def ref_gradient_accumulation(params, calls, steps=3):
    inner, accumulated, out = NumpyAdam(), [], []
    for grads in calls:
        accumulated.append(grads)
        if len(accumulated) == steps:
            inner.apply(params, {n: sum(g[n] for g in accumulated) / steps for n in grads})
            accumulated = []
        out.append(dict(params))
    return out


def ref_multi_optimizer(params, calls):
    adam, sgd_slots, out = NumpyAdam(), {}, []
    for grads in calls:
        adam.apply(params, {"kernel": grads["kernel"]})
        params["bias"], sgd_slots = reference.sgd(params["bias"], grads["bias"], sgd_slots, **SGD)
        out.append(dict(params))
    return out


REFERENCES = {"lookahead": ref_lookahead, "swa": ref_swa, "gradient_accumulation": ref_gradient_accumulation,
              "multi_optimizer": ref_multi_optimizer}


def ours(kind, jit_compile=True, inner="template"):
    def adam():
        if inner == "builtin":
            return keras.optimizers.legacy.Adam(ADAM["lr"], ADAM["beta_1"], ADAM["beta_2"], ADAM["epsilon"])
        return optimizers.Adam(ADAM["lr"], ADAM["beta_1"], ADAM["beta_2"], ADAM["epsilon"], jit_compile=jit_compile)

    if kind == "lookahead":
        return Lookahead(adam(), sync_period=3, slow_step_size=0.5, jit_compile=jit_compile)
    if kind == "swa":
        return SWA(adam(), start_averaging=1, average_period=2, jit_compile=jit_compile)
    if kind == "gradient_accumulation":
        return GradientAccumulation(adam(), 3, jit_compile=jit_compile)
    sgd = optimizers.SGD(SGD["lr"], momentum=SGD["momentum"], jit_compile=jit_compile)
    return MultiOptimizer(optimizer_specs=[{"optimizer": adam(), "weights": ["kernel:0"]},
                                           {"optimizer": sgd, "weights": ["bias:0"]}], jit_compile=jit_compile)


def _calls(sparse, dtype):
    rng = np.random.RandomState(1)
    calls = []
    for i in range(CALLS):
        rows = INDICES[i % len(INDICES)]
        values = rng.randn(len(rows), SHAPE[1]).astype(dtype)
        kernel = reference.densify(values, rows, SHAPE) if sparse else rng.randn(*SHAPE).astype(dtype)
        calls.append(({"kernel": kernel, "bias": rng.randn(SHAPE[1]).astype(dtype)}, (values, rows)))
    return calls


def _state(opt, kind, kernel, bias):
    out = {"kernel": kernel.numpy(), "bias": bias.numpy()}
    slot = {"lookahead": "slow", "swa": "average"}.get(kind)
    if slot:
        out.update({f"{slot}/kernel": opt.get_slot(kernel, slot).numpy(), f"{slot}/bias": opt.get_slot(bias, slot).numpy()})
    return out


@pytest.mark.parametrize("mode", ["eager", "function", "eager_xla", "function_xla"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("kind", KINDS)
def test_step_by_step_equals_numpy_reference(kind, sparse, dtype, mode):
    init = {"kernel": np.random.RandomState(0).randn(*SHAPE).astype(dtype),
            "bias": np.random.RandomState(2).randn(SHAPE[1]).astype(dtype)}
    calls = _calls(sparse, dtype)
    expected = REFERENCES[kind]({n: p.copy() for n, p in init.items()}, [c for c, _ in calls])
    opt = ours(kind, jit_compile=mode.endswith("xla"))
    kernel, bias = tf.Variable(init["kernel"], name="kernel"), tf.Variable(init["bias"], name="bias")

    def step(kernel_grad, bias_grad):
        opt.apply_gradients([(kernel_grad, kernel), (bias_grad, bias)])

    step = tf.function(step) if mode.startswith("function") else step
    for call, ((dense, (values, rows)), want) in enumerate(zip(calls, expected)):
        kernel_grad = (tf.IndexedSlices(tf.constant(values), tf.constant(rows), tf.constant(SHAPE, tf.int64))
                       if sparse else tf.constant(dense["kernel"]))
        step(kernel_grad, tf.constant(dense["bias"]))
        got = _state(opt, kind, kernel, bias)
        for name, value in want.items():
            np.testing.assert_allclose(got[name], value, err_msg=f"call {call + 1}: {name}", **TOLERANCE[tf.as_dtype(dtype)])
    assert int(opt.iterations.numpy()) == (CALLS // 3 if kind == "gradient_accumulation" else CALLS)


# ------------------------------------------------------------------------------- model.fit, save/load
RNG = np.random.RandomState(3)
X, Y = RNG.randn(32, 4).astype("float32"), RNG.randn(32, 2).astype("float32")


def _model(seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="tanh"), keras.layers.Dense(2)])


def _fit_optimizer(kind, inner, model):
    """Hyperparameters chosen so that 4 steps leave each wrapper mid-period (mid-window)."""
    def adam():
        return keras.optimizers.legacy.Adam(0.01) if inner == "builtin" else optimizers.Adam(0.01)

    if kind == "lookahead":
        return Lookahead(adam(), sync_period=3, slow_step_size=0.5)
    if kind == "swa":
        return SWA(adam(), start_averaging=1, average_period=2)
    if kind == "gradient_accumulation":
        return GradientAccumulation(adam(), 3)
    return MultiOptimizer([(optimizers.Adam(0.01), model.layers[0]), (optimizers.SGD(0.05, momentum=0.9), model.layers[1])])


def _compiled(kind, inner, model=None):
    model = model or _model()
    model.compile(_fit_optimizer(kind, inner, model), "mse")
    return model


def _wrapper_state(model):
    opt = model.optimizer
    out = [int(opt.iterations.numpy())]
    for var in model.trainable_variables:
        for slot in ("slow", "average", "gradient_accumulator", "Adam/m", "SGD/momentum"):
            try:
                out.append(opt.get_slot(var, slot).numpy())
            except (KeyError, AttributeError):
                pass
    if isinstance(opt, GradientAccumulation):
        out.append(float(opt.accumulated_steps.numpy()))
    return out


def _assert_same(a, b):
    for x, y in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_array_equal(x, y)
    state_a, state_b = _wrapper_state(a), _wrapper_state(b)
    assert len(state_a) == len(state_b)
    for x, y in zip(state_a, state_b):
        np.testing.assert_array_equal(x, y)


CASES = [(k, i) for k in KINDS[:3] for i in ("template", "builtin")] + [("multi_optimizer", "template")]


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["h5", "keras", "savedmodel", "checkpoint"])
@pytest.mark.parametrize("kind,inner", CASES, ids=[f"{k}-{i}" for k, i in CASES])
def test_save_load_and_continue_equally(kind, inner, fmt, tmp_path):
    model = _compiled(kind, inner)
    model.fit(X, Y, batch_size=8, epochs=1, shuffle=False, verbose=0)  # 4 steps: mid-period, mid-window
    if kind == "gradient_accumulation":
        assert float(model.optimizer.accumulated_steps.numpy()) == 1.0
    if fmt == "checkpoint":
        path = tf.train.Checkpoint(model=model, optimizer=model.optimizer).save(str(tmp_path / "ckpt"))
        restored = _compiled(kind, inner, keras.models.clone_model(model))
        tf.train.Checkpoint(model=restored, optimizer=restored.optimizer).restore(path)
    else:
        path = str(tmp_path / {"h5": "m.h5", "keras": "m.keras", "savedmodel": "m"}[fmt])
        model.save(path)
        restored = keras.models.load_model(path)  # no custom_objects: the classes are registered
        assert type(restored.optimizer) is type(model.optimizer)
        assert restored.optimizer.get_config() == model.optimizer.get_config()
    for copy in (model, restored):
        copy.fit(X, Y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    _assert_same(model, restored)


@pytest.mark.parametrize("kind,inner", CASES, ids=[f"{k}-{i}" for k, i in CASES])
def test_config_round_trip(kind, inner):
    opt = _fit_optimizer(kind, inner, _model())
    config = opt.get_config()
    again = type(opt).from_config(config)
    assert again.get_config() == config
    assert type(again).from_config(keras.optimizers.serialize(again)["config"]).get_config() == config


@pytest.mark.parametrize("kind", KINDS)
def test_fit_under_mirrored_strategy_equals_single_device(kind, mirrored):
    single = _compiled(kind, "template")
    single.fit(X, Y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    with mirrored.scope():
        distributed = _compiled(kind, "template")
    distributed.fit(X, Y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    for a, b in zip(single.get_weights(), distributed.get_weights()):
        np.testing.assert_allclose(a, b, **TOLERANCE[tf.float32])
    assert int(distributed.optimizer.iterations.numpy()) == int(single.optimizer.iterations.numpy())


@pytest.mark.parametrize("kind", ["gradient_accumulation", "multi_optimizer"])
def test_sparse_gradients_under_mirrored_strategy_equal_single_device(kind, mirrored):
    rng = np.random.RandomState(6)
    tokens, targets = rng.randint(0, 6, size=(48, 3)).astype("int32"), rng.randn(48, 3, 2).astype("float32")

    def fit(strategy_scope):
        with strategy_scope:
            keras.utils.set_random_seed(0)
            model = keras.Sequential([keras.Input((3,), dtype="int32"), keras.layers.Embedding(6, 4),
                                      keras.layers.Dense(2)])
            model.compile(GradientAccumulation(optimizers.Adam(0.01), 3) if kind == "gradient_accumulation" else
                          MultiOptimizer([(optimizers.Adam(0.01), model.layers[0]), (optimizers.SGD(0.1), model.layers[1])]),
                          "mse")
        model.fit(tokens, targets, batch_size=8, epochs=1, shuffle=False, verbose=0)
        return model.get_weights()

    for a, b in zip(fit(tf.name_scope("single")), fit(mirrored.scope())):
        np.testing.assert_allclose(a, b, **TOLERANCE[tf.float32])


# ---------------------------------------------------------------------------- GradientAccumulation
@pytest.mark.parametrize("strategy", ["none", "mirrored"])
@pytest.mark.parametrize("inner", ["template", "builtin"])
def test_accumulation_equals_one_step_on_the_concatenated_batch(inner, strategy, request):
    """A mean loss: 3 micro-batches of 8 give the step of one batch of 24 (SGD with momentum)."""
    def sgd():
        return keras.optimizers.legacy.SGD(0.1, momentum=0.9) if inner == "builtin" else optimizers.SGD(0.1, momentum=0.9)

    scope = request.getfixturevalue("mirrored").scope() if strategy == "mirrored" else tf.name_scope("none")
    x, y = np.concatenate([X, X[:16]]), np.concatenate([Y, Y[:16]])  # 48 samples: 2 big steps
    with scope:
        big = _model()
        big.compile(sgd(), "mse")
        small = _model()
        small.compile(GradientAccumulation(sgd(), 3), "mse")
    big.fit(x, y, batch_size=24, epochs=1, shuffle=False, verbose=0)
    small.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(big.get_weights(), small.get_weights()):
        np.testing.assert_allclose(a, b, **TOLERANCE[tf.float32])
    assert int(small.optimizer.iterations.numpy()) == 2 and float(small.optimizer.accumulated_steps.numpy()) == 0


@pytest.mark.parametrize("order", ["lso_outside", "lso_inside"])
def test_accumulation_composes_with_loss_scale_optimizer(order):
    init = np.array([0.5, -0.25], np.float32)
    plain_var, scaled_var = tf.Variable(init), tf.Variable(init)
    plain = GradientAccumulation(optimizers.Adam(0.1), 2)
    lso = keras.mixed_precision.LossScaleOptimizer
    if order == "lso_outside":
        scaled = lso(GradientAccumulation(optimizers.Adam(0.1), 2), dynamic=False, initial_scale=8.0)
    else:
        scaled = GradientAccumulation(lso(optimizers.Adam(0.1), dynamic=False, initial_scale=8.0), 2)
    for step in range(5):
        grad = tf.constant([step + 1.0, -2.0])
        plain.apply_gradients([(grad, plain_var)])
        scaled_step(scaled, scaled_var, grad, scaled)
        np.testing.assert_array_equal(scaled_var.numpy(), plain_var.numpy())
    assert int(scaled.iterations.numpy()) == int(plain.iterations.numpy()) == 2


def test_loss_scale_optimizer_around_accumulation_in_fit_under_mirrored(mirrored):
    plain = _model()
    plain.compile(GradientAccumulation(optimizers.SGD(0.1), 2), "mse")
    plain.fit(X, Y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    with mirrored.scope():
        scaled = _model()
        scaled.compile(keras.mixed_precision.LossScaleOptimizer(GradientAccumulation(optimizers.SGD(0.1), 2)), "mse")
    scaled.fit(X, Y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(plain.get_weights(), scaled.get_weights()):
        np.testing.assert_allclose(a, b, **TOLERANCE[tf.float32])


@pytest.mark.parametrize("reduction", ["mean", "max"])
def test_overwrite_with_gradient_variables_combine_micro_steps_like_replicas(reduction):
    """An OverwriteWithGradient variable takes the mean (or maximum) of its micro-batch values, once per
    step; it is never summed. Frozen variables take no part."""
    weight, stat, frozen = tf.Variable([1.0, 2.0]), tf.Variable([0.0, 0.0]), tf.Variable([3.0])
    optimizers.set_updater(stat, optimizers.OverwriteWithGradient(reduction))
    optimizers.set_updater(frozen, optimizers.Frozen())
    opt = GradientAccumulation(optimizers.SGD(0.5), 3)
    values = [np.array([1.0, -4.0]), np.array([3.0, -1.0]), np.array([2.0, -2.0])]
    for k, value in enumerate(values):
        opt.apply_gradients([(tf.constant([1.0, 1.0]), weight), (tf.constant(value, tf.float32), stat),
                             (tf.constant([1.0]), frozen)])
        if k < 2:
            np.testing.assert_array_equal(stat.numpy(), [0.0, 0.0])  # unchanged until the step
    want = np.mean(values, axis=0) if reduction == "mean" else np.max(values, axis=0)
    np.testing.assert_allclose(stat.numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(weight.numpy(), [0.5, 1.5], rtol=1e-6)
    np.testing.assert_array_equal(frozen.numpy(), [3.0])
    with pytest.raises(KeyError):
        opt.get_slot(frozen, "gradient_accumulator")


@pytest.mark.default_stack_only
@pytest.mark.parametrize("rule", ["sgd_momentum", "adam", "overwrite_max"])
def test_accumulation_equals_keras3_gradient_accumulation_steps(rule):
    import keras as keras3

    rng = np.random.RandomState(4)
    init = rng.rand(3, 2).astype("float32")
    grads = [rng.rand(3, 2).astype("float32") for _ in range(7)]  # positive: Keras 3 takes max(values, 0)
    if rule == "adam":
        theirs_opt, ours_inner = keras3.optimizers.Adam(0.1, gradient_accumulation_steps=3), optimizers.Adam(0.1)
    else:
        theirs_opt = keras3.optimizers.SGD(0.1, momentum=0.9, gradient_accumulation_steps=3)
        ours_inner = optimizers.SGD(0.1, momentum=0.9)
    theirs, mine = keras3.Variable(init), tf.Variable(init)
    if rule == "overwrite_max":
        theirs.overwrite_with_gradient = True
        optimizers.set_updater(mine, optimizers.OverwriteWithGradient("max"))
    ours_opt = GradientAccumulation(ours_inner, 3)
    # Keras 3's Adam rounds differently from Keras 2's (measured: 7e-7 per step on these values, without
    # accumulation too); SGD and the overwrite agree to float32 rounding.
    tolerance = dict(rtol=1e-5, atol=1e-5) if rule == "adam" else TOLERANCE[tf.float32]
    for call, grad in enumerate(grads):
        theirs_opt.apply_gradients([(tf.constant(grad), theirs)])
        ours_opt.apply_gradients([(tf.constant(grad), mine)])
        np.testing.assert_allclose(mine.numpy(), np.asarray(theirs.value), err_msg=f"call {call + 1}", **tolerance)
    assert int(ours_opt.iterations.numpy()) == int(theirs_opt.iterations.numpy()) == 2


def test_accumulation_counts_and_schedules_read_applied_steps():
    """The inner optimizer's learning-rate schedule sees the steps taken (0, 1, ...), not the calls."""
    schedule = keras.optimizers.schedules.PiecewiseConstantDecay([0], [1.0, 0.5])  # step 0: 1.0, then 0.5
    var, opt = tf.Variable([0.0]), GradientAccumulation(optimizers.SGD(schedule), 2)
    for _ in range(4):
        opt.apply_gradients([(tf.constant([1.0]), var)])
    np.testing.assert_allclose(var.numpy(), [-1.5])  # 1.0 * mean(1, 1), then 0.5 * mean(1, 1)
    assert int(opt.iterations.numpy()) == 2


def _skipping_run(calls, mode, strategy, sparse, nested, skip=True):
    """``GradientAccumulation(SGD(skip_non_finite=skip), 2)`` (around a MovingAverage around it if
    ``nested``), one call per gradient of ``calls``: the state after each call (the weights, then the
    optimizer's variables but ``skipped_steps``), and ``skipped_steps``."""
    with strategy.scope():
        table = tf.Variable(np.arange(8, dtype=np.float32).reshape(4, 2))
        inner = optimizers.SGD(0.25, momentum=0.5, skip_non_finite=skip)
        opt = GradientAccumulation(optimizers.MovingAverage(inner, average_decay=0.5) if nested else inner, 2)

    def call(values):  # rows 0, 2, 0 (sparse: row 0 repeated) or a dense (4, 2) gradient
        grad = (tf.IndexedSlices(values[:3], tf.constant([0, 2, 0]), tf.constant([4, 2])) if sparse else values)
        opt.apply_gradients([(grad, table)])

    def step(values):
        strategy.run(call, args=(values,))

    step = tf.function(step) if mode == "function" else step
    states = []
    for values in calls:  # each replica's gradient (eagerly, Keras' all-reduce needs one per replica device)
        step(strategy.experimental_distribute_values_from_function(lambda _, v=values: tf.constant(v, tf.float32)))
        states.append([v.numpy().copy() for v in [table] + opt.variables() if "skipped_steps" not in v.name])
    return states, int(inner.skipped_steps.numpy()) if skip else None


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("strategy", ["none", "mirrored"])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("nested", [False, True], ids=["sgd", "moving_average"])
def test_accumulation_skips_a_non_finite_call_when_the_inner_optimizer_skips(nested, sparse, strategy, mode, request):
    """good, NaN, good, good: the NaN call changes nothing (the accumulators and accumulated_steps
    included) and counts one skipped step; then the run equals good, good, good bit for bit (the
    window keeps its first micro-batch), and good, good, good without skip_non_finite."""
    strategy = request.getfixturevalue("mirrored") if strategy == "mirrored" else tf.distribute.get_strategy()
    rng = np.random.RandomState(3)
    good = [rng.randn(4, 2) for _ in range(3)]
    bad = good[1].copy()
    bad[0, 1], bad[1, 0] = np.nan, np.inf
    with_bad, skips = _skipping_run([good[0], bad, good[1], good[2]], mode, strategy, sparse, nested)
    plain, plain_skips = _skipping_run(good, mode, strategy, sparse, nested)
    unchecked, _ = _skipping_run(good, mode, strategy, sparse, nested, skip=False)
    assert (skips, plain_skips) == (1, 0)
    assert len(with_bad[0]) == len(with_bad[1])
    for before, after in zip(with_bad[0], with_bad[1]):
        np.testing.assert_array_equal(after, before)
    for got, want in zip(with_bad[:1] + with_bad[2:] + plain, plain + unchecked):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
    assert [float(state[2]) for state in plain] == [1.0, 0.0, 1.0]  # accumulated_steps: one step taken


# -------------------------------------------------------------------------------------- SWA, callback
def test_swa_averages_float64_and_float16_variables():
    """TFA's SWA mixes a float32 count into the average and raises on these dtypes (pinned live in
    test_wrappers_tfa.py); here each is the mean of the snapshots."""
    for dtype in ("float64", "float16"):
        var = tf.Variable(np.array([1.0, 2.0], dtype))
        opt = SWA(keras.optimizers.legacy.SGD(1.0), start_averaging=0, average_period=1)
        snapshots = []
        for step in range(3):
            opt.apply_gradients([(tf.constant(np.array([step + 1.0, -1.0], dtype)), var)])
            snapshots.append(var.numpy().astype("float64"))
        np.testing.assert_allclose(opt.average_of(var).numpy().astype("float64"), np.mean(snapshots, axis=0),
                                   rtol=1e-3 if dtype == "float16" else 1e-15)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_swa_mean_of_low_precision_weights_does_not_drift_past_their_exact_counts(dtype):
    """float16 counts exactly to 2048 and bfloat16 to 256: past them, a mean computed in the
    variable's dtype drifts from weights that never move; computed in float32 it stays at them."""
    var = tf.Variable(tf.constant([1.0, 3.0], dtype))
    opt = SWA(keras.optimizers.legacy.SGD(0.0), start_averaging=0, average_period=1)

    @tf.function
    def step():
        opt.apply_gradients([(tf.ones([2], dtype), var)])

    for _ in range(300 if dtype == "bfloat16" else 2100):
        step()
    np.testing.assert_array_equal(opt.average_of(var).numpy().astype("float32"), [1.0, 3.0])


@pytest.mark.parametrize("update_weights", [False, True])
@pytest.mark.parametrize("wrapper", ["swa", "moving_average", "swa_in_loss_scale_optimizer"])
def test_average_model_checkpoint_saves_the_averages(wrapper, update_weights, tmp_path):
    def make():
        opt = (optimizers.MovingAverage(optimizers.Adam(0.05), average_decay=0.5) if wrapper == "moving_average"
               else SWA(optimizers.Adam(0.05), start_averaging=1, average_period=2))
        if wrapper.endswith("loss_scale_optimizer"):
            opt = keras.mixed_precision.LossScaleOptimizer(opt, dynamic=False, initial_scale=4.0)
        model = _model()
        model.compile(opt, "mse")
        return model

    plain, checked = make(), make()
    path = str(tmp_path / "avg-{epoch}.h5")
    callback = AverageModelCheckpoint(update_weights, path, save_weights_only=True)
    for epoch in range(2):
        plain.fit(X, Y, batch_size=8, epochs=1, shuffle=False, verbose=0)
        checked.fit(X, Y, batch_size=8, epochs=epoch + 1, initial_epoch=epoch, shuffle=False, verbose=0,
                    callbacks=[callback])
        averaging = plain.optimizer
        averaging = getattr(averaging, "inner_optimizer", averaging) if wrapper.endswith("optimizer") else averaging
        averages = [averaging.average_of(v).numpy() for v in plain.trainable_variables]
        saved = _model()
        saved.load_weights(path.format(epoch=epoch + 1))
        for got, want in zip(saved.get_weights(), averages):
            np.testing.assert_array_equal(got, want)
        if update_weights:  # training continues from the averages (TFA's behaviour)
            for var, average in zip(plain.trainable_variables, averages):
                var.assign(average)
        for a, b in zip(plain.get_weights(), checked.get_weights()):
            np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------------------------------ errors
def test_bad_arguments_name_the_argument_and_repeat_the_value():
    model = _model()
    adam = optimizers.Adam
    cases = [
        (lambda: Lookahead(adam(), slow_step_size=2.0), ValueError, r"`slow_step_size` must be in \[0.0, 1.0\]. Received: slow_step_size=2.0"),
        (lambda: SWA(adam(), start_averaging=-1), ValueError, r"`start_averaging` must be an integer >= 0. Received: start_averaging=-1"),
        (lambda: SWA(adam(), average_period=0), ValueError, r"`average_period` must be an integer >= 1. Received: average_period=0"),
        (lambda: SWA(adam(), average_period=2.5), ValueError, r"Received: average_period=2.5"),
        (lambda: GradientAccumulation(adam(), 0), ValueError, r"`accumulation_steps` must be an integer >= 1. Received: accumulation_steps=0"),
        (lambda: GradientAccumulation(adam(), True), ValueError, r"Received: accumulation_steps=True"),
        (lambda: MultiOptimizer([(_stepped(keras.optimizers.legacy.Adam()), model.layers[0])]), ValueError,
         r"optimizers_and_layers\[0\]\[0\] has taken 1 steps.*Pair a fresh one. Received: optimizers_and_layers\[0\]\[0\]=<"),
        (lambda: MultiOptimizer([(keras.optimizers.Adam(weight_decay=0.1), model.layers[0])]), ValueError,
         r"optimizers_and_layers\[0\]\[0\]: a pair's optimizer cannot take Keras 2's weight_decay.*"
         r"Received: \{'weight_decay': 0.1\}"),
        (lambda: MultiOptimizer([(_stepped(keras.optimizers.legacy.RMSprop()), model.layers[0])]), ValueError,
         r"optimizers_and_layers\[0\]\[0\] has taken 1 steps: its step counter would not be the MultiOptimizer's"),
        (lambda: MultiOptimizer([(keras.mixed_precision.LossScaleOptimizer(keras.optimizers.legacy.RMSprop()),
                                  model.layers[0])]), TypeError, r"wrap the MultiOptimizer instead"),
        (lambda: MultiOptimizer([(keras.optimizers.legacy.RMSprop(), model.layers[0])], skip_non_finite=True),
         ValueError, r"cannot skip a step \(`skip_non_finite`\).*Received: skip_non_finite=True with \['RMSprop'\]"),
        (lambda: MultiOptimizer([(Lookahead(adam()), model.layers[0])]), TypeError, r"wrap the MultiOptimizer instead"),
        (lambda: MultiOptimizer([(adam(), keras.layers.Dense(2))]), ValueError, r"optimizers_and_layers\[0\]\[1\] has no weights yet"),
        (lambda: MultiOptimizer([(adam(), model), (adam(), model.layers[1])]), ValueError, r"Weight 'dense_1/kernel:0' is in pairs 0 and 1"),
        (lambda: MultiOptimizer([(adam(), model.layers[0])], optimizer_specs=[]), ValueError, r"Give exactly one of"),
        (lambda: MultiOptimizer([adam()]), TypeError, r"optimizers_and_layers\[0\] must be an \(optimizer, layers\) pair"),
        (lambda: MultiOptimizer([(adam(), model)], clipnorm=1.0), ValueError, r"MultiOptimizer takes no clipnorm.*Received: \{'clipnorm': 1.0\}"),
        (lambda: MultiOptimizer([(adam(), model)], decay=0.1), ValueError, r"MultiOptimizer takes no decay"),
        (lambda: setattr(MultiOptimizer([(adam(), model)]), "clipvalue", 1.0), ValueError,
         r"MultiOptimizer takes no clipvalue: set it on each pair's optimizer. Received: clipvalue=1.0"),
        (lambda: Lookahead(MultiOptimizer([(adam(), model)]), global_clipnorm=1.0), ValueError,
         r"MultiOptimizer takes no global_clipnorm"),
        (lambda: MultiOptimizer([(optimizers.Adam(skip_non_finite=True), model)]), ValueError,
         r"optimizers_and_layers\[0\]\[0\] must not set `skip_non_finite`: set it on the MultiOptimizer.*"
         r"Received: skip_non_finite=True"),
        (lambda: MultiOptimizer([(optimizers.SGD(gradient_aggregator=lambda gv: gv), model)]), ValueError,
         r"must have no `gradient_aggregator`: give it to the MultiOptimizer.*Received: gradient_aggregator=<"),
        (lambda: MultiOptimizer([(keras.optimizers.legacy.Adam(), model)], weight_decay=0.1), TypeError, r"takes no weight decay"),
        (lambda: AverageModelCheckpoint("yes", "x.h5"), TypeError, r"`update_weights` must be a bool. Received: update_weights='yes'"),
    ]
    for make, error, match in cases:
        with pytest.raises(error, match=match):
            make()
    multi = MultiOptimizer([(adam(), model)])
    with pytest.raises(ValueError, match="takes no `decay_var_list`"):
        multi.apply_gradients([(tf.zeros_like(v), v) for v in model.trainable_variables], decay_var_list=[])
    accumulation = GradientAccumulation(optimizers.SGD(0.1), 2)
    stat = tf.Variable(tf.zeros([4, 2]), name="amax")
    optimizers.set_updater(stat, optimizers.OverwriteWithGradient("max"))
    with pytest.raises(ValueError, match=r"cannot combine sparse gradients by 'max': variable 'amax:0' has an updater"):
        accumulation.apply_gradients([(tf.IndexedSlices(tf.ones([1, 2]), tf.constant([0]), tf.constant([4, 2])), stat)])
    assert [w.name for w in accumulation.weights] == ["iter:0"] and not stat.numpy().any()  # no accumulator made
    accumulation.apply_gradients([(tf.ones([4, 2]), stat)])
    with pytest.raises(ValueError, match="needs gradients for the same variables at every call"):
        accumulation.apply_gradients([(tf.ones([4, 2]), stat), (tf.ones([4, 3]), model.layers[0].kernel)])
    with pytest.raises(TypeError, match="needs a model compiled with an averaging wrapper"):
        model.compile(adam(), "mse")
        model.fit(X, Y, epochs=1, verbose=0, callbacks=[AverageModelCheckpoint(False, os.devnull)])


def _stepped(optimizer):
    optimizer.apply_gradients([(tf.ones([1]), tf.Variable([0.0]))])
    return optimizer


@pytest.mark.parametrize("style", ["legacy", "new-style"])
def test_multi_optimizer_takes_built_in_keras_optimizers_with_their_numbers(style):
    """TFA's usual form, ``MultiOptimizer([(tf.keras.optimizers.Adam(...), layer), ...])``: each built-in
    becomes this library's class of its name, built from its config; each layer moves as the built-in
    alone moves it, within float32 rounding (an ulp from the legacy classes: TF 2.15's compiled AMSGrad
    step rounds one element differently; a few from Keras 2's new-style classes, whose update is
    written in another order)."""
    family = keras.optimizers.legacy if style == "legacy" else keras.optimizers

    def pairs(model):
        return [(family.Adam(0.02, beta_1=0.8, amsgrad=True), model.layers[0]),
                (family.SGD(0.05, momentum=0.9, nesterov=True, clipnorm=0.1), model.layers[1])]

    model, alone = _model(), _model()
    multi = MultiOptimizer(pairs(model))
    assert [type(spec["optimizer"]) for spec in multi.optimizer_specs] == [optimizers.Adam, optimizers.SGD]
    peers = pairs(alone)
    for step in range(4):
        x = X[8 * step:8 * step + 8]
        for net, apply in ((model, multi.apply_gradients), (alone, None)):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((net(x) - Y[8 * step:8 * step + 8]) ** 2)
            grads = tape.gradient(loss, net.trainable_variables)
            if apply is not None:
                apply(zip(grads, net.trainable_variables))
            else:
                for peer, layer in peers:
                    peer.apply_gradients([(g, v) for g, v in zip(grads, net.trainable_variables)
                                          if any(v is w for w in layer.trainable_variables)])
        for got, want in zip(model.get_weights(), alone.get_weights()):
            tolerance = TOLERANCE[tf.float32] if style == "legacy" else dict(rtol=2e-6, atol=1e-6)
            np.testing.assert_allclose(got, want, err_msg=f"step {step + 1}", **tolerance)
    restored = MultiOptimizer.from_config(multi.get_config())  # the config names our classes
    assert [type(spec["optimizer"]) for spec in restored.optimizer_specs] == [optimizers.Adam, optimizers.SGD]


def test_multi_optimizer_leaves_weights_in_no_pair_and_lets_a_variables_updater_win():
    model = _model()
    stat = model.layers[0].bias
    optimizers.set_updater(stat, optimizers.OverwriteWithGradient())
    opt = MultiOptimizer([(optimizers.SGD(1.0), model.layers[0])])  # layer 1 in no pair: unchanged (as TFA)
    before = model.get_weights()
    grads = [tf.ones_like(v) for v in model.trainable_variables]
    opt.apply_gradients(zip(grads, model.trainable_variables))
    after = model.get_weights()
    np.testing.assert_allclose(after[0], before[0] - 1.0)
    np.testing.assert_array_equal(after[1], np.ones_like(before[1]))  # overwritten with its gradient
    for a, b in zip(after[2:], before[2:]):
        np.testing.assert_array_equal(a, b)
    assert [p["weights"] for p in opt.optimizer_specs] == [["dense/kernel:0", "dense/bias:0"]]


@pytest.mark.parametrize("given", ["layers", "create_optimizer_spec"])
def test_multi_optimizer_routes_the_paired_layers_variables_not_their_names(given):
    """A nested model in no pair whose layer is named like a paired one: its weights have the paired
    weights' names, and stay unchanged (TFA, routing by name, moved them). A pair from a config
    (``optimizer_specs``) has only names: the clash is refused, naming the weight."""
    paired = keras.layers.Dense(2, name="shared_name")
    nested = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2, name="shared_name")], name="nested")
    model = keras.Sequential([keras.Input((2,)), paired, nested])
    assert [v.name for v in paired.weights] == [v.name for v in nested.weights]  # the same names
    if given == "layers":
        opt = MultiOptimizer([(optimizers.SGD(1.0), paired)])
    else:
        opt = MultiOptimizer(optimizer_specs=[MultiOptimizer.create_optimizer_spec(optimizers.SGD(1.0), paired)])
    before = model.get_weights()
    grads = [(tf.ones_like(v), v) for v in model.trainable_variables]
    if given == "create_optimizer_spec":
        with pytest.raises(ValueError, match=r"Weight 'shared_name/bias:0' of a pair names two variables of this "
                                             r"step.*Received: variables named \['shared_name/bias:0', "
                                             r"'shared_name/kernel:0'\]"):
            opt.apply_gradients(grads)
        for a, b in zip(model.get_weights(), before):
            np.testing.assert_array_equal(a, b)
        return
    opt.apply_gradients(grads)
    after = model.get_weights()
    np.testing.assert_allclose(after[0], before[0] - 1.0)
    np.testing.assert_allclose(after[1], before[1] - 1.0)
    for a, b in zip(after[2:], before[2:]):  # the nested model's: unchanged
        np.testing.assert_array_equal(a, b)


def test_multi_optimizer_pair_learning_rate_set_after_tracing_takes_effect():
    """As in TFA, where each optimizer keeps its hyperparameters in variables."""
    model = _model()
    first = optimizers.SGD(1.0)
    opt = MultiOptimizer([(first, model.layers[0]), (optimizers.SGD(0.0), model.layers[1])])
    variables = model.trainable_variables

    @tf.function
    def step():
        opt.apply_gradients([(tf.ones_like(v), v) for v in variables])

    kernel = variables[0]
    start = kernel.numpy()
    step()
    first.learning_rate = 0.25
    step()
    np.testing.assert_allclose(kernel.numpy(), start - 1.25, rtol=1e-6)


def _routed_multi(model):
    """Two pairs; the first pair's Adam moves its layer's bias by its own updater, a template SGD."""
    adam = optimizers.Adam(0.01, updaters={"bias": optimizers.SGD(0.05, momentum=0.9)})
    return MultiOptimizer([(adam, model.layers[0]), (optimizers.SGD(0.05, momentum=0.9), model.layers[1])])


def _routed_rates(model):
    """The learning-rate variables of the two pairs' optimizers and of the first pair's updater."""
    first, second = (spec["optimizer"] for spec in model.optimizer.optimizer_specs)
    return [first.learning_rate, second.learning_rate, first.updater_for(model.layers[0].bias).learning_rate]


@pytest.mark.parametrize("restore", ["before_first_step", "after_first_step"])
def test_checkpoint_keeps_the_learning_rates_set_on_routed_optimizers(restore, tmp_path):
    """``tf.train.Checkpoint`` keeps the hyperparameter variables of the optimizers a MultiOptimizer
    routes to (its pairs' and a pair's template updater's), under ``optimizer_specs[<i>]`` and
    ``updaters[<regex>]``: learning rates set during training are restored, before the first step
    (deferred) or after it, and training continues bit for bit as without the round trip."""
    model = _model()
    model.compile(_routed_multi(model), "mse")
    model.fit(X, Y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    for rate, value in zip(_routed_rates(model), (0.5, 0.25, 0.125)):  # as a callback would
        keras.backend.set_value(rate, value)
    model.fit(X, Y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    path = tf.train.Checkpoint(model=model, optimizer=model.optimizer).save(str(tmp_path / "ckpt"))
    assert {key for key, _ in tf.train.list_variables(path) if key.endswith("learning_rate/.ATTRIBUTES/VARIABLE_VALUE")} == {
        f"optimizer/{name}/learning_rate/.ATTRIBUTES/VARIABLE_VALUE"
        for name in ("optimizer_specs[0]", "optimizer_specs[1]", "optimizer_specs[0]/updaters[bias]")}

    restored = _model(seed=1)
    restored.compile(_routed_multi(restored), "mse")
    if restore == "after_first_step":
        restored.fit(X[:8], Y[:8], batch_size=8, epochs=1, shuffle=False, verbose=0)
    status = tf.train.Checkpoint(model=restored, optimizer=restored.optimizer).restore(path)
    for copy in (model, restored):
        copy.fit(X, Y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    status.assert_consumed()  # every saved value found its variable (before the first step: when it was created)
    _assert_same(model, restored)
    assert [float(r.numpy()) for r in _routed_rates(restored)] == [0.5, 0.25, 0.125]


def test_backup_and_restore_resumes_with_the_learning_rate_a_callback_set_on_a_pair(tmp_path):
    """Interrupted after a callback lowered a pair's learning rate, ``BackupAndRestore`` resumes
    with the lowered rate: the resumed run equals the uninterrupted one."""
    class LowerFirstPair(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            rate = self.model.optimizer.optimizer_specs[0]["optimizer"].learning_rate
            keras.backend.set_value(rate, keras.backend.get_value(rate) * 0.25)

    class Interrupt(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1:
                raise RuntimeError("interrupted")

    def fit(model, callbacks):
        model.fit(X, Y, batch_size=8, epochs=3, shuffle=False, verbose=0, callbacks=callbacks)

    def compiled():
        model = _model()
        model.compile(_routed_multi(model), "mse")
        return model

    uninterrupted = compiled()
    fit(uninterrupted, [LowerFirstPair()])
    backup = str(tmp_path / "backup")
    with pytest.raises(RuntimeError, match="interrupted"):
        fit(compiled(), [LowerFirstPair(), keras.callbacks.BackupAndRestore(backup), Interrupt()])
    resumed = compiled()
    fit(resumed, [LowerFirstPair(), keras.callbacks.BackupAndRestore(backup)])
    _assert_same(uninterrupted, resumed)
    assert [r.numpy() for r in _routed_rates(resumed)] == [r.numpy() for r in _routed_rates(uninterrupted)]


@pytest.mark.parametrize("style", ["legacy", "new-style"])
@pytest.mark.parametrize("in_function", [False, True], ids=["eager", "tf_function"])
def test_multi_optimizer_pair_without_an_equivalent_steps_itself_exactly(style, in_function):
    """A built-in with no class of its name here (RMSprop, Adagrad; legacy or new-style) is kept as
    given and steps its pair's weights with its own ``apply_gradients``: eagerly bit for bit as alone, its
    slots created in the first trace; ``iterations`` counts the steps once, also where every pair's
    optimizer steps itself; no two weights share a name; the config round trip keeps the built-in class."""
    family = keras.optimizers.legacy if style == "legacy" else keras.optimizers

    def pairs(model):
        return [(family.RMSprop(0.01, rho=0.8, clipnorm=0.5), model.layers[0]), (family.Adagrad(0.1), model.layers[1])]

    model, alone = _model(), _model()
    multi = MultiOptimizer(pairs(model))
    assert [type(spec["optimizer"]) for spec in multi.optimizer_specs] == [type(opt) for opt, _ in pairs(alone)]
    peers = pairs(alone)

    def step(net, x, y, apply):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((net(x) - y) ** 2)
        grads = tape.gradient(loss, net.trainable_variables)
        if apply is not None:
            apply(zip(grads, net.trainable_variables))
        else:
            for peer, layer in peers:
                peer.apply_gradients([(g, v) for g, v in zip(grads, net.trainable_variables)
                                      if any(v is w for w in layer.trainable_variables)])

    ours = tf.function(lambda x, y: step(model, x, y, multi.apply_gradients)) if in_function else (
        lambda x, y: step(model, x, y, multi.apply_gradients))
    for i in range(4):
        x, y = X[8 * i:8 * i + 8], Y[8 * i:8 * i + 8]
        ours(x, y)
        step(alone, x, y, None)
        for got, want in zip(model.get_weights(), alone.get_weights()):
            if in_function:  # a traced step rounds an element an ulp apart from the eager one
                np.testing.assert_allclose(got, want, err_msg=f"step {i + 1}", **TOLERANCE[tf.float32])
            else:
                np.testing.assert_array_equal(got, want, err_msg=f"step {i + 1}")
    assert int(multi.iterations.numpy()) == 4
    names = [var.name for var in multi.weights]  # an .h5 file stores each under its name
    assert len(set(names)) == len(names), names
    restored = MultiOptimizer.from_config(multi.get_config())
    assert [type(spec["optimizer"]) for spec in restored.optimizer_specs] == [type(opt) for opt, _ in peers]
    assert restored.get_config() == multi.get_config()


def test_multi_optimizer_pair_without_an_equivalent_resumes_from_a_checkpoint_bit_for_bit(tmp_path):
    def make(model):
        return MultiOptimizer([(optimizers.Adam(0.02), model.layers[0]),
                               (keras.optimizers.legacy.RMSprop(0.01, momentum=0.5), model.layers[1])])

    def train(model, opt, steps):
        for i in steps:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(X[8 * i:8 * i + 8]) - Y[8 * i:8 * i + 8]) ** 2)
            opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))

    model = _model()
    opt = make(model)
    train(model, opt, range(2))
    path = tf.train.Checkpoint(model=model, optimizer=opt).save(str(tmp_path / "ckpt"))
    assert any("optimizer_specs[1]/rms" in name for name, _ in tf.train.list_variables(path))
    train(model, opt, range(2, 4))
    other = _model()
    other_opt = make(other)
    tf.train.Checkpoint(model=other, optimizer=other_opt).restore(path)  # slots: when created
    train(other, other_opt, range(2, 4))
    for got, want in zip(other.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(got, want)
