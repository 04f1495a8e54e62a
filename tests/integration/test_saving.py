"""model.save as .h5, SavedModel and .keras; load_model without custom_objects gives back the
optimizer's class and state, and training on after loading equals training on without the round trip."""

import numpy as np
import pytest
import tensorflow as tf

import optimizers
from integration.optimizers_under_test import BATCH, IDS, OPTIMIZERS, case_model, data
from optimizers import keras

FORMATS = ["model.h5", "model.keras", pytest.param("saved_model", marks=pytest.mark.slow)]


def _fit(net, epochs):
    x, y = data()
    net.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0)


def _optimizer_state(opt):
    """``[(name, value)]`` of ``opt.weights``, in order (a MultiOptimizer's pairs' own optimizers each
    have an ``iter``)."""
    return [(w.name, w.numpy()) for w in opt.weights]


@pytest.mark.parametrize("filename", FORMATS)
@pytest.mark.parametrize("case", OPTIMIZERS, ids=IDS)
def test_save_load_keeps_optimizer_and_training_continues_identically(case, filename, tmp_path):
    net = case_model(case)
    net.compile(optimizer=case.make(), loss="mse")
    _fit(net, epochs=2)
    path = str(tmp_path / filename)
    net.save(path)
    loaded = keras.models.load_model(path)  # no custom_objects
    assert type(loaded.optimizer) is type(net.optimizer)
    assert loaded.optimizer.get_config() == net.optimizer.get_config()
    assert int(loaded.optimizer.iterations.numpy()) == int(net.optimizer.iterations.numpy()) > 0
    _fit(net, epochs=1)
    _fit(loaded, epochs=1)
    assert int(loaded.optimizer.iterations.numpy()) == int(net.optimizer.iterations.numpy())
    for a, b in zip(net.get_weights(), loaded.get_weights()):
        np.testing.assert_array_equal(a, b)
    expected, got = _optimizer_state(net.optimizer), _optimizer_state(loaded.optimizer)
    assert len(got) == len(expected)
    for (name, a), (_, b) in zip(expected, got):
        if "iter" not in name:  # checked above
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("filename", ["model.keras", "saved_model"])
def test_untrained_model_round_trip_has_no_state_and_trains_like_the_original(filename, tmp_path):
    """Saved before any step: nothing to restore (no slots, no hyperparameter variables yet)."""
    case = OPTIMIZERS[0]
    net = case_model(case)
    net.compile(optimizer=case.make(), loss="mse")
    path = str(tmp_path / filename)
    net.save(path)
    loaded = keras.models.load_model(path)
    assert int(loaded.optimizer.iterations.numpy()) == 0 and loaded.optimizer.weights[1:] == []
    _fit(net, epochs=1)
    _fit(loaded, epochs=1)
    for a, b in zip(net.get_weights() + [w.numpy() for w in net.optimizer.weights],
                    loaded.get_weights() + [w.numpy() for w in loaded.optimizer.weights]):
        np.testing.assert_array_equal(a, b)


def test_keras_file_loaded_then_saved_again_before_training_keeps_the_slots(tmp_path):
    """Loaded slots wait for the first step; saving before it writes them out again."""
    case = OPTIMIZERS[1]
    net = case_model(case)
    net.compile(optimizer=case.make(), loss="mse")
    _fit(net, epochs=1)
    net.save(str(tmp_path / "first.keras"))
    keras.models.load_model(str(tmp_path / "first.keras")).save(str(tmp_path / "second.keras"))
    loaded = keras.models.load_model(str(tmp_path / "second.keras"))
    _fit(net, epochs=1)
    _fit(loaded, epochs=1)
    for a, b in zip(net.get_weights() + [w.numpy() for w in net.optimizer.weights],
                    loaded.get_weights() + [w.numpy() for w in loaded.optimizer.weights]):
        np.testing.assert_array_equal(a, b)


# One format per entry, alternating down the table (so each format gets template optimizers,
# updaters and wrappers alike, at half the cost); both for entries whose routing the format changes.
MIRRORED_LOADS = [(case, filename) for i, case in enumerate(OPTIMIZERS)
                  for filename in (("model.keras", "saved_model") if case.routes_by_full_name
                                   else (("model.keras", "saved_model")[i % 2],))]


@pytest.mark.slow
@pytest.mark.parametrize("case,filename", MIRRORED_LOADS, ids=[f"{c.name}-{f}" for c, f in MIRRORED_LOADS])
def test_load_under_mirrored_strategy_continues_like_one_device(mirrored, case, filename, tmp_path):
    """Saved on one device, loaded in MirroredStrategy's scope (2 logical CPUs): the loaded state is
    taken over inside the replicas' threads. Tolerance rtol=1e-5, atol=1e-6 (cross-replica sum order)."""
    net = case_model(case)
    net.compile(optimizer=case.make(), loss="mse")
    _fit(net, epochs=1)
    path = str(tmp_path / filename)
    net.save(path)
    with mirrored.scope():
        loaded = keras.models.load_model(path)
    _fit(net, epochs=1)
    if case.routes_by_full_name and filename == "saved_model":  # the weights lost their layers' names
        with pytest.raises(ValueError, match="None of the variables of this step is in a MultiOptimizer pair"):
            _fit(loaded, epochs=1)
        return
    _fit(loaded, epochs=1)
    assert int(loaded.optimizer.iterations.numpy()) == int(net.optimizer.iterations.numpy())
    for a, b in zip(net.get_weights(), loaded.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    expected, got = _optimizer_state(net.optimizer), _optimizer_state(loaded.optimizer)
    for (name, a), (_, b) in zip(expected, got):
        if "iter" not in name:  # checked above
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


USER_MODULE = '''
import tensorflow as tf
import optimizers

class SignSGD(optimizers.CustomOptimizerV2):
    def __init__(self, learning_rate=0.01, name="SignSGD", **kwargs):
        super().__init__(name, **kwargs)
        self.add_hyperparameter("learning_rate", learning_rate, low=0.0)

    def update_dense(self, grad, var, slots, coefficients):
        return var.assign_sub(coefficients["learning_rate"] * tf.sign(grad))
'''


def test_a_user_optimizer_two_wrappers_deep_loads_in_a_process_that_has_not_imported_it(tmp_path, monkeypatch):
    """``load_model`` imports the module a ``.keras`` file names for the top-level optimizer; the
    wrappers import it for the optimizer they nest (Keras's optimizer lookup alone returns the
    class name). A module that does not import gets an error that says what to do."""
    import importlib
    import sys

    import optimizers

    (tmp_path / "user_rules.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    user_rules = importlib.import_module("user_rules")
    net = case_model(OPTIMIZERS[0])
    net.compile(optimizer=optimizers.Lookahead(optimizers.MovingAverage(user_rules.SignSGD(0.01))), loss="mse")
    _fit(net, epochs=1)
    path = str(tmp_path / "model.keras")
    net.save(path)
    def forget_the_module():  # as in a fresh process: not imported, its class registered under no name
        monkeypatch.delitem(sys.modules, "user_rules")
        registry = keras.utils.get_custom_objects()
        for key in [key for key, value in registry.items() if getattr(value, "__module__", None) == "user_rules"]:
            monkeypatch.delitem(registry, key)

    forget_the_module()
    loaded = keras.models.load_model(path)
    assert type(loaded.optimizer.inner_optimizer.inner_optimizer).__name__ == "SignSGD"
    _fit(net, epochs=1)
    _fit(loaded, epochs=1)
    for a, b in zip(net.get_weights(), loaded.get_weights()):
        np.testing.assert_array_equal(a, b)

    forget_the_module()
    (tmp_path / "user_rules.py").unlink()
    importlib.invalidate_caches()  # the path's finder still lists the file otherwise
    with pytest.raises(ValueError, match=r"'SignSGD': its module 'user_rules' does not import .*`custom_objects`"):
        keras.models.load_model(path)


def _nested_model_with_repeated_names():
    """Two sub-models whose layers have the same names, so their variables do too
    (``"dense/kernel:0"`` twice), with different shapes."""
    keras.utils.set_random_seed(0)

    def block(width, name):
        inputs = keras.Input((3,))
        return keras.Model(inputs, keras.layers.Dense(width, name="dense")(inputs), name=name)

    inputs = keras.Input((3,))
    hidden = block(3, "first")(inputs)
    outputs = block(1, "second")(hidden)
    return keras.Model(inputs, outputs)


@pytest.mark.parametrize("make", ["adamw", "moving_average(adamw)"])
def test_keras_file_keeps_the_slots_of_variables_that_share_a_name(make, tmp_path):
    """Each variable's slots come back to it, not to its namesake's (which crashed on a shape
    mismatch, or silently mixed two layers' slots up when the shapes matched)."""
    import optimizers

    def optimizer():
        inner = optimizers.AdamW(weight_decay=0.01, learning_rate=0.01)
        return inner if make == "adamw" else optimizers.MovingAverage(inner, average_decay=0.5)

    x = np.random.default_rng(0).normal(size=(16, 3)).astype("float32")
    y = x[:, :1] * 2.0
    net = _nested_model_with_repeated_names()
    assert len({v.name for v in net.trainable_variables}) == 2 < len(net.trainable_variables)
    net.compile(optimizer=optimizer(), loss="mse")
    net.fit(x, y, batch_size=8, epochs=2, verbose=0)
    net.save(str(tmp_path / "model.keras"))
    loaded = keras.models.load_model(str(tmp_path / "model.keras"))
    for model in (net, loaded):
        model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    for a, b in zip(net.get_weights() + [w.numpy() for w in net.optimizer.weights],
                    loaded.get_weights() + [w.numpy() for w in loaded.optimizer.weights]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("make", ["adam", "moving_average(adam)"])
@pytest.mark.parametrize("filename", ["model.keras", "model.weights.h5"])
def test_a_model_saved_with_an_optimizer_it_shares_keeps_its_own_slots(make, filename, tmp_path):
    """Two models with layers of the same names train with one optimizer (B first, so B's variables
    met the optimizer first). A's file holds A's slots, under the names a fresh optimizer gives A's
    variables: A loaded takes the next step A takes with the shared optimizer, bit for bit (its
    moments were B's before, and the step differed by about 0.07, as with tf_keras's own Adam)."""
    def optimizer():
        inner = optimizers.Adam(0.05)
        return inner if make == "adam" else optimizers.MovingAverage(inner, average_decay=0.5)

    def model(seed):
        keras.utils.set_random_seed(seed)
        return keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, name="body"),
                                 keras.layers.Dense(1, name="head")])

    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 3)).astype("float32")
    shared = optimizer()
    a, b = model(1), model(2)
    for net, target in ((b, -3.0 * x[:, :1]), (a, 2.0 * x[:, :1]), (b, -3.0 * x[:, :1]), (a, 2.0 * x[:, :1])):
        net.compile(optimizer=shared, loss="mse")
        net.fit(x, target, batch_size=8, epochs=1, verbose=0, shuffle=False)
    assert [v.name for v in a.trainable_variables] == [v.name for v in b.trainable_variables]
    path = str(tmp_path / filename)
    if filename.endswith(".keras"):
        a.save(path)
        loaded = keras.models.load_model(path)
    else:
        a.save_weights(path)
        loaded = model(1)
        loaded.compile(optimizer=optimizer(), loss="mse")
        loaded.load_weights(path)
    for net in (a, loaded):
        net.fit(x, 2.0 * x[:, :1], batch_size=8, epochs=1, verbose=0, shuffle=False)
    for got, want in zip(loaded.get_weights(), a.get_weights()):
        np.testing.assert_array_equal(got, want)


def test_a_moving_average_loaded_from_a_keras_file_swaps_in_its_saved_averages(tmp_path):
    """After ``load_model``, before any step: ``swap_weights`` says how to create the averages, and
    ``shadow_copy`` creates them from the file (not from the weights)."""
    import optimizers

    net = case_model(OPTIMIZERS[0])
    net.compile(optimizer=optimizers.MovingAverage(optimizers.Adam(0.05), average_decay=0.5), loss="mse")
    _fit(net, epochs=2)
    path = str(tmp_path / "model.keras")
    net.save(path)
    loaded = keras.models.load_model(path)
    with pytest.raises(ValueError, match=r"shadow_copy\(model.trainable_weights\).*after loading a model, to the "
                                         r"averages it saved"):
        loaded.optimizer.swap_weights()
    loaded.optimizer.shadow_copy(loaded.trainable_weights)
    loaded.optimizer.swap_weights()
    net.optimizer.swap_weights()
    for a, b in zip(net.get_weights(), loaded.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_saving_a_model_makes_no_skipped_steps_counter_without_skip_non_finite(tmp_path):
    """``model.save`` reads every attribute of the optimizer; without ``skip_non_finite`` the
    counter is a constant 0 and no variable, so a checkpoint of the optimizer restores into a new
    one with nothing left over."""
    import tensorflow as tf

    import optimizers

    net = case_model(OPTIMIZERS[0])
    net.compile(optimizer=optimizers.AdamW(weight_decay=0.01, learning_rate=0.01), loss="mse")
    _fit(net, epochs=1)
    net.save(str(tmp_path / "model.keras"))
    assert int(net.optimizer.skipped_steps) == 0
    assert not [w.name for w in net.optimizer.weights if "skipped" in w.name]
    path = tf.train.Checkpoint(model=net, optimizer=net.optimizer).write(str(tmp_path / "ckpt"))
    fresh = case_model(OPTIMIZERS[0])
    fresh.compile(optimizer=optimizers.AdamW(weight_decay=0.01, learning_rate=0.01), loss="mse")
    status = tf.train.Checkpoint(model=fresh, optimizer=fresh.optimizer).read(path)
    _fit(fresh, epochs=1)  # creates the slots, which take the restored values
    status.assert_consumed()


@keras.utils.register_keras_serializable(package="tests")
class HalvingSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """A user's schedule, registered: ``lr / (1 + step)``."""

    def __init__(self, learning_rate):
        self.learning_rate = learning_rate

    def __call__(self, step):
        return self.learning_rate / (1.0 + tf.cast(step, tf.float32))

    def get_config(self):
        return {"learning_rate": self.learning_rate}


@pytest.mark.parametrize("filename", FORMATS)
@pytest.mark.parametrize("make", ["adamw", "moving_average(adamw)"])
def test_a_registered_schedule_loads_from_every_format_without_custom_objects(make, filename, tmp_path):
    """Keras 2 reads an .h5 file's configs by bare class name ("HalvingSchedule"), which its registry
    keys by registered name ("tests>HalvingSchedule"): the library finds the class by the latter."""
    adamw = optimizers.AdamW(weight_decay=1e-3, learning_rate=HalvingSchedule(0.05))
    opt = adamw if make == "adamw" else optimizers.MovingAverage(adamw)
    net = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    net.compile(optimizer=opt, loss="mse")
    x, y = np.ones((8, 3), "float32"), np.zeros((8, 2), "float32")
    net.fit(x, y, epochs=1, verbose=0)
    net.save(str(tmp_path / filename))
    loaded = keras.models.load_model(str(tmp_path / filename))  # no custom_objects
    schedule = loaded.optimizer.learning_rate  # a wrapper's is its inner optimizer's
    assert type(schedule) is HalvingSchedule and schedule.learning_rate == 0.05
    net.fit(x, y, epochs=1, verbose=0)
    loaded.fit(x, y, epochs=1, verbose=0)
    for a, b in zip(net.get_weights(), loaded.get_weights()):
        np.testing.assert_array_equal(a, b)
