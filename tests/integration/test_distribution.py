"""The real distribution engine: MirroredStrategy on two logical CPU devices equals one device with the
same global batch; MultiWorkerMirroredStrategy with two worker processes ends with identical weights on
both; the overwrite updater's reductions (mean / max, never sum) hold under both."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import optimizers
from integration.optimizers_under_test import BATCH, IDS, OPTIMIZERS, case_model, data
from optimizers import keras

from conftest import free_port

WORKER = os.path.join(os.path.dirname(__file__), "mwms_worker.py")


@pytest.mark.parametrize("case", OPTIMIZERS, ids=IDS)
def test_mirrored_two_devices_equals_one_device(mirrored, case):
    """compile + fit, global batch 8 (4 per replica), 8 steps. Tolerance rtol=1e-5, atol=1e-6: the
    cross-replica sum adds the gradient in a different order."""
    x, y = data()
    weights = []
    for strategy in (mirrored, tf.distribute.get_strategy()):
        with strategy.scope():
            net = case_model(case, seed=3)
            net.compile(optimizer=case.make(), loss="mse")
        net.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0)
        assert int(net.optimizer.iterations.numpy()) == case.steps(8)
        weights.append(net.get_weights())
    for a, b in zip(*weights):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", OPTIMIZERS, ids=IDS)
def test_mirrored_loss_scale_optimizer_equals_one_device(mirrored, case):
    """The same with a ``LossScaleOptimizer`` around the entry (what ``compile`` makes under
    ``mixed_float16``), whose cond takes the step's result: one value, not one per replica. The
    model stays in float32, so the tolerance stays that of the summation order (float16 layers
    would round each replica's half batch its own way, which Adam-like rules amplify)."""
    x, y = data()
    weights = []
    for strategy in (mirrored, tf.distribute.get_strategy()):
        with strategy.scope():
            net = case_model(case, seed=3)
            net.compile(optimizer=keras.mixed_precision.LossScaleOptimizer(case.make()), loss="mse")
        net.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
        assert int(net.optimizer.iterations.numpy()) == case.steps(4)
        weights.append(net.get_weights())
    for a, b in zip(*weights):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("loss_scale", [False, True], ids=["alone", "loss_scale_optimizer"])
@pytest.mark.parametrize("wrapped", [False, True], ids=["adam", "moving_average"])
def test_skip_non_finite_under_mirrored_strategy_and_a_loss_scale_optimizer(mirrored, wrapped, loss_scale):
    """A step with a NaN gradient is skipped and counted, on one device and under MirroredStrategy,
    alone and inside a LossScaleOptimizer (fixed scale 1: the optimizer's own skip is what acts);
    the other steps give the bits of a run that never saw the bad one."""
    good, bad = np.array([1.0, -2.0], np.float32), np.array([np.nan, 1.0], np.float32)

    def run(strategy, grads):
        with strategy.scope():
            var = tf.Variable([1.0, 2.0])
            inner = optimizers.Adam(0.1, skip_non_finite=True)
            opt = optimizers.MovingAverage(inner) if wrapped else inner
            if loss_scale:
                opt = keras.mixed_precision.LossScaleOptimizer(opt, dynamic=False, initial_scale=1.0)

        @tf.function
        def step(grad):
            def replica_step():  # each replica's share; the sum over replicas is `grad` exactly
                share = grad / tf.distribute.get_replica_context().num_replicas_in_sync
                opt.apply_gradients([(share, var)])

            strategy.run(replica_step)

        for grad in grads:
            step(tf.constant(grad))
        return var.numpy(), int(inner.iterations.numpy()), int(inner.skipped_steps.numpy())

    expected = run(tf.distribute.get_strategy(), [good, good])
    assert expected[1:] == (2, 0)
    for strategy in (tf.distribute.get_strategy(), mirrored):
        value, iterations, skipped = run(strategy, [good, bad, good])
        np.testing.assert_array_equal(value, expected[0])
        assert (iterations, skipped) == (2, 1)


def test_gradient_accumulation_called_in_cross_replica_context_is_refused_as_keras_refuses(mirrored):
    with mirrored.scope():
        var = tf.Variable([1.0, 2.0])
        opt = optimizers.GradientAccumulation(optimizers.Adam(0.1), 2)
        with pytest.raises(RuntimeError, match=r"cannot be called in cross-replica context: call it inside "
                                               r"`strategy.run`.*Received: strategy=MirroredStrategy"):
            opt.apply_gradients([(tf.constant([1.0, 1.0]), var)])
    assert var.numpy().tolist() == [1.0, 2.0] and int(opt.iterations.numpy()) == 0


@pytest.mark.parametrize("reduction, expected", [("mean", 1.5), ("max", 2.0)])
def test_mirrored_overwrite_reduction_in_model_fit(mirrored, reduction, expected):
    """Replica r sends r + 1 as the statistic's gradient (a sum would give 3)."""
    from optimizers import Adam

    with mirrored.scope():
        stat = tf.Variable([0.0], name="amax_statistic")
        opt = Adam(0.01, updaters={"amax_statistic": optimizers.OverwriteWithGradient(reduction)})

    @tf.function
    def step():
        def replica_step():
            value = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group + 1, tf.float32)
            opt.apply_gradients([(tf.reshape(value, [1]), stat)])
        mirrored.run(replica_step)

    step()
    for component in mirrored.experimental_local_results(stat):
        assert component.numpy().tolist() == [expected]


@pytest.mark.slow
def test_multi_worker_mirrored_two_processes(tmp_path):
    ports = [free_port(), free_port()]
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    procs = []
    for index in range(2):
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}))
        procs.append(subprocess.Popen([sys.executable, WORKER, str(tmp_path / f"worker{index}.npz")], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    try:
        outputs = [p.communicate(timeout=400)[0].decode(errors="replace") for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, text in zip(procs, outputs):
        assert p.returncode == 0, text[-3000:]
    first, second = (dict(np.load(tmp_path / f"worker{i}.npz")) for i in range(2))
    assert sorted(first) == sorted(second)
    for case in OPTIMIZERS:
        assert int(first[f"{case.name}/iterations"]) == case.steps(3)
        initial = case_model(case, seed=2).get_weights()
        for i in range(len(initial)):
            np.testing.assert_array_equal(first[f"{case.name}/{i}"], second[f"{case.name}/{i}"], err_msg=case.name)
        assert not np.array_equal(first[f"{case.name}/0"], initial[0]), case.name  # it trained
    for worker in (first, second):
        assert worker["overwrite_mean"].tolist() == [1.5, 1.5]
        assert worker["overwrite_max"].tolist() == [2.0, 2.0]
