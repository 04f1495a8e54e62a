r"""Sharpness-Aware Minimization (Foret, Kleiner, Mobahi & Neyshabur, arXiv:2010.01412): the gradients.

SAM is not an optimizer rule: it changes *where* the gradient is taken, which needs the loss,
so it lives in the training step, around any optimizer. With :math:`\rho` = ``rho`` and
:math:`\epsilon` = ``epsilon``, one step on a batch with loss :math:`L` is

.. math::

    g = \nabla L(w),\qquad
    e = \rho\,\frac{g}{\lVert g\rVert_2 + \epsilon},\qquad
    g_{\mathrm{SAM}} = \nabla L(w + e)\ \text{(then } w \text{ is restored)},

and the optimizer applies :math:`g_{\mathrm{SAM}}` at :math:`w`. The norm is the global norm
over all the variables. ``adaptive=True`` is the paper's adaptive variant (ASAM, Kwon et al.,
arXiv:2102.11600), elementwise :math:`e = \rho\,w^2 g / (\lVert w\,g\rVert_2 + \epsilon)`.

Costs: two forward and backward passes per batch, and a copy of the weights (the restore
assigns the saved values back, exactly, rather than subtracting :math:`e`). The one-pass variant
(``perturbation=`` a variable per weight, the Keras models' ``reuse_gradient=True``) takes its
one gradient at :math:`w + e_{t-1}`, where :math:`e_{t-1}` was computed from the previous
batch's gradient (zero at the first step), applies it, and stores :math:`e_t` from it: one pass
per batch, and the stored perturbation (one copy of the weights, saved in checkpoints) beside
the copy for the restore.

Under ``tf.distribute`` (called in replica context, as ``fit`` and ``strategy.run`` do),
:math:`e` is computed from the gradient summed across replicas, so every replica moves to the
same :math:`w + e`: the sharpness of the global batch's loss, not the paper's per-replica
m-sharpness. A sum and a mean give the same :math:`e` (the gradient's scale cancels, but for
:math:`\epsilon`). The returned :math:`g_{\mathrm{SAM}}` is each replica's own, which the
optimizer then combines as it always does.

This module is backend code: TensorFlow only, for the variables of either Keras (or plain
``tf.Variable``). ``optimizers.SAMModel`` (Keras 2) and ``optimizers.keras3.SAMModel`` run it
in ``fit``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

__all__ = ["check_rho", "check_sam_arguments", "sam_gradients", "sam_perturbation"]


def check_rho(rho: Any, name: str = "rho") -> float:
    """``rho`` (or ``epsilon``): a finite Python number ``>= 0``, else a ``ValueError`` that repeats it."""
    if isinstance(rho, bool) or not isinstance(rho, numbers.Real) or not math.isfinite(rho) or rho < 0:
        raise ValueError(f"`{name}` must be a finite number >= 0. Received: {name}={rho!r}")
    return float(rho)


def check_sam_arguments(model: Any, rho: Any, epsilon: Any, adaptive: Any, reuse_gradient: Any,
                        model_class: type) -> tuple[float, float]:
    """The checks of both Keras' ``SAMModel``, before anything is built."""
    if not isinstance(model, model_class):
        package = model_class.__module__.split(".")[0]
        raise ValueError(f"`model` must be a {package}.{model_class.__name__}. Received: model={model!r}")
    for name, value in (("adaptive", adaptive), ("reuse_gradient", reuse_gradient)):
        if not isinstance(value, bool):
            raise ValueError(f"`{name}` must be a bool. Received: {name}={value!r}")
    if reuse_gradient and not model.built:
        raise ValueError("`reuse_gradient=True` keeps a perturbation per weight: build the model first "
                         f"(give it an `Input`, or call it once). Received: model={model!r}, not built")
    return check_rho(rho), check_rho(epsilon, "epsilon")


def sam_perturbation(grads: Sequence[Any], variables: Sequence[Any], rho: float = 0.05, *,
                     adaptive: bool = False, epsilon: float = 1e-12) -> list[tf.Tensor]:
    """:math:`e` for each variable from its gradient (``None``: no gradient, zero), as dense tensors.

    In a replica context of a strategy with several replicas, the gradients are first summed
    across replicas.
    """
    variables = [_tf_variable(v) for v in variables]
    grads = [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g) for g, v in zip(grads, variables)]
    context = tf.distribute.get_replica_context()
    if context is not None and context.num_replicas_in_sync > 1:
        grads = context.all_reduce(tf.distribute.ReduceOp.SUM, grads)
    if adaptive:
        scaled = [tf.abs(v) * g for g, v in zip(grads, variables)]  # |w| g, whose norm ASAM divides by
        norm = tf.linalg.global_norm(scaled)
        return [tf.math.divide_no_nan(tf.constant(rho, s.dtype), norm + tf.constant(epsilon, s.dtype)) * tf.abs(v) * s
                for s, v in zip(scaled, variables)]
    norm = tf.linalg.global_norm(grads)  # divide_no_nan: a zero gradient (or the first reused one) moves nothing
    # rho and epsilon as constants of each dtype (tf.cast of a Python float would round it to float32 first)
    return [tf.math.divide_no_nan(tf.constant(rho, g.dtype), norm + tf.constant(epsilon, g.dtype)) * g for g in grads]


def sam_gradients(loss_fn: Callable[[], Any], variables: Sequence[Any], rho: float = 0.05, *,
                  adaptive: bool = False, epsilon: float = 1e-12,
                  perturbation: Sequence[Any] | None = None) -> tuple[tf.Tensor, list[Any]]:
    r"""The SAM gradients of ``loss_fn()`` with respect to ``variables``, and the loss.

    Args:
        loss_fn: Called with no argument, returns the scalar loss (it reads ``variables``).
            Called twice, or once with ``perturbation``.
        variables: The trainable variables (of Keras 2, Keras 3 or plain ``tf.Variable``).
        rho: :math:`\rho`, the radius of the neighbourhood, a number ``>= 0``; ``0`` gives the
            plain gradient. Defaults to ``0.05``.
        adaptive: ASAM's elementwise perturbation. Defaults to ``False``.
        epsilon: :math:`\epsilon`, added to the norm, a number ``>= 0``. Defaults to ``1e-12``.
        perturbation: ``None`` (the two-pass step), or one variable per weight, of its shape and
            dtype, starting at zero: the one-pass step, which takes the gradient at
            ``w + perturbation`` and stores there the perturbation for the next call.

    Returns:
        ``(loss, gradients)``: the loss at the point of the first gradient (:math:`w` for the
        two-pass step, :math:`w + e_{t-1}` for the one-pass step) and :math:`g_{\mathrm{SAM}}`,
        one per variable (``None`` where the loss does not depend on it). The variables hold
        :math:`w` again.

    In a replica context (``strategy.run``, ``fit``), :math:`e` comes from the gradient summed
    across replicas, the same on every replica; the gradients returned are each replica's own.

    Example (a custom loop; any optimizer then applies the gradients):

    >>> import tensorflow as tf
    >>> w = tf.Variable([1.0, 2.0])
    >>> loss, grads = sam_gradients(lambda: tf.reduce_sum(w ** 2), [w], rho=0.5)
    >>> # g = 2w = [2, 4]; e = 0.5 g / |g|; g_SAM = 2 (w + e)
    >>> [round(float(x), 4) for x in grads[0]]
    [2.4472, 4.8944]
    >>> w.numpy().tolist()  # restored
    [1.0, 2.0]
    """
    rho, epsilon = check_rho(rho), check_rho(epsilon, "epsilon")
    variables = [_tf_variable(v) for v in variables]

    def value_and_gradients():
        with tf.GradientTape() as tape:
            loss = loss_fn()
        return loss, tape.gradient(loss, variables)

    def at(shift):  # the loss and gradients at w + shift, then w restored exactly
        saved = [tf.identity(v) for v in variables]  # ordered with the assignments by TF's automatic control
        _assign(variables, [v + s for v, s in zip(saved, shift)])  # dependencies on each variable
        loss, grads = value_and_gradients()
        _assign(variables, saved)
        return loss, grads

    if perturbation is None:
        loss, grads = value_and_gradients()
        return loss, at(sam_perturbation(grads, variables, rho, adaptive=adaptive, epsilon=epsilon))[1]
    perturbation = [_tf_variable(p) for p in perturbation]
    loss, grads = at([tf.convert_to_tensor(p) for p in perturbation])
    _assign(perturbation, sam_perturbation(grads, variables, rho, adaptive=adaptive, epsilon=epsilon))
    return loss, grads


def _tf_variable(var: Any) -> tf.Variable:
    """The ``tf.Variable`` of a variable: itself, or a Keras 3 variable's ``value`` (TensorFlow backend)."""
    return var if isinstance(var, tf.Variable) else var.value


def _assign(variables: Sequence[Any], values: Sequence[tf.Tensor]) -> None:
    """``variable.assign(value)`` for each, also in a replica context of a strategy, where every
    replica holds the same values (each replica's copy gets its own)."""
    context = tf.distribute.get_replica_context()
    if context is None or not tf.distribute.has_strategy():
        for var, value in zip(variables, values):
            var.assign(value)
        return

    def assign_each(strategy, *values):
        for var, value in zip(variables, values):
            strategy.extended.update(var, lambda v, x: v.assign(x), args=(value,))

    context.merge_call(assign_each, args=tuple(values))
