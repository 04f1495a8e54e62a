"""Template-written Adam vs tf_keras's fused built-in Adam.

``optimizers.Adam`` runs TensorFlow's fused Adam kernel (the built-in's) where no
decay or wrapper is fused into a variable's step: goal <= 1.05. The template's
compiled step of Adam's rule (``benchmarks.common.without_kernel``: the kernel
turned off, as for any rule without one): goal <= 1.05 on 8 variables of 1M (one
compiled pass per variable against one C++ kernel per variable), 1.3 on 64
variables of 125k.

Where AdamW's decay goes (printed without a goal; ``optimizers.execution.StepRunner._dense_kernel``
chooses from these): on 8 variables of 1M, the decay and Adam in one fused kernel
(the default, ``optimizers.kernels``) against the decay as an op of its own before
TensorFlow's Adam kernel (``benchmarks.common.without_fused_decay``, with
``jit_compile=False``) and against the decay fused into each variable's compiled
step (``without_fused_decay``: what a build without the kernel runs); on 2000 small
variables in a ``tf.function``, the fused kernel against the decay op then the
kernel, and against compiled chunks of decay and rule (the kernel turned off). The eager case times
``apply_gradients`` called eagerly on 2000 small variables (1000 kernels of
16x16, 1000 biases of 16; AdamW with the biases excluded from decay), where the
per-step Python work of the template (rule and decay lookups, compiled-call
dispatch) shows: printed against the built-in, no goal.
"""

import statistics
import time

from benchmarks.common import Case, compare, dense_problem, small_problem, without_fused_decay, without_kernel
from optimizers import Adam, AdamW, keras


def eager_many_variables(repeats: int = 10) -> tuple[float, float]:
    """Median eager step of AdamW and of tf_keras's Adam on 2000 small variables, interleaved."""
    import numpy as np
    import tensorflow as tf

    def setup(optimizer):
        rng = np.random.RandomState(0)
        variables, grads = [], []
        for i in range(1000):
            for name, shape in ((f"dense_{i}/kernel", (16, 16)), (f"dense_{i}/bias", (16,))):
                variables.append(tf.Variable(rng.randn(*shape).astype("float32"), name=name))
                grads.append(tf.constant(rng.randn(*shape).astype("float32")))
        optimizer.apply_gradients(zip(grads, variables))  # slots, compilation
        return lambda: optimizer.apply_gradients(zip(grads, variables))

    steps = [setup(AdamW(1e-4, 1e-3, exclude_from_weight_decay=["bias"])), setup(keras.optimizers.legacy.Adam(1e-3))]
    times: list[list[float]] = [[], []]
    for _ in range(repeats):
        for i, step in enumerate(steps):
            start = time.perf_counter()
            step()
            times[i].append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def cases() -> list[Case]:
    return [
        Case("Adam (its fused kernel) / fused Adam, 8M f32", "tf_keras legacy Adam", 1.05,
             lambda: compare(lambda: Adam(1e-3), lambda: keras.optimizers.legacy.Adam(1e-3))),
        Case("template Adam (XLA per variable) / fused Adam, 8M f32", "tf_keras legacy Adam", 1.05,
             lambda: compare(lambda: without_kernel(Adam)(1e-3), lambda: keras.optimizers.legacy.Adam(1e-3))),
        Case("template Adam (XLA) / fused Adam, 64 variables of 125k f32", "tf_keras legacy Adam", 1.3,
             lambda: compare(lambda: without_kernel(Adam)(1e-3), lambda: keras.optimizers.legacy.Adam(1e-3),
                             problem=lambda: dense_problem(8_000_000, num_vars=64))),
        Case("template Adam (plain TF ops) / fused Adam, 8M f32", "tf_keras legacy Adam", 6.0,
             lambda: compare(lambda: without_kernel(Adam)(1e-3, jit_compile=False),
                             lambda: keras.optimizers.legacy.Adam(1e-3))),
        Case("template AdamW eager step / fused Adam, 2000 small variables", "tf_keras legacy Adam", float("inf"),
             eager_many_variables),
        Case("AdamW fused decay kernel / decay op + Adam kernel, 8M f32", "AdamW, decay op", float("inf"),
             lambda: compare(lambda: AdamW(1e-4, 1e-3), lambda: without_fused_decay(AdamW)(1e-4, 1e-3, jit_compile=False))),
        Case("AdamW fused decay kernel / decay in the XLA step, 8M f32", "AdamW, compiled step", float("inf"),
             lambda: compare(lambda: AdamW(1e-4, 1e-3), lambda: without_fused_decay(AdamW)(1e-4, 1e-3))),
        Case("AdamW fused decay kernel / fused Adam, 2000 small variables", "tf_keras legacy Adam",
             float("inf"), lambda: compare(lambda: AdamW(1e-4, 1e-3), lambda: keras.optimizers.legacy.Adam(1e-3),
                                           problem=small_problem)),
        Case("AdamW decay op + Adam kernel / fused Adam, 2000 small variables", "tf_keras legacy Adam",
             float("inf"), lambda: compare(lambda: without_fused_decay(AdamW)(1e-4, 1e-3),
                                           lambda: keras.optimizers.legacy.Adam(1e-3), problem=small_problem)),
        Case("AdamW compiled chunks / fused Adam, 2000 small variables", "tf_keras legacy Adam", float("inf"),
             lambda: compare(lambda: without_kernel(AdamW)(1e-4, 1e-3), lambda: keras.optimizers.legacy.Adam(1e-3),
                             problem=small_problem)),
    ]
