"""Muon: orthogonalised momentum for matrices, AdamW for the other variables (Keras 3's ``Muon``)."""

from __future__ import annotations

import re
from typing import Any

import tensorflow as tf

from optimizers.hyperparameters import check_bool, check_constant, check_epsilon, check_integer
from optimizers.template import CustomOptimizerV2
from optimizers.tf_compat import variable_name

__all__ = ["Muon"]


def _check_patterns(value: Any) -> None:
    if value is not None and (isinstance(value, str) or not all(isinstance(p, str) for p in value)):
        raise TypeError(f"`exclude_layers` must be None or a list of regex strings. Received: exclude_layers={value!r}")


def orthogonalize(x: tf.Tensor, steps: int, a: float, b: float, c: float) -> tf.Tensor:
    """``steps`` quintic Newton-Schulz iterations on ``x`` (the iteration of :class:`Muon`'s docstring)."""
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = tf.transpose(x)
    x = x / (tf.norm(x) + 1e-7)
    for _ in range(steps):
        gram = x @ tf.transpose(x)
        x = a * x + (b * gram + c * gram @ gram) @ x
    return tf.transpose(x) if tall else x


class Muon(CustomOptimizerV2):
    r"""Muon (Jordan et al., 2024; Liu et al., arXiv:2502.16982), Keras 3's ``Muon`` numbers.

    A matrix :math:`\theta` (a rank-2 variable that is not an embedding nor
    excluded) moves along its orthogonalised Nesterov momentum, scaled to
    AdamW's RMS (``rms_rate`` :math:`r`, Moonlight's adjustment); every other
    variable takes AdamW at learning rate :math:`\eta_t\rho` (``adam_lr_ratio``).
    One slot ``momentum``, and ``velocity`` for the AdamW variables. For a
    :math:`n \times k` matrix, with :math:`\mathrm{NS}` the quintic
    Newton-Schulz iteration (``ns_steps`` times
    :math:`X \leftarrow aX + (bA + cA^2)X`, :math:`A = XX^T`, from
    :math:`X = G / (\lVert G\rVert_F + 10^{-7})`, on :math:`G^T` when
    :math:`G` has more rows than columns; close to :math:`UV^T` of :math:`G = USV^T`):

    .. math::
        \begin{align*}
        \theta &\leftarrow \theta - \eta_t\lambda\,\theta, \qquad
        m \leftarrow \mu m + g, \qquad u = \mathrm{NS}(g + \mu m)
            \quad (\texttt{nesterov=False: } \mathrm{NS}(m)) \\
        \theta &\leftarrow \theta - \eta_t\,r\sqrt{\max(n, k)}\;u
        \end{align*}

    and for the others Adam's step (Keras 3's form) after the decay
    :math:`\theta \leftarrow \theta - \eta_t\lambda_{adam}\theta` (the
    decay's rate is :math:`\eta_t`, not :math:`\eta_t\rho`, as in Keras 3).
    A sparse gradient takes the dense step with the gradient scattered into
    zeros. Which variables are matrices is read from their names:
    ``"embedding"`` in the name (``exclude_embeddings``), or a match of an
    ``exclude_layers`` regex, makes a variable an AdamW one. ``weight_decay=None``
    turns both decays off (Keras 3 still applies ``adam_weight_decay`` then).

    Args:
        learning_rate: :math:`\eta`: float, tensor, callable or schedule.
            Defaults to ``0.001``.
        adam_beta_1: AdamW's :math:`\beta_1`. Defaults to ``0.9``.
        adam_beta_2: AdamW's :math:`\beta_2`. Defaults to ``0.999``.
        adam_weight_decay: :math:`\lambda_{adam}`, the AdamW variables' decay. Defaults to ``0.004``.
        epsilon: AdamW's :math:`\epsilon`, a float ``> 0``. Defaults to ``1e-7``.
        weight_decay: :math:`\lambda`, the matrices' decay. Defaults to ``0.004``.
        exclude_layers: Regexes of variable names that take AdamW. Defaults to none.
        exclude_embeddings: Embeddings take AdamW. Defaults to ``True``.
        muon_a: The iteration's :math:`a`. Defaults to ``3.4445``.
        muon_b: The iteration's :math:`b`. Defaults to ``-4.7750``.
        muon_c: The iteration's :math:`c`. Defaults to ``2.0315``.
        adam_lr_ratio: :math:`\rho`. Defaults to ``1``.
        momentum: :math:`\mu`, in ``[0, 1)``. Defaults to ``0.95``.
        ns_steps: Newton-Schulz iterations, ``>= 1``. Defaults to ``5``.
        nesterov: Defaults to ``True``.
        rms_rate: :math:`r`, or ``None`` for no adjustment. Defaults to ``0.2``.
        name: Defaults to ``"Muon"``.
        **kwargs: ``exclude_from_weight_decay``, ``clipnorm``, ``clipvalue``,
            ``global_clipnorm``, ``updaters``, ``jit_compile`` (see
            :class:`~optimizers.CustomOptimizerV2`).

    Example:

    >>> import tensorflow as tf
    >>> from optimizers.rules.muon import Muon
    >>> kernel = tf.Variable(tf.eye(2))
    >>> _ = Muon(learning_rate=0.1, weight_decay=0.0).apply_gradients([(tf.constant([[1.0, 0.0], [0.0, 1.0]]), kernel)])
    >>> [round(x, 3) for x in kernel.numpy().ravel().tolist()]  # about lr * 0.2 * sqrt(2): NS is near-orthogonal
    [0.969, 0.0, 0.0, 0.969]
    """

    weight_decay_placement = "inside"

    def __init__(self, learning_rate: Any = 0.001, adam_beta_1: Any = 0.9, adam_beta_2: Any = 0.999,
                 adam_weight_decay: Any = 0.004, epsilon: float = 1e-7, weight_decay: Any = 0.004,
                 exclude_layers: Any = None, exclude_embeddings: bool = True, muon_a: float = 3.4445,
                 muon_b: float = -4.7750, muon_c: float = 2.0315, adam_lr_ratio: Any = 1, momentum: Any = 0.95,
                 ns_steps: int = 5, nesterov: bool = True, rms_rate: float | None = 0.2, name: str = "Muon",
                 **kwargs: Any) -> None:
        kwargs.setdefault("scale_weight_decay_by_lr", True)
        super().__init__(name, weight_decay=weight_decay, **kwargs)
        self.add_hyperparameter("learning_rate", learning_rate, low=0.0)
        self.add_hyperparameter("adam_beta_1", adam_beta_1, low=0.0, high=1.0, high_inclusive=False)
        self.add_hyperparameter("adam_beta_2", adam_beta_2, low=0.0, high=1.0, high_inclusive=False)
        self.add_hyperparameter("adam_weight_decay", adam_weight_decay, low=0.0)
        self.add_hyperparameter("adam_lr_ratio", adam_lr_ratio, low=0.0)
        self.add_hyperparameter("momentum", momentum, low=0.0, high=1.0, high_inclusive=False)
        self.add_option("epsilon", epsilon, check_epsilon)
        self.add_option("exclude_layers", None if exclude_layers is None else list(exclude_layers), _check_patterns)
        self.add_option("exclude_embeddings", exclude_embeddings, lambda v: check_bool("exclude_embeddings", v))
        for coefficient, value in (("muon_a", muon_a), ("muon_b", muon_b), ("muon_c", muon_c)):
            self.add_option(coefficient, value, lambda v, n=coefficient: check_constant(n, v))
        self.add_option("ns_steps", ns_steps, lambda v: check_integer("ns_steps", v, 1))
        self.add_option("nesterov", nesterov, lambda v: check_bool("nesterov", v))
        self.add_option("rms_rate", rms_rate, lambda v: v is None or check_constant("rms_rate", v, low=0.0))

    def _is_matrix(self, var: tf.Variable) -> bool:
        name = variable_name(var)
        return (var.shape.rank == 2 and not (self.exclude_embeddings and "embedding" in name.lower())
                and not any(re.search(pattern, name) for pattern in self.exclude_layers or ()))

    def slot_specs(self, var):
        return ["momentum"] if self._is_matrix(var) else ["momentum", "velocity"]

    def variable_options(self, var):
        return {"matrix": self._is_matrix(var)}

    def prepare(self, dtype, c):
        c["adam_alpha"] = (c["learning_rate"] * c["adam_lr_ratio"] * tf.sqrt(1 - tf.pow(c["adam_beta_2"], c["step"]))
                           / (1 - tf.pow(c["adam_beta_1"], c["step"])))
        c["adam_decay_factor"] = c["learning_rate"] * c["adam_weight_decay"]

    def update_dense(self, grad, var, slots, c):
        if c.get("decayed"):
            factor = c["weight_decay_factor"] if c["matrix"] else c["adam_decay_factor"]
            var.assign(var - var * factor)
        m = slots["momentum"]
        if not c["matrix"]:  # Keras 3's Adam step
            b1, b2 = c["adam_beta_1"], c["adam_beta_2"]
            v = slots["velocity"]
            m_t = m.assign_add((grad - m) * (1 - b1))
            v_t = v.assign_add((tf.square(grad) - v) * (1 - b2))
            return var.assign_sub(m_t * c["adam_alpha"] / (tf.sqrt(v_t) + tf.constant(self.epsilon, var.dtype)))
        m_t = m.assign_add(grad + m * (c["momentum"] - 1))
        direction = grad + c["momentum"] * m_t if self.nesterov else m_t
        update = orthogonalize(direction, self.ns_steps, self.muon_a, self.muon_b, self.muon_c)
        step = c["learning_rate"] * update
        if self.rms_rate is not None:
            step = step * (max(var.shape[0], var.shape[1]) ** 0.5 * self.rms_rate)
        return var.assign_sub(step)
