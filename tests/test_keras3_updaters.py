"""Variable updaters on the Keras 3 classes: ``updaters=`` and ``optimizers.set_updater`` route a
variable to its own rule there as on Keras 2 (the Keras 2 class's steps, bit for bit), with none of
the optimizer's slots, outside Keras 3's clipping, its gradient combined across replicas by the
updater's ``reduction`` (the float8 amax/scale overwrite: the maximum over replicas).

Expected numbers come from this library's Keras 2 classes given the same routing, and from the
replicas' own gradients (their maximum, their mean).
"""

import numpy as np
import pytest
import tensorflow as tf

pytestmark = pytest.mark.default_stack_only  # Keras 3 comes with TF >= 2.16

keras = pytest.importorskip("keras")
if not keras.__version__.startswith("3."):
    pytest.skip(f"Keras 3 classes; this stack has Keras {keras.__version__}", allow_module_level=True)
import optimizers  # noqa: E402
from optimizers import keras3  # noqa: E402


@pytest.fixture(autouse=True)
def _keras3_session():
    yield
    keras.backend.clear_session()


def _routing():
    return {"table": optimizers.RowwiseAdagrad(learning_rate=0.1), "scale": optimizers.OverwriteWithGradient(),
            "frozen": optimizers.Frozen(), "head": optimizers.SGD(0.5, momentum=0.9)}


NAMES = ("kernel", "table", "scale", "frozen", "head")


def _variables(make):
    rng = np.random.default_rng(0)
    return [make(rng.normal(size=(4, 3)).astype("float32"), name) for name in NAMES]


@pytest.mark.parametrize("sparse", [False, True])
def test_routed_variables_take_the_keras_2_class_s_steps_bit_for_bit(sparse):
    ours = _variables(lambda value, name: keras.Variable(value, name=name))
    theirs = _variables(lambda value, name: tf.Variable(value, name=name))
    k3 = keras3.Adam(learning_rate=0.01, updaters=_routing())
    k2 = optimizers.Adam(learning_rate=0.01, updaters=_routing())
    rng = np.random.default_rng(1)
    for _ in range(4):
        grads = [rng.normal(size=(4, 3)).astype("float32") for _ in NAMES]
        if sparse:  # the table's gradient: rows 0 and 2, row 2 twice
            k3_grads = [tf.IndexedSlices(tf.constant(g[:3]), tf.constant([0, 2, 2]), tf.constant([4, 3]))
                        if name == "table" else tf.constant(g) for g, name in zip(grads, NAMES)]
        else:
            k3_grads = [tf.constant(g) for g in grads]
        k3.apply(k3_grads, ours)
        k2.apply_gradients(zip(k3_grads, theirs))
        for a, b, name in zip(ours, theirs, NAMES):
            np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)
    assert int(k3.iterations.numpy()) == 4
    names = [v.name for v in k3.variables]
    assert not [n for n in names if n.startswith(("table_", "scale_", "frozen_", "head_")) and n.endswith(("_m", "_v"))]
    assert "table_RowwiseAdagrad_accumulator" in names and "head_SGD_momentum" in names


def test_set_updater_on_a_keras_3_variable_and_its_config_round_trip():
    var, other = keras.Variable([1.0, 2.0], name="w"), keras.Variable([1.0, 2.0], name="v")
    optimizers.set_updater(var, optimizers.Frozen())
    try:
        opt = keras3.SGD(learning_rate=0.5)
        opt.apply([tf.constant([1.0, 1.0])] * 2, [var, other])
        assert var.numpy().tolist() == [1.0, 2.0] and other.numpy().tolist() == [0.5, 1.5]
        assert optimizers.get_updater(var) == optimizers.Frozen()
    finally:
        optimizers.set_updater(var, None)
    routed = keras3.SGD(learning_rate=0.5, updaters={"bias": optimizers.OverwriteWithGradient(reduction="max")})
    config = routed.get_config()
    again = keras3.SGD.from_config(config)
    assert again.get_config() == config and again.rule.updater_for(tf.Variable(1.0, name="bias")) is not None
    assert keras.optimizers.deserialize(keras.optimizers.serialize(routed)).get_config() == config


def test_clipping_does_not_reach_a_routed_variable():
    """Keras 3's global_clipnorm clips the optimizer's own variables only (as on Keras 2)."""
    own, scale = keras.Variable([0.0, 0.0], name="kernel"), keras.Variable([0.0], name="scale")
    opt = keras3.SGD(learning_rate=1.0, global_clipnorm=1.0, updaters={"scale": optimizers.OverwriteWithGradient()})
    opt.apply([tf.constant([3.0, 4.0]), tf.constant([10.0])], [own, scale])
    np.testing.assert_allclose(own.numpy(), [-0.6, -0.8], rtol=1e-6)  # the norm of 5 clipped to 1
    assert scale.numpy().tolist() == [10.0]  # the value, whole


def test_a_model_trains_with_a_frozen_layer_and_saves_its_routing(tmp_path):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, name="body"), keras.layers.Dense(1, name="head")])
    before = [w.numpy() for w in model.layers[0].weights]
    model.compile(optimizer=keras3.AdamW(weight_decay=0.01, learning_rate=0.01, updaters={"body": optimizers.Frozen()}),
                  loss="mse", jit_compile=True)
    x = np.random.default_rng(0).normal(size=(32, 4)).astype("float32")
    model.fit(x, x[:, :1], epochs=2, batch_size=8, verbose=0)
    for var, value in zip(model.layers[0].weights, before):
        np.testing.assert_array_equal(var.numpy(), value)
    assert not np.array_equal(model.layers[1].kernel.numpy(), np.zeros((8, 1)))
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    assert loaded.optimizer.get_config() == model.optimizer.get_config()
    model.fit(x, x[:, :1], epochs=1, batch_size=8, shuffle=False, verbose=0)
    loaded.fit(x, x[:, :1], epochs=1, batch_size=8, shuffle=False, verbose=0)
    for a, b in zip(model.get_weights(), loaded.get_weights()):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("reduction, combine", [("max", np.max), ("mean", np.mean)])
def test_an_amax_overwrite_takes_the_replicas_maximum_or_mean(mirrored, reduction, combine):
    """The float8 amax pattern: each replica's gradient of ``amax`` is its own statistic."""
    with mirrored.scope():
        amax, weight = keras.Variable(0.0, name="amax"), keras.Variable([1.0, 1.0], name="weight")
        opt = keras3.SGD(learning_rate=0.1, updaters={"amax": optimizers.OverwriteWithGradient(reduction=reduction)})
        opt.build([amax, weight])
    statistics = [3.0, 7.0]
    per_replica = mirrored.experimental_distribute_values_from_function(
        lambda context: tf.constant(statistics[context.replica_id_in_sync_group]))

    @tf.function
    def step(statistic):
        def replica_step(statistic):
            with tf.GradientTape() as tape:
                loss = amax * statistic + tf.reduce_sum(weight * statistic)
            opt.apply(tape.gradient(loss, [amax.value, weight.value]), [amax, weight])
        mirrored.run(replica_step, args=(statistic,))

    step(per_replica)
    for replica in amax.value.values:
        assert float(replica.numpy()) == combine(statistics)
    for replica in weight.value.values:  # the ordinary variable: the gradients' sum, as Keras 3 sums them
        np.testing.assert_allclose(replica.numpy(), [1.0 - 0.1 * sum(statistics)] * 2, rtol=1e-6)


def test_a_wrapper_keeps_no_average_of_a_variable_its_inner_optimizer_routes_to_an_updater():
    frozen, trained = keras.Variable([1.0, 2.0], name="frozen_bias"), keras.Variable([1.0, 2.0], name="kernel")
    opt = keras3.MovingAverage(keras3.Adam(learning_rate=0.1, updaters={"frozen": optimizers.Frozen()}))
    opt.apply([tf.constant([1.0, 1.0])] * 2, [frozen, trained])
    assert opt.average_of(frozen) is None and opt.average_of(trained) is not None
    assert frozen.numpy().tolist() == [1.0, 2.0]
