r"""Decoupled weight decay for any Keras 2 optimizer class: TensorFlow Addons' API.

``extend_with_decoupled_weight_decay(Base)`` returns ``Base`` with decoupled
weight decay, and ``DecoupledWeightDecayExtension`` is the class TFA users
subclass together with an optimizer class. Both give TFA 0.23's constructor
(``weight_decay`` first), numbers and config keys. For a
:class:`~optimizers.CustomOptimizerV2` base the template's own decay does
the work (see ``optimizers/weight_decay.py``); for any other OptimizerV2
(Keras's built-ins, user classes) this module decays before the base's
update with the same :class:`~optimizers.weight_decay.DecoupledWeightDecay`.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

import tensorflow as tf

from optimizers import config as config_lib
from optimizers.base import OptimizerBase, after_checks, check_grads_and_vars, index_checks
from optimizers.hyperparameters import check_number
from optimizers.keras_compat import (
    KERAS3_HINT,
    LearningRateSchedule,
    OptimizerV2,
    fallback_apply_state,
    hyper_dict,
    hyper_in_dtype,
    keras,
    set_hyper,
)
from optimizers.template import CustomOptimizerV2
from optimizers.weight_decay import DecoupledWeightDecay, VariableMask, exclude_attribute
from optimizers.wrappers import OptimizerWrapper

__all__ = ["DecoupledWeightDecayExtension", "extend_with_decoupled_weight_decay"]


class DecoupledWeightDecayExtension(OptimizerBase):
    r"""Decoupled weight decay (Loshchilov & Hutter, arXiv:1711.05101) for a Keras 2 optimizer class.

    Subclass it *before* an optimizer class, as with TensorFlow Addons::

        class MyAdamW(DecoupledWeightDecayExtension, keras.optimizers.legacy.Adam):
            def __init__(self, weight_decay, *args, **kwargs):
                super().__init__(weight_decay, *args, **kwargs)

    (or let :func:`extend_with_decoupled_weight_decay` write the class). Each
    step, every decayed variable first loses a fraction :math:`\lambda_t`
    (``weight_decay`` at the step) of itself, then the base optimizer's rule
    :math:`U` applies:

    .. math::
        \begin{align*}
        \theta &\leftarrow \theta - \lambda_t\,\theta \\
        \theta &\leftarrow U(\theta, g)
        \end{align*}

    A sparse gradient (``tf.IndexedSlices``) decays only the rows it touches,
    each once however often it is repeated. :math:`\lambda_t` is not scaled
    by the learning rate: with a learning-rate schedule, give
    ``weight_decay`` a matching schedule. A ``LearningRateSchedule`` is
    evaluated at ``iterations`` (steps taken), a callable is called. These are
    TFA's numbers, bit for bit for Keras's built-in optimizers.

    Which variables decay: those given as ``decay_var_list`` to
    :meth:`apply_gradients`/:meth:`minimize` when it is given, else all but
    those whose name matches an ``exclude_from_weight_decay`` regex.
    Differences from TFA (all fixes): ``decay_var_list`` given to
    :meth:`minimize` is honoured (TFA's ``minimize`` ignores it),
    ``decay_var_list=[]`` decays nothing (TFA decays everything), a sparse
    step of SGD with ``momentum=0`` decays the touched rows (TFA skips the
    decay there), base arguments may be positional after ``weight_decay``,
    and the class order is checked when the class is made: an optimizer class
    listed before the extension is a ``TypeError`` (TFA failed later).

    On a :class:`~optimizers.CustomOptimizerV2` base the template decays
    (placement ``"before"``, its ``jit_compile`` and routing keep working) and
    its keywords ``scale_weight_decay_by_lr`` and ``updaters`` are accepted.
    Bases that already take a ``weight_decay`` argument, or decay inside
    their rule (LAMB...), or refuse decay (COCOB...) are refused: give
    ``weight_decay`` to them directly.

    ``get_config()`` is the base's config plus ``weight_decay`` and
    ``exclude_from_weight_decay``; a subclass is registered with Keras as
    ``"<its top-level package>>ClassName"`` when it is defined, so
    ``load_model`` needs no ``custom_objects``; checkpoints hold the
    ``weight_decay`` hyperparameter variable as TFA's do.

    Args:
        weight_decay: :math:`\lambda`: float ``>= 0``, tensor, callable or
            ``LearningRateSchedule``.
        *args: The base optimizer's positional arguments.
        exclude_from_weight_decay: Regexes searched in variable names;
            matching variables are not decayed. Defaults to ``None``. Also
            TFA's attribute: read (a tuple, or ``None``) and set before the
            first step, with the same effect; a new list after it is refused.
        **kwargs: The base optimizer's keyword arguments.

    Example:

    >>> import tensorflow as tf
    >>> import optimizers
    >>> from optimizers.decoupled import DecoupledWeightDecayExtension
    >>> class MySGDW(DecoupledWeightDecayExtension, optimizers.keras.optimizers.legacy.SGD):
    ...     pass
    >>> var = tf.Variable([1.0, -2.0])
    >>> opt = MySGDW(0.1, learning_rate=0.5)
    >>> _ = opt.apply_gradients([(tf.constant([0.2, 0.2]), var)])
    >>> [round(x, 5) for x in var.numpy().tolist()]  # 1 - 0.1 * 1 - 0.5 * 0.2, -2 + 0.2 - 0.1
    [0.8, -1.9]
    """

    _decay_by_template: bool = False
    # Read and set as in TFA, on the object the step, get_config and saving read (a template base's own).
    exclude_from_weight_decay = exclude_attribute("_weight_decay_policy")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        mro = cls.__mro__
        ahead = mro[:mro.index(DecoupledWeightDecayExtension)]
        early = [k for k in ahead if issubclass(k, OptimizerV2) and not issubclass(k, DecoupledWeightDecayExtension)]
        if early:
            raise TypeError(f"DecoupledWeightDecayExtension must come before the optimizer class in the bases of "
                            f"{cls.__name__} (its constructor takes `weight_decay` first). Received: bases "
                            f"{[k.__name__ for k in cls.__bases__]}, with {early[0].__name__} first")
        template = _template_base(cls)
        if template is not None:
            _check_template_base(template, cls.__name__)
        cls._decay_by_template = template is not None

    def __init__(self, weight_decay: Any, *args: Any, exclude_from_weight_decay: Iterable[str] | None = None,
                 **kwargs: Any) -> None:
        if not any(issubclass(k, OptimizerV2) and k not in (OptimizerBase, OptimizerV2)
                   and not issubclass(k, DecoupledWeightDecayExtension) for k in type(self).__mro__):
            raise TypeError(f"{type(self).__name__} has no optimizer rule: subclass DecoupledWeightDecayExtension "
                            "together with an optimizer class, e.g. (DecoupledWeightDecayExtension, "
                            "keras.optimizers.legacy.Adam). Received: bases "
                            f"{[k.__name__ for k in type(self).__bases__]}")
        check_number("weight_decay", weight_decay, low=0.0)
        if self._decay_by_template:
            super().__init__(*args, weight_decay=weight_decay, exclude_from_weight_decay=exclude_from_weight_decay,
                             **kwargs)
            self._weight_decay_policy = self._weight_decay
            return
        policy = DecoupledWeightDecay(exclude_from_weight_decay)  # checks the regexes before anything is built
        super().__init__(*args, **kwargs)
        self._weight_decay_policy = policy
        self._decay_var_mask: VariableMask | None = None
        set_hyper(self, "weight_decay", weight_decay)

    def _set_hyper(self, name: str, value: Any) -> None:
        if name == "weight_decay":  # also on assignment: ``opt.weight_decay = -1`` is refused
            check_number("weight_decay", value, low=0.0)
        super()._set_hyper(name, value)

    # ------------------------------------------------------- which variables
    def _decays(self, var: tf.Variable) -> bool:
        return self._weight_decay_policy.applies_to(var, self._decay_var_mask)

    @tf.autograph.experimental.do_not_convert  # plain Python: no per-variable conversion cost
    def apply_gradients(self, grads_and_vars: Iterable, name: str | None = None,
                        decay_var_list: Iterable[tf.Variable] | None = None, **kwargs: Any) -> Any:
        """Apply gradients (see OptimizerV2). ``decay_var_list``: if given, exactly
        these variables are decayed (it overrides ``exclude_from_weight_decay``)."""
        if self._decay_by_template:
            return super().apply_gradients(grads_and_vars, name, decay_var_list=decay_var_list, **kwargs)
        grads_and_vars = check_grads_and_vars(grads_and_vars)  # refused before the decay changes anything
        checks = index_checks(grads_and_vars)  # sparse rows in range: eagerly raised here
        if not tf.executing_eagerly():
            grads_and_vars = after_checks(grads_and_vars, checks)
        mask = None if decay_var_list is None else VariableMask(list(decay_var_list), "decay_var_list")
        self._decay_var_mask = mask
        try:
            return super().apply_gradients(grads_and_vars, name=name, **kwargs)
        finally:
            self._decay_var_mask = None

    # ---------------------------------------------------- the decay (non-template bases)
    def _prepare_local(self, var_device: str, var_dtype: tf.DType, apply_state: dict) -> None:
        super()._prepare_local(var_device, var_dtype, apply_state)
        if self._decay_by_template:
            return
        weight_decay = hyper_in_dtype(self, "weight_decay", var_dtype)
        if isinstance(weight_decay, LearningRateSchedule):
            weight_decay = tf.cast(weight_decay(self.iterations), var_dtype)
        coefficients = apply_state[(var_device, var_dtype)]
        coefficients["weight_decay"] = tf.identity(weight_decay)
        self._weight_decay_policy.prepare(coefficients)

    def _coefficients(self, var: tf.Variable, apply_state: dict | None) -> dict:
        key = (var.device, var.dtype.base_dtype)
        return (apply_state or {}).get(key) or fallback_apply_state(self, *key)

    def _resource_apply_dense(self, grad: tf.Tensor, var: tf.Variable, apply_state: dict | None = None) -> Any:
        if self._decay_by_template or not self._decays(var):
            return super()._resource_apply_dense(grad, var, apply_state=apply_state)
        with tf.control_dependencies([grad]):  # after the step's checks, which the gradient waits for
            decayed = self._weight_decay_policy.decay_dense(var, self._coefficients(var, apply_state))
        with tf.control_dependencies([decayed]):
            return super()._resource_apply_dense(grad, var, apply_state=apply_state)

    def _resource_apply_sparse(self, grad: tf.Tensor, var: tf.Variable, indices: tf.Tensor,
                               apply_state: dict | None = None) -> Any:
        """``indices`` are unique here: each touched row decays once, then the base's step."""
        if self._decay_by_template or not self._decays(var) or self.__dict__.get("_rows_decayed") is var:
            return super()._resource_apply_sparse(grad, var, indices, apply_state=apply_state)
        decayed = self._weight_decay_policy.decay_sparse(var, indices, self._coefficients(var, apply_state))
        with tf.control_dependencies([decayed]):
            return super()._resource_apply_sparse(grad, var, indices, apply_state=apply_state)

    def _resource_apply_sparse_duplicate_indices(self, grad: tf.Tensor, handle: tf.Variable, indices: tf.Tensor,
                                                 **kwargs: Any) -> Any:
        """A base that replaces this entry of sparse steps (Keras's SGD, which then skips
        ``_resource_apply_sparse`` without momentum) has the touched rows decayed here, once each."""
        if self._decay_by_template or not self._decays(handle) or not _replaces_sparse_entry(type(self)):
            return super()._resource_apply_sparse_duplicate_indices(grad, handle, indices, **kwargs)
        rows = tf.unique(indices).y
        coefficients = self._coefficients(handle, kwargs.get("apply_state"))
        decayed = self._weight_decay_policy.decay_sparse(handle, rows, coefficients)
        self.__dict__["_rows_decayed"] = handle  # the base may still call _resource_apply_sparse: no second decay
        try:
            with tf.control_dependencies([decayed]):
                return super()._resource_apply_sparse_duplicate_indices(grad, handle, indices, **kwargs)
        finally:
            self.__dict__["_rows_decayed"] = None

    # ------------------------------------------------------------------ config
    def get_config(self) -> dict[str, Any]:
        """The base optimizer's config, ``weight_decay`` and ``exclude_from_weight_decay``."""
        if self._decay_by_template:
            config = super().get_config()
            base = _template_base(type(self))
            for pname in _named_parameters(base.__init__):  # a subclass's own __init__ may hide them
                if pname not in config:
                    config[pname] = self._config_value(pname)
        else:
            config = super(OptimizerBase, self).get_config()  # the base's own config, not the signature's
            config["weight_decay"] = config_lib.serialize_hyperparameter(hyper_dict(self)["weight_decay"])
        config["exclude_from_weight_decay"] = self._weight_decay_policy.get_config()["exclude_from_weight_decay"]
        return config

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: dict | None = None) -> DecoupledWeightDecayExtension:
        """Inverse of :meth:`get_config` (TFA's configs included)."""
        config = dict(config)
        if isinstance(config.get("weight_decay"), dict):
            config["weight_decay"] = keras.optimizers.schedules.deserialize(config["weight_decay"],
                                                                            custom_objects=custom_objects)
        return super().from_config(config, custom_objects=custom_objects)


def _replaces_sparse_entry(cls: type) -> bool:
    """Whether a base class of ``cls`` overrides OptimizerV2's ``_resource_apply_sparse_duplicate_indices``."""
    mro = cls.__mro__
    for klass in mro[mro.index(DecoupledWeightDecayExtension) + 1:]:
        if "_resource_apply_sparse_duplicate_indices" in klass.__dict__:
            return klass is not OptimizerV2
    return False


def _named_parameters(function: Any) -> list[str]:
    return [p.name for p in inspect.signature(function).parameters.values()
            if p.name not in ("self", "name") and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]


def _template_base(cls: type) -> type | None:
    """The first template class after the extension in ``cls``'s MRO (``None``: not a template base)."""
    mro = cls.__mro__
    return next((k for k in mro[mro.index(DecoupledWeightDecayExtension):] if issubclass(k, CustomOptimizerV2)), None)


def _check_template_base(base: type, name: str) -> None:
    if "weight_decay" in inspect.signature(base.__init__).parameters:
        raise TypeError(f"{base.__name__} already takes a `weight_decay` argument: use it directly instead of "
                        f"adding decoupled weight decay to it (in {name}). Received: base_optimizer={base!r}")
    if base.weight_decay_placement != "before":
        raise TypeError(f"{base.__name__} applies weight decay {base.weight_decay_placement!r} (see "
                        f"optimizers/weight_decay.py), not before its rule: give it `weight_decay` directly "
                        f"(in {name}). Received: base_optimizer={base!r}")


_EXTENDED: dict[type, type] = {}
_KERAS_MODULES = ("keras.", "tf_keras.", "tensorflow.")


def _class_name(base: type) -> str:
    """``AdamWithDecoupledWeightDecay`` for Keras's ``Adam``; other bases carry their
    top-level package (``optimizers_AdamWithDecoupledWeightDecay``), so names never collide."""
    module = base.__module__ or ""
    prefix = "" if module.startswith(_KERAS_MODULES) else module.split(".")[0].strip("_") + "_"
    return f"{prefix}{base.__name__}WithDecoupledWeightDecay"


def extend_with_decoupled_weight_decay(base_optimizer: type) -> type:
    r"""``base_optimizer`` with decoupled weight decay (TensorFlow Addons' factory).

    The returned class subclasses :class:`DecoupledWeightDecayExtension` and
    ``base_optimizer``; each step decays :math:`\theta \leftarrow \theta -
    \lambda_t\theta` (touched rows only for sparse gradients), then applies
    the base's rule. Its constructor is the base's with ``weight_decay``
    first and the keyword ``exclude_from_weight_decay``; ``minimize`` and
    ``apply_gradients`` take ``decay_var_list``.
    ``extend_with_decoupled_weight_decay(keras.optimizers.legacy.Adam)`` gives
    TFA's ``AdamW`` numbers.

    The class is made once per base (a second call returns the same class) and
    registered with Keras as ``"optimizers>AdamWithDecoupledWeightDecay"`` (for
    Keras's ``Adam``; other bases' names carry their package:
    ``"optimizers>optimizers_AdamWithDecoupledWeightDecay"``). Those of Keras's
    built-in legacy optimizers exist as soon as this module is imported, so
    ``load_model`` finds them in a fresh process; for any other base, call
    this function before ``load_model``.

    Args:
        base_optimizer: A Keras 2 (OptimizerV2) optimizer class: a Keras
            built-in (``keras.optimizers.legacy.SGD``...), a
            :class:`~optimizers.CustomOptimizerV2` subclass that decays before
            its rule, or any other OptimizerV2 subclass. Not a wrapper
            (wrap the extended optimizer instead).

    Returns:
        The class.

    Example:

    >>> import tensorflow as tf
    >>> import optimizers
    >>> from optimizers.decoupled import extend_with_decoupled_weight_decay
    >>> AdamW = extend_with_decoupled_weight_decay(optimizers.keras.optimizers.legacy.Adam)
    >>> var = tf.Variable([1.0, -2.0])
    >>> opt = AdamW(weight_decay=0.1, learning_rate=0.01)
    >>> _ = opt.apply_gradients([(tf.constant([0.5, 0.5]), var)])
    >>> [round(x, 5) for x in var.numpy().tolist()]  # 1 - 0.1 * 1 - 0.01, -2 + 0.2 - 0.01
    [0.89, -1.81]
    """
    if not isinstance(base_optimizer, type) or not issubclass(base_optimizer, OptimizerV2):
        module = getattr(base_optimizer, "__module__", "") or ""
        hint = f" {KERAS3_HINT}" if module.split(".")[0] == "keras" else ""
        raise TypeError("`base_optimizer` must be a Keras 2 (OptimizerV2) optimizer class, e.g. "
                        f"keras.optimizers.legacy.Adam.{hint} Received: base_optimizer={base_optimizer!r}")
    if issubclass(base_optimizer, DecoupledWeightDecayExtension):
        raise TypeError(f"{base_optimizer.__name__} already has decoupled weight decay. "
                        f"Received: base_optimizer={base_optimizer!r}")
    if issubclass(base_optimizer, (OptimizerWrapper, keras.mixed_precision.LossScaleOptimizer)):
        raise TypeError(f"{base_optimizer.__name__} wraps another optimizer: extend the inner optimizer's class "
                        f"and wrap an instance of it instead. Received: base_optimizer={base_optimizer!r}")
    cls = _EXTENDED.get(base_optimizer)
    if cls is not None:
        return cls
    if issubclass(base_optimizer, CustomOptimizerV2):
        _check_template_base(base_optimizer, "extend_with_decoupled_weight_decay")

    def __init__(self: Any, weight_decay: Any, *args: Any, **kwargs: Any) -> None:
        DecoupledWeightDecayExtension.__init__(self, weight_decay, *args, **kwargs)

    # The signature get_config and help() read: weight_decay, the base's arguments, exclude_from_weight_decay.
    base_params = list(inspect.signature(base_optimizer.__init__).parameters.values())
    kinds = inspect.Parameter
    params = [base_params[0], kinds("weight_decay", kinds.POSITIONAL_OR_KEYWORD)]
    params += [p for p in base_params[1:] if p.kind != p.VAR_KEYWORD]
    params.append(kinds("exclude_from_weight_decay", kinds.KEYWORD_ONLY, default=None))
    params += [p for p in base_params[1:] if p.kind == p.VAR_KEYWORD]
    __init__.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    name = _class_name(base_optimizer)
    doc = (f"{base_optimizer.__name__} with decoupled weight decay (made by extend_with_decoupled_weight_decay).\n\n"
           f"See :class:`~optimizers.decoupled.DecoupledWeightDecayExtension`.")
    cls = type(name, (DecoupledWeightDecayExtension, base_optimizer),
               {"__init__": __init__, "__module__": __name__, "__qualname__": name, "__doc__": doc})
    _EXTENDED[base_optimizer] = cls
    return cls


for _base in (keras.optimizers.legacy.Adam, keras.optimizers.legacy.SGD, keras.optimizers.legacy.RMSprop,
              keras.optimizers.legacy.Adagrad, keras.optimizers.legacy.Adadelta, keras.optimizers.legacy.Adamax,
              keras.optimizers.legacy.Nadam, keras.optimizers.legacy.Ftrl):
    extend_with_decoupled_weight_decay(_base)
