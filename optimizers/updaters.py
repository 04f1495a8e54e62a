"""Variable updaters: a per-variable rule that replaces the optimizer's rule.

An updater is attached to a variable in one of three ways (first match wins):

1. the optimizer's ``updaters=`` mapping: ``{variable or regex on var.name: updater}``;
2. :func:`set_updater` (``var`` carries the updater wherever it goes);
3. the Keras 3 convention ``var.overwrite_with_gradient = True``
   (means :class:`OverwriteWithGradient`).

A variable with an updater gets none of the optimizer's slots (only the
updater's own), is exempt from gradient clipping and weight decay, and its
gradient is reduced across replicas by the updater's ``reduction``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from slots import SlotSpec

__all__ = [
    "VariableUpdater",
    "OverwriteWithGradient",
    "Frozen",
    "RowwiseAdagrad",
    "set_updater",
    "get_updater",
    "REDUCTIONS",
]

REDUCTIONS = ("sum", "mean", "max", "none")
_ATTR = "_custom_optimizer_v2_updater"


class VariableUpdater:
    """Base class of per-variable update rules.

    Override :meth:`update_dense` (required) and, for speed, :meth:`update_sparse`;
    declare slots in :meth:`slot_specs`; set ``reduction`` to say how the
    gradient is combined across replicas (``"sum"``, ``"mean"``, ``"max"``, or
    ``"none"`` when the gradient is not used).
    """

    reduction: str = "sum"

    def slot_specs(self) -> Sequence[SlotSpec]:
        """The slots this rule needs per variable. Defaults to none."""
        return ()

    def update_dense(self, grad: tf.Tensor, var: tf.Variable, slots: dict[str, tf.Variable]) -> Any:
        """Apply the rule for a dense gradient; return the update op."""
        raise NotImplementedError(f"{type(self).__name__} must implement update_dense")

    def update_sparse(
        self, grad: tf.Tensor, var: tf.Variable, indices: tf.Tensor, slots: dict[str, tf.Variable]
    ) -> Any:
        """Apply the rule to the rows ``indices`` (unique) with values ``grad``.

        The default scatters the rows into a dense gradient and calls
        :meth:`update_dense`.
        """
        dense = tf.scatter_nd(tf.expand_dims(indices, -1), grad, tf.shape(var, out_type=indices.dtype))
        return self.update_dense(dense, var, slots)

    @property
    def name(self) -> str:
        """Prefix of this rule's slot names."""
        return type(self).__name__

    def get_config(self) -> dict[str, Any]:
        return {}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> VariableUpdater:
        return cls(**config)

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.get_config() == other.get_config()  # type: ignore[union-attr]

    def __hash__(self) -> int:
        return hash((type(self), tuple(sorted(self.get_config().items()))))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


class OverwriteWithGradient(VariableUpdater):
    """The variable takes the value of its gradient (fp8 scales, running statistics).

    Across replicas the gradients are averaged (``reduction="mean"``), or their
    maximum is taken (``reduction="max"``, for amax-like statistics); never summed.
    A sparse gradient overwrites only its rows (repeated rows are summed first).
    """

    def __init__(self, reduction: str = "mean") -> None:
        if reduction not in ("mean", "max"):
            raise ValueError(f"`reduction` must be 'mean' or 'max'. Received: reduction={reduction!r}")
        self.reduction = reduction

    def update_dense(self, grad, var, slots):
        return var.assign(tf.cast(grad, var.dtype), read_value=False)

    def update_sparse(self, grad, var, indices, slots):
        return var.scatter_update(tf.IndexedSlices(tf.cast(grad, var.dtype), indices))

    def get_config(self):
        return {"reduction": self.reduction}


class Frozen(VariableUpdater):
    """The variable does not change; its gradient is ignored and never communicated."""

    reduction = "none"

    def update_dense(self, grad, var, slots):
        return tf.no_op()

    def update_sparse(self, grad, var, indices, slots):
        return tf.no_op()


class RowwiseAdagrad(VariableUpdater):
    r"""Adagrad with one accumulator per row: a cheap rule for huge embedding tables.

    For each touched row :math:`i` with gradient row :math:`g_i`:

    .. math::

        a_i \leftarrow a_i + \operatorname{mean}(g_i^2), \qquad
        w_i \leftarrow w_i - \eta\, g_i / (\sqrt{a_i} + \epsilon)

    Its slot has shape ``[rows, 1]``: one number per row instead of Adam's two
    per element.

    Args:
        learning_rate: :math:`\eta`. Defaults to ``0.01``.
        initial_accumulator_value: Defaults to ``0.1``.
        epsilon: Defaults to ``1e-7``.
    """

    def __init__(self, learning_rate: float = 0.01, initial_accumulator_value: float = 0.1, epsilon: float = 1e-7):
        for arg, value in (("learning_rate", learning_rate), ("initial_accumulator_value", initial_accumulator_value),
                           ("epsilon", epsilon)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"`{arg}` must be a number >= 0. Received: {arg}={value!r}")
        self.learning_rate = float(learning_rate)
        self.initial_accumulator_value = float(initial_accumulator_value)
        self.epsilon = float(epsilon)

    def slot_specs(self):
        value = self.initial_accumulator_value
        return (SlotSpec("accumulator", initializer=lambda shape, dtype: tf.fill(shape, tf.cast(value, dtype)),
                         shape=lambda shape: shape[:1] + [1]),)

    def _step(self, grad, acc_rows, dtype):
        grad2 = tf.reshape(grad, [tf.shape(grad)[0], -1])
        new_acc = acc_rows + tf.reduce_mean(tf.square(grad2), axis=1, keepdims=True)
        scale = self.learning_rate / (tf.sqrt(new_acc) + self.epsilon)
        delta = grad2 * tf.cast(scale, dtype)
        return new_acc, tf.reshape(delta, tf.shape(grad))

    def update_dense(self, grad, var, slots):
        acc = slots["accumulator"]
        new_acc, delta = self._step(grad, acc.read_value(), var.dtype)
        return tf.group(acc.assign(new_acc), var.assign_sub(delta))

    def update_sparse(self, grad, var, indices, slots):
        acc = slots["accumulator"]
        new_acc, delta = self._step(grad, tf.gather(acc, indices), var.dtype)
        return tf.group(
            acc.scatter_update(tf.IndexedSlices(new_acc, indices)),
            var.scatter_sub(tf.IndexedSlices(delta, indices)),
        )

    def get_config(self):
        return {"learning_rate": self.learning_rate, "initial_accumulator_value": self.initial_accumulator_value,
                "epsilon": self.epsilon}


def check_updater(updater: object, argument: str = "updater") -> VariableUpdater:
    """Return ``updater`` if it is a :class:`VariableUpdater`, else raise ``TypeError``."""
    if not isinstance(updater, VariableUpdater):
        raise TypeError(
            f"`{argument}` must be a VariableUpdater instance (for example "
            f"optimizers.OverwriteWithGradient()). Received: {argument}={updater!r}"
        )
    return updater


def distributed_container(var: Any) -> Any:
    """The distributed variable a per-replica component belongs to, else ``var``.

    Newer TensorFlow marks the component's handle tensor instead of the component.
    """
    if isinstance(var, tf.distribute.DistributedValues):
        return var
    if hasattr(var, "_distributed_container"):
        return var._distributed_container()
    handle = getattr(var, "handle", None)
    if handle is not None and hasattr(handle, "_distributed_container"):
        return handle._distributed_container()
    return var


def set_updater(var: tf.Variable, updater: VariableUpdater | None) -> None:
    """Attach ``updater`` to ``var`` (``None`` detaches it)."""
    if updater is not None:
        check_updater(updater)
    if not isinstance(var, tf.Variable):
        raise TypeError(f"`var` must be a tf.Variable. Received: var={var!r}")
    object.__setattr__(distributed_container(var), _ATTR, updater)


def get_updater(var: tf.Variable) -> VariableUpdater | None:
    """The updater attached to ``var`` by :func:`set_updater` or by the Keras 3
    ``overwrite_with_gradient`` attribute, or ``None``."""
    for candidate in (var, distributed_container(var)):
        updater = getattr(candidate, _ATTR, None)
        if updater is not None:
            return updater
    for candidate in (var, distributed_container(var)):
        if getattr(candidate, "overwrite_with_gradient", False) is True:
            return OverwriteWithGradient()
    return None


def before_sum(grad: Any, reduction: str, replica_id: Any, num_replicas: int) -> Any:
    """Turn ``grad`` into what a cross-replica SUM must see to yield ``reduction``.

    Updater gradients travel in the optimizer's one SUM all-reduce together with
    the ordinary gradients (so every replica issues the same collectives in the
    same order): ``"mean"`` is the sum divided afterwards; ``"max"`` puts each
    replica's value in its own row of a zero stack, whose sum holds every
    replica's value.
    """
    if reduction != "max":
        return grad
    grad = tf.convert_to_tensor(grad)
    one_hot = tf.one_hot(replica_id, num_replicas, dtype=grad.dtype)
    return tf.reshape(one_hot, [num_replicas] + [1] * grad.shape.rank) * tf.expand_dims(grad, 0)


def after_sum(summed: Any, reduction: str, num_replicas: int) -> Any:
    """Finish :func:`before_sum`'s reduction on the summed value."""
    if reduction == "max":
        return tf.reduce_max(summed, axis=0)
    if reduction == "mean":
        if isinstance(summed, tf.IndexedSlices):
            return tf.IndexedSlices(summed.values / num_replicas, summed.indices, summed.dense_shape)
        return summed / num_replicas
    return summed
