"""LAMB, NovoGrad, COCOB, ConditionalGradient, ProximalAdagrad: dense step vs tf_keras's fused Adam.

Each of ours (its default step: the fused kernels of this library) against tf_keras's
legacy ``Adam`` (one fused C++ kernel) on the same ~8M float32 parameters (8
variables of 1M). The goals
come from the memory each step must move, in arrays the size of the
parameters, times the 1.3 allowed for an XLA rule that moves what Adam moves
(Adam reads g, theta, m, v and writes theta, m, v: 7):

* LAMB: the trust ratio needs the norms of theta and of the update before
  theta is written, so two passes: read g, theta, m, v, write m, v, then read
  m, v, theta and write theta: 10, goal 1.3 x 10/7 = 1.9 (its kernels: read g,
  theta, m, v, write m, v and the update u; read theta and u for the norms; read
  theta and u, write theta: 12);
* NovoGrad: the norm of g, then read g, theta, m, write m, theta: 6, goal 1.1
  (its kernels do that);
* COCOB: read g, theta and 5 slots, write theta and 5 slots: 13, goal 2.4
  (its fused kernel of this library does that in one pass);
* ConditionalGradient ("fro"): the norm of g, then read g, theta, write theta:
  4, goal 0.75 (its kernels do that); ``"nuclear"`` is bound by one SVD per
  variable (no goal, on 1M parameters: 8 variables of 125 x 1000; after the
  SVD, the same fused pass);
* ProximalAdagrad: read g, theta, a, write theta, a: 5, goal 0.95 (one pass:
  its fused kernel).

``python benchmarks/bench_layerwise.py --tfa NAME`` (run by these cases when
.venv-tf215 exists) times, in the TF 2.15 environment where this library is
installed too, ours, TFA's own optimizer and that stack's fused Adam on the same
problem, interleaved: ours / TFA's (goal < 1: ours faster) and TFA's / fused
Adam (for reference).
"""

from __future__ import annotations

import functools
import json
import os
import sys

from benchmarks.common import TFA_PYTHON, Case, compare, dense_problem, tfa_output, timed, train_step

# name: (constructor arguments, goal, problem size)
CONFIGS = {
    "LAMB": (dict(learning_rate=1e-3, weight_decay=1e-4), 1.9, 8_000_000),
    "NovoGrad": (dict(learning_rate=1e-3, weight_decay=1e-4), 1.1, 8_000_000),
    "COCOB": (dict(), 2.4, 8_000_000),
    "ConditionalGradient": (dict(learning_rate=0.99, lambda_=0.1), 0.75, 8_000_000),
    "ConditionalGradient nuclear": (dict(learning_rate=0.99, lambda_=0.1, ord="nuclear"), float("inf"), 1_000_000),
    "ProximalAdagrad": (dict(learning_rate=1e-3, l1_regularization_strength=1e-4), 0.95, 8_000_000),
}


def _class_name(name: str) -> str:
    return name.split()[0]


def _ours(name: str):
    from optimizers.rules.cocob import COCOB
    from optimizers.rules.conditional_gradient import ConditionalGradient
    from optimizers.rules.lamb import LAMB
    from optimizers.rules.novograd import NovoGrad
    from optimizers.rules.proximal_adagrad import ProximalAdagrad

    classes = {c.__name__: c for c in (LAMB, NovoGrad, COCOB, ConditionalGradient, ProximalAdagrad)}
    return classes[_class_name(name)](**CONFIGS[name][0])


def _label(name: str) -> str:
    size = CONFIGS[name][2]
    return f"{size // 1_000_000}M f32"


def norm_times() -> tuple[float, float]:
    """Wall seconds for the squared norms of 8 variables of 1M: compiled (XLA, ``sum_of_squares``'s
    dot product, one call per variable) and TensorFlow's own reduction, interleaved. Why the
    layer-wise rules take their norms outside XLA on a variable compiled alone."""
    import tensorflow as tf

    from optimizers.rule import sum_of_squares

    variables, _ = dense_problem()
    compiled = tf.function(functools.partial(sum_of_squares, compiled=True), jit_compile=True)
    steps = [tf.function(lambda: [compiled(v) for v in variables]),
             tf.function(lambda: [sum_of_squares(v, compiled=False) for v in variables])]
    (ours, _), (peer, _) = timed(steps, per_round=20)
    return ours, peer


def cases() -> list[Case]:
    from optimizers import keras

    out = [Case("layerwise norms: XLA / TensorFlow reduction, 8M f32", "tf.reduce_sum(tf.square(x))", float("inf"),
                norm_times)]
    for name, (_, goal, size) in CONFIGS.items():
        problem = functools.partial(dense_problem, size)
        out.append(Case(f"layerwise {name} (fused kernel) / fused Adam, {_label(name)}", "tf_keras legacy Adam", goal,
                        functools.partial(compare, functools.partial(_ours, name),
                                          lambda: keras.optimizers.legacy.Adam(1e-3), 15, problem)))
        if os.path.exists(TFA_PYTHON):
            out.append(Case(f"layerwise {name} / TFA {name}, {_label(name)} (TF 2.15)", f"TFA {name}", 1.0,
                            lambda n=name: tuple(t[0] for t in _tfa_run(n)[:2])))
            out.append(Case(f"layerwise TFA {name} / fused Adam, {_label(name)} (TF 2.15, reference)",
                            "tf.keras 2.15 legacy Adam", float("inf"),
                            lambda n=name: tuple(t[0] for t in _tfa_run(n)[1:])))
    return out


@functools.cache
def _tfa_run(name: str) -> list:
    """``(wall, cpu)`` per step of ours, TFA's and the fused Adam, timed in the TF 2.15 + TFA environment."""
    return json.loads(tfa_output(__file__, name))


if __name__ == "__main__" and "--tfa" in sys.argv:
    import tensorflow as tf
    import tensorflow_addons as tfa

    tfa_name = sys.argv[sys.argv.index("--tfa") + 1]
    tfa_cls = getattr(tfa.optimizers, _class_name(tfa_name))
    makers = [functools.partial(_ours, tfa_name), lambda: tfa_cls(**CONFIGS[tfa_name][0]),
              lambda: tf.keras.optimizers.legacy.Adam(1e-3)]
    _, grads = dense_problem(CONFIGS[tfa_name][2])
    print(json.dumps(timed([train_step(make(), dense_problem(CONFIGS[tfa_name][2])[0], grads) for make in makers])))
