"""The fault table: for every optimizer and wrapper of the conformance table, a
refused step leaves every weight, slot, average and ``iterations`` bit for bit
as it was, eagerly and inside ``tf.function``."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import optimizers
from optimizers import keras

from .optimizers_under_test import IDS, OPTIMIZERS, batches, case_model, data, hyperparameter_to_break


def _bad_index(grads, variables, row=None):
    """The embedding's sparse gradient with a row index past the table (or ``row``)."""
    out = []
    for grad, var in zip(grads, variables):
        if isinstance(grad, tf.IndexedSlices):
            bad = var.shape[0] + 3 if row is None else row
            indices = tf.tensor_scatter_nd_update(grad.indices, [[0]], tf.constant([bad], grad.indices.dtype))
            grad = tf.IndexedSlices(grad.values, indices, grad.dense_shape)
        out.append(grad)
    return out


def _sparse(change):
    """The embedding's sparse gradient remade by ``change(values, indices, dense_shape, var)``."""

    def bad(grads, variables):
        return [tf.IndexedSlices(*change(g.values, g.indices, g.dense_shape, v)) if isinstance(g, tf.IndexedSlices)
                else g for g, v in zip(grads, variables)]

    return bad


def _bad_dtype(grads, variables):
    return [tf.cast(tf.convert_to_tensor(g), tf.float64) if "dense" in v.name and "kernel" in v.name else g
            for g, v in zip(grads, variables)]


def _bad_shape(grads, variables):
    return [tf.zeros([7]) if "dense" in v.name and "kernel" in v.name else g for g, v in zip(grads, variables)]


def _callable_hyperparameter(value):
    """Make the hyperparameter of ``hyperparameter_to_break`` a callable that returns ``value``;
    ``False`` where the optimizer has no hyperparameter (``COCOB``: nothing to break)."""

    def set_it(opt):
        target = hyperparameter_to_break(opt)
        if target is None:
            return False
        setattr(*target, lambda: value)
        return True

    return set_it


def _assigned_hyperparameter(value):
    """Assign ``value`` with ``keras.backend.set_value`` (as Keras' LearningRateScheduler and
    ReduceLROnPlateau do, unseen by the attribute's check) to the hyperparameter variable of
    ``hyperparameter_to_break``, or of the optimizer a wrapper wraps (a wrapper's own hyperparameters
    are no variables a user holds); ``False`` where there is none (COCOB, Keras' own optimizers)."""

    def set_it(opt):
        target = hyperparameter_to_break(opt)
        if target is not None and isinstance(target[0], optimizers.OptimizerWrapper):
            target = hyperparameter_to_break(target[0].inner_optimizer)
        if target is None or not isinstance(getattr(*target), tf.Variable):
            return False
        keras.backend.set_value(getattr(*target), value)
        return True

    return set_it


FAULTS = {
    "sparse_index_out_of_range": (_bad_index, None, (ValueError, tf.errors.InvalidArgumentError)),
    "sparse_index_negative": (lambda g, v: _bad_index(g, v, row=-1), None, (ValueError, tf.errors.InvalidArgumentError)),
    "sparse_values_rows_not_indices": (_sparse(lambda v, i, s, var: (tf.concat([v, v[:1]], 0), i, s)), None,
                                       (ValueError, tf.errors.InvalidArgumentError)),
    "sparse_indices_rank_2": (_sparse(lambda v, i, s, var: (v, i[:, None], s)), None, ValueError),
    "sparse_indices_float": (_sparse(lambda v, i, s, var: (v, tf.cast(i, tf.float32), s)), None, TypeError),
    "sparse_dense_shape_not_variable": (_sparse(lambda v, i, s, var: (v, i, s + [93, 5])), None,
                                        (ValueError, tf.errors.InvalidArgumentError)),
    "gradient_dtype": (_bad_dtype, None, TypeError),
    "gradient_shape": (_bad_shape, None, ValueError),
    "nan_hyperparameter": (None, _callable_hyperparameter(float("nan")), (ValueError, tf.errors.InvalidArgumentError)),
    "inf_hyperparameter": (None, _callable_hyperparameter(float("inf")), (ValueError, tf.errors.InvalidArgumentError)),
    # Every hyperparameter of ours is >= 0: -1 is out of range, in a variable the optimizer did not see change.
    "hyperparameter_variable_assigned_out_of_range": (None, _assigned_hyperparameter(-1.0),
                                                      (ValueError, tf.errors.InvalidArgumentError)),
}


def _snapshot(net, opt):
    return [v.numpy().copy() for v in list(net.weights) + list(opt.variables())]


@pytest.mark.parametrize("mode", ["eager", "tf_function"])
@pytest.mark.parametrize("case", OPTIMIZERS, ids=IDS)
def test_refused_steps_change_nothing(case, mode):
    x, y = data()
    net, opt = case_model(case), case.make()

    def gradients(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(net(xb) - yb))
        return tape.gradient(loss, net.trainable_variables)

    def apply(grads):
        opt.apply_gradients(zip(grads, net.trainable_variables))

    batch = next(batches(x, y, 1))

    def good_steps():  # slots and averages exist; GradientAccumulation ends a window, its sums kept
        for _ in range(case.calls_per_step):
            apply(gradients(*batch))

    good_steps()
    for fault, (bad_grads, bad_setting, error) in FAULTS.items():
        grads = gradients(*batch)
        if bad_grads is not None:
            grads = bad_grads(grads, net.trainable_variables)
        if bad_setting is not None and not bad_setting(opt):
            continue  # no hyperparameter to set
        before = _snapshot(net, opt)  # after the setting: an assigned hyperparameter variable is state too
        step = tf.function(apply) if mode == "tf_function" else apply
        with pytest.raises(error):
            step(grads)
        after = _snapshot(net, opt)
        assert len(after) == len(before), fault
        for old, new in zip(before, after):
            np.testing.assert_array_equal(new, old, err_msg=f"{case.name}: {fault} changed the state")
        if bad_setting is not None:  # back to a sound optimizer for the next fault
            net, opt = case_model(case), case.make()
            good_steps()
