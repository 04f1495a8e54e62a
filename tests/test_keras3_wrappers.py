"""The Keras 3 wrappers (``optimizers.keras3.Lookahead``, ``MovingAverage``, ``SWA``): the Keras 2
wrappers' numbers around the same inner rule, Keras 3's own optimizers as inner optimizers, ``fit``
with and without ``jit_compile``, weight swaps, a strategy, and state kept by ``.keras`` files and
checkpoints (resumed in a new process).

Expected numbers come from this library's Keras 2 wrappers (the same hooks, run by OptimizerV2
around the Keras 2 class of the inner optimizer), in this process.
"""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

pytestmark = pytest.mark.default_stack_only  # Keras 3 comes with TF >= 2.16

keras = pytest.importorskip("keras")
if not keras.__version__.startswith("3."):
    pytest.skip(f"Keras 3 classes; this stack has Keras {keras.__version__}", allow_module_level=True)
from keras3_models import keras3_data, keras3_model  # noqa: E402

import optimizers  # noqa: E402
from optimizers import keras3  # noqa: E402
from optimizers.keras3.wrapper_optimizer import WrapperOptimizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Every Keras 3 wrapper, with arguments under which its hook acts within a few steps.
CASES = {
    "Lookahead": dict(sync_period=3, slow_step_size=0.4),
    "MovingAverage": dict(average_decay=0.9, dynamic_decay=True),
    "SWA": dict(start_averaging=2, average_period=2),
}
SLOT = {"Lookahead": "slow", "MovingAverage": "average", "SWA": "average"}
#: The classes trained on a model: every wrapper around Adam, and a MultiOptimizer.
MODEL_CASES = [*sorted(CASES), "MultiOptimizer"]
#: Inner optimizers: the Keras 3 class, and the Keras 2 class with the same numbers.
INNER = {
    "adam": (lambda: keras3.Adam(learning_rate=0.05), lambda: optimizers.Adam(learning_rate=0.05)),
    "sgd_momentum": (lambda: keras3.SGD(learning_rate=0.05, momentum=0.9),
                     lambda: optimizers.SGD(learning_rate=0.05, momentum=0.9)),
}


def test_every_keras_3_wrapper_has_a_case():
    wrappers = {name for name in keras3.__all__
                if isinstance(getattr(keras3, name), type) and issubclass(getattr(keras3, name), WrapperOptimizer)}
    assert sorted(CASES) == sorted(wrappers)


@pytest.fixture(autouse=True)
def _keras3_session():
    yield
    keras.backend.clear_session()


def _grads(shape, steps=7, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=shape).astype("float32"), [rng.normal(size=shape).astype("float32") for _ in range(steps)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("inner", sorted(INNER))
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_wrapper_takes_the_keras_2_wrapper_s_steps_bit_for_bit(name, inner, dtype):
    w0, grads = _grads((6, 4))
    ours, theirs = keras.Variable(w0.astype(dtype), dtype=dtype), tf.Variable(w0.astype(dtype))
    k3 = getattr(keras3, name)(INNER[inner][0](), **CASES[name])
    k2 = getattr(optimizers, name)(INNER[inner][1](), jit_compile=False, **CASES[name])
    assert isinstance(k3, keras.optimizers.Optimizer)
    for grad in grads:
        k3.apply([tf.constant(grad.astype(dtype))], [ours])
        k2.apply_gradients([(tf.constant(grad.astype(dtype)), theirs)])
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
        np.testing.assert_array_equal(k3.slots_of(ours)[SLOT[name]].numpy(), k2.get_slot(theirs, SLOT[name]).numpy())
    assert int(k3.iterations.numpy()) == len(grads)


@pytest.mark.parametrize("name", sorted(CASES))
def test_sparse_gradients_reach_the_inner_sparse_step_and_the_wrapper(name):
    """An embedding's gradient (``tf.IndexedSlices``, a repeated row): the Keras 2 wrapper's numbers."""
    w0, _ = _grads((8, 3))
    ids = tf.constant([1, 5, 1, 6])
    ours, theirs = keras.Variable(w0), tf.Variable(w0)
    k3 = getattr(keras3, name)(keras3.LazyAdam(learning_rate=0.05), **CASES[name])
    k2 = getattr(optimizers, name)(optimizers.LazyAdam(learning_rate=0.05), jit_compile=False, **CASES[name])
    for step in range(5):
        for var, apply in ((ours, lambda g, v: k3.apply([g], [v])), (theirs, lambda g, v: k2.apply_gradients([(g, v)]))):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.square(tf.gather(tf.convert_to_tensor(var), ids) - float(step)))
            grad = tape.gradient(loss, var.value if isinstance(var, keras.Variable) else var)
            assert isinstance(grad, tf.IndexedSlices)
            apply(grad, var)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize("name", sorted(CASES))
def test_keras_3_s_own_optimizer_inside_a_wrapper_gives_keras_2_s_numbers(name):
    """Keras 3's own Adam inside: the Keras 2 wrapper around Keras 2's Adam (the two Adams round
    differently in float32: about 20 ulps after 7 steps)."""
    w0, grads = _grads((6, 4))
    ours, theirs = keras.Variable(w0), tf.Variable(w0)
    k3 = getattr(keras3, name)(keras.optimizers.Adam(0.05), **CASES[name])
    k2 = getattr(optimizers, name)(optimizers.keras.optimizers.legacy.Adam(0.05), jit_compile=False, **CASES[name])
    for grad in grads:
        k3.apply([tf.constant(grad)], [ours])
        k2.apply_gradients([(tf.constant(grad), theirs)])
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-5)


def _weights(model):
    return np.concatenate([w.ravel() for w in model.get_weights()])


def _optimizer(name, model):
    """The optimizer ``name`` for ``model``: a wrapper around Adam, or a MultiOptimizer pairing this
    library's AdamW with the embedding and Keras 3's own SGD with the dense layers."""
    if name == "MultiOptimizer":
        embedding = [layer for layer in model.layers if isinstance(layer, keras.layers.Embedding)]
        dense = [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)]
        return keras3.MultiOptimizer([(keras3.AdamW(weight_decay=0.01, learning_rate=0.01), embedding),
                                      (keras.optimizers.SGD(0.05, momentum=0.9), dense)])
    return getattr(keras3, name)(keras3.Adam(learning_rate=0.01), **CASES[name])


def _fit(name, jit_compile, strategy=None, epochs=2):
    x, y = keras3_data()
    keras.utils.set_random_seed(0)
    with (strategy or tf.distribute.get_strategy()).scope():
        model = keras3_model()
        model.compile(optimizer=_optimizer(name, model), loss="mse", jit_compile=jit_compile)
    if epochs:
        model.fit(x, y, epochs=epochs, batch_size=16, shuffle=False, verbose=0)
    return model


@pytest.mark.parametrize("name", sorted(CASES))
def test_fit_trains_with_and_without_xla_to_the_same_weights(name):
    x, y = keras3_data()
    eager, compiled = _fit(name, False), _fit(name, True)
    before = _fit(name, True, epochs=0).evaluate(x, y, verbose=0)
    assert compiled.evaluate(x, y, verbose=0) < before
    assert int(compiled.optimizer.iterations.numpy()) == 8
    np.testing.assert_allclose(_weights(compiled), _weights(eager), rtol=1e-5, atol=1e-6)  # XLA may fuse (FMA)
    for ours, theirs in zip(compiled.trainable_weights, eager.trainable_weights):
        np.testing.assert_allclose(compiled.optimizer.slots_of(ours)[SLOT[name]].numpy(),
                                   eager.optimizer.slots_of(theirs)[SLOT[name]].numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["Lookahead", "MultiOptimizer"])
def test_mirrored_strategy_equals_one_device(mirrored, name):
    np.testing.assert_allclose(_weights(_fit(name, False, mirrored)), _weights(_fit(name, False)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["MovingAverage", "SWA"])
def test_mirrored_strategy_equals_one_device_and_swaps_on_every_replica(mirrored, name):
    alone, distributed = _fit(name, False), _fit(name, False, mirrored)
    np.testing.assert_allclose(_weights(distributed), _weights(alone), rtol=1e-5, atol=1e-6)
    trained = [w.numpy() for w in distributed.trainable_weights]
    averages = [distributed.optimizer.average_of(w).numpy() for w in distributed.trainable_weights]
    for var, average in zip(alone.trainable_weights, averages):
        np.testing.assert_allclose(average, alone.optimizer.average_of(var).numpy(), rtol=1e-5, atol=1e-6)
    for swapped_in in (averages, trained):  # twice: back to the trained weights
        distributed.optimizer.swap_weights()
        for var, value in zip(distributed.trainable_weights, swapped_in):
            for replica in var.value.values:  # every replica's copy
                np.testing.assert_array_equal(replica.numpy(), value)


@pytest.mark.parametrize("name", ["MovingAverage", "SWA"])
def test_swap_weights_twice_restores_both_bit_for_bit(name):
    model = _fit(name, False)
    opt = model.optimizer
    trained = [w.numpy() for w in model.trainable_weights]
    averages = [opt.average_of(w).numpy() for w in model.trainable_weights]
    opt.swap_weights()
    for var, average in zip(model.trainable_weights, averages):
        np.testing.assert_array_equal(var.numpy(), average)
    opt.swap_weights()
    for var, value, average in zip(model.trainable_weights, trained, averages):
        np.testing.assert_array_equal(var.numpy(), value)
        np.testing.assert_array_equal(opt.average_of(var).numpy(), average)
    opt.assign_average_vars(model.trainable_weights)
    for var, average in zip(model.trainable_weights, averages):
        np.testing.assert_array_equal(var.numpy(), average)


def test_swap_weights_before_any_average_says_how_to_get_them():
    opt = keras3.MovingAverage(keras3.SGD(learning_rate=0.1))
    assert not opt.has_shadow_copy
    with pytest.raises(ValueError, match="shadow_copy"):
        opt.swap_weights()
    var = keras.Variable([1.0, 2.0])
    opt.shadow_copy([var])
    assert opt.has_shadow_copy
    np.testing.assert_array_equal(opt.average_of(var).numpy(), [1.0, 2.0])


RESUME = """
import sys, numpy as np, keras
from optimizers import keras3  # registers the classes: no custom_objects
folder, names = sys.argv[1], sys.argv[2:]
(x, ids, y) = (np.load(f"{folder}/{f}.npy") for f in ("x", "ids", "y"))
for name in names:
    model = keras.models.load_model(f"{folder}/{name}.keras")
    model.fit([x, ids], y, epochs=1, batch_size=16, shuffle=False, verbose=0)
    slots = [v.numpy().ravel() for v in model.optimizer.variables]
    np.save(f"{folder}/{name}.npy", np.concatenate([w.ravel() for w in model.get_weights()] + slots))
    print(name, int(model.optimizer.iterations.numpy()))
"""


def test_keras_files_resume_bit_for_bit_in_a_new_process(tmp_path):
    """Each wrapper, and a MultiOptimizer: trained, saved, trained on; the file loaded in a new process
    and trained on gives the same weights and optimizer variables (every slot and step was kept)."""
    (x, ids), y = keras3_data()
    for f, value in (("x", x), ("ids", ids), ("y", y)):
        np.save(tmp_path / f"{f}.npy", value)
    expected = {}
    for name in MODEL_CASES:
        model = _fit(name, False, epochs=1)
        model.save(tmp_path / f"{name}.keras")
        model.fit([x, ids], y, epochs=1, batch_size=16, shuffle=False, verbose=0)
        slots = [v.numpy().ravel() for v in model.optimizer.variables]
        expected[name] = np.concatenate([w.ravel() for w in model.get_weights()] + slots)
    result = subprocess.run([sys.executable, "-c", RESUME, str(tmp_path), *MODEL_CASES], capture_output=True,
                            text=True, timeout=900, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-len(MODEL_CASES):] == [f"{name} 8" for name in MODEL_CASES]
    for name in MODEL_CASES:
        np.testing.assert_array_equal(np.load(tmp_path / f"{name}.npy"), expected[name], err_msg=name)


def test_a_checkpoint_keeps_the_wrapper_s_slots_the_inner_slots_and_the_step(tmp_path):
    w0, grads = _grads((5, 2))
    var = keras.Variable(w0)
    opt = keras3.Lookahead(keras3.Yogi(learning_rate=0.05), **CASES["Lookahead"])
    for grad in grads[:4]:
        opt.apply([tf.constant(grad)], [var])
    tf.train.Checkpoint(optimizer=opt, var=var).write(str(tmp_path / "ckpt"))
    for grad in grads[4:]:
        opt.apply([tf.constant(grad)], [var])
    restored_var = keras.Variable(np.zeros_like(w0))
    restored = keras3.Lookahead(keras3.Yogi(learning_rate=0.05), **CASES["Lookahead"])
    restored.build([restored_var])
    tf.train.Checkpoint(optimizer=restored, var=restored_var).read(str(tmp_path / "ckpt")).assert_consumed()
    assert int(restored.iterations.numpy()) == 4
    for grad in grads[4:]:
        restored.apply([tf.constant(grad)], [restored_var])
    np.testing.assert_array_equal(restored_var.numpy(), var.numpy())
    np.testing.assert_array_equal(restored.slots_of(restored_var)["slow"].numpy(), opt.slots_of(var)["slow"].numpy())


@pytest.mark.parametrize("name", sorted(CASES))
def test_config_round_trip_and_keras_3_serialization(name):
    opt = getattr(keras3, name)(keras3.AdamW(weight_decay=0.01, learning_rate=0.01), clipnorm=1.0, **CASES[name])
    config = opt.get_config()
    assert config["optimizer"]["config"]["clipnorm"] == 1.0  # set on the inner optimizer
    assert getattr(keras3, name).from_config(config).get_config() == config
    serialized = keras.optimizers.serialize(opt)
    assert serialized["registered_name"] == f"optimizers.keras3>{name}"
    assert keras.optimizers.deserialize(serialized).get_config() == config


def test_attributes_are_the_wrapper_s_then_the_inner_optimizer_s():
    inner = keras3.Adam(learning_rate=0.01)
    opt = keras3.Lookahead(inner, sync_period=2, slow_step_size=0.5)
    var = keras.Variable([1.0, 2.0])
    opt.apply([tf.constant([0.5, -0.5])], [var])
    opt.slow_step_size, opt.beta_1, opt.learning_rate = 0.25, 0.5, 0.02
    assert opt.wrapper.slow_step_size == 0.25
    assert float(inner.rule.beta_1.numpy()) == 0.5 and float(inner.learning_rate.numpy()) == np.float32(0.02)
    with pytest.raises(ValueError, match="slow_step_size"):
        opt.slow_step_size = 1.5
    with pytest.raises(ValueError, match="sync_period"):
        opt.sync_period = 4  # an option cannot change once a step is built
    assert opt.wrapper.slow_step_size == 0.25 and opt.sync_period == 2
    twin = optimizers.Lookahead(optimizers.Adam(learning_rate=0.01), sync_period=2, slow_step_size=0.5,
                                jit_compile=False)
    ref = tf.Variable([1.0, 2.0])
    twin.apply_gradients([(tf.constant([0.5, -0.5]), ref)])
    twin.slow_step_size, twin.beta_1, twin.learning_rate = 0.25, 0.5, 0.02
    for grad in ([1.0, 1.0], [-2.0, 0.5], [0.5, 0.5]):
        opt.apply([tf.constant(grad)], [var])
        twin.apply_gradients([(tf.constant(grad), ref)])
    np.testing.assert_array_equal(var.numpy(), ref.numpy())


def test_bad_arguments_name_themselves_and_leave_the_inner_optimizer_unchanged():
    inner = keras3.Adam(learning_rate=0.01, clipvalue=1.0)
    with pytest.raises(TypeError, match=r"Keras 3 optimizer.*Received: optimizer=<"):
        keras3.MovingAverage(optimizers.Adam())
    with pytest.raises(ValueError, match="names no Keras 3 optimizer.*'adamm'"):
        keras3.MovingAverage("adamm")
    with pytest.raises(TypeError, match="jit_compile=False"):
        keras3.MovingAverage(inner, jit_compile=False)
    with pytest.raises(ValueError, match=r"Only one of.*clipnorm=0\.5, clipvalue=1\.0"):
        keras3.MovingAverage(inner, clipnorm=0.5)
    with pytest.raises(ValueError, match=r"average_decay.*Received: average_decay=1\.5"):
        keras3.MovingAverage(keras3.Adam(), average_decay=1.5)
    with pytest.raises(ValueError, match="sync_period.*Received: sync_period=0"):
        keras3.Lookahead(inner, sync_period=0)
    assert inner.clipnorm is None and inner.clipvalue == 1.0
    assert isinstance(keras3.SWA("sgd").inner_optimizer, keras.optimizers.SGD)  # a name: Keras 3's own


def test_a_user_s_wrapper_becomes_a_keras_3_optimizer():
    class RunningMax(optimizers.OptimizerWrapper):
        def __init__(self, optimizer, name="RunningMax", **kwargs):
            super().__init__(optimizer, name, **kwargs)

        def slot_specs(self, var):
            return [optimizers.SlotSpec("max", initializer=lambda shape, dtype: tf.identity(var))]

        def after_step(self, var, slots, coefficients):
            return slots["max"].assign(tf.maximum(slots["max"], var))

    RunningMax3 = keras3.keras3_wrapper_class(RunningMax)
    var = keras.Variable([1.0, 2.0])
    opt = RunningMax3(keras3.SGD(learning_rate=1.0))
    for grad in ([1.0, -1.0], [-3.0, 1.0]):
        opt.apply([tf.constant(grad)], [var])
    assert var.numpy().tolist() == [3.0, 2.0] and opt.slots_of(var)["max"].numpy().tolist() == [3.0, 3.0]
    with pytest.raises(TypeError, match="wrapper_class"):
        keras3.keras3_wrapper_class(optimizers.Adam)


def _split_reference(model, x, y, pairs, epochs=2):
    """Each optimizer alone on its layers' variables, with the gradients of the whole model (16 a batch)."""
    for _ in range(epochs):
        for i in range(0, len(y), 16):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(keras.losses.mean_squared_error(y[i:i + 16], model([a[i:i + 16] for a in x])))
            grads = dict(zip((id(v) for v in model.trainable_variables),
                             tape.gradient(loss, [v.value for v in model.trainable_variables])))
            for optimizer, layers in pairs:
                variables = [v for layer in layers for v in layer.trainable_variables]
                optimizer.apply([grads[id(v)] for v in variables], variables)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_multi_optimizer_moves_each_layer_as_its_optimizer_alone(jit_compile):
    x, y = keras3_data()
    trained = _fit("MultiOptimizer", jit_compile)
    keras.utils.set_random_seed(0)
    model = keras3_model()
    layers = {kind: [layer for layer in model.layers if isinstance(layer, kind)]
              for kind in (keras.layers.Embedding, keras.layers.Dense)}
    _split_reference(model, x, y, [(keras3.AdamW(weight_decay=0.01, learning_rate=0.01), layers[keras.layers.Embedding]),
                                   (keras.optimizers.SGD(0.05, momentum=0.9), layers[keras.layers.Dense])])
    if jit_compile:  # XLA may fuse (FMA)
        np.testing.assert_allclose(_weights(trained), _weights(model), rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_array_equal(_weights(trained), _weights(model))
    opt = trained.optimizer
    assert int(opt.iterations.numpy()) == 8 and [int(o.iterations.numpy()) for o in opt._optimizers] == [8, 8]


def test_multi_optimizer_from_its_config_routes_by_path_and_keeps_weights_in_no_pair():
    keras.utils.set_random_seed(0)
    model = keras3_model()
    embedding = [layer for layer in model.layers if isinstance(layer, keras.layers.Embedding)]
    spec = keras3.MultiOptimizer.create_optimizer_spec(keras3.SGD(learning_rate=0.5), embedding)
    assert spec["weights"] == [var.path for var in embedding[0].weights]
    opt = keras3.MultiOptimizer.from_config(keras3.MultiOptimizer(optimizer_specs=[spec]).get_config())
    assert keras.optimizers.serialize(opt)["registered_name"] == "optimizers.keras3>MultiOptimizer"
    before = [w.numpy() for w in model.trainable_weights]
    model.compile(optimizer=opt, loss="mse")
    x, y = keras3_data()
    model.fit(x, y, epochs=1, batch_size=16, verbose=0)
    for var, value in zip(model.trainable_weights, before):
        assert np.array_equal(var.numpy(), value) == (var.path not in spec["weights"]), var.path


def test_multi_optimizer_refuses_what_it_cannot_do_and_names_it():
    keras.utils.set_random_seed(0)
    model = keras3_model()
    dense = [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)]
    with pytest.raises(ValueError, match="is in pairs 0 and 1"):
        keras3.MultiOptimizer([(keras3.Adam(), dense), (keras3.SGD(), dense[:1])])
    with pytest.raises(TypeError, match=r"optimizers_and_layers\[0\]\[0\]` must be a Keras 3 optimizer"):
        keras3.MultiOptimizer([(optimizers.Adam(), dense)])
    with pytest.raises(ValueError, match="Give exactly one"):
        keras3.MultiOptimizer()
    with pytest.raises(ValueError, match="no learning_rate"):
        keras3.MultiOptimizer([(keras3.Adam(), dense)], learning_rate=0.1)
    opt = keras3.MultiOptimizer([(keras3.Adam(), dense[:1])])
    with pytest.raises(ValueError, match="no learning rate of its own"):
        opt.learning_rate = 0.1
    assert not hasattr(opt, "learning_rate")  # what Keras 3's learning-rate callbacks check
    embedding = [layer for layer in model.layers if isinstance(layer, keras.layers.Embedding)][0]
    with pytest.raises(ValueError, match="None of the variables of this step is in a MultiOptimizer pair"):
        opt.apply([tf.zeros_like(w) for w in embedding.trainable_weights], embedding.trainable_weights)


def test_multi_optimizer_checkpoint_keeps_every_pair_s_state(tmp_path):
    keras.utils.set_random_seed(0)
    model = keras3_model()
    opt = _optimizer("MultiOptimizer", model)
    model.compile(optimizer=opt, loss="mse")
    x, y = keras3_data()
    model.fit(x, y, epochs=1, batch_size=16, shuffle=False, verbose=0)
    tf.train.Checkpoint(optimizer=opt, model=model).write(str(tmp_path / "ckpt"))
    keras.utils.set_random_seed(1)
    other = keras3_model()
    restored = _optimizer("MultiOptimizer", other)
    restored.build(other.trainable_variables)
    tf.train.Checkpoint(optimizer=restored, model=other).read(str(tmp_path / "ckpt")).assert_consumed()
    for ours, theirs in zip(restored.variables, opt.variables):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize("update_weights", [False, True])
def test_the_averaging_callbacks_evaluate_and_save_the_averages(tmp_path, update_weights):
    x, y = keras3_data()
    model = _fit("MovingAverage", False, epochs=0)
    saved = tmp_path / "avg-{epoch}.keras"
    history = model.fit(x, y, epochs=2, batch_size=16, shuffle=False, verbose=0, callbacks=[
        keras3.MovingAverageCallback(validation_data=(x, y)),
        keras3.AverageModelCheckpoint(update_weights=update_weights, filepath=str(saved))])
    trained = [w.numpy() for w in model.weights]
    averages = [model.optimizer.average_of(w).numpy() for w in model.trainable_weights]
    if update_weights:  # the averages stayed in the model after the last save
        for var, average in zip(model.trainable_weights, averages):
            np.testing.assert_array_equal(var.numpy(), average)
    else:
        model.optimizer.swap_weights()
        assert model.evaluate(x, y, verbose=0) == pytest.approx(history.history["average_loss"][-1], rel=1e-6)
        model.optimizer.swap_weights()
        np.testing.assert_array_equal(_weights(model), np.concatenate([w.ravel() for w in trained]))
    loaded = keras.models.load_model(str(saved).format(epoch=2))
    for var, average in zip(loaded.trainable_weights, averages):
        np.testing.assert_array_equal(var.numpy(), average)


def test_an_averaging_callback_refuses_a_model_without_averages():
    model = _fit("Lookahead", False, epochs=0)
    x, y = keras3_data()
    with pytest.raises(TypeError, match="MovingAverageCallback needs a model compiled with an averaging wrapper"):
        model.fit(x, y, epochs=1, verbose=0, callbacks=[keras3.MovingAverageCallback(validation_data=(x, y))])


@pytest.mark.parametrize("name", [*sorted(CASES), "MultiOptimizer"])
def test_loss_scale_optimizer_wraps_each_class_bit_for_bit(name):
    """Mixed precision's ``LossScaleOptimizer`` around a wrapper or a MultiOptimizer: the scaled
    gradients, unscaled (by a power of two: exactly), take the same steps as without it."""
    keras.utils.set_random_seed(0)
    scaled, plain = keras3_model(), keras3_model()
    plain.set_weights(scaled.get_weights())
    lso = keras.optimizers.LossScaleOptimizer(_optimizer(name, scaled))
    alone = _optimizer(name, plain)
    (x, ids), y = keras3_data(16)
    for _ in range(4):
        for model, opt in ((scaled, lso), (plain, alone)):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model([x, ids]) - y))
                if opt is lso:
                    loss = lso.scale_loss(loss)
            opt.apply(tape.gradient(loss, [v.value for v in model.trainable_variables]), model.trainable_variables)
    np.testing.assert_array_equal(_weights(scaled), _weights(plain))
    assert int(lso.iterations.numpy()) == 4


@pytest.mark.parametrize("name", MODEL_CASES)
def test_save_weights_keeps_the_optimizer_state(tmp_path, name):
    """``model.save_weights`` (``.weights.h5``) holds every optimizer variable: a model built anew and
    loaded from it takes the same next epoch."""
    (x, ids), y = keras3_data()
    model = _fit(name, False, epochs=1)
    model.save_weights(tmp_path / "w.weights.h5")
    again = _fit(name, False, epochs=0)
    again.optimizer.build(again.trainable_variables)
    again.load_weights(tmp_path / "w.weights.h5")
    for model_ in (model, again):
        model_.fit([x, ids], y, epochs=1, batch_size=16, shuffle=False, verbose=0)
    np.testing.assert_array_equal(_weights(again), _weights(model))
    for ours, theirs in zip(again.optimizer.variables, model.optimizer.variables):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_a_wrapper_acts_after_the_steps_an_accumulating_inner_optimizer_takes():
    """Keras 3's ``gradient_accumulation_steps=2`` on the inner SGD: the weights move every second
    call (by the two gradients' mean; Keras 3 counts those steps only), and the average follows
    them then only (numpy reference)."""
    w0, grads = _grads((3, 2), steps=6)
    var = keras.Variable(w0)
    opt = keras3.MovingAverage(keras3.SGD(learning_rate=0.1, gradient_accumulation_steps=2), average_decay=0.75)
    theta, average = w0.astype("float64"), w0.astype("float64")
    for call, grad in enumerate(grads, start=1):
        opt.apply([tf.constant(grad)], [var])
        if call % 2 == 0:
            theta = theta - np.float32(0.1) * (grads[call - 2] + grad) / 2.0
            average = average - (average - theta) * 0.25
        np.testing.assert_allclose(var.numpy(), theta, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(opt.average_of(var).numpy(), average, rtol=1e-6, atol=1e-6)
    lookahead = keras3.Lookahead(keras3.SGD(learning_rate=0.1, gradient_accumulation_steps=2), sync_period=2)
    slow_var = keras.Variable(w0)
    for call, grad in enumerate(grads[:4], start=1):
        before = lookahead.slots_of(slow_var)["slow"].numpy() if call > 1 else w0
        lookahead.apply([tf.constant(grad)], [slow_var])
        synchronized = call == 4  # the inner optimizer's second step
        assert np.array_equal(lookahead.slots_of(slow_var)["slow"].numpy(), before) != synchronized, call


@pytest.mark.parametrize("traced", [False, True])
def test_a_refused_hyperparameter_value_changes_nothing(traced):
    var = keras.Variable([1.0, 2.0])
    decay = tf.Variable(0.5)
    opt = keras3.MovingAverage(keras3.Adam(learning_rate=0.1), average_decay=decay)
    def step():
        opt.apply([tf.constant([1.0, 1.0])], [var])

    step = tf.function(step) if traced else step
    step()
    before = (var.numpy(), opt.average_of(var).numpy(), int(opt.iterations.numpy()))
    decay.assign(1.5)
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match="average_decay"):
        step()
    after = (var.numpy(), opt.average_of(var).numpy(), int(opt.iterations.numpy()))
    np.testing.assert_array_equal(after[0], before[0])
    np.testing.assert_array_equal(after[1], before[1])
    assert after[2] == before[2]
