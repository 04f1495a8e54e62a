"""Worker for test_resume.py, run in its own process.

``python resume_worker.py first CKPT_DIR OUT.npz``: for every optimizer of the
table, train N steps, save a checkpoint (CheckpointManager), train M more
steps, write the weights. ``second``: build fresh, restore the checkpoint,
train the last M steps, write the weights.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from integration.optimizers_under_test import (  # noqa: E402
    OPTIMIZERS,
    batches,
    case_model,
    data,
    optimizer_state,
    train_step,
)

N, M = 3, 3


def main(mode, ckpt_root, out):
    x, y = data()
    steps = list(batches(x, y, N + M))
    results = {}
    for case in OPTIMIZERS:
        net, opt = case_model(case, seed=1), case.make()
        manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=net, optimizer=opt),
                                             os.path.join(ckpt_root, case.name), max_to_keep=1)
        step = tf.function(train_step(net, opt))
        if mode == "first":
            for a, b in steps[:N]:
                step(a, b)
            manager.save()
        else:
            manager.restore_or_initialize()
            assert manager.latest_checkpoint is not None
        for a, b in steps[N:]:
            step(a, b)
        for i, w in enumerate(net.get_weights()):
            results[f"{case.name}/model/{i}"] = w
        for key, value in optimizer_state(opt, net.trainable_variables).items():
            results[f"{case.name}/optimizer/{key}"] = value
    np.savez(out, **results)


if __name__ == "__main__":
    main(*sys.argv[1:])
