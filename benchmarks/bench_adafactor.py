"""Adafactor: dense step vs tf_keras's fused Adam, vs Keras 3's own ``Adafactor``, and with XLA.

Same ~8M float32 parameters (8 variables of [1000, 1000]: every one factored) and gradients
for every side, timed in interleaved rounds in one process (best round of each side, wall
time per step).

* Ours (its default, TensorFlow's kernels without XLA) / tf_keras's legacy ``Adam`` (one
  fused C++ kernel: reads g, m, v, theta and writes m, v, theta once, 7 array passes).
  Adafactor written in TensorFlow ops takes about 15 array passes per matrix (g**2, its row
  and column means, RMS(theta), u in two broadcasts, RMS(u), the scaled update and its
  assignment), though its slots hold only n + m numbers: goal <= 2.0.
* Ours / Keras 3's ``keras.optimizers.Adafactor`` (TF backend; installed in .venv only), in
  a ``tf.function`` and in a ``tf.function(jit_compile=True)`` (what ``model.fit``'s
  ``jit_compile="auto"`` gives it): goal <= 1 (ours faster).
* Ours / ours with ``jit_compile=True``: why the default is ``False`` for this rule (XLA's
  CPU reductions over whole variables are slow): goal <= 1.
"""

from __future__ import annotations

import functools
import os
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import Case, dense_problem, median_step_seconds, train_step  # noqa: E402


def _has_keras3() -> bool:
    try:
        import keras
    except ImportError:
        return False
    return keras.__version__.startswith("3.")


def _keras3_step(jit_compile: bool):
    import keras as keras3
    import tensorflow as tf

    variables, grads = dense_problem()
    variables = [keras3.Variable(v.numpy()) for v in variables]
    optimizer = keras3.optimizers.Adafactor()
    optimizer.build(variables)

    @tf.function(jit_compile=jit_compile)
    def step():
        optimizer.apply_gradients(zip(grads, variables))

    return step


def interleaved(steps: list, rounds: int = 4, per_round: int = 5) -> list[float]:
    """Seconds per call of each step (a tf.function): the best of ``rounds`` interleaved medians."""
    for step in steps:
        for _ in range(3):
            step()
    best = [float("inf")] * len(steps)
    for _ in range(rounds):
        for i, step in enumerate(steps):
            best[i] = min(best[i], median_step_seconds(step, warmup=0, repeats=per_round))
    return best


@functools.cache
def _times() -> dict[str, float]:
    from optimizers import keras
    from optimizers.rules.adafactor import Adafactor

    _, grads = dense_problem()
    names = ["ours", "ours_xla", "fused_adam"]
    steps = [train_step(Adafactor(), dense_problem()[0], grads),
             train_step(Adafactor(jit_compile=True), dense_problem()[0], grads),
             train_step(keras.optimizers.legacy.Adam(1e-3), dense_problem()[0], grads)]
    if _has_keras3():
        names += ["keras3", "keras3_xla"]
        steps += [_keras3_step(False), _keras3_step(True)]
    return dict(zip(names, interleaved(steps)))


def _pick(a: str, b: str) -> tuple[float, float]:
    times = _times()
    return times[a], times[b]


def cases() -> list[Case]:
    out = [Case("adafactor Adafactor / fused Adam, 8M f32", "tf_keras legacy Adam", 2.0,
                lambda: _pick("ours", "fused_adam")),
           Case("adafactor Adafactor / Adafactor with XLA, 8M f32", "ours, jit_compile=True", 1.0,
                lambda: _pick("ours", "ours_xla"))]
    if _has_keras3():
        out.append(Case("adafactor Adafactor / Keras 3 Adafactor, 8M f32", "Keras 3 Adafactor (tf.function)",
                        1.0, lambda: _pick("ours", "keras3")))
        out.append(Case("adafactor Adafactor / Keras 3 Adafactor (XLA), 8M f32",
                        "Keras 3 Adafactor (tf.function, jit_compile=True)", 1.0, lambda: _pick("ours", "keras3_xla")))
    return out


if __name__ == "__main__":
    for case in cases():
        ours, peer = case.run()
        print(f"{case.name:62} {ours * 1e3:8.2f} ms {peer * 1e3:8.2f} ms  ratio {ours / peer:5.2f}  goal {case.goal}")
