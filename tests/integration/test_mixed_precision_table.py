"""Mixed precision over the whole conformance table: under ``mixed_float16``, a
``LossScaleOptimizer`` around every entry keeps its state (``iterations``, every
slot, the wrapper's averages, hyperparameter variables, the loss scale) in every
save format, and a step whose gradients are not finite is skipped without
touching any weight, slot, updater variable or average.

Training runs through an eager custom loop (loss scaled and gradients unscaled
as the ``LossScaleOptimizer`` documents; ``tf.function`` steps are covered by
``test_saving.py`` and ``test_faults.py``): no ``fit`` machinery and no trace per
model, which keeps the entries x formats table within a few minutes.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from optimizers import keras

from .optimizers_under_test import IDS, OPTIMIZERS, batches, case_model, data

FORMATS = ["model.h5", "model.keras", "saved_model", "checkpoint"]
STEPS = 3  # before saving; then one more step on the run that never saved and on each loaded one


@pytest.fixture
def mixed_float16():
    keras.mixed_precision.set_global_policy("mixed_float16")
    yield
    keras.mixed_precision.set_global_policy("float32")


def _compiled(case):
    """The table's model in mixed precision, compiled with a LossScaleOptimizer around the entry
    whose loss scale grows every 2 good steps: within the few steps before saving it grows (and
    may halve again at an overflow), so the saved loss-scale state is one a fresh optimizer lacks."""
    net = case_model(case)
    net.compile(optimizer=keras.mixed_precision.LossScaleOptimizer(case.make(), dynamic_growth_steps=2), loss="mse")
    return net


def _train_step(net, opt):
    """One scaled step; ``poison`` multiplies the loss (``inf`` makes every gradient non-finite)."""

    def step(x, y, poison=1.0):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.cast(net(x), tf.float32) - y)) * poison
            scaled = opt.get_scaled_loss(loss)
        grads = opt.get_unscaled_gradients(tape.gradient(scaled, net.trainable_variables))
        opt.apply_gradients(zip(grads, net.trainable_variables))

    return step


def _owners(opt):
    """The LossScaleOptimizer, the entry's optimizer and (for a wrapper) its inner one."""
    chain = [opt]
    while getattr(chain[-1], "inner_optimizer", None) is not None:
        chain.append(chain[-1].inner_optimizer)
    return chain


def _state(net, opt):
    """Every number the optimizer keeps, keyed independently of creation order and of
    variable names' uniquifying suffixes: ``iterations``, the loss scale and its good-step
    counter, each optimizer's hyperparameter variables and slots (a wrapper's averages too)."""
    state = {"iterations": opt.iterations.numpy(), "loss_scale": opt.loss_scale.numpy()}
    state["good_steps"] = _loss_scale_variables(opt)[1].numpy()
    for depth, owner in enumerate(_owners(opt)[1:]):
        for name, hyper in sorted(getattr(owner, "_hyper", {}).items()):
            if isinstance(hyper, tf.Variable):
                state[f"{depth}/{name}"] = hyper.numpy()
        for slot_name in owner.get_slot_names():
            for position, var in enumerate(net.trainable_variables):
                try:
                    state[f"{depth}/{position}/{slot_name}"] = owner.get_slot(var, slot_name).numpy()
                except KeyError:
                    pass
    return state


def _loss_scale_variables(opt):
    """The dynamic loss scale and its good-step counter (Keras 2's ``LossScaleOptimizer``)."""
    return [opt._loss_scale.current_loss_scale, opt._loss_scale.counter]


def _assert_same(expected, got, what):
    assert sorted(got) == sorted(expected), what
    for key, value in expected.items():
        np.testing.assert_array_equal(got[key], value, err_msg=f"{what}: {key}")


def _save(net, filename, path):
    if filename == "checkpoint":
        return tf.train.Checkpoint(model=net, optimizer=net.optimizer).save(str(path / "ckpt"))
    net.save(str(path / filename))
    return str(path / filename)


def _load(case, filename, saved):
    if filename == "checkpoint":  # restored before the first step: slots are filled when created
        loaded = _compiled(case)
        tf.train.Checkpoint(model=loaded, optimizer=loaded.optimizer).restore(saved).assert_existing_objects_matched()
        return loaded
    return keras.models.load_model(saved)


@pytest.mark.parametrize("case", OPTIMIZERS, ids=IDS)
def test_loss_scale_optimizer_keeps_every_state_in_every_format(mixed_float16, case, tmp_path):
    """Trained a few steps, saved in each format, loaded: the counters and the loss scale right
    away, then after one more step every weight and every number of the optimizer, equal to the
    run that never saved. (One training per entry, for every format: the table is entries x formats.)"""
    x, y = data()
    net = _compiled(case)
    step = _train_step(net, net.optimizer)
    *warmup, last = batches(x, y, STEPS + 1)
    for batch in warmup:
        step(*batch)
    iterations, loss_scale = int(net.optimizer.iterations), float(net.optimizer.loss_scale)
    saved = {filename: _save(net, filename, tmp_path) for filename in FORMATS}
    step(*last)
    expected_state, expected_weights = _state(net, net.optimizer), net.get_weights()
    for filename in FORMATS:
        what = f"{case.name} via {filename}"
        loaded = _load(case, filename, saved[filename])
        assert isinstance(loaded.optimizer, keras.mixed_precision.LossScaleOptimizer), what
        assert type(loaded.optimizer.inner_optimizer) is type(net.optimizer.inner_optimizer), what
        assert int(loaded.optimizer.iterations) == iterations, f"{what}: iterations right after loading"
        assert float(loaded.optimizer.loss_scale) == loss_scale, f"{what}: loss scale right after loading"
        _train_step(loaded, loaded.optimizer)(*last)
        _assert_same(expected_state, _state(loaded, loaded.optimizer), what)
        for ours, theirs in zip(loaded.get_weights(), expected_weights):
            np.testing.assert_array_equal(ours, theirs, err_msg=what)


def _numbers(net, opt):
    """Every model weight (updater-owned ones and amax statistics included) and every
    optimizer number, apart from the three counters a skipped step moves by design."""
    state = _state(net, opt)
    skipped = {key: state.pop(key) for key in ("iterations", "loss_scale", "good_steps")}
    inner = [v.numpy() for v in opt.inner_optimizer.variables() if v is not opt.iterations]
    return [w.numpy() for w in net.weights], inner, state, skipped


def test_keras_counts_a_skipped_step_in_iterations(mixed_float16):
    """The peer's policy the table follows: Keras 2's LossScaleOptimizer around its own SGD
    skips the step but still adds one to ``iterations`` and halves the loss scale."""
    net = case_model(OPTIMIZERS[0])
    opt = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.legacy.SGD(0.1, momentum=0.9))
    x, y = data()
    first, second = batches(x, y, 2)
    step = _train_step(net, opt)
    step(*first)
    weights, scale = [w.numpy() for w in net.weights], float(opt.loss_scale)
    step(*second, poison=np.inf)
    assert int(opt.iterations) == 2 and float(opt.loss_scale) == scale / 2
    for old, new in zip(weights, net.weights):
        np.testing.assert_array_equal(new.numpy(), old)


@pytest.mark.parametrize("case", OPTIMIZERS, ids=IDS)
def test_non_finite_step_is_skipped_and_the_next_step_proceeds_as_without_it(mixed_float16, case):
    """A step whose scaled gradients are not finite changes no weight, slot, updater variable,
    statistic, average, accumulator or hyperparameter; as Keras 2 does for its own optimizers,
    it adds one to ``iterations``, halves the loss scale and restarts its good-step count. The
    next finite step then equals that of a run that took no such step and only had those three
    counters set the same way."""
    x, y = data()
    nets = [case_model(case), case_model(case)]
    opts = [keras.mixed_precision.LossScaleOptimizer(case.make()) for _ in nets]
    steps = [_train_step(net, opt) for net, opt in zip(nets, opts)]
    *warmup, poisoned, following = batches(x, y, STEPS + 2)
    for batch in warmup:
        for step in steps:
            step(*batch)
    (weights, inner, state, counters) = _numbers(nets[0], opts[0])
    steps[0](*poisoned, poison=np.inf)
    (new_weights, new_inner, new_state, new_counters) = _numbers(nets[0], opts[0])
    for old, new in zip(weights + inner, new_weights + new_inner):
        np.testing.assert_array_equal(new, old, err_msg=f"{case.name}: the skipped step changed a number")
    _assert_same(state, new_state, f"{case.name}: the skipped step")
    assert new_counters["iterations"] == counters["iterations"] + 1
    assert new_counters["loss_scale"] == counters["loss_scale"] / 2 and new_counters["good_steps"] == 0
    # The run without the skipped step: only Keras 2's three counters set as the skip set them.
    opts[1].iterations.assign_add(1)
    for variable, reference in zip(_loss_scale_variables(opts[1]), _loss_scale_variables(opts[0])):
        variable.assign(reference)
    for step in steps:
        step(*following)
    expected, got = _numbers(nets[1], opts[1]), _numbers(nets[0], opts[0])
    for old, new in zip(expected[0] + expected[1], got[0] + got[1]):
        np.testing.assert_array_equal(new, old, err_msg=f"{case.name}: the step after the skipped one")
    _assert_same({**expected[2], **expected[3]}, {**got[2], **got[3]}, f"{case.name}: the step after")
