"""``CustomOptimizerV2``: OptimizerV2's private hooks, implemented once.

The template owns ``_create_slots``, ``_set_hyper``, ``_prepare_local``,
``_resource_apply_dense``, ``_resource_apply_sparse``, gradient aggregation,
clipping, weight decay and variable updaters. A subclass fills in public hooks
(see the class docstring) and nothing else.
"""

from __future__ import annotations

import inspect
import math
import re
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

import slots as slots_lib
from optimizers import saving
from optimizers import updaters as updaters_lib
from optimizers.keras_compat import (
    KERAS3_HINT,
    LearningRateSchedule,
    OptimizerV2,
    install_saving_hooks,
    is_keras3_object,
    keras,
)
from optimizers.weight_decay import DecoupledWeightDecay

__all__ = ["CustomOptimizerV2", "variable_key"]

_BASE_KWARGS = ("clipnorm", "clipvalue", "global_clipnorm", "lr", "decay", "gradient_aggregator",
                "gradient_transformers")
_TEMPLATE_KWARGS = ("updaters", "jit_compile", "weight_decay", "exclude_from_weight_decay",
                    "scale_weight_decay_by_lr")


# Variables up to this size share one XLA call per step (measured: 64 variables of
# 125k floats, 1.35x the fused Adam kernel with a call each, 1.05x batched; 8 of 1M,
# 1.16x with a call each, 1.3x batched).
_XLA_BATCH_MAX_ELEMENTS = 2**18


def variable_key(var: Any) -> Any:
    """A key that identifies ``var`` through distributed containers.

    Under ``tf.distribute`` the hooks see a per-replica component; its key is
    that of the distributed variable it belongs to.
    """
    var = updaters_lib.distributed_container(var)
    if getattr(var, "_in_graph_mode", False):
        return var._shared_name
    return var._unique_id


def check_number(name: str, value: Any, low: float | None = None, high: float | None = None,
                 low_inclusive: bool = True, high_inclusive: bool = True) -> None:
    """Validate a hyperparameter: a number, tensor, callable or schedule, in range.

    Raises ``TypeError``/``ValueError`` that name the argument and repeat the value.
    Callables and schedules are checked when called, not here.
    """
    if isinstance(value, LearningRateSchedule) or (callable(value) and not tf.is_tensor(value)):
        return
    if isinstance(value, (bool, np.bool_)) or isinstance(value, str) or value is None:
        raise TypeError(f"`{name}` must be a float, a tensor, a callable or a LearningRateSchedule. "
                        f"Received: {name}={value!r}")
    if tf.is_tensor(value):
        if not (value.dtype.is_floating or value.dtype.is_integer) or value.shape.rank not in (0, None):
            raise TypeError(f"`{name}` must be a scalar float tensor. Received: {name}={value!r}")
        if isinstance(value, tf.Variable) or not hasattr(value, "numpy"):
            return  # symbolic, or a variable the user may change: checked by its owner
        number = float(value.numpy())
    else:
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"`{name}` must be a float, a tensor, a callable or a LearningRateSchedule. "
                            f"Received: {name}={value!r}") from None
    if math.isnan(number):
        raise ValueError(f"`{name}` must not be NaN. Received: {name}={value!r}")
    too_low = low is not None and (number < low or (not low_inclusive and number == low))
    too_high = high is not None and (number > high or (not high_inclusive and number == high))
    if too_low or too_high:
        interval = "{}{}, {}{}".format("[" if low_inclusive else "(", "-inf" if low is None else low,
                                       "inf" if high is None else high, "]" if high_inclusive else ")")
        raise ValueError(f"`{name}` must be in {interval}. Received: {name}={value!r}")


class CustomOptimizerV2(OptimizerV2):
    r"""Base class for Keras 2 (OptimizerV2) optimizers, with public hooks.

    Override these, and nothing else:

    ``__init__(self, ..., name="MyOpt", **kwargs)``
        Call ``super().__init__(name, **kwargs)``, then declare each
        hyperparameter once with :meth:`add_hyperparameter` (float, tensor,
        callable or ``LearningRateSchedule``, range-checked). Store every other
        constructor argument as an attribute of the same name:
        :meth:`get_config` reads the constructor's signature, so subclasses do
        not write ``get_config``/``from_config``.
    ``slot_specs(self) -> Sequence[SlotSpec | str]``
        The per-variable slots of the rule. Defaults to none.
    ``prepare(self, dtype, coefficients) -> None``
        Optional. Runs once per (device, dtype) per step. ``coefficients``
        already holds every hyperparameter as a tensor of ``dtype`` (schedules
        evaluated at the current step, ``learning_rate`` with legacy ``decay``)
        and ``"step"`` (the 1-based step number); add derived values to it.
    ``update_dense(self, grad, var, slots, coefficients) -> op``
        Required. The rule for a dense gradient. ``slots`` maps slot names to
        this variable's slot variables.
    ``update_sparse(self, grad, var, indices, slots, coefficients) -> op``
        Optional. ``grad`` holds the rows ``indices``, which are unique
        (repeated indices were summed). The default scatters the rows into a
        dense gradient and calls ``update_dense``, which is always correct.

    Guaranteed by the template: slots exist for exactly the variables that use
    the rule; hooks receive per-replica variables inside the strategy's update
    context; clipping, weight decay and updaters happen before/around your rule
    (see DESIGN.md's six steps); ``iterations`` advances once per step.

    Args:
        name: Prefix of slot names and name scopes.
        updaters: ``{var.ref() or regex searched in var.name: VariableUpdater}``
            (or a list of ``(variable or regex, updater)`` pairs): those
            variables follow the updater instead of this optimizer's rule.
        jit_compile: Compile the dense updates (decay included) with XLA:
            one call per step for the small variables, one per large variable.
            Defaults to ``True``, measured faster on CPU (see ``benchmarks/``).
        weight_decay: Decoupled weight decay (float, tensor, callable or
            schedule); ``None`` for none. See :class:`DecoupledWeightDecay`.
        exclude_from_weight_decay: Regexes searched in ``var.name``; matching
            variables are not decayed.
        scale_weight_decay_by_lr: Decay by ``lr * weight_decay`` (Keras 3,
            PyTorch, optax) instead of ``weight_decay`` alone (TensorFlow
            Addons). Defaults to ``False``.
        **kwargs: ``clipnorm``, ``clipvalue``, ``global_clipnorm`` (ordinary
            variables only), ``decay`` (legacy inverse-time learning-rate decay).

    Example, SGD with momentum in full:

    >>> import tensorflow as tf
    >>> import optimizers
    >>> class MomentumSGD(optimizers.CustomOptimizerV2):
    ...     def __init__(self, learning_rate=0.01, momentum=0.9, name="MomentumSGD", **kwargs):
    ...         super().__init__(name, **kwargs)
    ...         self.add_hyperparameter("learning_rate", learning_rate, low=0.0)
    ...         self.add_hyperparameter("momentum", momentum, low=0.0, high=1.0)
    ...     def slot_specs(self):
    ...         return ["velocity"]
    ...     def update_dense(self, grad, var, slots, coefficients):
    ...         velocity = slots["velocity"]
    ...         velocity.assign(coefficients["momentum"] * velocity - coefficients["learning_rate"] * grad)
    ...         return var.assign_add(velocity)
    >>> var = tf.Variable([1.0, 2.0])
    >>> opt = MomentumSGD(learning_rate=0.1)
    >>> _ = opt.apply_gradients([(tf.constant([1.0, 1.0]), var)])
    >>> var.numpy().tolist()
    [0.8999999761581421, 1.899999976158142]
    >>> MomentumSGD.from_config(opt.get_config()).get_config() == opt.get_config()
    True
    """

    def __init__(self, name: str, *, updaters: Mapping[Any, updaters_lib.VariableUpdater] | None = None,
                 jit_compile: bool = True, weight_decay: Any = None,
                 exclude_from_weight_decay: Sequence[str] | None = None,
                 scale_weight_decay_by_lr: bool = False, **kwargs: Any) -> None:
        cls_name = type(self).__name__
        for key, value in kwargs.items():
            if key not in _BASE_KWARGS:
                raise TypeError(f"{cls_name}() got an unexpected keyword argument `{key}`. "
                                f"Received: {key}={value!r}. Allowed keyword arguments: "
                                f"{', '.join(_BASE_KWARGS + _TEMPLATE_KWARGS)}.")
            if key in ("clipnorm", "clipvalue", "global_clipnorm", "decay", "lr") and value is not None:
                check_number(key, value, low=0.0)
        if not isinstance(name, str) or not name:
            raise ValueError(f"`name` must be a non-empty string. Received: name={name!r}")
        if not isinstance(jit_compile, bool):
            raise TypeError(f"`jit_compile` must be a bool. Received: jit_compile={jit_compile!r}")
        patterns, by_key = self._check_updaters(updaters)
        decay = None
        if weight_decay is not None:
            decay = DecoupledWeightDecay(weight_decay, exclude_from_weight_decay, scale_weight_decay_by_lr)
        elif exclude_from_weight_decay:
            raise ValueError("`exclude_from_weight_decay` needs a `weight_decay`. Received: "
                             f"weight_decay=None, exclude_from_weight_decay={exclude_from_weight_decay!r}")
        self._lr_alias = kwargs.pop("lr", None)
        if self._lr_alias is not None:
            warnings.warn("The `lr` argument is deprecated, use `learning_rate` instead.", stacklevel=2)
        super().__init__(name, **kwargs)
        self._set_hyper("decay", self._initial_decay)  # a checkpointed variable in Keras 2's built-ins and TFA
        self._hyper_checks: dict[str, Callable[[Any], None]] = {}
        self._updater_patterns, self._updaters_by_key = patterns, by_key
        self.jit_compile = jit_compile
        self._weight_decay = decay
        self._decay_var_keys: set | None = None
        self._specs_cache: tuple[slots_lib.SlotSpec, ...] | None = None
        self._jit_steps: dict = {}  # one XLA function per (shape, dtype, decay): no retracing
        if decay is not None:
            self.add_hyperparameter("weight_decay", weight_decay, low=0.0)

    # ------------------------------------------------------------------ hooks
    def slot_specs(self) -> Sequence[slots_lib.SlotSpec | str]:
        """The slots each variable following this rule gets. Override."""
        return ()

    def prepare(self, dtype: tf.DType, coefficients: dict[str, tf.Tensor]) -> None:
        """Add per-step coefficients for variables of ``dtype``. Optional override."""

    def update_dense(self, grad: tf.Tensor, var: tf.Variable, slots: dict[str, tf.Variable],
                     coefficients: dict[str, tf.Tensor]) -> Any:
        """Apply the rule for a dense gradient and return the update. Override."""
        raise NotImplementedError(f"{type(self).__name__} must implement update_dense(grad, var, slots, coefficients)")

    def update_sparse(self, grad: tf.Tensor, var: tf.Variable, indices: tf.Tensor,
                      slots: dict[str, tf.Variable], coefficients: dict[str, tf.Tensor]) -> Any:
        """Apply the rule to rows ``indices`` (unique). Defaults to the dense rule
        on the gradient scattered into zeros; override for speed."""
        dense = tf.scatter_nd(tf.expand_dims(indices, -1), grad, tf.shape(var, out_type=indices.dtype))
        return self.update_dense(dense, var, slots, coefficients)

    # -------------------------------------------------------- hyperparameters
    def add_hyperparameter(self, name: str, value: Any, *, low: float | None = None, high: float | None = None,
                           low_inclusive: bool = True, high_inclusive: bool = True) -> None:
        """Declare hyperparameter ``name`` (call in ``__init__``).

        ``value`` may be a float, a tensor, a callable returning one, or a
        ``LearningRateSchedule`` (evaluated at ``iterations``). Numbers are
        checked against ``[low, high]`` now and whenever the attribute is set.
        """
        if name == "learning_rate" and self._lr_alias is not None:
            value = self._lr_alias

        def check(v: Any) -> None:
            check_number(name, v, low, high, low_inclusive, high_inclusive)

        check(value)
        self._hyper_checks[name] = check
        self._set_hyper(name, value)

    def _set_hyper(self, name: str, value: Any) -> None:
        check = getattr(self, "_hyper_checks", {}).get(name)
        if check is not None:
            check(value)
        super()._set_hyper(name, value)

    def hyperparameter(self, name: str, dtype: tf.DType = tf.float32) -> tf.Tensor:
        """The current value of hyperparameter ``name`` as a ``dtype`` tensor."""
        if name == "learning_rate":
            return self._decayed_lr(dtype)
        value = self._get_hyper(name)
        if isinstance(value, LearningRateSchedule):
            value = value(self.iterations)
        return tf.cast(value, dtype)

    # ---------------------------------------------------------------- updaters
    @staticmethod
    def _check_updaters(updaters: Any) -> tuple[dict, dict]:
        """``({regex: updater}, {variable_key: updater})`` from the ``updaters`` argument."""
        if updaters is None:
            return {}, {}
        if isinstance(updaters, Mapping):
            pairs = list(updaters.items())
        elif isinstance(updaters, (list, tuple)) and all(isinstance(p, tuple) and len(p) == 2 for p in updaters):
            pairs = list(updaters)
        else:
            raise TypeError("`updaters` must be a mapping {var.ref() or regex: VariableUpdater} or a list of "
                            f"(variable or regex, VariableUpdater) pairs. Received: updaters={updaters!r}")
        patterns, by_key = {}, {}
        for target, updater in pairs:
            updaters_lib.check_updater(updater)
            if hasattr(target, "deref"):  # a variable's ref(): variables are not hashable
                target = target.deref()
            if isinstance(target, str):
                try:
                    re.compile(target)
                except re.error as error:
                    raise ValueError(f"`updaters` key {target!r} is not a valid regex ({error}). "
                                     f"Received: updaters={updaters!r}") from None
                patterns[target] = updater
            elif isinstance(target, tf.Variable):
                by_key[variable_key(target)] = updater
            else:
                raise TypeError("`updaters` keys must be variables (var.ref() in a dict) or regex strings. "
                                f"Received key {target!r} in updaters={updaters!r}")
        return patterns, by_key

    def updater_for(self, var: tf.Variable) -> updaters_lib.VariableUpdater | None:
        """The updater that replaces this optimizer's rule for ``var``, or ``None``."""
        var = updaters_lib.distributed_container(var)
        updater = self._updaters_by_key.get(variable_key(var))
        if updater is not None:
            return updater
        for pattern, updater in self._updater_patterns.items():
            if re.search(pattern, var.name):
                return updater
        return updaters_lib.get_updater(var)

    # ------------------------------------------------- OptimizerV2's private hooks
    def _specs(self) -> tuple[slots_lib.SlotSpec, ...]:
        if self._specs_cache is None:
            self._specs_cache = slots_lib.as_slot_specs(self.slot_specs())
        return self._specs_cache

    def _create_slots(self, var_list: Iterable[tf.Variable]) -> None:
        var_list = list(var_list)
        # Slot-major order (every "m", then every "v"), as Keras 2's built-ins and TFA:
        # .h5 files store optimizer weights by position.
        for spec in self._specs():
            for var in var_list:
                if self.updater_for(var) is None:
                    slots_lib.create_slots(self, var, [spec])
        for var in var_list:
            updater = self.updater_for(var)
            if updater is not None:
                slots_lib.create_slots(self, var, updater.slot_specs(), prefix=updater.name + "/")

    def _prepare_local(self, var_device: str, var_dtype: tf.DType, apply_state: dict) -> None:
        super()._prepare_local(var_device, var_dtype, apply_state)
        coefficients = apply_state[(var_device, var_dtype)]
        for name in self._hyper_checks:
            if name == "learning_rate":  # the base class just computed it, decay included
                coefficients[name] = coefficients["lr_t"]
            else:
                coefficients[name] = tf.identity(self.hyperparameter(name, var_dtype))
        coefficients["step"] = tf.cast(self.iterations + 1, var_dtype)
        if self._weight_decay is not None:
            self._weight_decay.prepare(coefficients)
        self.prepare(var_dtype, coefficients)

    def _coefficients(self, var: tf.Variable, apply_state: dict | None) -> dict:
        key = (var.device, var.dtype.base_dtype)
        return (apply_state or {}).get(key) or self._fallback_apply_state(*key)

    def _decays(self, var: tf.Variable) -> bool:
        if self._weight_decay is None:
            return False
        if self._decay_var_keys is not None:
            return variable_key(var) in self._decay_var_keys
        return self._weight_decay.applies_to(updaters_lib.distributed_container(var).name)

    def _dense_step(self, grad, var, slots, coefficients, decay):
        if decay:
            self._weight_decay.decay_dense(var, coefficients)
        return self.update_dense(grad, var, slots, coefficients)

    def _jit_dense_step(self, grad, var, slots, coefficients, decay):
        self._dense_step(grad, var, slots, coefficients, decay)
        # Return a token, not the variable's new value: returning it would make
        # XLA copy the whole variable out of the compiled function.
        return tf.constant(True)

    def _jit_dense_steps(self, grads, variables, var_slots, coefficients, decays):
        for args in zip(grads, variables, var_slots, coefficients, decays):
            self._dense_step(*args)
        return tf.constant(True)

    def _distributed_apply(self, distribution, grads_and_vars, apply_state, name):
        """Without a ``tf.distribute`` strategy, the dense updates of the small
        ordinary variables of one device run as one XLA call: a call per variable
        costs more than a small variable's update. Large variables keep a call
        each, which TensorFlow runs in parallel (see ``benchmarks/``)."""
        if not self.jit_compile or tf.distribute.has_strategy():
            return super()._distributed_apply(distribution, grads_and_vars, apply_state, name)
        batches: dict = {}
        rest = []
        for grad, var in grads_and_vars:
            if (isinstance(grad, tf.IndexedSlices) or type(var).__name__ != "ResourceVariable"
                    or var.constraint is not None or self.updater_for(var) is not None
                    or var.shape.num_elements() is None or var.shape.num_elements() > _XLA_BATCH_MAX_ELEMENTS):
                rest.append((grad, var))
            else:
                batches.setdefault(var.device, []).append((grad, var))
        calls = []
        for device, pairs in batches.items():
            grads, variables = [g for g, _ in pairs], [v for _, v in pairs]
            decays = [self._decays(v) for v in variables]
            key = ("batch", device, tuple((tuple(v.shape.as_list()), v.dtype) for v in variables), tuple(decays))
            if key not in self._jit_steps:
                self._jit_steps[key] = tf.function(self._jit_dense_steps, jit_compile=True)
            with tf.device(device):
                calls.append(self._jit_steps[key](
                    grads, variables, [slots_lib.get_slots(self, v, self._specs()) for v in variables],
                    [self._coefficients(v, apply_state) for v in variables], decays))
        with tf.control_dependencies(calls):
            return super()._distributed_apply(distribution, rest, apply_state, name)

    def _resource_apply_dense(self, grad: tf.Tensor, handle: tf.Variable, apply_state: dict) -> Any:
        updater = self.updater_for(handle)
        if updater is not None:
            specs = updater.slot_specs()
            return updater.update_dense(grad, handle, slots_lib.get_slots(self, handle, specs, updater.name + "/"))
        coefficients = self._coefficients(handle, apply_state)
        var_slots = slots_lib.get_slots(self, handle, self._specs())
        decay = self._decays(handle)
        if self.jit_compile and type(handle).__name__ == "ResourceVariable":
            key = (tuple(handle.shape.as_list()), handle.dtype, decay)
            if key not in self._jit_steps:
                self._jit_steps[key] = tf.function(self._jit_dense_step, jit_compile=True)
            return self._jit_steps[key](grad, handle, var_slots, coefficients, decay)
        return self._dense_step(grad, handle, var_slots, coefficients, decay)

    def _resource_apply_sparse(self, grad: tf.Tensor, handle: tf.Variable, indices: tf.Tensor,
                               apply_state: dict) -> Any:
        updater = self.updater_for(handle)
        if updater is not None:
            specs = updater.slot_specs()
            var_slots = slots_lib.get_slots(self, handle, specs, updater.name + "/")
            return updater.update_sparse(grad, handle, indices, var_slots)
        coefficients = self._coefficients(handle, apply_state)
        var_slots = slots_lib.get_slots(self, handle, self._specs())
        deps = []
        if self._decays(handle):
            deps.append(self._weight_decay.decay_sparse(handle, indices, coefficients))
        with tf.control_dependencies(deps):
            return self.update_sparse(grad, handle, indices, var_slots, coefficients)

    def _aggregate_gradients(self, grads_and_vars: Iterable) -> list:
        """Sum ordinary gradients across replicas; reduce updater gradients by the
        updater's ``reduction``, all in the one call to ``gradient_aggregator``."""
        grads_and_vars = list(grads_and_vars)
        ctx = tf.distribute.get_replica_context()
        n = ctx.num_replicas_in_sync if ctx is not None else 1
        reductions = [getattr(self.updater_for(v), "reduction", "sum") for _, v in grads_and_vars]
        to_sum = [(updaters_lib.before_sum(g, r, ctx.replica_id_in_sync_group, n) if n > 1 else g, v)
                  for (g, v), r in zip(grads_and_vars, reductions) if r != "none"]
        summed = iter(self.gradient_aggregator(to_sum) if to_sum else [])
        out = []
        for (grad, var), reduction in zip(grads_and_vars, reductions):
            if reduction != "none":
                grad = next(summed)[0]
                if n > 1:
                    grad = updaters_lib.after_sum(grad, reduction, n)
            out.append((grad, var))
        return out

    def _transform_gradients(self, grads_and_vars: Iterable) -> list:
        """Clipping and ``gradient_transformers`` see the ordinary gradients only."""
        out = list(grads_and_vars)
        ordinary = [i for i, (_, var) in enumerate(out) if self.updater_for(var) is None]
        if ordinary:
            transformed = super()._transform_gradients([out[i] for i in ordinary])
            for i, pair in zip(ordinary, transformed):
                out[i] = pair
        return out

    # ------------------------------------------------------------- public API
    def apply_gradients(self, grads_and_vars: Iterable, name: str | None = None,
                        experimental_aggregate_gradients: bool = True, *,
                        decay_var_list: Iterable[tf.Variable] | None = None) -> Any:
        """Apply gradients (see OptimizerV2). ``decay_var_list``: if given, only
        these variables are weight-decayed (it overrides ``exclude_from_weight_decay``)."""
        grads_and_vars = list(grads_and_vars)
        self._check_grads_and_vars(grads_and_vars)
        self._decay_var_keys = None if decay_var_list is None else {variable_key(v) for v in decay_var_list}
        try:
            return super().apply_gradients(grads_and_vars, name, experimental_aggregate_gradients)
        finally:
            self._decay_var_keys = None

    def minimize(self, loss: Any, var_list: Any, grad_loss: Any = None, name: str | None = None,
                 decay_var_list: Iterable[tf.Variable] | None = None, tape: tf.GradientTape | None = None) -> Any:
        """Minimize ``loss`` (see OptimizerV2); ``decay_var_list`` as in :meth:`apply_gradients`."""
        grads_and_vars = self._compute_gradients(loss, var_list=var_list, grad_loss=grad_loss, tape=tape)
        return self.apply_gradients(grads_and_vars, name=name, decay_var_list=decay_var_list)

    def _check_grads_and_vars(self, grads_and_vars: list) -> None:
        for pair in grads_and_vars:
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise TypeError(f"`grads_and_vars` must hold (gradient, variable) pairs. Received: {pair!r}")
            grad, var = pair
            if is_keras3_object(var):
                raise TypeError(f"Received a Keras 3 variable: var={var!r}. {KERAS3_HINT}")
            if grad is None:
                continue
            if not isinstance(var, tf.Variable):
                raise TypeError(f"Only tf.Variable objects can be updated. Received: var={var!r}")
            if not var.dtype.base_dtype.is_floating:
                raise ValueError(f"Variable {var.name!r} has dtype {var.dtype.name}; optimizers update floating "
                                 f"point variables only. Received: var={var!r}")
            grad_shape = grad.values.shape[1:] if isinstance(grad, tf.IndexedSlices) else grad.shape
            var_shape = var.shape[1:] if isinstance(grad, tf.IndexedSlices) else var.shape
            if not grad_shape.is_compatible_with(var_shape):
                raise ValueError(f"The gradient of variable {var.name!r} (shape {var.shape}) has an incompatible "
                                 f"shape. Received: grad={grad!r}")

    def get_config(self) -> dict[str, Any]:
        """Config built from the constructor's signature; no override needed."""
        config = super().get_config()
        config["decay"] = self._initial_decay  # always, as Keras 2's built-ins (and TFA) write it
        signature = inspect.signature(type(self).__init__)
        for pname, param in signature.parameters.items():
            if pname in ("self", "name") or param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
                continue
            config[pname] = self._config_value(pname)
        if self._weight_decay is not None:
            config["weight_decay"] = self._serialize_hyperparameter("weight_decay")
            config.update(self._weight_decay.get_config())
        if not self.jit_compile:
            config["jit_compile"] = False
        if self._updater_patterns:  # updaters keyed by variable objects cannot be serialized
            config["updaters"] = {k: _serialize_updater(v) for k, v in self._updater_patterns.items()}
        return config

    def _config_value(self, pname: str) -> Any:
        if pname in self._hyper:
            return self._serialize_hyperparameter(pname)
        try:
            return self.__getattribute__(pname)
        except AttributeError:
            raise NotImplementedError(
                f"{type(self).__name__}.get_config() cannot find constructor argument `{pname}`: declare it "
                f"with add_hyperparameter() or store it as self.{pname}") from None

    def _serialize_hyperparameter(self, hyperparameter_name: str) -> Any:
        value = super()._serialize_hyperparameter(hyperparameter_name)
        return value.item() if isinstance(value, np.generic) else value

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: dict | None = None) -> CustomOptimizerV2:
        """Inverse of :meth:`get_config`; schedules and updaters are deserialized."""
        config = dict(config)
        if "lr" in config:
            config["learning_rate"] = config.pop("lr")
        for key, value in list(config.items()):
            if isinstance(value, dict) and "class_name" in value and "config" in value:
                config[key] = keras.optimizers.schedules.deserialize(value, custom_objects=custom_objects)
        if "updaters" in config:
            config["updaters"] = {k: _deserialize_updater(v) for k, v in config["updaters"].items()}
        return cls(**config)

    # ------------------------------------------------ state in .keras / SavedModel
    def add_slot(self, var: tf.Variable, slot_name: str, initializer: Any = "zeros", shape: Any = None) -> Any:
        """OptimizerV2's ``add_slot``; a slot loaded from ``.keras`` or a SavedModel
        starts from its loaded value (see ``optimizers/saving.py``)."""
        loaded = saving.initial_slot_value(self, var, slot_name)
        if loaded is not None:
            initializer = lambda shape, dtype: tf.constant(loaded, dtype)  # noqa: E731
        slot = super().add_slot(var, slot_name, initializer, shape)
        saving._slot_index(self)[(var.name, slot_name)] = (var, slot)
        saving.restore_inner_slots(self, var)
        return slot

    def save_own_variables(self, store: Any) -> None:
        """Write ``iterations``, hyperparameters and slots (``.keras`` format)."""
        saving.save_own_variables(self, store)

    def load_own_variables(self, store: Any) -> None:
        """Read what :meth:`save_own_variables` wrote; slots are filled when created."""
        saving.load_own_variables(self, store)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Register every subclass, so ``load_model`` needs no ``custom_objects``."""
        super().__init_subclass__(**kwargs)
        package = cls.__module__.split(".")[0]
        keras.utils.register_keras_serializable(package=package)(cls)
        keras.utils.get_custom_objects().setdefault(cls.__name__, cls)

    def __repr__(self) -> str:
        return f"<{type(self).__module__}.{type(self).__name__} name={self._name!r}: a Keras 2 (OptimizerV2) optimizer>"


install_saving_hooks(lambda obj: isinstance(obj, CustomOptimizerV2), saving.record_restored_slot)


def _serialize_updater(updater: updaters_lib.VariableUpdater) -> dict:
    return {"class_name": type(updater).__name__, "config": updater.get_config()}


def _deserialize_updater(config: Any) -> updaters_lib.VariableUpdater:
    if isinstance(config, updaters_lib.VariableUpdater):
        return config
    classes = {c.__name__: c for c in _all_subclasses(updaters_lib.VariableUpdater)}
    if not isinstance(config, dict) or config.get("class_name") not in classes:
        raise ValueError(f"Unknown variable updater config. Received: {config!r}")
    return classes[config["class_name"]].from_config(config.get("config", {}))


def _all_subclasses(cls: type) -> list[type]:
    out = [cls]
    for sub in cls.__subclasses__():
        out.extend(_all_subclasses(sub))
    return out
