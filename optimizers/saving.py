"""Optimizer state in the ``.keras`` and SavedModel formats.

Keras 2 keeps a legacy (OptimizerV2) optimizer's state (``iterations``,
hyperparameter variables, slots) in ``.h5`` files and in ``tf.train.Checkpoint``,
but drops it in the other two formats of ``model.save``:

* ``.keras``: ``saving_lib`` visits only "Keras trackables" (layers, new-style
  optimizers, metrics, losses) and asks each for ``save_own_variables(store)`` /
  ``load_own_variables(store)``.
* SavedModel: the loader revives the saved optimizer as a ``RestoredOptimizer``
  that holds the restored slots, then compiles a *fresh* optimizer from the
  training config and throws the restored one away.

For :class:`~optimizers.CustomOptimizerV2` this module closes both gaps
(``keras_compat.install_saving_hooks`` wires it in):

* ``.keras``: the optimizer counts as a Keras trackable and writes its state
  into the store, each slot keyed by (variable name, slot name).
  ``iterations`` and hyperparameters are restored when the file is loaded;
  slots do not exist yet then (legacy optimizers create them on the first
  step), so their values wait on the optimizer and become the slots' initial
  values when :meth:`add_slot` creates them.
* SavedModel: when the loader's ``RestoredOptimizer`` creates a slot, the slot
  is recorded on the model variable it belongs to. When the fresh optimizer
  creates that slot for that variable, it starts from the restored value, and
  the first such slot also hands over ``iterations`` and the hyperparameters.

The first optimizer that creates a slot of the recorded name for that variable
takes the recorded value (after ``load_model`` that is the optimizer it
compiled); each recorded value is used once.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import tensorflow as tf

from optimizers.updaters import distributed_container

__all__ = ["save_own_variables", "load_own_variables", "initial_slot_value", "record_restored_slot"]

_NAMES = "names"  # JSON list of entries, stored as bytes; values are stored under "0", "1", ...
_RESTORED_ATTR = "_custom_optimizer_v2_restored_slots"


def _slot_index(optimizer: Any) -> dict:
    """``{(variable name, slot name): slot variable}``, filled by ``add_slot``."""
    if "_slots_by_name" not in optimizer.__dict__:
        optimizer.__dict__["_slots_by_name"] = {}
    return optimizer.__dict__["_slots_by_name"]


def save_own_variables(optimizer: Any, store: Any) -> None:
    """Write ``iterations``, hyperparameter variables and slots into ``store``."""
    entries: list = [["iterations"]]
    values = [optimizer.iterations]
    for name, hyper in sorted(optimizer._hyper.items()):
        if isinstance(hyper, tf.Variable):
            entries.append(["hyper", name])
            values.append(hyper)
    for (var_name, slot_name), slot in sorted(_slot_index(optimizer).items()):
        entries.append(["slot", var_name, slot_name])
        values.append(slot)
    store[_NAMES] = np.frombuffer(json.dumps(entries).encode(), dtype=np.uint8)
    for position, value in enumerate(values):
        store[str(position)] = np.asarray(value.numpy())


def load_own_variables(optimizer: Any, store: Any) -> None:
    """Read what :func:`save_own_variables` wrote (nothing if the file has no
    optimizer state, e.g. one written before this library kept it)."""
    if _NAMES not in store:
        return
    entries = json.loads(np.asarray(store[_NAMES]).tobytes().decode())
    pending = optimizer.__dict__.setdefault("_pending_slot_values", {})
    for position, entry in enumerate(entries):
        value = np.asarray(store[str(position)])
        if entry[0] == "iterations":
            optimizer.iterations.assign(value)
        elif entry[0] == "hyper":
            optimizer._create_hypers()
            hyper = optimizer._hyper.get(entry[1])
            if isinstance(hyper, tf.Variable):
                hyper.assign(value)
        else:
            pending[(entry[1], entry[2])] = value


def initial_slot_value(optimizer: Any, var: tf.Variable, slot_name: str) -> Any:
    """The loaded value slot ``slot_name`` of ``var`` must start from, or ``None``."""
    pending = optimizer.__dict__.get("_pending_slot_values")
    if pending:
        value = pending.pop((var.name, slot_name), None)
        if value is not None:
            return value
    restored = getattr(distributed_container(var), _RESTORED_ATTR, None)
    if not restored or slot_name not in restored:
        return None
    restored_optimizer, slot = restored.pop(slot_name)
    if not optimizer.__dict__.get("_took_restored_scalars"):
        optimizer.__dict__["_took_restored_scalars"] = True
        restored_iterations = restored_optimizer._hyper.get("iter")  # the loader sets it as a hyperparameter
        if restored_iterations is None:
            restored_iterations = restored_optimizer.iterations
        optimizer.iterations.assign(restored_iterations)
        for name, hyper in restored_optimizer._hyper.items():
            own = optimizer._hyper.get(name)
            if isinstance(own, tf.Variable) and isinstance(hyper, tf.Variable):
                own.assign(tf.cast(hyper, own.dtype))
    return slot.numpy()


def record_restored_slot(restored_optimizer: Any, var: tf.Variable, slot_name: str, slot: tf.Variable) -> None:
    """Remember, on ``var``, a slot the SavedModel loader restored for it."""
    var = distributed_container(var)
    restored = getattr(var, _RESTORED_ATTR, None)
    if restored is None:
        restored = {}
        object.__setattr__(var, _RESTORED_ATTR, restored)
    restored[slot_name] = (restored_optimizer, slot)
