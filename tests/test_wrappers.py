"""The wrapper base: hooks, shared step counter, forwarding, composition with
LossScaleOptimizer, and state restored before the first step."""

import numpy as np
import pytest
import tensorflow as tf
from catalogue.trajectories import scaled_step

import optimizers
from optimizers import Adam

from conftest import keras


class HalfGradients(optimizers.OptimizerWrapper):
    """Halves every gradient before the inner step; counts steps in a slot."""

    def __init__(self, optimizer, name="HalfGradients", **kwargs):
        super().__init__(optimizer, name, **kwargs)

    def slot_specs(self, var):
        return [optimizers.SlotSpec("seen", shape=lambda shape: [])]

    def before_step(self, grads_and_vars):
        return [(None if g is None else g * 0.5, v) for g, v in grads_and_vars]

    def after_step(self, var, slots, coefficients):
        return slots["seen"].assign(coefficients["step"])


@pytest.mark.parametrize("jit_compile", [False, True])
def test_hooks_run_around_the_inner_step(jit_compile):
    init = np.array([1.0, -1.0], np.float32)
    wrapped_var, alone_var = tf.Variable(init), tf.Variable(init)
    wrapper = HalfGradients(keras.optimizers.legacy.Adam(0.1), jit_compile=jit_compile)
    alone = keras.optimizers.legacy.Adam(0.1)
    for step in range(3):
        grad = np.array([step + 1.0, 2.0], np.float32)
        wrapper.apply_gradients([(tf.constant(grad), wrapped_var)])
        alone.apply_gradients([(tf.constant(grad * 0.5), alone_var)])
    np.testing.assert_array_equal(wrapped_var.numpy(), alone_var.numpy())
    assert wrapper.get_slot(wrapped_var, "seen").numpy() == 3.0
    assert wrapper.iterations is wrapper.inner_optimizer.iterations and int(wrapper.iterations) == 3


def test_inner_hyperparameters_are_read_and_set_through_the_wrapper():
    wrapper = optimizers.MovingAverage(Adam(0.1, beta_1=0.8))
    assert float(wrapper.beta_1) == pytest.approx(0.8)
    wrapper.beta_1 = 0.5
    assert float(wrapper.inner_optimizer.beta_1) == 0.5
    wrapper.learning_rate = 0.2
    assert float(wrapper.inner_optimizer.learning_rate) == pytest.approx(0.2)
    with pytest.raises(ValueError, match=r"`average_decay` must be in \[0.0, 1.0\]. Received: average_decay=2.0"):
        wrapper.average_decay = 2.0
    with pytest.raises(ValueError, match=r"`beta_1` must be in \[0.0, 1.0\). Received: beta_1=1.5"):
        wrapper.beta_1 = 1.5


def test_hyperparameters_and_options_reach_the_optimizer_that_has_them_through_nested_wrappers():
    adam = Adam(0.1)
    outer = optimizers.GradientAccumulation(optimizers.Lookahead(optimizers.MovingAverage(adam)), 2)
    outer.beta_1, outer.average_decay, outer.sync_period, outer.amsgrad = 0.5, 0.9, 3, True
    assert float(adam.beta_1) == 0.5 and adam.amsgrad
    decayed = optimizers.MovingAverage(optimizers.AdamW(1e-4))
    decayed.exclude_from_weight_decay = ["bias"]  # a property of the inner optimizer's class
    assert decayed.inner_optimizer.exclude_from_weight_decay == ("bias",) and "exclude_from_weight_decay" not in vars(decayed)
    assert float(outer.inner_optimizer.inner_optimizer.average_decay) == pytest.approx(0.9)
    assert outer.inner_optimizer.sync_period == 3
    assert not {"beta_1", "average_decay", "sync_period", "amsgrad"} & set(vars(outer))  # nothing shadowed
    config = outer.get_config()["optimizer"]["config"]["optimizer"]["config"]["optimizer"]["config"]
    assert config["beta_1"] == 0.5 and config["amsgrad"]
    var = tf.Variable([1.0, 2.0])
    for _ in range(2):
        outer.apply_gradients([(tf.constant([1.0, 1.0]), var)])
    with pytest.raises(ValueError, match=r"`epsilon` cannot change once Adam has taken a step.*Received: epsilon=0.5"):
        outer.epsilon = 0.5
    assert adam.epsilon == 1e-7 and "epsilon" not in vars(outer)


@pytest.mark.parametrize("wrap", [optimizers.MovingAverage, optimizers.Lookahead,
                                  lambda inner, **kw: optimizers.GradientAccumulation(inner, 1, **kw)])
def test_clipping_of_a_wrapper_is_its_inner_optimizers_read_and_set(wrap):
    grad = np.array([30.0, 40.0], np.float32)  # norm 50: clipped to norm 1 -> [0.6, 0.8]

    def step(opt):
        var = tf.Variable([1.0, 1.0])
        opt.apply_gradients([(tf.constant(grad), var)])
        return var.numpy()

    expected = np.float32(1.0) - np.float32(0.1) * (grad / np.float32(50.0))
    given = wrap(optimizers.SGD(0.1), clipnorm=1.0)
    assert given.clipnorm == 1.0 and given.inner_optimizer.clipnorm == 1.0
    assert "clipnorm" not in given.get_config()  # kept once, in the inner optimizer's config
    assert type(given).from_config(given.get_config()).clipnorm == 1.0
    later = wrap(optimizers.SGD(0.1))
    later.clipnorm = 1.0
    assert later.inner_optimizer.clipnorm == 1.0
    for opt in (given, later):
        np.testing.assert_allclose(step(opt), expected, rtol=1e-6)
    with pytest.raises(ValueError, match=r"Cannot accept both `clipnorm` and `global_clipnorm`.*Received: "
                                         r"clipnorm=1.0, global_clipnorm=2.0"):
        later.global_clipnorm = 2.0
    assert later.inner_optimizer.global_clipnorm is None
    with pytest.raises(ValueError, match="Cannot accept both"):
        wrap(optimizers.SGD(0.1, global_clipnorm=2.0), clipnorm=1.0)
    with pytest.raises(ValueError, match=r"`clipvalue` must be in \[0.0, inf\]. Received: clipvalue=-1.0"):
        later.clipvalue = -1.0


def _moving_average_reference(var, average, grad, lr, decay):
    """One step of MovingAverage(SGD(lr)) in float32 numpy: ``(var, average)``."""
    var = var - np.float32(lr) * grad
    return var, average - (average - var) * (np.float32(1) - np.float32(decay))


def _lookahead_reference(var, slow, grad, lr, slow_step_size):
    """One step of Lookahead(SGD(lr), sync_period=1) in float32 numpy: ``(var, slow)``."""
    var = var - np.float32(lr) * grad
    slow = slow + np.float32(slow_step_size) * (var - slow)
    return slow, slow


@pytest.mark.parametrize("mode", ["eager", "tf_function"])
@pytest.mark.parametrize("make, name, first, then, reference, slot", [
    (lambda: optimizers.MovingAverage(optimizers.SGD(0.1), average_decay=0.99), "average_decay", 0.99, 0.0,
     _moving_average_reference, "average"),
    (lambda: optimizers.MovingAverage(keras.optimizers.legacy.SGD(0.1), average_decay=0.99), "average_decay", 0.99,
     0.0, _moving_average_reference, "average"),
    (lambda: optimizers.Lookahead(optimizers.SGD(0.1), sync_period=1, slow_step_size=0.5), "slow_step_size", 0.5,
     1.0, _lookahead_reference, "slow"),
], ids=["MovingAverage(template)", "MovingAverage(keras)", "Lookahead"])
def test_a_wrapper_hyperparameter_set_after_the_step_was_built_takes_effect_in_it(make, name, first, then,
                                                                                  reference, slot, mode):
    grad = np.array([1.0, -1.0], np.float32)
    var = tf.Variable([1.0, 2.0])
    opt = make()

    def step():
        opt.apply_gradients([(tf.constant(grad), var)])

    step = tf.function(step) if mode == "tf_function" else step
    expected = var.numpy(), var.numpy()  # the slot starts at the weights
    step()
    expected = reference(*expected, grad, 0.1, first)
    setattr(opt, name, then)  # after the step was built (traced, in tf.function)
    for _ in range(2):
        step()
        expected = reference(*expected, grad, 0.1, then)
    np.testing.assert_allclose(var.numpy(), expected[0], rtol=1e-6)
    np.testing.assert_allclose(opt.get_slot(var, slot).numpy(), expected[1], rtol=1e-6)
    assert opt.get_config()[name] == then and getattr(opt, name) == then  # the value as set, as before
    assert not any(name in w.name for w in opt.weights)  # a wrapper's hyperparameter is no optimizer weight


@pytest.mark.parametrize("order", ["lso_outside", "lso_inside"])
def test_composes_with_loss_scale_optimizer_in_both_orders(order):
    init = np.array([0.5, -0.25], np.float32)
    plain_var, scaled_var = tf.Variable(init), tf.Variable(init)
    plain = optimizers.MovingAverage(Adam(0.1), average_decay=0.5)
    lso = keras.mixed_precision.LossScaleOptimizer
    if order == "lso_outside":
        scaled = lso(optimizers.MovingAverage(Adam(0.1), average_decay=0.5), dynamic=False, initial_scale=8.0)
        averaging = scaled.inner_optimizer
    else:
        scaled = optimizers.MovingAverage(lso(Adam(0.1), dynamic=False, initial_scale=8.0), average_decay=0.5)
        averaging = scaled
    for step in range(3):
        grad = tf.constant([step + 1.0, -2.0])
        plain.apply_gradients([(grad, plain_var)])
        scaled_step(scaled, scaled_var, grad, scaled)
    np.testing.assert_array_equal(scaled_var.numpy(), plain_var.numpy())
    np.testing.assert_array_equal(averaging.average_of(scaled_var).numpy(), plain.average_of(plain_var).numpy())
    assert int(scaled.iterations) == 3


@pytest.mark.parametrize("inner", ["builtin", "template"])
def test_checkpoint_restored_before_the_first_step_is_usable(inner, tmp_path):
    """Slots created by a restore are the wrapper's averages: swap_weights works
    right away, and training continues exactly as without the interruption."""

    def make():
        opt = keras.optimizers.legacy.Adam(0.1) if inner == "builtin" else Adam(0.1)
        return optimizers.MovingAverage(opt, average_decay=0.5)

    grads = [tf.constant([1.0, -2.0]), tf.constant([0.5, 0.5]), tf.constant([-1.0, 3.0])]
    var, opt = tf.Variable([1.0, 2.0]), make()
    opt.apply_gradients([(grads[0], var)])
    path = tf.train.Checkpoint(var=var, optimizer=opt).save(str(tmp_path / "ckpt"))
    average_at_save = opt.average_of(var).numpy()
    for grad in grads[1:]:
        opt.apply_gradients([(grad, var)])

    restored_var, restored = tf.Variable([0.0, 0.0]), make()
    status = tf.train.Checkpoint(var=restored_var, optimizer=restored).restore(path)
    status.assert_existing_objects_matched()
    trained = restored_var.numpy()
    restored.swap_weights()
    np.testing.assert_array_equal(restored_var.numpy(), average_at_save)
    restored.swap_weights()
    np.testing.assert_array_equal(restored_var.numpy(), trained)
    for grad in grads[1:]:
        restored.apply_gradients([(grad, restored_var)])
    np.testing.assert_array_equal(restored_var.numpy(), var.numpy())
    np.testing.assert_array_equal(restored.average_of(restored_var).numpy(), opt.average_of(var).numpy())
    assert restored.has_shadow_copy and int(restored.iterations) == 3


def test_wrapper_config_nests_a_registered_inner_optimizer_and_round_trips():
    wrapper = HalfGradients(Adam(0.05, amsgrad=True), jit_compile=False)
    config = wrapper.get_config()
    again = HalfGradients.from_config(config)
    assert type(again.inner_optimizer) is Adam and again.inner_optimizer.amsgrad
    assert again.get_config() == config


def test_wrapper_refuses_unknown_arguments_and_bad_inner():
    with pytest.raises(TypeError, match=r"unexpected keyword argument `momentum`. Received: momentum=0.9"):
        HalfGradients("sgd", momentum=0.9)
    with pytest.raises(TypeError, match=r"`optimizer` must be a Keras 2 \(OptimizerV2\) optimizer.*Received: optimizer=3"):
        HalfGradients(3)
