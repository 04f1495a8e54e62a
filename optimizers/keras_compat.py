"""The one place that decides which Keras 2 this library runs on.

* TensorFlow <= 2.15: the built-in ``tf.keras`` is Keras 2.
* TensorFlow >= 2.16: ``tf.keras`` is Keras 3, which has no OptimizerV2, so the
  library imports ``tf_keras`` (the ``tf-keras`` package) directly. Users never
  need ``TF_USE_LEGACY_KERAS``.

Everything else in the library imports ``keras`` from here, and every access
to a private attribute of Keras 2 goes through a function of this module, which
says why it is needed: one place to fix when ``tf-keras`` changes. TensorFlow's
own internals are in ``optimizers/tf_compat.py``, which imports no Keras (the
Keras-free core uses it). Overriding OptimizerV2's hooks (``_create_slots``,
``_resource_apply_dense``...) and calling OptimizerV2's own implementation of a
hook from an override (``super()._distributed_apply``) is what the template and
wrappers are for; reading OptimizerV2's private state is this module's job.
"""

from __future__ import annotations

import contextvars
from typing import Any

import tensorflow as tf

from optimizers.hyperparameters import register_schedule_type

TF_VERSION: tuple[int, int] = tuple(int(p) for p in tf.__version__.split(".")[:2])  # type: ignore[assignment]

if TF_VERSION >= (2, 16):
    try:
        import tf_keras as keras
    except ImportError as error:  # pragma: no cover - exercised on a stack without tf-keras
        raise ImportError(
            "custom-optimizer-v2 needs Keras 2, which TensorFlow "
            f"{tf.__version__} ships as the separate `tf-keras` package. "
            f"Install it with: pip install 'tf-keras=={TF_VERSION[0]}.{TF_VERSION[1]}.*'"
        ) from error
else:
    keras = tf.keras

OptimizerV2 = keras.optimizers.legacy.Optimizer
LearningRateSchedule = keras.optimizers.schedules.LearningRateSchedule
register_schedule_type(LearningRateSchedule)  # the Keras-free hyperparameters call these with the step

KERAS3_HINT = (
    "optimizers built with custom-optimizer-v2 are Keras 2 (OptimizerV2) optimizers. "
    + (
        "Build the model with `import tf_keras as keras` (package `tf-keras`), not "
        "`keras` / `tf.keras`, which are Keras 3 on TensorFlow "
        f"{tf.__version__}; Keras 3 models take the classes of the same names from "
        "`optimizers.keras3` (`from optimizers import keras3`)."
        if TF_VERSION >= (2, 16)
        else "Build the model with `tf.keras`."
    )
)

# What our optimizers' repr says they are (``<module.Class name='...': {KERAS2_OPTIMIZER}>``).
# A Keras 3 model compiled with one fails in Keras 3's own code, with
# "Could not interpret optimizer identifier: <that repr>": the repr is the whole message, so
# it names the Keras 2 to use and the one line to change.
KERAS2_OPTIMIZER = (
    "a Keras 2 (OptimizerV2) optimizer, for tf_keras models; a Keras 3 model (`import keras`) takes "
    "the class of the same name from `optimizers.keras3`"
    if TF_VERSION >= (2, 16)
    else "a Keras 2 (OptimizerV2) optimizer, for tf.keras models: build the model with "
    "`tf.keras`, not Keras 3's `import keras`"
)


def is_keras3_object(obj: object) -> bool:
    """Whether ``obj`` (a model, layer or variable) belongs to Keras 3."""
    module = type(obj).__module__ or ""
    if not (module == "keras" or module.startswith("keras.")):
        return False
    try:
        import keras as keras_pkg
    except ImportError:  # pragma: no cover
        return False
    return str(getattr(keras_pkg, "__version__", "2")).startswith("3")


def check_keras2_model(model: object) -> None:
    """Raise a ``TypeError`` saying what to import if ``model`` is a Keras 3 model."""
    if is_keras3_object(model):
        raise TypeError(f"Received a Keras 3 object: model={model!r}. {KERAS3_HINT}")






















def create_all_weights(optimizer: Any, var_list: list) -> None:
    """OptimizerV2's ``_create_all_weights``: step counter, hyperparameters, slots."""
    optimizer._create_all_weights(var_list)


def compute_gradients(optimizer: Any, loss: Any, var_list: Any, grad_loss: Any, tape: Any) -> list:
    """OptimizerV2's ``minimize`` first half, ``(gradient, variable)`` pairs of ``loss`` (a tensor
    with ``tape``, or a callable): OptimizerV2 has no public form of it, and ``minimize`` with
    ``decay_var_list`` must pass that on to ``apply_gradients``."""
    return optimizer._compute_gradients(loss, var_list=var_list, grad_loss=grad_loss, tape=tape)


def aggregate_gradients(optimizer: Any, grads_and_vars: list) -> list:
    """OptimizerV2's cross-replica gradient aggregation of ``optimizer`` (``LossScaleOptimizer`` calls it)."""
    return optimizer._aggregate_gradients(grads_and_vars)


def transform_unaggregated_gradients(optimizer: Any, grads_and_vars: list) -> list:
    """OptimizerV2's per-replica gradient transformers of ``optimizer`` (a wrapper passes them on to
    its inner optimizer, as a ``LossScaleOptimizer`` around the wrapper calls them through it)."""
    return optimizer._transform_unaggregated_gradients(grads_and_vars)


def create_hypers(optimizer: Any) -> None:
    """Turn ``optimizer``'s hyperparameters into variables (OptimizerV2 does it lazily)."""
    optimizer._create_hypers()


def hyper_dict(optimizer: Any) -> dict:
    """OptimizerV2's ``{name: value or variable}`` of hyperparameters (none for a ``LossScaleOptimizer``)."""
    return getattr(optimizer, "_hyper", None) or {}


def set_hyper(optimizer: Any, name: str, value: Any) -> None:
    """Keep ``value`` as OptimizerV2 hyperparameter ``name`` of ``optimizer`` (a variable once
    the optimizer creates its weights, saved in every format); OptimizerV2 has no public setter."""
    optimizer._set_hyper(name, value)


def hypers_created(optimizer: Any) -> bool:
    """Whether ``optimizer``'s hyperparameters are variables already (OptimizerV2's flag)."""
    return optimizer._hypers_created


def hyper_in_dtype(optimizer: Any, name: str, dtype: tf.DType) -> Any:
    """OptimizerV2's ``_get_hyper``: hyperparameter ``name`` of ``optimizer`` in ``dtype``."""
    return optimizer._get_hyper(name, dtype)


def initial_decay(optimizer: Any) -> float:
    """Keras 2's legacy ``decay`` argument (inverse-time learning-rate decay), which OptimizerV2
    keeps as a private float and writes into every config."""
    return optimizer._initial_decay


def own_weights(optimizer: Any) -> list:
    """The variables ``optimizer`` made with ``add_weight`` (slots and hyperparameters), in order:
    OptimizerV2's ``weights`` is ``iterations`` plus these."""
    return optimizer._weights


def adopt_iterations(optimizer: Any, iterations: tf.Variable) -> bool:
    """Make ``iterations`` (another optimizer's step counter) ``optimizer``'s own, saved where
    Keras 2's and TFA's checkpoints keep it (``iter``); ``False`` when it had one already."""
    if optimizer._iterations is not None:
        return False
    optimizer._iterations = iterations
    track(optimizer, iterations, "iter")
    return True


def slot_dict(optimizer: Any) -> dict:
    """OptimizerV2's ``{variable key: {slot name: slot variable}}``."""
    return getattr(optimizer, "_slots", {})


def optimizer_name(optimizer: Any) -> str:
    """The ``name`` an OptimizerV2 was built with (its name scope, its slots' prefix): OptimizerV2
    keeps it only as ``_name``."""
    return optimizer._name


def track(owner: Any, child: Any, name: str) -> None:
    """Make ``child`` a checkpoint dependency of ``owner`` called ``name``."""
    owner._track_trackable(child, name, overwrite=True)


def fallback_apply_state(optimizer: Any, device: str, dtype: tf.DType) -> dict:
    """The coefficients OptimizerV2 prepares for a (device, dtype) that its step's ``apply_state`` lacks
    (a variable on a device the step did not prepare, or a step run without one)."""
    return optimizer._fallback_apply_state(device, dtype)




def in_safe_mode() -> bool:
    """Whether Keras is loading a file in safe mode (``load_model(..., safe_mode=True)``, the
    default for ``.keras`` files). No public API says it: Keras 2's ``serialization_lib`` holds it."""
    import importlib

    root = "tf_keras.src" if TF_VERSION >= (2, 16) else "keras.src"
    return bool(importlib.import_module(root + ".saving.serialization_lib").in_safe_mode())


def is_loss_scale_optimizer(obj: Any) -> bool:
    """A Keras 2 ``LossScaleOptimizer`` (mixed precision) around an OptimizerV2."""
    return isinstance(obj, keras.mixed_precision.LossScaleOptimizer) and isinstance(obj, OptimizerV2)




_SAVING_ROOT: contextvars.ContextVar = contextvars.ContextVar("saving_root", default=None)


def saving_root() -> Any:
    """The model (or layer) a ``.keras`` / ``.weights.h5`` save is writing now, else ``None``:
    an optimizer shared by two models then writes the slots of that model's variables only."""
    return _SAVING_ROOT.get()


def install_saving_hooks(is_ours: Any, record_restored_slot: Any) -> None:
    """Let ``model.save`` keep our optimizers' state in ``.keras`` and SavedModel.

    Three narrow additions to Keras 2 internals (both stacks), done once:

    * ``saving_lib._is_keras_trackable`` also accepts objects for which
      ``is_ours(obj)`` is true, so ``.keras`` saving calls their
      ``save_own_variables``/``load_own_variables`` (it already does so for
      layers and new-style optimizers);
    * ``saving_lib._save_state``, called on the saved model first, records that model
      (:func:`saving_root`) while the file is written: an optimizer knows which
      model's slots belong in it (two models can share one optimizer, and their
      layers' names);
    * ``RestoredOptimizer.add_slot`` (the stand-in the SavedModel loader
      revives an OptimizerV2 as) also calls ``record_restored_slot``, so the
      optimizer ``load_model`` compiles can take the restored slots over.

    See ``optimizers/saving.py``.
    """
    import importlib

    root = "tf_keras.src" if TF_VERSION >= (2, 16) else "keras.src"
    saving_lib = importlib.import_module(root + ".saving.saving_lib")
    optimizer_v2 = importlib.import_module(root + ".optimizers.legacy.optimizer_v2")
    keras_trackable = saving_lib._is_keras_trackable
    if not getattr(keras_trackable, "_custom_optimizer_v2", False):
        def _is_keras_trackable(obj: Any) -> bool:
            return keras_trackable(obj) or is_ours(obj)

        _is_keras_trackable._custom_optimizer_v2 = True  # type: ignore[attr-defined]
        saving_lib._is_keras_trackable = _is_keras_trackable
    save_state = saving_lib._save_state
    if not getattr(save_state, "_custom_optimizer_v2", False):
        def _save_state(*args: Any, **kwargs: Any) -> Any:
            inner_path = kwargs["inner_path"] if "inner_path" in kwargs else args[3]
            if inner_path != "":
                return save_state(*args, **kwargs)
            token = _SAVING_ROOT.set(args[0] if args else kwargs["trackable"])
            try:
                return save_state(*args, **kwargs)
            finally:
                _SAVING_ROOT.reset(token)

        _save_state._custom_optimizer_v2 = True  # type: ignore[attr-defined]
        saving_lib._save_state = _save_state
    restored = optimizer_v2.RestoredOptimizer
    if "add_slot" not in restored.__dict__:
        def add_slot(self: Any, var: Any, slot_name: str, initializer: Any = "zeros", shape: Any = None) -> Any:
            # The loader passes no shape, and a slot need not be shaped like its variable
            # (RowwiseAdagrad's is [rows, 1]): leave the shape open, the checkpoint sets it.
            slots = self._slots.setdefault(optimizer_v2._var_key(var), {})
            if slot_name not in slots:
                slots[slot_name] = tf.Variable(tf.zeros(var.shape, var.dtype), shape=tf.TensorShape(None),
                                               trainable=False, name=f"{var._shared_name}/{slot_name}")
                if slot_name not in self._slot_names:
                    self._slot_names.append(slot_name)
                self._weights.append(slots[slot_name])
            record_restored_slot(self, var, slot_name, slots[slot_name])
            return slots[slot_name]

        restored.add_slot = add_slot


def install_loss_scale_hook(undo_unscaling: Any) -> None:
    """Let variables whose gradient is a value get it unscaled by no one.

    Keras 2's ``LossScaleOptimizer`` divides every gradient by the loss scale
    before its inner optimizer applies them; Keras 3's leaves
    overwrite-with-gradient variables alone. One narrow addition, done once:
    ``LossScaleOptimizer._apply_gradients`` first passes the gradients through
    ``undo_unscaling(inner_optimizer, grads, variables, loss_scale)``.
    """
    import importlib

    root = "tf_keras.src" if TF_VERSION >= (2, 16) else "keras.src"
    cls = importlib.import_module(root + ".mixed_precision.loss_scale_optimizer").LossScaleOptimizer
    original = cls._apply_gradients
    if getattr(original, "_custom_optimizer_v2", False):
        return

    def _apply_gradients(self: Any, grads: Any, wrapped_vars: Any, name: Any) -> Any:
        grads = undo_unscaling(self._optimizer, list(grads), wrapped_vars.value, self.loss_scale)
        return original(self, grads, wrapped_vars, name)

    _apply_gradients._custom_optimizer_v2 = True  # type: ignore[attr-defined]
    cls._apply_gradients = _apply_gradients


def _loss_scale_class() -> Any:
    import importlib

    root = "tf_keras.src" if TF_VERSION >= (2, 16) else "keras.src"
    return importlib.import_module(root + ".mixed_precision.loss_scale_optimizer").LossScaleOptimizer


_LOSS_SCALE_KEYS = ("current_loss_scale", "good_steps")  # also the names in a SavedModel


def loss_scale_variables(optimizer: Any) -> list:
    """A dynamic ``LossScaleOptimizer``'s loss scale and its count of good steps
    (``[]`` for a fixed loss scale)."""
    state = getattr(optimizer, "_loss_scale", None)
    if not optimizer.dynamic or state is None:
        return []
    return [state.current_loss_scale, state.counter]


def install_loss_scale_saving(keeps_state: Any, deserialize_inner: Any) -> None:
    """Let a ``LossScaleOptimizer`` around one of our optimizers keep everything in
    every format of ``model.save``.

    Narrow additions to Keras 2's ``LossScaleOptimizer`` (both stacks), done once:

    * ``from_config`` builds a nested config through ``deserialize_inner``
      (Keras's own lookup maps a registered class named like a built-in,
      ``"SGD"``, to the built-in);
    * for a ``LossScaleOptimizer`` with ``keeps_state(optimizer)`` true, the loss
      scale and its good-step counter join ``weights`` (last, so ``.h5`` keeps
      them; ``set_weights`` also takes the inner weights alone, as files written
      before), and ``save_own_variables``/``load_own_variables`` write and read
      them in ``.keras`` files (the inner optimizer saves its own state).
    """
    cls = _loss_scale_class()
    if getattr(cls.__dict__.get("set_weights"), "_custom_optimizer_v2", False):
        return
    original_from_config = cls.__dict__["from_config"].__func__
    original_weights = cls.__dict__["weights"]
    original_set_weights = cls.__dict__["set_weights"]

    def from_config(klass: Any, config: dict, custom_objects: Any = None) -> Any:
        if isinstance(config.get("inner_optimizer"), dict):
            config = dict(config, inner_optimizer=deserialize_inner(config["inner_optimizer"], custom_objects))
        return original_from_config(klass, config, custom_objects)

    def weights(self: Any) -> list:
        own = loss_scale_variables(self) if keeps_state(self) else []
        return original_weights.fget(self) + own

    def set_weights(self: Any, weights: list) -> Any:
        own = loss_scale_variables(self) if keeps_state(self) else []
        if own and len(weights) == len(self._optimizer.weights) + len(own):
            weights, own_values = list(weights[:-len(own)]), weights[-len(own):]
            result = original_set_weights(self, weights)  # checked first: a refused list changes nothing
            for variable, value in zip(own, own_values):
                variable.assign(tf.cast(value, variable.dtype))
            return result
        return original_set_weights(self, weights)

    def save_own_variables(self: Any, store: Any) -> None:
        for key, variable in zip(_LOSS_SCALE_KEYS, loss_scale_variables(self)):
            store[key] = variable.numpy()

    def load_own_variables(self: Any, store: Any) -> None:
        for key, variable in zip(_LOSS_SCALE_KEYS, loss_scale_variables(self)):
            if key in store:  # absent in files written before the loss scale was kept
                variable.assign(tf.cast(store[key], variable.dtype))

    set_weights._custom_optimizer_v2 = True  # type: ignore[attr-defined]
    cls.from_config = classmethod(from_config)
    cls.weights = property(weights)
    cls.set_weights = set_weights
    cls.save_own_variables = save_own_variables
    cls.load_own_variables = load_own_variables


def install_restored_optimizer_link(link: Any) -> None:
    """Hand a SavedModel's restored optimizer state to the optimizer ``load_model`` compiles.

    The SavedModel loader revives the saved optimizer as a ``RestoredOptimizer``
    (its step counter, hyperparameter variables, a ``LossScaleOptimizer``'s loss
    scale, a wrapper's inner optimizer), sets it as the model's ``optimizer``, then
    compiles a fresh one from the training config, which replaces it. One narrow
    addition, done once: when ``Model.compile`` builds an optimizer for a model
    whose ``optimizer`` is still such a ``RestoredOptimizer``, it first calls
    ``link(new_optimizer, restored_optimizer)``.
    """
    import importlib

    root = "tf_keras.src" if TF_VERSION >= (2, 16) else "keras.src"
    model_cls = importlib.import_module(root + ".engine.training").Model
    restored_cls = importlib.import_module(root + ".optimizers.legacy.optimizer_v2").RestoredOptimizer
    original = model_cls._get_optimizer
    if getattr(original, "_custom_optimizer_v2", False):
        return

    def _get_optimizer(self: Any, optimizer: Any) -> Any:
        result = original(self, optimizer)
        previous = self.__dict__.get("optimizer")
        if isinstance(previous, restored_cls) and isinstance(result, OptimizerV2):
            link(result, previous)
        return result

    _get_optimizer._custom_optimizer_v2 = True  # type: ignore[attr-defined]
    model_cls._get_optimizer = _get_optimizer


def restored_child(restored_optimizer: Any, name: str) -> Any:
    """A dependency the SavedModel loader set on a ``RestoredOptimizer`` (its hyperparameters,
    ``"loss_scale"``, a wrapper's inner optimizer), or ``None``."""
    return hyper_dict(restored_optimizer).get(name)
