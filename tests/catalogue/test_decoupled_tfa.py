"""``extend_with_decoupled_weight_decay`` vs TensorFlow Addons 0.23, run live (`make test-tf215`).

Ours and ``tfa.optimizers.extend_with_decoupled_weight_decay`` extend the same Keras optimizer
class and get the same arguments, variables and gradients (dense, and sparse with a repeated
row per step; float32 and float64; eagerly and in a tf.function). The weights *and* the
optimizer state (``get_weights()``: iterations, hyperparameters, slots in TFA's creation order)
are equal bit for bit after every step; over this library's template Adam the weights agree
within conftest.TOLERANCE (its sparse Adam orders its float operations its own way). TFA is the source of every expected number here. TFA's configs build ours, a TFA
``tf.train.Checkpoint`` resumes in ours, and ``model.fit`` trains identically. Where we
deliberately differ (documented in ``DecoupledWeightDecayExtension``), a test pins TFA's
behaviour and ours.
"""

import functools

import numpy as np
import pytest
import tensorflow as tf

import optimizers
from catalogue.test_adamlike import gradients, make_variables
from catalogue.trajectories import trajectory
from optimizers.decoupled import extend_with_decoupled_weight_decay

import reference
from conftest import HAS_TFA, TOLERANCE, keras

if HAS_TFA:
    import tensorflow_addons as tfa

pytestmark = pytest.mark.tfa


def _schedules():
    return dict(learning_rate=keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=2, decay_rate=0.5),
                weight_decay=keras.optimizers.schedules.PiecewiseConstantDecay([2, 4], [0.1, 0.05, 0.01]))


# name: (Keras base class name, constructor arguments (a function: schedules are made per optimizer), sparse too)
SCENARIOS = {
    "adam": ("Adam", lambda: dict(weight_decay=0.05, learning_rate=0.1, beta_1=0.8, beta_2=0.95), True),
    "adam_amsgrad_exclude": ("Adam", lambda: dict(weight_decay=0.1, learning_rate=0.05, amsgrad=True,
                                                  exclude_from_weight_decay=["bias"]), True),
    "adam_schedules_clipnorm": ("Adam", lambda: dict(clipnorm=0.5, **_schedules()), True),
    "sgd_nesterov": ("SGD", lambda: dict(weight_decay=0.05, learning_rate=0.1, momentum=0.9, nesterov=True), True),
    "sgd_plain": ("SGD", lambda: dict(weight_decay=0.05, learning_rate=0.1), False),  # sparse: pinned below
    "rmsprop_centered": ("RMSprop", lambda: dict(weight_decay=0.05, learning_rate=0.01, centered=True,
                                                 momentum=0.5), True),
}
PAIRS = [(name, sparse) for name, (_, _, has_sparse) in SCENARIOS.items() for sparse in (False, True)
         if has_sparse or not sparse]


def _classes(base_name):
    base = getattr(keras.optimizers.legacy, base_name)
    return extend_with_decoupled_weight_decay(base), tfa.optimizers.extend_with_decoupled_weight_decay(base)


run = functools.partial(trajectory, with_weights=True)  # weights and optimizer state after each step


def assert_same(ours, theirs):
    for step, (a, b) in enumerate(zip(ours, theirs), start=1):
        assert len(a) == len(b)
        for i, (x, y) in enumerate(zip(a, b)):
            np.testing.assert_array_equal(x, y, err_msg=f"step {step}, array {i}")


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("name,sparse", PAIRS, ids=[f"{n}-{'sparse' if s else 'dense'}" for n, s in PAIRS])
def test_equals_tfa_bit_for_bit(name, sparse, dtype, mode):
    base_name, make_kwargs, _ = SCENARIOS[name]
    ours_cls, tfa_cls = _classes(base_name)
    grads = gradients(sparse, dtype)
    assert_same(run(ours_cls(**make_kwargs()), grads, make_variables(dtype), mode),
                run(tfa_cls(**make_kwargs()), grads, make_variables(dtype), mode))


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_template_adam_matches_tfa_over_keras_adam(sparse):
    ours = extend_with_decoupled_weight_decay(optimizers.Adam)(0.05, 0.1, jit_compile=False)
    theirs = tfa.optimizers.extend_with_decoupled_weight_decay(keras.optimizers.legacy.Adam)(0.05, learning_rate=0.1)
    grads = gradients(sparse, tf.float32)
    ours_run = run(ours, grads, make_variables(tf.float32), "function")
    theirs_run = run(theirs, grads, make_variables(tf.float32), "function")
    for a, b in zip(ours_run, theirs_run):  # the weights; the template orders its state its own way
        np.testing.assert_allclose(a[0], b[0], **TOLERANCE[tf.float32])
        np.testing.assert_allclose(a[1], b[1], **TOLERANCE[tf.float32])


def test_decay_var_list_in_apply_gradients_equals_tfa():
    ours_cls, tfa_cls = _classes("Adam")
    grads = gradients(True, tf.float32)
    runs = []
    for cls in (ours_cls, tfa_cls):
        optimizer, (kernel, bias) = cls(0.1, learning_rate=0.05), make_variables(tf.float32)
        runs.append(run(optimizer, grads, (kernel, bias), "function", decay_var_list=[bias]))
    assert_same(*runs)


# TFA's optimizers whose public attribute ``exclude_from_weight_decay`` users set after construction:
# (ours, TFA's, bit for bit); ours over the template are compared with conftest.TOLERANCE.
EXCLUDING = {
    "AdamW": (lambda: optimizers.AdamW(0.1, learning_rate=0.05), lambda: tfa.optimizers.AdamW(0.1, learning_rate=0.05),
              False),
    "SGDW": (lambda: optimizers.SGDW(0.1, learning_rate=0.05, momentum=0.9),
             lambda: tfa.optimizers.SGDW(0.1, learning_rate=0.05, momentum=0.9), False),
    "LAMB": (lambda: optimizers.LAMB(0.05, weight_decay=0.1), lambda: tfa.optimizers.LAMB(0.05, weight_decay=0.1),
             False),
    "extended_Adam": (lambda: _classes("Adam")[0](0.1, learning_rate=0.05),
                      lambda: _classes("Adam")[1](0.1, learning_rate=0.05), True),
}


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("name", sorted(EXCLUDING))
def test_exclude_from_weight_decay_set_after_construction_equals_tfa(name, sparse, mode):
    """TFA reads the attribute at each step: set before the first, it excludes the bias in both."""
    make_ours, make_theirs, exact = EXCLUDING[name]
    grads = gradients(sparse, tf.float32)
    runs, configs = [], []
    for make in (make_ours, make_theirs):
        optimizer = make()
        assert optimizer.exclude_from_weight_decay is None
        optimizer.exclude_from_weight_decay = ["bias"]
        configs.append(optimizer.get_config()["exclude_from_weight_decay"])
        runs.append(trajectory(optimizer, grads, make_variables(tf.float32), mode))
    assert configs[0] == configs[1] == ["bias"]
    if exact:
        assert_same(*runs)
    for ours, theirs in zip(*runs):
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(a, b, **TOLERANCE[tf.float32])


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_exclude_from_weight_decay_changed_after_a_step_where_tfa_applies_it_eagerly_only(mode):
    """TFA takes a new list after the first step, but only an eager step uses it (a traced one keeps
    deciding with the list it was traced with); ours refuses the change and keeps the first list."""
    ours_cls, tfa_cls = _classes("Adam")
    got = []
    for cls in (tfa_cls, ours_cls):
        opt, bias = cls(0.5, learning_rate=0.0), tf.Variable([1.0], name="bias")
        step = lambda opt=opt, bias=bias: opt.apply_gradients([(tf.constant([0.0]), bias)]) and None  # noqa: E731
        step = tf.function(step) if mode == "function" else step
        step()
        if cls is ours_cls:
            with pytest.raises(ValueError, match=r"`exclude_from_weight_decay` cannot change once"):
                opt.exclude_from_weight_decay = ["bias"]
        else:
            opt.exclude_from_weight_decay = ["bias"]
        step()
        got.append(bias.numpy())
    once = reference.decay(np.array([1.0]), 0.5)  # learning rate 0: only the decay moves the bias
    np.testing.assert_array_equal(got[0], once if mode == "eager" else reference.decay(once, 0.5))
    np.testing.assert_array_equal(got[1], reference.decay(once, 0.5))  # ours: decayed at both steps


def test_differences_from_tfa_are_pinned():
    """TFA: SGD with momentum=0 skips the decay on sparse gradients; ``decay_var_list`` given to
    ``minimize`` is ignored; ``decay_var_list=[]`` decays everything. Ours decays the touched rows,
    honours ``minimize``'s list and decays nothing for an empty one."""
    ours_cls, tfa_cls = _classes("SGD")
    grad = tf.IndexedSlices(tf.constant([[1.0, 1.0]]), tf.constant([0]), tf.constant([2, 2]))
    results = []
    for cls in (ours_cls, tfa_cls):
        var = tf.Variable([[1.0, 2.0], [3.0, 4.0]])
        cls(0.5, learning_rate=0.1).apply_gradients([(grad, var)])
        results.append(var.numpy())
    np.testing.assert_allclose(results[1], [[0.9, 1.9], [3.0, 4.0]])  # TFA: no decay
    np.testing.assert_allclose(results[0], [[0.4, 0.9], [3.0, 4.0]])  # ours: the touched row decays first

    ours_cls, tfa_cls = _classes("Adam")
    for decay_var_list, expected_ours, expected_tfa in (([], 1.0, 0.5), (None, 1.0, 0.5)):
        got = []
        for cls in (ours_cls, tfa_cls):
            var, other = tf.Variable(1.0), tf.Variable(1.0)
            # minimize: TFA ignores the list; [] via apply_gradients: TFA decays everything
            opt = cls(0.5, learning_rate=0.0)
            if decay_var_list is None:
                opt.minimize(lambda v=var, o=other: v + o, [var, other], decay_var_list=[other])
            else:
                opt.apply_gradients([(tf.constant(1.0), var)], decay_var_list=decay_var_list)
            got.append(float(var.numpy()))
        assert got == [expected_ours, expected_tfa]


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_tfa_config_builds_ours(name):
    base_name, make_kwargs, _ = SCENARIOS[name]
    ours_cls, tfa_cls = _classes(base_name)
    config = tfa_cls(**make_kwargs()).get_config()
    ours = ours_cls.from_config(config)
    assert set(ours.get_config()) == set(config)
    grads = gradients(False, tf.float32)
    assert_same(run(ours, grads, make_variables(tf.float32), "eager"),
                run(tfa_cls.from_config(config), grads, make_variables(tf.float32), "eager"))


def test_tfa_checkpoint_resumes_in_ours(tmp_path):
    ours_cls, tfa_cls = _classes("Adam")
    grads = gradients(True, tf.float32)
    kernel, bias = make_variables(tf.float32)
    theirs = tfa_cls(0.05, learning_rate=0.1)
    for g, b in grads[:4]:
        theirs.apply_gradients([(g, kernel), (b, bias)])
    path = tf.train.Checkpoint(optimizer=theirs, kernel=kernel, bias=bias).save(str(tmp_path / "tfa"))
    ours_kernel, ours_bias = make_variables(tf.float32)
    ours = ours_cls(0.05, learning_rate=0.1)
    tf.train.Checkpoint(optimizer=ours, kernel=ours_kernel, bias=ours_bias).restore(path)
    for g, b in grads[4:]:
        theirs.apply_gradients([(g, kernel), (b, bias)])
        ours.apply_gradients([(g, ours_kernel), (b, ours_bias)])
        np.testing.assert_array_equal(ours_kernel.numpy(), kernel.numpy())
        np.testing.assert_array_equal(ours_bias.numpy(), bias.numpy())
    assert int(ours.iterations.numpy()) == int(theirs.iterations.numpy()) == len(grads)
    assert ours.get_slot_names() == theirs.get_slot_names()
    for slot_name in theirs.get_slot_names():
        for ours_var, var in ((ours_kernel, kernel), (ours_bias, bias)):
            np.testing.assert_array_equal(ours.get_slot(ours_var, slot_name).numpy(),
                                          theirs.get_slot(var, slot_name).numpy())


def test_model_fit_equals_tfa():
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 6, size=(16, 2)).astype("int32"), rng.normal(size=(16, 1)).astype("float32")
    weights = []
    for cls in _classes("Adam"):
        keras.utils.set_random_seed(0)
        inputs = keras.Input((2,), dtype="int32")
        hidden = keras.layers.Flatten()(keras.layers.Embedding(6, 3)(inputs))
        net = keras.Model(inputs, keras.layers.Dense(1)(hidden))
        net.compile(cls(0.01, learning_rate=0.05, exclude_from_weight_decay=["bias"]), "mse")
        net.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
        weights.append(net.get_weights() + net.optimizer.get_weights())
    assert_same([weights[0]], [weights[1]])
