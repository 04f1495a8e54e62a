"""Fused CPU kernels of this library, built on this machine against the installed TensorFlow.

TensorFlow has no fused kernel for decoupled weight decay followed by Adam (TensorFlow Addons'
AdamW): it takes a decay op, one more pass over each variable, then ``ResourceApplyAdam``; and a
moving average of the weights (``MovingAverage``) takes two more ops after it. ``fused_adam.cc``
is Adam's step with the decay before it, the average after it, or both, as one kernel, giving the
same bits in one pass over memory, and the average alone, after any other step
(``benchmarks/bench_adamw.py``, ``benchmarks/bench_moving_average.py``). ``adaptive.cc`` is the dense step of Yogi, AdaBelief,
RectifiedAdam, COCOB, ProximalAdagrad and Lion, each one kernel with the bits of the rule's plain ops
(TensorFlow Addons' ops; Keras 3's for Lion)
(``benchmarks/bench_adamlike.py``, ``benchmarks/bench_layerwise.py``). ``layerwise.cc`` is the
per-variable norm of LAMB, NovoGrad and ConditionalGradient (the bits of TensorFlow's ``reduce_sum(square(x))``,
whichever the thread pool, reading ``x`` once) and the element-wise pass on each side of it.
``sparse.cc`` is Adam's sparse steps: LazyAdam's, each touched row read and written once (TFA
gathers and scatters each row several times; ``benchmarks/bench_adamlike.py``), and Keras's,
which moves every row, with AdamW's decay of the touched rows and the average fused in, each
array read and written once (Keras takes a pass per operation; ``benchmarks/bench_zoo.py
wide_deep``).
They are compiled once per TensorFlow version and source (about a minute, with TensorFlow's own
compile flags and no FMA contraction, so that each operation rounds as in TensorFlow's kernels),
cached under ``$OPTIMIZERS_KERNEL_CACHE`` (default ``~/.cache/custom-optimizer-v2``) with a record
of their size and hash, and loaded with ``tf.load_op_library`` (:mod:`optimizers.kernels.cache`
says what the cache guarantees). The first build logs one line. ``python -m optimizers.kernels``
builds them ahead of time and prints where they are: a container image's build stage can run it,
and its runtime stage, with the same TensorFlow and the cache folder copied, needs no compiler.

Where they cannot be built (no C++ compiler, another OS, a failed build) or are turned off
(``OPTIMIZERS_NATIVE_KERNELS`` set to ``0``, ``false``, ``off`` or ``no``, in any case), :func:`op`
returns ``None`` and the step runs as before, with the same numbers: TensorFlow's kernels one
after the other (Adam), or the rule's own step. They are used only on this process's own CPU
devices and outside XLA (which cannot compile them).
"""

from __future__ import annotations

import contextlib
import functools
import glob
import os
import platform
import sys
import warnings
from typing import Any

import tensorflow as tf

from optimizers.kernels.cache import LibraryCache
from optimizers.tf_compat import in_xla_context, op_dtypes

__all__ = ["op", "fused_adam", "enabled", "library_path", "build", "SWITCH"]

_HERE = os.path.dirname(os.path.abspath(__file__))
# -ffp-contract=off: no fused multiply-add, so each operation rounds as in TensorFlow's kernels;
# -fno-math-errno, -fno-trapping-math: square roots and selections vectorize (the same values; no
# errno or floating-point trap is ever read). AVX is the
# baseline TensorFlow's x86 wheels require; nothing newer is assumed.
_FLAGS = ["-shared", "-fPIC", "-O3", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math", "-w"] + (
    ["-mavx"] if platform.machine() in ("x86_64", "AMD64") else [])
# Every source and header in this folder, which the package ships whole.
_CACHE = LibraryCache(sources=tuple(sorted(glob.glob(os.path.join(_HERE, "*.cc")))),
                      headers=tuple(sorted(glob.glob(os.path.join(_HERE, "*.h")))), flags=tuple(_FLAGS))
_OPS = {(True, False): "DecayedApplyAdam", (False, True): "ApplyAdamAverage",
        (True, True): "DecayedApplyAdamAverage"}
_SPARSE_OPS = {(False, False): "FusedSparseApplyAdam", (True, False): "DecayedSparseApplyAdam",
               (False, True): "SparseApplyAdamAverage", (True, True): "DecayedSparseApplyAdamAverage"}
_state: dict[str, Any] = {}

#: The environment variable that turns the kernels on or off.
SWITCH = "OPTIMIZERS_NATIVE_KERNELS"
_SPELLINGS = {**dict.fromkeys(("1", "true", "on", "yes"), True), **dict.fromkeys(("0", "false", "off", "no"), False)}


def enabled() -> bool:
    """Whether ``$OPTIMIZERS_NATIVE_KERNELS`` lets the kernels be used: unset or empty, or
    ``1``/``true``/``on``/``yes`` (any case); ``0``/``false``/``off``/``no`` turn them off, and any
    other value raises ``ValueError``."""
    value = os.environ.get(SWITCH, "")
    if value.strip() == "":
        return True
    if value.strip().lower() not in _SPELLINGS:
        raise ValueError(f"{SWITCH} must be one of 1, true, on, yes (the kernels are used) or 0, false, off, no "
                         f"(they are not), in any case. Received: {SWITCH}={value!r}")
    return _SPELLINGS[value.strip().lower()]


enabled()  # a misspelt switch is refused at import, before any step can start


def library_path() -> str | None:
    """Where the kernel library of this TensorFlow and source is (or would be) cached; ``None``
    where it cannot run (not Linux)."""
    return _CACHE.path() if sys.platform.startswith("linux") else None


def build() -> str:
    """Compile the kernel library if a whole one is not cached yet, and return its path (one
    process builds, others wait on a lock file). Raises ``RuntimeError`` where it cannot be built."""
    if library_path() is None:
        raise RuntimeError(f"The fused kernels need Linux. Received: platform {sys.platform!r}")
    return _CACHE.build()


def _library() -> Any:
    """The loaded kernel library, built on first use; ``None`` where it is off or fails (said once)."""
    if "library" not in _state:
        on = enabled()  # a misspelt switch raises here, every time, until it is fixed
        _state["library"] = None
        if on and library_path() is not None:
            try:
                _state["library"] = _CACHE.load()
            except (RuntimeError, OSError, tf.errors.OpError) as error:
                warnings.warn(f"This library's fused kernels are not available: each step that would take one "
                              f"takes TensorFlow's ops instead (TensorFlow's kernels one after the other, or the "
                              f"rule's own step: the same numbers or within rounding, more passes over memory): "
                              f"{error}", RuntimeWarning, stacklevel=3)
    return _state["library"]


def _place(spec: tf.DeviceSpec) -> tuple:
    """``(job, task, index)`` of a CPU, job and task ``None`` for this process without a cluster."""
    job = None if spec.job in (None, "localhost") else spec.job
    return job, spec.task if job else None, spec.device_index or 0


def _runs_here(var: Any) -> bool:
    """Whether an op on ``var`` runs on a CPU of this process (a parameter server's CPU, another
    process, has not loaded the library) and outside XLA."""
    if in_xla_context():
        return False
    here = _state.setdefault("here", {})  # device string -> whether it is a CPU of this process
    if var.device not in here:
        spec = tf.DeviceSpec.from_string(var.device)
        if "cpus" not in _state:
            _state["cpus"] = {_place(tf.DeviceSpec.from_string(d.name)) for d in tf.config.list_logical_devices("CPU")}
        here[var.device] = spec.device_type == "CPU" and _place(spec) in _state["cpus"]
    return here[var.device]


def op(var: Any, name: str) -> Any:
    """The kernel library's op ``name`` (``"FusedApplyYogi"``, ...) as a Python function, for a
    step of ``var``; or ``None`` where it is not available: not built, not a local CPU, inside XLA,
    or ``var``'s dtype is not one its ``REGISTER_OP`` declares (the C++ source is the one place)."""
    with contextlib.suppress(ValueError):  # a device string TensorFlow cannot parse: not ours to run
        if _runs_here(var):
            library = _library()
            if library is not None and var.dtype.base_dtype in _op_dtypes(name):
                return getattr(library, _snake_case(name))
    return None


_op_dtypes = functools.cache(op_dtypes)


def _snake_case(name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_")


def fused_adam(var: Any, decay: bool, average: bool, sparse: bool = False) -> Any:
    """The fused Adam op for ``var`` with the decay before it (``decay``), the moving average
    after it (``average``), or both, called with ``ResourceApplyAdam``'s arguments plus
    ``decay``, and ``average`` and ``average_rate``; or ``None`` where it is not available (see
    :func:`op`), or for neither (TensorFlow's own Adam kernel is that). ``sparse``: Keras's
    sparse Adam on every row (the touched rows decayed), called with ``alpha``, ``beta1``,
    ``beta2``, ``epsilon``, ``grad`` (the rows) and ``indices``, plus the same extras; for
    neither too."""
    name = (_SPARSE_OPS if sparse else _OPS).get((decay, average))
    return None if name is None else op(var, name)
