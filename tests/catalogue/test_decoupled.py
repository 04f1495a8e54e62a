"""``extend_with_decoupled_weight_decay`` and ``DecoupledWeightDecayExtension`` against a numpy reference.

Runs on both stacks. The reference (written here from the definition, with the rules of
tests/reference.py) decays ``theta -= wd * theta`` (the touched rows, once each, for a sparse
gradient), then applies Keras 2's Adam or SGD. Every case runs 8 steps on a kernel (dense, or
sparse with a repeated row per step and a row never touched) and a bias, eagerly and in a
tf.function, in float32 and float64, on Keras's built-in optimizers, on this library's template
optimizers and on a TFA-style subclass. Tolerance: conftest.TOLERANCE per dtype. Also: which
variables decay (``exclude_from_weight_decay``, ``decay_var_list`` in ``apply_gradients`` and
``minimize``), configs, ``model.fit`` with ``.h5``/``.keras``/SavedModel and
``tf.train.Checkpoint`` round trips, and bad input. Live TFA parity: test_decoupled_tfa.py.
"""

import inspect
import re

import numpy as np
import pytest
import tensorflow as tf

import optimizers
from catalogue.test_adamlike import SHAPE, assert_trajectories, gradients, make_variables
from catalogue.trajectories import numpy_gradient, trajectory
from optimizers.decoupled import DecoupledWeightDecayExtension, extend_with_decoupled_weight_decay
from optimizers.rules.cocob import COCOB
from optimizers.rules.lamb import LAMB

import reference
from conftest import keras

KerasAdamW = extend_with_decoupled_weight_decay(keras.optimizers.legacy.Adam)
KerasSGDW = extend_with_decoupled_weight_decay(keras.optimizers.legacy.SGD)
TemplateAdamW = extend_with_decoupled_weight_decay(optimizers.Adam)
TemplateSGDW = extend_with_decoupled_weight_decay(optimizers.SGD)


class MyAdamW(DecoupledWeightDecayExtension, keras.optimizers.legacy.Adam):
    """A TFA user's subclass, as TFA's docstring writes it."""

    def __init__(self, weight_decay, *args, **kwargs):
        super().__init__(weight_decay, *args, **kwargs)


class MyTemplateSGDW(DecoupledWeightDecayExtension, optimizers.SGD):
    pass


def _piecewise():
    return keras.optimizers.schedules.PiecewiseConstantDecay([2, 5], [0.1, 0.05, 0.025])


# name: (class, constructor arguments, rule ("adam" or "sgd"), the rule's hyperparameters)
CASES = {
    "keras_adam": (KerasAdamW, dict(weight_decay=0.05, learning_rate=0.1, beta_1=0.8, beta_2=0.95), "adam",
                   dict(beta_1=0.8, beta_2=0.95)),
    "keras_adam_amsgrad_exclude": (KerasAdamW, dict(weight_decay=0.1, learning_rate=0.05, amsgrad=True,
                                                    exclude_from_weight_decay=["bias"]), "adam", dict(amsgrad=True)),
    "keras_adam_wd_schedule": (KerasAdamW, dict(weight_decay=_piecewise, learning_rate=0.05), "adam", {}),
    "keras_sgd_nesterov": (KerasSGDW, dict(weight_decay=0.05, learning_rate=0.1, momentum=0.9, nesterov=True),
                           "sgd", dict(momentum=0.9, nesterov=True)),
    "keras_sgd_plain": (KerasSGDW, dict(weight_decay=0.05, learning_rate=0.1), "sgd", {}),
    "template_adam": (TemplateAdamW, dict(weight_decay=0.05, learning_rate=0.1, epsilon=1e-3,
                                          exclude_from_weight_decay=["bias"]), "adam", dict(epsilon=1e-3)),
    "template_sgd_momentum": (TemplateSGDW, dict(weight_decay=0.05, learning_rate=0.1, momentum=0.5), "sgd",
                              dict(momentum=0.5)),
    "subclass_adam": (MyAdamW, dict(weight_decay=0.05, learning_rate=0.1), "adam", {}),
}


def _make(case, **extra):
    cls, kwargs, _, _ = CASES[case]
    kwargs = {k: v() if callable(v) else v for k, v in kwargs.items()}  # schedules: one per optimizer
    return cls(**kwargs, **extra)


def numpy_trajectory(case, grads, dtype, decayed=None):
    """Decay (``decayed``: the variable names decayed; default: all but the excluded), then the rule."""
    _, kwargs, rule, hyper = CASES[case]
    np_dtype = dtype.as_numpy_dtype

    def as_hyper(value, _):  # hyperparameters are float32 variables, cast to the variable's dtype
        return reference.as_hyper(value, np_dtype)

    excluded = kwargs.get("exclude_from_weight_decay") or []
    wd = kwargs["weight_decay"]
    wd_at = (lambda it: float(wd()(it))) if callable(wd) else (lambda it: wd)
    params = {v.name.split(":")[0]: v.numpy().astype(np.float64) for v in make_variables(dtype)}
    slots = {name: {} for name in params}
    out = []
    for t, (g, b) in enumerate(grads, start=1):
        for name, grad in (("kernel", g), ("bias", b)):
            grad, rows = numpy_gradient(grad, SHAPE)
            is_decayed = (name in decayed) if decayed is not None else not any(re.search(p, name) for p in excluded)
            param = params[name]
            if is_decayed:
                param = reference.decay(param, as_hyper(wd_at(t - 1), dtype), rows)
            lr = as_hyper(kwargs["learning_rate"], dtype)
            if rule == "adam":
                params[name], slots[name] = reference.adam(
                    param, grad, slots[name], lr, beta_1=as_hyper(hyper.get("beta_1", 0.9), dtype),
                    beta_2=as_hyper(hyper.get("beta_2", 0.999), dtype),
                    epsilon=reference.in_dtype(hyper.get("epsilon", 1e-7), np_dtype),
                    amsgrad=hyper.get("amsgrad", False), step=t)
            elif hyper.get("momentum"):
                sgd_hyper = dict(lr=lr, momentum=as_hyper(hyper["momentum"], dtype),
                                 nesterov=hyper.get("nesterov", False))
                params[name], slots[name] = (reference.on_rows(reference.sgd, rows, param, grad, slots[name],
                                                               **sgd_hyper) if rows is not None
                                             else reference.sgd(param, grad, slots[name], **sgd_hyper))
            else:
                params[name] = param - lr * grad
        out.append((params["kernel"], params["bias"]))
    return out


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_equals_numpy_reference(case, sparse, dtype, mode):
    grads = gradients(sparse, dtype)
    ours = trajectory(_make(case), grads, make_variables(dtype), mode)
    assert ours[-1][0].dtype == dtype.as_numpy_dtype
    assert_trajectories(ours, numpy_trajectory(case, grads, dtype), dtype, "numpy")


@pytest.mark.parametrize("which", ["kernel", "none"])
@pytest.mark.parametrize("case", ["keras_adam_amsgrad_exclude", "keras_sgd_plain", "template_adam"])
def test_decay_var_list_in_apply_gradients_decides_alone(case, which):
    """It overrides ``exclude_from_weight_decay``; an empty list decays nothing (TFA: everything)."""
    grads = gradients(True, tf.float32)
    optimizer, (kernel, bias) = _make(case), make_variables(tf.float32)
    decay_var_list = {"kernel": [kernel], "none": []}[which]
    ours = trajectory(optimizer, grads, (kernel, bias), "function", decay_var_list=decay_var_list)
    decayed = {"kernel": {"kernel"}, "none": set()}[which]
    assert_trajectories(ours, numpy_trajectory(case, grads, tf.float32, decayed), tf.float32, "numpy")


@pytest.mark.parametrize("case", ["keras_adam", "template_sgd_momentum", "subclass_adam"])
def test_decay_var_list_in_minimize_is_honoured(case):
    grads = gradients(False, tf.float32)
    kernel, bias = make_variables(tf.float32)
    optimizer = _make(case)
    out = []
    for g, b in grads:
        loss = lambda g=g, b=b: tf.reduce_sum(g * kernel) + tf.reduce_sum(b * bias)  # noqa: E731
        optimizer.minimize(loss, [kernel, bias], decay_var_list=[bias])
        out.append((kernel.numpy().copy(), bias.numpy().copy()))
    assert_trajectories(out, numpy_trajectory(case, grads, tf.float32, {"bias"}), tf.float32, "numpy")


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("case", ["keras_adam", "template_sgd_momentum", "subclass_adam"])
def test_exclude_from_weight_decay_set_before_the_first_step_acts_as_the_argument(case, mode):
    """TFA's public attribute: the step, get_config and the optimizer rebuilt from it all exclude the bias."""
    optimizer = _make(case)
    assert optimizer.exclude_from_weight_decay is None
    optimizer.exclude_from_weight_decay = ["bias"]
    assert optimizer.exclude_from_weight_decay == ("bias",)
    config = optimizer.get_config()
    assert config["exclude_from_weight_decay"] == ["bias"]
    grads = gradients(False, tf.float32)
    expected = numpy_trajectory(case, grads, tf.float32, decayed={"kernel"})
    for opt in (optimizer, type(optimizer).from_config(config)):
        assert_trajectories(trajectory(opt, grads, make_variables(tf.float32), mode), expected, tf.float32, "numpy")
    optimizer.exclude_from_weight_decay = ["bias"]  # the same list: accepted
    with pytest.raises(ValueError, match=rf"`exclude_from_weight_decay` cannot change once {type(optimizer).__name__} "
                                         r"has taken a step.*Received: exclude_from_weight_decay=None"):
        optimizer.exclude_from_weight_decay = None
    assert optimizer.get_config()["exclude_from_weight_decay"] == ["bias"]


# ------------------------------------------------------------------------------------ classes
def test_factory_makes_one_registered_class_per_base():
    assert extend_with_decoupled_weight_decay(keras.optimizers.legacy.Adam) is KerasAdamW
    assert KerasAdamW.__name__ == "AdamWithDecoupledWeightDecay"
    assert TemplateAdamW.__name__ == "optimizers_AdamWithDecoupledWeightDecay"
    for cls in (KerasAdamW, KerasSGDW, TemplateAdamW, TemplateSGDW):
        assert issubclass(cls, DecoupledWeightDecayExtension)
        assert keras.utils.get_registered_object(keras.utils.get_registered_name(cls)) is cls
    for name in ("RMSprop", "Adagrad", "Adadelta", "Adamax", "Nadam", "Ftrl"):  # made on import, for load_model
        cls = keras.utils.get_registered_object(f"optimizers>{name}WithDecoupledWeightDecay")
        assert issubclass(cls, getattr(keras.optimizers.legacy, name))
    assert keras.utils.get_registered_name(MyAdamW) == "catalogue>MyAdamW"


def test_constructor_takes_weight_decay_then_the_base_arguments():
    opt = KerasAdamW(0.01, 0.2, 0.5, amsgrad=True)
    config = opt.get_config()
    assert [config[k] for k in ("weight_decay", "learning_rate", "beta_1", "amsgrad")] == pytest.approx(
        [0.01, 0.2, 0.5, True])
    params = list(inspect.signature(TemplateAdamW.__init__).parameters)
    assert params[:3] == ["self", "weight_decay", "learning_rate"] and "exclude_from_weight_decay" in params
    opt = TemplateAdamW(0.01, 0.2, scale_weight_decay_by_lr=True)  # the template's keywords work too
    assert opt.get_config()["scale_weight_decay_by_lr"] is True


@pytest.mark.parametrize("case", sorted(CASES))
def test_config_round_trip_and_same_steps(case):
    optimizer = _make(case)
    config = optimizer.get_config()
    assert {"weight_decay", "exclude_from_weight_decay", "learning_rate", "name"} <= set(config)
    rebuilt = type(optimizer).from_config(config)
    assert rebuilt.get_config() == config
    grads = gradients(True, tf.float32)
    ours_run = trajectory(rebuilt, grads, make_variables(tf.float32))
    for ours, theirs in zip(ours_run, trajectory(_make(case), grads, make_variables(tf.float32))):
        np.testing.assert_array_equal(ours[0], theirs[0])
        np.testing.assert_array_equal(ours[1], theirs[1])


def test_config_with_schedules_round_trips():
    for cls in (KerasAdamW, TemplateAdamW, MyAdamW):
        opt = cls(weight_decay=_piecewise(), learning_rate=keras.optimizers.schedules.ExponentialDecay(0.1, 2, 0.5))
        config = opt.get_config()
        assert isinstance(config["weight_decay"], dict)
        assert cls.from_config(config).get_config() == config


# ------------------------------------------------------------------------------------ saving
def _data():
    rng = np.random.default_rng(0)
    return rng.integers(0, 6, size=(16, 2)).astype("int32"), rng.normal(size=(16, 1)).astype("float32")


def _model():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((2,), dtype="int32")
    hidden = keras.layers.Flatten()(keras.layers.Embedding(6, 3, name="embedding")(inputs))  # sparse gradients
    return keras.Model(inputs, keras.layers.Dense(1, name="dense")(hidden))


SAVED = {"keras_adam": lambda: KerasAdamW(0.01, 0.05, exclude_from_weight_decay=["bias"]),
         "keras_sgd": lambda: KerasSGDW(0.01, 0.05, momentum=0.9),
         "template_adam": lambda: TemplateAdamW(0.01, 0.05, exclude_from_weight_decay=["bias"]),
         "keras_adam_exclude_set": lambda: _excluding(KerasAdamW(0.01, 0.05), ["bias"])}


def _excluding(optimizer, patterns):
    """``optimizer`` after ``optimizer.exclude_from_weight_decay = patterns`` (TFA's attribute)."""
    optimizer.exclude_from_weight_decay = patterns
    return optimizer


def _state(net):
    """``iterations`` and every slot, keyed by variable and slot name (independent of name scopes and order)."""
    opt = net.optimizer
    state = {"iterations": opt.iterations.numpy()}
    for slot_name in opt.get_slot_names():
        for var in net.trainable_variables:
            state[f"{var.name}/{slot_name}"] = opt.get_slot(var, slot_name).numpy()
    return state


def _assert_same_training(net, other):
    for a, b in zip(net.get_weights(), other.get_weights()):
        np.testing.assert_array_equal(a, b)
    expected, got = _state(net), _state(other)
    assert sorted(expected) == sorted(got)
    for name, value in expected.items():
        np.testing.assert_array_equal(got[name], value, err_msg=name)


@pytest.mark.parametrize("filename", ["model.h5", "model.keras", pytest.param("saved_model", marks=pytest.mark.slow)])
@pytest.mark.parametrize("case", sorted(SAVED))
def test_model_fit_save_load_and_training_continues_identically(case, filename, tmp_path):
    x, y = _data()
    net = _model()
    net.compile(optimizer=SAVED[case](), loss="mse")
    net.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0)
    path = str(tmp_path / filename)
    net.save(path)
    loaded = keras.models.load_model(path)  # no custom_objects
    assert type(loaded.optimizer) is type(net.optimizer)
    assert loaded.optimizer.get_config() == net.optimizer.get_config()
    net.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    loaded.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    assert int(loaded.optimizer.iterations.numpy()) == int(net.optimizer.iterations.numpy()) == 12
    _assert_same_training(net, loaded)


@pytest.mark.parametrize("case", sorted(SAVED))
def test_checkpoint_restores_and_resumes(case, tmp_path):
    x, y = _data()
    net = _model()
    net.compile(optimizer=SAVED[case](), loss="mse")
    net.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    path = tf.train.Checkpoint(model=net, optimizer=net.optimizer).save(str(tmp_path / "ckpt"))
    other = _model()
    other.compile(optimizer=SAVED[case](), loss="mse")
    tf.train.Checkpoint(model=other, optimizer=other.optimizer).restore(path)
    net.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    other.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
    assert int(other.optimizer.iterations.numpy()) == 8
    _assert_same_training(net, other)


# ------------------------------------------------------------------------------------ bad input
def _after(base):
    class Wrong(base, DecoupledWeightDecayExtension):
        pass


class _Alone(DecoupledWeightDecayExtension):
    pass


BAD = [
    (lambda: KerasAdamW(-0.1), ValueError, r"`weight_decay` must be in \[0.0, inf\]. Received: weight_decay=-0.1"),
    (lambda: TemplateAdamW("0.1"), TypeError, r"Received: weight_decay='0.1'"),
    (lambda: KerasSGDW(float("nan")), ValueError, r"`weight_decay` must be a finite number. Received: weight_decay=nan"),
    (lambda: KerasAdamW(0.1, exclude_from_weight_decay="bias"), TypeError,
     r"`exclude_from_weight_decay` must be a list of regex strings. Received: exclude_from_weight_decay='bias'"),
    (lambda: KerasAdamW(0.1, exclude_from_weight_decay=["("]), ValueError, r"invalid regex"),
    (lambda: KerasAdamW(0.1, nonsense=1), TypeError, r"nonsense"),
    (lambda: extend_with_decoupled_weight_decay(keras.optimizers.legacy.Adam()), TypeError,
     r"`base_optimizer` must be a Keras 2 \(OptimizerV2\) optimizer class.*Received: base_optimizer=<"),
    (lambda: extend_with_decoupled_weight_decay(int), TypeError, r"Received: base_optimizer=<class 'int'>"),
    (lambda: extend_with_decoupled_weight_decay(KerasAdamW), TypeError, r"already has decoupled weight decay"),
    (lambda: extend_with_decoupled_weight_decay(optimizers.AdamW), TypeError,
     r"AdamW already takes a `weight_decay` argument.*Received: base_optimizer=<class"),
    (lambda: extend_with_decoupled_weight_decay(LAMB), TypeError, r"LAMB already takes a `weight_decay` argument"),
    (lambda: extend_with_decoupled_weight_decay(COCOB), TypeError, r"COCOB applies weight decay 'none'"),
    (lambda: extend_with_decoupled_weight_decay(optimizers.MovingAverage), TypeError,
     r"MovingAverage wraps another optimizer"),
    (lambda: _after(keras.optimizers.legacy.Adam), TypeError,
     r"DecoupledWeightDecayExtension must come before the optimizer class.*with Adam first"),
    (lambda: _Alone(0.1), TypeError, r"_Alone has no optimizer rule"),
]


@pytest.mark.parametrize("index", range(len(BAD)))
def test_bad_input_is_refused_naming_the_argument(index):
    make, error, message = BAD[index]
    with pytest.raises(error, match=message):
        make()


@pytest.mark.parametrize("cls", [KerasAdamW, TemplateAdamW], ids=lambda c: c.__name__)
def test_bad_assignment_leaves_weight_decay_unchanged(cls):
    opt = cls(0.1)
    with pytest.raises(ValueError, match=r"Received: weight_decay=-1.0"):
        opt.weight_decay = -1.0
    assert float(opt.get_config()["weight_decay"]) == pytest.approx(0.1)
