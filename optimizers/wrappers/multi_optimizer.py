r"""``MultiOptimizer``: a different optimizer for each group of layers.

The drop-in successor of TensorFlow Addons' ``MultiOptimizer``, built on
variable routing (``optimizers/updaters.py``): one host optimizer takes one
step, in which each layer's variables follow the rule of the optimizer paired
with the layer, where it is a rule: written on
:class:`~optimizers.CustomOptimizerV2` (``optimizers.Adam``...), a variable
updater (``optimizers.Frozen()``), or a built-in Keras optimizer with a class
of its name here (``Adam``, ``SGD``), which becomes that class. Any other
Keras 2 optimizer (``RMSprop``, ``Adagrad``..., a third-party ``OptimizerV2``)
steps its pair's weights itself, by its own ``apply_gradients``, within the
host's step.
"""

from __future__ import annotations

import collections
import types
from typing import Any

import tensorflow as tf

from optimizers import config as config_lib
from optimizers import saving
from optimizers.base import check_grads_and_vars, index_checks
from optimizers.keras_compat import OptimizerV2, create_all_weights, create_hypers, track
from optimizers.rule import UpdateRule
from optimizers.template import CustomOptimizerV2
from optimizers.tf_compat import is_parameter_server, variable_key, variable_name
from optimizers.updaters import VariableUpdater, get_updater
from optimizers.variable_rules import as_alone, reduce_gradients
from optimizers.wrappers.pairs import PrefixedStore, clip_as_alone, layer_weights, pair_optimizer, parse_pairs

__all__ = ["MultiOptimizer"]

_REFUSED = ("clipnorm", "clipvalue", "global_clipnorm", "updaters", "lr", "decay")  # each optimizer has its own

_SUMMED = types.SimpleNamespace(reduction="sum")  # how a pair's own Keras optimizer combines gradients


def _refuse_clipping(multi: MultiOptimizer, key: str, value: Any) -> None:
    """MultiOptimizer's clipping setters: each pair's optimizer clips, so only ``None`` (what
    OptimizerV2's constructor sets) is accepted."""
    if value is not None:
        raise ValueError(f"MultiOptimizer takes no {key}: set it on each pair's optimizer. Received: {key}={value!r}")
    getattr(OptimizerV2, key).fset(multi, value)


class MultiOptimizer(CustomOptimizerV2):
    r"""Train each group of layers with its own optimizer (discriminative layer training).

    For each pair ``(optimizer, layers)``, every weight :math:`\theta` of
    ``layers`` moves as ``optimizer`` alone would move it, with its own
    hyperparameters, schedules, weight decay and clipping:

    .. math::

        \theta \leftarrow \mathrm{step}_{o(\theta)}(\theta, g_\theta)

    where :math:`o(\theta)` is the optimizer paired with :math:`\theta`'s
    layer. Uses: smaller learning rates for pretrained layers (Howard & Ruder,
    arXiv:1801.06146; Jin et al., arXiv:1607.05440). One step of one host
    optimizer does it all: one ``iterations`` (schedules are evaluated at it),
    one all-reduce, slots kept on the host as ``"<optimizer name>/<slot>"``.
    Weights in no pair are not changed (as in TFA), but a step in which no
    weight is in a pair is refused (it would do nothing: the names are wrong,
    e.g. a SavedModel loaded inside a strategy's scope); a variable's own updater
    (``set_updater``, ``overwrite_with_gradient``) wins over its layer's pair.

    TensorFlow Addons' ``MultiOptimizer(optimizers_and_layers=None,
    optimizer_specs=None, name="MultiOptimizer")``, same config
    (``optimizer_specs``: each optimizer and its weights' names, as
    :meth:`create_optimizer_spec` makes one). Differences:
    a built-in Keras optimizer with an equivalent here (``Adam``, ``SGD``,
    given or in a config, TFA's included) becomes that equivalent, built from
    its config (so set a pair's hyperparameters on
    ``optimizer_specs[i]["optimizer"]``); any other Keras 2 optimizer (built-in
    or third-party, fresh) steps its pair's weights with its own
    ``apply_gradients`` (TFA's numbers), on gradients combined across replicas
    once with the rest of the step's, with its own clipping, its own step
    counter and slots (checkpointed, and kept by ``.h5``, ``.keras`` and
    SavedModel for a legacy ``OptimizerV2``), before the rules' step counts
    the step in ``iterations``; such a pair cannot be combined with
    ``skip_non_finite``; a pair of layers moves those layers' variables, never
    another weight of the same name (TFA routed by name: a nested model's
    weight in no pair, named like a paired one, moved too), and a pair from a
    config, which has names only, refuses a step in which two variables share
    a paired name; a weight in two pairs is refused (TFA applied both); the
    whole state is checkpointed (TFA's kept no slots; each pair's optimizer's hyperparameter
    variables as ``optimizer_specs[<i>]``); host ``clipnorm``... and
    ``decay_var_list`` are refused (TFA ignored them).

    Args:
        optimizers_and_layers: ``[(optimizer, layer or model or list of layers), ...]``.
        optimizer_specs: The same as ``[{"optimizer": ..., "weights": [names]}]``
            (what ``get_config`` writes). Give exactly one of the two.
        name: Defaults to ``"MultiOptimizer"``.
        **kwargs: ``jit_compile`` (default ``True``).

    Example, a slow first layer:

    >>> import optimizers
    >>> keras = optimizers.keras
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2), keras.layers.Dense(1)])
    >>> opt = MultiOptimizer([(optimizers.Adam(1e-4), model.layers[0]), (optimizers.Adam(1e-2), model.layers[1:])])
    >>> model.compile(opt, loss="mse")
    >>> [len(spec["weights"]) for spec in opt.optimizer_specs]
    [2, 2]
    """

    reduction = "none"  # weights in no pair: unchanged, their gradients never communicated
    weight_decay_placement = "none"

    def __init__(self, optimizers_and_layers: Any = None, optimizer_specs: Any = None, name: str = "MultiOptimizer",
                 **kwargs: Any) -> None:
        refused = {k: v for k, v in kwargs.items() if k in _REFUSED and v is not None and (k != "decay" or v)}
        if refused:
            raise ValueError(f"MultiOptimizer takes no {', '.join(refused)}: set them on each pair's optimizer. "
                             f"Received: {refused}")
        super().__init__(name, **kwargs)
        if (optimizers_and_layers is None) == (optimizer_specs is None):
            raise ValueError("Give exactly one of `optimizers_and_layers` and `optimizer_specs`. Received: "
                             f"optimizers_and_layers={optimizers_and_layers!r}, optimizer_specs={optimizer_specs!r}")
        self._pairs = parse_pairs(optimizers_and_layers, optimizer_specs, pair_optimizer, layer_weights,
                                  lambda var: var.name, variable_key)
        # Pairs of layers route their variables themselves; only pairs from a config go by name, which
        # two weights can share (a layer of a nested model in no pair named like a paired one).
        rules = [i for i, pair in enumerate(self._pairs) if isinstance(pair["optimizer"], UpdateRule)]
        foreign = [i for i in range(len(self._pairs)) if i not in rules]
        if foreign and self.skip_non_finite:
            raise ValueError("MultiOptimizer cannot skip a step (`skip_non_finite`) in which a pair's own Keras "
                             "optimizer steps its weights. Wrap the model's optimizer in a LossScaleOptimizer, or "
                             "pair optimizers written on CustomOptimizerV2. Received: skip_non_finite=True with "
                             f"{[type(self._pairs[i]['optimizer']).__name__ for i in foreign]}")
        self._rule_by_key = {key: self._pairs[i]["optimizer"] for i in rules for key in self._pairs[i]["keys"] or ()}
        self._rule_by_name = {name: self._pairs[i]["optimizer"] for i in rules if self._pairs[i]["keys"] is None
                              for name in self._pairs[i]["weights"]}
        # A pair's own Keras optimizer, by the pair's position (no Keras saving walks it twice: see
        # save_own_variables), and the variables it has met (their loaded slots restored once).
        self._foreign_by_key = {key: i for i in foreign for key in self._pairs[i]["keys"] or ()}
        self._foreign_by_name = {name: i for i in foreign if self._pairs[i]["keys"] is None
                                 for name in self._pairs[i]["weights"]}
        self._foreign_met: dict = {}
        self._rules.track_routed({f"optimizer_specs[{i}]": pair["optimizer"] for i, pair in enumerate(self._pairs)})
        for i in foreign:
            track(self, self._pairs[i]["optimizer"], f"optimizer_specs[{i}]")  # new-style ones too

    clipnorm = property(OptimizerV2.clipnorm.fget, lambda self, value: _refuse_clipping(self, "clipnorm", value))
    clipvalue = property(OptimizerV2.clipvalue.fget, lambda self, value: _refuse_clipping(self, "clipvalue", value))
    global_clipnorm = property(OptimizerV2.global_clipnorm.fget,
                               lambda self, value: _refuse_clipping(self, "global_clipnorm", value))

    @classmethod
    def create_optimizer_spec(cls, optimizer: Any, layers_or_model: Any) -> dict[str, Any]:
        """One entry of ``optimizer_specs`` (TFA's classmethod): ``{"optimizer": optimizer,
        "weights": [names]}`` for the weights of ``layers_or_model`` (a layer, a model, or a
        list of them), built."""
        return {"optimizer": optimizer, "weights": [var.name for var in layer_weights(layers_or_model, "layers_or_model")]}

    @property
    def optimizer_specs(self) -> list[dict[str, Any]]:
        """``[{"optimizer": rule, "weights": [variable names]}]``, as in TFA."""
        return [{"optimizer": pair["optimizer"], "weights": list(pair["weights"])} for pair in self._pairs]

    def updater_for(self, var: tf.Variable) -> UpdateRule | None:
        own = get_updater(var)
        if own is not None:
            return own
        return as_alone(self._paired_rule(var), var)

    def _paired_rule(self, var: tf.Variable) -> UpdateRule | None:
        """The rule of ``var``'s pair: by the variable itself, or for pairs from a config by name."""
        rule = self._rule_by_key.get(variable_key(var))
        return self._rule_by_name.get(variable_name(var)) if rule is None else rule

    def _foreign_of(self, var: tf.Variable) -> Any:
        """The Keras optimizer of ``var``'s pair where it is no rule (it steps ``var`` itself), else ``None``."""
        if not (self._foreign_by_key or self._foreign_by_name) or get_updater(var) is not None:
            return None
        i = self._foreign_by_key.get(variable_key(var))
        i = self._foreign_by_name.get(variable_name(var)) if i is None else i
        return None if i is None else self._pairs[i]["optimizer"]

    def _foreign_optimizers(self) -> list[tuple[int, Any]]:
        """``[(pair position, optimizer)]`` of the pairs' own Keras optimizers, each once."""
        out, seen = [], set()
        for i in sorted(set(self._foreign_by_key.values()) | set(self._foreign_by_name.values())):
            if id(self._pairs[i]["optimizer"]) not in seen:
                seen.add(id(self._pairs[i]["optimizer"]))
                out.append((i, self._pairs[i]["optimizer"]))
        return out

    def _create_foreignlayer_weights(self, optimizer: Any, var_list: list, build: bool = True) -> None:
        """``optimizer``'s step counter, hyperparameters and slots of ``var_list`` (a new-style one is
        built once, where ``build``); slots loaded from a file take their values. They are named
        within the pair's own scope, ``optimizer_specs_<i>/``: unlike the MultiOptimizer's own
        (``iter``, ``.../m``), which an ``.h5`` file needs each to name once."""
        position = next(i for i, each in self._foreign_optimizers() if each is optimizer)
        with tf.init_scope(), tf.name_scope(f"optimizer_specs_{position}"):
            if isinstance(optimizer, OptimizerV2):
                create_all_weights(optimizer, var_list)
            elif build:
                optimizer.build(var_list)
            met = self._foreign_met.setdefault(id(optimizer), {})
            for var in var_list:
                if variable_key(var) not in met:
                    met[variable_key(var)] = var
                    if isinstance(optimizer, OptimizerV2):
                        saving.restore_inner_slots(optimizer, optimizer, var)

    def _create_all_weights(self, var_list: Any) -> None:
        # Each optimizer's hyperparameters become variables, as its own step would make them: setting one
        # (``optimizer_specs[0]["optimizer"].learning_rate = 1e-4``) then changes traced steps too.
        var_list = list(var_list)
        for pair in self._pairs:
            if isinstance(pair["optimizer"], CustomOptimizerV2):
                create_hypers(pair["optimizer"])
        groups: dict = {}  # a pair's own Keras optimizer: its weights too (Keras calls this hook on .h5 load)
        for var in var_list:
            optimizer = self._foreign_of(var)
            if optimizer is not None:
                groups.setdefault(id(optimizer), (optimizer, []))[1].append(var)
        for optimizer, variables in groups.values():
            self._create_foreignlayer_weights(optimizer, variables)
        super()._create_all_weights([var for var in var_list if self._foreign_of(var) is None])

    @property
    def weights(self) -> list[tf.Variable]:
        """The MultiOptimizer's own weights, then those of each pair's own legacy Keras optimizer
        (``.h5``; a new-style one, whose step counter takes no scope, is kept by checkpoints)."""
        own = list(super().weights)
        for _, optimizer in self._foreign_optimizers():
            own += list(optimizer.weights if isinstance(optimizer, OptimizerV2) else ())
        return own

    def update_dense(self, grad: tf.Tensor, var: tf.Variable, slots: dict, coefficients: dict) -> Any:
        return tf.no_op()  # only weights in no pair follow the host's rule

    def update_sparse(self, grad: Any, var: tf.Variable, indices: Any, slots: dict, coefficients: dict) -> Any:
        return tf.no_op()

    @tf.autograph.experimental.do_not_convert  # plain Python: no per-variable conversion cost
    def apply_gradients(self, grads_and_vars: Any, name: str | None = None,
                        experimental_aggregate_gradients: bool = True, *, decay_var_list: Any = None) -> Any:
        if decay_var_list is not None:
            raise ValueError("MultiOptimizer takes no `decay_var_list`: give each optimizer its own "
                             f"`exclude_from_weight_decay`. Received: decay_var_list={decay_var_list!r}")
        if is_parameter_server(tf.distribute.get_strategy()):
            raise NotImplementedError(
                "MultiOptimizer does not run under ParameterServerStrategy (its step fails on the workers). "
                "Route variables to their rules with one template optimizer's `updaters=` instead, e.g. "
                "optimizers.SGD(0.05, updaters={'embedding': optimizers.Adam(0.01)}). "
                f"Received: strategy={type(tf.distribute.get_strategy()).__name__}")
        grads_and_vars = check_grads_and_vars(grads_and_vars)  # every pair, also those that take no step
        given = [var for grad, var in grads_and_vars if grad is not None]
        if given and all(self.updater_for(var) is None and self._foreign_of(var) is None for var in given):
            raise ValueError(
                "None of the variables of this step is in a MultiOptimizer pair: the step would change nothing. "
                "Pairs hold the variables of the layers they were given, or from a config their names; a "
                "SavedModel loaded inside a distribution strategy's scope names its weights without their layers' "
                "scopes ('kernel:0'): save in the .keras format, or make the MultiOptimizer from the loaded model's "
                f"layers. Pairs hold {[name for pair in self._pairs for name in pair['weights']][:8]}; "
                f"received variables {[variable_name(var) for var in given][:8]}")
        named = [variable_name(var) for var in given
                 if variable_key(var) not in self._rule_by_key and variable_key(var) not in self._foreign_by_key
                 and (variable_name(var) in self._rule_by_name or variable_name(var) in self._foreign_by_name)]
        shared = sorted(name for name, count in collections.Counter(named).items() if count > 1)
        if shared:
            raise ValueError(f"Weight {shared[0]!r} of a pair names two variables of this step: a MultiOptimizer "
                             "made from optimizer_specs (a config) routes by name, which cannot tell them apart. "
                             "Make it from the layers (optimizers_and_layers), or name the layers apart. "
                             f"Received: variables named {shared}")
        # Weights in no pair take no step at all (nothing to compile for them).
        foreign = [(grad, var) for grad, var in grads_and_vars if grad is not None and self._foreign_of(var) is not None]
        grads_and_vars = [(grad, var) for grad, var in grads_and_vars if self.updater_for(var) is not None]
        if not foreign:
            return super().apply_gradients(grads_and_vars, name, experimental_aggregate_gradients)
        return self._step_withforeign_optimizer(grads_and_vars, foreign, name, experimental_aggregate_gradients)

    def _step_withforeign_optimizer(self, rules: list, foreign: list, name: str | None, aggregate: bool) -> Any:
        """One step in which pairs' own Keras optimizers step their weights: every gradient combined
        across replicas once (one all-reduce), the step's checks first, then each such optimizer's
        ``apply_gradients`` on its pair's (already combined) gradients, with its own clipping, then the
        rules' step, which counts the step in ``iterations``."""
        rules = [(grad, var) for grad, var in rules if grad is not None]
        if aggregate:
            combined = self._aggregate_gradients(rules + foreign)
            rules, foreign = combined[:len(rules)], combined[len(rules):]
        groups: dict = {}
        for grad, var in foreign:
            optimizer = self._foreign_of(var)
            groups.setdefault(id(optimizer), (optimizer, []))[1].append((grad, var))
        with tf.name_scope(self._name):
            for optimizer, pairs in groups.values():
                self._create_foreignlayer_weights(optimizer, [var for _, var in pairs], build=False)
        # Checked before anything changes: every sparse gradient's indices (the rules' hyperparameters are
        # checked within the rules' step, which comes last).
        checks = index_checks(rules + foreign)
        eager = tf.executing_eagerly()
        with tf.control_dependencies([] if eager else checks):
            updates = [optimizer.apply_gradients(pairs, experimental_aggregate_gradients=False)
                       for optimizer, pairs in groups.values()]
        # The rules' step last, and what it returns: one value for every replica (a merge call's), as a
        # LossScaleOptimizer's cond around this step needs.
        with tf.control_dependencies([] if eager else [u for u in updates if u is not None]):
            if rules:
                return super().apply_gradients(rules, name, experimental_aggregate_gradients=False)
            return self.iterations.assign_add(1, read_value=False)

    def _aggregate_gradients(self, grads_and_vars: Any) -> list:
        """As the template's, with the weights of a pair's own Keras optimizer summed (as it sums them)."""
        return reduce_gradients(lambda var: _SUMMED if self._foreign_of(var) is not None else self._rule_of(var),
                                list(grads_and_vars), self.gradient_aggregator)

    def _transform_gradients(self, grads_and_vars: Any) -> list:
        """Each pair's optimizer clips its own weights' gradients (after aggregation, as alone)."""
        out, groups = list(grads_and_vars), {}
        for i, (_, var) in enumerate(out):
            rule = None if get_updater(var) else self._paired_rule(var)
            if rule is not None:
                groups.setdefault(id(rule), (rule, []))[1].append(i)
        for rule, positions in groups.values():
            for i, grad in zip(positions, clip_as_alone(rule, [out[i][0] for i in positions])):
                out[i] = (grad, out[i][1])
        return out

    def _config_value(self, pname: str) -> Any:
        if pname == "optimizer_specs":
            return [{"optimizer": config_lib.serialize_object(p["optimizer"]) if isinstance(p["optimizer"], VariableUpdater)
                     else config_lib.serialize_optimizer(p["optimizer"]), "weights": list(p["weights"])}
                    for p in self._pairs]
        return None if pname == "optimizers_and_layers" else super()._config_value(pname)

    def save_own_variables(self, store: Any) -> None:
        """The MultiOptimizer's state, then that of each pair's own legacy Keras optimizer (its
        step counter, hyperparameters and slots, under ``"optimizer_specs[<i>]."``) (``.keras``)."""
        super().save_own_variables(store)
        for i, optimizer in self._foreign_optimizers():
            if isinstance(optimizer, OptimizerV2):
                saving.save_own_variables(optimizer, PrefixedStore(store, f"optimizer_specs[{i}]."), optimizer,
                                          list(self._foreign_met.get(id(optimizer), {}).values()))

    def load_own_variables(self, store: Any) -> None:
        """Read what :meth:`save_own_variables` wrote; slots are filled when created."""
        super().load_own_variables(store)
        for i, optimizer in self._foreign_optimizers():
            if isinstance(optimizer, OptimizerV2):
                saving.load_own_variables(optimizer, PrefixedStore(store, f"optimizer_specs[{i}]."), optimizer)

    def unsaved_optimizers(self) -> dict[str, Any]:
        """``{checkpoint name: optimizer}`` of the pairs' own legacy Keras optimizers, whose state this
        MultiOptimizer keeps in every format (a SavedModel's is taken over at load)."""
        return {f"optimizer_specs[{i}]": optimizer for i, optimizer in self._foreign_optimizers()
                if isinstance(optimizer, OptimizerV2)}

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        del config["optimizers_and_layers"]  # the layers are in `optimizer_specs`, by weight name
        return config
