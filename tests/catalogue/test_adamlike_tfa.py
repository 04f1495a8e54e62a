"""LazyAdam, Yogi, AdaBelief and RectifiedAdam vs TensorFlow Addons 0.23, run live (`make test-tf215`).

Ours and ``tfa.optimizers.<Name>`` get the same constructor arguments, variables and
gradients. With ``jit_compile=False`` every step's weights *and* optimizer state
(``get_weights()``: iterations, then the slots in TFA's creation order) are equal
bit for bit; with XLA (the default) they agree within conftest.TOLERANCE. TFA is the
source of every expected number here. Where we deliberately differ from TFA
(documented in the docstrings), a test pins TFA's behaviour and ours.
"""

import numpy as np
import pytest
import tensorflow as tf

from catalogue.test_adamlike import gradients, make_variables
from optimizers.rules.adabelief import AdaBelief
from optimizers.rules.lazy_adam import LazyAdam
from optimizers.rules.rectified_adam import RectifiedAdam
from optimizers.rules.yogi import Yogi

from conftest import HAS_TFA, TOLERANCE, keras

if HAS_TFA:
    import tensorflow_addons as tfa

pytestmark = pytest.mark.tfa

OURS = {cls.__name__: cls for cls in (LazyAdam, Yogi, AdaBelief, RectifiedAdam)}


def _schedules(**extra):
    def make():
        return dict(learning_rate=keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=2, decay_rate=0.5),
                    weight_decay=keras.optimizers.schedules.PiecewiseConstantDecay([2, 4], [0.1, 0.05, 0.01]),
                    **extra)
    return make


# name: (class name, constructor arguments (a function: schedules are made per optimizer), sparse too).
SCENARIOS = {
    "lazy_adam": ("LazyAdam", lambda: dict(learning_rate=0.1, beta_1=0.8, beta_2=0.95, epsilon=1e-3), True),
    "lazy_adam_amsgrad": ("LazyAdam", lambda: dict(learning_rate=0.1, amsgrad=True), False),  # sparse: pinned below
    "lazy_adam_decay_clipnorm": ("LazyAdam", lambda: dict(learning_rate=0.1, decay=0.1, clipnorm=0.5), True),
    "yogi_defaults": ("Yogi", dict, True),
    "yogi_sign": ("Yogi", lambda: dict(learning_rate=0.1, beta1=0.8, beta2=0.95, epsilon=1e-2), True),
    "yogi_tanh_l1_l2": ("Yogi", lambda: dict(learning_rate=0.1, beta1=0.8, beta2=0.95, l1_regularization_strength=0.5,
                                             l2_regularization_strength=0.2, initial_accumulator_value=0.1,
                                             activation="tanh"), True),
    "yogi_l1_only": ("Yogi", lambda: dict(learning_rate=0.1, l1_regularization_strength=0.3), True),
    "yogi_beta1_zero_l2": ("Yogi", lambda: dict(learning_rate=0.05, beta1=0.0, l2_regularization_strength=0.3), True),
    "yogi_schedule_decay": ("Yogi", lambda: dict(
        learning_rate=keras.optimizers.schedules.ExponentialDecay(0.1, 2, 0.5), decay=0.1, clipvalue=0.5), True),
    "adabelief_defaults": ("AdaBelief", dict, True),
    "adabelief_rectified_wd": ("AdaBelief", lambda: dict(learning_rate=0.1, beta_1=0.8, beta_2=0.8, epsilon=1e-8,
                                                         weight_decay=0.05), True),
    "adabelief_plain_amsgrad": ("AdaBelief", lambda: dict(learning_rate=0.05, beta_1=0.8, beta_2=0.95, epsilon=1e-6,
                                                          rectify=False, amsgrad=True), True),
    "adabelief_warmup": ("AdaBelief", lambda: dict(learning_rate=0.1, beta_2=0.8, epsilon=1e-6, weight_decay=0.01,
                                                   amsgrad=True, sma_threshold=4.5, total_steps=6,
                                                   warmup_proportion=0.3, min_lr=0.01), True),
    "adabelief_schedules": ("AdaBelief", _schedules(beta_2=0.8, epsilon=1e-7), True),
    "radam_defaults": ("RectifiedAdam", dict, True),
    "radam_rectified_wd": ("RectifiedAdam", lambda: dict(learning_rate=0.1, beta_1=0.8, beta_2=0.8,
                                                         weight_decay=0.05), True),
    "radam_warmup_amsgrad": ("RectifiedAdam", lambda: dict(learning_rate=0.1, beta_2=0.8, epsilon=1e-5, amsgrad=True,
                                                           sma_threshold=4.5, total_steps=6, warmup_proportion=0.3,
                                                           min_lr=0.01), True),
    "radam_schedules": ("RectifiedAdam", _schedules(beta_2=0.8, decay=0.05, clipnorm=1.0), True),
}
SPARSE = [(name, sparse) for name, (_, _, sparse_ok) in SCENARIOS.items() for sparse in (False, True)
          if sparse_ok or not sparse]


def _pair(name, **ours_kwargs):
    kind, make_kwargs, _ = SCENARIOS[name]
    return OURS[kind](**make_kwargs(), **ours_kwargs), getattr(tfa.optimizers, kind)(**make_kwargs())


def _states(optimizer, grads, dtype, mode):
    """After each step: the weights, then ``optimizer.get_weights()`` (iterations, slots in creation order)."""
    kernel, bias = make_variables(dtype)

    def step(g, b):
        optimizer.apply_gradients([(g, kernel), (b, bias)])

    step = tf.function(step) if mode == "function" else step
    out = []
    for g, b in grads:
        step(g, b)
        out.append([kernel.numpy(), bias.numpy()] + optimizer.get_weights())
    return out


def _assert_states(ours, theirs, exact, dtype=tf.float32):
    for step, (mine, expected) in enumerate(zip(ours, theirs), start=1):
        assert len(mine) == len(expected), f"step {step}: {len(mine)} arrays, TFA {len(expected)}"
        for i, (a, b) in enumerate(zip(mine, expected)):
            assert a.shape == b.shape, f"step {step}, array {i}: shape {a.shape}, TFA's {b.shape}"
            msg = f"step {step}, array {i} (0, 1: weights; 2: iterations; then slots)"
            if exact:
                np.testing.assert_array_equal(a, b, err_msg=msg)
            else:
                np.testing.assert_allclose(a, b, err_msg=msg, **TOLERANCE[dtype])


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("scenario,sparse", SPARSE, ids=[f"{n}-{'sparse' if s else 'dense'}" for n, s in SPARSE])
def test_step_by_step_equal_to_tfa_bit_for_bit(scenario, sparse, dtype, mode):
    ours, theirs = _pair(scenario, jit_compile=False)
    grads = gradients(sparse, dtype)
    _assert_states(_states(ours, grads, dtype, mode), _states(theirs, grads, dtype, mode), exact=True)


@pytest.mark.parametrize("scenario,sparse", SPARSE, ids=[f"{n}-{'sparse' if s else 'dense'}" for n, s in SPARSE])
def test_xla_steps_close_to_tfa(scenario, sparse):
    ours, theirs = _pair(scenario)  # jit_compile=True, the default (float64 with XLA: test_adamlike.py)
    grads = gradients(sparse, tf.float32)
    _assert_states(_states(ours, grads, tf.float32, "function"), _states(theirs, grads, tf.float32, "function"),
                   exact=False)


FIT_SCENARIOS = ["lazy_adam", "yogi_tanh_l1_l2", "adabelief_warmup", "radam_rectified_wd"]


@pytest.mark.parametrize("scenario", FIT_SCENARIOS)
def test_model_fit_equal_to_tfa(scenario):
    """An embedding (sparse gradients) and a dense layer, three epochs of ``model.fit``."""
    rng = np.random.RandomState(0)
    x = rng.randint(0, 10, size=(32, 3))
    y = rng.randn(32, 2).astype("float32")
    initial = [rng.randn(10, 4).astype("float32"), rng.randn(12, 2).astype("float32"), np.zeros(2, "float32")]
    weights = []
    for optimizer in _pair(scenario):
        model = keras.Sequential([keras.layers.Embedding(10, 4, input_length=3), keras.layers.Flatten(),
                                  keras.layers.Dense(2)])
        model.build((None, 3))
        model.set_weights(initial)
        model.compile(optimizer=optimizer, loss="mse")
        model.fit(x, y, batch_size=8, epochs=3, shuffle=False, verbose=0)
        weights.append(model.get_weights() + optimizer.get_weights())
    for ours, theirs in zip(*weights):
        np.testing.assert_allclose(ours, theirs, **TOLERANCE[tf.float32])


CONFIG_SCENARIOS = ["lazy_adam_decay_clipnorm", "yogi_tanh_l1_l2", "yogi_schedule_decay", "adabelief_warmup",
                    "adabelief_schedules", "radam_warmup_amsgrad", "radam_schedules"]


@pytest.mark.parametrize("scenario", CONFIG_SCENARIOS)
def test_config_holds_tfa_keys_and_tfa_config_builds_ours(scenario):
    kind, make_kwargs, _ = SCENARIOS[scenario]
    theirs = getattr(tfa.optimizers, kind)(**make_kwargs())
    tfa_config = theirs.get_config()
    ours = OURS[kind].from_config(dict(tfa_config))
    assert set(tfa_config) <= set(ours.get_config())
    assert set(getattr(tfa.optimizers, kind)().get_config()) <= set(OURS[kind]().get_config())  # defaults too
    for key in ("name", "total_steps", "activation", "amsgrad", "rectify", "epsilon"):
        if key in tfa_config:
            assert ours.get_config()[key] == tfa_config[key], key
    grads = gradients(True, tf.float32)
    _assert_states(_states(ours, grads, tf.float32, "function"), _states(theirs, grads, tf.float32, "function"),
                   exact=False)


@pytest.mark.parametrize("scenario", ["lazy_adam", "yogi_sign", "yogi_beta1_zero_l2", "adabelief_warmup",
                                      "radam_warmup_amsgrad"])
def test_tfa_checkpoint_restores_into_ours_and_trains_on_equally(scenario, tmp_path):
    ours, theirs = _pair(scenario, jit_compile=False)
    grads = gradients(True, tf.float32)
    tfa_kernel, tfa_bias = make_variables(tf.float32)
    for g, b in grads[:3]:
        theirs.apply_gradients([(g, tfa_kernel), (b, tfa_bias)])
    path = tf.train.Checkpoint(kernel=tfa_kernel, bias=tfa_bias, optimizer=theirs).save(str(tmp_path / "tfa"))
    kernel, bias = (tf.Variable(tf.zeros_like(v)) for v in make_variables(tf.float32))
    status = tf.train.Checkpoint(kernel=kernel, bias=bias, optimizer=ours).restore(path)
    for g, b in grads[3:]:
        theirs.apply_gradients([(g, tfa_kernel), (b, tfa_bias)])
        ours.apply_gradients([(g, kernel), (b, bias)])
        assert ours.get_slot_names() == theirs.get_slot_names() and ours.iterations.numpy() == theirs.iterations.numpy()
        for var, tfa_var in ((kernel, tfa_kernel), (bias, tfa_bias)):  # (weights() is in creation order, which a
            np.testing.assert_array_equal(var.numpy(), tfa_var.numpy())  # restore changes, in Keras' Adam too)
            for slot in theirs.get_slot_names():
                np.testing.assert_array_equal(ours.get_slot(var, slot).numpy(), theirs.get_slot(tfa_var, slot).numpy())
    status.assert_consumed()  # every value TFA saved (hyperparameters by TFA's names, slots, iterations) was used


def test_lazy_adam_sparse_amsgrad_tfa_ignores_it_ours_applies_it(tmp_path):
    """TFA bug, fixed here: TFA's sparse LazyAdam step skips AMSGrad (``vhat`` stays 0)."""
    grads = gradients(True, tf.float32)
    kwargs = dict(learning_rate=0.1, beta_1=0.8, beta_2=0.95, amsgrad=True)
    tfa_amsgrad = _states(tfa.optimizers.LazyAdam(**kwargs), grads, tf.float32, "eager")
    tfa_plain = _states(tfa.optimizers.LazyAdam(**dict(kwargs, amsgrad=False)), grads, tf.float32, "eager")
    # Each state: kernel, bias, iterations, m (kernel, bias), v (kernel, bias), vhat (kernel, bias).
    for amsgrad_state, plain_state in zip(tfa_amsgrad, tfa_plain):
        for i in (0, 3, 5):  # the kernel (sparse gradients), its m and v: as without AMSGrad
            np.testing.assert_array_equal(amsgrad_state[i], plain_state[i])
        np.testing.assert_array_equal(amsgrad_state[7], np.zeros(amsgrad_state[7].shape))  # its vhat stays 0
    assert np.all(tfa_amsgrad[-1][8] > 0)  # the bias (dense gradients) gets AMSGrad in TFA
    ours = _states(LazyAdam(jit_compile=False, **kwargs), grads, tf.float32, "eager")
    assert np.all(ours[-1][7][:4] > 0) and np.all(ours[-1][7][4] == 0)  # touched rows only
    np.testing.assert_array_equal(ours[0][0], tfa_amsgrad[0][0])  # step 1 alike (vhat = v)
    assert not np.allclose(ours[-1][0], tfa_amsgrad[-1][0])  # then AMSGrad shows
    # A TFA state resumes smoothly: its vhat rows are 0, so our first step after it takes max(0, v) = v.
    theirs, kernel = tfa.optimizers.LazyAdam(**kwargs), tf.Variable(make_variables(tf.float32)[0])
    for g, _ in grads[:3]:
        theirs.apply_gradients([(g, kernel)])
    path = tf.train.Checkpoint(kernel=kernel, optimizer=theirs).save(str(tmp_path / "tfa"))
    mine, my_kernel = LazyAdam(jit_compile=False, **kwargs), tf.Variable(tf.zeros_like(kernel))
    tf.train.Checkpoint(kernel=my_kernel, optimizer=mine).restore(path).assert_existing_objects_matched()
    theirs.apply_gradients([(grads[3][0], kernel)])
    mine.apply_gradients([(grads[3][0], my_kernel)])
    np.testing.assert_array_equal(my_kernel.numpy(), kernel.numpy())


@pytest.mark.parametrize("kind", ["AdaBelief", "RectifiedAdam"])
def test_sma_threshold_below_4_turns_tfa_nan_and_is_refused_here(kind):
    kwargs = dict(learning_rate=0.1, beta_2=0.8, sma_threshold=3.0)  # rho_4 = 3.45: r_4 = sqrt(negative)
    grads = gradients(False, tf.float32)
    tfa_weights = _states(getattr(tfa.optimizers, kind)(**kwargs), grads, tf.float32, "eager")
    assert not np.isnan(tfa_weights[2][0]).any() and np.isnan(tfa_weights[3][0]).all()
    with pytest.raises(ValueError, match=r"sma_threshold=3\.0"):
        OURS[kind](**kwargs)


@pytest.mark.parametrize("kind", ["LazyAdam", "AdaBelief", "RectifiedAdam"])
def test_epsilon_zero_is_keras_epsilon_as_in_tfa(kind):
    # TFA's constructors read 0 as keras.backend.epsilon(): the same config and bits here.
    theirs, ours = getattr(tfa.optimizers, kind)(epsilon=0.0), OURS[kind](epsilon=0.0)
    assert ours.get_config()["epsilon"] == theirs.get_config()["epsilon"] == tf.keras.backend.epsilon()
    # A row of zeros in each gradient: 0 / 0 there with a zero epsilon.
    grads = [(tf.concat([tf.zeros_like(g[:1]), g[1:]], 0), b) for g, b in gradients(False, tf.float32)]
    _assert_states(_states(ours, grads, tf.float32, "eager"), _states(theirs, grads, tf.float32, "eager"), exact=True)


def test_yogi_weights_are_ordered_as_tfa_variable_by_variable():
    grads = gradients(False, tf.float32)[:1]
    names = []
    for optimizer in (Yogi(), tfa.optimizers.Yogi()):
        kernel, bias = make_variables(tf.float32)
        optimizer.apply_gradients([(grads[0][0], kernel), (grads[0][1], bias)])
        names.append([(w.name.split("/")[-1].split(":")[0], tuple(w.shape)) for w in optimizer.weights])
    assert names[0] == names[1]
    assert [n for n, _ in names[0]][1:] == ["v", "m", "v", "m"]


@pytest.mark.parametrize("scenario", FIT_SCENARIOS)
def test_model_saved_with_tfa_loads_into_ours_and_trains_on_equally(scenario, tmp_path, monkeypatch):
    """A TFA-compiled model saved as .h5 loads with ours under TFA's registered name ("Addons>Yogi"...): the
    optimizer weights (stored by position) land in the right slots, and training continues with TFA's numbers."""
    kind = SCENARIOS[scenario][0]
    rng = np.random.RandomState(0)
    x, y = rng.randint(0, 10, size=(32, 3)), rng.randn(32, 2).astype("float32")
    tfa_model = keras.Sequential([keras.layers.Embedding(10, 4, input_length=3), keras.layers.Flatten(),
                                  keras.layers.Dense(2)])
    tfa_model.compile(optimizer=_pair(scenario)[1], loss="mse")
    tfa_model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    path = str(tmp_path / "tfa.h5")
    tfa_model.save(path)
    # TFA is imported here, so its class owns "Addons><Name>"; without TFA the name is to map to ours.
    monkeypatch.setitem(keras.utils.get_custom_objects(), f"Addons>{kind}", OURS[kind])
    loaded = keras.models.load_model(path)
    assert type(loaded.optimizer) is OURS[kind]
    for ours, theirs in zip(loaded.optimizer.get_weights(), tfa_model.optimizer.get_weights()):
        np.testing.assert_array_equal(ours, theirs)
    loaded.optimizer.jit_compile = False  # TFA's bits
    for model in (loaded, tfa_model):
        model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    for ours, theirs in zip(loaded.get_weights() + loaded.optimizer.get_weights(),
                            tfa_model.get_weights() + tfa_model.optimizer.get_weights()):
        np.testing.assert_array_equal(ours, theirs)
