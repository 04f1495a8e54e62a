"""``OptimizerWrapper``: the public base of optimizers that wrap another one."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import tensorflow as tf

from optimizers import compiled, saving
from optimizers import config as config_lib
from optimizers import slots as slots_lib
from optimizers.base import OptimizerBase, check_grads_and_vars, index_checks
from optimizers.execution import AfterStep
from optimizers.hyperparameters import Hyperparameters
from optimizers.keras_compat import (
    OptimizerV2,
    adopt_iterations,
    aggregate_gradients,
    create_all_weights,
    optimizer_name,
    own_weights,
    track,
    transform_unaggregated_gradients,
)
from optimizers.template import CustomOptimizerV2
from optimizers.tf_compat import maybe_merge_call, variable_key
from optimizers.updaters import get_updater
from optimizers.wrappers.delegation import CLIP_KWARGS, InnerAttributes, check_clipping, declares

__all__ = ["OptimizerWrapper"]


class OptimizerWrapper(InnerAttributes, Hyperparameters, OptimizerBase):
    r"""Base class of optimizers that act around each step of another one.

    The wrapped (*inner*) optimizer may be any Keras 2 optimizer: built-in,
    written on :class:`~optimizers.CustomOptimizerV2`, or another wrapper. It
    updates the weights through its public ``apply_gradients``; the wrapper
    adds what happens before and after. Override these, and nothing else:

    ``__init__(self, optimizer, ..., name="MyWrapper", **kwargs)``
        Call ``super().__init__(optimizer, name, **kwargs)``, then declare
        hyperparameters with :meth:`add_hyperparameter` (float, tensor,
        callable or schedule) and store every other argument as an attribute
        of the same name (``get_config`` reads the signature).
    ``slot_specs(self, var) -> Sequence[SlotSpec | str]``
        The wrapper's own state per variable, as slots (an initializer may
        copy the variable: ``lambda shape, dtype: tf.identity(var)``).
        Defaults to none.
    ``wraps(self, var) -> bool``
        Optional. Which variables get the wrapper's slots and
        :meth:`after_step`. Defaults to those without a variable updater.
    ``before_step(self, grads_and_vars) -> grads_and_vars``
        Optional. Runs in replica context before the inner step, and may
        change the gradients it receives.
    ``prepare(self, dtype, coefficients) -> None``
        Optional. Runs once per step and dtype. ``coefficients`` holds every
        hyperparameter as a ``dtype`` tensor (schedules evaluated at the step,
        as the inner optimizer did), ``"step"``, the 1-based number of this
        step, and ``"iterations"``, the same number as an exact int64 (read
        the step from it, not from ``self.iterations``: see below).
    ``after_step(self, var, slots, coefficients) -> op``
        Optional. Runs per wrapped variable after the inner optimizer's update
        of it, inside the strategy's update context (on each replica's copy);
        with ``jit_compile`` it is compiled and shared by variables of one
        shape and dtype, so it must not branch on the variable's name. With
        an inner optimizer written on :class:`~optimizers.CustomOptimizerV2`
        it runs inside the inner step, in the same compiled function as the
        variable's update (one pass over memory), before the inner optimizer
        counts the step in ``iterations``; with any other, after the inner
        step.
    ``after_kernel(self, var) -> Callable | None``
        Optional, rarely needed. :meth:`after_step` of ``var`` as TensorFlow
        ops that run as they are, never XLA-compiled (a fused kernel),
        computing exactly what ``after_step`` does, called as
        ``kernel(var, slots, coefficients)``; ``None`` (the default) when
        there is none. With ``jit_compile`` it runs instead of ``after_step``
        except on a variable large enough to be compiled alone (over 2^18
        elements: one compiled pass is faster) and on the small variables of
        a shape and dtype that has :data:`~optimizers.execution.AFTER_KERNEL_MAX_GROUP` or more
        (compiled in chunks, cheaper to trace); a model of few variables per
        shape then compiles nothing for the wrapper.

    Guaranteed by the base: the wrapper and the inner optimizer share one
    step counter (``iterations``), the learning rate and the inner
    optimizer's hyperparameters, options and clipping are read and set
    through the wrapper (at any depth of wrapping), the
    config nests the inner optimizer's, and the state of both (slots
    included, for built-in inner optimizers too) is kept by ``.h5``,
    ``.keras``, SavedModel and ``tf.train.Checkpoint``, also when restored
    before the first step.

    Args:
        optimizer: A Keras 2 optimizer, or a name such as ``"adam"`` (the
            legacy Keras 2 one).
        name: The wrapper's name (prefix of its slots).
        **kwargs: ``clipnorm``, ``clipvalue``, ``global_clipnorm`` (set on
            the inner optimizer) and ``jit_compile`` (compile
            :meth:`after_step` with XLA; defaults to ``True``).

    Example, a wrapper that keeps the largest value each weight has had:

    >>> import tensorflow as tf
    >>> import optimizers
    >>> class RunningMax(optimizers.OptimizerWrapper):
    ...     def __init__(self, optimizer, name="RunningMax", **kwargs):
    ...         super().__init__(optimizer, name, **kwargs)
    ...     def slot_specs(self, var):
    ...         return [optimizers.SlotSpec("max", initializer=lambda shape, dtype: tf.identity(var))]
    ...     def after_step(self, var, slots, coefficients):
    ...         return slots["max"].assign(tf.maximum(slots["max"], var))
    >>> var = tf.Variable([1.0, 2.0])
    >>> opt = RunningMax(optimizers.keras.optimizers.legacy.SGD(1.0))
    >>> for grad in ([1.0, -1.0], [-3.0, 1.0]):
    ...     _ = opt.apply_gradients([(tf.constant(grad), var)])
    >>> var.numpy().tolist(), opt.get_slot(var, "max").numpy().tolist(), int(opt.iterations)
    ([3.0, 2.0], [3.0, 3.0], 2)
    """

    #: The name the inner optimizer has in checkpoints (TFA's wrappers each used their own).
    inner_checkpoint_name = "inner_optimizer"
    reserved_names = {
        **Hyperparameters.reserved_names,
        "iterations": 'coefficients["iterations"] is the step counter',
        "learning_rate": "a wrapper's `learning_rate` (and `lr`) is the inner optimizer's",
        "lr": "a wrapper's `learning_rate` (and `lr`) is the inner optimizer's",
        "decay": "OptimizerV2 keeps its own `decay` (a learning-rate time decay) in the config",
    }

    def __init__(self, optimizer: Any, name: str, **kwargs: Any) -> None:
        inner = config_lib.resolve_optimizer(optimizer)
        if not isinstance(name, str) or not name:
            raise ValueError(f"`name` must be a non-empty string. Received: name={name!r}")
        jit_compile = kwargs.pop("jit_compile", True)
        if not isinstance(jit_compile, bool):
            raise TypeError(f"`jit_compile` must be a bool. Received: jit_compile={jit_compile!r}")
        clipping = {}
        for key, value in kwargs.items():
            if key not in CLIP_KWARGS:
                raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument `{key}`. Received: "
                                f"{key}={value!r}. Allowed: {', '.join(CLIP_KWARGS)}, jit_compile.")
            if value is not None:
                if getattr(inner, key) is not None:
                    raise ValueError(f"`{key}` is set both on the wrapper and on the inner optimizer. "
                                     f"Received: {key}={value!r}")
                clipping[key] = value
        check_clipping(inner, clipping)
        super().__init__(name)
        self.jit_compile = jit_compile
        self._optimizer = inner
        for key, value in clipping.items():
            setattr(inner, key, value)
        track(self, inner, self.inner_checkpoint_name)
        self._compiled = compiled.CompiledSteps()
        self._after = AfterStep(self, self._compiled)  # how a step runs after_step (optimizers/execution.py)
        self._var_specs: dict = {}
        self._seen: dict = {}  # variable key -> variable, every variable a step has seen

    def add_hyperparameter(self, name: str, value: Any, **bounds: Any) -> None:
        """Declare hyperparameter ``name`` (call in ``__init__``, after ``super().__init__``); not
        one the inner optimizer declares, whose attribute the wrapper's reads and sets."""
        inner = self.__dict__.get("_optimizer")
        if inner is not None and declares(inner, name):
            raise ValueError(f"Hyperparameter name {name!r} is taken: the wrapped "
                             f"{type(inner).__name__} declares it, and the wrapper's `{name}` reads and sets "
                             f"the inner one's. Name it otherwise. Received: {name}={value!r}")
        super().add_hyperparameter(name, value, **bounds)

    # ------------------------------------------------------------------ hooks
    def slot_specs(self, var: tf.Variable) -> Sequence[slots_lib.SlotSpec | str]:
        """The wrapper's slots of ``var``. Defaults to none."""
        return ()

    def wraps(self, var: tf.Variable) -> bool:
        """Whether ``var`` gets the wrapper's slots and :meth:`after_step`:
        not when a variable updater owns it."""
        return self.updater_for(var) is None

    def before_step(self, grads_and_vars: list) -> list:
        """Change the gradients before the inner step. Defaults to none."""
        return grads_and_vars

    def prepare(self, dtype: tf.DType, coefficients: dict[str, Any]) -> None:
        """Add derived per-step values for variables of ``dtype``. Optional."""

    def after_step(self, var: tf.Variable, slots: dict[str, tf.Variable], coefficients: dict[str, Any]) -> Any:
        """The wrapper's rule for one variable after the inner step. Defaults to none."""

    def after_kernel(self, var: tf.Variable) -> Callable | None:
        """:meth:`after_step` of ``var`` as ops that are never compiled (a fused kernel). Defaults to none."""
        return None

    def after_step_as_average(self, var: tf.Variable) -> tuple[str, str] | None:
        """``(slot, coefficient)`` when :meth:`after_step` of ``var`` is exactly the moving average
        :math:`a \\leftarrow a - (a - \\theta)\\,r` of the variable (``a`` that slot, ``r`` that
        coefficient), so that the inner rule's fused kernel may run it in its own pass over memory
        (``UpdateRule.fused_dense_kernel``: Adam's), and after any other step this library's
        one-pass average kernel (``optimizers.kernels``) runs it, whatever the variable's size,
        with nothing to compile. Defaults to none."""
        return None

    # --------------------------------------------------------- inner optimizer
    @property
    def inner_optimizer(self) -> OptimizerV2:
        """The wrapped optimizer."""
        return self._optimizer

    def updater_for(self, var: tf.Variable) -> Any:
        """The variable updater that owns ``var`` in the inner optimizer, or ``None``."""
        inner_lookup = getattr(self._optimizer, "updater_for", None)
        return inner_lookup(var) if inner_lookup is not None else get_updater(var)

    @property
    def iterations(self) -> tf.Variable:
        """The inner optimizer's step counter (one variable, shared)."""
        iterations = self._optimizer.iterations
        adopt_iterations(self, iterations)
        return iterations

    @iterations.setter
    def iterations(self, variable: tf.Variable) -> None:
        self._optimizer.iterations = variable

    @property
    def weights(self) -> list[tf.Variable]:
        """``iterations``, the wrapper's slots, then the inner optimizer's other
        weights (TFA's order, so ``.h5`` files saved with TFA load)."""
        iterations = self.iterations
        return [iterations] + own_weights(self) + [w for w in self._optimizer.weights if w is not iterations]

    def variables(self) -> list[tf.Variable]:
        return self.weights

    # ------------------------------------------------------------------ slots
    def _specs_of(self, var: tf.Variable) -> tuple[slots_lib.SlotSpec, ...]:
        key = variable_key(var)
        specs = self._var_specs.get(key)
        if specs is None:
            specs = self._var_specs[key] = slots_lib.as_slot_specs(self.slot_specs(var) if self.wraps(var) else ())
        return specs

    def _create_slots(self, var_list: Iterable[tf.Variable]) -> None:
        """Slots of the variables that have none yet (``_create_all_weights`` runs every step)."""
        for var in var_list:
            if variable_key(var) not in self._seen:
                slots_lib.create_slots(self, var, self._specs_of(var))

    def _create_all_weights(self, var_list: Iterable[tf.Variable]) -> None:
        # Keras calls this hook on load (.h5), and so does apply_gradients: the inner
        # optimizer creates its step counter, hyperparameters and slots first.
        var_list = list(var_list)
        _ = self.iterations
        create_all_weights(self._optimizer, var_list)
        self._create_slots(var_list)
        self.lock_options()
        for var in var_list:
            if variable_key(var) not in self._seen:
                self._seen[variable_key(var)] = var
                if self._unsaved_inner() is not None:
                    saving.restore_inner_slots(self, self._optimizer, var)

    def create_weights(self, var_list: Iterable[tf.Variable]) -> None:
        """Create, for the variables of ``var_list`` that have none yet, the inner optimizer's
        weights (step counter, hyperparameters, slots), then the wrapper's slots: what
        :meth:`apply_gradients` does first. A wrapper that overrides ``apply_gradients`` calls it
        on every call, before any ``tf.cond`` (variables cannot be created inside one)."""
        with tf.name_scope(optimizer_name(self)), tf.init_scope():
            create_all_weights(self, list(var_list))

    def combine_across_replicas(self, grads_and_vars: list) -> list:
        """``grads_and_vars`` combined across replicas as the inner optimizer combines them (summed;
        a variable updater's by its ``reduction``), its per-replica transformers first: what the
        inner ``apply_gradients`` does. A wrapper that overrides ``apply_gradients`` to skip the
        inner step on some calls combines once per call, before the ``tf.cond`` (every replica
        must issue the same all-reduce at every call), then calls the inner ``apply_gradients``
        with ``experimental_aggregate_gradients=False``."""
        return aggregate_gradients(self._optimizer, transform_unaggregated_gradients(self._optimizer, list(grads_and_vars)))

    def wrapped_variables(self) -> list[tf.Variable]:
        """The variables that have the wrapper's slots (created by a step, by
        restoring a checkpoint, or by loading a saved model)."""
        seen, out = set(), []
        for var, _ in saving.slot_index(self).values():
            if variable_key(var) not in seen:
                seen.add(variable_key(var))
                out.append(var)
        return out

    # ------------------------------------------------------------------- step
    @tf.autograph.experimental.do_not_convert  # plain Python: no per-variable conversion cost
    def apply_gradients(self, grads_and_vars: Iterable, name: str | None = None,
                        experimental_aggregate_gradients: bool = True, **kwargs: Any) -> Any:
        """:meth:`before_step`, the inner optimizer's ``apply_gradients``, then
        :meth:`after_step` for each wrapped variable.

        ``**kwargs`` (such as ``decay_var_list``) go to the inner optimizer.
        """
        grads_and_vars = check_grads_and_vars(grads_and_vars)
        var_list = [v for g, v in grads_and_vars if g is not None]
        self.create_weights(var_list)
        # Checked before the inner step: the wrapper's hyperparameters, as after_step will read them.
        checks = index_checks(grads_and_vars) + self.checked_hyperparameters(self.iterations)
        # An inner optimizer that may skip a step (skip_non_finite) does not count it: then neither do we.
        may_skip = getattr(self._optimizer, "skip_non_finite", False)
        before = tf.identity(self.iterations) if may_skip else None
        with tf.control_dependencies(checks if not tf.executing_eagerly() else []):
            grads_and_vars = list(self.before_step(grads_and_vars))
            kwargs = {k: v for k, v in kwargs.items() if v is not None}
            has_after_step = type(self).after_step is not OptimizerWrapper.after_step
            if has_after_step and isinstance(self._optimizer, CustomOptimizerV2):
                # after_step runs inside the inner step, fused into its compiled updates.
                with self._optimizer.running_after_each_update(self._after):
                    return self._optimizer.apply_gradients(grads_and_vars, name, experimental_aggregate_gradients,
                                                           **kwargs)
            update = self._optimizer.apply_gradients(grads_and_vars, name, experimental_aggregate_gradients,
                                                     **kwargs)
        wrapped = [v for v in var_list if self.wraps(v)]
        if not wrapped or not has_after_step:
            return update
        with tf.control_dependencies([update] if not tf.executing_eagerly() else []):
            counted = True if before is None else self.iterations > before
            if tf.executing_eagerly() and before is not None:
                counted = bool(counted)
            if counted is False:
                return update
            # Grouped in the merge call: each replica then returns the same op, as a Keras optimizer
            # returns one value (a LossScaleOptimizer's cond takes no per-replica ops).
            return maybe_merge_call(self._after.run_all, tf.distribute.get_strategy(), wrapped, counted, None, update)

    def _aggregate_gradients(self, grads_and_vars: Iterable) -> list:
        # A LossScaleOptimizer around this wrapper aggregates through it: the inner
        # optimizer decides (a template optimizer reduces updater gradients its way).
        return aggregate_gradients(self._optimizer, list(grads_and_vars))

    def _transform_unaggregated_gradients(self, grads_and_vars: Iterable) -> list:
        return transform_unaggregated_gradients(self._optimizer, list(grads_and_vars))

    def step_coefficients(self, dtype: tf.DType, iterations: Any = None) -> dict[str, Any]:
        """The coefficients :meth:`after_step` receives: every hyperparameter at the step
        ``iterations`` (the steps taken before this one; defaults to ``self.iterations - 1``,
        read after the inner step counted it), ``"step"``, then :meth:`prepare`'s values."""
        if iterations is None:
            iterations = self.iterations - 1
        coefficients = {name: tf.identity(self.hyperparameter(name, dtype, iterations))
                        for name in self.hyperparameter_names}
        coefficients["step"] = tf.cast(iterations + 1, dtype)
        coefficients["iterations"] = tf.cast(iterations, tf.int64) + 1
        self.prepare(dtype, coefficients)
        return coefficients

    def slots_of(self, var: tf.Variable) -> dict[str, tf.Variable]:
        """The wrapper's slots of ``var``, as :meth:`after_step` receives them (not a hook)."""
        return slots_lib.get_slots(self, var, self._specs_of(var))

    # ------------------------------------------------------------ config, saving
    def _config_value(self, pname: str) -> Any:
        if pname == "optimizer":
            return config_lib.serialize_optimizer(self._optimizer)
        if pname in self.hyperparameter_names:
            return config_lib.serialize_hyperparameter(self._read_hyperparameter(pname))
        return super()._config_value(pname)

    def get_config(self) -> dict[str, Any]:
        """The wrapper's arguments, the inner optimizer's config nested."""
        config = super().get_config()
        for key in CLIP_KWARGS:  # the inner optimizer's, in its own config
            config.pop(key, None)
        if not self.jit_compile:
            config["jit_compile"] = False
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: dict | None = None) -> OptimizerWrapper:
        """Inverse of :meth:`get_config`."""
        config = copy.deepcopy(config)
        if "optimizer" not in config:  # keras.optimizers.get("MovingAverage") builds from an empty config
            raise ValueError(f"{cls.__name__} wraps an optimizer, which its config names under 'optimizer' "
                             f"(build it as {cls.__name__}(optimizer, ...)). Received: config={config!r}")
        inner = config.pop("optimizer")
        config = config_lib.deserialize_values(config, custom_objects)
        config.pop("is_legacy_optimizer", None)
        config["optimizer"] = config_lib.deserialize_optimizer(inner, custom_objects)
        return cls(**config)

    def _unsaved_inner(self) -> OptimizerV2 | None:
        """The inner optimizer if it cannot save itself (a built-in Keras one)."""
        return None if isinstance(self._optimizer, OptimizerBase) else self._optimizer

    def save_own_variables(self, store: Any) -> None:
        """Write the wrapper's state, and the inner optimizer's if it cannot save itself."""
        saving.save_own_variables(self, store, self._unsaved_inner(), list(self._seen.values()))

    def load_own_variables(self, store: Any) -> None:
        """Read what :meth:`save_own_variables` wrote; slots are filled when created."""
        saving.load_own_variables(self, store, self._unsaved_inner())
