"""A wrapper's attributes that are the inner optimizer's: its learning rate, hyperparameters,
options and clipping are read and set through the wrapper, at any depth of wrapping."""

from __future__ import annotations

from typing import Any

from optimizers import config as config_lib
from optimizers.hyperparameters import check_number
from optimizers.keras_compat import OptimizerV2, hyper_dict

__all__ = ["CLIP_KWARGS", "InnerAttributes", "check_clipping", "declares"]

CLIP_KWARGS = ("clipnorm", "clipvalue", "global_clipnorm")


def check_clipping(inner: Any, clipping: dict[str, Any]) -> None:
    """Refuse ``clipping`` (``{key: value}``) for ``inner`` before anything is set: each value a
    number >= 0 or ``None``, and never ``clipnorm`` with ``global_clipnorm`` (Keras 2 refuses the pair)."""
    for key, value in clipping.items():
        if value is not None:
            check_number(key, value, low=0.0)
    merged = {key: getattr(inner, key, None) for key in ("clipnorm", "global_clipnorm")} | clipping
    if merged["clipnorm"] is not None and merged["global_clipnorm"] is not None:
        raise ValueError("Cannot accept both `clipnorm` and `global_clipnorm` (with the inner optimizer's). "
                         f"Received: clipnorm={merged['clipnorm']!r}, global_clipnorm={merged['global_clipnorm']!r}")


def declares(optimizer: Any, name: str) -> bool:
    """Whether public attribute ``name`` is ``optimizer``'s (a hyperparameter, an option, another
    argument it keeps) or, for a wrapper, that of the optimizer it wraps, at any depth."""
    if name.startswith("_"):
        return False
    if isinstance(optimizer, InnerAttributes):
        return optimizer.owns_attribute(name) or declares(optimizer.inner_optimizer, name)
    return (name in hyper_dict(optimizer) or name in vars(optimizer) or name in getattr(optimizer, "hyperparameter_names", ())
            or isinstance(getattr(type(optimizer), name, None), property))  # exclude_from_weight_decay...


class InnerAttributes:
    """Mixin of :class:`~optimizers.OptimizerWrapper`: the public attributes the wrapper does not
    own (set on it, declared by it, arguments of its constructor, defined by its class) are the
    inner optimizer's (``self._optimizer``), read and set there; the inner optimizer checks them."""

    @property
    def learning_rate(self) -> Any:
        """The inner optimizer's learning rate (read and set)."""
        return self._optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        self._optimizer.learning_rate = value

    lr = learning_rate

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            inner = self.__dict__.get("_optimizer")
            if inner is None or name.startswith("_"):
                raise
            return getattr(inner, name)  # the inner optimizer's hyperparameters and methods

    def __setattr__(self, name: str, value: Any) -> None:
        inner = self.__dict__.get("_optimizer")
        if inner is not None and not self.owns_attribute(name) and declares(inner, name):
            setattr(inner, name, value)  # the inner optimizer checks it (and refuses options after a step)
        else:
            super().__setattr__(name, value)

    def owns_attribute(self, name: str) -> bool:
        """Whether attribute ``name`` is the wrapper's own: set on it, declared by it, an argument
        of its constructor, or defined by its class (``learning_rate``, ``clipnorm``...)."""
        return (name in self.__dict__ or name in self.hyperparameter_names or hasattr(type(self), name)
                or name in config_lib.signature_parameters(type(self)))

    clipnorm = property(lambda self: self._inner_clipping("clipnorm"),
                        lambda self, value: self._set_clipping("clipnorm", value),
                        doc="The inner optimizer's ``clipnorm`` (read and set).")
    clipvalue = property(lambda self: self._inner_clipping("clipvalue"),
                         lambda self, value: self._set_clipping("clipvalue", value),
                         doc="The inner optimizer's ``clipvalue`` (read and set).")
    global_clipnorm = property(lambda self: self._inner_clipping("global_clipnorm"),
                               lambda self, value: self._set_clipping("global_clipnorm", value),
                               doc="The inner optimizer's ``global_clipnorm`` (read and set).")

    def _inner_clipping(self, key: str) -> Any:
        inner = self.__dict__.get("_optimizer")
        return getattr(inner, key) if inner is not None else self.__dict__.get("_" + key)

    def _set_clipping(self, key: str, value: Any) -> None:
        inner = self.__dict__.get("_optimizer")
        if inner is None:  # OptimizerV2.__init__ sets them (to None) before the inner optimizer is known
            getattr(OptimizerV2, key).fset(self, value)
            return
        check_clipping(inner, {key: value})
        setattr(inner, key, value)
