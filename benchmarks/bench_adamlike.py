"""LazyAdam, Yogi, AdaBelief, RectifiedAdam, Lion, schedule-free AdamW and SGD, Adan, AdEMAMix and Muon:
dense step vs tf_keras's fused Adam, and vs TFA's own.

Every comparison is timed in interleaved rounds (best round of each side), as wall
time per step and as process CPU time per step (user + system, all threads: the
work done, steadier than wall time on a shared machine).

* Default stack: ours (each dense step one C++ kernel of ``optimizers.kernels``;
  LazyAdam's is TensorFlow's fused Adam kernel itself) against tf_keras's legacy ``Adam`` (one fused C++ kernel) on the
  same ~8M float32 parameters. Goal <= 1.3 (Adam-like rules: one pass over the
  variable and its slots). Schedule-free AdamW and SGD, Adan and AdEMAMix run their XLA-compiled
  step (no kernel of their own): the same goal. Muon is no element-wise rule: each matrix's
  momentum goes through five Newton-Schulz iterations (three matrix products each), so its case
  states its cost against one Adam step, with no goal (fewer rounds: a step takes seconds).
* ``python benchmarks/bench_adamlike.py --tfa <Name>`` (run by ``make bench``
  when .venv-tf215 exists; one subprocess per class) times, in the TF 2.15 + TFA
  environment where this library is installed too, ours, TFA's ``<Name>`` and
  that stack's fused Adam on the same problem: ours / TFA's (goal < 1: ours
  faster) and TFA's / fused Adam (for reference). TFA's LazyAdam and ours take
  the same fused Adam kernel for a dense step (goal: equal, <= 1.05); its point
  is the sparse step, timed on 4096 touched rows of a 1M-row table.
"""

from __future__ import annotations

import functools
import json
import os
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import TFA_PYTHON, Case, dense_problem, tfa_output, timed, train_step  # noqa: E402

NAMES = ["LazyAdam", "Yogi", "AdaBelief", "RectifiedAdam", "Lion"]
COMPILED = ["ScheduleFreeAdamW", "ScheduleFreeSGD", "Adan", "AdEMAMix"]  # an XLA-compiled step, no kernel of their own
TFA_NAMES = ["LazyAdam", "Yogi", "AdaBelief", "RectifiedAdam"]  # Lion: not in TFA
ROWS, TOUCHED, WIDTH = 1_000_000, 4096, 32


def ours(name: str):
    """Our class ``name`` (made with its defaults: Yogi's learning rate is TFA's 0.01)."""
    from optimizers.rules.adabelief import AdaBelief
    from optimizers.rules.adan import Adan
    from optimizers.rules.ademamix import AdEMAMix
    from optimizers.rules.lazy_adam import LazyAdam
    from optimizers.rules.lion import Lion
    from optimizers.rules.muon import Muon
    from optimizers.rules.rectified_adam import RectifiedAdam
    from optimizers.rules.schedule_free import ScheduleFreeAdamW, ScheduleFreeSGD
    from optimizers.rules.yogi import Yogi

    return {"LazyAdam": LazyAdam, "Yogi": Yogi, "AdaBelief": AdaBelief, "RectifiedAdam": RectifiedAdam,
            "Lion": Lion, "ScheduleFreeAdamW": ScheduleFreeAdamW, "ScheduleFreeSGD": ScheduleFreeSGD,
            "Adan": Adan, "AdEMAMix": AdEMAMix, "Muon": Muon}[name]


def dense_times(makers: list, **rounds: int) -> list[tuple[float, float]]:
    """Each optimizer on its own copy of the ~8M-parameter problem (same gradients)."""
    _, grads = dense_problem()
    return timed([train_step(make(), dense_problem()[0], grads) for make in makers], **rounds)


def sparse_times(makers: list) -> list[tuple[float, float]]:
    """Sparse steps on ``TOUCHED`` rows of a ``ROWS``-row table."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.RandomState(0)
    indices = tf.constant(rng.choice(ROWS, TOUCHED, replace=False).astype("int64"))
    grad = tf.IndexedSlices(tf.constant(rng.randn(TOUCHED, WIDTH).astype("float32")), indices,
                            tf.constant([ROWS, WIDTH], tf.int64))
    return timed([train_step(make(), [tf.Variable(tf.zeros((ROWS, WIDTH)))], [grad]) for make in makers], per_round=20)


@functools.cache
def _default_stack(name: str) -> list:
    from optimizers import keras

    rounds = {"rounds": 3, "per_round": 2} if name == "Muon" else {}
    return dense_times([ours(name), lambda: keras.optimizers.legacy.Adam(1e-3)], **rounds)


@functools.cache
def _tfa_run(name: str) -> dict:
    return json.loads(tfa_output(__file__, name))


def _pick(times: list, a: int, b: int, metric: int) -> tuple[float, float]:
    return times[a][metric], times[b][metric]


def cases() -> list[Case]:
    out = []
    for name in NAMES + COMPILED:
        how = "compiled step" if name in COMPILED else "fused kernel"
        for metric, what in ((0, ""), (1, ", CPU time")):
            out.append(Case(f"adamlike {name} ({how}) / fused Adam, 8M f32{what}", "tf_keras legacy Adam", 1.3,
                            lambda n=name, m=metric: _pick(_default_stack(n), 0, 1, m)))
    out.append(Case("adamlike Muon (Newton-Schulz, 8 matrices 1000x1000) / fused Adam, 8M f32 (its cost)",
                    "tf_keras legacy Adam", float("inf"), lambda: _pick(_default_stack("Muon"), 0, 1, 0)))
    if os.path.exists(TFA_PYTHON):
        for name in TFA_NAMES:
            for metric, what in ((0, ""), (1, ", CPU time")):
                # LazyAdam's dense step is TFA's own kernel: equal, within the noise of one run.
                out.append(Case(f"adamlike {name} / TFA {name}, 8M f32 (TF 2.15){what}", f"TFA {name}",
                                1.05 if name == "LazyAdam" else 1.0,
                                lambda n=name, m=metric: _pick(_tfa_run(n)["dense"], 0, 1, m)))
            if name == "LazyAdam":
                for metric, what in ((0, ""), (1, ", CPU time")):
                    out.append(Case(f"adamlike LazyAdam / TFA, sparse 4096 of 1M rows (TF 2.15){what}",
                                    "TFA LazyAdam", 1.0, lambda m=metric: _pick(_tfa_run("LazyAdam")["sparse"], 0, 1, m)))
            out.append(Case(f"adamlike TFA {name} / fused Adam (TF 2.15, reference)", "tf.keras 2.15 legacy Adam",
                            float("inf"), lambda n=name: _pick(_tfa_run(n)["dense"], 1, 2, 0)))
    return out


if __name__ == "__main__" and "--tfa" in sys.argv:
    import tensorflow as tf
    import tensorflow_addons as tfa

    name = sys.argv[sys.argv.index("--tfa") + 1]
    theirs = getattr(tfa.optimizers, name)
    result = {"dense": dense_times([ours(name), theirs, lambda: tf.keras.optimizers.legacy.Adam(1e-3)])}
    if name == "LazyAdam":
        result["sparse"] = sparse_times([ours(name), theirs])
    print(json.dumps(result))
