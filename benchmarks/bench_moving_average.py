"""MovingAverage step vs the fused built-in Adam step alone (8M float32 params).

Around a built-in Adam, the average costs one more pass over the weights: the
goal is <= 1.6x Adam alone (TFA's MovingAverage measures 2.15x).
``jit_compile=False`` runs TFA's three ops (bit-identical averages) and is
shown for comparison. Around a template-made AdamW, the average update runs in
the inner step's own pass over memory (``optimizers.kernels``: the decay, Adam
and the average in one C++ kernel; one more slot read and written): goal
<= 1.25x Adam alone.
"""

from benchmarks.common import Case, compare
from optimizers import AdamW, MovingAverage, keras


def cases() -> list[Case]:
    def adam():
        return keras.optimizers.legacy.Adam(1e-3)

    return [
        Case("moving average: MovingAverage(Adam), XLA / Adam alone, 8M f32", "tf_keras legacy Adam", 1.6,
             lambda: compare(lambda: MovingAverage(adam()), adam, repeats=30)),
        Case("moving average: MovingAverage(Adam), plain ops / Adam alone, 8M f32", "tf_keras legacy Adam", 2.2,
             lambda: compare(lambda: MovingAverage(adam(), jit_compile=False), adam, repeats=30)),
        Case("moving average: MovingAverage(AdamW), fused / Adam alone, 8M f32", "tf_keras legacy Adam", 1.25,
             lambda: compare(lambda: MovingAverage(AdamW(1e-4, 1e-3)), adam, repeats=30)),
    ]
