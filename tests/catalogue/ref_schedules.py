"""Numpy reference of the cyclical learning rates (Smith, arXiv:1506.01186, section 3.1).

Written from the paper's triangular policy: cycle ``c = floor(1 + t / (2 s))``, position
``x = |t / s - 2 c + 1|``, rate ``lo + (hi - lo) * max(0, 1 - x) * f(u)``, with ``u`` the cycle
(``scale_mode="cycle"``) or the step (``"iterations"``); ``f = 1`` (triangular), ``1 / 2 ** (c - 1)``
(triangular2, amplitude halved each cycle) and ``gamma ** t`` (exp_range). Computed in float64;
``dtype`` rounds the inputs as a schedule of that dtype holds them (Python numbers become float32).
"""

import numpy as np

SCALE_FNS = {
    "triangular": lambda u, gamma: 1.0,
    "triangular2": lambda u, gamma: 1.0 / 2.0 ** (u - 1),
    "exp_range": lambda u, gamma: gamma ** u,
}


def cyclical(step, initial_learning_rate, maximal_learning_rate, step_size, policy="triangular",
             scale_mode="cycle", gamma=1.0, dtype=np.float32):
    """The learning rate at ``step`` (steps taken so far)."""
    lo, hi, s = (float(dtype(v)) for v in (initial_learning_rate, maximal_learning_rate, step_size))
    t = float(step)
    cycle = np.floor(1 + t / (2 * s))
    x = abs(t / s - 2 * cycle + 1)
    u = cycle if scale_mode == "cycle" else t
    return lo + (hi - lo) * max(0.0, 1 - x) * SCALE_FNS[policy](u, gamma)
