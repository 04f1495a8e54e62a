"""SWA, AverageModelCheckpoint and MultiOptimizer vs TensorFlow Addons 0.23, live (TF 2.15 env, marked ``tfa``).

TFA is the source of every expected number here. With ``jit_compile=False``
our weights and averages equal TFA's bit for bit; with XLA (the default) they
agree to ``conftest.TOLERANCE``. Where we deliberately differ from TFA, a test
pins TFA's behaviour next to ours. Lookahead's live parity is in
``tests/test_docs_lookahead_tfa.py``.
"""

import inspect

import numpy as np
import pytest
import tensorflow as tf

import optimizers
from optimizers.callbacks_swa import AverageModelCheckpoint
from optimizers.wrappers.multi_optimizer import MultiOptimizer
from optimizers.wrappers.swa import SWA

from conftest import HAS_TFA, TOLERANCE, keras

if HAS_TFA:
    import tensorflow_addons as tfa

pytestmark = pytest.mark.tfa

SHAPE = (5, 3)
INNER = {  # the inner optimizer: ours and TFA's get a fresh one each
    "sgd_momentum": lambda: keras.optimizers.legacy.SGD(0.1, momentum=0.9),
    "adam": lambda: keras.optimizers.legacy.Adam(0.05),
}


def _gradients(sparse, steps=9):
    rng = np.random.RandomState(1)
    out = []
    for _ in range(steps):
        if sparse:
            values = tf.constant(rng.randn(4, SHAPE[1]).astype("float32"))
            out.append(tf.IndexedSlices(values, tf.constant([0, 3, 3, 1]), tf.constant(SHAPE, tf.int64)))
        else:
            out.append(tf.constant(rng.randn(*SHAPE).astype("float32")))
    return out


def _trajectory(opt, grads, in_function=False, dtype="float32"):
    var = tf.Variable(np.random.RandomState(0).randn(*SHAPE).astype(dtype))

    def apply(grad):
        opt.apply_gradients([(grad, var)])

    apply = tf.function(apply) if in_function else apply
    out = []
    for grad in grads:
        apply(grad)
        out.append((var.numpy(), opt.get_slot(var, "average").numpy()))
    return out


SWA_ARGS = dict(start_averaging=2, average_period=3)  # snapshots after steps 3, 6 and 9


# ---------------------------------------------------------------------------------------------- SWA
@pytest.mark.parametrize("mode", ["plain", "xla", "xla_in_function"])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("inner", sorted(INNER))
def test_swa_step_by_step_equals_tfa(inner, sparse, mode):
    grads = _gradients(sparse)
    ours = _trajectory(SWA(INNER[inner](), jit_compile=mode != "plain", **SWA_ARGS), grads,
                       in_function=mode.endswith("function"))
    theirs = _trajectory(tfa.optimizers.SWA(INNER[inner](), **SWA_ARGS), grads, in_function=mode.endswith("function"))
    initial = np.random.RandomState(0).randn(*SHAPE).astype("float32")
    for step, ((raw, average), (tfa_raw, tfa_average)) in enumerate(zip(ours, theirs), start=1):
        np.testing.assert_array_equal(raw, tfa_raw, err_msg=f"weights after step {step}")
        if step < 3:  # before the first snapshot: TFA's average is zeros, ours the initial weights (pinned)
            np.testing.assert_array_equal(tfa_average, np.zeros(SHAPE))
            np.testing.assert_array_equal(average, initial)
        elif mode == "plain":
            np.testing.assert_array_equal(average, tfa_average, err_msg=f"average after step {step}")
        else:
            np.testing.assert_allclose(average, tfa_average, err_msg=f"average after step {step}",
                                       **TOLERANCE[tf.float32])


def test_swa_on_float64_where_tfa_raises():
    grads = [tf.cast(g, tf.float64) for g in _gradients(False, steps=4)]
    with pytest.raises(TypeError, match="float32 that does not match type float64"):
        _trajectory(tfa.optimizers.SWA(keras.optimizers.legacy.SGD(0.1), 0, 1), grads, dtype="float64")
    ours = _trajectory(SWA(keras.optimizers.legacy.SGD(0.1), 0, 1), grads, dtype="float64")
    np.testing.assert_allclose(ours[-1][1], np.mean([raw for raw, _ in ours], axis=0), **TOLERANCE[tf.float64])


def _model():
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="tanh"), keras.layers.Dense(2)])


RNG = np.random.RandomState(3)
X, Y = RNG.randn(48, 4).astype("float32"), RNG.randn(48, 2).astype("float32")


def _fit(opt, epochs=2, callbacks=(), model=None):
    model = model or _model()
    model.compile(opt, "mse")
    model.fit(X, Y, batch_size=8, epochs=epochs, shuffle=False, verbose=0, callbacks=list(callbacks))
    return model


def test_swa_model_fit_equals_tfa():
    ours = _fit(SWA(INNER["adam"](), jit_compile=False, **SWA_ARGS))
    theirs = _fit(tfa.optimizers.SWA(INNER["adam"](), **SWA_ARGS))
    for a, b in zip(ours.get_weights(), theirs.get_weights()):
        np.testing.assert_array_equal(a, b)
    for ours_var, theirs_var in zip(ours.trainable_variables, theirs.trainable_variables):
        np.testing.assert_array_equal(ours.optimizer.average_of(ours_var).numpy(),
                                      theirs.optimizer.get_slot(theirs_var, "average").numpy())


@pytest.mark.parametrize("ours_cls,theirs_name", [(SWA, "SWA"), (MultiOptimizer, "MultiOptimizer")])
def test_signature_and_config_keys_are_tfas(ours_cls, theirs_name):
    theirs_cls = getattr(tfa.optimizers, theirs_name)
    ours_params = inspect.signature(ours_cls).parameters
    theirs_params = inspect.signature(theirs_cls).parameters
    assert list(ours_params) == list(theirs_params)
    for name, param in theirs_params.items():
        assert ours_params[name].default == param.default, name


def test_swa_tfa_config_loads_and_has_every_key():
    theirs = tfa.optimizers.SWA(keras.optimizers.legacy.Adam(0.01, beta_1=0.8), start_averaging=4, average_period=7)
    ours = SWA(keras.optimizers.legacy.Adam(0.01, beta_1=0.8), start_averaging=4, average_period=7)
    assert set(theirs.get_config()) <= set(ours.get_config())
    assert SWA.from_config(theirs.get_config()).get_config() == ours.get_config()


def test_swa_tfa_checkpoint_restores_into_ours_and_trains_on_equally(tmp_path):
    grads = _gradients(False)
    theirs_var, ours_var = tf.Variable(np.ones(SHAPE, "float32")), tf.Variable(np.zeros(SHAPE, "float32"))
    theirs = tfa.optimizers.SWA(INNER["adam"](), **SWA_ARGS)
    for grad in grads[:4]:  # one snapshot taken
        theirs.apply_gradients([(grad, theirs_var)])
    path = tf.train.Checkpoint(var=theirs_var, optimizer=theirs).save(str(tmp_path / "tfa"))
    ours = SWA(INNER["adam"](), jit_compile=False, **SWA_ARGS)
    status = tf.train.Checkpoint(var=ours_var, optimizer=ours).restore(path)
    status.assert_existing_objects_matched()  # inner "awg_optimizer", slot "average", step, Adam's state
    for grad in grads[4:]:
        theirs.apply_gradients([(grad, theirs_var)])
        ours.apply_gradients([(grad, ours_var)])
        np.testing.assert_array_equal(ours_var.numpy(), theirs_var.numpy())
        np.testing.assert_array_equal(ours.average_of(ours_var).numpy(), theirs.get_slot(theirs_var, "average").numpy())


def test_swa_h5_saved_with_tfa_loads_into_ours(tmp_path, monkeypatch):
    theirs = _fit(tfa.optimizers.SWA(INNER["adam"](), **SWA_ARGS), epochs=1)
    path = str(tmp_path / "tfa.h5")
    theirs.save(path)
    # TFA is imported here, so its class owns "Addons>SWA"; without TFA the name maps to ours.
    monkeypatch.setitem(keras.utils.get_custom_objects(), "Addons>SWA", SWA)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded.optimizer, SWA)
    loaded.optimizer.jit_compile = False
    for model in (loaded, theirs):
        model.fit(X, Y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    for ours_var, theirs_var in zip(loaded.trainable_variables, theirs.trainable_variables):
        np.testing.assert_array_equal(ours_var.numpy(), theirs_var.numpy())
        np.testing.assert_array_equal(loaded.optimizer.average_of(ours_var).numpy(),
                                      theirs.optimizer.get_slot(theirs_var, "average").numpy())


# ----------------------------------------------------------------------------- AverageModelCheckpoint
@pytest.mark.parametrize("wrapper", ["Lookahead", "MovingAverage", "SWA"])
def test_saved_model_written_by_tfa_loads_into_ours_and_trains_on_equally(wrapper, tmp_path, monkeypatch):
    """TFA's wrappers share their step counter with the inner optimizer: a SavedModel holds it once,
    and loading it keeps it (it once fell back to a fresh counter, 0, and restarted the schedules)."""
    ours_cls = getattr(optimizers, wrapper)
    args = {"Lookahead": dict(sync_period=4), "MovingAverage": dict(average_decay=0.9), "SWA": SWA_ARGS}[wrapper]
    theirs = _fit(getattr(tfa.optimizers, wrapper)(INNER["adam"](), **args), epochs=1)  # 6 steps
    path = str(tmp_path / "tfa_saved_model")
    theirs.save(path, save_format="tf")
    # TFA is imported here, so its class owns "Addons>..."; without TFA the name maps to ours.
    monkeypatch.setitem(keras.utils.get_custom_objects(), f"Addons>{wrapper}", ours_cls)
    loaded = keras.models.load_model(path)
    assert type(loaded.optimizer) is ours_cls
    loaded.optimizer.jit_compile = False
    slot = "slow" if wrapper == "Lookahead" else "average"
    for model in (loaded, theirs):
        model.fit(X, Y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    assert int(loaded.optimizer.iterations.numpy()) == int(theirs.optimizer.iterations.numpy()) == 12
    assert int(loaded.optimizer.inner_optimizer.iterations.numpy()) == 12
    for ours_var, theirs_var in zip(loaded.trainable_variables, theirs.trainable_variables):
        np.testing.assert_array_equal(ours_var.numpy(), theirs_var.numpy())
        np.testing.assert_array_equal(loaded.optimizer.get_slot(ours_var, slot).numpy(),
                                      theirs.optimizer.get_slot(theirs_var, slot).numpy())


def test_h5_of_a_tfa_wrapper_around_a_tfa_optimizer_loads_into_ours(tmp_path, monkeypatch):
    """TFA's ``MovingAverage(LAMB)`` in an ``.h5`` file (which TFA itself cannot load back: its
    wrapper does not find the nested ``Addons>`` class) loads here and trains on as TFA did."""
    from optimizers.rules.lamb import LAMB

    theirs = _fit(tfa.optimizers.MovingAverage(tfa.optimizers.LAMB(0.01, weight_decay=0.01)), epochs=1)
    path = str(tmp_path / "tfa.h5")
    theirs.save(path)
    # TFA is imported here, so its classes own the "Addons>" names; without TFA they map to ours.
    monkeypatch.setitem(keras.utils.get_custom_objects(), "Addons>MovingAverage", optimizers.MovingAverage)
    monkeypatch.setitem(keras.utils.get_custom_objects(), "Addons>LAMB", LAMB)
    loaded = keras.models.load_model(path)
    assert type(loaded.optimizer) is optimizers.MovingAverage and type(loaded.optimizer.inner_optimizer) is LAMB
    loaded.optimizer.jit_compile = loaded.optimizer.inner_optimizer.jit_compile = False  # TFA's bits
    for model in (loaded, theirs):
        model.fit(X, Y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    assert int(loaded.optimizer.iterations.numpy()) == int(theirs.optimizer.iterations.numpy()) == 12
    # Equal to 2 units in the last place: in model.fit's tf.function, grappler's arithmetic optimizer
    # rewrites TFA's trust ratio w_norm / g_norm (g_norm a square root), with a rounding that depends
    # on the machine (equal bits on some, one ulp on others); LAMB's own parity, step by step, is
    # tests/catalogue/test_layerwise_tfa.py's.
    for ours_var, theirs_var in zip(loaded.trainable_variables, theirs.trainable_variables):
        np.testing.assert_array_max_ulp(ours_var.numpy(), theirs_var.numpy(), maxulp=2)
        np.testing.assert_array_max_ulp(loaded.optimizer.get_slot(ours_var, "average").numpy(),
                                        theirs.optimizer.get_slot(theirs_var, "average").numpy(), maxulp=2)


def test_nested_wrappers_count_every_step_where_tfa_s_innermost_counter_stays_at_zero():
    """TFA's wrappers share their counter with the optimizer they wrap, one level down only: in
    TFA's MovingAverage(Lookahead(Adam)), Adam's counter stays at 0, so its bias correction never
    advances. Here every level counts, and the weights equal TFA's Lookahead(Adam) alone (the
    moving average changes no weight)."""
    grads = _gradients(False, steps=5)
    runs = {}
    for side, ma_cls, la_cls in (("ours", optimizers.MovingAverage, optimizers.Lookahead),
                                 ("tfa", tfa.optimizers.MovingAverage, tfa.optimizers.Lookahead)):
        adam = INNER["adam"]()
        nested = ma_cls(la_cls(adam, sync_period=2))
        single = la_cls(INNER["adam"](), sync_period=2)
        runs[side] = []
        for opt in (nested, single):
            var = tf.Variable(np.ones(SHAPE, "float32"))
            for grad in grads:
                opt.apply_gradients([(grad, var)])
            runs[side].append(var.numpy())
        runs[side].append(int(adam.iterations.numpy()))
    assert runs["tfa"][2] == 0  # TFA's bug
    assert runs["ours"][2] == len(grads)
    assert not np.allclose(runs["tfa"][0], runs["tfa"][1])  # TFA's nested run is not its Lookahead's
    np.testing.assert_array_equal(runs["ours"][0], runs["tfa"][1])
    np.testing.assert_array_equal(runs["ours"][1], runs["tfa"][1])


@pytest.mark.parametrize("update_weights", [False, True])
@pytest.mark.parametrize("wrapper", ["MovingAverage", "SWA"])
def test_average_model_checkpoint_equals_tfa(wrapper, update_weights, tmp_path):
    kwargs = dict(average_decay=0.8) if wrapper == "MovingAverage" else dict(start_averaging=1, average_period=2)
    ours_opt = getattr(optimizers, wrapper, None) or SWA
    saved = {}
    for side, opt, callback_cls in [
        ("ours", ours_opt(INNER["adam"](), jit_compile=False, **kwargs), AverageModelCheckpoint),
        ("tfa", getattr(tfa.optimizers, wrapper)(INNER["adam"](), **kwargs), tfa.callbacks.AverageModelCheckpoint),
    ]:
        path = str(tmp_path / f"{side}-{{epoch}}.h5")
        model = _fit(opt, epochs=3, callbacks=[callback_cls(update_weights, path, save_weights_only=True)])
        files = []
        for epoch in (1, 2, 3):
            copy = _model()
            copy.load_weights(path.format(epoch=epoch))
            files.append(copy.get_weights())
        saved[side] = (model.get_weights(), files)
    (ours_weights, ours_files), (tfa_weights, tfa_files) = saved["ours"], saved["tfa"]
    for a, b in zip(ours_weights, tfa_weights):
        np.testing.assert_array_equal(a, b)
    for ours_file, tfa_file in zip(ours_files, tfa_files):
        for a, b in zip(ours_file, tfa_file):
            np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------------------------- MultiOptimizer
def _pairs(model, ours, clipnorm=None, family="legacy"):
    """Adam for the embedding and the first dense layer, SGD with momentum for the last layer: ours,
    or Keras's built-ins (legacy or new-style), which TFA took and ours turns into its equivalents."""
    if family == "no-equivalent":  # no class of these names here: each pair's built-in steps its own weights
        first = keras.optimizers.legacy.RMSprop(0.01, rho=0.8)
        second = keras.optimizers.legacy.Adagrad(0.1, clipnorm=clipnorm)
    elif family == "rmsprop+ours":  # one pair of each kind: ours takes Adam's rule, RMSprop steps itself
        first = optimizers.Adam(0.02, jit_compile=False) if ours else keras.optimizers.legacy.Adam(0.02)
        second = keras.optimizers.legacy.RMSprop(0.01, momentum=0.5, clipnorm=clipnorm)
    elif family == "new-style":
        first = keras.optimizers.Adam(0.02)
        second = keras.optimizers.SGD(0.05, momentum=0.9, clipnorm=clipnorm)
    elif ours:
        first = optimizers.Adam(0.02, jit_compile=False)
        second = optimizers.SGD(0.05, momentum=0.9, clipnorm=clipnorm, jit_compile=False)
    else:
        first = keras.optimizers.legacy.Adam(0.02)
        second = keras.optimizers.legacy.SGD(0.05, momentum=0.9, clipnorm=clipnorm)
    return [(first, model.layers[:2]), (second, model.layers[2])]


def _embedding_model():
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((3,), dtype="int32"), keras.layers.Embedding(6, 4), keras.layers.Dense(2),
                             keras.layers.Dense(2)])


@pytest.mark.parametrize("given", ["ours", "legacy", "new-style", "no-equivalent", "rmsprop+ours"])
@pytest.mark.parametrize("specs", [False, True], ids=["pairs", "create_optimizer_spec"])
@pytest.mark.parametrize("clipnorm", [None, 0.05])
def test_multi_optimizer_step_by_step_equals_tfa(clipnorm, specs, given):
    """An embedding (sparse gradients with repeated rows), two dense layers; with and without a
    sub-optimizer's own clipping (TFA's sub-optimizer clips its gradients, so does ours); the pairs
    given as they are or as ``optimizer_specs`` made by each side's ``create_optimizer_spec``; ours
    given its own optimizers, or the very built-in Keras optimizers TFA is given (legacy, new-style)."""
    rng = np.random.RandomState(5)
    tokens = rng.randint(0, 6, size=(8, 3)).astype("int32")
    tokens[:, 0] = 2  # a repeated row
    targets = rng.randn(8, 3, 2).astype("float32")
    runs = {}
    for side in ("ours", "tfa"):
        model = _embedding_model()
        pairs = _pairs(model, side == "ours" and given in ("ours", "rmsprop+ours"), clipnorm, given)
        cls = MultiOptimizer if side == "ours" else tfa.optimizers.MultiOptimizer
        if specs:
            opt = cls(optimizer_specs=[cls.create_optimizer_spec(*pair) for pair in pairs])
        else:
            opt = cls(pairs)
        out = []
        for step in range(4):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(tokens[step:step + 5]) - targets[step:step + 5]) ** 2)
            grads = tape.gradient(loss, model.trainable_variables)
            assert isinstance(grads[0], tf.IndexedSlices)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            out.append(model.get_weights())
        runs[side] = out
    for step, (ours, theirs) in enumerate(zip(runs["ours"], runs["tfa"]), start=1):
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(a, b, err_msg=f"step {step}", **TOLERANCE[tf.float32])


def test_multi_optimizer_create_optimizer_spec_is_tfas():
    model = _embedding_model()
    opt = keras.optimizers.legacy.Adam(0.01)
    assert list(inspect.signature(MultiOptimizer.create_optimizer_spec).parameters) == list(
        inspect.signature(tfa.optimizers.MultiOptimizer.create_optimizer_spec).parameters)
    for layers in (model.layers[0], model.layers[1:], model):
        ours = MultiOptimizer.create_optimizer_spec(opt, layers)
        assert ours == tfa.optimizers.MultiOptimizer.create_optimizer_spec(opt, layers)
        assert ours["optimizer"] is opt


def test_multi_optimizer_model_fit_equals_tfa():
    weights = []
    for side in ("ours", "tfa"):
        model = _model()
        pairs = [(optimizers.Adam(0.02) if side == "ours" else keras.optimizers.legacy.Adam(0.02), model.layers[0]),
                 (optimizers.SGD(0.05, momentum=0.9) if side == "ours" else keras.optimizers.legacy.SGD(0.05, momentum=0.9),
                  model.layers[1])]
        opt = MultiOptimizer(pairs) if side == "ours" else tfa.optimizers.MultiOptimizer(pairs)
        weights.append(_fit(opt, model=model).get_weights())
    for a, b in zip(*weights):
        np.testing.assert_allclose(a, b, **TOLERANCE[tf.float32])


def test_multi_optimizer_tfa_config_loads_and_has_every_key():
    model = _model()
    theirs = tfa.optimizers.MultiOptimizer(
        [(keras.optimizers.legacy.Adam(0.02, beta_1=0.8), model.layers[0]), (keras.optimizers.legacy.SGD(0.05), model.layers[1])])
    config = theirs.get_config()  # holds TFA's optimizer objects themselves
    ours = MultiOptimizer.from_config(config)
    assert set(config) <= set(ours.get_config())
    rules = [spec["optimizer"] for spec in ours.optimizer_specs]
    assert [type(r) for r in rules] == [optimizers.Adam, optimizers.SGD]  # the equivalents, same arguments
    assert float(rules[0].beta_1) == pytest.approx(0.8) and float(rules[1].learning_rate) == pytest.approx(0.05)
    assert [s["weights"] for s in ours.optimizer_specs] == [s["weights"] for s in config["optimizer_specs"]]


@pytest.mark.parametrize("second", ["sgd", "rmsprop"])
def test_multi_optimizer_h5_saved_with_tfa_loads_into_ours_and_trains_on_like_tfa(tmp_path, monkeypatch, second):
    """TFA's ``.h5`` keeps only the step counter (its sub-optimizers' slots are not among its weights):
    both reloads start the sub-optimizers afresh, so they train on alike; also with a built-in that
    has no class here (RMSprop), which steps its pair's weights itself."""
    model = _model()
    second = (keras.optimizers.legacy.SGD(0.05, momentum=0.9) if second == "sgd"
              else keras.optimizers.legacy.RMSprop(0.01, rho=0.8))
    opt = tfa.optimizers.MultiOptimizer([(keras.optimizers.legacy.Adam(0.02), model.layers[0]),
                                         (second, model.layers[1])])
    _fit(opt, epochs=1, model=model)
    assert [w.name for w in opt.weights] == ["iter:0"]  # TFA's whole saved optimizer state
    path = str(tmp_path / "tfa.h5")
    model.save(path)
    theirs = keras.models.load_model(path)
    monkeypatch.setitem(keras.utils.get_custom_objects(), "Addons>MultiOptimizer", MultiOptimizer)
    ours = keras.models.load_model(path)  # the saved state does not fit ours: fresh state, as TFA's reload
    assert isinstance(ours.optimizer, MultiOptimizer)
    for loaded in (ours, theirs):
        loaded.fit(X, Y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    for a, b in zip(ours.get_weights(), theirs.get_weights()):
        np.testing.assert_allclose(a, b, **TOLERANCE[tf.float32])


def test_multi_optimizer_checkpoints_keep_the_slots_tfas_lose(tmp_path):
    runs = {}
    for side in ("ours", "tfa"):
        model = _model()
        pairs = [(optimizers.Adam(0.02) if side == "ours" else keras.optimizers.legacy.Adam(0.02), model.layers)]
        opt = MultiOptimizer(pairs) if side == "ours" else tfa.optimizers.MultiOptimizer(pairs)
        _fit(opt, epochs=1, model=model)
        path = tf.train.Checkpoint(model=model, optimizer=opt).save(str(tmp_path / side))
        runs[side] = [name for name, _ in tf.train.list_variables(path) if "OPTIMIZER_SLOT" in name]
    assert runs["tfa"] == []  # TFA tracks no sub-optimizer: its checkpoints keep the step counter only
    assert len(runs["ours"]) == 8  # Adam's m and v of the 4 weights


def test_multi_optimizer_weight_in_two_pairs_tfa_applies_both_ours_refuses():
    model = _model()
    var = model.layers[1].kernel
    before = var.numpy()
    tfa.optimizers.MultiOptimizer([(keras.optimizers.legacy.SGD(1.0), model.layers[1]),
                                   (keras.optimizers.legacy.SGD(2.0), model)]).apply_gradients(
        [(tf.ones_like(v), v) for v in model.trainable_variables])
    np.testing.assert_allclose(var.numpy(), before - 3.0)  # TFA moved it by both optimizers
    with pytest.raises(ValueError, match="is in pairs 0 and 1"):
        MultiOptimizer([(optimizers.SGD(1.0), model.layers[1]), (optimizers.SGD(2.0), model)])
