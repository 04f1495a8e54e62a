"""OptimizerV2 plumbing shared by the rule template and the wrapper base.

Both :class:`~optimizers.CustomOptimizerV2` and
:class:`~optimizers.OptimizerWrapper` derive from :class:`OptimizerBase`,
which registers every subclass, checks the ``(gradient, variable)`` pairs it
is given, keeps its state in every format (:class:`optimizers.saving.SavesState`),
and reads ``get_config`` from the constructor.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import tensorflow as tf

from optimizers import config as config_lib
from optimizers import saving
from optimizers.hyperparameters import assertion
from optimizers.keras_compat import (
    KERAS2_OPTIMIZER,
    KERAS3_HINT,
    OptimizerV2,
    compute_gradients,
    install_loss_scale_hook,
    is_keras3_object,
    optimizer_name,
)
from optimizers.updaters import undo_unscaling

__all__ = ["OptimizerBase", "after_checks", "all_finite", "check_grads_and_vars", "index_checks"]


def check_grads_and_vars(grads_and_vars: Any) -> list:
    """The ``(gradient, variable)`` pairs as a list, numpy gradients as tensors;
    refuse what no step can apply, naming the variable, before anything changes."""
    out = []
    for pair in grads_and_vars:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"`grads_and_vars` must hold (gradient, variable) pairs. Received: {pair!r}")
        grad, var = pair
        if is_keras3_object(var):
            raise TypeError(f"Received a Keras 3 variable: var={var!r}. {KERAS3_HINT}")
        if grad is None:
            out.append((grad, var))
            continue
        if not isinstance(var, tf.Variable):
            raise TypeError(f"Only tf.Variable objects can be updated. Received: var={var!r}")
        if not var.dtype.base_dtype.is_floating:
            raise ValueError(f"Variable {var.name!r} has dtype {var.dtype.name}; optimizers update floating "
                             f"point variables only. Received: var={var!r}")
        if not (tf.is_tensor(grad) or isinstance(grad, tf.IndexedSlices)):
            try:
                grad = tf.convert_to_tensor(np.asarray(grad), dtype=var.dtype.base_dtype)
            except (TypeError, ValueError):
                raise TypeError(f"The gradient of variable {var.name!r} must be a tensor, an IndexedSlices or an "
                                f"array. Received: grad={grad!r}") from None
        values = grad.values if isinstance(grad, tf.IndexedSlices) else grad
        if values.dtype.base_dtype != var.dtype.base_dtype:
            raise TypeError(f"The gradient of variable {var.name!r} has dtype {values.dtype.name}, the variable "
                            f"{var.dtype.name}. Received: grad={grad!r}")
        grad_shape = values.shape[1:] if isinstance(grad, tf.IndexedSlices) else grad.shape
        var_shape = var.shape[1:] if isinstance(grad, tf.IndexedSlices) else var.shape
        if not grad_shape.is_compatible_with(var_shape):
            raise ValueError(f"The gradient of variable {var.name!r} (shape {var.shape}) has an incompatible "
                             f"shape. Received: grad={grad!r}")
        if isinstance(grad, tf.IndexedSlices):
            _check_sparse(grad, var)
        out.append((grad, var))
    return out


def _check_sparse(grad: tf.IndexedSlices, var: tf.Variable) -> None:
    """What a sparse gradient's static shapes and dtypes can say before the step: integer indices
    of rank 1, as many rows of values as indices, a ``dense_shape`` (where it is a constant) that is
    the variable's. What only runs can say is asserted by :func:`index_checks`."""
    where = f"The sparse gradient of variable {var.name!r} (shape {var.shape})"
    indices, values = grad.indices, grad.values
    if indices.dtype not in (tf.int32, tf.int64):
        raise TypeError(f"{where} must have int32 or int64 indices. Received: grad.indices={indices!r}")
    if indices.shape.rank not in (None, 1):
        raise ValueError(f"{where} must have indices of rank 1, one row index per row of values. "
                         f"Received: grad.indices={indices!r}")
    if values.shape.rank == 0:
        raise ValueError(f"{where} must have values of rank >= 1, one row per index. Received: grad.values={values!r}")
    if not values.shape[:1].is_compatible_with(indices.shape[:1]):
        raise ValueError(f"{where} has {values.shape[0]} rows of values for {indices.shape[0]} indices. "
                         f"Received: grad.values={values!r}, grad.indices={indices!r}")
    dense_shape = None if grad.dense_shape is None else tf.get_static_value(grad.dense_shape)
    if dense_shape is not None and not var.shape.is_compatible_with(tf.TensorShape(dense_shape.tolist())):
        raise ValueError(f"{where} has a dense_shape other than the variable shape. "
                         f"Received: grad.dense_shape={dense_shape.tolist()!r}")


def index_checks(grads_and_vars: list) -> list:
    """Sparse gradients' row indices must lie in ``[0, rows)``, and (where the shapes are known only
    when the step runs) be one per row of values, with a ``dense_shape`` that is the variable's:
    checked before the step changes anything (one comparison and one reduction per sparse gradient
    and step). Eagerly an error is raised here; in a graph the returned assertions must run before
    the step's first assignment."""
    checks = []
    for grad, var in grads_and_vars:
        if isinstance(grad, tf.IndexedSlices) and not tf.executing_eagerly():
            checks.extend(_sparse_shape_checks(grad, var))
        if not isinstance(grad, tf.IndexedSlices) or var.shape.rank is None or var.shape[0] is None:
            continue
        rows = int(var.shape[0])
        indices = grad.indices
        message = (f"The sparse gradient of variable {var.name!r} has row indices outside [0, {rows}). "
                   "Received: grad.indices=")
        if tf.executing_eagerly():
            array = indices.numpy()
            if array.size and (array.min() < 0 or array.max() >= rows):
                raise ValueError(f"{message}{array.tolist()!r}")
        else:
            # As unsigned integers, negative indices come after every signed one: one comparison checks both
            # bounds (against at most 2**(bits-1), the first negative index, for a table of more rows).
            unsigned = tf.uint64 if indices.dtype == tf.int64 else tf.uint32
            bound = tf.constant(min(rows, 2 ** (8 * unsigned.size - 1)), unsigned)
            inside = tf.reduce_all(tf.cast(indices, unsigned) < bound)
            checks.append(assertion(inside, [message, indices], summarize=20))
    return checks


def _sparse_shape_checks(grad: tf.IndexedSlices, var: tf.Variable) -> list:
    """The graph assertions of what :func:`_check_sparse` could not see in the static shapes."""
    where = f"The sparse gradient of variable {var.name!r} (shape {var.shape})"
    checks = []
    if grad.indices.shape.rank is None:
        checks.append(assertion(tf.equal(tf.rank(grad.indices), 1),
                                [f"{where} must have indices of rank 1. Received: rank(grad.indices)=",
                                 tf.rank(grad.indices)]))
    if grad.values.shape[:1].num_elements() is None or grad.indices.shape[:1].num_elements() is None:
        rows, count = tf.shape(grad.values)[0], tf.size(grad.indices)
        checks.append(assertion(tf.equal(rows, count), [f"{where} must have one index per row of values. "
                                                        "Received: rows of grad.values, size of grad.indices=",
                                                        rows, count]))
    if (grad.dense_shape is not None and tf.get_static_value(grad.dense_shape) is None
            and var.shape.is_fully_defined()):
        expected = tf.constant(var.shape.as_list(), grad.dense_shape.dtype)
        same = tf.logical_and(tf.equal(tf.size(grad.dense_shape), var.shape.rank),
                              tf.reduce_all(tf.equal(tf.pad(grad.dense_shape, [[0, var.shape.rank]])[:var.shape.rank],
                                                     expected)))
        checks.append(assertion(same, [f"{where} has a dense_shape other than the variable shape. "
                                       "Received: grad.dense_shape=", grad.dense_shape]))
    return checks


def all_finite(strategy: tf.distribute.Strategy, grads_and_vars: list) -> tf.Tensor:
    """Whether every gradient of ``grads_and_vars`` holds finite values only, on every replica (in
    cross-replica context a gradient is a per-replica value: each replica's copy is tested)."""
    return tf.reduce_all([tf.reduce_all(tf.math.is_finite(g.values if isinstance(g, tf.IndexedSlices) else g))
                          for grad, _ in grads_and_vars for g in strategy.experimental_local_results(grad)])


def after_checks(grads_and_vars: list, checks: list) -> list:
    """``grads_and_vars`` with each gradient as a value that waits for ``checks`` (the graph
    assertions of :func:`index_checks`): whatever reads a gradient runs after them."""
    if not checks:
        return grads_and_vars
    out = []
    with tf.control_dependencies(checks):
        for grad, var in grads_and_vars:
            if isinstance(grad, tf.IndexedSlices):
                grad = tf.IndexedSlices(tf.identity(grad.values), tf.identity(grad.indices), grad.dense_shape)
            elif grad is not None:
                grad = tf.identity(grad)
            out.append((grad, var))
    return out


class OptimizerBase(saving.SavesState, OptimizerV2):
    """Registration, state saving, config from the signature."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Register every subclass, so ``load_model`` needs no ``custom_objects``. Its constructor
        may not take ``lr`` or ``decay``: OptimizerV2 reads both itself (``lr`` as ``learning_rate``),
        and the value would be lost from ``get_config``."""
        super().__init_subclass__(**kwargs)
        taken = [p for p in ("lr", "decay") if p in config_lib.signature_parameters(cls)]
        if taken:
            raise TypeError(f"{cls.__name__}.__init__ must not take an argument named `{taken[0]}`: OptimizerV2 "
                            f"reads `lr` as `learning_rate` and keeps its own `decay` (a learning-rate time "
                            f"decay), so get_config would lose its value. Name it otherwise. Received: "
                            f"__init__{inspect.signature(cls.__init__)}")
        config_lib.register(cls)

    @tf.autograph.experimental.do_not_convert  # plain Python: no per-variable conversion cost
    def minimize(self, loss: Any, var_list: Any, grad_loss: Any = None, name: str | None = None,
                 decay_var_list: Any = None, tape: tf.GradientTape | None = None) -> Any:
        """Minimize ``loss`` (see OptimizerV2). ``decay_var_list``, when given, goes to
        ``apply_gradients``: the variables that are weight-decayed (a wrapper passes it on to
        the inner optimizer)."""
        grads_and_vars = compute_gradients(self, loss, var_list, grad_loss, tape)
        kwargs = {} if decay_var_list is None else {"decay_var_list": decay_var_list}
        return self.apply_gradients(grads_and_vars, name=name, **kwargs)

    def get_config(self) -> dict[str, Any]:
        """Config built from the constructor's signature; no override needed."""
        config = super().get_config()
        config.update(config_lib.signature_config(self, self._config_value))
        return config

    def _config_value(self, pname: str) -> Any:
        return config_lib.attribute_value(self, pname)

    def __repr__(self) -> str:
        return f"<{type(self).__module__}.{type(self).__name__} name={optimizer_name(self)!r}: {KERAS2_OPTIMIZER}>"


install_loss_scale_hook(undo_unscaling)
