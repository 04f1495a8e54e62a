"""Which rule moves each variable of a template optimizer, with which slots, and how its
gradient is combined across replicas.

A variable follows the optimizer's own rule or the updater routed to it
(``optimizers/updaters.py``); :class:`VariableRules` computes the slot specs of each
(rule, variable) pair once, creates the slots once, and refuses what a rule cannot take before
anything changes. :func:`reduce_gradients` combines the gradients of one step across replicas,
each by its rule's ``reduction``, in one all-reduce.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from typing import Any

import tensorflow as tf

from optimizers import config as config_lib
from optimizers import slots as slots_lib
from optimizers.keras_compat import OptimizerV2, create_hypers, fallback_apply_state, track
from optimizers.rule import UpdateRule
from optimizers.tf_compat import distributed_container, logical_variable, variable_key, variable_name
from optimizers.updaters import Routing

__all__ = ["VariableRules", "as_alone", "check_whole_variables", "reduce_gradients"]


class VariableRules:
    """The rules, slot specs and slots of ``host``'s variables. ``routing`` is the host's
    ``updaters=`` argument; ``host.updater_for(var)`` decides each variable's rule (by
    default :meth:`routed_rule`; ``MultiOptimizer`` routes by its pairs). ``host.slot_order``
    says how the first step creates the host's own slots (``"slot"``: every variable's ``m``,
    then every ``v``, the order ``.h5`` files store them in; ``"variable"``: one variable's,
    then the next)."""

    def __init__(self, host: Any, routing: Routing) -> None:
        self.host, self.routing = host, routing
        self._specs: dict = {}  # (id(rule), variable key) -> its slot specs
        self._slotted: set = set()  # (variable key, id(rule)) pairs whose slots exist (never removed)
        self._patterns_checked = False
        self.track_routed({f"updaters[{key}]": rule for key, rule in routing.named_rules().items()})

    def routed_rule(self, var: tf.Variable) -> UpdateRule | None:
        """The rule ``updaters=`` (or the variable itself) gives ``var`` instead of the host's, or
        ``None`` (the host's ``updater_for`` by default)."""
        rule = self.routing.lookup(var)
        return None if rule is self.host else as_alone(rule, var)

    def rule_of(self, var: tf.Variable) -> UpdateRule:
        return self.host.updater_for(var) or self.host

    def track_routed(self, rules: dict[str, UpdateRule]) -> None:
        """Make each optimizer of ``rules`` (``{name: rule}``) a checkpoint dependency of the host
        under its name, so that ``tf.train.Checkpoint`` keeps its hyperparameter variables (a
        learning rate set since its construction) with the host's state (its slots are the
        host's already). A variable updater keeps no variables."""
        for name, rule in rules.items():
            if isinstance(rule, OptimizerV2) and rule is not self.host:
                track(self.host, rule, name)

    def inputs(self, var: tf.Variable, apply_state: dict | None, iterations: Any, decay_mask: Any) -> tuple:
        """``(rule, slots, coefficients, options)`` of ``var`` for this step: the host's coefficients
        from ``apply_state`` (Keras 2's, prepared once per device and dtype), a routed rule's
        computed once per step and kept there too. A routed template optimizer decays as the
        host's ``decay_var_list`` (``decay_mask``) says, when one is given."""
        host, rule = self.host, self.rule_of(var)
        var_slots = self.slots(rule, var)
        device, dtype = var.device, var.dtype.base_dtype
        key = (device, dtype) if rule is host else (device, dtype, id(rule))
        coefficients = (apply_state or {}).get(key)
        if coefficients is None:
            if rule is host:
                coefficients = fallback_apply_state(host, device, dtype)
            else:
                with tf.device(device):
                    coefficients = rule.step_coefficients(dtype, iterations)
                if apply_state is not None:
                    apply_state[key] = coefficients
        options = (rule.options_for(var, decay_mask) if hasattr(rule, "decays") else rule.options_for(var))
        return rule, var_slots, ({**coefficients, **options} if options else coefficients), options

    def own_only(self, transform: Callable[[list], list], grads_and_vars: list) -> list:
        """``grads_and_vars`` with ``transform`` (clipping) applied to the host's own variables only."""
        out = list(grads_and_vars)
        own = [i for i, (_, var) in enumerate(out) if self.rule_of(var) is self.host]
        if own:
            for i, pair in zip(own, transform([out[i] for i in own])):
                out[i] = pair
        return out

    def get_config(self) -> dict[str, Any]:
        """``{"updaters": {regex: serialized rule}}`` (empty without any): the routing's regexes, and
        a variable's own rule under its exact name; not the host itself (a variable given it with
        set_updater, seen while the host moves it as an updater: its own rule, no routing)."""
        saved = {k: v for k, v in self.routing.saved_patterns().items() if v is not self.host}
        return {"updaters": {k: config_lib.serialize_object(v) for k, v in saved.items()}} if saved else {}

    @staticmethod
    def updaters_from_config(updaters: dict[str, Any]) -> dict[str, UpdateRule]:
        """Inverse of :meth:`get_config`'s ``"updaters"``."""
        return {k: config_lib.deserialize_object(v, UpdateRule, "variable updater") for k, v in updaters.items()}

    def warn_unmatched(self, var_list: list) -> None:
        """Once, at the first step: warn about the ``updaters`` regexes that match none of ``var_list``."""
        if not var_list or self._patterns_checked:
            return
        self._patterns_checked = True
        names = [variable_name(var) for var in var_list]
        unmatched = self.routing.unmatched_patterns(names)
        if unmatched:
            warnings.warn(f"{type(self.host).__name__}: the `updaters` regexes {unmatched} match no variable of the "
                          f"first step (named like {names[:3]}): those rules are not used. (A SavedModel "
                          "loaded inside a distribution strategy's scope names its variables without their "
                          "layers' scopes: save in the .keras format instead.)", stacklevel=3)

    def prefix(self, rule: UpdateRule) -> str:
        """Of ``rule``'s slot names: none for the host's own, ``"<rule_name>/"`` for an updater's."""
        return "" if rule is self.host else rule.rule_name + "/"

    def specs(self, rule: UpdateRule, var: tf.Variable) -> tuple[slots_lib.SlotSpec, ...]:
        """``rule.slot_specs(var)``, computed once; at the first, ``rule``'s options are locked
        and its per-variable options checked against its coefficients' names."""
        key = (id(rule), variable_key(var))
        specs = self._specs.get(key)
        if specs is None:
            clash = sorted(set(rule.variable_options(var)) & (set(rule.hyperparameter_names) | set(rule.reserved_names)))
            if clash:  # at the first step that moves var, before anything changes
                raise ValueError(f"{type(rule).__name__}.variable_options() must not return a coefficient's name "
                                 f"(a hyperparameter, or one its base class sets): it would replace it. Received: "
                                 f"{clash} for variable {var.name!r}")
            if rule is not self.host and (rule.state_specs() or rule.has_evaluation_point):
                raise ValueError(f"{type(rule).__name__} keeps optimizer-wide state or evaluates elsewhere than it "
                                 f"trains: it cannot move chosen variables of another optimizer (an updater, a "
                                 f"MultiOptimizer pair). Use it as the optimizer. Received: {rule!r} for variable "
                                 f"{var.name!r}")
            rule.lock_options()
            if isinstance(rule, OptimizerV2) and rule is not self.host:
                create_hypers(rule)  # its hyperparameters become variables: later assignments take effect
            specs = self._specs[key] = slots_lib.as_slot_specs(rule.slot_specs(var))
        return specs

    def slots(self, rule: UpdateRule, var: tf.Variable) -> dict[str, tf.Variable]:
        """``var``'s slots under ``rule``, as its update hooks receive them."""
        return slots_lib.get_slots(self.host, var, self.specs(rule, var), self.prefix(rule))

    def create_slots(self, var_list: Iterable[tf.Variable]) -> bool:
        """Create the slots of the variables of ``var_list`` that have none under their rule yet
        (an updater set since: its slots); whether any of them follows another rule than the host's."""
        host = self.host
        keys = {id(v): (variable_key(v), id(self.rule_of(v))) for v in var_list}
        var_list = [v for v in var_list if keys[id(v)] not in self._slotted]
        if not var_list:
            return False
        check_whole_variables(self.rule_of, var_list)
        own = [v for v in var_list if self.rule_of(v) is host]
        if host.slot_order == "variable":
            for var in own:
                slots_lib.create_slots(host, var, self.specs(host, var))
        else:
            names = list(dict.fromkeys(spec.name for v in own for spec in self.specs(host, v)))
            for name in names:
                for var in own:
                    slots_lib.create_slots(host, var, [s for s in self.specs(host, var) if s.name == name])
        routed = False
        for var in var_list:
            rule = self.rule_of(var)
            if rule is not host:
                routed = True
                slots_lib.create_slots(host, var, self.specs(rule, var), prefix=self.prefix(rule))
        self._slotted.update(keys[id(v)] for v in var_list)
        if routed:  # an optimizer attached to a variable (set_updater) is kept as its config keeps it
            self.track_routed({f"updaters[{key}]": rule for key, rule in self.routing.saved_patterns().items()})
        return routed


def as_alone(rule: UpdateRule | None, var: tf.Variable) -> UpdateRule | None:
    """The rule that moves ``var`` when ``rule`` is routed to it: a template optimizer's own
    updater for ``var`` (its ``updater_for``), as it would move ``var`` alone, else ``rule``."""
    alone = getattr(rule, "updater_for", None)
    return (alone(var) or rule) if alone is not None else rule


def check_whole_variables(rule_of: Any, var_list: list) -> None:
    """Refuse a shard of a ``ShardedVariable`` (``ParameterServerStrategy``'s ``variable_partitioner``)
    whose rule reads whole-variable statistics (``UpdateRule.whole_variable``), before any state changes."""
    for var in var_list:
        rule = rule_of(var)
        table = logical_variable(var)
        if getattr(rule, "whole_variable", False) and table is not distributed_container(var):
            raise ValueError(
                f"{type(rule).__name__} reads statistics of a whole variable (a norm or factored moments), but "
                f"{variable_name(var)!r} is split into shards by the strategy's `variable_partitioner`, and each shard "
                f"would be updated with its own statistics. Keep this variable in one shard (a partitioner that "
                f"leaves it whole), or route it to an element-wise rule with `updaters=`. Received: "
                f"var={var.name!r}, a shard of shape {var.shape.as_list()} of a table of shape "
                f"{table.shape.as_list()}")


def before_sum(grad: Any, reduction: str, replica_id: Any, num_replicas: int) -> Any:
    """Turn ``grad`` into what a cross-replica SUM must see to yield ``reduction``.

    Updater gradients travel in the optimizer's one SUM all-reduce together with
    the ordinary gradients (so every replica issues the same collectives in the
    same order): ``"mean"`` is the sum divided afterwards; ``"max"`` puts each
    replica's value in its own row of a zero stack, whose sum holds every
    replica's value. A sparse gradient sums its repeated rows first: the
    replicas' slices are then concatenated by the all-reduce, one per replica
    that touched a row, and :func:`after_sum` reduces each row over those.
    """
    if isinstance(grad, tf.IndexedSlices) and reduction in ("mean", "max"):
        rows, position = tf.unique(grad.indices)
        return tf.IndexedSlices(tf.math.unsorted_segment_sum(grad.values, position, tf.shape(rows)[0]), rows,
                                grad.dense_shape)
    if reduction != "max":
        return grad
    grad = tf.convert_to_tensor(grad)
    one_hot = tf.one_hot(replica_id, num_replicas, dtype=grad.dtype)
    return tf.reshape(one_hot, [num_replicas] + [1] * grad.shape.rank) * tf.expand_dims(grad, 0)


def after_sum(summed: Any, reduction: str, num_replicas: int) -> Any:
    """Finish :func:`before_sum`'s reduction on the summed value: a row of a sparse gradient
    takes the mean or max of the values sent by the replicas that touched it (the others sent
    none: a row one replica touched keeps its value)."""
    if isinstance(summed, tf.IndexedSlices) and reduction in ("mean", "max"):
        rows, position = tf.unique(summed.indices)
        reduce = tf.math.unsorted_segment_max if reduction == "max" else tf.math.unsorted_segment_mean
        return tf.IndexedSlices(reduce(summed.values, position, tf.shape(rows)[0]), rows, summed.dense_shape)
    if reduction == "max":
        return tf.reduce_max(summed, axis=0)
    if reduction == "mean":
        return summed / num_replicas
    return summed


def reduce_gradients(rule_of: Callable, grads_and_vars: list, aggregator: Callable) -> list:
    """``grads_and_vars`` combined across replicas: each gradient by its rule's ``reduction``, all
    of them in the one call to ``aggregator`` (a SUM all-reduce, Keras 2's ``gradient_aggregator``),
    so that every replica issues the same collectives in the same order; ``"none"`` passes as is."""
    ctx = tf.distribute.get_replica_context()
    n = ctx.num_replicas_in_sync if ctx is not None else 1
    reductions = [rule_of(v).reduction for _, v in grads_and_vars]
    to_sum = [(before_sum(g, r, ctx.replica_id_in_sync_group, n) if n > 1 else g, v)
              for (g, v), r in zip(grads_and_vars, reductions) if r != "none"]
    summed = iter(aggregator(to_sum) if to_sum else [])
    out = []
    for (grad, var), reduction in zip(grads_and_vars, reductions):
        if reduction != "none":
            grad = next(summed)[0]
            if n > 1:
                grad = after_sum(grad, reduction, n)
        out.append((grad, var))
    return out
