"""Model zoo: tf_keras's legacy Adam vs ``AdamW`` and ``MovingAverage(AdamW)`` through ``train_on_batch``.

Four models with many variables of many shapes, at small sizes so that a run
stays short on 2 cores: (a) ``ResNet50(weights=None)`` on 32x32 images,
batch 8 (161 variables, dozens of shapes); (b) a 12-layer transformer encoder
of Keras layers with an embedding (width 64); (c) a 1000-layer MLP of width
16 (2000 small variables, 2 shapes); (d) a wide-and-deep model with a
200k-row embedding table (sparse gradients).

For each model, one process builds the model three times (same weights) and
compiles it with each optimizer, built-in first, then measures:

* **first step**: the first ``train_on_batch`` (tracing, slot creation, XLA
  compilation), ratio ours / built-in, goal <= 1.5;
* **steady step**: the median ``train_on_batch`` time of a round of 5 steps, in 10
  interleaved rounds (best round of each side: on a shared 2-core machine some rounds
  run at half speed, on either side), ratio goal <= 1.05;
* **compiled functions**: how many XLA functions ours compiled
  (``optimizers.compiled.compiled_function_count``), against its bound: the number of
  signature groups (rule, shape, dtype, options) times ``len(CHUNK_SIZES)``,
  plus one per shape for the moving average (printed, no ratio).

**Peak memory** (``VmHWM`` of ``/proc/self/status``) needs a process per optimizer: one more
process per (model, optimizer) builds the model and takes three steps; ratio
goal <= 1.2.

``python benchmarks/bench_zoo.py [--rounds] [model ...]`` prints the table alone (with
``--rounds``, each side's steady rounds too).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ("resnet50", "transformer", "mlp1000", "wide_deep")
OPTIMIZERS = ("builtin", "adamw", "ma_adamw")
GOALS = {"first": 1.5, "steady": 1.05, "memory": 1.2}
BATCH = 8


def build(model_name: str):
    """``(model, inputs, targets, loss)``: the same weights and data on every call."""
    import numpy as np

    from optimizers import keras

    layers = keras.layers
    keras.utils.set_random_seed(0)
    rng = np.random.RandomState(0)
    if model_name == "resnet50":
        model = keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=10)
        x = rng.rand(BATCH, 32, 32, 3).astype("float32")
        y = rng.randint(0, 10, BATCH)
        return model, x, y, "sparse_categorical_crossentropy"
    if model_name == "transformer":
        vocab, seq, width, heads = 1000, 32, 64, 4
        tokens = keras.Input((seq,), dtype="int32")
        h = layers.Embedding(vocab, width)(tokens)
        for _ in range(12):
            a = layers.MultiHeadAttention(heads, width // heads)(h, h)
            h = layers.LayerNormalization()(h + a)
            f = layers.Dense(2 * width, activation="relu")(h)
            h = layers.LayerNormalization()(h + layers.Dense(width)(f))
        out = layers.Dense(10)(layers.GlobalAveragePooling1D()(h))
        model = keras.Model(tokens, out)
        x = rng.randint(0, vocab, (BATCH, seq)).astype("int32")
        y = rng.randint(0, 10, BATCH)
        return model, x, y, keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    if model_name == "mlp1000":
        width = 16
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 20_000))  # Keras maps a 1000-layer graph recursively
        inputs = keras.Input((width,))
        h = inputs
        for _ in range(999):
            h = layers.Dense(width, activation="tanh")(h)
        model = keras.Model(inputs, layers.Dense(1)(h))
        return model, rng.randn(BATCH, width).astype("float32"), rng.randn(BATCH, 1).astype("float32"), "mse"
    if model_name == "wide_deep":
        rows, fields, width = 200_000, 8, 32
        ids = keras.Input((fields,), dtype="int32")
        wide = layers.Flatten()(layers.Embedding(rows, 1)(ids))
        deep = layers.Flatten()(layers.Embedding(rows, width)(ids))
        for units in (256, 128, 64):
            deep = layers.Dense(units, activation="relu")(deep)
        out = layers.Dense(1)(layers.Concatenate()([wide, deep]))
        model = keras.Model(ids, out)
        x = rng.randint(0, rows, (256, fields)).astype("int32")
        y = rng.randint(0, 2, (256, 1)).astype("float32")
        return model, x, y, keras.losses.BinaryCrossentropy(from_logits=True)
    raise ValueError(f"unknown model {model_name!r}; one of {MODELS}")


def make_optimizer(kind: str):
    import optimizers

    if kind == "builtin":
        return optimizers.keras.optimizers.legacy.Adam(1e-3)
    if kind == "adamw":
        return optimizers.AdamW(1e-4, 1e-3)
    if kind == "ma_adamw":
        return optimizers.MovingAverage(optimizers.AdamW(1e-4, 1e-3))
    raise ValueError(f"unknown optimizer {kind!r}; one of {OPTIMIZERS}")


def compiled_count(optimizer) -> int:
    from optimizers.compiled import compiled_function_count

    return compiled_function_count(optimizer)


def _warm_up() -> None:
    """One tiny model trained once: library loading and first-use costs are paid before timing."""
    import numpy as np

    from optimizers import keras

    model = keras.Sequential([keras.layers.Dense(1, input_shape=(2,))])
    model.compile(make_optimizer("builtin"), "mse")
    model.train_on_batch(np.ones((1, 2), "float32"), np.ones((1, 1), "float32"))


def time_model(model_name: str, steady_rounds: int = 10, steps_per_round: int = 5) -> dict:
    """First and steady step times and compiled-function counts of every optimizer, in this process."""
    _warm_up()
    runs = {}
    for kind in OPTIMIZERS:  # built-in first
        model, x, y, loss = build(model_name)
        optimizer = make_optimizer(kind)
        model.compile(optimizer, loss)
        start = time.perf_counter()
        model.train_on_batch(x, y)
        runs[kind] = dict(model=model, x=x, y=y, first=time.perf_counter() - start, optimizer=optimizer)
    for run in runs.values():
        run["model"].train_on_batch(run["x"], run["y"])
        run["rounds"] = []
    for _ in range(steady_rounds):  # interleaved rounds, as benchmarks.common.compare
        for run in runs.values():
            times = []
            for _ in range(steps_per_round):
                start = time.perf_counter()
                run["model"].train_on_batch(run["x"], run["y"])
                times.append(time.perf_counter() - start)
            run["rounds"].append(statistics.median(times))
    return {kind: dict(first=run["first"], steady=min(run["rounds"]), rounds=run["rounds"],
                       count=compiled_count(run["optimizer"]), variables=len(run["model"].trainable_weights))
            for kind, run in runs.items()}


def peak_memory(model_name: str, kind: str, steps: int = 3) -> float:
    """Peak resident memory (bytes) of a process that trains ``model_name`` with ``kind`` for ``steps`` steps."""
    _warm_up()
    model, x, y, loss = build(model_name)
    model.compile(make_optimizer(kind), loss)
    for _ in range(steps):
        model.train_on_batch(x, y)
    # VmHWM, this process's own peak: ``ru_maxrss`` would also count the memory of the parent process
    # (benchmarks/run.py) that forked it, which Linux carries over exec.
    with open("/proc/self/status") as f:
        kilobytes = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    return kilobytes * 1024.0


def _subprocess(*args: str) -> dict:
    result = subprocess.run([sys.executable, os.path.abspath(__file__), *args], capture_output=True, text=True,
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"})
    if result.returncode:
        raise RuntimeError(f"bench_zoo {' '.join(args)} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


_RESULTS: dict = {}


def results(model_name: str) -> dict:
    """Times (one process) and peak memory (one process per optimizer) of ``model_name``, measured once."""
    if model_name not in _RESULTS:
        out = _subprocess("--time", model_name)
        for kind in OPTIMIZERS:
            out[kind]["memory"] = _subprocess("--memory", model_name, kind)["memory"]
        _RESULTS[model_name] = out
    return _RESULTS[model_name]


def cases() -> list:
    import dataclasses

    from benchmarks.common import Case

    @dataclasses.dataclass
    class ZooCase(Case):
        unit: str = "ms"  # how benchmarks/run.py prints the two values: "ms" (seconds shown in ms) or "MB" (bytes)

    out = []
    for model_name in MODELS:
        for kind, label in (("adamw", "AdamW"), ("ma_adamw", "MovingAverage(AdamW)")):
            for what, unit in (("first", "ms"), ("steady", "ms"), ("memory", "MB")):
                def run(model_name=model_name, kind=kind, what=what) -> tuple[float, float]:
                    r = results(model_name)
                    return r[kind][what], r["builtin"][what]

                name = f"zoo {model_name}: {label} / Adam, {what}{' step' if what != 'memory' else ' peak RSS'}"
                out.append(ZooCase(name, "tf_keras legacy Adam", GOALS[what], run, unit))
    return out


def main(argv: list[str]) -> int:
    if argv[:1] == ["--time"]:
        print(json.dumps(time_model(argv[1])))
        return 0
    if argv[:1] == ["--memory"]:
        print(json.dumps(dict(memory=peak_memory(argv[1], argv[2]))))
        return 0
    show_rounds = "--rounds" in argv
    names = [a for a in argv if a != "--rounds"] or list(MODELS)
    print(f"{'model':12} {'optimizer':9} {'vars':>5} {'first s':>8} {'steady ms':>10} {'peak MB':>8} {'fns':>5}"
          f"   ratios ours/built-in: first (goal {GOALS['first']}), steady ({GOALS['steady']}), "
          f"memory ({GOALS['memory']})")
    for name in names:
        r = results(name)
        base = r["builtin"]
        for kind in OPTIMIZERS:
            m = r[kind]
            ratios = "" if kind == "builtin" else (f"   {m['first'] / base['first']:.2f} {m['steady'] / base['steady']:.2f} "
                                                   f"{m['memory'] / base['memory']:.2f}")
            print(f"{name:12} {kind:9} {m['variables']:5d} {m['first']:8.2f} {m['steady'] * 1e3:10.2f} "
                  f"{m['memory'] / 2**20:8.0f} {m['count']:5d}{ratios}", flush=True)
            if show_rounds:
                print(f"{'':12} {'':9} steady rounds, ms: {' '.join(f'{t * 1e3:.0f}' for t in m['rounds'])}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    sys.exit(main(sys.argv[1:]))
