"""The one place for TensorFlow's private internals that the library reads (distributed and
sharded variables' containers, XLA contexts, merge calls): one place to fix when TensorFlow
changes. It imports no Keras, so the Keras-free core (rules, hyperparameters, slots, weight
decay, compiled steps, kernels) can use it; Keras 2's internals are in ``keras_compat``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import tensorflow as tf

__all__ = ["distributed_container", "logical_variable", "variable_name", "variable_key", "on_this_device", "optimizer_chain", "in_xla_context", "is_plain_resource_variable", "aggregates_in_apply_only", "is_parameter_server", "maybe_merge_call", "is_sharded_variable", "op_dtypes"]


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


def logical_variable(var: Any) -> Any:
    """The variable the model declared that ``var`` is part of: its distributed container, and for a
    shard of a ``ShardedVariable`` (``ParameterServerStrategy``'s ``variable_partitioner``) the
    sharded variable, whose name has no ``/part_<i>`` suffix; else ``var``."""
    var = distributed_container(var)
    sharded = getattr(var, "_sharded_container", None)
    return sharded() if callable(sharded) else var


def variable_name(var: Any) -> str:
    """The name of the variable the model declared: a shard's (``"emb/embeddings/part_1:0"``) without its
    ``/part_<i>`` (``"emb/embeddings:0"``), as a ``ShardedVariable`` is not named after its table."""
    var = distributed_container(var)
    name = var.name
    if callable(getattr(var, "_sharded_container", None)):
        name = re.sub(r"/part_\d+(?=:\d+$|$)", "", name)
    return name


def variable_key(var: Any) -> Any:
    """A key that identifies ``var`` through distributed containers.

    Under ``tf.distribute`` the optimizer sees a per-replica component; its key
    is that of the distributed variable it belongs to.
    """
    var = distributed_container(var)
    if getattr(var, "_in_graph_mode", False):
        return var._shared_name
    return var._unique_id


def on_this_device(value: Any) -> Any:
    """The component of a distributed ``value`` for the replica being updated."""
    if isinstance(value, tf.distribute.DistributedValues):
        return value._get_on_device_or_primary()
    return value


def optimizer_chain(optimizer: Any) -> Iterator[Any]:
    """``optimizer``, then the optimizer it wraps (``inner_optimizer``: a wrapper's, a
    ``LossScaleOptimizer``'s), and so on down, each once."""
    seen = set()
    while optimizer is not None and id(optimizer) not in seen:
        seen.add(id(optimizer))
        yield optimizer
        optimizer = getattr(optimizer, "inner_optimizer", None)


def in_xla_context() -> bool:
    """Whether ops built now are compiled by XLA (inside ``tf.function(jit_compile=True)``)."""
    from tensorflow.python.ops import control_flow_util

    return not tf.executing_eagerly() and control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def is_plain_resource_variable(var: Any) -> bool:
    """A ``ResourceVariable`` itself (not a distributed, sharded or mirrored wrapper)."""
    return type(var).__name__ == "ResourceVariable"


def aggregates_in_apply_only(strategy: Any) -> bool:
    """Whether OptimizerV2's ``apply_gradients`` refuses ``experimental_aggregate_gradients=False``
    under ``strategy`` (Keras 2 does for ``ParameterServerStrategy`` and ``CentralStorageStrategy``)."""
    return isinstance(strategy, (tf.distribute.experimental.ParameterServerStrategy,
                                 tf.distribute.experimental.CentralStorageStrategy,
                                 tf.compat.v1.distribute.experimental.ParameterServerStrategy,
                                 tf.compat.v1.distribute.experimental.CentralStorageStrategy))


def is_parameter_server(strategy: Any) -> bool:
    return isinstance(strategy, (tf.distribute.experimental.ParameterServerStrategy,
                                 tf.compat.v1.distribute.experimental.ParameterServerStrategy))


def maybe_merge_call(fn: Any, strategy: Any, *args: Any) -> Any:
    """Call ``fn(strategy, *args)`` in cross-replica context (a merge call if needed)."""
    return tf.__internal__.distribute.interim.maybe_merge_call(fn, strategy, *args)


def is_sharded_variable(var: Any) -> bool:
    return isinstance(var, tf.__internal__.distribute.ShardedVariable)


def op_dtypes(name: str) -> tuple[tf.DType, ...]:
    """The dtypes that the attribute ``T`` of the loaded op ``name`` allows, as its ``REGISTER_OP``
    declares them: read from TensorFlow's op registry, which has no public reader, so that a
    kernel's dtypes are declared once, in its C++ source."""
    from tensorflow.python.framework import op_def_registry

    attr = next(attr for attr in op_def_registry.get(name).attr if attr.name == "T")
    return tuple(tf.as_dtype(dtype) for dtype in attr.allowed_values.list.type)
