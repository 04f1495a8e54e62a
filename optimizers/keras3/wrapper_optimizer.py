"""``WrapperOptimizer``: a Keras 3 optimizer around another one, running a wrapper class's hooks."""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Iterable
from typing import Any

import keras
import tensorflow as tf

from optimizers import config as config_lib
from optimizers import slots as slots_lib
from optimizers.hyperparameters import check_number
from optimizers.keras3.compat import built_variables, strategy_of, variable_index
from optimizers.keras3.rule_optimizer import add_slot, keras2_text
from optimizers.keras_compat import keras as keras2
from optimizers.keras_compat import optimizer_name
from optimizers.optimizer_state import update_on_every_replica
from optimizers.updaters import get_updater
from optimizers.wrappers.averaging import NO_AVERAGES, AveragingWrapper, assign_average, swap_values
from optimizers.wrappers.base import OptimizerWrapper
from optimizers.wrappers.delegation import CLIP_KWARGS

__all__ = ["AveragingOptimizer", "WrapperOptimizer", "keras3_optimizer", "keras3_wrapper_class"]


class _Held:
    """Holds the Keras 2 wrapper object out of Keras 3's and TensorFlow's attribute tracking."""

    def __init__(self, wrapper: OptimizerWrapper) -> None:
        self.wrapper = wrapper


def _placeholder() -> keras2.optimizers.Optimizer:
    """The inner optimizer of the held Keras 2 wrapper: never stepped (the Keras 3 inner optimizer
    steps), it only lets the wrapper object hold its hyperparameters, options and hooks."""
    return keras2.optimizers.legacy.SGD()


class WrapperOptimizer(keras.optimizers.Optimizer):
    """A Keras 3 optimizer around a Keras 3 ``optimizer`` (``inner_optimizer``), running the hooks of
    ``wrapper_class`` (an :class:`~optimizers.OptimizerWrapper` subclass): its ``slot_specs`` per
    variable, ``before_step``, then the inner optimizer's whole ``apply``, then ``prepare`` and
    ``after_step`` of each wrapped variable. The step counter and the learning rate are the inner
    optimizer's; the wrapper's hyperparameters and options are read and set as attributes."""

    wrapper_class: type[OptimizerWrapper]

    def __init__(self, optimizer: Any, *args: Any, **kwargs: Any) -> None:
        if keras.backend.backend() != "tensorflow":
            raise ValueError(f"{type(self).__name__} runs on Keras 3's TensorFlow backend (KERAS_BACKEND=tensorflow). "
                             f"Received: the {keras.backend.backend()!r} backend")
        inner = keras3_optimizer(optimizer)
        if "jit_compile" in kwargs:
            raise TypeError(f"{type(self).__name__}() takes no `jit_compile` on Keras 3, which compiles the whole "
                            f"step: model.compile(jit_compile=...). Received: jit_compile={kwargs['jit_compile']!r}")
        clipping = {key: kwargs.pop(key) for key in CLIP_KWARGS if kwargs.get(key) is not None}
        _check_clipping(inner, clipping)
        held = self.wrapper_class(_placeholder(), *args, **kwargs)  # checks every argument
        super().__init__(learning_rate=0.0, name=optimizer_name(held))
        self._held = _Held(held)
        self.inner_optimizer = inner
        for key, value in clipping.items():
            setattr(inner, key, value)

    @property
    def wrapper(self) -> OptimizerWrapper:
        """The Keras 2 wrapper object whose hooks, hyperparameters and options this one runs."""
        return self.__dict__["_held"].wrapper

    # ----------------------------------------------------------- attributes
    def _is_wrapper_attribute(self, name: str) -> bool:
        held = self.__dict__.get("_held")
        return (held is not None and not name.startswith("_") and name not in ("name", "optimizer")
                and (name in held.wrapper.hyperparameter_names
                     or name in config_lib.signature_parameters(self.wrapper_class)))

    def __getattr__(self, name: str) -> Any:
        if self._is_wrapper_attribute(name):
            return getattr(self.wrapper, name)
        inner = self.__dict__.get("inner_optimizer")
        if inner is not None and not name.startswith("_"):
            return getattr(inner, name)  # the inner optimizer's hyperparameters, as on Keras 2
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        inner = self.__dict__.get("inner_optimizer")
        if self._is_wrapper_attribute(name):
            setattr(self.wrapper, name, value)  # the wrapper checks it (and refuses options after a step)
        elif (inner is not None and not name.startswith("_") and name not in self.__dict__
              and not hasattr(type(self), name) and hasattr(inner, name)):
            setattr(inner, name, value)  # the inner optimizer's hyperparameter: it checks it
        else:
            super().__setattr__(name, value)

    @property
    def learning_rate(self) -> Any:
        """The inner optimizer's learning rate (read and set)."""
        return self.inner_optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        self.inner_optimizer.learning_rate = value

    @property
    def iterations(self) -> Any:
        """The inner optimizer's step counter."""
        return self.inner_optimizer.iterations

    # ----------------------------------------------------------------- state
    def build(self, var_list: list) -> None:
        """The inner optimizer's variables, then the wrapper's slots of each wrapped variable."""
        if not self.inner_optimizer.built:
            self.inner_optimizer.build(var_list)
        super().build(var_list)
        wrapper = self.wrapper
        wrapper.lock_options()
        self._wrapper_slots = []
        for var in var_list:
            wrapped = (not getattr(var, "overwrite_with_gradient", False) and not self._owned_by_updater(var)
                       and wrapper.wraps(var.value))
            specs = slots_lib.as_slot_specs(wrapper.slot_specs(var.value)) if wrapped else ()
            self._wrapper_slots.append({spec.name: add_slot(self, var, spec) for spec in specs})

    def _owned_by_updater(self, var: Any) -> bool:
        """Whether a variable updater moves ``var`` in the inner optimizer (its ``updaters=``, or
        ``optimizers.set_updater``): such a variable gets none of the wrapper's slots."""
        lookup = getattr(getattr(self.inner_optimizer, "rule", None), "updater_for", None)  # this library's rules
        return (lookup(var.value) if lookup is not None else get_updater(var.value)) is not None

    @property
    def variables(self) -> list:
        return super().variables + self.inner_optimizer.variables

    def slots_of(self, var: Any) -> dict[str, Any]:
        """The wrapper's slots of ``var`` (Keras 3 variables, by slot name); none if it has none."""
        index = variable_index(self, var)
        return {} if index is None else dict(self._wrapper_slots[index])

    # ------------------------------------------------------------------ step
    def apply(self, grads: Iterable, trainable_variables: Iterable | None = None) -> None:
        """The wrapper's ``before_step``, the inner optimizer's ``apply``, then the wrapper's
        ``after_step`` of each wrapped variable that has a gradient."""
        grads = list(grads)
        if trainable_variables is None:
            if not self.built:
                raise ValueError("When passing `grads` without `variables`, the optimizer must already be built "
                                 "on a list of variables. Call `optimizer.build(trainable_variables)` first.")
            trainable_variables = built_variables(self)
        variables = list(trainable_variables)
        if not self.built:
            with keras.name_scope(self.name, caller=self):
                self.build(variables)
        if type(self.wrapper).before_step is not OptimizerWrapper.before_step:
            changed = list(self.wrapper.before_step([(g, v.value) for g, v in zip(grads, variables)]))
            grads = [g for g, _ in changed]
        # An inner optimizer that may take no step on a call (Keras 3's gradient accumulation, a
        # LossScaleOptimizer's non-finite gradients) does not count it: then after_step waits too.
        inner = self.inner_optimizer
        may_skip = bool(inner.gradient_accumulation_steps) or isinstance(inner, keras.optimizers.LossScaleOptimizer)
        before = tf.identity(tf.convert_to_tensor(self.iterations)) if may_skip else None
        # The wrapper's hyperparameters that can change by themselves are checked before the inner
        # step (eagerly: raised now), so that a refused step changes nothing.
        checks = self.wrapper.checked_hyperparameters(tf.convert_to_tensor(self.iterations))
        with tf.control_dependencies(checks if not tf.executing_eagerly() else []):
            inner.apply(grads, variables)
        wrapped = [v for g, v in zip(grads, variables) if g is not None and self.slots_of(v)]
        if wrapped and type(self.wrapper).after_step is not OptimizerWrapper.after_step:
            tf.__internal__.distribute.interim.maybe_merge_call(self._after_step, strategy_of(self), wrapped,
                                                                before)

    def _after_step(self, distribution: tf.distribute.Strategy, wrapped: list, before: Any) -> None:
        """The wrapper's ``after_step`` of each variable of ``wrapped``, on every replica's copy, if the
        inner optimizer took a step (its ``iterations`` was ``before`` and grew)."""
        steps = tf.convert_to_tensor(self.iterations)  # read after the inner optimizer counted its step
        stepped = None if before is None else steps > before
        steps_before = steps - 1
        coefficients: dict = {}
        for var in wrapped:
            dtype = tf.as_dtype(var.value.dtype).base_dtype
            if dtype not in coefficients:
                coefficients[dtype] = self.wrapper.step_coefficients(dtype, steps_before)
            slots = self.slots_of(var)
            after = functools.partial(self._after_one, tuple(slots), coefficients[dtype], stepped)
            distribution.extended.update(var.value, after, args=tuple(slot.value for slot in slots.values()),
                                         group=False)

    def _after_one(self, names: tuple, coefficients: dict, stepped: Any, var: tf.Variable, *slots: tf.Variable) -> Any:
        def after() -> Any:
            update = self.wrapper.after_step(var, dict(zip(names, slots)), coefficients)
            with tf.control_dependencies([] if update is None else [update]):
                return tf.no_op()

        return after() if stepped is None else tf.cond(stepped, after, tf.no_op)

    def finalize_variable_values(self, var_list: list) -> None:
        self.inner_optimizer.finalize_variable_values(var_list)

    def _for_each(self, pairs: list, fn: Any) -> None:
        """``fn(var, other)`` of each ``(var, other)`` pair of Keras 3 variables, on every
        replica's copy, from any context."""
        update_on_every_replica((var.value, fn, (other.value,)) for var, other in pairs)

    # ---------------------------------------------------------------- config
    def get_config(self) -> dict[str, Any]:
        """The wrapper's arguments, the inner optimizer's Keras 3 config nested."""
        config = {key: value for key, value in self.wrapper.get_config().items()
                  if key not in ("optimizer", "jit_compile", "is_legacy_optimizer", *CLIP_KWARGS)}
        return {"optimizer": keras.optimizers.serialize(self.inner_optimizer), **config}

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: dict | None = None) -> WrapperOptimizer:
        config = copy.deepcopy(config)  # Keras 3's deserialize changes the nested config it reads
        if "optimizer" not in config:
            raise ValueError(f"{cls.__name__} wraps an optimizer, which its config names under 'optimizer'. "
                             f"Received: config={config!r}")
        inner = keras.optimizers.deserialize(config.pop("optimizer"), custom_objects=custom_objects)
        return cls(inner, **config_lib.deserialize_values(config, custom_objects))


class AveragingOptimizer(WrapperOptimizer):
    """A :class:`WrapperOptimizer` of an :class:`~optimizers.AveragingWrapper` (an ``"average"``
    slot per weight): gives the model its averages, with or without a ``tf.distribute`` strategy."""

    has_evaluation_point = True  # its averages: not the inner optimizer's answer, which ``__getattr__`` would give

    def average_of(self, var: Any) -> Any:
        """The average of ``var`` (a Keras 3 variable), or ``None`` if it has none."""
        return self.slots_of(var).get("average")

    @property
    def has_shadow_copy(self) -> bool:
        """Whether averages exist (after a step, :meth:`shadow_copy` or a load)."""
        return any(self.average_of(var) is not None for var in built_variables(self))

    def shadow_copy(self, model_weights: Iterable) -> None:
        """Create the averages of ``model_weights`` now, equal to their values (builds the optimizer)."""
        if not self.built:
            self.build(list(model_weights))

    def assign_average_vars(self, var_list: Iterable) -> None:
        """Set each variable of ``var_list`` to its average (those without one are left as they are)."""
        self._for_each(self._with_averages(var_list), assign_average)

    def swap_weights(self) -> None:
        """Exchange the averaged weights and the trained ones; twice restores both exactly."""
        pairs = self._with_averages(built_variables(self))
        if not pairs:
            raise ValueError(NO_AVERAGES)
        self._for_each(pairs, swap_values)

    def _with_averages(self, var_list: Iterable) -> list:
        pairs = [(var, self.average_of(var)) for var in var_list]
        return [(var, average) for var, average in pairs if average is not None]


def keras3_optimizer(optimizer: Any, argument: str = "optimizer") -> keras.optimizers.Optimizer:
    """A Keras 3 optimizer from an instance or a name such as ``"adam"`` (Keras 3's own)."""
    if isinstance(optimizer, str):
        try:
            optimizer = keras.optimizers.get(optimizer)
        except ValueError:
            raise ValueError(f"`{argument}` names no Keras 3 optimizer. Received: {argument}={optimizer!r}") from None
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError(f"`{argument}` must be a Keras 3 optimizer (such as `optimizers.keras3.Adam()` or "
                        f"`keras.optimizers.Adam()`) or a name such as 'adam'. Received: {argument}={optimizer!r}")
    return optimizer


def _check_clipping(inner: keras.optimizers.Optimizer, clipping: dict[str, Any]) -> None:
    """Refuse ``clipping`` given to the wrapper: each a number >= 0, none the inner optimizer has, and
    one kind in all (Keras 3 takes one of ``clipnorm``, ``clipvalue`` and ``global_clipnorm``)."""
    for key, value in clipping.items():
        check_number(key, value, low=0.0)
        if getattr(inner, key, None) is not None:
            raise ValueError(f"`{key}` is set both on the wrapper and on the inner optimizer. Received: {key}={value!r}")
    given = {key: value for key in CLIP_KWARGS
             if (value := clipping.get(key, getattr(inner, key, None))) is not None}
    if len(given) > 1:
        raise ValueError("Only one of `clipnorm`, `clipvalue` and `global_clipnorm` can be set, with the inner "
                         f"optimizer's. Received: {', '.join(f'{k}={v!r}' for k, v in given.items())}")


def keras3_wrapper_class(wrapper_class: type[OptimizerWrapper]) -> type:
    """The Keras 3 optimizer class of ``wrapper_class`` (an :class:`~optimizers.OptimizerWrapper`
    subclass that uses only the public hooks): the same name, signature and numbers, around any
    Keras 3 optimizer, registered for ``.keras`` files as ``"optimizers.keras3>Name"``."""
    if not (isinstance(wrapper_class, type) and issubclass(wrapper_class, OptimizerWrapper)):
        raise TypeError(f"`wrapper_class` must be an OptimizerWrapper subclass. Received: wrapper_class={wrapper_class!r}")
    base = AveragingOptimizer if issubclass(wrapper_class, AveragingWrapper) else WrapperOptimizer
    cls = type(wrapper_class.__name__, (base,), {
        "wrapper_class": wrapper_class,
        "__doc__": f"Keras 3's {wrapper_class.__name__}, around a Keras 3 optimizer: the hooks, arguments and numbers "
                   f"of :class:`optimizers.{wrapper_class.__name__}`, but ``jit_compile``, which on Keras 3 is the "
                   "model's (``model.compile(jit_compile=...)``).\n\n" + keras2_text(wrapper_class),
        "__module__": "optimizers.keras3",  # where users import it
        "__qualname__": wrapper_class.__name__,
    })
    params = [p for p in inspect.signature(wrapper_class.__init__).parameters.values()
              if p.name != "self" and p.kind is not p.VAR_KEYWORD]
    params += [inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=None) for key in CLIP_KWARGS]
    cls.__signature__ = inspect.Signature(params)
    return keras.saving.register_keras_serializable(package="optimizers.keras3")(cls)

