"""Schedule-free's evaluation point and optimizer-wide state beyond the tables: the swap and its
refusals, the averaging callbacks at the evaluation point, routing refused. The steps themselves
are checked by the conformance table (numpy reference) and against optax (tests/catalogue)."""

import numpy as np
import pytest
import tensorflow as tf

import optimizers

from conftest import keras

CLASSES = [optimizers.ScheduleFreeAdamW, optimizers.ScheduleFreeSGD]


def _trained(cls, strategy=None):
    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope():
        var = tf.Variable([[1.0, -2.0], [0.5, 3.0]])
        opt = cls(learning_rate=0.05)
    @tf.function
    def step(grad):
        def replica_step():  # each replica its share (the replicas' shares sum to the gradient)
            share = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group + 1, tf.float32) / 3.0
            opt.apply_gradients([(grad * share, var)])

        strategy.run(replica_step)

    for count in range(4):
        step(tf.constant([[0.3, -0.2], [0.1, 0.4]]) * (count + 1))
    return var, opt


def _evaluation_point(var, opt):
    """x = (y - (1 - b1) z) / b1, from the weights and the slot z (numpy)."""
    beta_1 = np.float32(opt.beta_1)
    z = opt.get_slot(var, "z").numpy()
    return (var.numpy() - (1 - beta_1) * z) / beta_1


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("where", ["one_device", "mirrored"])
def test_swap_puts_the_evaluation_point_in_and_the_training_point_back(cls, where, mirrored):
    var, opt = _trained(cls, mirrored if where == "mirrored" else None)
    trained, x = var.numpy(), _evaluation_point(var, opt)
    assert not np.allclose(trained, x)
    opt.swap_weights()
    components = var.values if hasattr(var, "values") else (var,)
    for component in components:  # every replica's copy
        np.testing.assert_allclose(component.numpy(), x, rtol=1e-6)
    np.testing.assert_array_equal(opt.average_of(var).numpy(), var.numpy())  # while swapped: the weights
    opt.swap_weights()
    np.testing.assert_allclose(var.numpy(), trained, rtol=1e-6, atol=1e-7)  # within rounding


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_a_step_while_swapped_is_refused_and_changes_nothing(cls):
    var, opt = _trained(cls)
    @tf.function
    def step():
        opt.apply_gradients([(tf.ones_like(var), var)])

    step()  # traced before the swap: the refusal is the traced assertion, not a Python check
    opt.swap_weights()
    before = [v.numpy() for v in (var, *opt.weights)]
    with pytest.raises(ValueError, match="call swap_weights\\(\\) again before training"):
        opt.apply_gradients([(tf.ones_like(var), var)])
    with pytest.raises(tf.errors.InvalidArgumentError, match="call swap_weights\\(\\) again before training"):
        step()
    for value, now in zip(before, (var, *opt.weights)):
        np.testing.assert_array_equal(value, now.numpy())
    opt.swap_weights()
    opt.apply_gradients([(tf.ones_like(var), var)])  # trains again


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_callbacks_evaluate_at_the_evaluation_point_and_give_the_weights_back_bit_for_bit(cls, tmp_path):
    rng = np.random.RandomState(0)
    x, y = rng.randn(64, 3).astype("float32"), rng.randn(64, 1).astype("float32")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=cls(learning_rate=0.05), loss="mse")
    path = str(tmp_path / "x_{epoch}.weights.h5")
    callback = optimizers.MovingAverageCallback(filepath=path, save_weights_only=True, validation_data=(x, y))
    history = model.fit(x, y, epochs=2, batch_size=16, verbose=0, callbacks=[callback])
    trained = model.get_weights()
    with optimizers.averaged_weights(model):
        at_x = model.get_weights()
        expected_loss = model.evaluate(x, y, verbose=0)
    kernel = model.layers[0].kernel
    np.testing.assert_allclose(at_x[0], _evaluation_point(kernel, model.optimizer), rtol=1e-6)
    for now, before in zip(model.get_weights(), trained):
        np.testing.assert_array_equal(now, before)
    np.testing.assert_allclose(history.history["average_loss"][-1], expected_loss, rtol=1e-6)
    saved = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    saved.load_weights(str(tmp_path / "x_2.weights.h5"))
    for got, want in zip(saved.get_weights(), at_x):
        np.testing.assert_array_equal(got, want)


def test_rules_with_optimizer_wide_state_cannot_move_another_optimizer_s_variables():
    var, other = tf.Variable([1.0, 2.0], name="table"), tf.Variable([3.0])
    host = optimizers.Adam(0.1, updaters={"table": optimizers.ScheduleFreeAdamW()})
    with pytest.raises(ValueError, match="ScheduleFreeAdamW keeps optimizer-wide state.*Received"):
        host.apply_gradients([(tf.ones(2), var), (tf.ones(1), other)])
    np.testing.assert_array_equal(var.numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(other.numpy(), [3.0])


def test_swap_weights_of_an_optimizer_without_an_evaluation_point_says_so():
    var = tf.Variable([1.0])
    opt = optimizers.AdamW(weight_decay=0.01)
    opt.apply_gradients([(tf.ones(1), var)])
    with pytest.raises(TypeError, match="AdamW evaluates its variables where it trains them"):
        opt.swap_weights()
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer=opt, loss="mse")
    with pytest.raises(TypeError, match="averaging wrapper .* or an optimizer with an evaluation point"):
        with optimizers.averaged_weights(model):
            pass
