"""A MultiOptimizer's pairs: read from either argument and checked (``parse_pairs``, for both
Keras), and each pair's Keras 2 optimizer resolved: a rule, this library's equivalent of a
built-in, or an optimizer that steps its pair's weights itself."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from optimizers import config as config_lib
from optimizers.keras_compat import (
    KERAS3_HINT,
    OptimizerV2,
    is_keras3_object,
    is_loss_scale_optimizer,
    keras,
    own_weights,
)
from optimizers.rule import REDUCTIONS, UpdateRule
from optimizers.template import CustomOptimizerV2
from optimizers.updaters import VariableUpdater
from optimizers.wrappers.base import OptimizerWrapper

__all__ = ["PrefixedStore", "clip_as_alone", "layer_weights", "pair_optimizer", "parse_pairs"]

# The config keys of Keras 2's new-style optimizers (tf_keras.optimizers.Optimizer) that a pair's rule
# does not take: the host compiles the step; use_ema and weight_decay are refused when set.
_NEW_STYLE_ONLY = ("is_legacy_optimizer", "jit_compile", "use_ema", "ema_momentum", "ema_overwrite_frequency",
                   "weight_decay")


def _builtin_equivalent(optimizer: Any, where: str, from_config: bool) -> CustomOptimizerV2 | None:
    """This library's class of the same name, built from the config of ``optimizer`` where it is a
    built-in Keras 2 optimizer (legacy or new-style) that has one here (``Adam``, ``SGD``), fresh;
    else ``None``. TFA paired such built-ins with layers."""
    import optimizers as package  # the public classes (imported here: this module is part of the package)

    same_name = getattr(package, type(optimizer).__name__, None)
    builtin = type(optimizer).__module__.split(".")[0] in ("keras", "tf_keras")
    if not (builtin and isinstance(same_name, type) and issubclass(same_name, CustomOptimizerV2)):
        return None
    legacy = isinstance(optimizer, OptimizerV2)
    steps = int(optimizer.iterations.numpy()) if (not legacy or own_weights(optimizer)) else 0
    if steps and not from_config:
        raise ValueError(f"{where} has taken {steps} steps: a pair's built-in Keras optimizer becomes "
                         f"optimizers.{same_name.__name__} with its config, and its state would not come along. "
                         f"Pair a fresh one. Received: {where}={optimizer!r}")
    config = dict(optimizer.get_config())
    if not legacy:
        unsupported = {key: config[key] for key in ("use_ema", "weight_decay") if config.get(key)}
        if unsupported:
            raise ValueError(f"{where}: a pair's optimizer cannot take Keras 2's "
                             f"{', '.join(unsupported)} (use optimizers.AdamW or optimizers.SGDW for weight decay, "
                             f"MovingAverage around the MultiOptimizer for averages). Received: {unsupported}")
        config = {key: value.item() if isinstance(value, np.generic) else value  # its learning rate: np.float32
                  for key, value in config.items() if key not in _NEW_STYLE_ONLY}
    return same_name.from_config(config)


def _foreign_optimizer(optimizer: Any, where: str) -> Any:
    """``optimizer``, a Keras 2 optimizer that is no rule (a built-in without an equivalent here,
    a third-party ``OptimizerV2``), checked: it takes its own steps on its pair's weights."""
    legacy = isinstance(optimizer, OptimizerV2)
    steps = int(optimizer.iterations.numpy()) if (not legacy or own_weights(optimizer)) else 0
    if steps:
        raise ValueError(f"{where} has taken {steps} steps: its step counter would not be the MultiOptimizer's. "
                         f"Pair a fresh one. Received: {where}={optimizer!r}")
    aggregator = getattr(optimizer, "gradient_aggregator", None)
    if legacy and aggregator is not keras.optimizers.legacy.SGD().gradient_aggregator:
        raise ValueError(f"{where} must have no `gradient_aggregator`: give it to the MultiOptimizer, which "
                         f"aggregates the step's gradients. Received: gradient_aggregator={aggregator!r}")
    return optimizer


def pair_optimizer(optimizer: Any, where: str, from_config: bool) -> Any:
    """``optimizer`` if it can be a rule. A built-in Keras 2 optimizer (given, or named by a config,
    TFA's included) becomes this library's class of the same name, which has its numbers; any other
    Keras 2 optimizer is returned as it is (:func:`_foreign_optimizer`), and steps its weights itself."""
    if isinstance(optimizer, dict):
        cls = keras.utils.get_registered_object(optimizer.get("class_name", ""))
        if isinstance(cls, type) and issubclass(cls, VariableUpdater):
            optimizer = config_lib.deserialize_object(optimizer, UpdateRule, "variable updater")
        else:
            optimizer = config_lib.deserialize_optimizer(optimizer)
    keras_optimizer = hasattr(optimizer, "apply_gradients") and not isinstance(optimizer, (UpdateRule, OptimizerWrapper))
    if keras_optimizer and not is_keras3_object(optimizer):
        equivalent = _builtin_equivalent(optimizer, where, from_config)
        if equivalent is not None:
            return equivalent
        if not is_loss_scale_optimizer(optimizer):
            return _foreign_optimizer(optimizer, where)
    if isinstance(optimizer, OptimizerWrapper) or is_loss_scale_optimizer(optimizer):
        problem = "is a wrapper, which acts on whole steps: wrap the MultiOptimizer instead, e.g. Lookahead(...)"
    elif is_keras3_object(optimizer):
        problem = "is a Keras 3 optimizer. " + KERAS3_HINT
    elif not isinstance(optimizer, UpdateRule):
        problem = "must be a Keras 2 optimizer or a VariableUpdater"
    else:
        problem = None
    if problem is not None:
        raise TypeError(f"{where} {problem}. Received: {where}={optimizer!r}")
    if optimizer.reduction not in REDUCTIONS or list(getattr(optimizer, "gradient_transformers", None) or []):
        raise ValueError(f"{where} must have a `reduction` in {REDUCTIONS} and no `gradient_transformers`. "
                         f"Received: {where}={optimizer!r}")
    # The MultiOptimizer takes the step as a whole: settings of one step are its own, not a pair's.
    aggregator = getattr(optimizer, "gradient_aggregator", None)
    if aggregator is not None and aggregator is not keras.optimizers.legacy.SGD().gradient_aggregator:
        raise ValueError(f"{where} must have no `gradient_aggregator`: give it to the MultiOptimizer, which "
                         f"aggregates the step's gradients. Received: gradient_aggregator={aggregator!r}")
    if getattr(optimizer, "skip_non_finite", False):
        raise ValueError(f"{where} must not set `skip_non_finite`: set it on the MultiOptimizer, which then skips "
                         f"the whole step. Received: skip_non_finite=True")
    return optimizer


def layer_weights(layers: Any, where: str) -> list[tf.Variable]:
    layers = list(layers) if isinstance(layers, (list, tuple)) else [layers]
    for layer in layers:
        if is_keras3_object(layer) or not hasattr(layer, "weights"):
            raise TypeError(f"{where} must be a Keras 2 layer or model, or a list of them. {KERAS3_HINT} "
                            f"Received: {where}={layer!r}")
    weights = [var for layer in layers for var in layer.weights]
    if not weights:
        raise ValueError(f"{where} has no weights yet: build the model before creating the MultiOptimizer. "
                         f"Received: {where}={layers!r}")
    return weights


def parse_pairs(optimizers_and_layers: Any, optimizer_specs: Any, resolve: Callable, weights_of: Callable,
                name_of: Callable, key_of: Callable) -> list[dict[str, Any]]:
    """``[{"optimizer": optimizer, "weights": [names], "keys": [variable keys] or None}]`` from either
    argument, checked (a weight in two pairs refused): where layers are given, ``weights_of(layers,
    where)``'s variables, named by ``name_of`` and keyed by ``key_of``; ``optimizer_specs`` hold names
    only. ``resolve(optimizer, where, from_config)`` checks each pair's optimizer (Keras 2's or 3's)."""
    argument, given = (("optimizers_and_layers", optimizers_and_layers) if optimizer_specs is None
                       else ("optimizer_specs", optimizer_specs))
    if not isinstance(given, (list, tuple)) or not given:
        raise TypeError(f"`{argument}` must be a non-empty list. Received: {argument}={given!r}")
    pairs, owner = [], {}
    for i, item in enumerate(given):
        where = f"{argument}[{i}]"
        if argument == "optimizers_and_layers":
            if not isinstance(item, (list, tuple)) or len(item) != 2:
                raise TypeError(f"{where} must be an (optimizer, layers) pair. Received: {where}={item!r}")
            optimizer, weights = resolve(item[0], where + "[0]", False), weights_of(item[1], where + "[1]")
            names, keys = [name_of(var) for var in weights], [key_of(var) for var in weights]
        else:
            if not isinstance(item, dict) or not {"optimizer", "weights"} <= set(item):
                raise TypeError(f"{where} must be a dict with keys 'optimizer' and 'weights'. Received: {item!r}")
            optimizer, names, keys = resolve(item["optimizer"], where + "['optimizer']", True), list(item["weights"]), None
        for name, key in zip(names, keys or names):
            if owner.setdefault(key, (i, name))[0] != i:
                raise ValueError(f"Weight {name!r} is in pairs {owner[key][0]} and {i}: each weight takes one "
                                 f"optimizer. Received: {where}={item!r}")
        pairs.append({"optimizer": optimizer, "weights": names, "keys": keys})
    return pairs


class PrefixedStore:
    """The entries of a ``.keras`` store whose keys begin with ``prefix``, as a store of their own."""

    def __init__(self, store: Any, prefix: str) -> None:
        self._store, self._prefix = store, prefix

    def __setitem__(self, key: str, value: Any) -> None:
        self._store[self._prefix + key] = value

    def __getitem__(self, key: str) -> Any:
        return self._store[self._prefix + key]

    def __contains__(self, key: str) -> bool:
        return self._prefix + key in self._store

    def keys(self) -> list[str]:
        return [key[len(self._prefix):] for key in self._store.keys() if key.startswith(self._prefix)]


def clip_as_alone(optimizer: Any, grads: list) -> list:
    """``optimizer``'s own clipping, as its step alone would apply it (Keras 2's order)."""
    clipvalue, clipnorm, global_clipnorm = (getattr(optimizer, key, None) for key in ("clipvalue", "clipnorm",
                                                                                     "global_clipnorm"))
    if clipvalue is not None:
        grads = [tf.clip_by_value(g, -clipvalue, clipvalue) for g in grads]
    if clipnorm is not None:
        grads = [tf.clip_by_norm(g, clipnorm) for g in grads]
    if global_clipnorm is not None:
        grads, _ = tf.clip_by_global_norm(grads, global_clipnorm)
    return list(grads)
