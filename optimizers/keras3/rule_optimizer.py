"""``RuleOptimizer``: a Keras 3 optimizer that runs the rule of a template optimizer class."""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Mapping
from typing import Any

import keras
import tensorflow as tf

from optimizers import config as config_lib
from optimizers import slots as slots_lib
from optimizers.execution import StepRunner
from optimizers.keras3.compat import built_variables, strategy_of, variable_index
from optimizers.keras_compat import create_hypers, hyper_dict
from optimizers.optimizer_state import EvaluationPoint, RuleState
from optimizers.template import CustomOptimizerV2
from optimizers.tf_compat import on_this_device
from optimizers.variable_rules import VariableRules, reduce_gradients

__all__ = ["KERAS3_ARGUMENTS", "RuleOptimizer", "add_slot", "keras2_text", "keras3_class"]

#: The arguments Keras 3's ``Optimizer`` takes for itself (the rule never sees them).
KERAS3_ARGUMENTS = ("clipnorm", "clipvalue", "global_clipnorm", "use_ema", "ema_momentum",
                    "ema_overwrite_frequency", "loss_scale_factor", "gradient_accumulation_steps")


class _Rule:
    """Holds the rule out of Keras 3's and TensorFlow's attribute tracking (a Keras 2 optimizer
    object: its own state is not the Keras 3 optimizer's), with the runner of its updates
    (``optimizers/execution.py``) and the step's coefficients."""

    def __init__(self, rule: CustomOptimizerV2, runner: StepRunner) -> None:
        self.rule, self.runner, self.coefficients = rule, runner, {}
        self.state, self.next_state = RuleState(rule), None  # the rule's optimizer-wide state: Keras 3 variables


class RuleOptimizer(EvaluationPoint, keras.optimizers.Optimizer):
    """A Keras 3 optimizer that runs the rule of a template optimizer class (``rule_class``)."""

    rule_class: type[CustomOptimizerV2]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if keras.backend.backend() != "tensorflow":
            raise ValueError(f"{type(self).__name__} runs on Keras 3's TensorFlow backend (KERAS_BACKEND=tensorflow). "
                             f"Received: the {keras.backend.backend()!r} backend")
        own = {key: kwargs.pop(key) for key in KERAS3_ARGUMENTS if key in kwargs}
        if isinstance(kwargs.get("updaters"), Mapping):  # a Keras 3 variable as a key: its TensorFlow variable
            kwargs["updaters"] = {_as_key(key): rule for key, rule in kwargs["updaters"].items()}
        rule = self.rule_class(*args, **kwargs)
        learning_rate = hyper_dict(rule)["learning_rate"] if self.has_learning_rate() else 0.0
        super().__init__(learning_rate=learning_rate, name=rule.rule_name, **own)
        self._held = _Rule(rule, StepRunner(self._inputs_of, self._steps_taken))
        if self.has_learning_rate():
            rule.learning_rate = lambda: self.learning_rate  # Keras 3's, evaluated at the step

    @classmethod
    def has_learning_rate(cls) -> bool:
        return "learning_rate" in inspect.signature(cls.rule_class.__init__).parameters

    @property
    def rule(self) -> CustomOptimizerV2:
        """The Keras 2 optimizer whose rule, hyperparameters and options this one runs."""
        return self.__dict__["_held"].rule

    # ----------------------------------------------------------- attributes
    def _is_rule_attribute(self, name: str) -> bool:
        held = self.__dict__.get("_held")
        return (held is not None and not name.startswith("_") and name != "learning_rate"
                and (name in held.rule.hyperparameter_names or name in config_lib.signature_parameters(self.rule_class)))

    def __getattr__(self, name: str) -> Any:
        if self._is_rule_attribute(name):
            return getattr(self.rule, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if self._is_rule_attribute(name):
            setattr(self.rule, name, value)  # the rule checks it (and refuses options after a step)
        else:
            super().__setattr__(name, value)

    @property
    def weight_decay(self) -> Any:
        """The rule's weight decay (``None`` without); Keras 3's own never applies on top of it."""
        held = self.__dict__.get("_held")
        return None if held is None or held.rule.weight_decay_policy is None else held.rule.weight_decay

    @weight_decay.setter
    def weight_decay(self, value: Any) -> None:
        if self.__dict__.get("_held") is not None:  # Keras 3's __init__ sets its own (None): not ours
            self.rule.weight_decay = value

    def _apply_weight_decay(self, variables: list) -> None:
        """None: the rule decays its variables in its own step, in its own order."""

    def exclude_from_weight_decay(self, var_list: Any = None, var_names: Any = None) -> None:
        """Keras 3's call, on the rule's ``exclude_from_weight_decay`` regexes: each of
        ``var_names`` is searched in variable names, each variable of ``var_list`` matched by name."""
        patterns = list(self.rule.exclude_from_weight_decay or ())
        patterns += list(var_names or ()) + [f"^{re.escape(v.value.name)}$" for v in var_list or ()]
        self.rule.exclude_from_weight_decay = patterns

    # ----------------------------------------------------------------- state
    def build(self, var_list: list) -> None:
        """Slots of each variable under its rule: this optimizer's, or its updater's (named
        ``"<rule_name>_<slot>"``); none for a variable Keras 3 overwrites with its gradient."""
        super().build(var_list)
        rule = self.rule
        create_hypers(rule)  # variables: a value set later reaches traced steps
        rule.lock_options()
        specs = []
        for var in var_list:
            var_rule = self._rule_of(var.value)
            own = slots_lib.as_slot_specs(var_rule.slot_specs(var.value)) if not _overwritten(var) else ()
            specs.append(("" if var_rule is rule else var_rule.rule_name, own))
        self._rule_slots = [dict() for _ in var_list]
        names = list(dict.fromkeys((prefix, spec.name) for prefix, each in specs for spec in each))
        for prefix, name in names:  # every "m", then every "v", then each updater's
            for var, (var_prefix, each), slots in zip(var_list, specs, self._rule_slots):
                for spec in each:
                    if (var_prefix, spec.name) == (prefix, name):
                        slots[name] = add_slot(self, var, spec, prefix)
        wide = "float64" if any(var.dtype == "float64" for var in var_list) else "float32"
        self.rule_state.create(lambda spec: self.add_variable(
            shape=spec.shape, initializer=keras.initializers.Constant(spec.initial_value),
            dtype=spec.dtype.name if spec.dtype is not None else wide, aggregation="only_first_replica",
            name=spec.name), var_list)

    @property
    def rule_state(self) -> RuleState:
        """The rule's optimizer-wide state (``state_specs``), its variables made by :meth:`build`."""
        return self._held.state

    @property
    def has_evaluation_point(self) -> bool:
        return self.rule.has_evaluation_point

    def evaluated_variables(self) -> list:
        return [var for var in built_variables(self)
                if self.evaluation_inputs(var) is not None]

    def evaluation_inputs(self, var: Any) -> tuple | None:
        """``(rule, TensorFlow variable, slots, coefficients)`` of ``var`` (a Keras 3 variable) for its
        evaluation point; ``None`` for a variable this optimizer's rule does not move."""
        index = variable_index(self, var)
        if index is None or self._rule_of(var.value) is not self.rule:
            return None
        slots = {name: slot.value for name, slot in self._rule_slots[index].items()}
        if not slots:
            return None
        dtype = var.value.dtype.base_dtype
        coefficients = self.rule.step_coefficients(dtype, self._steps_taken(), self.rule_state.values())
        return self.rule, var.value, slots, {**coefficients, **self.rule.options_for(var.value)}

    def _rule_of(self, var: tf.Variable) -> Any:
        """The rule that moves ``var``: its updater (``updaters=``, ``optimizers.set_updater``), else
        this optimizer's."""
        return self.rule.updater_for(var) or self.rule

    # ------------------------------------------------------------------ step
    def _overwrite_variables_directly_with_gradients(self, grads: list, trainable_variables: list) -> tuple:
        """Keras 3's hook that takes its ``overwrite_with_gradient`` variables out of the step, before
        loss scaling, clipping, accumulation and the EMA: the variables with an updater are
        stepped here too, each gradient combined across replicas by its updater's ``reduction``."""
        grads, trainable_variables = super()._overwrite_variables_directly_with_gradients(grads, trainable_variables)
        routed = [i for i, var in enumerate(trainable_variables) if self._rule_of(var.value) is not self.rule]
        if not routed:
            return grads, trainable_variables
        self._held.coefficients = {}
        pairs = reduce_gradients(self._rule_of, [(grads[i], trainable_variables[i].value) for i in routed],
                                 _sum_across_replicas)  # each by its updater's reduction, in one all-reduce
        pairs = [(grad, var) for grad, var in pairs if self._rule_of(var).reduction != "none"]  # Frozen's

        def update(distribution: tf.distribute.Strategy, pairs: list) -> None:
            for grad, var in pairs:
                distribution.extended.update(var, self._update, args=(grad,), group=False)

        tf.__internal__.distribute.interim.maybe_merge_call(update, strategy_of(self), pairs)
        routed_positions = set(routed)
        kept = [i for i in range(len(grads)) if i not in routed_positions]
        return [grads[i] for i in kept], [trainable_variables[i] for i in kept]

    def _backend_update_step(self, grads: list, trainable_variables: list, learning_rate: Any) -> None:
        """Keras 3's hook that runs ``update_step`` for every variable of one step: the rule's
        coefficients are computed once per (device, dtype) in it."""
        held = self._held
        held.coefficients, held.next_state = {}, held.state.next_values(self._steps_taken())
        with tf.control_dependencies(held.state.checks()):
            super()._backend_update_step(grads, trainable_variables, learning_rate)
        if held.state.variables:
            tf.__internal__.distribute.interim.maybe_merge_call(self._store_state, strategy_of(self))

    def _store_state(self, distribution: tf.distribute.Strategy) -> None:
        """The state after the step, computed again where the replicas meet (from the same values)."""
        for name, value in self._held.state.next_values(self._steps_taken()).items():
            self._held.state.variables[name].value.assign(value)

    def _inputs_of(self, var: tf.Variable, apply_state: Any) -> tuple:
        rule, cache = self._rule_of(var), self._held.coefficients
        slots = {name: on_this_device(slot.value) for name, slot in self._rule_slots[variable_index(self, var)].items()}
        key = (var.device, var.dtype.base_dtype, id(rule))
        if key not in cache:
            with tf.device(var.device):
                state = self._held.next_state if rule is self.rule else None
                cache[key] = rule.step_coefficients(var.dtype.base_dtype, self._steps_taken(), state)
        options = rule.options_for(var)
        return rule, slots, {**cache[key], **options}, options

    def _steps_taken(self) -> Any:
        """``iterations`` as TensorFlow reads it (a variable, or inside Keras 3's ``cond`` a tensor)."""
        iterations = self.iterations
        return iterations.value if isinstance(iterations, keras.Variable) else iterations

    def update_step(self, gradient: Any, variable: tf.Variable, learning_rate: Any) -> Any:
        return self._update(variable, gradient)

    def _update(self, variable: tf.Variable, gradient: Any) -> Any:
        """The step of ``variable`` under its rule."""
        if isinstance(gradient, tf.IndexedSlices):  # unique rows, summed, as the rule's update_sparse takes them
            indices, position = tf.unique(gradient.indices)
            values = tf.math.unsorted_segment_sum(gradient.values, position, tf.shape(indices)[0])
            return self._held.runner.sparse(values, variable, indices, None)
        return self._held.runner.dense(gradient, variable, None)

    # ---------------------------------------------------------------- config
    def get_config(self) -> dict[str, Any]:
        own = super().get_config()
        config = {key: value for key, value in self.rule.get_config().items()
                  if key not in ("decay", "clipnorm", "clipvalue", "global_clipnorm", "is_legacy_optimizer")}
        config.update({key: own[key] for key in ("name", *KERAS3_ARGUMENTS)})
        if self.has_learning_rate():
            config["learning_rate"] = own["learning_rate"]
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: dict | None = None) -> RuleOptimizer:
        config = dict(config)
        if "updaters" in config:
            config["updaters"] = VariableRules.updaters_from_config(config["updaters"])
        if not cls.has_learning_rate():
            config.pop("learning_rate", None)
            return cls(**config)
        return super().from_config(config, custom_objects)


def _as_key(key: Any) -> Any:
    """An ``updaters=`` key with a Keras 3 variable's TensorFlow variable in its place."""
    return key.value if isinstance(key, keras.Variable) else key


def _overwritten(var: Any) -> bool:
    """Whether Keras 3 sets ``var`` (a Keras 3 variable) to its gradient, outside any rule."""
    return getattr(var, "overwrite_with_gradient", False) is True


def _sum_across_replicas(grads_and_vars: list) -> list:
    """``grads_and_vars`` summed across the replicas of the replica context (as they are outside one)."""
    context = tf.distribute.get_replica_context()
    if context is None or not grads_and_vars:
        return grads_and_vars
    summed = context.all_reduce(tf.distribute.ReduceOp.SUM, [grad for grad, _ in grads_and_vars])
    return list(zip(summed, [var for _, var in grads_and_vars]))


def add_slot(optimizer: keras.optimizers.Optimizer, var: Any, spec: slots_lib.SlotSpec, prefix: str = "") -> Any:
    """``optimizer``'s variable for slot ``spec`` of ``var`` (a Keras 3 variable), named after
    ``var``'s path, ``prefix`` (an updater's name) and the slot."""
    shape = var.shape if spec.shape is None else spec.shape(list(var.shape))
    initializer = spec.initializer
    if not isinstance(initializer, str):
        initializer = functools.partial(_initial_value, spec.initializer)
    return optimizer.add_variable(shape=shape, initializer=initializer, dtype=var.dtype,
                                  name="_".join(p for p in (var.path.replace("/", "_"), prefix, spec.name) if p))


def _initial_value(initializer: Any, shape: Any, dtype: Any = None, **kwargs: Any) -> Any:
    # Outside any function being traced (Keras 3 builds the optimizer in the first traced step
    # without a strategy): a value read from the variable then lifts out of an XLA step.
    with tf.init_scope():
        return initializer(shape, tf.as_dtype(dtype))


def keras3_class(rule_class: type[CustomOptimizerV2]) -> type:
    """The Keras 3 optimizer class of ``rule_class`` (a :class:`~optimizers.CustomOptimizerV2`
    subclass that uses only the public hooks): the same name, signature and numbers, plus Keras
    3's own options, registered for ``.keras`` files as ``"optimizers.keras3>Name"``.

    >>> import keras
    >>> import optimizers
    >>> from optimizers import keras3
    >>> AdamW3 = keras3.keras3_class(optimizers.AdamW)
    >>> isinstance(AdamW3(weight_decay=1e-4), keras.optimizers.Optimizer)
    True
    """
    if not (isinstance(rule_class, type) and issubclass(rule_class, CustomOptimizerV2)):
        raise TypeError(f"`rule_class` must be a CustomOptimizerV2 subclass. Received: rule_class={rule_class!r}")
    cls = type(rule_class.__name__, (RuleOptimizer,), {
        "rule_class": rule_class,
        "__doc__": f"Keras 3's {rule_class.__name__}: the rule of :class:`optimizers.{rule_class.__name__}`, "
                   f"its arguments, and Keras 3's own options ({', '.join(KERAS3_ARGUMENTS)}).\n\n"
                   + keras2_text(rule_class),
        "__module__": "optimizers.keras3",  # where users import it
        "__qualname__": rule_class.__name__,
    })
    cls.__signature__ = _signature(rule_class)
    return keras.saving.register_keras_serializable(package="optimizers.keras3")(cls)


def keras2_text(cls: type) -> str:
    """``cls``'s docstring without its examples, which are Keras 2 code."""
    return re.split(r"^\s*Example\b[^\n]*:\s*$", cls.__doc__ or "", maxsplit=1, flags=re.M)[0].rstrip() + "\n"


def _signature(rule_class: type) -> inspect.Signature:
    """``rule_class``'s constructor signature, without ``self``, with Keras 3's own keywords."""
    params = [p for p in inspect.signature(rule_class.__init__).parameters.values()
              if p.name != "self" and p.kind is not p.VAR_KEYWORD]
    params += [inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=None)
               for key in KERAS3_ARGUMENTS if key not in {p.name for p in params}]
    return inspect.Signature(params + [inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)])

