"""``CustomOptimizerV2``: OptimizerV2's private hooks, implemented once.

The class holds the hooks a subclass writes and the dispatch of one step;
its parts live in their own modules: hyperparameters
(``optimizers/hyperparameters.py``, kept as OptimizerV2 keeps them by
``keras2_hyperparameters.py``), the rule protocol (``rule.py``), optimizer-wide
state and the evaluation point (``keras2_state.py``), weight decay
(``weight_decay.py``), the step's execution (``execution.py``), routing to
variable updaters (``updaters.py``, ``variable_rules.py``), config and
registry (``config.py``) and saving (``saving.py``, through ``base.py``).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from optimizers import config as config_lib
from optimizers.base import OptimizerBase, all_finite, check_grads_and_vars, index_checks
from optimizers.execution import AfterStep, StepRunner, unless_non_finite
from optimizers.hyperparameters import check_bool, check_number
from optimizers.keras2_hyperparameters import OptimizerV2Hyperparameters
from optimizers.keras2_state import OptimizerV2State
from optimizers.keras_compat import (
    initial_decay,
    optimizer_name,
    set_hyper,
)
from optimizers.rule import UpdateRule, call_hook
from optimizers.updaters import Routing
from optimizers.variable_rules import VariableRules, reduce_gradients
from optimizers.weight_decay import (
    DecoupledWeightDecay,
    VariableMask,
    decay_policy,
    exclude_attribute,
    scale_attribute,
)

__all__ = ["CustomOptimizerV2"]

_BASE_KWARGS = ("clipnorm", "clipvalue", "global_clipnorm", "lr", "decay", "gradient_aggregator",
                "gradient_transformers")
_TEMPLATE_KWARGS = ("updaters", "jit_compile", "weight_decay", "exclude_from_weight_decay",
                    "scale_weight_decay_by_lr", "skip_non_finite")



def _check_arguments(cls_name: str, name: Any, kwargs: dict[str, Any]) -> None:
    """Refuse a ``name`` that is not a non-empty string, and a keyword argument OptimizerV2 does
    not take or a negative ``clipnorm``, ``clipvalue``, ``global_clipnorm``, ``decay``, ``lr``."""
    for key, value in kwargs.items():
        if key not in _BASE_KWARGS:
            raise TypeError(f"{cls_name}() got an unexpected keyword argument `{key}`. "
                            f"Received: {key}={value!r}. Allowed keyword arguments: "
                            f"{', '.join(_BASE_KWARGS + _TEMPLATE_KWARGS)}.")
        if key in ("clipnorm", "clipvalue", "global_clipnorm", "decay", "lr") and value is not None:
            check_number(key, value, low=0.0)
    if not isinstance(name, str) or not name:
        raise ValueError(f"`name` must be a non-empty string. Received: name={name!r}")

class CustomOptimizerV2(OptimizerV2Hyperparameters, UpdateRule, OptimizerV2State, OptimizerBase):
    r"""Base class for Keras 2 (OptimizerV2) optimizers, with public hooks.

    Override these, and nothing else:

    ``__init__(self, ..., name="MyOpt", **kwargs)``
        Call ``super().__init__(name, **kwargs)``, then declare each
        hyperparameter once with :meth:`add_hyperparameter` (float, tensor,
        callable or ``LearningRateSchedule``, range-checked). Store every other
        constructor argument as an attribute of the same name:
        :meth:`get_config` reads the constructor's signature, so subclasses do
        not write ``get_config``/``from_config``.
    ``slot_specs(self, var) -> Sequence[SlotSpec | str]``
        The slots of ``var`` (they may depend on its shape or value).
        Defaults to none.
    ``prepare(self, dtype, coefficients) -> None``
        Optional. Runs once per (device, dtype) per step. ``coefficients``
        already holds every hyperparameter as a tensor of ``dtype`` (schedules
        evaluated at the current step, ``learning_rate`` with legacy ``decay``),
        ``"step"`` (the 1-based step number) and, with weight decay,
        ``"weight_decay_factor"``; add derived values to it.
    ``update_dense(self, grad, var, slots, coefficients) -> op``
        Required. The rule for a dense gradient. ``slots`` maps slot names to
        this variable's slot variables.
    ``update_sparse(self, grad, var, indices, slots, coefficients) -> op``
        Optional. ``grad`` holds the rows ``indices``, which are unique
        (repeated indices were summed). The default scatters the rows into a
        dense gradient and calls ``update_dense``, which is always correct.
    ``variable_options(self, var) -> Mapping[str, Hashable]``
        Optional. Per-variable facts the rule branches on, read from
        ``coefficients`` (see :class:`~optimizers.UpdateRule`).
    ``weight_decay_placement`` (class attribute)
        ``"before"`` (default: decoupled decay applied before the rule),
        ``"inside"`` (the rule applies ``coefficients["weight_decay_factor"]``
        to variables whose ``coefficients["decayed"]`` is true) or ``"none"``.

    The order of one step's work (slots, cross-replica reduction, clipping, decay, update,
    ``iterations``) is guaranteed: see "One step, in order" in the guide *Writing an optimizer*.

    Any such optimizer can also be another optimizer's updater for chosen
    variables (``updaters={"embedding": optimizers.Adam(0.01)}``): its rule,
    hyperparameters and weight decay apply there, at the host's step.

    Args:
        name: Prefix of slot names and name scopes.
        updaters: ``{var.ref() or regex searched in var.name: rule}`` (or a
            list of ``(variable or regex, rule)`` pairs), each rule a
            :class:`~optimizers.VariableUpdater` or a template optimizer:
            those variables follow that rule instead of this one.
        jit_compile: Compile the dense updates (decay included) with XLA:
            small variables in chunks of one shape, dtype and options (at
            most two compiled functions per such group), one call per large
            variable (see ``optimizers/compiled.py``).
            Defaults to ``True``, measured faster on CPU (see ``benchmarks/``).
            Either way, a rule's hand-fused kernel (``dense_kernel``: Adam's,
            SGD's) runs instead: after the decay op, or with the decay, and a
            wrapper's moving average, in one kernel (``fused_dense_kernel``:
            AdamW's), except for a decayed variable compiled alone without one
            (see :class:`UpdateRule`). A sparse step likewise runs the rule's
            ``fused_sparse_kernel`` (Adam's) where it has one.
        weight_decay: Weight decay (float, tensor, callable or schedule);
            ``None`` for none. See ``optimizers/weight_decay.py``.
        exclude_from_weight_decay: Regexes searched in ``var.name``; matching
            variables are not decayed. Also TFA's attribute: read (a tuple, or
            ``None``) and set before the first step, with the same effect.
        scale_weight_decay_by_lr: Decay by ``lr * weight_decay`` (Keras 3,
            PyTorch, optax) instead of ``weight_decay`` alone (TensorFlow
            Addons). Also an attribute, read and set before the first step.
            Defaults to ``False``.
        skip_non_finite: Skip a step whose gradients hold a NaN or an Inf:
            nothing changes, ``iterations`` included, and :attr:`skipped_steps`
            counts it. Costs one pass over every gradient per step. Defaults to
            ``False``, as in Keras (non-finite gradients reach the weights).
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
    ...     def slot_specs(self, var):
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

    weight_decay_placement: str = "before"
    #: How slots are created on the first step, which fixes their order in ``.h5`` files (stored by
    #: position): ``"slot"`` (every variable's ``m``, then every ``v``: Keras 2's built-ins) or
    #: ``"variable"`` (all slots of one variable, then the next).
    slot_order: str = "slot"
    #: The rule multiplies its weight decay by the learning rate itself (LAMB, NovoGrad,
    #: RectifiedAdam): ``scale_weight_decay_by_lr=True`` is refused.
    decay_scaled_by_rule: bool = False
    #: Keep Keras 2's ``decay`` hyperparameter variable (the legacy learning-rate decay) in
    #: checkpoints, as Keras 2's built-ins do; ``False`` for optimizers whose checkpoints have none.
    decay_variable: bool = True

    def __init__(self, name: str, *, updaters: Mapping[Any, UpdateRule] | None = None,
                 jit_compile: bool = True, weight_decay: Any = None,
                 exclude_from_weight_decay: Sequence[str] | None = None,
                 scale_weight_decay_by_lr: bool = False, skip_non_finite: bool = False, **kwargs: Any) -> None:
        cls_name = type(self).__name__
        _check_arguments(cls_name, name, kwargs)
        check_bool("jit_compile", jit_compile)
        check_bool("skip_non_finite", skip_non_finite)
        if self.slot_order not in ("slot", "variable"):
            raise ValueError(f"`slot_order` of {cls_name} must be 'slot' or 'variable'. "
                             f"Received: slot_order={self.slot_order!r}")
        decay = decay_policy(self, weight_decay, exclude_from_weight_decay, scale_weight_decay_by_lr)
        routing = Routing(updaters)
        lr_alias = kwargs.pop("lr", None)
        if lr_alias is not None:
            warnings.warn("The `lr` argument is deprecated, use `learning_rate` instead.", stacklevel=2)
        super().__init__(name, **kwargs)
        if self.decay_variable:
            set_hyper(self, "decay", initial_decay(self))  # a checkpointed variable in Keras 2's built-ins
        self._lr_alias = lr_alias
        self._routing = routing
        self.jit_compile = jit_compile
        self.skip_non_finite = skip_non_finite
        self._weight_decay = decay
        self._decay_var_mask: VariableMask | None = None
        self._rules = VariableRules(self, routing)
        self._runner = StepRunner(self._rule_inputs, lambda: self.iterations)
        self._compiled = self._runner.steps  # read by compiled_function_count and by rules' own compiled pieces
        if decay is not None:
            self.add_hyperparameter("weight_decay", weight_decay, low=0.0)

    exclude_from_weight_decay = exclude_attribute("_weight_decay")
    scale_weight_decay_by_lr = scale_attribute("_weight_decay")

    # -------------------------------------------------------- hyperparameters
    reserved_names = {
        **UpdateRule.reserved_names,
        "lr": "OptimizerV2 reads `lr` as `learning_rate`",
        "decay": "OptimizerV2 keeps its own `decay` (a learning-rate time decay) in the config",
        "iterations": "OptimizerV2's step counter",
        "weight_decay_factor": 'coefficients["weight_decay_factor"] is the weight decay\'s factor of the step',
        "decayed": "variable option `decayed` says whether the variable is weight-decayed",
    }

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "weight_decay" and "_weight_decay" in self.__dict__ and self._weight_decay is None:
            hint = ("it takes none" if self.weight_decay_placement == "none"
                    else "give `weight_decay` to the constructor instead")
            raise ValueError(f"`weight_decay` cannot be set on {type(self).__name__}, built without weight decay "
                             f"(its step has none to change): {hint}. Received: weight_decay={value!r}")
        super().__setattr__(name, value)

    def add_hyperparameter(self, name: str, value: Any, **bounds: Any) -> None:
        """Declare hyperparameter ``name`` (call in ``__init__``).

        ``value`` may be a float, a tensor, a callable returning one, or a
        ``LearningRateSchedule`` (evaluated at ``iterations``). Numbers are
        checked against ``[low, high]`` (keyword arguments ``low``, ``high``,
        ``low_inclusive``, ``high_inclusive``) now and whenever the attribute
        is set. Kept as OptimizerV2 hyperparameters: checkpointed variables.
        """
        if not hasattr(self, "_routing"):
            raise TypeError(f"{type(self).__name__}.__init__ must call `super().__init__(name, **kwargs)` before "
                            f"declaring hyperparameters. Received: add_hyperparameter({name!r}) first")
        if name == "learning_rate" and self._lr_alias is not None:
            value = self._lr_alias
        super().add_hyperparameter(name, value, **bounds)

    def _base_coefficients(self, dtype: tf.DType, iterations: Any) -> dict[str, Any]:
        coefficients = super()._base_coefficients(dtype, iterations)
        if self._weight_decay is not None:
            self._weight_decay.prepare(coefficients)
        return coefficients

    # ------------------------------------------------------ rules per variable
    @property
    def rule_name(self) -> str:
        return optimizer_name(self)

    def updater_for(self, var: tf.Variable) -> UpdateRule | None:
        """The rule that replaces this optimizer's rule for ``var``, or ``None``. A template
        optimizer routed to moves ``var`` as it would alone: by its own updaters, if they name ``var``."""
        return self._rules.routed_rule(var)

    def decays(self, var: tf.Variable, decay_var_list: VariableMask | None = None) -> bool:
        """Whether this optimizer's weight decay applies to ``var`` (``decay_var_list``, or the one
        given to the current ``apply_gradients``, decides alone when given)."""
        mask = decay_var_list if decay_var_list is not None else self._decay_var_mask
        return self._weight_decay is not None and self._weight_decay.applies_to(var, mask)

    def options_for(self, var: tf.Variable, decay_var_list: VariableMask | None = None) -> dict[str, Any]:
        options = super().options_for(var)
        if self._weight_decay is not None:
            options["decayed"] = self.decays(var, decay_var_list)
        return options

    def apply_dense(self, grad: tf.Tensor, var: tf.Variable, slots: dict, coefficients: dict) -> Any:
        if self.weight_decay_placement == "before" and coefficients.get("decayed"):
            self._weight_decay.decay_dense(var, coefficients)
        return call_hook(self, "update_dense", grad, var, slots, coefficients)

    def apply_sparse(self, grad: tf.Tensor, var: tf.Variable, indices: tf.Tensor, slots: dict,
                     coefficients: dict) -> Any:
        deps = []
        if self.weight_decay_placement == "before" and coefficients.get("decayed"):
            deps.append(self._weight_decay.decay_sparse(var, indices, coefficients))
        with tf.control_dependencies(deps):
            return call_hook(self, "update_sparse", grad, var, indices, slots, coefficients)

    def _rule_of(self, var: tf.Variable) -> UpdateRule:
        return self._rules.rule_of(var)

    def _rule_inputs(self, var: tf.Variable, apply_state: dict | None) -> tuple:
        """``(rule, slots, coefficients, options)`` of ``var`` for this step."""
        return self._rules.inputs(var, apply_state, self.iterations, self._decay_var_mask)

    # ------------------------------------------------- OptimizerV2's private hooks
    def _create_slots(self, var_list: Iterable[tf.Variable]) -> None:
        """Slots of the variables that have none yet (Keras calls this hook every step)."""
        self.lock_options()
        self._rules.create_slots(var_list)

    def _prepare_local(self, var_device: str, var_dtype: tf.DType, apply_state: dict) -> None:
        coefficients = self.step_coefficients(var_dtype, self.iterations, self.rule_state.next_values(self.iterations))
        apply_state[(var_device, var_dtype)].update(coefficients)

    def _create_all_weights(self, var_list: Iterable[tf.Variable]) -> None:
        var_list = list(var_list)
        super()._create_all_weights(var_list)
        self._rules.warn_unmatched(var_list)

    def _distributed_apply(self, distribution, grads_and_vars, apply_state, name):
        """Every check of the step (sparse indices, hyperparameter values) runs
        before its first assignment, so a refused step changes nothing."""
        checks = index_checks(grads_and_vars)
        # Routed rules' hyperparameters too (MultiOptimizer's pairs, template updaters): eagerly raised here.
        routed = {id(rule): rule for rule in (self._rule_of(var) for _, var in grads_and_vars)
                  if rule is not self and hasattr(rule, "checked_hyperparameters")}
        checks += [check for rule in routed.values() for check in rule.checked_hyperparameters(self.iterations)]
        checks += self.rule_state.checks()
        if not tf.executing_eagerly():
            checks += [t for c in (apply_state or {}).values() for t in c.values() if tf.is_tensor(t)]
        with tf.control_dependencies(checks):
            if not self.skip_non_finite:
                return self._apply_updates(distribution, grads_and_vars, apply_state, name)
            return unless_non_finite(all_finite(distribution, grads_and_vars), self.skipped_steps,
                                     lambda: self._apply_updates(distribution, grads_and_vars, apply_state, name))

    def _apply_updates(self, distribution, grads_and_vars, apply_state, name):
        """Without a strategy, the kernels and compiled chunks run first (``StepRunner.batched``),
        then OptimizerV2's per-variable path for what is left."""
        def updates() -> Any:
            if not self.jit_compile or tf.distribute.has_strategy():
                return super(CustomOptimizerV2, self)._distributed_apply(distribution, grads_and_vars, apply_state, name)
            done, rest = self._runner.batched(grads_and_vars, apply_state)
            with tf.control_dependencies([done] if done is not None else []):
                return super(CustomOptimizerV2, self)._distributed_apply(distribution, rest, apply_state, name)

        return self.rule_state.updated_after(self.iterations, updates)

    def running_after_each_update(self, after: AfterStep) -> contextlib.AbstractContextManager:
        """Within this context, every variable ``after`` (a wrapper's
        :class:`~optimizers.execution.AfterStep`) wraps gets the wrapper's ``after_step`` right
        after this optimizer's update of it, fused with it where both allow (one pass over memory)."""
        return self._runner.running_after(after)

    @property
    def weight_decay_policy(self) -> DecoupledWeightDecay | None:
        """Which variables this optimizer decays, and how (``None`` without weight decay)."""
        return self._weight_decay

    def _resource_apply_dense(self, grad: tf.Tensor, handle: tf.Variable, apply_state: dict | None = None) -> Any:
        return self._runner.dense(grad, handle, apply_state)

    def _resource_apply_sparse(self, grad: tf.Tensor, handle: tf.Variable, indices: tf.Tensor,
                               apply_state: dict | None = None) -> Any:
        return self._runner.sparse(grad, handle, indices, apply_state)

    def _aggregate_gradients(self, grads_and_vars: Iterable) -> list:
        """Sum ordinary gradients across replicas; reduce updater gradients by the
        updater's ``reduction``, all in the one call to ``gradient_aggregator``."""
        return reduce_gradients(self._rule_of, list(grads_and_vars), self.gradient_aggregator)

    def _transform_gradients(self, grads_and_vars: Iterable) -> list:
        """Clipping and ``gradient_transformers`` see this rule's gradients only."""
        return self._rules.own_only(super()._transform_gradients, grads_and_vars)

    # ------------------------------------------------------------- public API
    @tf.autograph.experimental.do_not_convert  # plain Python: no per-variable conversion cost
    def apply_gradients(self, grads_and_vars: Iterable, name: str | None = None,
                        experimental_aggregate_gradients: bool = True, *,
                        decay_var_list: Iterable[tf.Variable] | None = None) -> Any:
        """Apply gradients (see OptimizerV2). ``decay_var_list``: if given, only
        these variables are weight-decayed (it overrides ``exclude_from_weight_decay``)."""
        grads_and_vars = check_grads_and_vars(grads_and_vars)
        self._decay_var_mask = None if decay_var_list is None else VariableMask(
            [v for v in decay_var_list], "decay_var_list")
        try:
            return super().apply_gradients(grads_and_vars, name, experimental_aggregate_gradients)
        finally:
            self._decay_var_mask = None

    def get_config(self) -> dict[str, Any]:
        """Config built from the constructor's signature; no override needed."""
        config = super().get_config()
        config["decay"] = initial_decay(self)  # always, as Keras 2's built-ins (and TFA) write it
        if self._weight_decay is not None:
            config["weight_decay"] = self._serialize_hyperparameter("weight_decay")
            config.update(self._weight_decay.get_config())
        if not self.jit_compile:
            config["jit_compile"] = False
        if self.skip_non_finite:
            config["skip_non_finite"] = True
        config.update(self._rules.get_config())
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: dict | None = None) -> CustomOptimizerV2:
        """Inverse of :meth:`get_config`; schedules and updaters are deserialized."""
        config = config_lib.deserialize_values(config, custom_objects)
        if "lr" in config:
            config["learning_rate"] = config.pop("lr")
        if "updaters" in config:
            config["updaters"] = VariableRules.updaters_from_config(config["updaters"])
        return cls(**config)
