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
(``keras_compat.install_saving_hooks`` wires it in, and the two hooks installed
at the end of this module):

* ``.keras``: the optimizer counts as a Keras trackable and writes its state
  into the store, each slot keyed by (variable name, slot name); a name two
  variables share (layers of the same name in nested models) is told apart by
  the order in which its variables first get slots (the second is
  ``"<name>#1"``, see :func:`saved_name`), the model's order on both sides.
  An optimizer shared by two models writes into each model's file the slots
  of that model's variables only, numbered among themselves (the saved model
  is known from ``keras_compat.saving_root``).
  ``iterations`` and hyperparameters are restored when the file is loaded;
  slots do not exist yet then (legacy optimizers create them on the first
  step), so their values wait on the optimizer and become the slots' initial
  values when :meth:`add_slot` creates them.
* SavedModel: the loader sets its ``RestoredOptimizer`` as the model's
  ``optimizer`` before it compiles the fresh one; at that moment
  (``keras_compat.install_restored_optimizer_link``) the fresh optimizer takes
  ``iterations``, the hyperparameter variables and, under a
  ``LossScaleOptimizer``, the loss scale, whether or not it has slots. When the
  ``RestoredOptimizer`` creates a slot, the slot is recorded on the model
  variable it belongs to; when the fresh optimizer creates that slot for that
  variable, it starts from the restored value.

The first optimizer that creates a slot of the recorded name for that variable
takes the recorded value (after ``load_model`` that is the optimizer it
compiled); each recorded value is used once.

A wrapper (:class:`~optimizers.OptimizerWrapper`) whose inner optimizer cannot
save itself (a built-in Keras optimizer) passes it as ``inner``: its slots and
hyperparameters are saved with the wrapper's state, and written into the inner
slots when the wrapper has created the weights of a step.

A ``LossScaleOptimizer`` around one of ours also keeps its loss scale and
good-step counter: in ``.h5`` (last in its ``weights``), ``.keras``
(``save_own_variables``) and SavedModel (taken at load, above); its config
builds our inner optimizer, not the built-in of the same name
(``keras_compat.install_loss_scale_saving``).

Files that hold no optimizer state (saved before the first step, or before this
library kept it) load as they always did.
"""

from __future__ import annotations

import json
import warnings
import weakref
from typing import Any

import numpy as np
import tensorflow as tf

from optimizers.config import deserialize_optimizer
from optimizers.keras_compat import (
    create_hypers,
    hyper_dict,
    install_loss_scale_saving,
    install_restored_optimizer_link,
    install_saving_hooks,
    is_loss_scale_optimizer,
    loss_scale_variables,
    restored_child,
    saving_root,
)
from optimizers.tf_compat import distributed_container, variable_key

__all__ = ["SavesState", "keeps_state", "save_own_variables", "load_own_variables", "initial_slot_value",
           "has_loaded_slot", "record_restored_slot", "restore_inner_slots", "saved_name", "slot_index",
           "link_restored_optimizer"]

_NAMES = "names"  # JSON list of entries, stored as bytes; values are stored under "0", "1", ...
# The slots the SavedModel loader restored, per model variable (its variable_key): held beside the
# variables, never on them, and dropped when the variable is.
_RESTORED: dict[Any, dict] = {}


class SavesState:
    """The part of an optimizer of this library that keeps its state in every format: slots
    created from their loaded values, and the ``.keras`` store (``save_own_variables`` /
    ``load_own_variables``). Mixed in before ``OptimizerV2``."""

    def add_slot(self, var: tf.Variable, slot_name: str, initializer: Any = "zeros", shape: Any = None) -> Any:
        """OptimizerV2's ``add_slot``; a slot loaded from ``.keras`` or a SavedModel starts from
        its loaded value."""
        loaded = initial_slot_value(self, var, slot_name)
        if loaded is not None:
            expected = tf.TensorShape(var.shape if shape is None else shape)
            if not expected.is_compatible_with(np.shape(loaded)):
                raise ValueError(f"The loaded slot {slot_name!r} of variable {var.name!r} has shape "
                                 f"{list(np.shape(loaded))}, the variable needs {expected.as_list()}: the file does "
                                 f"not belong to this model. Received: a slot of shape {list(np.shape(loaded))}")
            initializer = lambda shape, dtype: tf.constant(loaded, dtype)  # noqa: E731
        slot = super().add_slot(var, slot_name, initializer, shape)
        slot_index(self)[(saved_name(self, var), slot_name)] = (var, slot)
        return slot

    def save_own_variables(self, store: Any) -> None:
        """Write ``iterations``, hyperparameters and slots (``.keras`` format)."""
        save_own_variables(self, store)

    def load_own_variables(self, store: Any) -> None:
        """Read what :meth:`save_own_variables` wrote; slots are filled when created."""
        load_own_variables(self, store)


def keeps_state(optimizer: Any) -> bool:
    """Ours, or a ``LossScaleOptimizer`` around ours (its inner optimizer is saved)."""
    if is_loss_scale_optimizer(optimizer):
        return keeps_state(optimizer.inner_optimizer)
    return isinstance(optimizer, SavesState)


def _restored(var: tf.Variable) -> dict:
    """The slots restored for ``var`` (see :func:`record_restored_slot`); empty where none."""
    return _RESTORED.get(variable_key(var), {})


#: Saving's own state of each optimizer (its slots by saved name, the names it gave, the values
#: waiting for slots...), beside the optimizer, never in its attributes; dropped with it.
_STATE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _state(optimizer: Any) -> dict:
    return _STATE.setdefault(optimizer, {})


def slot_index(optimizer: Any) -> dict:
    """``{(saved name, slot name): (variable, slot variable)}``, filled by ``add_slot``."""
    return _state(optimizer).setdefault("slots_by_name", {})


def saved_name(optimizer: Any, var: tf.Variable) -> str:
    """The name ``var``'s slots are saved under by ``optimizer``: ``var.name``, and for the n-th
    other variable of that name it meets (nested models with layers of the same name)
    ``"<name>#<n>"``, n from 1, in the order the variables are first met (slot creation on
    both sides: the model's order)."""
    names = _state(optimizer).setdefault("saved_names", {})
    key = variable_key(var)
    if key not in names:
        counts = _state(optimizer).setdefault("saved_name_counts", {})
        n = counts.get(var.name, 0)
        counts[var.name] = n + 1
        names[key] = var.name if n == 0 else f"{var.name}#{n}"
    return names[key]


def _names_in_file(optimizer: Any) -> dict:
    """``{variable key: saved name}`` of the variables whose state goes into the file being
    written: all that ``optimizer`` met, or where a model is being saved (:func:`saving_root`)
    that model's only, numbered apart among themselves (:func:`saved_name`'s scheme, in the order
    the optimizer met them), so that the file of one of two models sharing an optimizer and their
    layers' names holds its own slots under the names its own fresh optimizer will give them."""
    met = _state(optimizer).get("saved_names", {})
    root = saving_root()
    if root is None or not hasattr(root, "variables"):
        return dict(met)
    own = {variable_key(var) for var in root.variables}
    names, counts = {}, {}
    for key, name in met.items():
        if key in own:
            base = name.split("#")[0]  # TensorFlow names cannot hold "#"
            n = counts.get(base, 0)
            counts[base] = n + 1
            names[key] = base if n == 0 else f"{base}#{n}"
    return names


def _assign(variable: tf.Variable, value: Any) -> None:
    """Assign to every device's copy directly: under a strategy these calls run in
    each replica's thread, where a distributed assign would be a merge point that
    the other replicas do not reach."""
    components = variable.values if isinstance(variable, tf.distribute.DistributedValues) else (variable,)
    for component in components:
        component.assign(tf.cast(value, component.dtype))


def _hypers(optimizer: Any) -> list:
    return [(name, h) for name, h in sorted(hyper_dict(optimizer).items()) if isinstance(h, tf.Variable)]


def save_own_variables(optimizer: Any, store: Any, inner: Any = None, variables: Any = ()) -> None:
    """Write ``iterations``, hyperparameter variables and slots into ``store``
    (and those of ``inner``, a wrapped optimizer that cannot save itself: its
    slots of ``variables``)."""
    entries: list = [["iterations"]]
    values = [optimizer.iterations]
    for name, hyper in _hypers(optimizer):
        entries.append(["hyper", name])
        values.append(hyper)
    for var in variables:  # the wrapped optimizer's variables, named even where the wrapper has no slot of theirs
        saved_name(optimizer, var)
    names = _names_in_file(optimizer)
    index = sorted((names[variable_key(var)], slot_name, slot) for (_, slot_name), (var, slot)
                   in slot_index(optimizer).items() if variable_key(var) in names)
    for var_name, slot_name, slot in index:
        entries.append(["slot", var_name, slot_name])
        values.append(slot)
    if inner is not None:
        for name, hyper in _hypers(inner):
            entries.append(["inner_hyper", name])
            values.append(hyper)
        by_name = {names[variable_key(var)]: var for var in variables if variable_key(var) in names}
        for var_name, var in sorted(by_name.items()):
            for slot_name in inner.get_slot_names():
                try:
                    values.append(inner.get_slot(var, slot_name))
                except KeyError:
                    continue
                entries.append(["inner_slot", var_name, slot_name])
    for name, value in sorted(_rule_state_variables(optimizer).items()):
        entries.append(["state", name])
        values.append(value)
    for key, value in sorted(_state(optimizer).get("pending_slot_values", {}).items()):
        entries.append(list(key))  # loaded but not trained since: saved again as loaded
        values.append(value)
    header = {"class": type(optimizer).__name__, "entries": entries}
    store[_NAMES] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    for position, value in enumerate(values):
        store[str(position)] = np.asarray(value.numpy() if hasattr(value, "numpy") else value)


def load_own_variables(optimizer: Any, store: Any, inner: Any = None) -> None:
    """Read what :func:`save_own_variables` wrote (nothing if the file has no
    optimizer state, e.g. one written before this library kept it)."""
    if _NAMES not in store:
        return
    try:
        header = json.loads(np.asarray(store[_NAMES]).tobytes().decode())
        entries = header["entries"] if isinstance(header, dict) else header  # a list: written by version 0.1
        values = [np.asarray(store[str(position)]) for position in range(len(entries))]
    except (KeyError, ValueError, TypeError, UnicodeDecodeError) as error:
        raise ValueError(f"The optimizer state of {type(optimizer).__name__} in this file is damaged and cannot be "
                         f"read ({type(error).__name__}: {error}). Received: a store with keys "
                         f"{sorted(store.keys()) if hasattr(store, 'keys') else store!r}") from None
    saved_class = header.get("class") if isinstance(header, dict) else None
    if saved_class is not None and saved_class != type(optimizer).__name__:
        warnings.warn(f"The file holds the state of a {saved_class} optimizer; it is not loaded into this "
                      f"{type(optimizer).__name__}, which keeps its own hyperparameters, step count and slots.",
                      stacklevel=2)
        return
    pending = _state(optimizer).setdefault("pending_slot_values", {})
    for entry, value in zip(entries, values):
        kind = entry[0]
        if kind == "iterations":
            _assign(optimizer.iterations, value)
        elif kind in ("hyper", "inner_hyper"):
            owner = optimizer if kind == "hyper" else inner
            if owner is None:
                continue
            create_hypers(owner)
            hyper = hyper_dict(owner).get(entry[1])
            if isinstance(hyper, tf.Variable):
                _assign(hyper, value)
        elif kind == "state":
            load_state_value(optimizer, entry[1], value)
        else:
            pending[(kind, entry[1], entry[2])] = value


def _rule_state_variables(optimizer: Any) -> dict:
    """The variables of ``optimizer``'s optimizer-wide state (``state_specs``), by name."""
    state = getattr(optimizer, "rule_state", None)
    return dict(state.variables) if state is not None else {}


def load_state_value(optimizer: Any, name: str, value: Any) -> None:
    """A loaded value of the optimizer-wide state: assigned, or kept for the variable's creation."""
    var = _rule_state_variables(optimizer).get(name)
    if var is not None:
        _assign(var, value)
    else:
        _state(optimizer).setdefault("pending_state", {})[name] = np.asarray(value)


def initial_state_value(optimizer: Any, name: str) -> Any:
    """The loaded value the optimizer-wide state ``name`` starts from, or ``None``."""
    return _state(optimizer).get("pending_state", {}).pop(name, None)


def _take_restored_scalars(optimizer: Any, restored_optimizer: Any, create: bool = False) -> None:
    """``iterations`` and hyperparameters from the loader's ``RestoredOptimizer``, once
    (``create``: make the hyperparameter variables now if the SavedModel holds some)."""
    if _state(optimizer).get("took_restored_scalars"):
        return
    _state(optimizer)["took_restored_scalars"] = True
    if create and any(isinstance(hyper, tf.Variable) for name, hyper in hyper_dict(restored_optimizer).items()
                      if name != "iter"):
        create_hypers(optimizer)
    # The loader sets every saved child as a hyperparameter, the step counter as "iter". An optimizer
    # saved without one (TFA's wrappers share theirs with the inner optimizer) keeps its counter.
    restored_iterations = hyper_dict(restored_optimizer).get("iter")
    if restored_iterations is not None:
        _assign(optimizer.iterations, restored_iterations)
    state_names = {spec.name for spec in getattr(getattr(optimizer, "rule_state", None), "specs", ())}
    for name, hyper in hyper_dict(restored_optimizer).items():
        own = hyper_dict(optimizer).get(name)
        if isinstance(own, tf.Variable) and isinstance(hyper, tf.Variable):
            _assign(own, hyper)
        elif name in state_names and isinstance(hyper, tf.Variable):  # a child the loader took for one
            load_state_value(optimizer, name, hyper.numpy())


def initial_slot_value(optimizer: Any, var: tf.Variable, slot_name: str) -> Any:
    """The loaded value slot ``slot_name`` of ``var`` must start from, or ``None``."""
    pending = _state(optimizer).get("pending_slot_values")
    if pending:
        value = pending.pop(("slot", saved_name(optimizer, var), slot_name), None)
        if value is not None:
            return value
    restored = _restored(var)
    if slot_name not in restored:
        return None
    restored_optimizer, slot = restored.pop(slot_name)
    _take_restored_scalars(optimizer, restored_optimizer)
    return slot.numpy()


def has_loaded_slot(optimizer: Any, var: tf.Variable, slot_name: str) -> bool:
    """Whether a loaded file holds slot ``slot_name`` of ``var``, not created yet (it is when the
    slot is: :func:`initial_slot_value`)."""
    if ("slot", saved_name(optimizer, var), slot_name) in (_state(optimizer).get("pending_slot_values") or {}):
        return True
    return slot_name in _restored(var)


def restore_inner_slots(optimizer: Any, inner: Any, var: tf.Variable) -> None:
    """Write values loaded by ``optimizer`` into ``inner``'s slots of ``var``."""
    pending = _state(optimizer).get("pending_slot_values") or {}
    restored = _restored(var)
    for slot_name in inner.get_slot_names():
        try:
            slot = inner.get_slot(var, slot_name)
        except KeyError:
            continue
        value = pending.pop(("inner_slot", saved_name(optimizer, var), slot_name), None)
        if value is None and slot_name in restored:
            restored_inner, restored_slot = restored.pop(slot_name)
            _take_restored_scalars(inner, restored_inner)
            value = restored_slot.numpy()
        if value is not None:
            _assign(slot, value)


def record_restored_slot(restored_optimizer: Any, var: tf.Variable, slot_name: str, slot: tf.Variable) -> None:
    """Remember a slot the SavedModel loader restored for ``var``, until an optimizer creates it
    (or ``var`` is gone)."""
    key = variable_key(var)
    if key not in _RESTORED:
        _RESTORED[key] = {}
        weakref.finalize(distributed_container(var), _RESTORED.pop, key, None)
    _RESTORED[key][slot_name] = (restored_optimizer, slot)


def link_restored_optimizer(optimizer: Any, restored_optimizer: Any) -> None:
    """SavedModel: ``optimizer`` (compiled by ``load_model``) takes the step counter,
    the hyperparameter variables and a ``LossScaleOptimizer``'s loss scale from the
    loader's ``RestoredOptimizer`` at once, whether or not it has slots; slots
    still wait for their creation (:func:`initial_slot_value`)."""
    if not keeps_state(optimizer):
        return
    if is_loss_scale_optimizer(optimizer):
        state = restored_child(restored_optimizer, "loss_scale")
        for variable, name in zip(loss_scale_variables(optimizer), ("current_loss_scale", "good_steps")):
            value = getattr(state, name, None)
            if isinstance(value, tf.Variable):
                _assign(variable, value)
        # The loss-scale optimizer shows its inner optimizer's dependencies as its own.
        link_restored_optimizer(optimizer.inner_optimizer, restored_optimizer)
        return
    _take_restored_scalars(optimizer, restored_optimizer, create=True)
    # Built-in or third-party optimizers whose state ours keeps (a MultiOptimizer's pairs' own): their
    # step counters and hyperparameters now, their slots when created (restore_inner_slots).
    for name, child in getattr(optimizer, "unsaved_optimizers", dict)().items():
        restored = restored_child(restored_optimizer, name)
        if restored is not None:
            _take_restored_scalars(child, restored, create=True)
    inner = getattr(optimizer, "inner_optimizer", None)
    restored_inner = restored_child(restored_optimizer, getattr(optimizer, "inner_checkpoint_name", ""))
    if inner is None or restored_inner is None:
        return
    if isinstance(inner, SavesState):
        link_restored_optimizer(inner, restored_inner)
    else:  # a built-in Keras optimizer: its slots are handed over by restore_inner_slots
        _take_restored_scalars(inner, restored_inner, create=True)


install_saving_hooks(keeps_state, record_restored_slot)
install_loss_scale_saving(keeps_state, deserialize_optimizer)
install_restored_optimizer_link(link_restored_optimizer)
