"""``CustomOptimizerV2``: OptimizerV2's private hooks, implemented once.

The class holds the hooks a subclass writes and the dispatch of one step;
its parts live in their own modules: hyperparameters
(``optimizers/hyperparameters.py``), the rule protocol (``rule.py``), weight
decay (``weight_decay.py``), compiled steps (``compiled.py``), routing to
variable updaters (``updaters.py``), config and registry (``config.py``) and
saving (``saving.py``, through ``base.py``).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from optimizers import config as config_lib
from optimizers import slots as slots_lib
from optimizers import updaters as updaters_lib
from optimizers.base import OptimizerBase, all_finite, check_grads_and_vars, index_checks
from optimizers.execution import AfterStep, StepRunner
from optimizers.hyperparameters import check_bool, check_number, evaluate
from optimizers.keras_compat import (
    create_hypers,
    fallback_apply_state,
    track,
    variable_key,
    variable_name,
)
from optimizers.rule import UpdateRule, call_hook
from optimizers.weight_decay import (
    PLACEMENTS,
    DecoupledWeightDecay,
    VariableMask,
    exclude_attribute,
    refuse_exclude_without_decay,
)

__all__ = ["CustomOptimizerV2"]

_BASE_KWARGS = ("clipnorm", "clipvalue", "global_clipnorm", "lr", "decay", "gradient_aggregator",
                "gradient_transformers")
_TEMPLATE_KWARGS = ("updaters", "jit_compile", "weight_decay", "exclude_from_weight_decay",
                    "scale_weight_decay_by_lr", "skip_non_finite")


class CustomOptimizerV2(UpdateRule, OptimizerBase):
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

    One step (``apply_gradients``), in this order:

    1. ``None`` gradients are dropped; slots are created on first use: this
       rule's for the variables that follow it, each updater's own for its
       variables.
    2. Gradients are combined across replicas: summed, or by the updater's
       ``reduction``.
    3. Clipping (``clipnorm``, ``clipvalue``, ``global_clipnorm``) applies to
       the variables that follow this rule only.
    4. Per variable, in the strategy's update context: the updater's rule, or
       weight decay (placement ``"before"``) then this rule, with coefficients
       prepared once per (device, dtype).
    5. ``iterations`` advances by one, also when every variable had an updater.

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
        for key, value in kwargs.items():
            if key not in _BASE_KWARGS:
                raise TypeError(f"{cls_name}() got an unexpected keyword argument `{key}`. "
                                f"Received: {key}={value!r}. Allowed keyword arguments: "
                                f"{', '.join(_BASE_KWARGS + _TEMPLATE_KWARGS)}.")
            if key in ("clipnorm", "clipvalue", "global_clipnorm", "decay", "lr") and value is not None:
                check_number(key, value, low=0.0)
        if not isinstance(name, str) or not name:
            raise ValueError(f"`name` must be a non-empty string. Received: name={name!r}")
        check_bool("jit_compile", jit_compile)
        check_bool("skip_non_finite", skip_non_finite)
        self._check_scale_weight_decay_by_lr(scale_weight_decay_by_lr)
        if self.slot_order not in ("slot", "variable"):
            raise ValueError(f"`slot_order` of {cls_name} must be 'slot' or 'variable'. "
                             f"Received: slot_order={self.slot_order!r}")
        if self.weight_decay_placement not in PLACEMENTS:
            raise ValueError(f"`weight_decay_placement` of {cls_name} must be one of {PLACEMENTS}. "
                             f"Received: weight_decay_placement={self.weight_decay_placement!r}")
        routing = updaters_lib.Routing(updaters)
        decay = None
        if weight_decay is not None:
            if self.weight_decay_placement == "none":
                raise TypeError(f"{cls_name} takes no weight decay. Received: weight_decay={weight_decay!r}")
            decay = DecoupledWeightDecay(exclude_from_weight_decay, scale_weight_decay_by_lr)
        else:
            refuse_exclude_without_decay(exclude_from_weight_decay)
        lr_alias = kwargs.pop("lr", None)
        if lr_alias is not None:
            warnings.warn("The `lr` argument is deprecated, use `learning_rate` instead.", stacklevel=2)
        super().__init__(name, **kwargs)
        if self.decay_variable:
            self._set_hyper("decay", self._initial_decay)  # a checkpointed variable in Keras 2's built-ins
        self._lr_alias = lr_alias
        self._routing = routing
        self._checkpoint_routed({f"updaters[{key}]": rule for key, rule in routing.named_rules().items()})
        self.jit_compile = jit_compile
        self.skip_non_finite = skip_non_finite
        self._skipped: tf.Variable | None = None
        self._weight_decay = decay
        self._decay_var_mask: VariableMask | None = None
        self._var_specs: dict = {}  # (rule, variable) -> its slot specs
        self._slotted: set = set()  # (variable, rule) pairs whose slots exist (slots are never removed)
        self._runner = StepRunner(self._rule_inputs, lambda: self.iterations)
        self._compiled = self._runner.steps  # read by compiled_function_count and by rules' own compiled pieces
        if decay is not None:
            self.add_hyperparameter("weight_decay", weight_decay, low=0.0)

    exclude_from_weight_decay = exclude_attribute("_weight_decay")

    @property
    def scale_weight_decay_by_lr(self) -> bool:
        """Whether the weight decay is multiplied by the learning rate (``False`` without weight
        decay). Set it before the first step; after, only to the same value."""
        decay = self.__dict__.get("_weight_decay")
        return False if decay is None else decay.scale_by_lr

    @scale_weight_decay_by_lr.setter
    def scale_weight_decay_by_lr(self, value: bool) -> None:
        self._check_scale_weight_decay_by_lr(value)
        decay = self.__dict__.get("_weight_decay")
        if decay is not None:
            decay.set_scale_by_lr(value, type(self).__name__)
        elif value:
            raise ValueError(f"`scale_weight_decay_by_lr` cannot be set on {type(self).__name__}, built without "
                             "weight decay (its step has none to scale): give `weight_decay` to the constructor. "
                             f"Received: scale_weight_decay_by_lr={value!r}")

    def _check_scale_weight_decay_by_lr(self, value: Any) -> None:
        check_bool("scale_weight_decay_by_lr", value)
        if value and self.decay_scaled_by_rule:
            raise ValueError(f"{type(self).__name__}'s rule multiplies its weight decay by the learning rate "
                             f"already. Received: scale_weight_decay_by_lr={value!r}")

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

    def _store_hyperparameter(self, name: str, value: Any) -> None:
        self._set_hyper(name, value)

    def _read_hyperparameter(self, name: str) -> Any:
        return self._hyper[name]

    def _set_hyper(self, name: str, value: Any) -> None:
        self._check_hyperparameter(name, value)
        if callable(value) and not tf.is_tensor(value) and self._hypers_created and name in self._hyper:
            self._hyper[name] = value  # OptimizerV2 would try to assign a callable to the variable
            return
        super()._set_hyper(name, value)

    def hyperparameter(self, name: str, dtype: tf.DType = tf.float32, iterations: Any = None) -> tf.Tensor:
        """The value of hyperparameter ``name`` as a ``dtype`` tensor at
        ``iterations`` (default: this optimizer's). ``learning_rate`` is
        computed as Keras 2 does: schedules see the step in ``dtype``, legacy
        ``decay`` applies."""
        if iterations is None:
            iterations = self.iterations
        if name != "learning_rate":
            return super().hyperparameter(name, dtype, iterations)
        local_step = tf.cast(iterations, dtype)
        raw = self._read_hyperparameter(name)
        lr = tf.cast(self._checked(name, raw, evaluate(raw, local_step)), dtype)
        if self._initial_decay > 0.0:
            lr = lr / (1.0 + tf.cast(self._initial_decay, dtype) * local_step)
        return lr

    def _base_coefficients(self, dtype: tf.DType, iterations: Any) -> dict[str, Any]:
        coefficients = super()._base_coefficients(dtype, iterations)
        if self._weight_decay is not None:
            self._weight_decay.prepare(coefficients)
        return coefficients

    # ------------------------------------------------------ rules per variable
    def _checkpoint_routed(self, rules: Mapping[str, UpdateRule]) -> None:
        """Make each template optimizer of ``rules`` a checkpoint dependency of this optimizer under its
        key, so that ``tf.train.Checkpoint`` keeps its hyperparameter variables (a learning rate set
        since its construction) with this optimizer's state (its slots are this optimizer's already).
        A variable updater keeps no variables."""
        for name, rule in rules.items():
            if isinstance(rule, CustomOptimizerV2) and rule is not self:
                track(self, rule, name)

    @property
    def rule_name(self) -> str:
        return self._name

    def updater_for(self, var: tf.Variable) -> UpdateRule | None:
        """The rule that replaces this optimizer's rule for ``var``, or ``None``. A template
        optimizer routed to moves ``var`` as it would alone: by its own updaters, if they name ``var``."""
        rule = self._routing.lookup(var)
        return None if rule is self else as_alone(rule, var)

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
        return self.updater_for(var) or self

    def _specs_of(self, rule: UpdateRule, var: tf.Variable) -> tuple[slots_lib.SlotSpec, ...]:
        key = (id(rule), variable_key(var))
        specs = self._var_specs.get(key)
        if specs is None:
            clash = sorted(set(rule.variable_options(var)) & (set(rule.hyperparameter_names) | set(rule.reserved_names)))
            if clash:  # at the first step that moves var, before anything changes
                raise ValueError(f"{type(rule).__name__}.variable_options() must not return a coefficient's name "
                                 f"(a hyperparameter, or one its base class sets): it would replace it. Received: "
                                 f"{clash} for variable {var.name!r}")
            rule.lock_options()
            if isinstance(rule, CustomOptimizerV2) and rule is not self:
                create_hypers(rule)  # its hyperparameters become variables: later assignments take effect
            specs = self._var_specs[key] = slots_lib.as_slot_specs(rule.slot_specs(var))
        return specs

    def _prefix(self, rule: UpdateRule) -> str:
        return "" if rule is self else rule.rule_name + "/"

    def _rule_inputs(self, var: tf.Variable, apply_state: dict | None) -> tuple:
        """``(rule, slots, coefficients, options)`` of ``var`` for this step."""
        rule = self._rule_of(var)
        var_slots = slots_lib.get_slots(self, var, self._specs_of(rule, var), self._prefix(rule))
        device, dtype = var.device, var.dtype.base_dtype
        key = (device, dtype) if rule is self else (device, dtype, id(rule))
        coefficients = (apply_state or {}).get(key)
        if coefficients is None:
            if rule is self:
                coefficients = fallback_apply_state(self, device, dtype)
            else:
                with tf.device(device):
                    coefficients = rule.step_coefficients(dtype, self.iterations)
                if apply_state is not None:
                    apply_state[key] = coefficients
        # A routed template optimizer decays as the host's decay_var_list says, when one is given.
        options = (rule.options_for(var, self._decay_var_mask) if isinstance(rule, CustomOptimizerV2)
                   else rule.options_for(var))
        return rule, var_slots, ({**coefficients, **options} if options else coefficients), options

    # ------------------------------------------------- OptimizerV2's private hooks
    def _create_slots(self, var_list: Iterable[tf.Variable]) -> None:
        """Slots of the variables that have none yet (Keras calls this hook every step)."""
        self.lock_options()
        slotted = self._slotted
        keys = {id(v): (variable_key(v), id(self._rule_of(v))) for v in var_list}  # an updater set later: its slots
        var_list = [v for v in var_list if keys[id(v)] not in slotted]
        if not var_list:
            return
        updaters_lib.check_whole_variables(self._rule_of, var_list)
        own = [v for v in var_list if self._rule_of(v) is self]
        if self.slot_order == "variable":
            for var in own:
                slots_lib.create_slots(self, var, self._specs_of(self, var))
        else:  # every "m", then every "v": .h5 files store optimizer weights by position
            names = list(dict.fromkeys(spec.name for v in own for spec in self._specs_of(self, v)))
            for name in names:
                for var in own:
                    slots_lib.create_slots(self, var, [s for s in self._specs_of(self, var) if s.name == name])
        routed = False
        for var in var_list:
            rule = self._rule_of(var)
            if rule is not self:
                routed = True
                slots_lib.create_slots(self, var, self._specs_of(rule, var), prefix=self._prefix(rule))
        slotted.update(keys[id(v)] for v in var_list)
        if routed:  # an optimizer attached to a variable (set_updater) is kept as its config keeps it
            self._checkpoint_routed({f"updaters[{key}]": rule for key, rule in self._routing.saved_patterns().items()})

    def _prepare_local(self, var_device: str, var_dtype: tf.DType, apply_state: dict) -> None:
        apply_state[(var_device, var_dtype)].update(self.step_coefficients(var_dtype, self.iterations))

    @property
    def skipped_steps(self) -> tf.Variable:
        """The number of steps skipped for non-finite gradients (``skip_non_finite=True``); a
        constant 0 without ``skip_non_finite``, which makes no variable for it (it would be saved,
        and a checkpoint of the optimizer would hold one its restore does not expect)."""
        if self._skipped is None and not self.skip_non_finite:
            return tf.constant(0, tf.int64)
        if self._skipped is None:
            with tf.init_scope():
                self._skipped = self.add_weight("skipped_steps", shape=[], dtype=tf.int64, trainable=False,
                                                initializer="zeros",
                                                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        return self._skipped

    def _create_all_weights(self, var_list: Iterable[tf.Variable]) -> None:
        var_list = list(var_list)
        super()._create_all_weights(var_list)
        if self.skip_non_finite:
            _ = self.skipped_steps
        if var_list and not self.__dict__.get("_patterns_checked"):  # once, at the first step
            self._patterns_checked = True
            names = [variable_name(var) for var in var_list]
            unmatched = self._routing.unmatched_patterns(names)
            if unmatched:
                warnings.warn(f"{type(self).__name__}: the `updaters` regexes {unmatched} match no variable of the "
                              f"first step (named like {names[:3]}): those rules are not used. (A SavedModel "
                              "loaded inside a distribution strategy's scope names its variables without their "
                              "layers' scopes: save in the .keras format instead.)", stacklevel=2)

    def _distributed_apply(self, distribution, grads_and_vars, apply_state, name):
        """Every check of the step (sparse indices, hyperparameter values) runs
        before its first assignment, so a refused step changes nothing."""
        checks = index_checks(grads_and_vars)
        # Routed rules' hyperparameters too (MultiOptimizer's pairs, template updaters): eagerly raised here.
        routed = {id(rule): rule for rule in (self._rule_of(var) for _, var in grads_and_vars)
                  if rule is not self and hasattr(rule, "checked_hyperparameters")}
        checks += [check for rule in routed.values() for check in rule.checked_hyperparameters(self.iterations)]
        if not tf.executing_eagerly():
            checks += [t for c in (apply_state or {}).values() for t in c.values() if tf.is_tensor(t)]
        with tf.control_dependencies(checks):
            if not self.skip_non_finite:
                return self._apply_updates(distribution, grads_and_vars, apply_state, name)
            finite = all_finite(distribution, grads_and_vars)  # every replica's copy: one skips, all skip

            def apply() -> tf.Tensor:
                with tf.control_dependencies([self._apply_updates(distribution, grads_and_vars, apply_state, name)]):
                    return tf.constant(True)

            def skip() -> tf.Tensor:
                with tf.control_dependencies([self.skipped_steps.assign_add(1)]):
                    return tf.constant(False)

            if tf.executing_eagerly():
                return apply() if bool(finite) else skip()
            # An op, as OptimizerV2's step returns in a graph (a LossScaleOptimizer's cond pairs it with its own).
            return tf.group(tf.cond(finite, apply, skip))

    def _apply_updates(self, distribution, grads_and_vars, apply_state, name):
        """Without a strategy, the kernels and compiled chunks run first (``StepRunner.batched``),
        then OptimizerV2's per-variable path for what is left."""
        if not self.jit_compile or tf.distribute.has_strategy():
            return super()._distributed_apply(distribution, grads_and_vars, apply_state, name)
        done, rest = self._runner.batched(grads_and_vars, apply_state)
        with tf.control_dependencies([done] if done is not None else []):
            return super()._distributed_apply(distribution, rest, apply_state, name)

    def running_after_each_update(self, after: AfterStep) -> contextlib.AbstractContextManager:
        """Within this context, every variable ``after`` wraps gets the wrapper's ``after_step``
        right after this optimizer's update of it, in the same compiled function when both
        compile: one pass over memory and one call per chunk, instead of two (used by
        ``OptimizerWrapper.apply_gradients``; ``after`` is the wrapper's
        :class:`~optimizers.execution.AfterStep`)."""
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
        grads_and_vars = list(grads_and_vars)
        ctx = tf.distribute.get_replica_context()
        n = ctx.num_replicas_in_sync if ctx is not None else 1
        reductions = [self._rule_of(v).reduction for _, v in grads_and_vars]
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
        """Clipping and ``gradient_transformers`` see this rule's gradients only."""
        out = list(grads_and_vars)
        ordinary = [i for i, (_, var) in enumerate(out) if self._rule_of(var) is self]
        if ordinary:
            transformed = super()._transform_gradients([out[i] for i in ordinary])
            for i, pair in zip(ordinary, transformed):
                out[i] = pair
        return out

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
        config["decay"] = self._initial_decay  # always, as Keras 2's built-ins (and TFA) write it
        if self._weight_decay is not None:
            config["weight_decay"] = self._serialize_hyperparameter("weight_decay")
            config.update(self._weight_decay.get_config())
        if not self.jit_compile:
            config["jit_compile"] = False
        if self.skip_non_finite:
            config["skip_non_finite"] = True
        # A variable's own rule under its exact name; not this optimizer itself (a variable given it
        # with set_updater, seen while it moves that variable as an updater: its own rule, no routing).
        saved = {k: v for k, v in self._routing.saved_patterns().items() if v is not self}
        if saved:
            config["updaters"] = {k: config_lib.serialize_object(v) for k, v in saved.items()}
        return config

    def _config_value(self, pname: str) -> Any:
        if pname in self._hyper:
            return self._serialize_hyperparameter(pname)
        return super()._config_value(pname)

    def _serialize_hyperparameter(self, hyperparameter_name: str) -> Any:
        return config_lib.serialize_hyperparameter(self._hyper[hyperparameter_name])

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: dict | None = None) -> CustomOptimizerV2:
        """Inverse of :meth:`get_config`; schedules and updaters are deserialized."""
        config = config_lib.deserialize_values(config, custom_objects)
        if "lr" in config:
            config["learning_rate"] = config.pop("lr")
        if "updaters" in config:
            config["updaters"] = {k: config_lib.deserialize_object(v, UpdateRule, "variable updater")
                                  for k, v in config["updaters"].items()}
        return cls(**config)


def as_alone(rule: UpdateRule | None, var: tf.Variable) -> UpdateRule | None:
    """The rule that moves ``var`` when ``rule`` is routed to it: a template optimizer's own
    updater for ``var``, as it would move ``var`` alone, else ``rule``."""
    if isinstance(rule, CustomOptimizerV2):
        return rule.updater_for(var) or rule
    return rule
