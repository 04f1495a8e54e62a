"""Keras 3: this library's ``keras3.AdamW`` against Keras 3's own ``keras.optimizers.AdamW``.

The same math on both sides (``scale_weight_decay_by_lr=True`` is Keras 3's decay rule), on the
same ~8M float32 parameters held as ``keras.Variable``s, each step a ``tf.function`` around
``optimizer.apply`` (as Keras 3's ``fit`` runs it without ``jit_compile``):

* the steady step, goal <= 1.0: the library's fused decay-then-Adam kernel, one pass over memory,
  against Keras 3's ops;
* the first step (building the slots, tracing the step and running it once), goal <= 1.0;
* the steady step of ``keras3.MovingAverage`` around it against Keras 3's own weight average
  (``use_ema=True``: the same exponential average, kept by the optimizer), goal <= 1.0.
"""

from __future__ import annotations

import time

from benchmarks.common import Case, best_rounds, dense_problem


def _problem():
    import keras

    variables, grads = dense_problem()
    return [keras.Variable(v.numpy()) for v in variables], grads


def _step(optimizer, variables, grads):
    import tensorflow as tf

    @tf.function
    def step():
        optimizer.apply(grads, variables)

    return step


def _ours():
    from optimizers import keras3

    return keras3.AdamW(weight_decay=1e-2, learning_rate=1e-3, scale_weight_decay_by_lr=True)


def _peer():
    import keras

    return keras.optimizers.AdamW(learning_rate=1e-3, weight_decay=1e-2)


def _ours_averaged():
    from optimizers import keras3

    return keras3.MovingAverage(_ours(), average_decay=0.99)


def _peer_averaged():
    import keras

    return keras.optimizers.AdamW(learning_rate=1e-3, weight_decay=1e-2, use_ema=True, ema_momentum=0.99)


def steady_averaged() -> tuple[float, float]:
    """``keras3.MovingAverage(keras3.AdamW)`` against Keras 3's own average (``use_ema=True``)."""
    ours_vars, grads = _problem()
    peer_vars, _ = _problem()
    return best_rounds(_step(_ours_averaged(), ours_vars, grads), _step(_peer_averaged(), peer_vars, grads),
                       repeats=30)


def steady() -> tuple[float, float]:
    ours_vars, grads = _problem()
    peer_vars, _ = _problem()
    return best_rounds(_step(_ours(), ours_vars, grads), _step(_peer(), peer_vars, grads), repeats=30)


def first_step() -> tuple[float, float]:
    """Seconds from a new optimizer to the end of its first step (build, trace, one step), best of 3 each."""
    out = []
    for make in (_ours, _peer):
        best = float("inf")
        for _ in range(3):
            variables, grads = _problem()
            step = _step(make(), variables, grads)
            start = time.perf_counter()
            step()
            best = min(best, time.perf_counter() - start)
        out.append(best)
    return out[0], out[1]


def cases() -> list[Case]:
    return [
        Case("Keras 3: keras3.AdamW / keras.optimizers.AdamW, 8M f32", "Keras 3 AdamW", 1.0, steady),
        Case("Keras 3: first step (build + trace + step), 8M f32", "Keras 3 AdamW", 1.0, first_step),
        Case("Keras 3: keras3.MovingAverage(AdamW) / AdamW(use_ema=True), 8M f32", "Keras 3 AdamW + EMA", 1.0,
             steady_averaged),
    ]
