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


def decay(param, factor, rows=None):
    """Decoupled weight decay ``param -= factor * param`` (only ``rows`` when given)."""
    param = param.copy()
    if rows is None:
        param -= factor * param
    else:
        rows = np.unique(rows)
        param[rows] -= factor * param[rows]
    return param


def on_rows(rule, rows, param, grad, slots, **hyper):
    """Lazy sparse semantics: ``rule`` on ``rows`` only; other rows and their slots stay as they are."""
    rows = np.unique(rows)
    new_rows, new_slots = rule(param[rows], grad[rows], {k: s[rows] for k, s in slots.items()}, **hyper)
    param = param.copy()
    param[rows] = new_rows
    out = {}
    for name, value in new_slots.items():
        full = slots.get(name, np.zeros_like(param)).copy()
        full[rows] = value
        out[name] = full
    return param, out


def adamw(param, grad, slots, lr, weight_decay, scale_by_lr=False, rows=None, lazy=False, **adam_hyper):
    """Decay (all rows, or the touched ``rows`` of a sparse step), then Adam (lazy: touched rows only)."""
    param = decay(param, weight_decay * lr if scale_by_lr else weight_decay, rows)
    if lazy and rows is not None:
        return on_rows(adam, rows, param, grad, slots, lr=lr, **adam_hyper)
    return adam(param, grad, slots, lr, **adam_hyper)


def sgdw(param, grad, slots, lr, weight_decay, scale_by_lr=False, rows=None, momentum=0.0, nesterov=False,
         step=None):
    """Decay, then SGD; a sparse step touches only its rows, velocity included (Keras 2's sparse momentum)."""
    param = decay(param, weight_decay * lr if scale_by_lr else weight_decay, rows)
    if rows is not None:
        return on_rows(sgd, rows, param, grad, slots, lr=lr, momentum=momentum, nesterov=nesterov)
    return sgd(param, grad, slots, lr, momentum, nesterov)


# MovingAverage's decay rules, one case each (shared by the reference and the TFA parity tests).
MOVING_AVERAGE_RULES = {
    "fixed": dict(average_decay=0.9),
    "num_updates": dict(average_decay=0.99, num_updates=3),
    "dynamic": dict(average_decay=0.9, dynamic_decay=True),
    "start_step": dict(average_decay=0.8, start_step=2),
    "dynamic_start": dict(average_decay=0.95, dynamic_decay=True, start_step=2),
}


def moving_average_decay(step, average_decay=0.99, num_updates=None, start_step=0, dynamic_decay=False):
    """The decay (float32) of the average update after ``step`` earlier steps (TFA's rules)."""
    f32 = np.float32
    step = f32(step)
    if step < start_step:
        return f32(0.0)
    decay = f32(average_decay)
    if num_updates is not None:
        n = f32(num_updates)
        decay = min(decay, (f32(1.0) + n) / (f32(10.0) + n))
    if dynamic_decay:
        count = step - f32(start_step)
        decay = min(decay, (f32(1.0) + count) / (f32(10.0) + count))
    return f32(decay)


def moving_average(average, param, decay):
    """One update of the average towards the new ``param``: ``a - (a - param) * (1 - decay)``."""
    decay = np.asarray(decay).astype(average.dtype)
    one = np.asarray(1).astype(average.dtype)
    return average - (average - param) * (one - decay)
