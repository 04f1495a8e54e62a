"""The one place where this package reads Keras 3's private state, each read with its reason:
Keras 3 has no public form of it. Like ``optimizers.keras_compat`` for Keras 2, a change in
Keras 3 is fixed here alone."""

from __future__ import annotations

from typing import Any

__all__ = ["built_variables", "loss_tracker", "strategy_of", "variable_index"]


def built_variables(optimizer: Any) -> list:
    """The trainable variables ``optimizer`` was built for, in their order (none before it is
    built): ``apply`` without variables steps these, and the slots are kept in this order."""
    return list(optimizer._trainable_variables) if optimizer.built else []


def variable_index(optimizer: Any, var: Any) -> int | None:
    """``var``'s position among :func:`built_variables`, as Keras 3's own slots are indexed (by its
    key, not its name, which two variables can share); ``None`` for a variable it was not built for."""
    if not optimizer.built:
        return None
    return optimizer._trainable_variables_indices.get(optimizer._var_key(var))


def strategy_of(optimizer: Any) -> Any:
    """The ``tf.distribute`` strategy the TensorFlow backend's optimizer was made under: its merge
    calls (one update in cross-replica context) must go through that strategy."""
    return optimizer._distribution_strategy


def loss_tracker(model: Any) -> Any:
    """The ``Mean`` metric through which Keras 3's ``Model.train_step`` reports the loss: a model that
    writes its own train step reports the loss the same way, so ``fit``'s logs and callbacks see it."""
    return model._loss_tracker
