"""The shipped Lookahead (the class docs/writing-a-wrapper.md teaches) vs TensorFlow Addons' Lookahead, live.

One implementation: ``optimizers/wrappers/lookahead.py``. The page shows the
class verbatim; :func:`test_the_page_shows_the_shipped_class` (both stacks)
checks that the page's ```` ```python ```` block defining ``class Lookahead``
holds the module's code (its functions and class), character for character, so what the page
teaches is what is tested here and shipped.

The parity tests (marked ``tfa``) run in the TF 2.15 + TFA 0.23 environment
(``make test-tf215``): step by step, dense and sparse gradients (a repeated
index), float32 and float64, ``sync_period`` 1 and 3 over steps that cross
several synchronizations, around the built-in Adam and around this library's
SGD with momentum. With ``jit_compile=False`` weights and slow weights equal
TFA's bit for bit; with XLA (the default) they agree to a per-dtype tolerance.

TFA's Lookahead calls the inner optimizer's private ``_resource_apply_dense(grad,
var)`` without ``apply_state``, which ``CustomOptimizerV2``'s hook requires, so
TFA cannot wrap ``optimizers.SGD``: its peer there is TFA's Lookahead around the
built-in ``SGD`` with the same arguments (``optimizers.SGD`` has Keras 2's numbers).
"""

import inspect
import os
import re
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import optimizers
from optimizers.wrappers import lookahead as lookahead_module
from optimizers.wrappers.lookahead import Lookahead

from conftest import HAS_TFA, TOLERANCE, keras

if HAS_TFA:
    import tensorflow_addons as tfa

tfa_parity = pytest.mark.tfa

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "writing-a-wrapper.md")
BLOCK = re.compile(r"^( *)```python[^\n]*\n(.*?)^\1```", re.S | re.M)  # the fences tests/test_docs.py runs


def test_the_page_shows_the_shipped_class():
    with open(PAGE) as f:
        blocks = [textwrap.dedent(code) for _, code in BLOCK.findall(f.read())]
    sources = [code for code in blocks if re.search(r"^class Lookahead\(", code, re.M)]
    assert len(sources) == 1, "docs/writing-a-wrapper.md must define `class Lookahead` in one python block"
    first_definition = re.compile(r"^(def|class) ", re.M)
    on_page = sources[0][first_definition.search(sources[0]).start():]
    with open(inspect.getsourcefile(lookahead_module)) as f:
        module = f.read()
    shipped = module[first_definition.search(module).start():]
    assert on_page.rstrip() == shipped.rstrip(), "the page's code differs from optimizers/wrappers/lookahead.py"
    # What the page runs before the definitions provides every name the module's preamble does.
    def preamble_names(source, where):
        namespace: dict = {"__name__": "docs_example_check"}
        exec(compile(source[:first_definition.search(source).start()], where, "exec"), namespace)
        return {name for name in namespace if not name.startswith("__") and name != "annotations"}

    missing = preamble_names(module, "module preamble") - preamble_names(sources[0], "page preamble")
    assert not missing, f"the page's block must define {sorted(missing)} before the class"


# inner optimizer: (ours, TFA's peer), each a function of jit_compile (used by template optimizers only)
INNER = {
    "adam": (lambda jit: keras.optimizers.legacy.Adam(0.05),
             lambda: keras.optimizers.legacy.Adam(0.05)),
    "sgd_momentum": (lambda jit: optimizers.SGD(0.1, momentum=0.9, jit_compile=jit),
                     lambda: keras.optimizers.legacy.SGD(0.1, momentum=0.9)),
}
SHAPE = (5, 3)
STEPS = 7  # sync_period=3 synchronizes after steps 3 and 6; sync_period=1 after every step


def _gradients(sparse, dtype, steps=STEPS):
    rng = np.random.RandomState(1)
    out = []
    for _ in range(steps):
        if sparse:
            values = tf.constant(rng.randn(4, SHAPE[1]), dtype)
            kernel_grad = tf.IndexedSlices(values, tf.constant([0, 3, 3, 1]), tf.constant(SHAPE, tf.int64))
        else:
            kernel_grad = tf.constant(rng.randn(*SHAPE), dtype)
        out.append((kernel_grad, tf.constant(rng.randn(SHAPE[1]), dtype)))
    return out


def _trajectory(opt, sparse, dtype, in_function=False):
    """(kernel, bias, slow kernel, slow bias) after each step."""
    kernel = tf.Variable(np.random.RandomState(0).randn(*SHAPE), dtype=dtype, name="kernel")
    bias = tf.Variable(np.random.RandomState(2).randn(SHAPE[1]), dtype=dtype, name="bias")

    def step(kernel_grad, bias_grad):
        opt.apply_gradients([(kernel_grad, kernel), (bias_grad, bias)])

    step = tf.function(step) if in_function else step
    out = []
    for kernel_grad, bias_grad in _gradients(sparse, dtype):
        step(kernel_grad, bias_grad)
        out.append([v.numpy().copy() for v in (kernel, bias, opt.get_slot(kernel, "slow"), opt.get_slot(bias, "slow"))])
    assert int(opt.iterations) == STEPS
    return out


def _both(inner, sync_period, jit_compile, sparse, dtype, in_function=False, slow_step_size=0.5):
    ours_inner, tfa_inner = INNER[inner]
    kwargs = {} if jit_compile is None else {"jit_compile": jit_compile}
    ours = Lookahead(ours_inner(jit_compile is not False), sync_period=sync_period,
                             slow_step_size=slow_step_size, **kwargs)
    theirs = tfa.optimizers.Lookahead(tfa_inner(), sync_period=sync_period, slow_step_size=slow_step_size)
    return (_trajectory(ours, sparse, dtype, in_function), _trajectory(theirs, sparse, dtype, in_function))


def _names(step):
    return [f"step {step + 1}: {name}" for name in ("kernel", "bias", "slow kernel", "slow bias")]


@tfa_parity
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("sync_period", [1, 3])
@pytest.mark.parametrize("inner", sorted(INNER))
def test_equals_tfa_bit_for_bit_without_xla(inner, sync_period, sparse, dtype):
    ours, theirs = _both(inner, sync_period, False, sparse, dtype)
    for step, (a, b) in enumerate(zip(ours, theirs)):
        for name, x, y in zip(_names(step), a, b):
            np.testing.assert_array_equal(x, y, err_msg=name)
    # The trajectory synchronized: after a sync step the fast weights equal the slow ones.
    last_sync = (STEPS // sync_period) * sync_period - 1
    np.testing.assert_array_equal(ours[last_sync][0], ours[last_sync][2])
    if sync_period > 1:
        assert not np.array_equal(ours[0][0], ours[0][2])


@tfa_parity
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("sync_period", [1, 3])
@pytest.mark.parametrize("inner", sorted(INNER))
def test_equals_tfa_with_default_xla(inner, sync_period, sparse, dtype):
    ours, theirs = _both(inner, sync_period, None, sparse, dtype)
    for step, (a, b) in enumerate(zip(ours, theirs)):
        for name, x, y in zip(_names(step), a, b):
            np.testing.assert_allclose(x, y, err_msg=name, **TOLERANCE[dtype])


@tfa_parity
@pytest.mark.parametrize("jit_compile", [False, None], ids=["plain", "xla"])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_equals_tfa_in_tf_function(sparse, jit_compile):
    ours, theirs = _both("adam", 3, jit_compile, sparse, tf.float32, in_function=True, slow_step_size=0.3)
    for step, (a, b) in enumerate(zip(ours, theirs)):
        for name, x, y in zip(_names(step), a, b):
            if jit_compile is False:
                np.testing.assert_array_equal(x, y, err_msg=name)
            else:
                np.testing.assert_allclose(x, y, err_msg=name, **TOLERANCE[tf.float32])


def _fit(opt, epochs=2):
    rng = np.random.RandomState(0)
    x, y = rng.rand(96, 8).astype("float32"), np.arange(96) % 3
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(3)])
    model.compile(opt, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, epochs=epochs, batch_size=16, shuffle=False, verbose=0)  # 12 steps: syncs after 5 and 10
    return model


@tfa_parity
@pytest.mark.parametrize("jit_compile", [False, True], ids=["plain", "xla"])
def test_model_fit_equals_tfa(jit_compile):
    ours = _fit(Lookahead(keras.optimizers.legacy.Adam(1e-2), sync_period=5, jit_compile=jit_compile))
    theirs = _fit(tfa.optimizers.Lookahead(keras.optimizers.legacy.Adam(1e-2), sync_period=5))
    for a, b in zip(ours.get_weights(), theirs.get_weights()):
        if jit_compile:
            np.testing.assert_allclose(a, b, **TOLERANCE[tf.float32])
        else:
            np.testing.assert_array_equal(a, b)


@tfa_parity
def test_every_tfa_config_key_is_present_and_tfa_configs_load():
    theirs = tfa.optimizers.Lookahead(keras.optimizers.legacy.Adam(0.01, beta_1=0.8), sync_period=4, slow_step_size=0.25)
    ours = Lookahead(keras.optimizers.legacy.Adam(0.01, beta_1=0.8), sync_period=4, slow_step_size=0.25)
    assert set(theirs.get_config()) <= set(ours.get_config())
    loaded = Lookahead.from_config(theirs.get_config())
    assert loaded.get_config() == ours.get_config()
    assert list(inspect.signature(Lookahead).parameters) == list(inspect.signature(tfa.optimizers.Lookahead).parameters)
    for name, param in inspect.signature(tfa.optimizers.Lookahead).parameters.items():
        assert inspect.signature(Lookahead).parameters[name].default == param.default, name


@tfa_parity
def test_tfa_checkpoint_and_config_restore_into_the_shipped_lookahead(tmp_path):
    grads = _gradients(False, tf.float32, steps=8)
    theirs_var = tf.Variable(np.ones(SHAPE, "float32"))
    theirs = tfa.optimizers.Lookahead(keras.optimizers.legacy.Adam(0.1), sync_period=3, slow_step_size=0.3)
    for kernel_grad, _ in grads[:4]:
        theirs.apply_gradients([(kernel_grad, theirs_var)])
    path = tf.train.Checkpoint(var=theirs_var, optimizer=theirs).save(str(tmp_path / "tfa"))

    ours = Lookahead.from_config({**theirs.get_config(), "jit_compile": False})  # TFA's config
    assert (ours.sync_period, ours.slow_step_size) == (3, 0.3)
    assert ours.inner_optimizer.get_config() == theirs._optimizer.get_config()
    ours_var = tf.Variable(np.zeros(SHAPE, "float32"))
    status = tf.train.Checkpoint(var=ours_var, optimizer=ours).restore(path)
    for kernel_grad, _ in grads[4:]:  # steps 5 to 8, a synchronization after step 6
        theirs.apply_gradients([(kernel_grad, theirs_var)])
        ours.apply_gradients([(kernel_grad, ours_var)])
        np.testing.assert_array_equal(ours_var.numpy(), theirs_var.numpy())
        np.testing.assert_array_equal(ours.get_slot(ours_var, "slow"), theirs.get_slot(theirs_var, "slow"))
    status.assert_consumed()  # every value TFA saved (step, Adam's state, the slow weights) was used
    assert int(ours.iterations) == 8


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "6"])
def test_bad_sync_period_is_refused(bad):
    with pytest.raises(ValueError, match="sync_period"):
        Lookahead(keras.optimizers.legacy.SGD(0.1), sync_period=bad)
