"""Models and checkpoints written by TensorFlow Addons load and resume here, without TFA.

The fixtures in tests/fixtures/ were written by TFA 0.23 on TF 2.15
(tests/fixtures/make_tfa_fixtures.py), one case (or more) per optimizer TFA
registers, with non-default hyperparameters, together with the weights TFA
itself produced when it continued training from its own files (``model.fit``
after TFA's ``load_model`` of the ``.h5`` file; a ``GradientTape`` loop after
restoring the checkpoint into a fresh TFA optimizer). Here, on the default
stack where TFA cannot even be imported, the same files are loaded with this
library and training continues: every step must equal TFA's continuation
(float32 tolerance from conftest.TOLERANCE).

TFA's wrappers wrap ``tf.keras.optimizers.legacy`` optimizers (TFA 0.23 refuses
the others on TF 2.15: ``TypeError: optimizer is not an object of
tf.keras.optimizers.legacy.Optimizer``); ours wrap the same Keras 2 classes.
TFA's ``MultiOptimizer`` keeps only its step counter in both files (its
sub-optimizers are not tracked), so TFA's own resume starts the sub-optimizers
afresh: see :func:`test_multi_optimizer_files_hold_only_tfa_s_step_counter`.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import optimizers
from optimizers.rules.adabelief import AdaBelief
from optimizers.rules.cocob import COCOB
from optimizers.rules.conditional_gradient import ConditionalGradient
from optimizers.rules.lamb import LAMB
from optimizers.rules.lazy_adam import LazyAdam
from optimizers.rules.novograd import NovoGrad
from optimizers.rules.proximal_adagrad import ProximalAdagrad
from optimizers.rules.rectified_adam import RectifiedAdam
from optimizers.rules.yogi import Yogi
from optimizers.wrappers.lookahead import Lookahead
from optimizers.wrappers.multi_optimizer import MultiOptimizer
from optimizers.wrappers.swa import SWA

from conftest import TOLERANCE, keras

pytestmark = pytest.mark.default_stack_only  # with TFA imported, its own classes own the "Addons>" names

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
CASES = {  # fixture case -> the class that must load it
    "adamw": optimizers.AdamW, "sgdw": optimizers.SGDW, "sgdw_plain": optimizers.SGDW,
    "lazy_adam": LazyAdam, "yogi": Yogi, "adabelief": AdaBelief, "rectified_adam": RectifiedAdam, "lamb": LAMB,
    "novograd": NovoGrad, "cocob": COCOB, "conditional_gradient": ConditionalGradient,
    "proximal_adagrad": ProximalAdagrad, "lookahead": Lookahead, "swa": SWA, "multi_optimizer": MultiOptimizer,
}
# Every optimizer TFA 0.23 registers (``tfa.optimizers``' ``register_keras_serializable(package="Addons")``),
# listed live in the TF 2.15 env by test_every_tfa_registered_optimizer_name_is_in_tfa_names below.
TFA_REGISTERED = ["AdaBelief", "AdamW", "COCOB", "ConditionalGradient", "LAMB", "LazyAdam", "Lookahead",
                  "MovingAverage", "MultiOptimizer", "NovoGrad", "ProximalAdagrad", "RectifiedAdam", "SGDW", "SWA",
                  "Yogi"]

# A slot TFA creates and never uses (always zeros): not created here; TFA's files still load.
UNUSED_TFA_SLOTS = {"conditional_gradient": "conditional_gradient"}
# Constructor constants TFA also checkpoints as variables; here they are constants (not variables).
TFA_CONSTANT_VARIABLES = {"cocob": ["alpha"], "novograd": ["grad_averaging"]}


def _record(case):
    with open(os.path.join(FIXTURES, f"tfa_{case}.json")) as f:
        record = json.load(f)
    x, y = (np.array(record[k], dtype="float32") for k in ("x", "y"))
    return record, x, y


def _model(units):
    layers = [keras.layers.Dense(n, name=f"dense_{i}" if i else "dense") for i, n in enumerate(units)]
    return keras.Sequential([keras.layers.Input((3,))] + layers)


def _is_inner(value):
    return isinstance(value, dict) and value.get("class_name") in ("Adam", "SGD")


def _ours(record, model):
    """This library's optimizer built with the arguments TFA's was built with."""
    def build(key, value):
        if _is_inner(value):  # a wrapper's inner optimizer: the same Keras 2 class TFA wrapped
            return getattr(keras.optimizers.legacy, value["class_name"])(**value["config"])
        if isinstance(value, dict):
            return keras.optimizers.schedules.deserialize(value)
        if key == "optimizers_and_layers":  # MultiOptimizer's pairs take rules: this library's Adam and SGD
            return [(getattr(optimizers, inner["class_name"])(**inner["config"]), model.layers[index])
                    for inner, index in value]
        return value

    return CASES[record["case"]](**{k: build(k, v) for k, v in record["kwargs"].items()})


def _assert_trajectory(seen, expected):
    assert len(seen) == len(expected) > 0
    for step, (ours, theirs) in enumerate(zip(seen, expected), start=1):
        for got, want in zip(ours, theirs):
            np.testing.assert_allclose(got, np.array(want, dtype="float32"), err_msg=f"continued step {step}",
                                       **TOLERANCE[tf.float32])


def _assert_config(optimizer, kwargs):
    config = optimizer.get_config()
    for key, value in kwargs.items():
        if _is_inner(value):
            inner = optimizer.inner_optimizer
            assert type(inner).__name__ == value["class_name"], key
            _assert_config(inner, value["config"])
        elif key == "optimizers_and_layers":
            specs = optimizer.optimizer_specs
            assert [type(spec["optimizer"]).__name__ for spec in specs] == [inner["class_name"] for inner, _ in value]
            for spec, (inner, _) in zip(specs, value):
                _assert_config(spec["optimizer"], inner["config"])
        elif isinstance(value, dict):  # a schedule
            schedule = optimizer._get_hyper(key)
            assert isinstance(schedule, getattr(keras.optimizers.schedules, value["class_name"]))
            assert schedule.get_config().items() >= value["config"].items()
        elif isinstance(value, float):
            assert config[key] == pytest.approx(value, rel=1e-6), key
        else:
            assert config[key] == value, key


def _short(weight_name):
    """``"kernel/m:0"`` of ``"AdaBelief/dense/kernel/m:0"``: the variable and slot, not the prefixes."""
    return "/".join(weight_name.split("/")[-2:])


def _continue_with_loop(model, optimizer, x, y, record):
    seen, batch = [], record["batch_size"]
    for _ in range(record["continue_epochs"]):
        for start in range(0, len(x), batch):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x[start:start + batch]) - y[start:start + batch]))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            seen.append(model.get_weights())
    return seen


def test_tfa_names_are_registered_without_tfa():
    with pytest.raises(ImportError):
        import tensorflow_addons  # noqa: F401
    objects = keras.utils.get_custom_objects()
    schedule = keras.optimizers.schedules.LearningRateSchedule  # TFA's cyclical schedules: tests/ of the schedules
    assert sorted(k for k, cls in optimizers.TFA_NAMES.items() if not issubclass(cls, schedule)) == [
        f"Addons>{name}" for name in TFA_REGISTERED]
    for name in TFA_REGISTERED:
        cls = objects[f"Addons>{name}"]
        assert cls is optimizers.TFA_NAMES[f"Addons>{name}"] and cls.__name__ == name
    assert set(CASES.values()) | {optimizers.MovingAverage} == {objects[f"Addons>{name}"] for name in TFA_REGISTERED}


@pytest.mark.parametrize("case", sorted(CASES))
def test_h5_model_resumes_like_tfa(case):
    record, x, y = _record(case)
    record["case"] = case
    model = keras.models.load_model(os.path.join(FIXTURES, f"tfa_{case}.h5"))  # no custom_objects, no TFA
    optimizer = model.optimizer
    assert type(optimizer) is CASES[case]
    for got, want in zip(model.get_weights(), record["saved_weights"]):
        np.testing.assert_array_equal(got, np.array(want, dtype="float32"))
    _assert_config(optimizer, record["kwargs"])
    if case != "multi_optimizer":  # see test_multi_optimizer_files_hold_only_tfa_s_step_counter
        assert int(optimizer.iterations.numpy()) == record["saved_iterations"]
        # TFA's optimizer weights, in TFA's order (what makes the .h5 state load): "<variable>/<slot>".
        unused = UNUSED_TFA_SLOTS.get(case)
        assert optimizer.weights[0] is optimizer.iterations
        assert [_short(w.name) for w in optimizer.weights[1:]] == [
            _short(n) for n in record["optimizer_weights"][1:] if not n.endswith(f"/{unused}:0")]
        slot_names = optimizer.get_slot_names() if case not in ("lookahead", "swa") else ["slow" if case == "lookahead"
                                                                                           else "average"]
        assert sorted(slot_names) == [n for n in record["slot_names"] if n != unused]  # TFA's slots, no more

    seen = []
    record_weights = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda *_: seen.append([w.copy() for w in model.get_weights()]))
    model.fit(x, y, batch_size=record["batch_size"], epochs=record["continue_epochs"], shuffle=False, verbose=0,
              callbacks=[record_weights])
    _assert_trajectory(seen, record["expected_fit"])


@pytest.mark.parametrize("case", sorted(set(CASES) - {"multi_optimizer"}))
def test_checkpoint_resumes_like_tfa(case, tmp_path):
    """TFA's ``COCOB`` and ``NovoGrad`` also checkpoint a constructor constant as a variable (``alpha``,
    ``grad_averaging``); here those are constants of the class built with the same arguments, so those
    two values are checked against ours, not read. Every other value TFA saved is restored."""
    record, x, y = _record(case)
    record["case"] = case
    path = os.path.join(FIXTURES, record["checkpoint"])
    model = _model(record["units"])
    optimizer = _ours(record, model)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    status = checkpoint.read(path)
    for got, want in zip(model.get_weights(), record["saved_weights"]):
        np.testing.assert_array_equal(got, np.array(want, dtype="float32"))

    seen = _continue_with_loop(model, optimizer, x, y, record)
    constants = TFA_CONSTANT_VARIABLES.get(case, [])
    if constants:
        status.assert_existing_objects_matched()
        reader = tf.train.load_checkpoint(path)
        for name in constants:
            assert reader.get_tensor(f"optimizer/{name}/.ATTRIBUTES/VARIABLE_VALUE") == optimizer.get_config()[name]
    else:
        status.assert_consumed()  # every value TFA saved (slots, hyperparameters, iterations) was restored
    theirs = {key for key, _ in tf.train.list_variables(path)}
    ours = {key for key, _ in tf.train.list_variables(checkpoint.write(str(tmp_path / "ours")))}
    assert theirs - ours == {f"optimizer/{name}/.ATTRIBUTES/VARIABLE_VALUE" for name in constants}
    assert ours - theirs == set()  # and ours saves nothing TFA did not
    assert int(optimizer.iterations.numpy()) == record["saved_iterations"] + len(seen)
    _assert_trajectory(seen, record["expected_loop"])


def test_multi_optimizer_files_hold_only_tfa_s_step_counter():
    """TFA's ``MultiOptimizer`` tracks none of its sub-optimizers: its ``.h5`` file and its checkpoint hold
    the step counter ``iter`` only, and TFA's own resume starts each sub-optimizer afresh (its moments
    at zero, its own step count at 0: Adam's bias correction restarts). Loaded here:

    * the ``.h5`` model (test_h5_model_resumes_like_tfa above): the saved state does not fit ours, which
      holds the sub-optimizers' slots, so Keras starts the optimizer afresh ("Error in loading the saved
      optimizer state"), ``iterations`` at 0, and ``fit`` continues exactly as TFA's;
    * the checkpoint: restoring TFA's ``iter`` alone into ours would make the fresh Adam moments
      bias-corrected as at step 3, so TFA's continuation is reached by restoring the model only (as the
      migration page says); ours then checkpoints its whole state.
    """
    record, x, y = _record("multi_optimizer")
    record["case"] = "multi_optimizer"
    assert record["optimizer_weights"] == ["iter:0"] and record["slot_names"] == []
    path = os.path.join(FIXTURES, record["checkpoint"])
    assert [key for key, _ in tf.train.list_variables(path) if key.startswith("optimizer")] == [
        "optimizer/iter/.ATTRIBUTES/VARIABLE_VALUE"]
    assert all("OPTIMIZER_SLOT" not in key for key, _ in tf.train.list_variables(path))

    loaded = keras.models.load_model(os.path.join(FIXTURES, "tfa_multi_optimizer.h5"))
    assert int(loaded.optimizer.iterations.numpy()) == 0

    model = _model(record["units"])
    optimizer = _ours(record, model)
    tf.train.Checkpoint(model=model).read(path).expect_partial()
    for got, want in zip(model.get_weights(), record["saved_weights"]):
        np.testing.assert_array_equal(got, np.array(want, dtype="float32"))
    seen = _continue_with_loop(model, optimizer, x, y, record)
    assert int(optimizer.iterations.numpy()) == len(seen)
    _assert_trajectory(seen, record["expected_loop"])
