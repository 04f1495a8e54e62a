r"""``MovingAverage``: keep an exponential moving average of the trained weights.

The drop-in successor of TensorFlow Addons' ``MovingAverage``: the same
constructor, the same numbers, plus swaps that work in any context and restore
the weights bit for bit.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

import tensorflow as tf

from optimizers import updaters as updaters_lib
from optimizers.keras_compat import KERAS3_HINT, LearningRateSchedule, OptimizerV2, is_keras3_object, keras
from optimizers.template import CustomOptimizerV2, check_number

__all__ = ["MovingAverage"]

_CLIP_KWARGS = ("clipnorm", "clipvalue", "global_clipnorm")


def _resolve(optimizer: Any) -> OptimizerV2:
    if isinstance(optimizer, str):
        try:
            optimizer = keras.optimizers.get(optimizer, use_legacy_optimizer=True)
        except ValueError:
            raise ValueError(f"`optimizer` names no Keras optimizer. Received: optimizer={optimizer!r}") from None
    if is_keras3_object(optimizer):
        raise TypeError(f"Received a Keras 3 optimizer: optimizer={optimizer!r}. {KERAS3_HINT}")
    if not isinstance(optimizer, OptimizerV2):
        raise TypeError("`optimizer` must be a Keras 2 (OptimizerV2) optimizer, for example "
                        "keras.optimizers.legacy.Adam(), or a name such as 'adam'. "
                        f"Received: optimizer={optimizer!r}")
    return optimizer


def _average_step(average: tf.Variable, var: tf.Variable, decay: tf.Tensor) -> None:
    decay = tf.cast(decay, average.dtype)
    average.assign_sub((average - var) * (1 - decay), read_value=False)


def _swap_step(var: tf.Variable, average: tf.Variable) -> Any:
    saved = tf.identity(var)  # a snapshot: the assignment below does not change it
    with tf.control_dependencies([saved]):
        assigned = var.assign(average, read_value=False)
    with tf.control_dependencies([assigned]):
        return average.assign(saved, read_value=False)


def _assign_step(var: tf.Variable, average: tf.Variable) -> Any:
    return var.assign(average, read_value=False)


class MovingAverage(CustomOptimizerV2):
    r"""Wrap an optimizer and keep an exponential moving average of each weight.

    The inner optimizer updates the weights :math:`\theta_t` exactly as it
    would alone (this wrapper calls its public ``apply_gradients``). Then each
    average :math:`a` (it starts at the weight's value before the first step)
    follows, with :math:`t` the number of steps taken before this one:

    .. math::

        d_t &= \begin{cases} 0 & t < s \\
              \min\left(\delta, \frac{1+n}{10+n}, \frac{1+t-s}{10+t-s}\right) & t \ge s \end{cases} \\
        a &\leftarrow a - (a - \theta_t)(1 - d_t)

    where :math:`\delta` is ``average_decay``, :math:`s` is ``start_step``, the
    :math:`n` term applies only when ``num_updates`` is given and the
    :math:`t-s` term only when ``dynamic_decay=True``; :math:`d_t` is computed
    in float32, as TensorFlow Addons does. Variables with a variable updater
    (see ``optimizers.updaters``) get no average. The wrapper shares the
    inner optimizer's ``iterations`` and tracks the inner optimizer, so a
    checkpoint holds both states.

    Differences from TFA: ``swap_weights()`` works with or without a
    distribution strategy and swaps through a copy (bit-exact);
    ``shadow_copy`` starts averages at the weights' values (TFA: zeros); a
    ``num_updates`` variable is read at every step (TFA: once); clipping
    arguments given to the wrapper are set on the inner optimizer (TFA ignored
    the inner optimizer's own clipping).

    Args:
        optimizer: A Keras 2 optimizer (built-in, template-made or this
            library's) or a name such as ``"adam"`` (the legacy Keras 2 one).
        average_decay: :math:`\delta` in [0, 1]. Defaults to ``0.99``.
        num_updates: ``None``, an int or an integer ``tf.Variable``:
            :math:`n`, caps the decay at :math:`(1+n)/(10+n)`. Defaults to
            ``None``.
        start_step: :math:`s`: before it the average copies the weights.
            Defaults to ``0``.
        dynamic_decay: Cap the decay at :math:`(1+t-s)/(10+t-s)`, so it starts
            at 0.1 and grows. Defaults to ``False``.
        name: Defaults to ``"MovingAverage"``.
        **kwargs: ``clipnorm``, ``clipvalue``, ``global_clipnorm`` (set on the
            inner optimizer) and ``jit_compile``: compile each average update
            with XLA, one pass over memory instead of three. Defaults to
            ``True``. XLA may fuse the multiply and subtract (FMA), so averages
            can differ from TFA's in the last bit; ``jit_compile=False`` gives
            TFA's bits exactly.

    Example:

    >>> import tensorflow as tf
    >>> import optimizers
    >>> var = tf.Variable([1.0])
    >>> opt = optimizers.MovingAverage(optimizers.keras.optimizers.legacy.SGD(1.0), average_decay=0.5)
    >>> _ = opt.apply_gradients([(tf.constant([1.0]), var)])
    >>> var.numpy().tolist(), opt.get_slot(var, "average").numpy().tolist()
    ([0.0], [0.5])
    >>> opt.swap_weights()
    >>> var.numpy().tolist()
    [0.5]
    """

    def __init__(self, optimizer: Any, average_decay: Any = 0.99, num_updates: Any = None, start_step: int = 0,
                 dynamic_decay: bool = False, name: str = "MovingAverage", **kwargs: Any) -> None:
        inner = _resolve(optimizer)
        check_number("average_decay", average_decay, low=0.0, high=1.0)
        if isinstance(num_updates, tf.Variable):
            if not num_updates.dtype.is_integer:
                raise TypeError(f"`num_updates` must be an int or an integer tf.Variable. "
                                f"Received: num_updates={num_updates!r}")
        elif num_updates is not None and (isinstance(num_updates, bool) or not isinstance(num_updates, int)
                                          or num_updates < 0):
            raise ValueError(f"`num_updates` must be None, an int >= 0 or an integer tf.Variable. "
                             f"Received: num_updates={num_updates!r}")
        if isinstance(start_step, bool) or not isinstance(start_step, int) or start_step < 0:
            raise ValueError(f"`start_step` must be an int >= 0. Received: start_step={start_step!r}")
        if not isinstance(dynamic_decay, bool):
            raise TypeError(f"`dynamic_decay` must be a bool. Received: dynamic_decay={dynamic_decay!r}")
        clipping = {}
        for key, value in kwargs.items():
            if key in _CLIP_KWARGS and value is not None:
                check_number(key, value, low=0.0)
                if getattr(inner, key) is not None:
                    raise ValueError(f"`{key}` is set both on the wrapper and on the inner optimizer. "
                                     f"Received: {key}={value!r}")
                clipping[key] = value
            elif key not in _CLIP_KWARGS and key != "jit_compile":
                raise TypeError(f"MovingAverage() got an unexpected keyword argument `{key}`. Received: "
                                f"{key}={value!r}. Allowed: {', '.join(_CLIP_KWARGS)}, jit_compile.")
        super().__init__(name, jit_compile=kwargs.get("jit_compile", True))
        for key, value in clipping.items():
            setattr(inner, key, value)
        self._optimizer = inner
        self._track_trackable(inner, "awg_optimizer")  # TFA's name: TFA checkpoints restore into this class
        self.add_hyperparameter("average_decay", average_decay, low=0.0, high=1.0)
        self.num_updates = num_updates
        self.start_step = start_step
        self.dynamic_decay = dynamic_decay
        self.has_shadow_copy = False  # True once averages exist for swap_weights()
        self._model_weights: list[tf.Variable] = []

    # ------------------------------------------------------------ inner optimizer
    @property
    def inner_optimizer(self) -> OptimizerV2:
        """The wrapped optimizer."""
        return self._optimizer

    @property
    def iterations(self) -> tf.Variable:
        """The inner optimizer's step counter (one variable, shared)."""
        iterations = self._optimizer.iterations
        if self._iterations is None:
            self._iterations = iterations
            self._track_trackable(iterations, "iter")  # where TFA's checkpoints keep it
        return iterations

    @iterations.setter
    def iterations(self, variable: tf.Variable) -> None:
        self._optimizer.iterations = variable

    @property
    def learning_rate(self) -> Any:
        """The inner optimizer's learning rate (read and set)."""
        return self._optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        self._optimizer.learning_rate = value

    lr = learning_rate

    @property
    def weights(self) -> list[tf.Variable]:
        """``iterations``, the averages, then the inner optimizer's other weights
        (TFA's order, so ``.h5`` files saved with TFA load)."""
        iterations = self.iterations
        return [iterations] + self._weights + [w for w in self._optimizer.weights if w is not iterations]

    def variables(self) -> list[tf.Variable]:
        return self.weights

    # -------------------------------------------------------------- averages
    def _averages(self, var: tf.Variable) -> bool:
        """Whether ``var`` gets an average: not when a variable updater owns it."""
        if isinstance(self._optimizer, CustomOptimizerV2):
            return self._optimizer.updater_for(var) is None
        return updaters_lib.get_updater(var) is None

    def _average_of(self, var: tf.Variable) -> tf.Variable | None:
        try:
            return self.get_slot(var, "average")
        except KeyError:
            return None

    def _create_slots(self, var_list: Iterable[tf.Variable]) -> None:
        for var in var_list:
            if not self._averages(var) or self._average_of(var) is not None:
                continue
            self.add_slot(var, "average", initializer=lambda shape, dtype, var=var: tf.identity(var))
            self._model_weights.append(var)
            self.has_shadow_copy = True

    def _create_all_weights(self, var_list: Iterable[tf.Variable]) -> None:
        # Keras calls this hook on load (.h5) and apply_gradients does: the inner
        # optimizer's own version creates its step counter, hyperparameters and slots.
        var_list = list(var_list)
        _ = self.iterations
        self._optimizer._create_all_weights(var_list)
        self._create_hypers()
        self._create_slots(var_list)

    def shadow_copy(self, model_weights: Iterable[tf.Variable]) -> None:
        """Create the averages of ``model_weights`` now, equal to their values."""
        with tf.init_scope():
            self._create_slots(list(model_weights))

    def _decay(self, step: tf.Tensor) -> tf.Tensor:
        """:math:`d_t` (float32) for the update after ``step`` earlier steps."""
        decay = self._get_hyper("average_decay")
        step = tf.cast(step, tf.float32)
        if isinstance(decay, LearningRateSchedule):
            decay = decay(step)
        decay = tf.cast(decay, tf.float32)
        if self.num_updates is not None:
            n = tf.cast(self.num_updates, tf.float32)
            decay = tf.minimum(decay, (1.0 + n) / (10.0 + n))
        if self.dynamic_decay:
            count = step - self.start_step
            decay = tf.minimum(decay, (1.0 + count) / (10.0 + count))
        return tf.where(step < self.start_step, tf.zeros_like(decay), decay)

    def _update_averages(self, strategy: tf.distribute.Strategy, var_list: list) -> Any:
        decay = self._decay(self.iterations - 1)  # the inner optimizer has counted this step
        ops = []
        for var in var_list:
            with strategy.extended.colocate_vars_with(var):
                ops.extend(tf.nest.flatten(strategy.extended.update(
                    self.get_slot(var, "average"), self._average_fn, args=(var, decay), group=False)))
        return tf.group([op for op in ops if op is not None])

    def _average_fn(self, average: tf.Variable, var: tf.Variable, decay: tf.Tensor) -> None:
        if self.jit_compile:
            # One compiled function per (shape, dtype), in the template's cache: no retracing.
            key = ("average", tuple(average.shape.as_list()), average.dtype)
            if key not in self._jit_steps:
                self._jit_steps[key] = tf.function(_average_step, jit_compile=True)
            self._jit_steps[key](average, tf.convert_to_tensor(var), decay)
        else:
            _average_step(average, var, decay)

    def apply_gradients(self, grads_and_vars: Iterable, name: str | None = None,
                        experimental_aggregate_gradients: bool = True, **kwargs: Any) -> Any:
        """The inner optimizer's ``apply_gradients``, then the averages' update.

        ``**kwargs`` (such as ``decay_var_list``) go to the inner optimizer.
        """
        grads_and_vars = list(grads_and_vars)
        self._check_grads_and_vars(grads_and_vars)
        var_list = [v for g, v in grads_and_vars if g is not None]
        with tf.name_scope(self._name), tf.init_scope():
            self._create_all_weights(var_list)
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        update = self._optimizer.apply_gradients(grads_and_vars, name, experimental_aggregate_gradients, **kwargs)
        averaged = [v for v in var_list if self._average_of(v) is not None]
        if not averaged:
            return update
        averages = tf.__internal__.distribute.interim.maybe_merge_call(
            self._update_averages, tf.distribute.get_strategy(), averaged)
        return update if tf.executing_eagerly() else tf.group(update, averages)

    # ------------------------------------------------------------------ swaps
    def _for_each_average(self, var_list: list, fn: Any) -> Any:
        """Run ``fn(var, average)`` on every replica's copy, from any context."""
        pairs = [(v, self._average_of(v)) for v in var_list]
        pairs = [(v, a) for v, a in pairs if a is not None]

        def run(strategy: tf.distribute.Strategy) -> Any:
            ops = []
            for var, average in pairs:
                ops.extend(tf.nest.flatten(strategy.extended.update(var, fn, args=(average,), group=False)))
            return tf.group([op for op in ops if op is not None])

        if tf.distribute.in_cross_replica_context():
            return run(tf.distribute.get_strategy())
        if not tf.distribute.has_strategy() and pairs and hasattr(pairs[0][0], "distribute_strategy"):
            with pairs[0][0].distribute_strategy.scope():  # distributed variables, called outside their scope
                return run(tf.distribute.get_strategy())
        return tf.distribute.get_replica_context().merge_call(run)

    def assign_average_vars(self, var_list: Iterable[tf.Variable]) -> Any:
        """Set each variable of ``var_list`` to its average (variables without
        one, such as non-trainable or updater-owned ones, are left as they are)."""
        return self._for_each_average(list(var_list), _assign_step)

    def swap_weights(self) -> None:
        """Exchange the averaged weights and the trained ones; twice restores
        both exactly. Works with or without a ``tf.distribute`` strategy."""
        if not self._model_weights:
            raise ValueError("swap_weights() needs averages, which are created by the first training step: "
                             "train first, or call shadow_copy(model.trainable_weights). Received: an optimizer "
                             "with no averages yet.")
        self._for_each_average(self._model_weights, _swap_step)

    # ---------------------------------------------------------------- config
    def update_dense(self, grad, var, slots, coefficients):
        raise NotImplementedError("MovingAverage updates weights through its inner optimizer")

    def _config_value(self, pname: str) -> Any:
        if pname == "optimizer":
            return keras.optimizers.serialize(self._optimizer)
        if pname == "num_updates" and isinstance(self.num_updates, tf.Variable):
            return int(self.num_updates.numpy())
        return super()._config_value(pname)

    def get_config(self) -> dict[str, Any]:
        """The wrapper's arguments and the inner optimizer's config (nested)."""
        config = super().get_config()
        config.pop("decay", None)  # the learning-rate decay belongs to the inner optimizer
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: dict | None = None) -> MovingAverage:
        """Inverse of :meth:`get_config` (also reads TFA's configs)."""
        config = copy.deepcopy(config)  # Keras's deserialize edits the dict it is given
        inner = config.get("optimizer")
        if isinstance(inner, dict):
            # A registered class first: Keras maps any class named like a built-in ("Adam") to the built-in.
            registered = keras.utils.get_registered_object(inner.get("registered_name") or "", custom_objects)
            if registered is not None:
                config["optimizer"] = registered.from_config(inner["config"])
            else:
                config["optimizer"] = keras.optimizers.deserialize(
                    inner, custom_objects=custom_objects, use_legacy_format="module" not in inner,
                    use_legacy_optimizer=True)
        return super().from_config(config, custom_objects)
