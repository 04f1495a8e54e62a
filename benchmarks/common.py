"""Shared benchmark helpers: problems, timing, and the case record.

Every benchmark module ``benchmarks/bench_*.py`` defines ``cases() -> list[Case]``.
``Case.run()`` times our optimizer and its peer *in the same process run* and
returns ``(ours_seconds, peer_seconds)``; ``benchmarks/run.py`` prints ratios.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import statistics
import subprocess
import time
from typing import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TFA_PYTHON = os.path.join(ROOT, ".venv-tf215", "bin", "python")  # the TF 2.15 + TFA environment


def tfa_output(script: str, *args: str) -> str:
    """The last line ``script`` prints when run with ``--tfa *args`` in the TF 2.15 + TFA
    environment (with this library importable)."""
    result = subprocess.run([TFA_PYTHON, os.path.abspath(script), "--tfa", *args], capture_output=True, text=True,
                            cwd=ROOT, check=True, env={**os.environ, "PYTHONPATH": ROOT})
    return result.stdout.strip().splitlines()[-1]


@dataclasses.dataclass
class Case:
    name: str  # what is compared, e.g. "template Adam / fused Adam, 8M float32"
    peer: str  # the peer's name, e.g. "tf_keras legacy Adam"
    goal: float  # the ratio ours/peer must not exceed
    run: Callable[[], tuple[float, float]]


def median_step_seconds(step: Callable[[], object], warmup: int = 3, repeats: int = 15) -> float:
    """Median wall time of ``step()`` (a tf.function), after ``warmup`` calls."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def dense_problem(num_params: int = 8_000_000, num_vars: int = 8, seed: int = 0):
    """``num_vars`` float32 variables totalling ``num_params`` and fixed gradients."""
    rng = np.random.RandomState(seed)
    size = num_params // num_vars
    shapes = [(size // 1000, 1000)] * num_vars
    variables = [tf.Variable(rng.randn(*s).astype("float32")) for s in shapes]
    grads = [tf.constant(rng.randn(*s).astype("float32")) for s in shapes]
    return variables, grads


def small_problem():
    """2000 small variables (1000 kernels of 16x16, 1000 biases of 16) and their gradients."""
    rng = np.random.RandomState(0)
    shapes = [(16, 16), (16,)] * 1000
    return ([tf.Variable(rng.randn(*s).astype("float32")) for s in shapes],
            [tf.constant(rng.randn(*s).astype("float32")) for s in shapes])


def train_step(optimizer, variables, grads) -> Callable[[], object]:
    """A tf.function that applies ``grads`` to ``variables`` once."""

    @tf.function
    def step():
        optimizer.apply_gradients(zip(grads, variables))

    return step


def compare(make_ours: Callable[[], object], make_peer: Callable[[], object], repeats: int = 15,
            problem: Callable[[], tuple] = dense_problem) -> tuple[float, float]:
    """Time ours and the peer on separate copies of the same problem, interleaved."""
    ours_vars, grads = problem()
    peer_vars, _ = problem()
    return best_rounds(train_step(make_ours(), ours_vars, grads), train_step(make_peer(), peer_vars, grads), repeats)


def best_rounds(ours: Callable[[], object], peer: Callable[[], object], repeats: int = 15) -> tuple[float, float]:
    """Median step seconds of ``ours`` and ``peer`` (tf.functions), the best of 10 interleaved rounds of each."""
    ours_t, peer_t = [], []
    # Interleaved, so drift hits both sides alike; the best round of each side is kept: on a shared
    # 2-core machine, stretches of a few hundred ms run at half speed, on either side.
    rounds = 10
    for _ in range(rounds):
        ours_t.append(median_step_seconds(ours, repeats=max(repeats // rounds, 3)))
        peer_t.append(median_step_seconds(peer, repeats=max(repeats // rounds, 3)))
    return min(ours_t), min(peer_t)


def without_kernel(cls):
    """``cls`` (``optimizers.Adam``, ``AdamW``...) with its fused kernel turned off: the rule
    through the template's compiled (or, with ``jit_compile=False``, plain-ops) step, what a
    rule without a hand-fused kernel gets. ``optimizers.Adam`` itself runs TensorFlow's fused
    Adam kernel (see ``optimizers.execution.StepRunner._dense_kernel``)."""

    class WithoutKernel(cls):
        def dense_kernel(self, var, options):
            return None

    WithoutKernel.__name__ = cls.__name__
    return WithoutKernel


def without_fused_decay(cls):
    """``cls`` (``optimizers.AdamW``...) without the kernel that fuses the decay and a moving
    average into its own (``UpdateRule.fused_dense_kernel``): a decayed variable then takes the
    decay op before the kernel, or, compiled alone, the decay fused into its compiled step, and
    a moving average runs after the kernel."""

    class WithoutFusedDecay(cls):
        def fused_dense_kernel(self, var, options, decay, average):
            return None

    WithoutFusedDecay.__name__ = cls.__name__
    return WithoutFusedDecay


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed(steps: list, rounds: int = 10, per_round: int = 8) -> list[tuple[float, float]]:
    """``(wall, cpu)`` seconds per call of each step (a tf.function): best interleaved round of each."""
    for step in steps:
        for _ in range(3):
            step()
    best = [[float("inf"), float("inf")] for _ in steps]
    for _ in range(rounds):
        for i, step in enumerate(steps):
            wall, cpu = time.perf_counter(), _cpu()
            for _ in range(per_round):
                step()
            best[i][0] = min(best[i][0], (time.perf_counter() - wall) / per_round)
            best[i][1] = min(best[i][1], (_cpu() - cpu) / per_round)
    return [tuple(b) for b in best]
