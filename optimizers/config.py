"""Configs and the registry.

``get_config`` is read from the constructor's signature (subclasses write no
``get_config``/``from_config``); every public class is registered with Keras
when it is defined, so ``load_model`` needs no ``custom_objects``; rules and
wrapped optimizers are nested in configs by their registered names.
"""

from __future__ import annotations

import copy
import functools
import importlib
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from optimizers.keras_compat import (
    KERAS3_HINT,
    LearningRateSchedule,
    OptimizerV2,
    in_safe_mode,
    is_keras3_object,
    keras,
)

__all__ = ["register", "signature_config", "serialize_hyperparameter", "deserialize_values", "serialize_object",
           "deserialize_object", "serialize_optimizer", "deserialize_optimizer", "resolve_optimizer"]


def register(cls: type) -> None:
    """Register ``cls`` as ``"<package>>Name"`` and as ``"Name"`` (never replacing an entry)."""
    package = cls.__module__.split(".")[0]
    keras.utils.register_keras_serializable(package=package)(cls)
    keras.utils.get_custom_objects().setdefault(cls.__name__, cls)


@functools.cache
def signature_parameters(cls: type) -> tuple[str, ...]:
    """The named arguments of ``cls.__init__`` that ``get_config`` keeps (all but ``self`` and ``name``)."""
    return tuple(pname for pname, param in inspect.signature(cls.__init__).parameters.items()
                 if pname not in ("self", "name") and param.kind not in (param.VAR_KEYWORD, param.VAR_POSITIONAL))


def signature_config(obj: Any, value_of: Callable[[str], Any]) -> dict[str, Any]:
    """``{argument: value_of(argument)}`` for each named argument of ``type(obj).__init__``."""
    return {pname: value_of(pname) for pname in signature_parameters(type(obj))}


def attribute_value(obj: Any, pname: str) -> Any:
    """``obj.<pname>``, or an error that says how to make it readable."""
    try:
        return obj.__getattribute__(pname)
    except AttributeError:
        pass
    try:
        return obj.__getattr__(pname)
    except AttributeError:
        raise NotImplementedError(
            f"{type(obj).__name__}.get_config() cannot find constructor argument `{pname}`: declare it "
            f"with add_hyperparameter() or store it as self.{pname}") from None


class UnsavableError(ValueError):
    """Raised by ``get_config()`` of what a config can hold in memory but no file can name (a
    schedule's unregistered function): Keras calls it for each object it writes to a file."""


def serialize_hyperparameter(value: Any) -> Any:
    """A hyperparameter as a config value: schedules serialized, callables and tensors evaluated.
    A schedule whose config holds what no file can name keeps its config as it is, for in-memory
    copies (``from_config(get_config())``); writing it to a file raises :class:`UnsavableError`."""
    if isinstance(value, LearningRateSchedule):
        try:
            return keras.optimizers.schedules.serialize(value)
        except UnsavableError:
            return {"class_name": keras.utils.get_registered_name(type(value)), "config": value.get_config()}
    if callable(value) and not tf.is_tensor(value):
        value = value()
    if tf.is_tensor(value):
        value = value.numpy()
    return value.item() if isinstance(value, (np.generic, np.ndarray)) else value


def deserialize_values(config: dict[str, Any], custom_objects: dict | None = None) -> dict[str, Any]:
    """A copy of ``config`` with serialized schedules turned back into schedules. A registered
    schedule class is found by its registered name, also where Keras reads the config the legacy
    way (``.h5`` files), which looks up the bare class name only."""
    config = dict(config)
    for key, value in list(config.items()):
        if isinstance(value, dict) and "class_name" in value and "config" in value:
            registered = value.get("registered_name")
            cls = keras.utils.get_registered_object(registered) if isinstance(registered, str) else None
            found = custom_objects if cls is None else {value["class_name"]: cls, **(custom_objects or {})}
            config[key] = keras.optimizers.schedules.deserialize(value, custom_objects=found)
    return config


def serialize_object(obj: Any) -> dict[str, Any]:
    """``{"class_name": registered name, "config": obj.get_config()}`` (a rule in a config)."""
    return {"class_name": keras.utils.get_registered_name(type(obj)), "config": obj.get_config()}


def deserialize_object(config: Any, base: type, description: str) -> Any:
    """Inverse of :func:`serialize_object` for a subclass of ``base``."""
    if isinstance(config, base):
        return config
    cls = None
    if isinstance(config, dict) and isinstance(config.get("class_name"), str):
        cls = keras.utils.get_registered_object(config["class_name"])
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ValueError(f"Unknown {description} config: no registered {base.__name__} of that name. "
                         f"Received: {config!r}")
    return cls.from_config(config.get("config", {}))


def serialize_optimizer(optimizer: Any) -> dict[str, Any]:
    return keras.optimizers.serialize(optimizer)


def deserialize_optimizer(config: Any, custom_objects: dict | None = None) -> Any:
    """An optimizer from its nested config (built-in or registered class)."""
    if not isinstance(config, dict):
        return config
    config = copy.deepcopy(config)  # Keras's deserialize edits the dict it is given
    # A registered class first: Keras maps any class named like a built-in ("Adam") to the built-in.
    registered = keras.utils.get_registered_object(config.get("registered_name") or "", custom_objects)
    if registered is not None:
        return registered.from_config(config["config"], custom_objects=custom_objects)
    module = config.get("module")
    try:
        optimizer = keras.optimizers.deserialize(copy.deepcopy(config), custom_objects=custom_objects,
                                                 use_legacy_format=module is None, use_legacy_optimizer=True)
    except TypeError:
        # Keras found a class of that name without the module (a built-in's name): the module
        # cannot be what failed, and in safe mode it is not imported just to say so.
        _refuse_in_safe_mode(config)
        _check_importable(config)
        raise
    if isinstance(optimizer, str) and module:
        # Keras returns the class name of a class it does not know; the config names its module,
        # which Keras imports for a top-level object (``load_model``) and so do we for a nested one.
        _check_importable(config)
        optimizer = keras.saving.deserialize_keras_object(config, custom_objects=custom_objects)
    return optimizer


def _refuse_in_safe_mode(config: dict) -> None:
    """In safe mode (``load_model``'s default for ``.keras`` files), refuse a config whose class
    Keras found by name elsewhere, instead of importing the module it names: importing runs the
    module's code, and the class is not there to find."""
    module = config.get("module")
    if module and in_safe_mode() and module.split(".")[0] not in ("keras", "tf_keras"):
        raise ValueError(f"This file is loaded in safe mode and its optimizer config names class "
                         f"{config.get('class_name')!r} of module {module!r}, which is not Keras': it is not imported. "
                         "Register the class (@keras.utils.register_keras_serializable), pass it in "
                         "`custom_objects`, or load with safe_mode=False if you trust the file. "
                         f"Received: {config!r}")


def _check_importable(config: dict) -> None:
    """Refuse, saying what to do, a config whose class's module (``config["module"]``) does not import."""
    if not config.get("module"):
        return
    try:
        importlib.import_module(config["module"])
    except ImportError as error:
        raise ValueError(f"Optimizer class {config.get('class_name')!r}: its module {config['module']!r} does "
                         f"not import ({error}); make it importable or pass the class in `custom_objects`. "
                         f"Received: {config!r}") from None


def resolve_optimizer(optimizer: Any, argument: str = "optimizer") -> OptimizerV2:
    """A Keras 2 optimizer from an instance or a name such as ``"adam"``."""
    if isinstance(optimizer, str):
        try:
            optimizer = keras.optimizers.get(optimizer, use_legacy_optimizer=True)
        except ValueError:
            raise ValueError(f"`{argument}` names no Keras optimizer. Received: {argument}={optimizer!r}") from None
    if is_keras3_object(optimizer):
        raise TypeError(f"Received a Keras 3 optimizer: {argument}={optimizer!r}. {KERAS3_HINT}")
    if not isinstance(optimizer, OptimizerV2):
        raise TypeError(f"`{argument}` must be a Keras 2 (OptimizerV2) optimizer, for example "
                        "keras.optimizers.legacy.Adam(), or a name such as 'adam'. "
                        f"Received: {argument}={optimizer!r}")
    return optimizer
