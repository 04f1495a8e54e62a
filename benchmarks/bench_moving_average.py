"""MovingAverage step vs the fused built-in Adam step alone (8M float32 params).

Around a built-in Adam, the average costs one more pass over the weights: the
goal is <= 1.6x Adam alone (TFA's MovingAverage measures 2.15x). By default
that pass is the library's one-pass average kernel (``optimizers.kernels``);
where the library cannot be built, it is compiled with XLA (``jit_compile``,
the default) or TFA's three ops (``jit_compile=False``, bit-identical
averages), both shown for comparison. Around a template-made AdamW, the
average update runs in the inner step's own pass over memory (the decay, Adam
and the average in one C++ kernel; one more slot read and written): goal
<= 1.25x Adam alone.

On 2000 small variables (1000 kernels of 16x16, 1000 biases of 16: the
1000-layer MLP's), ``MovingAverage(AdamW)`` against ``AdamW`` alone, printed
without a goal: the average's cost per variable where each variable is too
small for its memory to matter, so that per-variable overhead dominates (the
step captures 2000 more slots; ``bench_floor.py`` times what capturing and
touching that many more variables costs with no optimizer at all).
"""

from benchmarks.common import Case, compare, small_problem
from optimizers import AdamW, MovingAverage, keras


class _WithoutLibraryKernels(MovingAverage):
    """The average as it runs where the library's kernels are not available."""

    def after_step_as_average(self, var):
        return None


def cases() -> list[Case]:
    def adam():
        return keras.optimizers.legacy.Adam(1e-3)

    return [
        Case("moving average: MovingAverage(Adam), average kernel / Adam alone, 8M f32", "tf_keras legacy Adam", 1.6,
             lambda: compare(lambda: MovingAverage(adam()), adam, repeats=30)),
        Case("moving average: MovingAverage(Adam), XLA, no library kernel / Adam alone, 8M f32",
             "tf_keras legacy Adam", 1.6, lambda: compare(lambda: _WithoutLibraryKernels(adam()), adam, repeats=30)),
        Case("moving average: MovingAverage(Adam), plain ops / Adam alone, 8M f32", "tf_keras legacy Adam", 2.2,
             lambda: compare(lambda: _WithoutLibraryKernels(adam(), jit_compile=False), adam, repeats=30)),
        Case("moving average: MovingAverage(AdamW), fused / Adam alone, 8M f32", "tf_keras legacy Adam", 1.25,
             lambda: compare(lambda: MovingAverage(AdamW(1e-4, 1e-3)), adam, repeats=30)),
        Case("moving average: MovingAverage(AdamW) / AdamW alone, 2000 small variables", "optimizers.AdamW",
             float("inf"), lambda: compare(lambda: MovingAverage(AdamW(1e-4, 1e-3)), lambda: AdamW(1e-4, 1e-3),
                                           problem=small_problem)),
    ]
