"""Models and checkpoints written by TensorFlow Addons load and resume here, without TFA.

The fixtures in tests/fixtures/ were written by TFA 0.23 on TF 2.15
(tests/fixtures/make_tfa_fixtures.py), together with the weights TFA itself
produced when it continued training from the saved state. Here, on the default
stack where TFA cannot even be imported, the same files are loaded with this
library and training continues: every step must equal TFA's continuation
(float32 tolerance from conftest.TOLERANCE).
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import optimizers

from conftest import TOLERANCE, keras

pytestmark = pytest.mark.default_stack_only  # with TFA imported, its own classes own the "Addons>" names

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
CASES = {"adamw": optimizers.AdamW, "sgdw": optimizers.SGDW, "sgdw_plain": optimizers.SGDW}


def _record(case):
    with open(os.path.join(FIXTURES, f"tfa_{case}.json")) as f:
        record = json.load(f)
    x, y = (np.array(record[k], dtype="float32") for k in ("x", "y"))
    return record, x, y


def _assert_trajectory(seen, expected):
    assert len(seen) == len(expected) > 0
    for step, (ours, theirs) in enumerate(zip(seen, expected), start=1):
        for got, want in zip(ours, theirs):
            np.testing.assert_allclose(got, np.array(want, dtype="float32"), err_msg=f"continued step {step}",
                                       **TOLERANCE[tf.float32])


def test_tfa_names_are_registered_without_tfa():
    with pytest.raises(ImportError):
        import tensorflow_addons  # noqa: F401
    objects = keras.utils.get_custom_objects()
    assert objects["Addons>AdamW"] is optimizers.AdamW
    assert objects["Addons>SGDW"] is optimizers.SGDW


@pytest.mark.parametrize("case", sorted(CASES))
def test_h5_model_resumes_like_tfa(case):
    record, x, y = _record(case)
    model = keras.models.load_model(os.path.join(FIXTURES, f"tfa_{case}.h5"))
    optimizer = model.optimizer
    assert type(optimizer) is CASES[case]
    assert int(optimizer.iterations.numpy()) == record["saved_iterations"]
    for got, want in zip(model.get_weights(), record["saved_weights"]):
        np.testing.assert_array_equal(got, np.array(want, dtype="float32"))
    config = optimizer.get_config()
    for key, value in record["kwargs"].items():
        if isinstance(value, dict):  # a schedule
            schedule = optimizer._get_hyper(key)
            assert isinstance(schedule, getattr(keras.optimizers.schedules, value["class_name"]))
            assert schedule.get_config().items() >= value["config"].items()
        elif isinstance(value, float):
            assert config[key] == pytest.approx(value, rel=1e-6)
        else:
            assert config[key] == value, key
    assert sorted(optimizer.get_slot_names()) == record["slot_names"]  # TFA's slots, no more, no fewer

    seen = []
    record_weights = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda *_: seen.append([w.copy() for w in model.get_weights()]))
    model.fit(x, y, batch_size=record["batch_size"], epochs=record["continue_epochs"], shuffle=False, verbose=0,
              callbacks=[record_weights])
    _assert_trajectory(seen, record["expected_fit"])


@pytest.mark.parametrize("case", sorted(CASES))
def test_checkpoint_resumes_like_tfa(case):
    record, x, y = _record(case)
    model = keras.Sequential([keras.layers.Input((3,)), keras.layers.Dense(2, name="dense")])
    kwargs = {k: keras.optimizers.schedules.deserialize(v) if isinstance(v, dict) else v
              for k, v in record["kwargs"].items()}
    optimizer = CASES[case](**kwargs)
    status = tf.train.Checkpoint(model=model, optimizer=optimizer).read(os.path.join(FIXTURES, record["checkpoint"]))
    for got, want in zip(model.get_weights(), record["saved_weights"]):
        np.testing.assert_array_equal(got, np.array(want, dtype="float32"))

    seen, batch = [], record["batch_size"]
    for _ in range(record["continue_epochs"]):
        for start in range(0, len(x), batch):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(x[start:start + batch]) - y[start:start + batch]))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            seen.append(model.get_weights())
    status.assert_consumed()  # every value TFA saved (slots, hyperparameters, iterations) was restored
    assert int(optimizer.iterations.numpy()) == record["saved_iterations"] + len(seen)
    _assert_trajectory(seen, record["expected_loop"])
