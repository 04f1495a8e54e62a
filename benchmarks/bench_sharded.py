"""Lazy sparse AdamW on a table sharded over two parameter servers: a 1M-row table vs a 16k-row table.

An in-process localhost cluster (one worker, two parameter servers, this process as coordinator), the
table split in two shards by ``FixedShardsPartitioner``; each step updates the same 4096 touched rows
through a ``ClusterCoordinator`` (scheduled, then waited for). Ratio of the step times, goal <= 2: with
``lazy=True`` the step's cost follows the touched rows, not the table size.
"""

from __future__ import annotations

import socket

import numpy as np
import tensorflow as tf

from benchmarks.common import Case, median_step_seconds

TOUCHED, WIDTH, SHARDS = 4096, 32, 2
_CLUSTER: dict = {}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _strategy() -> tf.distribute.Strategy:
    if "strategy" not in _CLUSTER:
        spec = tf.train.ClusterSpec({"chief": [f"localhost:{_free_port()}"], "worker": [f"localhost:{_free_port()}"],
                                     "ps": [f"localhost:{_free_port()}" for _ in range(SHARDS)]})
        config = tf.compat.v1.ConfigProto()
        config.inter_op_parallelism_threads = 3  # workers + 2: closures deadlock on few cores otherwise
        _CLUSTER["servers"] = [tf.distribute.Server(spec, job_name=job, task_index=i, config=config, start=True)
                               for job, n in (("worker", 1), ("ps", SHARDS)) for i in range(n)]
        resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(spec, task_type="chief", task_id=0,
                                                                        rpc_layer="grpc")
        partitioner = tf.distribute.experimental.partitioners.FixedShardsPartitioner(SHARDS)
        strategy = tf.distribute.experimental.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
        _CLUSTER["strategy"] = strategy
        _CLUSTER["coordinator"] = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    return _CLUSTER["strategy"]


def _step_seconds(rows: int) -> float:
    import optimizers

    strategy = _strategy()
    coordinator = _CLUSTER["coordinator"]
    with strategy.scope():
        table = tf.Variable(tf.zeros([rows, WIDTH]), name=f"table_{rows}")
        opt = optimizers.AdamW(weight_decay=1e-4, learning_rate=1e-3, lazy=True)
    shards = table.variables
    rng = np.random.default_rng(0)
    indices = tf.constant(np.sort(rng.choice(16384, TOUCHED, replace=False)), tf.int64)  # in both tables
    values = tf.constant(rng.standard_normal((TOUCHED, WIDTH)).astype("float32"))

    @tf.function
    def step():
        def replica():
            grads = []
            start = 0
            for shard in shards:  # each shard receives the rows it holds, as the embedding lookup's gradient does
                end = start + shard.shape[0]
                mask = (indices >= start) & (indices < end)
                grads.append((tf.IndexedSlices(tf.boolean_mask(values, mask), tf.boolean_mask(indices, mask) - start,
                                               tf.constant(shard.shape.as_list(), tf.int64)), shard))
                start = end
            opt.apply_gradients(grads)

        strategy.run(replica)

    def scheduled():
        coordinator.schedule(step)
        coordinator.join()

    return median_step_seconds(scheduled, warmup=3, repeats=15)


def _run() -> tuple[float, float]:
    return _step_seconds(1 << 20), _step_seconds(1 << 14)


def cases() -> list[Case]:
    return [Case(f"lazy sparse AdamW, {SHARDS} shards on PS: 1M / 16k rows ({TOUCHED} touched)",
                 "same, 16k-row table", 2.0, _run)]


if __name__ == "__main__":
    ours, peer = _run()
    print(f"1M rows {ours * 1e3:.2f} ms, 16k rows {peer * 1e3:.2f} ms, ratio {ours / peer:.2f} (goal <= 2)")
