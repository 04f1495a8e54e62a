"""LazyAdam: Adam whose sparse steps touch only the gradient's rows, TensorFlow Addons' ``LazyAdam`` successor."""

from __future__ import annotations

from typing import Any

from optimizers.rules.adam import Adam

__all__ = ["LazyAdam"]


class LazyAdam(Adam):
    r"""Adam (Kingma & Ba, arXiv:1412.6980) with lazy sparse updates, TFA's numbers.

    A dense gradient takes Keras 2's Adam step. A sparse gradient
    (``tf.IndexedSlices``, e.g. from an embedding) updates the moments and
    weights of the touched rows :math:`i` only; other rows keep theirs, so a
    step's cost follows the touched rows, not the table:

    .. math::
        \begin{align*}
        m_i &\leftarrow \beta_1 m_i + (1-\beta_1)\,g_i, \qquad
            v_i \leftarrow \beta_2 v_i + (1-\beta_2)\,g_i^2 \\
        \theta_i &\leftarrow \theta_i - \eta_t\,\frac{\sqrt{1-\beta_2^t}}{1-\beta_1^t}\,
            \frac{m_i}{\sqrt{\hat v_i} + \epsilon},
            \qquad \hat v_i = v_i \text{ (AMSGrad: } \hat v_i \leftarrow \max(\hat v_i, v_i))
        \end{align*}

    On a CPU of this process, outside XLA, the sparse step without AMSGrad is
    one kernel that reads and writes each touched row once (TFA gathers and
    scatters each row in several ops), with TFA's bits.

    Difference from TFA (a fix): with ``amsgrad=True`` TFA's sparse step
    ignores AMSGrad (it never reads nor writes ``vhat``) while its dense step
    applies it; TFA documents ``amsgrad`` as unsupported, so no result depends
    on that. Here both steps apply AMSGrad. A TFA state resumes smoothly: its
    ``vhat`` rows are 0, so the first step here takes :math:`\max(0, v_i) = v_i`.

    Args:
        learning_rate: :math:`\eta`: float, tensor, callable or schedule.
            Defaults to ``0.001``.
        beta_1: Decay of the first moment, in ``[0, 1)``. Defaults to ``0.9``.
        beta_2: Decay of the second moment, in ``[0, 1)``. Defaults to ``0.999``.
        epsilon: :math:`\epsilon`, a float ``> 0`` (``0`` or ``None`` means ``keras.backend.epsilon()``,
            as in Keras 2). Defaults to ``1e-7``.
        amsgrad: Use AMSGrad (Reddi et al., arXiv:1904.09237). Defaults to ``False``.
        name: Defaults to ``"LazyAdam"``.
        **kwargs: ``clipnorm``, ``clipvalue``, ``global_clipnorm``, ``decay``,
            ``weight_decay`` (decays the touched rows only), ``updaters``,
            ``jit_compile`` (see :class:`~optimizers.CustomOptimizerV2`).

    Example:

    >>> import tensorflow as tf
    >>> from optimizers.rules.lazy_adam import LazyAdam
    >>> table = tf.Variable(tf.ones((3, 2)))
    >>> grad = tf.IndexedSlices(tf.constant([[0.5, -0.5]]), tf.constant([1]), tf.constant([3, 2]))
    >>> _ = LazyAdam(learning_rate=0.1).apply_gradients([(grad, table)])
    >>> [[round(x, 5) for x in row] for row in table.numpy().tolist()]  # only row 1 moves, by lr
    [[1.0, 1.0], [0.9, 1.1], [1.0, 1.0]]
    """

    def __init__(self, learning_rate: Any = 0.001, beta_1: Any = 0.9, beta_2: Any = 0.999, epsilon: float = 1e-7,
                 amsgrad: bool = False, name: str = "LazyAdam", **kwargs: Any) -> None:
        if "lazy" in kwargs:
            raise TypeError(f"LazyAdam is always lazy; use optimizers.Adam for a choice. "
                            f"Received: lazy={kwargs['lazy']!r}")
        super().__init__(learning_rate, beta_1, beta_2, epsilon, amsgrad, name, lazy=True, **kwargs)
