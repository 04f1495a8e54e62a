"""Slot declaration, creation and accounting.

A *slot* is a per-variable state tensor of an update rule or a wrapper (Adam's
``m`` and ``v``, a moving average, an accumulator). A rule declares the slots of
each variable as :class:`SlotSpec` values (its ``slot_specs(var)`` sees the
variable, so slots may depend on its shape or value); :func:`create_slots`
makes them for exactly the variables that use the rule; :func:`slot_memory`
reports what they cost.

>>> import tensorflow as tf
>>> from optimizers import CustomOptimizerV2
>>> spec = SlotSpec("velocity")
>>> spec.name, spec.initializer
('velocity', 'zeros')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Callable, Union

import tensorflow as tf

__all__ = ["SlotSpec", "StateSpec", "as_slot_specs", "as_state_specs", "create_slots", "get_slots", "slot_memory"]

Initializer = Union[str, Callable[..., Any]]


@dataclasses.dataclass(frozen=True)
class SlotSpec:
    """Declares one slot of an update rule.

    Args:
        name: The slot's name, unique within the rule (``"m"``, ``"v"``...).
        initializer: A Keras initializer name, or a callable
            ``(shape, dtype) -> tensor``. It may read the variable, which
            ``slot_specs(var)`` receives: ``lambda shape, dtype: tf.identity(var)``
            starts the slot at the variable's value. Defaults to ``"zeros"``.
        shape: A function of the variable's shape that returns the slot's
            shape, for slots not shaped like the variable (for example one
            accumulator per row: ``lambda shape: shape[:1] + [1]``). Defaults
            to ``None``: the variable's shape.
    """

    name: str
    initializer: Initializer = "zeros"
    shape: Callable[[list], list] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"`name` must be a non-empty string. Received: name={self.name!r}")
        if not (isinstance(self.initializer, str) or callable(self.initializer)):
            raise TypeError("`initializer` must be a Keras initializer name or a callable (shape, dtype) -> "
                            f"tensor. Received: initializer={self.initializer!r}")
        if self.shape is not None and not callable(self.shape):
            raise TypeError("`shape` must be a function of the variable's shape (for example "
                            f"`lambda shape: shape[:1] + [1]`), or None. Received: shape={self.shape!r}")


@dataclasses.dataclass(frozen=True)
class StateSpec:
    """Declares one value of a rule's optimizer-wide state: one variable per optimizer, not per
    weight (schedule-free AdamW's running weight sum), created with the slots, saved with them.

    Args:
        name: The value's name, unique within the rule; the update hooks read the state after
            the step's :meth:`~optimizers.UpdateRule.next_state` as ``coefficients[name]``.
        initial_value: A number. Defaults to ``0.0``.
        dtype: Defaults to ``None``: ``float32``, or ``float64`` for an optimizer of a ``float64``
            variable.
        shape: Defaults to ``()``: a scalar.
    """

    name: str
    initial_value: float = 0.0
    dtype: tf.DType | None = None
    shape: tuple = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"`name` must be a non-empty string. Received: name={self.name!r}")
        if isinstance(self.initial_value, bool) or not isinstance(self.initial_value, (int, float)):
            raise TypeError(f"`initial_value` must be a number. Received: initial_value={self.initial_value!r}")


def as_state_specs(specs: Iterable[StateSpec | str], taken: Iterable[str]) -> tuple[StateSpec, ...]:
    """``specs`` (``StateSpec`` values or plain names) as ``StateSpec`` values, refusing a repeated
    name or one in ``taken`` (the coefficients' names: hyperparameters, ``"step"``...)."""
    out = tuple(StateSpec(spec) if isinstance(spec, str) else spec for spec in specs)
    names = [getattr(spec, "name", None) for spec in out]
    clash = sorted(set(names) & set(taken))
    if not all(isinstance(spec, StateSpec) for spec in out) or len(set(names)) != len(names) or clash:
        raise ValueError(f"`state_specs` must return StateSpec or str values of unique names that are not the "
                         f"coefficients' ({clash or 'none taken'}). Received: {list(out)!r}")
    return out


def as_slot_specs(specs: Iterable[SlotSpec | str]) -> tuple[SlotSpec, ...]:
    """Turn a list of ``SlotSpec`` or plain slot names into ``SlotSpec`` values."""
    if isinstance(specs, (str, SlotSpec)):
        raise TypeError("`slot_specs` must return a list of SlotSpec or str values, not one value: "
                        f"`return [{specs!r}]`. Received: {specs!r}")
    out = []
    for spec in specs:
        if isinstance(spec, str):
            spec = SlotSpec(spec)
        if not isinstance(spec, SlotSpec):
            raise TypeError(f"`slot_specs` must return SlotSpec or str values. Received: {spec!r}")
        out.append(spec)
    names = [s.name for s in out]
    if len(set(names)) != len(names):
        raise ValueError(f"Slot names must be unique. Received: {names}")
    return tuple(out)


def create_slots(optimizer: Any, var: tf.Variable, specs: Iterable[SlotSpec], prefix: str = "") -> None:
    """Create ``specs`` for ``var`` on ``optimizer`` (no-op for slots that exist).

    ``prefix`` keeps the slots of different rules apart (a variable updater's
    slots are named ``"<updater>/<slot>"``).
    """
    for spec in specs:
        shape = None
        if spec.shape is not None:
            shape = spec.shape(var.shape.as_list())
        initializer = spec.initializer if isinstance(spec.initializer, str) else _checked(spec, var)
        optimizer.add_slot(var, prefix + spec.name, initializer=initializer, shape=shape)


def _checked(spec: SlotSpec, var: tf.Variable) -> Callable[..., Any]:
    """``spec.initializer``, refusing a value of another dtype than the slot's (the variable's)."""
    def initializer(shape: Any, dtype: Any, **kwargs: Any) -> Any:
        value = spec.initializer(shape, dtype, **kwargs)
        if tf.is_tensor(value) and value.dtype.base_dtype != tf.as_dtype(dtype).base_dtype:
            raise TypeError(f"The initializer of slot {spec.name!r} of variable {var.name!r} must return a "
                            f"{tf.as_dtype(dtype).name} value, the variable's dtype, which its slots have (cast "
                            f"it: `tf.cast(value, dtype)`). Received: a {value.dtype.name} tensor")
        return value

    return initializer


def get_slots(optimizer: Any, var: tf.Variable, specs: Iterable[SlotSpec], prefix: str = "") -> dict[str, tf.Variable]:
    """Slots ``specs`` of ``var``, keyed by their names without ``prefix``.

    Inside a ``tf.distribute`` update call the per-device component is returned.
    """
    out = {}
    for spec in specs:
        slot = optimizer.get_slot(var, prefix + spec.name)
        if isinstance(slot, tf.distribute.DistributedValues):
            from optimizers.tf_compat import on_this_device

            slot = on_this_device(slot)  # the replica being updated
        out[spec.name] = slot
    return out


def slot_memory(optimizer: Any) -> dict[str, int]:
    """Bytes held by ``optimizer``'s slots, and by those of the optimizers it wraps
    (``inner_optimizer``, at any depth: a moving average's inner AdamW, a ``LossScaleOptimizer``'s),
    by slot name.

    A distributed (mirrored) slot counts once, like the variable it shadows.
    Variables that use a variable updater without slots contribute nothing.

    Returns:
        ``{slot_name: bytes}``, sorted by slot name, a name two of the optimizers
        use summed; empty before the first step.
    """
    from optimizers.keras_compat import slot_dict
    from optimizers.tf_compat import is_sharded_variable, optimizer_chain

    totals: dict[str, int] = {}
    for each in optimizer_chain(optimizer):
        slot_dicts: Mapping[Any, Mapping[str, Any]] = slot_dict(each)
        for per_var in slot_dicts.values():
            for name, slot in per_var.items():
                if is_sharded_variable(slot):
                    continue  # its shards are counted as variables of their own
                nbytes = slot.shape.num_elements() * slot.dtype.size
                totals[name] = totals.get(name, 0) + nbytes
    return dict(sorted(totals.items()))
