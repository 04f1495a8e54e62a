"""Template-written Adam (optimizers.Adam) vs tf_keras's fused built-in Adam.

Goal <= 1.05 on 8 variables of 1M (one compiled pass per variable against one
C++ kernel per variable), 1.3 on 64 variables of 125k.
"""

from benchmarks.common import Case, compare, dense_problem
from optimizers import Adam, keras


def cases() -> list[Case]:
    return [
        Case("template Adam (XLA per variable) / fused Adam, 8M f32", "tf_keras legacy Adam", 1.05,
             lambda: compare(lambda: Adam(1e-3), lambda: keras.optimizers.legacy.Adam(1e-3))),
        Case("template Adam (XLA) / fused Adam, 64 variables of 125k f32", "tf_keras legacy Adam", 1.3,
             lambda: compare(lambda: Adam(1e-3), lambda: keras.optimizers.legacy.Adam(1e-3),
                             problem=lambda: dense_problem(8_000_000, num_vars=64))),
        Case("template Adam (plain TF ops) / fused Adam, 8M f32", "tf_keras legacy Adam", 6.0,
             lambda: compare(lambda: Adam(1e-3, jit_compile=False), lambda: keras.optimizers.legacy.Adam(1e-3))),
    ]
