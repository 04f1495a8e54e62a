"""Variable updaters: the steps of one `apply_gradients` call (CustomOptimizerV2's docstring), checked one by one."""

import warnings

import numpy as np
import pytest
import tensorflow as tf

import optimizers
import slots
from optimizers import SGD, Adam

from conftest import keras


def _pair(value, grad):
    return tf.constant(grad, tf.float32), tf.Variable(value, dtype=tf.float32)


def test_overwrite_dense_ignores_learning_rate_and_gets_no_slots():
    grad, scale = _pair([1.0, 2.0], [5.0, -3.0])
    kgrad, kernel = _pair([1.0, 1.0], [1.0, 1.0])
    opt = Adam(learning_rate=0.5, updaters={scale.ref(): optimizers.OverwriteWithGradient()})
    opt.apply_gradients([(grad, scale), (kgrad, kernel)])
    np.testing.assert_array_equal(scale.numpy(), [5.0, -3.0])
    # Adam's own slots exist for the kernel only: 2 slots x 2 float32 elements.
    assert slots.slot_memory(opt) == {"m": 8, "v": 8}
    with pytest.raises(KeyError):
        opt.get_slot(scale, "m")


def test_overwrite_sparse_overwrites_only_touched_rows_summing_repeats():
    table = tf.Variable(np.zeros((4, 2), np.float32))
    optimizers.set_updater(table, optimizers.OverwriteWithGradient())
    grad = tf.IndexedSlices(tf.constant([[1.0, 1.0], [2.0, 3.0], [4.0, 4.0]]), tf.constant([3, 1, 3]),
                            tf.constant([4, 2]))
    SGD(learning_rate=0.1).apply_gradients([(grad, table)])
    np.testing.assert_array_equal(table.numpy(), [[0, 0], [2, 3], [0, 0], [5, 5]])


def test_frozen_variable_does_not_move_and_ordinary_one_does():
    frozen = tf.Variable([1.0, 2.0], name="frozen_w")
    free = tf.Variable([1.0, 2.0], name="free_w")
    opt = SGD(learning_rate=0.5, momentum=0.9, updaters={"frozen": optimizers.Frozen()})
    for _ in range(2):
        opt.apply_gradients([(tf.constant([1.0, 1.0]), frozen), (tf.constant([1.0, 1.0]), free)])
    np.testing.assert_array_equal(frozen.numpy(), [1.0, 2.0])
    # numpy reference for the free variable: two momentum steps.
    v = -0.5 * np.ones(2)
    expected = np.array([1.0, 2.0]) + v
    v = 0.9 * v - 0.5
    expected = expected + v
    np.testing.assert_allclose(free.numpy(), expected, rtol=1e-6)
    assert slots.slot_memory(opt) == {"momentum": 8}


def test_all_updater_step_still_advances_iterations():
    a = tf.Variable([1.0])
    b = tf.Variable([1.0])
    opt = Adam(updaters=[(a, optimizers.Frozen()), (b, optimizers.OverwriteWithGradient())])

    @tf.function
    def step():
        opt.apply_gradients([(tf.constant([3.0]), a), (tf.constant([4.0]), b)])

    step()
    step()
    assert int(opt.iterations.numpy()) == 2
    assert slots.slot_memory(opt) == {}
    np.testing.assert_array_equal(b.numpy(), [4.0])


def test_keras3_overwrite_with_gradient_attribute():
    var = tf.Variable([0.0, 0.0])
    var.overwrite_with_gradient = True
    opt = SGD(learning_rate=0.1)
    opt.apply_gradients([(tf.constant([7.0, 8.0]), var)])
    np.testing.assert_array_equal(var.numpy(), [7.0, 8.0])
    assert isinstance(optimizers.get_updater(var), optimizers.OverwriteWithGradient)


def test_lookup_order_mapping_then_attached_then_attribute():
    var = tf.Variable([1.0], name="stat")
    var.overwrite_with_gradient = True
    assert isinstance(optimizers.get_updater(var), optimizers.OverwriteWithGradient)
    optimizers.set_updater(var, optimizers.Frozen())
    assert isinstance(optimizers.get_updater(var), optimizers.Frozen)
    opt = SGD(updaters={"st.t": optimizers.OverwriteWithGradient(reduction="max")})
    assert opt.updater_for(var) == optimizers.OverwriteWithGradient(reduction="max")
    optimizers.set_updater(var, None)
    assert isinstance(optimizers.get_updater(var), optimizers.OverwriteWithGradient)


def test_an_updater_attached_after_the_first_step_gets_its_slots():
    var = tf.Variable([1.0, 2.0])
    opt = optimizers.Adam(0.1)
    opt.apply_gradients([(tf.constant([1.0, 1.0]), var)])  # Adam's slots
    optimizers.set_updater(var, optimizers.SGD(0.5, momentum=0.9))
    try:
        before = var.numpy()
        opt.apply_gradients([(tf.constant([1.0, 1.0]), var)])  # the updater's momentum slot, created now
    finally:
        optimizers.set_updater(var, None)
    np.testing.assert_allclose(var.numpy(), before - 0.5, rtol=1e-6)  # first momentum step: -lr * g
    assert opt.get_slot(var, "SGD/momentum") is not None


def test_updater_variables_are_exempt_from_clipping_and_weight_decay():
    stat = tf.Variable([0.0, 0.0])
    weight = tf.Variable([1.0, 1.0])
    opt = SGD(learning_rate=1.0, clipvalue=0.5, weight_decay=0.1,
              updaters={stat.ref(): optimizers.OverwriteWithGradient()})
    opt.apply_gradients([(tf.constant([10.0, -10.0]), stat), (tf.constant([10.0, -10.0]), weight)])
    np.testing.assert_array_equal(stat.numpy(), [10.0, -10.0])  # neither clipped nor decayed
    # weight: decayed by 10% (TFA rule), then the clipped gradient (+-0.5) applied with lr 1.
    np.testing.assert_allclose(weight.numpy(), [0.9 - 0.5, 0.9 + 0.5], rtol=1e-6)


def test_global_clipnorm_counts_ordinary_gradients_only():
    stat = tf.Variable([0.0])
    weight = tf.Variable([0.0, 0.0])
    opt = SGD(learning_rate=1.0, global_clipnorm=1.0, updaters={stat.ref(): optimizers.OverwriteWithGradient()})
    opt.apply_gradients([(tf.constant([100.0]), stat), (tf.constant([3.0, 4.0]), weight)])
    np.testing.assert_allclose(weight.numpy(), [-0.6, -0.8], rtol=1e-6)


def test_rowwise_adagrad_dense_equals_sparse_with_all_rows_and_uses_one_number_per_row():
    init = np.arange(12, dtype=np.float32).reshape(4, 3)
    grads = np.random.RandomState(1).randn(4, 3).astype(np.float32)
    dense_var, sparse_var = tf.Variable(init), tf.Variable(init)
    updater = optimizers.RowwiseAdagrad(learning_rate=0.1)
    opt_dense, opt_sparse = SGD(updaters={dense_var.ref(): updater}), SGD(updaters={sparse_var.ref(): updater})
    opt_dense.apply_gradients([(tf.constant(grads), dense_var)])
    opt_sparse.apply_gradients([(tf.IndexedSlices(tf.constant(grads), tf.range(4), tf.constant([4, 3])),
                                 sparse_var)])
    np.testing.assert_allclose(dense_var.numpy(), sparse_var.numpy(), rtol=1e-6)
    acc = 0.1 + np.mean(grads**2, axis=1, keepdims=True)
    np.testing.assert_allclose(dense_var.numpy(), init - 0.1 * grads / (np.sqrt(acc) + 1e-7), rtol=1e-6)
    assert slots.slot_memory(opt_dense) == {"RowwiseAdagrad/accumulator": 4 * 4}


@pytest.mark.parametrize("mode", ["eager", "tf_function"])
def test_an_updater_hyperparameter_set_after_the_step_was_built_takes_effect_in_it(mode):
    var = tf.Variable(np.ones((3, 2), np.float32), name="embedding")
    updater = optimizers.RowwiseAdagrad(learning_rate=0.5)
    opt = SGD(0.1, updaters={"embedding": updater})

    def step():
        opt.apply_gradients([(tf.ones((3, 2)), var)])

    step = tf.function(step) if mode == "tf_function" else step
    step()
    after_first = var.numpy()
    assert not np.array_equal(after_first, np.ones((3, 2)))
    updater.learning_rate = 0.0  # after the step was built (traced, in tf.function): no step moves it now
    step()
    np.testing.assert_array_equal(var.numpy(), after_first)
    assert updater.get_config()["learning_rate"] == 0.0


@pytest.mark.parametrize("reduction", ["mean", "max"])
def test_mirrored_overwrite_receives_mean_or_max_not_sum(mirrored, reduction):
    with mirrored.scope():
        stat = tf.Variable([0.0, 0.0])
        weight = tf.Variable([0.0, 0.0])
        opt = SGD(learning_rate=1.0, updaters={stat.ref(): optimizers.OverwriteWithGradient(reduction)})

    def replica_step():
        replica = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)
        value = tf.stack([1.0 + replica, 10.0 - 4.0 * replica])  # replica 0: [1, 10]; replica 1: [2, 6]
        opt.apply_gradients([(value, stat), (value, weight)])

    tf.function(lambda: mirrored.run(replica_step))()
    expected = [1.5, 8.0] if reduction == "mean" else [2.0, 10.0]
    for component in mirrored.experimental_local_results(stat):
        np.testing.assert_array_equal(component.numpy(), expected)
    # Ordinary gradients are summed across replicas (Keras 2 default).
    for component in mirrored.experimental_local_results(weight):
        np.testing.assert_array_equal(component.numpy(), [-3.0, -16.0])
    assert int(opt.iterations.numpy()) == 1


@pytest.mark.parametrize("reduction", ["mean", "max"])
def test_mirrored_sparse_overwrite_reduces_each_row_over_the_replicas_that_touched_it(mirrored, reduction):
    """Rows no replica touched keep their values; a row one replica touched takes its value (the
    other replica sent none, not a zero); a row both touched takes their mean or max; a replica's
    repeated row is summed first, as without a strategy."""
    with mirrored.scope():
        table = tf.Variable([[-5.0], [-5.0], [-5.0], [-5.0]])
        opt = SGD(learning_rate=1.0, updaters={table.ref(): optimizers.OverwriteWithGradient(reduction)})

    def replica_step():
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        # replica 0: rows 0 and 1 (row 1 twice: -1 + -2); replica 1: row 1 (value -7), row 3 (value -4)
        indices = tf.where(tf.equal(replica, 0), tf.constant([0, 1, 1]), tf.constant([1, 3, 3]))
        values = tf.where(tf.equal(replica, 0), tf.constant([[-3.0], [-1.0], [-2.0]]),
                          tf.constant([[-7.0], [-1.0], [-3.0]]))
        opt.apply_gradients([(tf.IndexedSlices(values, indices, tf.constant([4, 1])), table)])

    tf.function(lambda: mirrored.run(replica_step))()
    row_1 = (-3.0 + -7.0) / 2 if reduction == "mean" else max(-3.0, -7.0)
    for component in mirrored.experimental_local_results(table):
        np.testing.assert_array_equal(component.numpy(), [[-3.0], [row_1], [-5.0], [-4.0]])


def test_mirrored_lookup_by_attribute_and_regex(mirrored):
    with mirrored.scope():
        by_attr = tf.Variable([0.0], name="by_attr")
        by_regex = tf.Variable([0.0], name="amax_history")
        opt = Adam(updaters={"amax": optimizers.OverwriteWithGradient(reduction="max")})
    optimizers.set_updater(by_attr, optimizers.OverwriteWithGradient())

    def replica_step():
        replica = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)
        opt.apply_gradients([(tf.stack([replica + 1.0]), by_attr), (tf.stack([replica + 1.0]), by_regex)])

    mirrored.run(replica_step)
    for component in mirrored.experimental_local_results(by_attr):
        np.testing.assert_array_equal(component.numpy(), [1.5])
    for component in mirrored.experimental_local_results(by_regex):
        np.testing.assert_array_equal(component.numpy(), [2.0])
    assert slots.slot_memory(opt) == {}


def test_updaters_config_round_trip_for_regex_keys():
    opt = SGD(updaters={"scale$": optimizers.OverwriteWithGradient("max"), "emb": optimizers.RowwiseAdagrad(0.2)})
    again = SGD.from_config(opt.get_config())
    assert again.get_config() == opt.get_config()
    assert again.updater_for(tf.Variable([[1.0]], name="emb")) == optimizers.RowwiseAdagrad(0.2)


class NotAnUpdater:
    pass


@pytest.mark.parametrize("bad", [NotAnUpdater(), "overwrite", None, 3])
def test_bad_updater_types_raise_type_error_naming_updater(bad):
    var = tf.Variable([1.0])
    with pytest.raises(TypeError, match=r"`updater` must be a VariableUpdater.*Received: updater="):
        SGD(updaters={var.ref(): bad})
    if bad is not None:
        with pytest.raises(TypeError, match="`updater`"):
            optimizers.set_updater(var, bad)
    assert optimizers.get_updater(var) is None


def test_bad_updater_mapping_and_patterns():
    with pytest.raises(TypeError, match="`updaters` must be a mapping"):
        SGD(updaters=[optimizers.Frozen()])
    with pytest.raises(ValueError, match=r"invalid regex.*Received: updaters="):
        SGD(updaters={"(": optimizers.Frozen()})
    with pytest.raises(TypeError, match=r"keys must be variables \(var.ref\(\) in a dict\) or regex strings"):
        SGD(updaters={3: optimizers.Frozen()})
    with pytest.raises(ValueError, match=r"`reduction` must be 'mean' or 'max'. Received: reduction='sum'"):
        optimizers.OverwriteWithGradient(reduction="sum")


def test_model_fit_with_frozen_layer_and_overwrite_statistic():
    model = keras.Sequential([keras.layers.Input((3,)), keras.layers.Dense(4, name="frozen_dense"),
                              keras.layers.Dense(1, name="head")])
    frozen_before = [w.numpy().copy() for w in model.get_layer("frozen_dense").weights]
    model.compile(optimizer=Adam(0.01, updaters={"frozen_dense": optimizers.Frozen()}), loss="mse")
    x = np.random.RandomState(0).randn(32, 3).astype("float32")
    model.fit(x, x[:, :1], epochs=2, verbose=0)
    for before, after in zip(frozen_before, model.get_layer("frozen_dense").weights):
        np.testing.assert_array_equal(before, after.numpy())
    assert set(slots.slot_memory(model.optimizer)) == {"m", "v"}


def _hidden_bias_model():
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="hidden"), keras.layers.Dense(1, name="out")])


@pytest.mark.parametrize("filename", ["model.h5", "model.keras"])
@pytest.mark.parametrize("attach", ["set_updater", "set_updater_optimizer", "ref_key", "attribute"])
def test_a_variable_s_own_updater_is_saved_under_its_exact_name(attach, filename, tmp_path):
    """A rule attached to a variable object (``set_updater``, a ``var.ref()`` key, Keras 3's
    ``overwrite_with_gradient``) cannot itself be serialized; the config keeps it as a regex of the
    variable's exact name, so the loaded model routes its new variable of that name alike and
    the ``.h5`` file's optimizer state (which has no slots for that variable) loads."""
    rng = np.random.RandomState(0)
    x, y = rng.rand(16, 4).astype("float32"), rng.rand(16, 1).astype("float32")
    model = _hidden_bias_model()
    bias = model.get_layer("hidden").bias
    updaters = None
    if attach == "set_updater":
        optimizers.set_updater(bias, optimizers.Frozen())
    elif attach == "set_updater_optimizer":  # which also names the bias, to itself, in its own routing
        optimizers.set_updater(bias, Adam(0.05))
    elif attach == "ref_key":
        updaters = {bias.ref(): Adam(0.05), "out/bias": optimizers.Frozen()}
    else:
        bias.overwrite_with_gradient = True
    model.compile(SGD(0.1, momentum=0.9, updaters=updaters), "mse")
    model.fit(x, y, batch_size=8, verbose=0)
    rule = type(model.optimizer.updater_for(bias))
    config = model.optimizer.get_config()
    assert config["updaters"][r"^hidden/bias:0$"]["class_name"].endswith(rule.__name__)
    path = str(tmp_path / filename)
    model.save(path)
    loaded = keras.models.load_model(path)
    assert type(loaded.optimizer.updater_for(loaded.get_layer("hidden").bias)) is rule
    assert loaded.optimizer.updater_for(loaded.get_layer("hidden").kernel) is None
    assert loaded.optimizer.get_config() == config
    for net in (model, loaded):
        net.fit(x, y, batch_size=8, verbose=0)
    for a, b in zip(model.get_weights(), loaded.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert len(loaded.optimizer.weights) == len(model.optimizer.weights)  # no SGD slot for the routed bias
    for a, b in zip(loaded.optimizer.get_weights(), model.optimizer.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_an_own_updater_whose_name_a_regex_routes_elsewhere_is_left_out_of_the_config():
    model = _hidden_bias_model()
    bias = model.get_layer("hidden").bias
    opt = SGD(0.1, updaters={bias.ref(): Adam(0.05), "bias": optimizers.Frozen()})  # the variable key wins
    with pytest.warns(UserWarning, match=r"The rule given to the variable object 'hidden/bias:0' .* is not kept by "
                                         r"the optimizer's config, nor by a saved model"):
        opt.apply_gradients([(tf.ones_like(v), v) for v in model.trainable_variables])  # said at the first step
    assert isinstance(opt.updater_for(bias), Adam)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once only
        assert list(opt.get_config()["updaters"]) == ["bias"]  # "^hidden/bias:0$" would clash with it on load


def test_an_optimizer_as_updater_routes_by_its_own_updaters_as_alone():
    """``SGD(updaters={"embedding": Adam(updaters={"table": Frozen()})})``: the table moves as the Adam
    would move it alone (frozen); another embedding variable takes Adam's own rule."""
    table = tf.Variable(tf.ones([4, 2]), name="embedding/table")
    other = tf.Variable(tf.ones([3]), name="embedding/scale")
    kernel = tf.Variable(tf.ones([2]), name="dense/kernel")
    adam = Adam(0.1, updaters={"table": optimizers.Frozen()})
    opt = SGD(0.5, updaters={"embedding": adam})
    opt.apply_gradients([(tf.ones([4, 2]), table), (tf.ones([3]), other), (tf.ones([2]), kernel)])
    assert isinstance(opt.updater_for(table), optimizers.Frozen)
    np.testing.assert_array_equal(table.numpy(), np.ones([4, 2]))
    alone = tf.Variable(tf.ones([3]))
    Adam(0.1).apply_gradients([(tf.ones([3]), alone)])
    np.testing.assert_array_equal(other.numpy(), alone.numpy())
    np.testing.assert_array_equal(kernel.numpy(), [0.5, 0.5])


def test_an_updaters_regex_that_matches_no_variable_of_the_first_step_is_warned_about():
    kernel, bias = tf.Variable([1.0], name="dense/kernel"), tf.Variable([1.0], name="dense/bias")
    opt = SGD(0.1, updaters={"dense/bias": optimizers.Frozen(), "^embedding": optimizers.Frozen()})
    with pytest.warns(UserWarning, match=r"the `updaters` regexes \['\^embedding'\] match no variable of the first "
                                         r"step \(named like \['dense/kernel:0', 'dense/bias:0'\]\)"):
        opt.apply_gradients([(tf.ones([1]), kernel), (tf.ones([1]), bias)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once only
        opt.apply_gradients([(tf.ones([1]), kernel), (tf.ones([1]), bias)])
    assert bias.numpy().tolist() == [1.0] and kernel.numpy().tolist() == [np.float32(1.0) - np.float32(0.1) - np.float32(0.1)]


@pytest.mark.parametrize("restore", ["before_first_step", "after_first_step"])
def test_an_optimizer_given_with_set_updater_is_checkpointed_under_the_regex_its_config_keeps(tmp_path, restore):
    """``set_updater(var, Adam(...))``: the host checkpoints the Adam under ``updaters[<exact name>]``
    from its first step on (it kept only the Adam's slots: a learning rate set during training came back
    at its constructor value), and a host built from the config finds it there."""
    model = _hidden_bias_model()
    bias = model.get_layer("hidden").bias
    optimizers.set_updater(bias, Adam(0.05))
    try:
        opt = SGD(0.1)
        opt.apply_gradients([(tf.ones_like(v), v) for v in model.trainable_variables])
        keras.backend.set_value(opt.updater_for(bias).learning_rate, 0.5)
        opt.apply_gradients([(tf.ones_like(v), v) for v in model.trainable_variables])
        path = tf.train.Checkpoint(model=model, optimizer=opt).save(str(tmp_path / "ckpt"))
        assert "optimizer/updaters[^hidden.Sbias:0$]/learning_rate/.ATTRIBUTES/VARIABLE_VALUE" in [
            key for key, _ in tf.train.list_variables(path)]
        slots = {name: opt.get_slot(bias, name).numpy() for name in opt.get_slot_names() if "Adam" in name}
        config = opt.get_config()
    finally:
        optimizers.set_updater(bias, None)
    again_model = _hidden_bias_model()
    again_bias = again_model.get_layer("hidden").bias
    again = SGD.from_config(config)  # the Adam routed by the variable's exact name
    checkpoint = tf.train.Checkpoint(model=again_model, optimizer=again)
    if restore == "before_first_step":
        checkpoint.restore(path)
        again._create_all_weights(again_model.trainable_variables)
    else:
        again._create_all_weights(again_model.trainable_variables)
        checkpoint.restore(path)
    assert float(again.updater_for(again_bias).learning_rate.numpy()) == 0.5
    assert int(again.iterations.numpy()) == 2
    for name, value in slots.items():
        np.testing.assert_array_equal(again.get_slot(again_bias, name).numpy(), value)


def test_a_routed_optimizer_is_checkpointed_under_the_regex_its_config_keeps(tmp_path):
    """An optimizer in ``updaters=`` is a checkpoint dependency named ``updaters[<regex>]``, a variable
    key's by its exact name, the regex the config writes: the optimizer built from the config finds
    the learning rates set on the original's updaters (restored before its first step)."""
    model = _hidden_bias_model()
    bias = model.get_layer("hidden").bias
    opt = SGD(0.1, updaters={bias.ref(): Adam(0.05), "out/": SGD(0.2, momentum=0.9), "hidden/kernel": optimizers.Frozen()})
    opt.apply_gradients([(tf.ones_like(v), v) for v in model.trainable_variables])
    keras.backend.set_value(opt.updater_for(bias).learning_rate, 0.5)
    keras.backend.set_value(opt.updater_for(model.get_layer("out").bias).learning_rate, 0.25)
    path = tf.train.Checkpoint(optimizer=opt).save(str(tmp_path / "ckpt"))
    assert sorted(key for key, _ in tf.train.list_variables(path) if "learning_rate" in key) == [
        "optimizer/learning_rate/.ATTRIBUTES/VARIABLE_VALUE",
        "optimizer/updaters[^hidden.Sbias:0$]/learning_rate/.ATTRIBUTES/VARIABLE_VALUE",
        "optimizer/updaters[out.S]/learning_rate/.ATTRIBUTES/VARIABLE_VALUE"]
    again = SGD.from_config(opt.get_config())
    tf.train.Checkpoint(optimizer=again).restore(path)
    assert float(again.updater_for(bias).learning_rate.numpy()) == 0.5
    assert float(again.updater_for(model.get_layer("out").bias).learning_rate.numpy()) == 0.25
