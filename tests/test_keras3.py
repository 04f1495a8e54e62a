"""The Keras 3 classes (``optimizers.keras3``): the Keras 2 classes' numbers, Keras 3's own
optimizers' numbers where Keras 3 has the same rule, ``fit`` with and without ``jit_compile``,
Keras 3's options, and state kept by ``.keras`` files and checkpoints (resumed in a new process).

Expected numbers come from this library's Keras 2 classes (the same rule, run by OptimizerV2)
and from Keras 3's built-in optimizers, both in this process.
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
from optimizers.keras3.rule_optimizer import RuleOptimizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Every class of the catalogue, with arguments that exercise its rule (non-default where it matters).
CASES = {
    "Adam": dict(learning_rate=0.01, amsgrad=True),
    "AdamW": dict(weight_decay=0.01, learning_rate=0.01),
    "SGD": dict(learning_rate=0.05, momentum=0.9, nesterov=True),
    "SGDW": dict(weight_decay=0.01, learning_rate=0.05, momentum=0.9),
    "LAMB": dict(learning_rate=0.01, weight_decay=0.01),
    "Lion": dict(learning_rate=0.001, weight_decay=0.1),
    "Adafactor": dict(learning_rate=0.01),
    "Yogi": dict(learning_rate=0.01),
    "AdaBelief": dict(learning_rate=0.01),
    "RectifiedAdam": dict(learning_rate=0.01, total_steps=10, warmup_proportion=0.2),
    "NovoGrad": dict(learning_rate=0.01, weight_decay=0.01),
    "COCOB": dict(alpha=100.0),
    "ConditionalGradient": dict(learning_rate=0.1, lambda_=0.05),
    "ProximalAdagrad": dict(learning_rate=0.1, l1_regularization_strength=0.01),
    "LazyAdam": dict(learning_rate=0.01),
    "Adan": dict(learning_rate=0.01, weight_decay=0.02),
    "Muon": dict(learning_rate=0.01, adam_lr_ratio=0.5),
    "AdEMAMix": dict(learning_rate=0.01, beta_3=0.99, alpha_warmup=4, beta_3_warmup=4, weight_decay=0.01),
    "ScheduleFreeAdamW": dict(learning_rate=0.01, warmup_steps=3, weight_decay=0.01),
    "ScheduleFreeSGD": dict(learning_rate=0.05, beta_1=0.8),
}


def test_every_keras_3_class_has_a_case():
    rules = {name for name in keras3.__all__
             if isinstance(getattr(keras3, name), type) and issubclass(getattr(keras3, name), RuleOptimizer)}
    assert sorted(CASES) == sorted(rules)  # the wrappers: tests/test_keras3_wrappers.py


@pytest.fixture(autouse=True)
def _keras3_session():
    yield
    keras.backend.clear_session()


def _grads(shape, steps=6, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=shape).astype("float32"), [rng.normal(size=shape).astype("float32") for _ in range(steps)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_class_takes_the_keras_2_class_s_steps_bit_for_bit(name, dtype):
    w0, grads = _grads((6, 4))
    w0, grads = w0.astype(dtype), [g.astype(dtype) for g in grads]
    ours, theirs = keras.Variable(w0, dtype=dtype), tf.Variable(w0)
    k3, k2 = getattr(keras3, name)(**CASES[name]), getattr(optimizers, name)(**CASES[name])
    assert isinstance(k3, keras.optimizers.Optimizer)
    for grad in grads:
        k3.apply([tf.constant(grad)], [ours])
        k2.apply_gradients([(tf.constant(grad), theirs)])
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert int(k3.iterations.numpy()) == len(grads)


@pytest.mark.parametrize("name", sorted(CASES))
def test_sparse_gradients_take_the_keras_2_class_s_sparse_step(name):
    """An embedding's gradient (``tf.IndexedSlices``, repeated rows) reaches the rule's sparse step."""
    w0, _ = _grads((8, 3))
    ids = tf.constant([1, 5, 1, 6])
    ours, theirs = keras.Variable(w0), tf.Variable(w0)
    k3, k2 = getattr(keras3, name)(**CASES[name]), getattr(optimizers, name)(**CASES[name])
    for step in range(3):
        for var, apply in ((ours, lambda g, v: k3.apply([g], [v])), (theirs, lambda g, v: k2.apply_gradients([(g, v)]))):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.square(tf.gather(tf.convert_to_tensor(var), ids) - float(step)))
            grad = tape.gradient(loss, var.value if isinstance(var, keras.Variable) else var)
            assert isinstance(grad, tf.IndexedSlices)
            apply(grad, var)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize("ours, builtin", [
    (lambda: keras3.Adam(learning_rate=0.01), lambda: keras.optimizers.Adam(learning_rate=0.01)),
    (lambda: keras3.AdamW(weight_decay=0.05, learning_rate=0.01, scale_weight_decay_by_lr=True),
     lambda: keras.optimizers.AdamW(learning_rate=0.01, weight_decay=0.05)),
    (lambda: keras3.SGD(learning_rate=0.05, momentum=0.9), lambda: keras.optimizers.SGD(0.05, momentum=0.9)),
    (lambda: keras3.Lion(learning_rate=0.001), lambda: keras.optimizers.Lion(learning_rate=0.001)),
    (lambda: keras3.Adam(learning_rate=0.01, clipnorm=0.5), lambda: keras.optimizers.Adam(0.01, clipnorm=0.5)),
    (lambda: keras3.Adam(learning_rate=0.01, global_clipnorm=0.5),
     lambda: keras.optimizers.Adam(0.01, global_clipnorm=0.5)),
    (lambda: keras3.SGD(learning_rate=0.05, gradient_accumulation_steps=2),
     lambda: keras.optimizers.SGD(0.05, gradient_accumulation_steps=2)),
    (lambda: keras3.Adam(learning_rate=keras.optimizers.schedules.ExponentialDecay(0.01, 2, 0.5)),
     lambda: keras.optimizers.Adam(keras.optimizers.schedules.ExponentialDecay(0.01, 2, 0.5))),
], ids=["adam", "adamw", "sgd", "lion", "clipnorm", "global_clipnorm", "gradient_accumulation", "schedule"])
def test_keras_3_s_own_optimizers_give_the_same_numbers(ours, builtin):
    w0, grads = _grads((6, 4))
    a, b = keras.Variable(w0), keras.Variable(w0)
    mine, theirs = ours(), builtin()
    for grad in grads:
        mine.apply([tf.constant(grad)], [a])
        theirs.apply([tf.constant(grad)], [b])
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kwargs", [dict(learning_rate=0.01), dict(
    learning_rate=0.01, nesterov=False, rms_rate=None, adam_lr_ratio=0.5, weight_decay=0.1, adam_weight_decay=0.05,
    exclude_layers=["wide"])], ids=["defaults", "options"])
def test_muon_equals_keras_3_s_muon(kwargs):
    """Matrices (tall, wide: one excluded by name in the second case) take Muon's step, a vector and
    a rank-3 variable AdamW's; 6 steps, float32 rounding (the Keras 2 class: the same numbers)."""
    rng = np.random.default_rng(0)
    shapes = {"tall": (5, 3), "wide": (3, 6), "vector": (3,), "rank3": (4, 2, 2)}
    initial = {name: rng.normal(size=shape).astype("float32") for name, shape in shapes.items()}
    grads = [{name: rng.normal(size=shape).astype("float32") for name, shape in shapes.items()} for _ in range(6)]
    runs = {}
    for side, make in (("keras", keras.optimizers.Muon), ("ours", keras3.Muon), ("keras2", optimizers.Muon)):
        cls = tf.Variable if side == "keras2" else keras.Variable
        variables = {name: cls(value, name=name) for name, value in initial.items()}
        opt = make(**kwargs)
        for grad in grads:
            opt.apply_gradients([(tf.constant(grad[name]), var) for name, var in variables.items()])
        runs[side] = {name: np.asarray(var.numpy()) for name, var in variables.items()}
    for side in ("ours", "keras2"):
        for name in shapes:
            np.testing.assert_allclose(runs[side][name], runs["keras"][name], rtol=1e-6, atol=1e-6,
                                       err_msg=f"{side} {name}")


def test_use_ema_keeps_keras_3_s_average():
    w0, grads = _grads((4, 2))
    a, b = keras.Variable(w0), keras.Variable(w0)
    mine = keras3.SGD(learning_rate=0.1, use_ema=True, ema_momentum=0.5)
    theirs = keras.optimizers.SGD(0.1, use_ema=True, ema_momentum=0.5)
    for grad in grads:
        mine.apply([tf.constant(grad)], [a])
        theirs.apply([tf.constant(grad)], [b])
    mine.finalize_variable_values([a])
    theirs.finalize_variable_values([b])
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("jit_compile", [False, True])
@pytest.mark.parametrize("name", ["AdamW", "LAMB", "Lion", "Adafactor"])
def test_fit_trains_a_keras_3_model(name, jit_compile):
    keras.utils.set_random_seed(0)
    model = keras3_model()
    model.compile(optimizer=getattr(keras3, name)(**CASES[name]), loss="mse", jit_compile=jit_compile)
    x, y = keras3_data()
    before = model.evaluate(x, y, verbose=0)
    model.fit(x, y, epochs=4, batch_size=16, verbose=0)
    assert model.evaluate(x, y, verbose=0) < before
    assert int(model.optimizer.iterations.numpy()) == 16


def test_hyperparameters_are_the_rule_s_and_the_learning_rate_keras_3_s():
    opt = keras3.AdamW(weight_decay=0.01, learning_rate=0.01)
    var = keras.Variable(np.ones((3,), "float32"))
    opt.apply([tf.ones((3,))], [var])
    opt.beta_1, opt.weight_decay, opt.learning_rate = 0.5, 0.0, 0.02
    assert float(opt.rule.beta_1.numpy()) == 0.5 and float(opt.rule.weight_decay.numpy()) == 0.0
    twin = optimizers.AdamW(weight_decay=0.01, learning_rate=0.01)
    ref = tf.Variable(np.ones((3,), "float32"))
    twin.apply_gradients([(tf.ones((3,)), ref)])
    twin.beta_1, twin.weight_decay, twin.learning_rate = 0.5, 0.0, 0.02
    opt.apply([tf.ones((3,))], [var])
    twin.apply_gradients([(tf.ones((3,)), ref)])
    np.testing.assert_array_equal(var.numpy(), ref.numpy())
    with pytest.raises(ValueError, match="beta_1"):
        opt.beta_1 = 1.5


def test_config_round_trip_and_keras_3_serialization():
    opt = keras3.AdamW(weight_decay=0.01, learning_rate=keras.optimizers.schedules.CosineDecay(0.01, 100),
                       exclude_from_weight_decay=["bias"], clipnorm=1.0, use_ema=True)
    config = opt.get_config()
    again = keras3.AdamW.from_config(config)
    assert again.get_config() == config
    serialized = keras.optimizers.serialize(opt)
    assert serialized["registered_name"] == "optimizers.keras3>AdamW"
    assert keras.optimizers.deserialize(serialized).get_config() == config


RESUME = """
import sys, numpy as np, keras
from optimizers import keras3  # registers the classes: no custom_objects
folder, names = sys.argv[1], sys.argv[2:]
(x, ids, y) = (np.load(f"{folder}/{f}.npy") for f in ("x", "ids", "y"))
for name in names:
    model = keras.models.load_model(f"{folder}/{name}.keras")
    model.fit([x, ids], y, epochs=1, batch_size=16, shuffle=False, verbose=0)
    np.save(f"{folder}/{name}.npy", np.concatenate([w.ravel() for w in model.get_weights()]))
    print(name, int(model.optimizer.iterations.numpy()))
"""


def test_keras_files_resume_bit_for_bit_in_a_new_process(tmp_path):
    """Each class: trained one epoch, saved, trained on; the file loaded in a new process and trained
    on gives the same weights (every slot and the step were kept)."""
    (x, ids), y = keras3_data()
    for f, value in (("x", x), ("ids", ids), ("y", y)):
        np.save(tmp_path / f"{f}.npy", value)
    expected = {}
    for name in sorted(CASES):
        keras.utils.set_random_seed(0)
        model = keras3_model()
        model.compile(optimizer=getattr(keras3, name)(**CASES[name]), loss="mse")
        model.fit([x, ids], y, epochs=1, batch_size=16, shuffle=False, verbose=0)
        model.save(tmp_path / f"{name}.keras")
        model.fit([x, ids], y, epochs=1, batch_size=16, shuffle=False, verbose=0)
        expected[name] = np.concatenate([w.ravel() for w in model.get_weights()])
    result = subprocess.run([sys.executable, "-c", RESUME, str(tmp_path), *sorted(CASES)], capture_output=True,
                            text=True, timeout=900, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-len(CASES):] == [f"{name} 8" for name in sorted(CASES)]
    for name in sorted(CASES):
        np.testing.assert_array_equal(np.load(tmp_path / f"{name}.npy"), expected[name], err_msg=name)


def test_a_checkpoint_keeps_every_slot_and_the_step(tmp_path):
    w0, grads = _grads((5, 2))
    var = keras.Variable(w0)
    opt = keras3.Yogi(**CASES["Yogi"])
    for grad in grads[:3]:
        opt.apply([tf.constant(grad)], [var])
    tf.train.Checkpoint(optimizer=opt, var=var).write(str(tmp_path / "ckpt"))
    for grad in grads[3:]:
        opt.apply([tf.constant(grad)], [var])
    expected = var.numpy()
    restored_var = keras.Variable(np.zeros_like(w0))
    restored = keras3.Yogi(**CASES["Yogi"])
    restored.build([restored_var])
    tf.train.Checkpoint(optimizer=restored, var=restored_var).read(str(tmp_path / "ckpt")).assert_consumed()
    assert int(restored.iterations.numpy()) == 3
    for grad in grads[3:]:
        restored.apply([tf.constant(grad)], [restored_var])
    np.testing.assert_array_equal(restored_var.numpy(), expected)


@pytest.mark.parametrize("name", sorted(CASES))
def test_mirrored_strategy_equals_one_device(mirrored, name):
    x, y = keras3_data(32)

    def train(strategy):
        keras.utils.set_random_seed(0)
        with strategy.scope():
            model = keras3_model()
            model.compile(optimizer=getattr(keras3, name)(**CASES[name]), loss="mse")
        model.fit(x, y, epochs=2, batch_size=16, shuffle=False, verbose=0)
        return np.concatenate([w.ravel() for w in model.get_weights()])

    np.testing.assert_allclose(train(mirrored), train(tf.distribute.get_strategy()), rtol=1e-5, atol=1e-6)


def test_loss_scale_optimizer_wraps_a_keras_3_class():
    w0, grads = _grads((4, 2))
    a, b = keras.Variable(w0), keras.Variable(w0)
    mine = keras.optimizers.LossScaleOptimizer(keras3.Adam(learning_rate=0.01))
    theirs = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(0.01))
    for grad in grads:
        for opt, var in ((mine, a), (theirs, b)):
            with tf.GradientTape() as tape:
                loss = opt.scale_loss(tf.reduce_sum(tf.convert_to_tensor(var) * grad))
            opt.apply([tape.gradient(loss, var.value)], [var])
    assert float(mine.inner_optimizer.iterations.numpy()) == len(grads)
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-6)


def test_a_user_s_template_optimizer_becomes_a_keras_3_optimizer():
    class SignSGD(optimizers.CustomOptimizerV2):
        def __init__(self, learning_rate=0.1, name="SignSGD", **kwargs):
            super().__init__(name, **kwargs)
            self.add_hyperparameter("learning_rate", learning_rate, low=0.0)

        def update_dense(self, grad, var, slots, coefficients):
            return var.assign_sub(coefficients["learning_rate"] * tf.sign(grad))

    SignSGD3 = keras3.keras3_class(SignSGD)
    var = keras.Variable([1.0, -1.0])
    SignSGD3(learning_rate=0.25).apply([tf.constant([3.0, -0.5])], [var])
    assert var.numpy().tolist() == [0.75, -0.75]
    with pytest.raises(TypeError, match="rule_class"):
        keras3.keras3_class(keras.optimizers.Adam)


def test_keras_3_s_exclude_from_weight_decay_call_sets_the_rule_s_exclusions():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    kernel, bias = model.weights
    bias.assign(np.ones((2,), "float32"))  # zeros would not show a decay
    opt = keras3.AdamW(weight_decay=0.5, learning_rate=0.01)
    opt.exclude_from_weight_decay(var_names=["bias"])
    assert opt.rule.exclude_from_weight_decay == ("bias",)
    opt.exclude_from_weight_decay(var_list=[kernel])
    w0 = [w.numpy() for w in model.weights]
    opt.apply([tf.zeros_like(w) for w in w0], model.weights)
    np.testing.assert_array_equal(kernel.numpy(), w0[0])  # neither is decayed: a zero gradient moves nothing else
    np.testing.assert_array_equal(bias.numpy(), w0[1])
    decayed = keras3.AdamW(weight_decay=0.5, learning_rate=0.01)
    decayed.apply([tf.zeros_like(w) for w in w0], model.weights)
    np.testing.assert_allclose(bias.numpy(), 0.5 * w0[1])  # without the exclusions: decayed by half
