"""Conformance: every public optimizer, updater and wrapper class has an entry in the table
(``optimizers_under_test.OPTIMIZERS``), and every entry computes, step by step, what its numpy
reference (``tests/reference.py``) computes.

The reference test runs each entry for a few steps on 12 variables at once: an embedding table and
a bias, named like the model's (so the entries' ``updaters`` patterns route them; a third, the amax
statistic, for entries whose model has it), in float16, float32 and float64, each once with dense
gradients and once with sparse ones (``tf.IndexedSlices`` with repeated indices, on every variable: every
rule here has a sparse path). It does so eagerly and in ``tf.function`` with the library's own
``jit_compile`` on and off, and in ``tf.function(jit_compile=True)`` (where the library's switch
changes nothing: its compiled calls are inlined), and compares every variable and every slot
(names and values) after every step, with ``conftest.TOLERANCE`` of the variable's dtype. Gradients are bounded away from zero (|g| in
[0.5, 1.5], one sign per column within a step, so repeated rows do not cancel): float16's second
moments then stay normal numbers and its rounding within the tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import optimizers
from integration.optimizers_under_test import IDS, OPTIMIZERS, case_model
from optimizers import CustomOptimizerV2, DecoupledWeightDecayExtension, OptimizerWrapper, VariableUpdater
from optimizers.rule import UpdateRule

from conftest import TOLERANCE

# ----------------------------------------------------------------------------------- discovery
ABSTRACT = {optimizers.CustomOptimizerV2, optimizers.OptimizerWrapper, optimizers.AveragingWrapper,
            optimizers.VariableUpdater, optimizers.UpdateRule}
KINDS = (CustomOptimizerV2, OptimizerWrapper, VariableUpdater, DecoupledWeightDecayExtension)


def public_classes() -> list[type]:
    """Every concrete optimizer, wrapper and updater class that ``optimizers`` exports."""
    found = []
    for name in optimizers.__all__:
        obj = getattr(optimizers, name)
        if isinstance(obj, type) and issubclass(obj, KINDS) and obj not in ABSTRACT:
            found.append(obj)
    return found


def roles(opt, variables) -> set[tuple[type, str]]:
    """``(class, role)`` of every library object in ``opt``, found through the public API: the
    optimizer (``"optimizer"``), wrappers (``"wrapper"``), and the rule each variable is routed
    to (``"updater"``)."""
    found = set()
    while isinstance(opt, OptimizerWrapper):
        found.add((type(opt), "wrapper"))
        opt = opt.inner_optimizer
    if isinstance(opt, DecoupledWeightDecayExtension):  # a class made by extend_with_decoupled_weight_decay
        found.add((DecoupledWeightDecayExtension, "optimizer"))
    if isinstance(opt, CustomOptimizerV2):
        found.add((type(opt), "optimizer"))
        for var in variables:
            rule = opt.updater_for(var)
            if rule is not None:
                found.add((type(rule), "updater"))
    return found


def missing_cases(table) -> list[str]:
    """What ``table`` fails to cover: each public class in its role (an updater as some entry's
    ``updaters=``), and a template optimizer serving as another one's updater (routing)."""
    covered = set()
    for case in table:
        covered |= roles(case.make(), case_model(case).trainable_variables)
    missing = []
    for cls in public_classes():
        role = "updater" if issubclass(cls, VariableUpdater) else (
            "wrapper" if issubclass(cls, OptimizerWrapper) else "optimizer")
        if (cls, role) not in covered:
            missing.append(f"{cls.__name__} (as {role})")
    if not any(role == "updater" and issubclass(cls, CustomOptimizerV2) for cls, role in covered):
        missing.append("a CustomOptimizerV2 as another optimizer's updater (routing)")
    return missing


def test_discovery_finds_every_kind_of_public_class():
    found = public_classes()
    assert all(cls not in ABSTRACT for cls in found)
    for kind in KINDS:
        assert any(issubclass(cls, kind) for cls in found), kind.__name__


def test_every_public_class_has_a_case():
    missing = missing_cases(OPTIMIZERS)
    assert not missing, ("public classes without an entry in tests/integration/optimizers_under_test.py "
                         f"OPTIMIZERS: {missing}")


def test_discovery_names_what_a_smaller_table_misses():
    """The check above can fail: without the entries that use them, it names the classes."""
    table = [c for c in OPTIMIZERS if "rowwise" not in c.name and "moving_average" not in c.name
             and "_embedding" not in c.name and "multi_optimizer" not in c.name]
    missing = missing_cases(table)
    assert "RowwiseAdagrad (as updater)" in missing
    assert "MovingAverage (as wrapper)" in missing
    assert "a CustomOptimizerV2 as another optimizer's updater (routing)" in missing
    assert not any(m.startswith(("Adam ", "Frozen ")) for m in missing), missing


# ------------------------------------------------------------------------- numpy reference
# Sparse steps leave rows untouched in each (row 4 never), so the lazy/touched-rows rules show.
SHAPES = {"embedding/embeddings": (6, 3), "dense/bias": (5,)}
STATISTIC_SHAPES = {"amax/amax": (3,)}  # for entries whose model has the statistic (per channel here)
DTYPES = (tf.float16, tf.float32, tf.float64)
GRADIENTS = ("dense", "sparse")
# Repeated rows in every step, different rows across steps (modulo each variable's rows).
STEP_INDICES = [[0, 2, 0, 5], [1, 1, 3, 2], [2, 0, 2, 1]]
STEPS = len(STEP_INDICES)
# (how the step runs, the library's jit_compile)
EXECUTIONS = {
    "eager": ("eager", True),
    "eager-no_xla": ("eager", False),
    "function": ("function", True),
    "function-no_xla": ("function", False),
    "xla_function": ("xla", True),
}


def _name(dtype, kind, base):
    # Still matched by the table's patterns ("embedding", "bias", ...); optimizers_under_test.weight_names
    # lists these names too.
    return f"{dtype.name}_{kind}/{base}"


def conformance_problem(seed: int = 0, statistic: bool = False, gradients=GRADIENTS):
    """Initial values ``{name: array in its dtype}`` and per step ``{name: array or (values, indices)}``."""
    rng = np.random.default_rng(seed)
    initial, grads = {}, [{} for _ in range(STEPS)]
    shapes = {**SHAPES, **STATISTIC_SHAPES} if statistic else SHAPES
    for dtype in DTYPES:
        np_dtype = dtype.as_numpy_dtype
        for kind in gradients:
            for base, shape in shapes.items():
                name = _name(dtype, kind, base)
                initial[name] = rng.uniform(-1, 1, shape).astype(np_dtype)
                for step, indices in enumerate(STEP_INDICES):
                    if kind == "dense":
                        sign = rng.choice([-1.0, 1.0], shape)
                        grads[step][name] = (sign * rng.uniform(0.5, 1.5, shape)).astype(np_dtype)
                    else:
                        rows = np.array(indices, np.int32) % shape[0]
                        sign = rng.choice([-1.0, 1.0], shape[1:])
                        values = sign * rng.uniform(0.5, 1.5, (len(rows),) + shape[1:])
                        grads[step][name] = (values.astype(np_dtype), rows)
    return initial, grads


def _as_tf(grad, shape):
    if isinstance(grad, tuple):
        values, rows = grad
        return tf.IndexedSlices(tf.constant(values), tf.constant(rows), tf.constant(shape, tf.int32))
    return tf.constant(grad)


def actual_state(opt, variables) -> dict:
    """The same keys as ``reference.Optimizer.run``: ``(name,)`` for each variable, ``(name, owner,
    slot)`` for each slot the optimizer (``"optimizer"``) or a wrapper (``"wrapper"``) has."""
    state = {(name,): var.numpy() for name, var in variables.items()}
    owners = []
    while isinstance(opt, OptimizerWrapper):
        owners.append(("wrapper", opt))
        opt = opt.inner_optimizer
    owners.append(("optimizer", opt))
    owners = [(owner_name, owner, "") for owner_name, owner in owners]
    # A MultiOptimizer pair's own Keras optimizer (no rule) keeps its slots: named as a routed rule's.
    owners += [("optimizer", spec["optimizer"], spec["optimizer"].get_config()["name"] + "/")
               for spec in getattr(opt, "optimizer_specs", ()) if not isinstance(spec["optimizer"], UpdateRule)]
    for owner_name, owner, prefix in owners:
        for slot in owner.get_slot_names():
            for name, var in variables.items():
                try:
                    state[(name, owner_name, prefix + slot)] = owner.get_slot(var, slot).numpy()
                except KeyError:
                    pass
    return state


def _keras_sparse_momentum_has_no_xla_kernel(case) -> None:
    """The built-in optimizer inside ``case`` fails alone, the same way, under XLA with a sparse
    gradient: Keras's ``ResourceSparseApplyKerasMomentum`` has no XLA kernel (not this library's)."""
    builtin = case.make().inner_optimizer
    assert not isinstance(builtin, (CustomOptimizerV2, OptimizerWrapper)), builtin
    var = tf.Variable(tf.ones([4, 2]))
    grad = tf.IndexedSlices(tf.ones([2, 2]), tf.constant([0, 2]), tf.constant([4, 2]))

    @tf.function(jit_compile=True)
    def apply():
        builtin.apply_gradients([(grad, var)])

    with pytest.raises(tf.errors.InvalidArgumentError, match="No registered 'ResourceSparseApplyKerasMomentum'"):
        apply()


@pytest.mark.parametrize("execution", list(EXECUTIONS))
@pytest.mark.parametrize("case", OPTIMIZERS, ids=IDS)
def test_steps_equal_numpy_reference(case, execution):
    mode, jit_compile = EXECUTIONS[execution]
    gradients = GRADIENTS
    if mode == "xla" and not case.sparse_xla:
        _keras_sparse_momentum_has_no_xla_kernel(case)
        gradients = ("dense",)
    initial, np_grads = conformance_problem(statistic=case.statistic, gradients=gradients)
    variables = {name: tf.Variable(value, name=name) for name, value in initial.items()}
    names = list(variables)
    opt = case.make(jit_compile=jit_compile)

    def apply(grads):
        opt.apply_gradients(zip(grads, [variables[n] for n in names]))

    if mode != "eager":
        apply = tf.function(apply, jit_compile=(mode == "xla"))
    expected = case.reference().run(initial, np_grads)
    for step in range(STEPS):
        apply([_as_tf(np_grads[step][n], initial[n].shape) for n in names])
        got, want = actual_state(opt, variables), dict(expected[step])
        assert int(opt.iterations.numpy()) == want.pop("iterations"), f"iterations after call {step + 1}"
        assert sorted(got) == sorted(want), f"step {step + 1}: variables and slots differ from the reference"
        for key in want:
            dtype = tf.as_dtype(initial[key[0]].dtype)
            assert got[key].dtype == dtype.as_numpy_dtype, key
            np.testing.assert_allclose(got[key].astype(np.float64), want[key], **TOLERANCE[dtype],
                                       err_msg=f"{'/'.join(key)} after step {step + 1} ({execution})")


# --------------------------------------------------------------------------------- config
@pytest.mark.parametrize("case", OPTIMIZERS, ids=IDS)
def test_config_round_trip_and_the_copy_trains_identically(case):
    """``get_config -> from_config -> get_config`` is the identity, before and after a step, and
    the rebuilt optimizer computes the same bits as the original (dense and sparse gradients)."""
    initial, np_grads = conformance_problem(seed=1, statistic=case.statistic)
    initial = {n: v for n, v in initial.items() if n.startswith("float32")}
    opt = case.make()
    config = opt.get_config()
    clone = type(opt).from_config(config)
    assert type(clone) is type(opt)
    assert clone.get_config() == config
    results = []
    for optimizer in (opt, clone):
        variables = {name: tf.Variable(value, name=name) for name, value in initial.items()}
        for grads in np_grads[:2]:
            optimizer.apply_gradients([(_as_tf(grads[n], initial[n].shape), variables[n]) for n in variables])
        results.append(actual_state(optimizer, variables))
    trained_config = opt.get_config()
    assert type(opt).from_config(trained_config).get_config() == trained_config
    assert sorted(results[0]) == sorted(results[1])
    for key in results[0]:
        np.testing.assert_array_equal(results[1][key], results[0][key], err_msg="/".join(key))
