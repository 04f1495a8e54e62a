"""ParameterServerStrategy on an in-process localhost cluster: this process is the coordinator (chief); two
workers and two parameter servers are ``tf.distribute.Server`` objects in it; the embedding table is sharded
over both parameter servers by ``MinSizePartitioner``, so its gradients reach each shard as ``IndexedSlices``.

* Every entry of the conformance table, trained by a ``ClusterCoordinator`` loop one step at a time, equals
  single-process training step by step (weights and ``iterations``), or is refused with the library's
  documented error, for the documented reason.
* ``model.fit`` under the strategy trains with two workers.
* Slots of a shard are shaped and placed like the shard; ``slots.slot_memory`` counts them once;
  ``MovingAverage`` averages and swaps sharded variables.
* A checkpoint written with the table in 2 shards restores into 3 shards and into a single process
  (optimizer slots included), and training continues exactly.

One cluster for the module (servers cannot be stopped in-process, so they live until the process ends).
"""


import numpy as np
import pytest
import tensorflow as tf

import optimizers
import slots
from integration.optimizers_under_test import BATCH, BY_NAME, IDS, OPTIMIZERS, batches, case_model, data, train_step

from conftest import free_port

pytestmark = pytest.mark.xdist_group("parameter_server")  # one cluster per process (make test: --dist loadgroup)

WORKERS, PARAMETER_SERVERS = 2, 2
STEPS = 3
# Float32 kernels may round the last bit differently on a shard (a shorter tensor: vectorized and scalar
# tails split differently) and in XLA's per-variable calls vs the single-process grouped calls.
MAX_ULP = 8  # measured: at most 6 (Yogi)
# The table (8 x 3 float32, 96 bytes) gets 2 shards (4 rows each); the dense kernel (24 bytes) stays whole.
TWO_SHARDS = dict(min_shard_bytes=48, max_shards=2)
THREE_SHARDS = dict(min_shard_bytes=32, max_shards=3)  # rows 3, 3, 2


@pytest.fixture(scope="module")
def cluster():
    """Two workers and two parameter servers in this process; the resolver sees this process as chief."""
    spec = tf.train.ClusterSpec({
        "chief": [f"localhost:{free_port()}"],
        "worker": [f"localhost:{free_port()}" for _ in range(WORKERS)],
        "ps": [f"localhost:{free_port()}" for _ in range(PARAMETER_SERVERS)],
    })
    config = tf.compat.v1.ConfigProto()
    config.inter_op_parallelism_threads = WORKERS + 2  # fewer deadlock closures on a 2-core machine
    servers = [tf.distribute.Server(spec, job_name=job, task_index=i, protocol="grpc", config=config, start=True)
               for job, count in (("worker", WORKERS), ("ps", PARAMETER_SERVERS)) for i in range(count)]
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(spec, task_type="chief", task_id=0,
                                                                    rpc_layer="grpc")
    yield resolver
    del servers


def _strategy(resolver, **partitioner):
    part = tf.distribute.experimental.partitioners.MinSizePartitioner(**partitioner)
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver, variable_partitioner=part)
    return strategy, tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)


@pytest.fixture(scope="module")
def two_shards(cluster):
    return _strategy(cluster, **TWO_SHARDS)


def logical_variables(net):
    """The model's variables as declared: a sharded table once (not its shards), in declaration order."""
    out = []
    for var in net.weights:
        table = var._sharded_container() if hasattr(var, "_sharded_container") else var
        if not any(table is seen for seen in out):
            out.append(table)
    return out


def values(net):
    return [tf.convert_to_tensor(v).numpy() for v in logical_variables(net)]


def rules_of(opt, var):
    """Every rule that updates ``var``: through the wrappers, each optimizer's updater for it or the optimizer."""
    out = []
    while opt is not None:
        if isinstance(opt, optimizers.CustomOptimizerV2):
            out.append(opt.updater_for(var) or opt)
        opt = getattr(opt, "inner_optimizer", None)
    return out


def expected_refusal(opt, net):
    """``(error type, message part)`` the library must refuse ``opt`` with on ``net`` under this strategy, or
    ``None``. MultiOptimizer's step fails on the workers; a rule reading whole-variable statistics (a norm,
    ``UpdateRule.whole_variable``) refuses a shard, whose statistics would be the shard's alone."""
    if isinstance(opt, optimizers.MultiOptimizer):
        return NotImplementedError, "MultiOptimizer does not run under ParameterServerStrategy"
    shards = [v for v in net.trainable_variables if hasattr(v, "_sharded_container")]
    assert shards, "the table must be sharded"
    if any(getattr(rule, "whole_variable", False) for var in shards for rule in rules_of(opt, var)):
        return ValueError, "is split into shards by the strategy's `variable_partitioner`"
    return None


def coordinator_step(strategy, coordinator, net, opt):
    step = train_step(net, opt)

    @tf.function
    def run(x, y):
        return strategy.run(step, args=(x, y))

    def one_step(x, y):  # scheduled, then waited for: steps run one at a time
        coordinator.schedule(run, args=(x, y))
        coordinator.join()

    return one_step


def build(case, strategy=None, seed=3, like=None):
    """``case``'s model and optimizer (under ``strategy``'s scope if given), with the weights of ``like``."""
    with strategy.scope() if strategy is not None else tf.init_scope():
        net, opt = case_model(case, seed=seed), case.make()
    if like is not None:
        for var, value in zip(logical_variables(net), values(like)):
            var.assign(value)
    return net, opt


def assert_close(actual, expected, message):
    for a, b in zip(actual, expected):
        np.testing.assert_array_max_ulp(a, b, maxulp=MAX_ULP)
    assert len(actual) == len(expected), message


@pytest.mark.parametrize("case", OPTIMIZERS, ids=IDS)
def test_coordinator_loop_equals_single_process(two_shards, case):
    strategy, coordinator = two_shards
    x, y = data()
    ref_net, ref_opt = build(case)
    ref_step = tf.function(train_step(ref_net, ref_opt))
    net, opt = build(case, strategy, like=ref_net)
    assert sorted(v.device for v in net.get_layer("embedding").embeddings.variables) == [
        f"/job:ps/replica:0/task:{i}/device:CPU:0" for i in range(PARAMETER_SERVERS)]  # sharded over both
    step = coordinator_step(strategy, coordinator, net, opt)
    refusal = expected_refusal(opt, net)
    if refusal is not None:
        before = values(net)
        error, message = refusal
        with pytest.raises(error, match=message.replace("`", ".")):
            step(*next(batches(x, y, 1)))
        for a, b in zip(values(net), before):
            np.testing.assert_array_equal(a, b)  # nothing changed
        return
    for i, (a, b) in enumerate(batches(x, y, STEPS)):
        step(a, b)
        ref_step(a, b)
        assert int(opt.iterations.numpy()) == int(ref_opt.iterations.numpy()), f"step {i}"
        assert_close(values(net), [v.numpy() for v in ref_net.weights], f"step {i}")


# Not GradientAccumulation: workers that step concurrently share its window (one worker: test above).
FIT_CASES = ["adamw", "adamw_lazy_scaled", "sgd+frozen_bias", "adam+rowwise_adagrad", "moving_average(adamw)"]


@pytest.mark.parametrize("name", FIT_CASES)
def test_model_fit_two_workers(two_shards, name):
    """``model.fit`` under the strategy (two workers take steps concurrently, so only order-free facts are
    exact): the step count, frozen variables, untouched rows of lazy updates."""
    strategy, _ = two_shards
    case = BY_NAME[name]
    x, y = data()
    x = np.where(x == 0, 1, x)  # row 0 of the table is never looked up
    with strategy.scope():
        net = case_model(case, seed=3)
        net.compile(optimizer=case.make(), loss="mse")
    table, kernel, bias = 0, 1, 2  # logical_variables' order
    before = values(net)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(BATCH)
    history = net.fit(dataset, epochs=2, steps_per_epoch=4, verbose=0)
    opt = net.optimizer
    inner_steps = 8 // getattr(opt, "accumulation_steps", 1)
    assert int(opt.iterations.numpy()) == inner_steps
    after = values(net)
    assert all(np.isfinite(h) for h in history.history["loss"])
    assert not np.array_equal(after[kernel], before[kernel])  # it trained
    if name == "sgd+frozen_bias":
        np.testing.assert_array_equal(after[bias], before[bias])
    if name in ("adamw_lazy_scaled", "adam+rowwise_adagrad"):  # row-wise: an untouched row stays as it was
        np.testing.assert_array_equal(after[table][0], before[table][0])


def test_slots_follow_their_shard(two_shards):
    strategy, coordinator = two_shards
    case = BY_NAME["moving_average(adamw)"]  # Adam's m and v, and the averages
    x, y = data()
    ref_net, ref_opt = build(case)
    net, opt = build(case, strategy, like=ref_net)
    step = coordinator_step(strategy, coordinator, net, opt)
    ref_step = tf.function(train_step(ref_net, ref_opt))
    for a, b in batches(x, y, STEPS):
        step(a, b)
        ref_step(a, b)
    table = net.get_layer("embedding").embeddings
    inner = opt.inner_optimizer
    for shard in table.variables:
        m, v, average = inner.get_slot(shard, "m"), inner.get_slot(shard, "v"), opt.get_slot(shard, "average")
        assert m.shape == v.shape == average.shape == shard.shape
        assert m.device == v.device == average.device == shard.device
    # The inner optimizer's sharded slot (Keras 2 rebuilds one from the shards' slots) has the table's layout.
    assert [s.shape for s in inner.get_slot(table, "m").variables] == [s.shape for s in table.variables]
    # Shards are counted once each: the same bytes as the unsharded single-process optimizer.
    assert slots.slot_memory(opt) == slots.slot_memory(ref_opt) != {}
    assert slots.slot_memory(inner) == slots.slot_memory(ref_opt.inner_optimizer) != {}
    # The averages equal single-process training's; swapping exchanges them with the weights, twice restores.
    ref_average = ref_opt.get_slot(ref_net.get_layer("embedding").embeddings, "average").numpy()
    def average():
        return np.concatenate([opt.get_slot(shard, "average").numpy() for shard in table.variables])

    np.testing.assert_array_max_ulp(average(), ref_average, maxulp=MAX_ULP)
    trained = values(net)
    opt.swap_weights()
    np.testing.assert_array_max_ulp(values(net)[0], ref_average, maxulp=MAX_ULP)
    np.testing.assert_array_equal(average(), trained[0])
    opt.swap_weights()
    for a, b in zip(values(net), trained):
        np.testing.assert_array_equal(a, b)


CHECKPOINT_CASES = ["adamw_lazy_scaled", "moving_average(sgdw+rowwise)"]


@pytest.mark.parametrize("name", CHECKPOINT_CASES)
def test_checkpoint_across_cluster_shapes(cluster, two_shards, name, tmp_path):
    """Written with the table in 2 shards. Into one process: 2 more steps equal 4 uninterrupted single-process
    steps (the slots were restored too: fresh slots would differ). Into 3 shards: the weights and ``iterations``
    restore exactly and training continues; the table's slots do not follow a new shard count (Keras 2 keys
    them by shard; documented in docs/training-at-scale.md)."""
    case = BY_NAME[name]
    x, y = data()
    ref_net, ref_opt = build(case)
    ref_step = tf.function(train_step(ref_net, ref_opt))
    strategy, coordinator = two_shards
    net, opt = build(case, strategy, like=ref_net)
    step = coordinator_step(strategy, coordinator, net, opt)
    for a, b in batches(x, y, 2):
        step(a, b)
    path = tf.train.Checkpoint(model=net, optimizer=opt).write(str(tmp_path / "ckpt"))
    written = values(net)
    for a, b in batches(x, y, 4):
        ref_step(a, b)
    expected = [v.numpy() for v in ref_net.weights]
    later = list(batches(x, y, 4))[2:]

    # One process, no strategy.
    net1, opt1 = build(case, seed=7)
    tf.train.Checkpoint(model=net1, optimizer=opt1).read(path).assert_existing_objects_matched()
    step1 = tf.function(train_step(net1, opt1))
    for a, b in later:
        step1(a, b)
    assert int(opt1.iterations.numpy()) == 4
    assert_close(values(net1), expected, "single process")

    # Three shards (another strategy on the same cluster).
    strategy3, coordinator3 = _strategy(cluster, **THREE_SHARDS)
    net3, opt3 = build(case, strategy3, seed=7)
    assert len(net3.get_layer("embedding").embeddings.variables) == 3
    tf.train.Checkpoint(model=net3, optimizer=opt3).read(path)
    assert int(opt3.iterations.numpy()) == 2
    for a, b in zip(values(net3), written):
        np.testing.assert_array_equal(a, b)
    step3 = coordinator_step(strategy3, coordinator3, net3, opt3)
    for a, b in later:
        step3(a, b)
    assert int(opt3.iterations.numpy()) == 4
    assert all(np.isfinite(v).all() for v in values(net3))
