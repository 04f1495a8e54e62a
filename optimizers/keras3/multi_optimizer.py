r"""``MultiOptimizer`` on Keras 3: a different Keras 3 optimizer for each group of layers."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

import keras

from optimizers.keras3.compat import built_variables
from optimizers.keras3.wrapper_optimizer import keras3_optimizer
from optimizers.wrappers.pairs import parse_pairs

__all__ = ["MultiOptimizer"]

_REFUSED = ("learning_rate", "weight_decay", "clipnorm", "clipvalue", "global_clipnorm", "use_ema", "ema_momentum",
            "ema_overwrite_frequency", "loss_scale_factor", "gradient_accumulation_steps")


def _weights(layers: Any, where: str) -> list:
    layers = list(layers) if isinstance(layers, (list, tuple)) else [layers]
    for layer in layers:
        if not isinstance(layer, keras.layers.Layer):
            raise TypeError(f"{where} must be a Keras 3 layer or model, or a list of them. Received: {where}={layer!r}")
    weights = [var for layer in layers for var in layer.weights]
    if not weights:
        raise ValueError(f"{where} has no weights yet: build the model before creating the MultiOptimizer. "
                         f"Received: {where}={layers!r}")
    return weights


def _same_weight(path: str, weight: str) -> bool:
    """Whether variable path ``path`` and a pair's weight path ``weight`` name the same weight, up to
    the scopes around it: equal, or one ends the other after a ``/``."""
    return path == weight or path.endswith("/" + weight) or weight.endswith("/" + path)


@keras.saving.register_keras_serializable(package="optimizers.keras3")
class MultiOptimizer(keras.optimizers.Optimizer):
    r"""Train each group of layers with its own Keras 3 optimizer (discriminative layer training).

    For each pair ``(optimizer, layers)``, every weight :math:`\theta` of
    ``layers`` moves as ``optimizer`` alone would move it:

    .. math::

        \theta \leftarrow \mathrm{step}_{o(\theta)}(\theta, g_\theta)

    where :math:`o(\theta)` is the optimizer paired with :math:`\theta`'s
    layer. Each pair's optimizer may be any Keras 3 optimizer (this library's,
    Keras 3's own, a wrapper) and takes its whole ``apply`` on its weights:
    its own hyperparameters, schedules, weight decay, clipping, ``use_ema``,
    ``gradient_accumulation_steps`` and step counter (every pair steps at every
    call, so all counters equal ``iterations``). Weights in no pair are not
    changed, but a step in which no weight is in a pair is refused (it would do
    nothing); a weight in two pairs is refused. The whole state (every pair's
    optimizer's) is kept by ``.keras`` files, ``save_weights`` and
    ``tf.train.Checkpoint``.

    TensorFlow Addons' ``MultiOptimizer(optimizers_and_layers=None,
    optimizer_specs=None, name="MultiOptimizer")``, and the Keras 2 class of
    this library, on Keras 3. There is no learning rate of its own: set it on
    each pair's optimizer (``optimizer_specs[i]["optimizer"].learning_rate``).

    Args:
        optimizers_and_layers: ``[(optimizer, layer or model or list of layers), ...]``.
        optimizer_specs: The same as ``[{"optimizer": ..., "weights": [paths]}]``
            (what ``get_config`` writes; a weight named by its variable's ``path``).
            Give exactly one of the two.
        name: Defaults to ``"MultiOptimizer"``.

    Example, a slow first layer:

    >>> import keras
    >>> from optimizers import keras3
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2), keras.layers.Dense(1)])
    >>> opt = keras3.MultiOptimizer([(keras3.Adam(1e-4), model.layers[0]), (keras3.Adam(1e-2), model.layers[1:])])
    >>> model.compile(optimizer=opt, loss="mse")
    >>> [len(spec["weights"]) for spec in opt.optimizer_specs]
    [2, 2]
    """

    def __init__(self, optimizers_and_layers: Any = None, optimizer_specs: Any = None, name: str = "MultiOptimizer",
                 **kwargs: Any) -> None:
        if keras.backend.backend() != "tensorflow":
            raise ValueError(f"MultiOptimizer runs on Keras 3's TensorFlow backend (KERAS_BACKEND=tensorflow). "
                             f"Received: the {keras.backend.backend()!r} backend")
        refused = {key: value for key, value in kwargs.items() if key in _REFUSED}
        if refused:
            raise ValueError(f"MultiOptimizer takes no {', '.join(refused)}: set them on each pair's optimizer. "
                             f"Received: {refused}")
        if kwargs:
            raise TypeError(f"MultiOptimizer() got unexpected keyword arguments. Received: {kwargs!r}")
        if (optimizers_and_layers is None) == (optimizer_specs is None):
            raise ValueError("Give exactly one of `optimizers_and_layers` and `optimizer_specs`. Received: "
                             f"optimizers_and_layers={optimizers_and_layers!r}, optimizer_specs={optimizer_specs!r}")
        pairs = self._pairs_of(optimizers_and_layers, optimizer_specs)
        super().__init__(learning_rate=0.0, name=name)
        self._optimizers = [optimizer for optimizer, _, _ in pairs]  # tracked: checkpoint dependencies
        self._routes = [(paths, keys) for _, paths, keys in pairs]

    @staticmethod
    def _pairs_of(optimizers_and_layers: Any, optimizer_specs: Any) -> list[tuple]:
        """``[(optimizer, [paths], {variable ids} or None)]``, checked (ids where layers are given),
        each optimizer in one pair only (a Keras 3 optimizer keeps one set of variables)."""
        pairs = parse_pairs(optimizers_and_layers, optimizer_specs,
                            lambda optimizer, where, from_config: keras3_optimizer(optimizer, where),
                            _weights, lambda var: var.path, id)
        argument = "optimizers_and_layers" if optimizer_specs is None else "optimizer_specs"
        for i, pair in enumerate(pairs):
            if any(pair["optimizer"] is other["optimizer"] for other in pairs[:i]):
                raise ValueError(f"{argument}[{i}] repeats the optimizer of another pair: give each pair its own (or "
                                 f"one pair all of their layers). Received: {argument}[{i}]={pair['optimizer']!r}")
        return [(pair["optimizer"], pair["weights"], None if pair["keys"] is None else set(pair["keys"]))
                for pair in pairs]

    @classmethod
    def create_optimizer_spec(cls, optimizer: Any, layers_or_model: Any) -> dict[str, Any]:
        """One entry of ``optimizer_specs``: ``{"optimizer": optimizer, "weights": [paths]}`` for the
        weights of ``layers_or_model`` (a layer, a model, or a list of them), built."""
        return {"optimizer": optimizer, "weights": [var.path for var in _weights(layers_or_model, "layers_or_model")]}

    @property
    def optimizer_specs(self) -> list[dict[str, Any]]:
        """``[{"optimizer": optimizer, "weights": [variable paths]}]``, as in TFA."""
        return [{"optimizer": optimizer, "weights": list(paths)} for optimizer, (paths, _) in zip(self._optimizers, self._routes)]

    @property
    def learning_rate(self) -> Any:
        raise AttributeError("A MultiOptimizer has no learning rate of its own: each pair's optimizer has one "
                             "(optimizer_specs[i]['optimizer'].learning_rate)")

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        if "_optimizers" in self.__dict__:
            raise ValueError("A MultiOptimizer has no learning rate of its own: set it on each pair's optimizer "
                             f"(optimizer_specs[i]['optimizer'].learning_rate). Received: learning_rate={value!r}")

    def _routed(self, variables: Iterable) -> list[list[int]]:
        """The positions in ``variables`` of each pair's weights: the variables of its layers, or for
        a pair from a config those whose path is a weight's path (or ends it, or is ended by it: a
        loaded model's paths lose or gain the scope of the model around them)."""
        variables = list(variables)
        positions: list[list[int]] = [[] for _ in self._optimizers]
        for index, var in enumerate(variables):
            for pair, (paths, keys) in enumerate(self._routes):
                if (id(var) in keys) if keys is not None else any(_same_weight(var.path, path) for path in paths):
                    positions[pair].append(index)
                    break
        for pair, (paths, keys) in enumerate(self._routes):
            for path in paths if keys is None else ():
                named = [variables[i].path for i in positions[pair] if _same_weight(variables[i].path, path)]
                if len(named) > 1:
                    raise ValueError(f"Weight {path!r} of a pair names {len(named)} variables of this step: a "
                                     "MultiOptimizer made from optimizer_specs (a config) routes by path, which cannot "
                                     "tell them apart. Make it from the layers (optimizers_and_layers). "
                                     f"Received: variables {named}")
        return positions

    # ----------------------------------------------------------------- state
    def build(self, var_list: list) -> None:
        """Each pair's optimizer's variables, for its weights."""
        super().build(var_list)
        for optimizer, positions in zip(self._optimizers, self._routed(var_list)):
            if positions and not optimizer.built:
                optimizer.build([var_list[i] for i in positions])

    @property
    def variables(self) -> list:
        return super().variables + [var for optimizer in self._optimizers for var in optimizer.variables]

    # ------------------------------------------------------------------ step
    def apply(self, grads: Iterable, trainable_variables: Iterable | None = None) -> None:
        """Each pair's optimizer's ``apply`` on its weights that have a gradient; one step counted."""
        grads = list(grads)
        variables = list(built_variables(self) if trainable_variables is None else trainable_variables)
        routed = self._routed(variables)
        if not any(grads[i] is not None for positions in routed for i in positions):
            paired = [path for paths, _ in self._routes for path in paths]
            raise ValueError("None of the variables of this step is in a MultiOptimizer pair: the step would change "
                             f"nothing. Pairs hold {paired[:8]}; received variables "
                             f"{[var.path for var in variables][:8]}")
        if not self.built:
            with keras.name_scope(self.name, caller=self):
                self.build(variables)
        for optimizer, positions in zip(self._optimizers, routed):
            with_grads = [i for i in positions if grads[i] is not None]
            if with_grads:
                optimizer.apply([grads[i] for i in with_grads], [variables[i] for i in with_grads])
        self.iterations.assign_add(1)

    def finalize_variable_values(self, var_list: list) -> None:
        for optimizer, positions in zip(self._optimizers, self._routed(var_list)):
            if positions:
                optimizer.finalize_variable_values([var_list[i] for i in positions])

    # ---------------------------------------------------------------- config
    def get_config(self) -> dict[str, Any]:
        return {"name": self.name,
                "optimizer_specs": [{"optimizer": keras.optimizers.serialize(spec["optimizer"]), "weights": spec["weights"]}
                                    for spec in self.optimizer_specs]}

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: dict | None = None) -> MultiOptimizer:
        config = copy.deepcopy(config)  # Keras 3's deserialize changes the nested configs it reads
        specs = [{"optimizer": keras.optimizers.deserialize(spec["optimizer"], custom_objects=custom_objects),
                  "weights": spec["weights"]} for spec in config.pop("optimizer_specs")]
        return cls(optimizer_specs=specs, **config)
