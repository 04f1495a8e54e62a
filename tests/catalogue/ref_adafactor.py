"""Numpy reference of Adafactor, written from the paper (Shazeer & Stern 2018, arXiv:1804.04235,
Algorithms 4 and 5 without momentum, with update clipping, Section 8's relative step size) and
Keras 3's documented ``keras.optimizers.Adafactor`` behaviour (factored over the last two axes,
the step size capped by the learning rate, decay ``theta -= lr * wd * theta`` before the step).

:class:`AdafactorRule` has the conformance table's interface (``tests/reference.py``):
``initial_slots(param, dtype)`` and ``step(param, grad, rows, slots, iterations, dtype)`` with
``iterations`` the steps taken before (0-based), ``grad`` dense (a sparse gradient densified,
repeated rows summed: Adafactor's sparse step is its dense step) and the computation in float64.
Hyperparameters reach a step as the library keeps them, rounded to float32; a float16/bfloat16
variable is stepped in float32 and stored back in its dtype, which the reference reproduces by
rounding the new variable and slots to that dtype.
"""

import numpy as np

import reference  # tests/reference.py: as_hyper (float32 rounding)


def rms(x):
    return np.sqrt(np.mean(np.square(x)))


def factored_second_moment(row_mean, col_mean):
    """The paper's rank-1 estimate ``V = R C / (1^T R)`` from per-row and per-column *sums*
    ``R``, ``C`` of ``G``; the slots keep means (Keras 3), so ``R = row_mean * m``, ``C = col_mean * n``."""
    n, m = row_mean.shape[-1], col_mean.shape[-1]
    row_sum, col_sum = row_mean * m, col_mean * n
    return row_sum[..., :, None] * col_sum[..., None, :] / row_sum.sum(axis=-1)[..., None, None]


def adafactor(param, grad, slots, lr, t, beta_2_decay=-0.8, epsilon_1=1e-30, epsilon_2=1e-3, clip_threshold=1.0,
              relative_step=True, decay_factor=0.0, trace=None):
    """One Adafactor step at the 1-based step ``t``: ``(param, slots)``. ``trace`` (a list), when
    given, gets which branches the step took."""
    param = param - decay_factor * param
    beta = 1.0 - t**beta_2_decay  # 0 at t = 1: no bias correction needed
    g2 = grad * grad + epsilon_1
    if param.ndim >= 2:
        row = beta * slots["v_row"] + (1 - beta) * g2.mean(axis=-1)
        col = beta * slots["v_col"] + (1 - beta) * g2.mean(axis=-2)
        v_hat, new_slots = factored_second_moment(row, col), {"v_row": row, "v_col": col}
    else:
        v_hat = beta * slots["v"] + (1 - beta) * g2
        new_slots = {"v": v_hat}
    u = grad / np.sqrt(v_hat)
    u_hat = u / max(1.0, rms(u) / clip_threshold)
    if relative_step:
        alpha = max(epsilon_2, rms(param)) * min(lr, 1 / np.sqrt(t))
    else:
        alpha = lr
    if trace is not None:
        trace.append(dict(clipped=rms(u) > clip_threshold, capped=1 / np.sqrt(t) < lr,
                          floored=epsilon_2 > rms(param)))
    return param - alpha * u_hat, new_slots


def _value_at(value, iterations):
    return value(iterations) if callable(value) else value


class AdafactorRule:
    """The library's ``Adafactor`` in numpy (constructor arguments as the class takes them;
    ``weight_decay``/``scale_by_lr`` for the template's decay)."""

    def __init__(self, learning_rate=0.001, beta_2_decay=-0.8, epsilon_1=1e-30, epsilon_2=1e-3, clip_threshold=1.0,
                 relative_step=True, weight_decay=None, scale_by_lr=True, name="Adafactor"):
        self.lr, self.weight_decay, self.scale_by_lr, self.name = learning_rate, weight_decay, scale_by_lr, name
        self.constants = dict(beta_2_decay=beta_2_decay, epsilon_1=epsilon_1, epsilon_2=epsilon_2,
                              clip_threshold=clip_threshold)
        self.relative_step = relative_step

    def initial_slots(self, param, dtype=None):
        if param.ndim >= 2:
            return {"v_row": np.zeros(param.shape[:-1]), "v_col": np.zeros(param.shape[:-2] + param.shape[-1:])}
        return {"v": np.zeros_like(param, dtype=np.float64)}

    def step(self, param, grad, rows, slots, iterations, dtype, decayed=True, trace=None):
        dtype = np.dtype(dtype)
        half = dtype.itemsize < 4
        compute = np.float32 if half else dtype
        lr = reference.as_hyper(_value_at(self.lr, iterations), compute)
        hyper = {k: reference.as_hyper(v, compute) for k, v in self.constants.items()}
        factor = 0.0
        if self.weight_decay is not None and decayed:
            factor = reference.as_hyper(_value_at(self.weight_decay, iterations), compute)
            factor = factor * lr if self.scale_by_lr else factor
        param, new_slots = adafactor(param, grad, slots, lr, iterations + 1, relative_step=self.relative_step,
                                     decay_factor=factor, trace=trace, **hyper)
        if half:  # stored back in the variable's dtype
            param = param.astype(dtype).astype(np.float64)
            new_slots = {k: v.astype(dtype).astype(np.float64) for k, v in new_slots.items()}
        return param, new_slots
