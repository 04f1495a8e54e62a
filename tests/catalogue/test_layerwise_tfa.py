"""LAMB, NovoGrad, COCOB, ConditionalGradient and ProximalAdagrad vs TensorFlow
Addons 0.23, run live (TF 2.15 + TFA env: ``make test-tf215``).

Ours and ``tfa.optimizers.<Name>`` get the same constructor arguments, variables
and gradients and are compared after every step. With ``jit_compile=False`` the
numbers are TFA's bit for bit, eager and in a tf.function, with one exception:
in a tf.function TFA's LAMB graph is rewritten by TensorFlow's graph optimizer
(its numbers then differ from its own eager ones in the last bit), while ours
stays equal to TFA's eager numbers bit for bit (pinned below); that run is
compared with conftest.TOLERANCE. With XLA (the default) every comparison uses
conftest.TOLERANCE. Where TFA has a bug that ours fixes, a test pins TFA's
behaviour and ours.
"""

import contextlib
import os

import numpy as np
import pytest
import tensorflow as tf

from catalogue import ref_layerwise as ref
from catalogue.test_layerwise import (
    CASES,
    SHAPE,
    assert_trajectories,
    build,
    gradients,
    make_variables,
    numpy_trajectory,
    reference_rule,
)
from catalogue.trajectories import trajectory
from optimizers.rules.cocob import COCOB
from optimizers.rules.conditional_gradient import ConditionalGradient
from optimizers.rules.lamb import LAMB
from optimizers.rules.novograd import NovoGrad
from optimizers.rules.proximal_adagrad import ProximalAdagrad

from conftest import HAS_TFA, TOLERANCE, keras

if HAS_TFA:
    import tensorflow_addons as tfa

pytestmark = pytest.mark.tfa

OURS = {cls.__name__: cls for cls in (LAMB, NovoGrad, COCOB, ConditionalGradient, ProximalAdagrad)}

# name: (class name, constructor arguments TFA takes too, sparse gradients supported by TFA)
SCENARIOS = {
    "lamb": ("LAMB", CASES["lamb"][1], True),
    "lamb_split": ("LAMB", CASES["lamb_split"][1], True),
    "novograd_decay": ("NovoGrad", CASES["novograd_decay"][1], True),
    "novograd_averaging": ("NovoGrad", dict(learning_rate=0.1, beta_1=0.8, beta_2=0.5, epsilon=1e-3,
                                            weight_decay=0.05, grad_averaging=True), True),
    "novograd_amsgrad": ("NovoGrad", dict(learning_rate=0.1, beta_2=0.5, amsgrad=True), False),  # TFA: dense only
    "cocob": ("COCOB", CASES["cocob"][1], False),
    "cocob_alpha": ("COCOB", CASES["cocob_alpha"][1], False),
    "cg_fro": ("ConditionalGradient", CASES["cg_fro"][1], True),
    "cg_nuclear": ("ConditionalGradient", dict(learning_rate=0.8, lambda_=2.0, ord="nuclear"), True),
    "proximal_adagrad_l1_l2": ("ProximalAdagrad", CASES["proximal_adagrad_l1_l2"][1], True),
    "proximal_adagrad_l2": ("ProximalAdagrad", CASES["proximal_adagrad_l2"][1], True),
}
SCENARIO_SPARSE = [(s, sparse) for s in sorted(SCENARIOS) for sparse in (False, True) if SCENARIOS[s][2] or not sparse]
RUNS = {"eager-plain": ("eager", False), "function-plain": ("function", False), "function-xla": ("function", True)}


def _pair(scenario, **ours_extra):
    kind, kwargs, _ = SCENARIOS[scenario]
    return OURS[kind](**kwargs, **ours_extra), getattr(tfa.optimizers, kind)(**kwargs)


@pytest.mark.parametrize("run", sorted(RUNS))
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("scenario,sparse", SCENARIO_SPARSE,
                         ids=[f"{s}-{'sparse' if sp else 'dense'}" for s, sp in SCENARIO_SPARSE])
def test_step_by_step_equal_to_tfa(scenario, sparse, dtype, run):
    mode, jit_compile = RUNS[run]
    ours, theirs = _pair(scenario, jit_compile=jit_compile)
    grads = gradients(sparse, dtype)
    exact = not jit_compile and not (SCENARIOS[scenario][0] == "LAMB" and mode == "function")
    assert_trajectories(trajectory(ours, grads, make_variables(dtype), mode),
                        trajectory(theirs, grads, make_variables(dtype), mode), dtype, "TFA", exact=exact)


@pytest.mark.parametrize("scenario", ["lamb", "lamb_split"])
def test_lamb_in_a_tf_function_equals_tfa_eager_bit_for_bit(scenario):
    ours, theirs = _pair(scenario, jit_compile=False)
    grads = gradients(False, tf.float32)
    assert_trajectories(trajectory(ours, grads, make_variables(tf.float32), "function"),
                        trajectory(theirs, grads, make_variables(tf.float32)), tf.float32, "TFA eager", exact=True)


SPLIT_STEP = ["lamb", "lamb_split", "novograd_decay", "novograd_averaging", "novograd_amsgrad", "cg_fro"]


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("scenario", SPLIT_STEP)
def test_a_variable_compiled_alone_equals_tfa(scenario, mode):
    """A kernel over ``BATCH_MAX_ELEMENTS`` takes the rule's split step (LAMB: compiled direction,
    TensorFlow's norms and gradient-descent kernel; NovoGrad: TensorFlow's norm, compiled scaling,
    the fused momentum kernel; ConditionalGradient: TensorFlow's norm, the rest compiled); its bias
    the compiled step in chunks."""
    shape = (600, 500)
    rng = np.random.RandomState(1)
    grads = [(tf.constant(rng.randn(*shape).astype("float32")), tf.constant(rng.randn(shape[1]).astype("float32")))
             for _ in range(4)]

    def variables():
        init = np.random.RandomState(0)
        return [tf.Variable(init.randn(*shape).astype("float32"), name="dense/kernel"),
                tf.Variable(init.randn(shape[1]).astype("float32"), name="dense/bias")]

    ours, theirs = _pair(scenario)
    assert_trajectories(trajectory(ours, grads, variables(), mode), trajectory(theirs, grads, variables()),
                        tf.float32, "TFA")


def _model(kind):
    inputs = keras.Input((2,), dtype="int32")
    if kind == "COCOB":  # TFA's COCOB has no sparse path: no embedding
        x = keras.layers.Flatten()(keras.layers.Lambda(lambda i: tf.one_hot(i, 10))(inputs))
    else:  # the embedding's gradients are IndexedSlices
        x = keras.layers.Flatten()(keras.layers.Embedding(10, 4)(inputs))
    x = keras.layers.Dense(3, activation="tanh", name="hidden")(x)
    model = keras.Model(inputs, keras.layers.Dense(1, name="out")(x))
    model.set_weights([np.full(w.shape, 0.1 * (i + 1), "float32") * (-1) ** i for i, w in enumerate(model.weights)])
    return model


FIT_KWARGS = {
    "LAMB": dict(learning_rate=0.01, weight_decay=0.01, exclude_from_weight_decay=["bias"]),
    "NovoGrad": dict(learning_rate=0.01, weight_decay=0.01, grad_averaging=True),
    "COCOB": dict(alpha=20.0),
    "ConditionalGradient": dict(learning_rate=0.9, lambda_=0.5),
    "ProximalAdagrad": dict(learning_rate=0.1, l1_regularization_strength=0.001, l2_regularization_strength=0.01),
}


@pytest.mark.parametrize("kind", sorted(FIT_KWARGS))
def test_model_fit_equal_to_tfa(kind):
    rng = np.random.RandomState(0)
    x = rng.randint(0, 10, (32, 2)).astype("int32")
    y = (x.sum(axis=1, keepdims=True) / 10.0).astype("float32")
    weights = []
    for optimizer in (OURS[kind](**FIT_KWARGS[kind]), getattr(tfa.optimizers, kind)(**FIT_KWARGS[kind])):
        model = _model(kind)
        model.compile(optimizer=optimizer, loss="mse")
        model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
        weights.append(model.get_weights())
    for ours, theirs in zip(*weights):
        np.testing.assert_allclose(ours, theirs, **TOLERANCE[tf.float32])


CONFIG_KWARGS = {
    "LAMB": dict(learning_rate=keras.optimizers.schedules.ExponentialDecay(0.1, 2, 0.5), weight_decay=0.01,
                 exclude_from_weight_decay=["bias"], epsilon=1e-5, beta_1=0.85, clipnorm=1.0),
    "NovoGrad": dict(learning_rate=0.05, weight_decay=0.01, grad_averaging=True, beta_2=0.9, clipvalue=1.0),
    "COCOB": dict(alpha=50),
    "ConditionalGradient": dict(learning_rate=0.9, lambda_=0.1, ord="nuclear", epsilon=1e-6),
    "ProximalAdagrad": dict(learning_rate=0.2, initial_accumulator_value=0.3, l1_regularization_strength=0.01,
                            l2_regularization_strength=0.02),
}
# After training, these TFA configs hold numpy scalars (alpha, l1/l2, grad_averaging) that TFA's own
# typechecked constructors refuse.
TFA_FROM_CONFIG_FAILS_AFTER_TRAINING = {"COCOB", "NovoGrad", "ProximalAdagrad"}


@pytest.mark.parametrize("kind", sorted(CONFIG_KWARGS))
def test_config_holds_tfa_keys_and_tfa_config_builds_ours(kind):
    tfa_cls = getattr(tfa.optimizers, kind)
    assert set(tfa_cls(**({"learning_rate": 0.5} if kind == "ConditionalGradient" else {})).get_config()) <= set(
        OURS[kind](**({"learning_rate": 0.5} if kind == "ConditionalGradient" else {})).get_config())
    theirs = tfa_cls(**CONFIG_KWARGS[kind])
    tfa_config = theirs.get_config()
    ours = OURS[kind].from_config(dict(tfa_config))
    assert set(tfa_config) <= set(ours.get_config())
    sparse = kind != "COCOB"
    grads = gradients(sparse, tf.float32)
    assert_trajectories(trajectory(ours, grads, make_variables(tf.float32)),
                        trajectory(theirs, grads, make_variables(tf.float32)), tf.float32, "TFA")

    # After training: TFA's config (numpy scalars now) still builds ours, which continues as TFA does.
    trained_config = theirs.get_config()
    if kind in TFA_FROM_CONFIG_FAILS_AFTER_TRAINING:
        with pytest.raises(TypeError, match="must be"):
            tfa_cls.from_config(dict(trained_config))
    ours = OURS[kind].from_config(dict(trained_config))
    more = gradients(sparse, tf.float32, seed=1)
    assert_trajectories(trajectory(ours, more, make_variables(tf.float32)),
                        trajectory(tfa_cls(**CONFIG_KWARGS[kind]), more, make_variables(tf.float32)),
                        tf.float32, "a fresh TFA optimizer")


@pytest.mark.parametrize("kind", sorted(CONFIG_KWARGS))
def test_tfa_checkpoint_restores_into_ours(kind, tmp_path):
    grads = gradients(False, tf.float32)
    tfa_kernel, _ = make_variables(tf.float32)
    theirs = getattr(tfa.optimizers, kind)(**CONFIG_KWARGS[kind])
    for g, _ in grads[:2]:
        theirs.apply_gradients([(g, tfa_kernel)])
    path = tf.train.Checkpoint(var=tfa_kernel, optimizer=theirs).save(os.path.join(tmp_path, "tfa"))
    kernel = tf.Variable(tf.zeros(SHAPE))
    ours = OURS[kind](jit_compile=False, **CONFIG_KWARGS[kind])
    status = tf.train.Checkpoint(var=kernel, optimizer=ours).restore(path)
    for g, _ in grads[2:]:
        theirs.apply_gradients([(g, tfa_kernel)])
        ours.apply_gradients([(g, kernel)])
    assert int(ours.iterations.numpy()) == len(grads)
    np.testing.assert_array_equal(kernel.numpy(), tfa_kernel.numpy())
    if kind in ("LAMB", "NovoGrad"):
        status.assert_existing_objects_matched()


@pytest.mark.parametrize("kind", sorted(CONFIG_KWARGS))
def test_model_saved_with_tfa_loads_into_ours_and_trains_on_equally(kind, tmp_path, monkeypatch):
    rng = np.random.RandomState(0)
    x = rng.randn(16, 3).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    tfa_model = keras.Sequential([keras.layers.Dense(4, input_shape=(3,)), keras.layers.Dense(1)])
    tfa_model.compile(getattr(tfa.optimizers, kind)(**CONFIG_KWARGS[kind]), loss="mse")
    tfa_model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    path = str(tmp_path / "tfa.h5")
    tfa_model.save(path)
    # Without TFA imported, optimizers/tfa_compat.py would map TFA's name to ours: set the registry as it is then.
    monkeypatch.setitem(keras.utils.get_custom_objects(), f"Addons>{kind}", OURS[kind])
    loaded = keras.models.load_model(path)
    assert type(loaded.optimizer) is OURS[kind]
    if kind == "ConditionalGradient":  # TFA's file holds its unused `conditional_gradient` slots, ours has none:
        assert len(loaded.optimizer.get_weights()) == 1  # Keras starts the optimizer afresh (state: iterations only)
    else:
        assert len(loaded.optimizer.get_weights()) == len(tfa_model.optimizer.get_weights())
        for ours, theirs in zip(loaded.optimizer.get_weights(), tfa_model.optimizer.get_weights()):
            np.testing.assert_array_equal(ours, theirs)
    loaded.optimizer.jit_compile = False
    for model in (loaded, tfa_model):
        model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    for ours, theirs in zip(loaded.get_weights(), tfa_model.get_weights()):
        np.testing.assert_allclose(ours, theirs, **TOLERANCE[tf.float32])


@pytest.mark.parametrize("kind", ["COCOB", "ConditionalGradient", "ProximalAdagrad"])
def test_tfa_checkpoint_matches_every_object_of_ours(kind, tmp_path):
    kernel, _ = make_variables(tf.float32)
    theirs = getattr(tfa.optimizers, kind)(**CONFIG_KWARGS[kind])
    theirs.apply_gradients([(tf.ones(SHAPE), kernel)])
    path = tf.train.Checkpoint(var=kernel, optimizer=theirs).save(os.path.join(tmp_path, "tfa"))
    ours = OURS[kind](**CONFIG_KWARGS[kind])
    status = tf.train.Checkpoint(var=kernel, optimizer=ours).restore(path)
    ours.apply_gradients([(tf.ones(SHAPE), kernel)])
    status.assert_existing_objects_matched()


# ----------------------------------------------------------------- TFA's bugs, pinned with ours


def test_lamb_tfa_argument_conventions_are_tfa_s():
    for kwargs in (dict(exclude_from_weight_decay=["bias"]), dict(weight_decay_rate=0.25)):
        with pytest.warns(DeprecationWarning) if "weight_decay_rate" in kwargs else contextlib.nullcontext():
            ours = LAMB(**kwargs).get_config()
        tfa_config = tfa.optimizers.LAMB(**kwargs).get_config()
        assert {k: ours[k] for k in tfa_config} == tfa_config


def test_proximal_adagrad_config_keeps_legacy_decay_where_tfa_drops_it():
    kwargs = dict(learning_rate=0.2, decay=0.1)
    assert "decay" not in tfa.optimizers.ProximalAdagrad(**kwargs).get_config()  # TFA's reload loses the decay
    grads = gradients(True, tf.float32)
    expected = trajectory(tfa.optimizers.ProximalAdagrad(**kwargs), grads, make_variables(tf.float32))
    rebuilt = ProximalAdagrad.from_config(ProximalAdagrad(**kwargs).get_config())
    assert_trajectories(trajectory(rebuilt, grads, make_variables(tf.float32)), expected, tf.float32,
                        "TFA with decay")


def test_lamb_epsilon_zero_where_tfa_raises():
    grads = gradients(False, tf.float32)
    with pytest.raises(AttributeError, match="backend_config"):
        tfa.optimizers.LAMB(epsilon=0.0)
    assert_trajectories(trajectory(build("lamb_epsilon_zero"), grads, make_variables(tf.float32)),
                        numpy_trajectory(reference_rule("lamb_epsilon_zero"), grads, tf.float32), tf.float32, "numpy")


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=lambda d: d.name)
def test_novograd_amsgrad_with_sparse_gradients_where_tfa_raises(dtype):
    kwargs = SCENARIOS["novograd_amsgrad"][1]
    grads = gradients(True, dtype)
    with pytest.raises(tf.errors.InvalidArgumentError):
        trajectory(tfa.optimizers.NovoGrad(**kwargs), grads, make_variables(dtype))
    assert_trajectories(trajectory(NovoGrad(**kwargs), grads, make_variables(dtype)),
                        numpy_trajectory(ref.NovoGrad(**kwargs), grads, dtype), dtype, "numpy")


def test_novograd_get_config_keeps_amsgrad_where_tfa_drops_it():
    assert "amsgrad" not in tfa.optimizers.NovoGrad(amsgrad=True).get_config()
    assert NovoGrad(amsgrad=True).get_config()["amsgrad"] is True
    # A TFA config says nothing of AMSGrad: ours builds what TFA itself rebuilds from it.
    rebuilt = NovoGrad.from_config(tfa.optimizers.NovoGrad(amsgrad=True).get_config())
    assert rebuilt.amsgrad is tfa.optimizers.NovoGrad.from_config(
        tfa.optimizers.NovoGrad(amsgrad=True).get_config()).amsgrad is False


def test_cocob_sparse_where_tfa_raises():
    grads = gradients(True, tf.float32)
    with pytest.raises(NotImplementedError):
        trajectory(tfa.optimizers.COCOB(), grads, make_variables(tf.float32))
    assert_trajectories(trajectory(COCOB(), grads, make_variables(tf.float32)),
                        numpy_trajectory(reference_rule("cocob"), grads, tf.float32), tf.float32, "numpy")


def test_conditional_gradient_schedule_where_tfa_raises():
    with pytest.raises(ValueError, match="ExponentialDecay"):
        trajectory(tfa.optimizers.ConditionalGradient(keras.optimizers.schedules.ExponentialDecay(0.9, 2, 0.5)),
                   gradients(False, tf.float32), make_variables(tf.float32))
    grads = gradients(False, tf.float32)
    assert_trajectories(trajectory(build("cg_fro_schedule"), grads, make_variables(tf.float32)),
                        numpy_trajectory(reference_rule("cg_fro_schedule"), grads, tf.float32), tf.float32, "numpy")


def test_conditional_gradient_applies_legacy_decay_where_tfa_ignores_it():
    grads = gradients(False, tf.float32)
    kwargs = dict(learning_rate=0.8, lambda_=0.5)
    tfa_decayed = trajectory(tfa.optimizers.ConditionalGradient(decay=0.5, **kwargs), grads, make_variables(tf.float32))
    tfa_plain = trajectory(tfa.optimizers.ConditionalGradient(**kwargs), grads, make_variables(tf.float32))
    assert_trajectories(tfa_decayed, tfa_plain, tf.float32, "TFA without decay", exact=True)  # TFA's bug
    ours = trajectory(ConditionalGradient(decay=0.5, **kwargs), grads, make_variables(tf.float32))
    assert_trajectories(ours, numpy_trajectory(ref.ConditionalGradient(decay=0.5, **kwargs), grads, tf.float32),
                        tf.float32, "numpy, decay applied")
    assert not np.allclose(ours[-1][0], tfa_plain[-1][0])


def test_conditional_gradient_nuclear_on_a_rank_3_kernel_where_tfa_raises():
    kernel = tf.Variable(np.random.RandomState(0).randn(2, 3, 4).astype("float32"))
    grad = tf.constant(np.random.RandomState(1).randn(2, 3, 4).astype("float32"))
    with pytest.raises(tf.errors.InvalidArgumentError):
        tfa.optimizers.ConditionalGradient(0.5, ord="nuclear").apply_gradients([(grad, kernel)])
    expected = ref.ConditionalGradient(0.5, ord="nuclear").step(kernel.numpy().astype(np.float64), grad.numpy().astype(np.float64), None,
                                                                  {}, 0, np.float32, "kernel")[0]
    ConditionalGradient(0.5, ord="nuclear").apply_gradients([(grad, kernel)])
    np.testing.assert_allclose(kernel.numpy(), expected, **TOLERANCE[tf.float32])
