"""The dense step against its physical floor, on the same ~8M float32 parameters (8 variables of 1M).

The floor of a step is one XLA pass over its memory and nothing else: a compiled function per
variable that reads the gradient, the variable and ``n`` slots and writes the variable and the
slots back (each plus the gradient: one add per element, no arithmetic worth the name). Adam and
AdamW move 2 slots (``m``, ``v``), so their floor reads 4 and writes 3 arrays per element;
``MovingAverage(AdamW)`` adds the average, so its floor has 3 slots. Ratios to the floor say how
far a step is from what the memory allows on this machine (printed, no goal); the goals against
the fused Adam kernel are in ``bench_adamw.py``, ``bench_template.py`` and
``bench_moving_average.py``. The fused kernel's own ratio to the floor is printed for reference.

Where variables are small, a step's floor is its variables, not their memory: each variable a
``tf.function`` uses is one more captured input passed at every call. A function that only adds a
small constant to each of ``N`` small float32 variables (16x16 and 16, alternating) is timed at
``N`` = 8000 against 6000, the variables plus slots of ``MovingAverage(AdamW)`` and of ``AdamW``
alone on 2000 variables (``bench_moving_average.py``'s small case): the cost of each variable a
step captures and touches, whatever the optimizer, and so the floor of what 2000 more averages
cost a step (printed, no goal).
"""

from __future__ import annotations

import tensorflow as tf

from benchmarks.common import Case, best_rounds, compare, without_kernel
from optimizers import Adam, AdamW, MovingAverage, keras


class Floor:
    """``apply_gradients`` that only reads and writes the memory of a step with ``slots`` slots."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._slots: dict = {}

        @tf.function(jit_compile=True)
        def touch(grad, var, var_slots):
            for x in [var] + var_slots:
                x.assign_add(grad, read_value=False)
            return tf.constant(True)

        self._touch = touch

    def apply_gradients(self, grads_and_vars) -> None:
        for grad, var in grads_and_vars:
            key = var.ref()
            if key not in self._slots:
                with tf.init_scope():
                    self._slots[key] = [tf.Variable(tf.zeros_like(var)) for _ in range(self.slots)]
            self._touch(grad, var, self._slots[key])


def captured_variables_step(n: int):
    """A tf.function that adds a small constant to each of ``n`` small float32 variables."""
    variables = [tf.Variable(tf.zeros(shape)) for shape in [(16, 16), (16,)] * (n // 2)]

    @tf.function
    def step():
        deltas = {shape: tf.constant(1e-3, shape=shape) for shape in [(16, 16), (16,)]}
        for var in variables:
            var.assign_add(deltas[tuple(var.shape)], read_value=False)

    return step


def cases() -> list[Case]:
    def adam():
        return keras.optimizers.legacy.Adam(1e-3)

    no_goal = float("inf")
    return [
        Case("floor: fused Adam / floor (2 slots), 8M f32", "XLA read+write pass", no_goal,
             lambda: compare(adam, lambda: Floor(2), repeats=30)),
        Case("floor: template Adam / floor (2 slots), 8M f32", "XLA read+write pass", no_goal,
             lambda: compare(lambda: without_kernel(Adam)(1e-3), lambda: Floor(2), repeats=30)),
        Case("floor: AdamW / floor (2 slots), 8M f32", "XLA read+write pass", no_goal,
             lambda: compare(lambda: AdamW(1e-4, 1e-3), lambda: Floor(2), repeats=30)),
        Case("floor: MovingAverage(AdamW) / floor (3 slots), 8M f32", "XLA read+write pass", no_goal,
             lambda: compare(lambda: MovingAverage(AdamW(1e-4, 1e-3)), lambda: Floor(3), repeats=30)),
        Case("floor: 8000 / 6000 captured small variables, one add each", "6000 captured variables", no_goal,
             lambda: best_rounds(captured_variables_step(8000), captured_variables_step(6000), repeats=30)),
    ]
