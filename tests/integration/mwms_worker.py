"""Worker for test_distribution.py: one of two MultiWorkerMirroredStrategy workers.

``python mwms_worker.py OUT.npz`` with TF_CONFIG set. Trains every optimizer of
the table for a few steps (each worker feeds its own half of the global batch),
and checks the overwrite updater's reductions: worker i sends i + 1, so the
mean is 1.5 and the max 2.0 (a sum would give 3.0). Writes the final weights.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import optimizers  # noqa: E402
from integration.optimizers_under_test import BATCH, OPTIMIZERS, case_model, data, train_step  # noqa: E402
from optimizers import SGD  # noqa: E402

STEPS = 3


def main(out):
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    worker = strategy.cluster_resolver.task_id
    x, y = data()
    results = {}
    for case in OPTIMIZERS:
        with strategy.scope():
            net, opt = case_model(case, seed=2), case.make()
        step = train_step(net, opt)

        @tf.function
        def run(a, b, step=step):
            return strategy.run(step, args=(a, b))

        for i in range(STEPS):  # this worker's half of global batch i
            lo = (i * BATCH + worker * BATCH // 2) % len(x)
            run(tf.constant(x[lo:lo + BATCH // 2]), tf.constant(y[lo:lo + BATCH // 2]))
        for i, w in enumerate(net.get_weights()):
            results[f"{case.name}/{i}"] = w
        results[f"{case.name}/iterations"] = opt.iterations.numpy()
    for reduction in ("mean", "max"):
        with strategy.scope():
            stat = tf.Variable([0.0, 0.0])
            opt = SGD(0.1, updaters={stat.ref(): optimizers.OverwriteWithGradient(reduction)})

        @tf.function
        def overwrite(stat=stat, opt=opt):
            def replica_step():
                value = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group + 1, tf.float32)
                opt.apply_gradients([(tf.fill([2], value), stat)])
            strategy.run(replica_step)

        overwrite()
        results[f"overwrite_{reduction}"] = stat.numpy()
    np.savez(out, **results)


if __name__ == "__main__":
    main(sys.argv[1])
