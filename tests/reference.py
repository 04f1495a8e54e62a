"""Numpy reference implementations: ``update(param, grad, slots, **hyper) -> (param, slots)``.

``grad`` is dense here; a sparse gradient is turned into its dense equivalent
(repeated rows summed) by :func:`densify` first, which is what every rule in
this library promises for non-lazy sparse steps.
"""

import numpy as np


def densify(values, indices, shape):
    dense = np.zeros(shape, dtype=values.dtype)
    np.add.at(dense, indices, values)
    return dense


def sgd(param, grad, slots, lr, momentum=0.0, nesterov=False, step=None):
    v = slots.get("momentum", np.zeros_like(param))
    v = momentum * v - lr * grad
    param = param + (momentum * v - lr * grad if nesterov else v)
    return param, {"momentum": v}


def adam(param, grad, slots, lr, beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False, step=1):
    m = slots.get("m", np.zeros_like(param))
    v = slots.get("v", np.zeros_like(param))
    m = m + (grad - m) * (1 - beta_1)
    v = v + (grad * grad - v) * (1 - beta_2)
    alpha = lr * np.sqrt(1 - beta_2**step) / (1 - beta_1**step)
    out = {"m": m, "v": v}
    denominator = v
    if amsgrad:
        vhat = np.maximum(slots.get("vhat", np.zeros_like(param)), v)
        out["vhat"] = denominator = vhat
    return param - alpha * m / (np.sqrt(denominator) + epsilon), out
