"""compile + fit, a custom loop in tf.function, XLA, mixed precision, clipping: every optimizer of the table."""

import numpy as np
import pytest
import tensorflow as tf

from integration.optimizers_under_test import BATCH, IDS, OPTIMIZERS, batches, case_model, data, train_step
from optimizers import keras


def _fit(case, epochs, optimizer=None, **compile_kwargs):
    net = case_model(case)
    net.compile(optimizer=optimizer or case.make(), loss="mse", **compile_kwargs)
    x, y = data()
    history = net.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0)
    return net, history.history["loss"]


@pytest.mark.parametrize("case", OPTIMIZERS, ids=IDS)
def test_compile_fit_loss_falls(case):
    _, losses = _fit(case, epochs=4)
    assert np.all(np.isfinite(losses))
    assert losses[-1] < 0.9 * losses[0], losses


@pytest.mark.parametrize("case", OPTIMIZERS, ids=IDS)
def test_custom_loop_in_tf_function_equals_eager(case):
    """The same 6 steps traced once in tf.function and run eagerly: same weights (float32 rounding only)."""
    x, y = data()
    results = []
    for wrap in (tf.function, lambda f: f):
        net, opt = case_model(case), case.make()
        step = wrap(train_step(net, opt))
        losses = [float(step(a, b)) for a, b in batches(x, y, 6)]
        results.append((net.get_weights(), losses, int(opt.iterations.numpy())))
    (traced, traced_losses, traced_iters), (eager, _, eager_iters) = results
    assert traced_iters == eager_iters == case.steps(6)
    assert traced_losses[-1] < traced_losses[0]
    for a, b in zip(traced, eager):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", OPTIMIZERS, ids=IDS)
def test_jit_compile_equals_no_xla(case):
    """compile(jit_compile=True) vs False after 2 epochs (8 steps). Tolerance rtol=1e-5, atol=1e-6:
    XLA fuses and reorders float32 arithmetic (e.g. multiply-add), nothing more.

    A built-in Keras optimizer without an XLA kernel for the embedding's sparse update
    (``case.sparse_xla`` False) cannot run under XLA: the wrapper must fail exactly as that
    optimizer does alone, with Keras's error."""
    if not case.sparse_xla:
        for optimizer in (case.make().inner_optimizer, case.make()):
            with pytest.raises(tf.errors.InvalidArgumentError, match="No registered 'ResourceSparseApplyKerasMomentum'"):
                _fit(case, epochs=1, optimizer=optimizer, jit_compile=True)
        return
    with_xla, _ = _fit(case, epochs=2, jit_compile=True)
    without, _ = _fit(case, epochs=2, jit_compile=False)
    for a, b in zip(with_xla.get_weights(), without.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", OPTIMIZERS, ids=IDS)
def test_loss_scale_optimizer_under_mixed_float16(case):
    """LossScaleOptimizer calls apply_gradients(..., experimental_aggregate_gradients=False)."""
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        net = case_model(case)
        opt = keras.mixed_precision.LossScaleOptimizer(case.make())
        net.compile(optimizer=opt, loss="mse")
        x, y = data()
        losses = net.fit(x, y, batch_size=BATCH, epochs=3, shuffle=False, verbose=0).history["loss"]
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0], losses
    assert net.layers[-1].kernel.dtype == tf.float32  # variables stay float32 under the policy
    assert all(np.all(np.isfinite(w)) for w in net.get_weights())


def _clip_by_norm(g, norm):
    n = np.sqrt(np.sum(g * g))
    return g * norm / n if n > norm else g


@pytest.mark.parametrize("kind", ["clipvalue", "clipnorm", "global_clipnorm"])
def test_clipping_equals_hand_computation(kind):
    """SGD (no momentum, lr 0.5), two ordinary variables and one overwrite variable
    (exempt from clipping); expected values by numpy."""
    import optimizers
    from optimizers import SGD

    limit = 0.3
    w0 = np.array([1.0, -2.0, 3.0], "float32")
    b0 = np.array([0.5], "float32")
    gw = np.array([0.4, -0.1, 0.9], "float32")
    gb = np.array([-0.7], "float32")
    gs = np.array([5.0, -6.0], "float32")
    w, b, stat = tf.Variable(w0), tf.Variable(b0), tf.Variable([0.0, 0.0])
    opt = SGD(0.5, **{kind: limit}, updaters={stat.ref(): optimizers.OverwriteWithGradient()})
    opt.apply_gradients([(tf.constant(gw), w), (tf.constant(gb), b), (tf.constant(gs), stat)])
    if kind == "clipvalue":
        cw, cb = np.clip(gw, -limit, limit), np.clip(gb, -limit, limit)
    elif kind == "clipnorm":
        cw, cb = _clip_by_norm(gw, limit), _clip_by_norm(gb, limit)
    else:
        total = np.sqrt(np.sum(gw * gw) + np.sum(gb * gb))
        cw, cb = gw * limit / total, gb * limit / total
    np.testing.assert_allclose(w.numpy(), w0 - 0.5 * cw, rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), b0 - 0.5 * cb, rtol=1e-6)
    np.testing.assert_array_equal(stat.numpy(), gs)  # not clipped
