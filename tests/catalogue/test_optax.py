"""Adan, AdEMAMix, schedule-free AdamW and SGD (their evaluation points too) step by step
against optax, run in its own environment (``.venv-optax``, jax and optax from PyPI: ``make test``
builds it and names its Python in ``OPTAX_PYTHON``).

20 fixed dense gradients (optax has no sparse step; the sparse steps follow the numpy references
of test_adamlike.py), float32 and float64. Hyperparameters reach a step of ours rounded to
float32 (Keras keeps them so), and optax is given the same rounded values. optax's ``adan``
(0.2.8) weighs the gradient's change by ``1 - b2`` where the algorithm (and the authors' code)
has ``b2``, so the two agree at ``beta_2=0.5`` only: the case below; the algorithm itself is
checked against the numpy reference at the default ``0.92``.
"""

import json
import os
import subprocess

import numpy as np
import pytest
import tensorflow as tf

import optimizers

pytestmark = pytest.mark.default_stack_only  # the optax environment is built beside the default stack

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS, SHAPE = 20, (4, 3)
TOLERANCE = {"float32": dict(rtol=1e-5, atol=1e-6), "float64": dict(rtol=1e-10, atol=1e-12)}


def f32(value):
    return float(np.float32(value))


# name: (our class, its arguments, optax's function in optax_steps.py, its arguments)
CASES = {
    "adan": ("Adan", dict(learning_rate=0.01, beta_1=0.9, beta_2=0.5, beta_3=0.95, epsilon=1e-6),
             "adan", dict(learning_rate=0.01, beta_1=0.9, beta_2=0.5, beta_3=0.95, epsilon=1e-6)),
    "ademamix_warmups_wd": (
        "AdEMAMix", dict(learning_rate=0.01, beta_1=0.8, beta_2=0.95, beta_3=0.99, alpha=4.0, alpha_warmup=8,
                         beta_3_warmup=12, epsilon=1e-6, weight_decay=0.1),
        "ademamix", dict(learning_rate=0.01, beta_1=0.8, beta_2=0.95, beta_3=0.99, alpha=4.0, alpha_warmup=8,
                         beta_3_warmup=12, epsilon=1e-6, weight_decay=0.1)),
    "ademamix_defaults": ("AdEMAMix", dict(learning_rate=0.001), "ademamix",
                          dict(learning_rate=0.001, beta_1=0.9, beta_2=0.999, beta_3=0.9999, alpha=5.0,
                               alpha_warmup=1, beta_3_warmup=1, epsilon=1e-8, weight_decay=0.0)),
    "schedule_free_adamw_warmup_wd": (
        "ScheduleFreeAdamW", dict(learning_rate=0.01, warmup_steps=5, beta_1=0.9, beta_2=0.99, epsilon=1e-6,
                                  weight_decay=0.1, weight_lr_power=2.0),
        "schedule_free_adamw", dict(learning_rate=0.01, warmup_steps=5, beta_1=0.9, beta_2=0.99, epsilon=1e-6,
                                    weight_decay=0.1, weight_lr_power=2.0)),
    "schedule_free_adamw_defaults": (
        "ScheduleFreeAdamW", dict(), "schedule_free_adamw",
        dict(learning_rate=0.0025, warmup_steps=None, beta_1=0.9, beta_2=0.999, epsilon=1e-8, weight_decay=0.0,
             weight_lr_power=2.0)),
    "schedule_free_sgd_wd": (
        "ScheduleFreeSGD", dict(learning_rate=0.1, beta_1=0.8, weight_decay=0.01, weight_lr_power=1.0),
        "schedule_free_sgd", dict(learning_rate=0.1, warmup_steps=None, beta_1=0.8, weight_decay=0.01,
                                  weight_lr_power=1.0)),
}
# optax's warm-up schedule computes in float32 for float64 parameters too (optax 0.2.8's linear_schedule):
# during its warm-up, the float64 rates differ from ours (float64) by float32's rounding.
FLOAT32_SCHEDULE = ("schedule_free_adamw_warmup_wd",)


def optax_python():
    python = os.environ.get("OPTAX_PYTHON")
    if not python:
        pytest.skip("OPTAX_PYTHON is not set: `make test` builds .venv-optax (jax, optax) and sets it")
    assert os.path.exists(python), f"OPTAX_PYTHON={python!r} does not exist: run `make test`, which builds it"
    return python


def optax_trajectory(name, kwargs, params, grads, dtype):
    constants = ("epsilon", "alpha_warmup", "beta_3_warmup", "warmup_steps")  # used as given, not rounded
    kwargs = {k: (v if k in constants or v is None else f32(v)) for k, v in kwargs.items()}
    request = dict(optimizer=name, kwargs=kwargs, dtype=dtype, params=params.tolist(),
                   grads=[g.tolist() for g in grads])
    done = subprocess.run([optax_python(), os.path.join(HERE, "optax_steps.py")], input=json.dumps(request),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["optax"] == "0.2.8", result
    return [np.asarray(p) for p in result["trajectory"]], [np.asarray(p) for p in result["evaluation"]]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_equals_optax_step_by_step(case, dtype):
    ours_name, ours_kwargs, theirs_name, theirs_kwargs = CASES[case]
    rng = np.random.RandomState(7)
    params = rng.randn(*SHAPE).astype(dtype)
    grads = [rng.randn(*SHAPE).astype(dtype) for _ in range(STEPS)]
    grads[3][0] = 0.0  # a zero gradient row: the epsilon and the slow moments alone
    expected, evaluation = optax_trajectory(theirs_name, theirs_kwargs, params, grads, dtype)
    var = tf.Variable(params)
    optimizer = getattr(optimizers, ours_name)(**ours_kwargs)
    tolerance = TOLERANCE["float32" if case in FLOAT32_SCHEDULE else dtype]
    for step, (grad, want) in enumerate(zip(grads, expected), start=1):
        optimizer.apply_gradients([(tf.constant(grad), var)])
        np.testing.assert_allclose(var.numpy(), want, err_msg=f"step {step}", **tolerance)
        if evaluation:  # schedule-free's evaluation point, optax's schedule_free_eval_params
            np.testing.assert_allclose(optimizer.average_of(var).numpy(), evaluation[step - 1],
                                       err_msg=f"evaluation point, step {step}", **tolerance)


# optax.contrib.sam, its adversarial step a normalized SGD step of size rho: with opaque_mode=True each
# call is one SAM step (the gradient at w + e taken inside); with opaque_mode=False and sync_period=2 the
# odd calls move to w + e and the even ones take the outer step from w. optax normalizes by the norm
# alone, which is sam_gradients with epsilon=0.
SAM_MODES = {"opaque": dict(opaque_mode=True, calls_per_step=1), "transparent": dict(opaque_mode=False, calls_per_step=2)}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", sorted(SAM_MODES))
def test_sam_equals_optax_step_by_step(mode, dtype):
    rng = np.random.RandomState(3)
    x, y = rng.randn(10, 3).astype(dtype), rng.randn(10, 1).astype(dtype)
    params = [rng.randn(3, 1).astype(dtype), rng.randn(1).astype(dtype)]
    rho, steps, calls = 0.05, 8, SAM_MODES[mode]["calls_per_step"]
    request = dict(optimizer="sam", dtype=dtype, params=[p.tolist() for p in params], steps=steps * calls,
                   problem=dict(x=x.tolist(), y=y.tolist()),
                   kwargs=dict(learning_rate=f32(0.1), momentum=f32(0.9), rho=rho, sync_period=2,
                               opaque_mode=SAM_MODES[mode]["opaque_mode"]))
    done = subprocess.run([optax_python(), os.path.join(HERE, "optax_steps.py")], input=json.dumps(request),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert result["optax"] == "0.2.8", result
    expected = result["trajectory"][calls - 1::calls]  # the parameters after each outer step

    w, b = tf.Variable(params[0]), tf.Variable(params[1])
    optimizer = optimizers.SGD(learning_rate=0.1, momentum=0.9)
    for step, want in enumerate(expected, start=1):
        _, grads = optimizers.sam_gradients(lambda: tf.reduce_mean((x @ w + b - y) ** 2), [w, b], rho=rho,
                                            epsilon=0.0)
        optimizer.apply_gradients(zip(grads, [w, b]))
        for var, theirs in zip((w, b), want):
            np.testing.assert_allclose(var.numpy(), np.asarray(theirs), err_msg=f"step {step}", **TOLERANCE[dtype])
