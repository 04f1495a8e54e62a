"""Bad input for AdamW, SGDW, MovingAverage, updaters and integration (tests/test_errors.py holds the
template's catalogue): each error names the argument, repeats the value received, and leaves the
optimizer and the variables unchanged."""

import math
import sys

import numpy as np
import pytest
import tensorflow as tf

import optimizers
from integration.optimizers_under_test import (
    BY_NAME,
    IDS,
    OPTIMIZERS,
    case_model,
    hyperparameter_to_break,
    model,
    optimizer_state,
)
from optimizers import Adam, keras

from conftest import TF_VERSION

CONSTRUCTOR_CASES = [
    # (constructor, exception, regex the message must contain)
    (lambda: optimizers.AdamW(weight_decay=math.nan), ValueError, r"`weight_decay` must be a finite number. Received: weight_decay=nan"),
    (lambda: optimizers.AdamW(weight_decay=-0.01), ValueError, r"`weight_decay` must be in \[0.0, inf\]. Received: weight_decay=-0.01"),
    (lambda: optimizers.AdamW(weight_decay="l2"), TypeError, r"`weight_decay` must be a float.*Received: weight_decay='l2'"),
    (lambda: optimizers.AdamW(0.01, learning_rate=math.nan), ValueError, r"`learning_rate` must be a finite number"),
    (lambda: optimizers.AdamW(0.01, learning_rate=math.inf), ValueError,
     r"`learning_rate` must be a finite number. Received: learning_rate=inf"),
    (lambda: optimizers.SGDW(-math.inf), ValueError, r"`weight_decay` must be a finite number. Received: weight_decay=-inf"),
    (lambda: optimizers.AdamW(0.01, beta_1=1.0), ValueError, r"`beta_1` must be in \[0.0, 1.0\). Received: beta_1=1.0"),
    (lambda: optimizers.AdamW(0.01, beta_2=-0.5), ValueError, r"`beta_2` must be in \[0.0, 1.0\). Received: beta_2=-0.5"),
    (lambda: optimizers.AdamW(0.01, epsilon=math.nan), ValueError, r"`epsilon` must be a finite number. Received: epsilon=nan"),
    (lambda: optimizers.AdamW(0.01, amsgrad="yes"), TypeError, r"`amsgrad` must be a bool. Received: amsgrad='yes'"),
    (lambda: optimizers.AdamW(0.01, lazy=1), TypeError, r"`lazy` must be a bool. Received: lazy=1"),
    (lambda: optimizers.AdamW(0.01, weight_decay_rate=0.1), TypeError,
     r"unexpected keyword argument `weight_decay_rate`. Received: weight_decay_rate=0.1"),
    (lambda: optimizers.SGDW(weight_decay=None), TypeError, r"`weight_decay` must be a float.*Received: weight_decay=None"),
    (lambda: optimizers.SGDW(0.01, momentum=1.5), ValueError, r"`momentum` must be in \[0.0, 1.0\]. Received: momentum=1.5"),
    (lambda: optimizers.SGDW(0.01, momentum=[0.9]), TypeError, r"Received: momentum=\[0.9\]"),
    (lambda: optimizers.SGDW(0.01, nesterov="yes"), TypeError, r"`nesterov` must be a bool. Received: nesterov='yes'"),
    (lambda: optimizers.SGDW(0.01, learning_rate=tf.constant(math.nan)), ValueError, r"`learning_rate` must be a finite number"),
    (lambda: optimizers.MovingAverage("no_such_optimizer"), ValueError,
     r"`optimizer` names no Keras optimizer. Received: optimizer='no_such_optimizer'"),
    (lambda: optimizers.MovingAverage(42), TypeError, r"`optimizer` must be a Keras 2 .*Received: optimizer=42"),
    (lambda: optimizers.MovingAverage(Adam(), average_decay=1.5), ValueError,
     r"`average_decay` must be in \[0.0, 1.0\]. Received: average_decay=1.5"),
    (lambda: optimizers.MovingAverage(Adam(), average_decay=math.nan), ValueError, r"`average_decay` must be a finite number"),
    (lambda: optimizers.MovingAverage(Adam(), num_updates=-1), ValueError, r"Received: num_updates=-1"),
    (lambda: optimizers.MovingAverage(Adam(), num_updates=tf.Variable(1.0)), TypeError, r"Received: num_updates=<tf.Variable"),
    (lambda: optimizers.MovingAverage(Adam(), start_step=2.5), TypeError, r"`start_step` must be an int. Received: start_step=2.5"),
    (lambda: optimizers.MovingAverage(Adam(), dynamic_decay="no"), TypeError, r"Received: dynamic_decay='no'"),
    (lambda: optimizers.MovingAverage(Adam(), sequential_update=True), TypeError,
     r"unexpected keyword argument `sequential_update`. Received: sequential_update=True"),
    (lambda: optimizers.MovingAverage(Adam(clipnorm=1.0), clipnorm=2.0), ValueError,
     r"`clipnorm` is set both on the wrapper and on the inner optimizer. Received: clipnorm=2.0"),
    (lambda: optimizers.Lion(0.1, beta_1=1e-50), ValueError, r"`beta_1` must be in \(0.0, 1.0\] \(as a float32, the "
     rf"precision it is used in: {float(np.float32(1e-50))}\). Received: beta_1=1e-50"),
    (lambda: optimizers.RowwiseAdagrad(epsilon=math.nan), ValueError, r"`epsilon` must be a finite number. Received: epsilon=nan"),
    (lambda: optimizers.OverwriteWithGradient("sum"), ValueError,
     r"`reduction` must be 'mean' or 'max'. Received: reduction='sum'"),
    (lambda: Adam(updaters=[("bias", optimizers.Frozen(), "extra")]), TypeError, r"Received: updaters="),
    (lambda: Adam(updaters={3: optimizers.Frozen()}), TypeError, r"keys must be variables .*Received key 3"),
    (lambda: optimizers.set_updater(tf.Variable(1.0), optimizers.Frozen), TypeError, r"Received: updater=<class"),
]


@pytest.mark.parametrize("make, error, message", CONSTRUCTOR_CASES, ids=lambda c: getattr(c, "__name__", str(c))[:30])
def test_constructor_errors(make, error, message):
    with pytest.raises(error, match=message):
        make()


def _trained(case):
    net, opt = case_model(case), case.make()
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(net(tf.constant([[1, 2]])))
    opt.apply_gradients(zip(tape.gradient(loss, net.trainable_variables), net.trainable_variables))
    return net, opt


def _snapshot(net, opt):
    return [w.copy() for w in net.get_weights()], optimizer_state(opt, net.trainable_variables)


def _assert_unchanged(before, after):
    for a, b in zip(before[0], after[0]):
        np.testing.assert_array_equal(a, b)
    assert sorted(before[1]) == sorted(after[1])
    for key in before[1]:
        np.testing.assert_array_equal(before[1][key], after[1][key], err_msg=key)


@pytest.mark.parametrize("case", OPTIMIZERS, ids=IDS)
def test_gradient_of_wrong_shape_leaves_state_unchanged(case):
    net, opt = _trained(case)
    before = _snapshot(net, opt)
    variables = net.trainable_variables
    grads = [tf.ones_like(v) for v in variables]
    grads[-1] = tf.ones([7])  # the dense bias has shape (1,)
    with pytest.raises(ValueError, match=r"has an incompatible shape. Received: grad=<tf.Tensor"):
        opt.apply_gradients(zip(grads, variables))
    _assert_unchanged(before, _snapshot(net, opt))


def _ours_all_the_way(case):
    opt = case.make()
    while isinstance(opt, optimizers.OptimizerWrapper):
        opt = opt.inner_optimizer
    return isinstance(opt, optimizers.CustomOptimizerV2)


# Keras's own optimizers (inside MovingAverage) check nothing: they are not ours to test. COCOB has
# no hyperparameter to set.
OURS_ALL_THE_WAY = [case for case in OPTIMIZERS
                    if _ours_all_the_way(case) and hyperparameter_to_break(case.make()) is not None]


@pytest.mark.parametrize("case", OURS_ALL_THE_WAY, ids=[case.name for case in OURS_ALL_THE_WAY])
def test_nan_hyperparameter_set_later_is_refused_and_changes_nothing(case):
    net, opt = _trained(case)
    owner, name = hyperparameter_to_break(opt)
    before = _snapshot(net, opt)
    with pytest.raises(ValueError, match=rf"`{name}` must be a finite number. Received: {name}=nan"):
        setattr(owner, name, math.nan)
    assert np.isfinite(float(keras.backend.get_value(getattr(owner, name))))
    _assert_unchanged(before, _snapshot(net, opt))


@pytest.mark.parametrize("mode", ["eager", "tf_function"])
def test_a_hyperparameter_variable_assigned_out_of_range_is_refused_at_the_step(mode):
    """keras.backend.set_value reaches the variable without the attribute's check: the step checks it."""
    var = tf.Variable([1.0, 2.0])
    opt = Adam(0.01)
    apply = opt.apply_gradients if mode == "eager" else tf.function(lambda pairs: opt.apply_gradients(pairs) and None)
    apply([(tf.constant([0.1, 0.1]), var)])
    keras.backend.set_value(opt.beta_1, 1.0)  # beta_1 lies in [0, 1)
    before = var.numpy().copy(), optimizer_state(opt, [var])
    error = ValueError if mode == "eager" else tf.errors.InvalidArgumentError
    with pytest.raises(error, match=r"`beta_1` must be a finite number in \[0.0, 1.0\). Received: beta_1=(1.0|\] \[1\])"):  # eagerly, or as a graph assertion prints it
        apply([(tf.constant([0.1, 0.1]), var)])
    _assert_unchanged(([before[0]], before[1]), ([var.numpy()], optimizer_state(opt, [var])))


def test_learning_rate_scheduler_out_of_range_stops_fit_before_the_first_update():
    x = np.random.RandomState(0).randn(16, 4).astype("float32")
    net = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    net.compile(optimizers.MovingAverage(optimizers.AdamW(0.01, 1e-4)), "mse")
    before = [w.copy() for w in net.get_weights()]
    schedule = keras.callbacks.LearningRateScheduler(lambda epoch, lr: -0.1)  # sets the variable with set_value
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"`learning_rate` must be a finite number in \[0.0, inf\]. Received: learning_rate=.*-0.1"):
        net.fit(x, x.sum(1), epochs=1, verbose=0, callbacks=[schedule])
    _assert_unchanged((before, {}), (net.get_weights(), {}))
    assert int(net.optimizer.iterations.numpy()) == 0


def test_swap_weights_before_any_average_exists():
    net = model()
    opt = optimizers.MovingAverage(Adam(0.01))
    before = [w.copy() for w in net.get_weights()]
    with pytest.raises(ValueError, match=r"swap_weights\(\) needs averages.*Received: an optimizer with no averages"):
        opt.swap_weights()
    for a, b in zip(before, net.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert opt.get_slot_names() == []


def test_integer_variable_refused_by_the_wrapper_before_anything_moves():
    net, opt = _trained(BY_NAME["moving_average(adam)"])
    before = _snapshot(net, opt)
    counter = tf.Variable([1, 2])
    pairs = [(tf.ones_like(v), v) for v in net.trainable_variables] + [(tf.constant([1, 1]), counter)]
    with pytest.raises(ValueError, match=r"has dtype int32; optimizers update floating point variables only"):
        opt.apply_gradients(pairs)
    _assert_unchanged(before, _snapshot(net, opt))
    assert counter.numpy().tolist() == [1, 2]


def test_unknown_updater_in_a_config_is_refused():
    config = Adam(updaters={"bias": optimizers.Frozen()}).get_config()
    config["updaters"] = {"bias": {"class_name": "Melt", "config": {}}}
    with pytest.raises(ValueError, match=r"Unknown variable updater config.*Received: \{'class_name': 'Melt'"):
        Adam.from_config(config)


@pytest.mark.default_stack_only
@pytest.mark.skipif(TF_VERSION < (2, 16), reason="Keras 3 exists only beside TF >= 2.16")
def test_keras3_optimizer_wrapped_or_model_handed_over():
    import keras as keras3

    with pytest.raises(TypeError, match=r"Keras 3 optimizer: optimizer=.*import tf_keras as keras"):
        optimizers.MovingAverage(keras3.optimizers.Adam())
    model3 = keras3.Sequential([keras3.layers.Input((2,)), keras3.layers.Dense(1)])
    variable = model3.trainable_variables[0]
    opt = optimizers.AdamW(0.01)
    with pytest.raises(TypeError, match=r"Keras 3 variable"):
        opt.apply_gradients([(tf.ones(variable.shape), variable)])
    assert int(opt.iterations.numpy()) == 0


def _craft(path: str, out: str, module: str) -> None:
    """Copy the ``.keras`` file at ``path`` to ``out`` with its inner optimizer's config naming ``module``."""
    import json
    import zipfile

    with zipfile.ZipFile(path) as f:
        files = {name: f.read(name) for name in f.namelist()}
    config = json.loads(files["config.json"])
    inner = config["compile_config"]["optimizer"]["config"]["optimizer"]
    assert inner["class_name"] == "Adam"  # the MovingAverage's inner optimizer
    inner.update(module=module, registered_name=None)
    files["config.json"] = json.dumps(config).encode()
    with zipfile.ZipFile(out, "w") as f:
        for name, data in files.items():
            f.writestr(name, data)


@pytest.mark.parametrize("safe_mode", [True, False])
def test_a_crafted_keras_file_imports_no_module_in_safe_mode(safe_mode, tmp_path, monkeypatch):
    """A nested optimizer config that names a Keras class (``Adam``) of another module, with
    arguments the class refuses: in safe mode it is refused, naming the module, which is never
    imported; out of safe mode the module is imported to say whether it is importable."""
    net = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    net.compile(optimizers.MovingAverage(Adam(0.01)), "mse")
    net.fit(np.ones((4, 2), np.float32), np.zeros((4, 1), np.float32), verbose=0)
    net.save(str(tmp_path / "m.keras"))
    marker = tmp_path / "imported"
    (tmp_path / "crafted_module.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    _craft(str(tmp_path / "m.keras"), str(tmp_path / "crafted.keras"), "crafted_module")
    if safe_mode:
        with pytest.raises(ValueError, match=r"loaded in safe mode.*class 'Adam' of module 'crafted_module'.*"
                                             r"it is not imported"):
            keras.models.load_model(str(tmp_path / "crafted.keras"), safe_mode=True)
        assert not marker.exists()
    else:
        with pytest.raises((TypeError, ValueError)):  # the module imports, and holds no Adam
            keras.models.load_model(str(tmp_path / "crafted.keras"), safe_mode=False)
        assert marker.exists()
    monkeypatch.delitem(sys.modules, "crafted_module", raising=False)
