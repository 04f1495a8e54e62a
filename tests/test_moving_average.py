"""MovingAverage: raw weights equal the inner optimizer's, averages equal the numpy
reference (tests/reference.py), exact swaps in every context, state and configs
that survive checkpoints and .h5 files, and the callback."""

import os

import numpy as np
import pytest
import tensorflow as tf

import optimizers
from optimizers import SGD as TemplateSGD
from optimizers import Adam as TemplateAdam
from optimizers import MovingAverage, MovingAverageCallback

import reference
from conftest import TOLERANCE, keras

RULES = reference.MOVING_AVERAGE_RULES
INNER = {
    "keras_sgd": lambda: keras.optimizers.legacy.SGD(0.1, momentum=0.9),
    "keras_adam": lambda: keras.optimizers.legacy.Adam(0.05),
    "template_sgd": lambda: TemplateSGD(0.1, momentum=0.9),
    "template_adam": lambda: TemplateAdam(0.05),
    "template_adamw": lambda: optimizers.AdamW(0.01, 0.05),
}
SHAPE = (5, 3)
STEPS = 6


def _gradients(sparse, dtype, seed=1):
    rng = np.random.RandomState(seed)
    grads = []
    for _ in range(STEPS):
        if sparse:
            indices = np.array([0, 3, 3, 1])  # a repeated row
            grads.append((rng.randn(4, SHAPE[1]).astype(dtype), indices))
        else:
            grads.append(rng.randn(*SHAPE).astype(dtype))
    return grads


def _as_tf(grad):
    if isinstance(grad, tuple):
        return tf.IndexedSlices(tf.constant(grad[0]), tf.constant(grad[1]), tf.constant(SHAPE, tf.int64))
    return tf.constant(grad)


def _trajectory(opt, grads, dtype, in_function):
    """Raw weights (and averages, for a MovingAverage) after each step."""
    var = tf.Variable(np.random.RandomState(0).randn(*SHAPE).astype(dtype))
    initial = var.numpy()

    def apply(grad):
        opt.apply_gradients([(grad, var)])

    if in_function:
        apply = tf.function(apply)
    raw, averages = [], []
    for grad in grads:
        apply(_as_tf(grad))
        raw.append(var.numpy())
        if isinstance(opt, MovingAverage):
            averages.append(opt.get_slot(var, "average").numpy())
    return initial, raw, averages


def _reference_averages(initial, raw, rule):
    average, out = initial, []
    for step, param in enumerate(raw):
        average = reference.moving_average(average, param, reference.moving_average_decay(step, **rule))
        out.append(average)
    return out


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("rule", sorted(RULES))
@pytest.mark.parametrize("inner", sorted(INNER))
def test_raw_equal_inner_alone_and_averages_equal_reference(inner, rule, sparse):
    """Plain ops (jit_compile=False) give the reference's bits exactly."""
    grads = _gradients(sparse, "float32")
    initial, raw, averages = _trajectory(MovingAverage(INNER[inner](), jit_compile=False, **RULES[rule]),
                                         grads, "float32", in_function=False)
    _, alone, _ = _trajectory(INNER[inner](), grads, "float32", in_function=False)
    for step, (ours, theirs) in enumerate(zip(raw, alone)):
        np.testing.assert_array_equal(ours, theirs, err_msg=f"raw weights, step {step}")
    for step, (ours, expected) in enumerate(zip(averages, _reference_averages(initial, raw, RULES[rule]))):
        np.testing.assert_array_equal(ours, expected, err_msg=f"average, step {step}")


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("jit_compile", [True, False], ids=["xla", "plain"])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_dtypes_xla_and_tf_function(dtype, jit_compile, sparse):
    rule = RULES["dynamic_start"]
    grads = _gradients(sparse, dtype)
    initial, raw, averages = _trajectory(MovingAverage(INNER["keras_adam"](), jit_compile=jit_compile, **rule),
                                         grads, dtype, in_function=True)
    _, alone, _ = _trajectory(INNER["keras_adam"](), grads, dtype, in_function=True)
    tol = TOLERANCE[tf.as_dtype(dtype)]
    for step, (ours, theirs) in enumerate(zip(raw, alone)):
        np.testing.assert_array_equal(ours, theirs, err_msg=f"raw weights, step {step}")
    for step, (ours, expected) in enumerate(zip(averages, _reference_averages(initial, raw, rule))):
        assert ours.dtype == np.dtype(dtype)
        np.testing.assert_allclose(ours, expected, err_msg=f"average, step {step}", **tol)


def test_num_updates_variable_is_read_every_step():
    num_updates = tf.Variable(0, dtype=tf.int64)
    var = tf.Variable([1.0, -2.0])
    opt = MovingAverage(keras.optimizers.legacy.SGD(0.5), average_decay=0.99, num_updates=num_updates,
                        jit_compile=False)
    average = var.numpy()
    for step, n in enumerate([0, 5, 50]):
        num_updates.assign(n)
        opt.apply_gradients([(tf.constant([1.0, 1.0]), var)])
        decay = reference.moving_average_decay(step, average_decay=0.99, num_updates=n)
        average = reference.moving_average(average, var.numpy(), decay)
        np.testing.assert_array_equal(opt.get_slot(var, "average").numpy(), average)
    assert opt.get_config()["num_updates"] == 50


def test_iterations_and_learning_rate_are_the_inner_optimizers():
    inner = keras.optimizers.legacy.Adam(0.05)
    opt = MovingAverage(inner)
    var = tf.Variable([1.0])
    for _ in range(3):
        opt.apply_gradients([(tf.constant([1.0]), var)])
    assert opt.iterations is inner.iterations
    assert int(opt.iterations.numpy()) == 3
    assert opt.lr is inner.learning_rate and opt.learning_rate is inner.learning_rate
    opt.learning_rate = 0.5
    assert float(keras.backend.get_value(inner.learning_rate)) == 0.5
    opt.lr = 0.25
    assert float(keras.backend.get_value(inner.lr)) == 0.25


def test_clipping_arguments_go_to_the_inner_optimizer():
    grads = [tf.constant([3.0, 4.0])]
    var, alone_var = tf.Variable([1.0, 1.0]), tf.Variable([1.0, 1.0])
    opt = MovingAverage(keras.optimizers.legacy.SGD(0.1), clipnorm=1.0)
    keras.optimizers.legacy.SGD(0.1, clipnorm=1.0).apply_gradients(zip(grads, [alone_var]))
    opt.apply_gradients(zip(grads, [var]))
    assert opt.inner_optimizer.clipnorm == 1.0
    np.testing.assert_array_equal(var.numpy(), alone_var.numpy())
    inner = keras.optimizers.legacy.SGD(0.1, clipnorm=2.0)
    with pytest.raises(ValueError, match=r"`clipnorm`.*clipnorm=1.0"):
        MovingAverage(inner, clipnorm=1.0)
    assert inner.clipnorm == 2.0


def test_updater_variables_get_no_average():
    frozen = tf.Variable([1.0, 2.0], name="frozen_table")
    attached = tf.Variable([3.0], name="scale")
    optimizers.set_updater(attached, optimizers.OverwriteWithGradient())
    ordinary = tf.Variable([5.0], name="kernel")
    opt = MovingAverage(TemplateAdam(0.1, updaters={"frozen_table": optimizers.Frozen()}))
    for _ in range(2):
        opt.apply_gradients([(tf.constant([1.0, 1.0]), frozen), (tf.constant([7.0]), attached),
                             (tf.constant([1.0]), ordinary)])
    assert opt.get_slot(ordinary, "average") is not None
    for var in (frozen, attached):
        with pytest.raises(KeyError):
            opt.get_slot(var, "average")
    assert [w.name.split("/")[-1] for w in opt.weights].count("average:0") == 1
    values = [frozen.numpy(), attached.numpy()]
    opt.swap_weights()
    opt.assign_average_vars([frozen, attached, ordinary])
    np.testing.assert_array_equal(frozen.numpy(), values[0])
    np.testing.assert_array_equal(attached.numpy(), values[1])


def _train_for_swap(strategy):
    """Weights and averages of very different sizes: a+b / a-b swaps lose bits here."""
    with strategy.scope():
        var = tf.Variable([1.0, 1e-7, -3.0, 0.1])
        opt = MovingAverage(keras.optimizers.legacy.SGD(1.0), average_decay=0.99)

    @tf.function
    def step(grad):
        def replica_step():
            ctx = tf.distribute.get_replica_context()
            share = tf.cast(ctx.replica_id_in_sync_group + 1, tf.float32) / 3.0  # replicas' shares sum to grad
            opt.apply_gradients([(grad * share, var)])

        strategy.run(replica_step)

    step(tf.constant([-1e8, 1e-3, 0.3, 1e-9]))
    step(tf.constant([0.5, -1e-8, 7.0, 3.0]))
    return var, opt


def _components(var):
    return [v.numpy() for v in getattr(var, "values", [var])]


SWAP_CONTEXTS = ["no_strategy", "default_strategy", "mirrored_scope", "mirrored_replica_context",
                 "mirrored_outside_scope", "mirrored_tf_function"]


@pytest.mark.parametrize("context", SWAP_CONTEXTS)
def test_two_swaps_restore_exactly(context, mirrored):
    strategy = mirrored if context.startswith("mirrored") else tf.distribute.get_strategy()
    var, opt = _train_for_swap(strategy)
    average = opt.get_slot(var, "average")
    trained, averaged = _components(var), _components(average)
    assert len(trained) == (2 if context.startswith("mirrored") else 1)
    assert not np.array_equal(trained[0], averaged[0])

    def swap():
        if context == "default_strategy":
            with tf.distribute.get_strategy().scope():
                opt.swap_weights()
        elif context == "mirrored_scope":
            with strategy.scope():
                opt.swap_weights()
        elif context == "mirrored_replica_context":
            strategy.run(opt.swap_weights)
        elif context == "mirrored_tf_function":
            tf.function(lambda: strategy.run(opt.swap_weights))()
        else:
            opt.swap_weights()

    swap()
    for got, want in zip(_components(var) + _components(average), averaged + trained):
        np.testing.assert_array_equal(got, want)
    swap()
    for got, want in zip(_components(var) + _components(average), trained + averaged):
        np.testing.assert_array_equal(got, want)


def test_swap_before_any_average_raises():
    opt = MovingAverage("sgd")
    assert opt.has_shadow_copy is False
    with pytest.raises(ValueError, match=r"swap_weights\(\) needs averages"):
        opt.swap_weights()


def test_shadow_copy_starts_at_the_weights():
    var = tf.Variable([1.5, -2.0])
    opt = MovingAverage(keras.optimizers.legacy.SGD(1.0), average_decay=0.5, jit_compile=False)
    opt.shadow_copy([var])
    assert opt.has_shadow_copy is True
    np.testing.assert_array_equal(opt.get_slot(var, "average").numpy(), [1.5, -2.0])
    opt.apply_gradients([(tf.constant([1.0, 1.0]), var)])
    expected = reference.moving_average(np.array([1.5, -2.0], "float32"), var.numpy(), np.float32(0.5))
    np.testing.assert_array_equal(opt.get_slot(var, "average").numpy(), expected)


def test_assign_average_vars(mirrored):
    var, opt = _train_for_swap(mirrored)
    untouched = tf.Variable([9.0])
    averaged = _components(opt.get_slot(var, "average"))
    opt.assign_average_vars([var, untouched])
    for got, want in zip(_components(var), averaged):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(untouched.numpy(), [9.0])


def _state(opt, var):
    inner = opt.inner_optimizer
    return [var.numpy(), opt.get_slot(var, "average").numpy(), opt.iterations.numpy()] + [
        inner.get_slot(var, name).numpy() for name in inner.get_slot_names()]


@pytest.mark.parametrize("inner", ["keras_adam", "template_adam"])
def test_checkpoint_round_trip(inner, tmp_path):
    grads = [tf.constant(g) for g in _gradients(False, "float32")]
    var = tf.Variable(np.ones(SHAPE, "float32"))
    opt = MovingAverage(INNER[inner](), average_decay=0.9, dynamic_decay=True)
    for grad in grads[:3]:
        opt.apply_gradients([(grad, var)])
    path = tf.train.Checkpoint(var=var, optimizer=opt).save(str(tmp_path / "ckpt"))
    restored_var = tf.Variable(np.zeros(SHAPE, "float32"))
    restored = MovingAverage(INNER[inner](), average_decay=0.9, dynamic_decay=True)
    tf.train.Checkpoint(var=restored_var, optimizer=restored).restore(path)
    for grad in grads[3:]:
        opt.apply_gradients([(grad, var)])
        restored.apply_gradients([(grad, restored_var)])
    for ours, theirs in zip(_state(restored, restored_var), _state(opt, var)):
        np.testing.assert_array_equal(ours, theirs)


def _model():
    model = keras.Sequential([keras.layers.Dense(4, activation="tanh", input_shape=(3,)), keras.layers.Dense(1)])
    model.build((None, 3))
    return model


def _data():
    rng = np.random.RandomState(3)
    x = rng.randn(32, 3).astype("float32")
    return x, x.sum(axis=1, keepdims=True) ** 2


def _inner_for_h5(name):
    if name == "adamw":
        return optimizers.AdamW(weight_decay=1e-3, learning_rate=0.01)
    return INNER[name]()


@pytest.mark.parametrize("inner", ["keras_adam", "template_adam", "adamw"])
def test_h5_save_and_load_without_custom_objects(inner, tmp_path):
    x, y = _data()
    model = _model()
    model.compile(MovingAverage(_inner_for_h5(inner), average_decay=0.9, start_step=1), loss="mse")
    model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    path = str(tmp_path / "model.h5")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded.optimizer, MovingAverage)
    assert type(loaded.optimizer.inner_optimizer) is type(model.optimizer.inner_optimizer)
    assert loaded.optimizer.get_config() == model.optimizer.get_config()
    for ours, theirs in zip(loaded.optimizer.get_weights(), model.optimizer.get_weights()):
        np.testing.assert_array_equal(ours, theirs)
    for m in (model, loaded):
        m.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(loaded.variables + loaded.optimizer.weights, model.variables + model.optimizer.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.name)


@pytest.mark.parametrize("averaging", ["moving_average", "swa"])
@pytest.mark.parametrize("filename", ["model.keras", "model.h5", "saved_model"])
def test_a_loaded_model_gives_its_saved_averages_before_any_step(averaging, filename, tmp_path):
    """``.keras`` and SavedModel create the optimizer's slots from the file at the first step; the
    averages are wanted before it (evaluate or export with them): they are created from the file then."""
    x, y = _data()
    model = _model()
    inner = optimizers.AdamW(weight_decay=1e-3, learning_rate=0.01)
    opt = MovingAverage(inner, average_decay=0.9) if averaging == "moving_average" else optimizers.SWA(inner)
    model.compile(opt, loss="mse")
    model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    path = str(tmp_path / filename)
    model.save(path)
    loaded = keras.models.load_model(path)
    averages = [model.optimizer.average_of(v).numpy() for v in model.trainable_variables]
    assert not any(np.array_equal(a, v.numpy()) for a, v in zip(averages, model.trainable_variables))
    for net in (model, loaded):
        with optimizers.averaged_weights(net):
            for value, var in zip(averages, net.trainable_variables):
                np.testing.assert_array_equal(var.numpy(), value)
    for m in (model, loaded):  # and training resumes as if never saved
        m.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(loaded.variables + loaded.optimizer.weights, model.variables + model.optimizer.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.name)


@pytest.mark.parametrize("inner", ["keras_adam", "keras_sgd", "template_adam", "adamw", "string"])
def test_config_round_trip(inner):
    made = MovingAverage("adam") if inner == "string" else MovingAverage(
        _inner_for_h5(inner), average_decay=0.95, num_updates=7, start_step=3, dynamic_decay=True)
    config = made.get_config()
    assert config["optimizer"]["config"]["name"] == made.inner_optimizer.get_config()["name"]
    again = MovingAverage.from_config(config)
    assert type(again.inner_optimizer) is type(made.inner_optimizer)
    assert again.get_config() == config
    via_keras = keras.optimizers.deserialize(keras.optimizers.serialize(made))
    assert isinstance(via_keras, MovingAverage) and via_keras.get_config() == config


def test_string_resolves_to_legacy_keras2_optimizer():
    assert isinstance(MovingAverage("adam").inner_optimizer, keras.optimizers.legacy.Adam)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(optimizer=keras.optimizers.Adam()), TypeError, r"`optimizer` must be a Keras 2 .*Received: optimizer="),
    (dict(optimizer=3), TypeError, r"Received: optimizer=3"),
    (dict(optimizer="no_such_optimizer"), ValueError, r"Received: optimizer='no_such_optimizer'"),
    (dict(average_decay=1.5), ValueError, r"`average_decay` must be in \[0.0, 1.0\]. Received: average_decay=1.5"),
    (dict(average_decay="0.9"), TypeError, r"Received: average_decay='0.9'"),
    (dict(num_updates=2.5), TypeError, r"`num_updates`.*Received: num_updates=2.5"),
    (dict(num_updates=tf.Variable(1.0)), TypeError, r"`num_updates`.*integer"),
    (dict(start_step=-1), ValueError, r"`start_step` must be >= 0. Received: start_step=-1"),
    (dict(dynamic_decay="yes"), TypeError, r"Received: dynamic_decay='yes'"),
    (dict(weight_decay=0.1), TypeError, r"unexpected keyword argument `weight_decay`. Received: weight_decay=0.1"),
    (dict(clipnorm=-1.0), ValueError, r"Received: clipnorm=-1.0"),
])
def test_bad_arguments(kwargs, error, match):
    kwargs = {"optimizer": keras.optimizers.legacy.SGD(), **kwargs}
    with pytest.raises(error, match=match):
        MovingAverage(**kwargs)


def test_fit_under_mirrored_strategy_equals_single_device(mirrored):
    x, y = _data()
    results = []
    for strategy in (mirrored, tf.distribute.get_strategy()):
        tf.random.set_seed(0)
        with strategy.scope():
            model = _model()
            model.set_weights([np.full(w.shape, 0.1 * (i + 1), "float32") for i, w in enumerate(model.weights)])
            model.compile(MovingAverage(keras.optimizers.legacy.SGD(0.01), average_decay=0.9), loss="mse")
        model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        opt = model.optimizer
        results.append([_components(v)[0] for v in model.trainable_variables]
                       + [_components(opt.get_slot(v, "average"))[0] for v in model.trainable_variables])
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, **TOLERANCE[tf.float32])


class _StopAveraging(keras.callbacks.Callback):
    """After the first epoch, ``average_decay=0``: from then on each average takes its weight's value."""

    def on_epoch_end(self, epoch, logs=None):
        if epoch == 0:
            self.model.optimizer.average_decay = 0.0


@pytest.mark.parametrize("context", ["eager", "train_function", "mirrored_train_function"])
def test_average_decay_set_during_fit_takes_effect_in_the_train_function(context, mirrored):
    x, y = _data()
    strategy = mirrored if context.startswith("mirrored") else tf.distribute.get_strategy()
    with strategy.scope():
        model = _model()
        model.compile(MovingAverage(TemplateAdam(0.05), average_decay=0.99), loss="mse",
                      run_eagerly=context == "eager")
    model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0, callbacks=[_StopAveraging()])
    opt = model.optimizer
    assert opt.average_decay == 0.0 and opt.get_config()["average_decay"] == 0.0
    for var in model.trainable_variables:
        for weight, average in zip(_components(var), _components(opt.get_slot(var, "average"))):
            np.testing.assert_allclose(average, weight, **TOLERANCE[tf.float32])


def _fit(callbacks, x, y, epochs=3):
    model = _model()
    model.set_weights([np.full(w.shape, 0.1 * (i + 1), "float32") for i, w in enumerate(model.weights)])
    model.compile(MovingAverage(keras.optimizers.legacy.Adam(0.05), average_decay=0.8), loss="mse")
    history = model.fit(x, y, batch_size=8, epochs=epochs, shuffle=False, verbose=0, callbacks=callbacks)
    return model, history


def test_callback_evaluates_and_saves_averages_and_restores_training_weights(tmp_path):
    x, y = _data()
    path = str(tmp_path / "avg-{epoch}.h5")
    model, history = _fit([MovingAverageCallback(path, save_weights_only=True, validation_data=(x, y))], x, y)
    plain, _ = _fit([], x, y)
    # The callback does not disturb training: the same weights and averages, bit for bit.
    for ours, theirs in zip(model.variables + model.optimizer.weights, plain.variables + plain.optimizer.weights):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    averages = [model.optimizer.get_slot(v, "average").numpy() for v in model.trainable_variables]
    saved = _model()
    saved.load_weights(path.format(epoch=3))
    for got, want in zip(saved.get_weights(), averages):
        np.testing.assert_array_equal(got, want)
    saved.compile(loss="mse")
    expected_loss = saved.evaluate(x, y, verbose=0)
    assert len(history.history["average_loss"]) == 3
    np.testing.assert_allclose(history.history["average_loss"][-1], expected_loss, rtol=1e-6)
    assert sorted(os.listdir(tmp_path)) == ["avg-1.h5", "avg-2.h5", "avg-3.h5"]


def test_callback_saves_whole_model_with_averages(tmp_path):
    x, y = _data()
    path = str(tmp_path / "avg.h5")
    model, _ = _fit([MovingAverageCallback(path)], x, y, epochs=2)
    averages = [model.optimizer.get_slot(v, "average").numpy() for v in model.trainable_variables]
    loaded = keras.models.load_model(path)
    for var, want in zip(loaded.trainable_variables, averages):
        np.testing.assert_array_equal(var.numpy(), want)
        np.testing.assert_array_equal(loaded.optimizer.get_slot(var, "average").numpy(), want)


def test_callback_needs_a_moving_average():
    x, y = _data()
    model = _model()
    model.compile(keras.optimizers.legacy.SGD(), loss="mse")
    before = model.get_weights()
    with pytest.raises(TypeError, match="MovingAverageCallback needs a model compiled with an averaging wrapper "
                                        r"\(MovingAverage or SWA\).*Received: model.optimizer="):
        model.fit(x, y, epochs=1, verbose=0, callbacks=[MovingAverageCallback(validation_data=(x, y))])
    for got, want in zip(model.get_weights(), before):  # refused before the first step
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("outer", ["gradient_accumulation", "loss_scale"])
def test_averaged_weights_and_the_callback_find_a_moving_average_inside_another_wrapper(outer, tmp_path):
    """``GradientAccumulation(MovingAverage(...))`` (the order its docs give) and the
    ``LossScaleOptimizer`` that ``compile`` puts around an optimizer under ``mixed_float16``."""
    x, y = _data()
    model = _model()
    average = MovingAverage(keras.optimizers.legacy.Adam(0.05), average_decay=0.8)
    if outer == "gradient_accumulation":
        opt = optimizers.GradientAccumulation(average, 2)
    else:
        opt = keras.mixed_precision.LossScaleOptimizer(average)
    model.compile(opt, loss="mse")
    path = str(tmp_path / "avg.h5")
    model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0,
              callbacks=[MovingAverageCallback(path, save_weights_only=True)])
    trained = model.get_weights()
    averages = [average.get_slot(v, "average").numpy() for v in model.trainable_variables]
    with optimizers.averaged_weights(model):
        for var, want in zip(model.trainable_variables, averages):
            np.testing.assert_array_equal(var.numpy(), want)
    for got, want in zip(model.get_weights(), trained):
        np.testing.assert_array_equal(got, want)
    saved = _model()
    saved.load_weights(path)
    for got, want in zip(saved.get_weights(), averages):
        np.testing.assert_array_equal(got, want)


def test_averaged_weights_under_mirrored_strategy(mirrored):
    x, y = _data()
    with mirrored.scope():
        model = _model()
        model.compile(MovingAverage(keras.optimizers.legacy.Adam(0.05), average_decay=0.8), loss="mse")
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    opt = model.optimizer
    trained = [_components(v) for v in model.trainable_variables]
    averages = [_components(opt.get_slot(v, "average")) for v in model.trainable_variables]
    with mirrored.scope(), optimizers.averaged_weights(model):
        for var, want in zip(model.trainable_variables, averages):
            for got, expected in zip(_components(var), want):
                np.testing.assert_array_equal(got, expected)
    for var, want in zip(model.trainable_variables, trained):
        assert len(want) == 2
        for got, expected in zip(_components(var), want):
            np.testing.assert_array_equal(got, expected)
