"""AdamW: dense step vs tf_keras's fused Adam; lazy sparse step on a large vs a small table.

* Dense: ``AdamW`` (decay + Adam in one fused C++ kernel, ``optimizers.kernels``)
  against tf_keras's legacy ``Adam`` (one fused C++ kernel, no decay at all) on
  the same ~8M float32 parameters. Goal <= 1.10 (the decay is fused into the
  same pass over memory), in wall time per step and in process CPU time per step (the
  work done, steadier on a shared machine).
* Sparse, ``lazy=True``: the same 4096 touched rows (out of a 1M-row and a
  16k-row table); ratio of the step times, goal <= 2: the step's cost follows
  the touched rows, not the table. The default (non-lazy) sparse AdamW, whose
  moments decay on every row like Keras 2's and TFA's Adam, is printed for
  comparison (no goal).
* ``python benchmarks/bench_adamw.py --tfa`` (run by ``make bench`` when
  .venv-tf215 exists) times TFA's AdamW against the fused Adam in the TF 2.15
  environment, the number this library's dense AdamW replaces.
"""

from __future__ import annotations

import os
import sys

from benchmarks.common import TFA_PYTHON, Case, compare, dense_problem, median_step_seconds, tfa_output, train_step

TOUCHED, WIDTH = 4096, 32


def cpu_seconds_per_step(make_ours, make_peer, steps: int = 10) -> tuple[float, float]:
    """Process CPU time (user + system, all threads) per step: the work done, less sensitive than wall time
    to other processes on a shared machine (but blind to how well the work is spread over the cores)."""
    import resource

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    runs = []
    for make in (make_ours, make_peer):
        variables, grads = dense_problem()
        step = train_step(make(), variables, grads)
        for _ in range(3):
            step()
        runs.append(step)
    best = [float("inf"), float("inf")]
    for _ in range(3):  # interleaved rounds
        for i, step in enumerate(runs):
            start = cpu()
            for _ in range(steps):
                step()
            best[i] = min(best[i], (cpu() - start) / steps)
    return best[0], best[1]


def sparse_step_seconds(make_optimizer, rows: int, repeats: int = 15) -> float:
    import numpy as np
    import tensorflow as tf

    rng = np.random.RandomState(0)
    table = tf.Variable(tf.zeros((rows, WIDTH)))
    indices = tf.constant(rng.choice(rows, TOUCHED, replace=False).astype("int64"))
    grad = tf.IndexedSlices(tf.constant(rng.randn(TOUCHED, WIDTH).astype("float32")), indices,
                            tf.constant([rows, WIDTH], tf.int64))
    optimizer = make_optimizer()

    @tf.function
    def step():
        optimizer.apply_gradients([(grad, table)])

    return median_step_seconds(step, repeats=repeats)


def sparse_ratio(make_optimizer) -> tuple[float, float]:
    big, small = [], []
    for _ in range(3):  # interleaved rounds, as benchmarks.common.compare
        big.append(sparse_step_seconds(make_optimizer, 1_000_000, repeats=5))
        small.append(sparse_step_seconds(make_optimizer, 16_384, repeats=5))
    return min(big), min(small)


def cases() -> list[Case]:
    from optimizers import AdamW, keras

    out = [
        Case("AdamW (fused decay kernel) / fused Adam, 8M f32", "tf_keras legacy Adam", 1.1,
             lambda: compare(lambda: AdamW(1e-4, 1e-3), lambda: keras.optimizers.legacy.Adam(1e-3), repeats=30)),
        Case("AdamW / fused Adam, 8M f32, CPU time per step", "tf_keras legacy Adam", 1.1,
             lambda: cpu_seconds_per_step(lambda: AdamW(1e-4, 1e-3), lambda: keras.optimizers.legacy.Adam(1e-3))),
        Case("AdamW lazy sparse: 1M-row / 16k-row table, 4096 rows", "same optimizer, 16k rows", 2.0,
             lambda: sparse_ratio(lambda: AdamW(1e-4, 1e-3, lazy=True))),
        Case("AdamW default sparse: 1M-row / 16k-row (no goal)", "same optimizer, 16k rows", float("inf"),
             lambda: sparse_ratio(lambda: AdamW(1e-4, 1e-3))),
    ]
    if os.path.exists(TFA_PYTHON):
        out.append(Case("TFA AdamW / fused Adam, 8M f32 (TF 2.15, for reference)", "tf.keras 2.15 legacy Adam",
                        float("inf"), tfa_peer))
    return out


def tfa_peer() -> tuple[float, float]:
    """TFA's AdamW vs the fused Adam, timed in the TF 2.15 + TFA environment."""
    ours, peer = tfa_output(__file__).split()
    return float(ours), float(peer)


if __name__ == "__main__" and "--tfa" in sys.argv:
    import tensorflow as tf
    import tensorflow_addons as tfa

    print(*compare(lambda: tfa.optimizers.AdamW(1e-4, 1e-3), lambda: tf.keras.optimizers.legacy.Adam(1e-3)))
