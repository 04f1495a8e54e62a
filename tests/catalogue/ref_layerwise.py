"""Numpy references for LAMB, NovoGrad, COCOB, ConditionalGradient and ProximalAdagrad.

Written from the papers and TensorFlow Addons' documented behaviour (the rules
as the docstrings of ``optimizers/rules/<name>.py`` state them), in float64.

A rule is a class with ``initial_slots(param, dtype, name) -> dict`` and
``step(param, grad, rows, slots, iterations, dtype, name) -> (param, slots)``:
``grad`` is dense (a sparse gradient densified, repeated rows summed), ``rows``
the sorted unique touched rows of a sparse step (``None`` for a dense one),
``iterations`` the steps taken before this one, ``name`` the variable's name
(for the exclusion regexes). Hyperparameters reach a step as the library
computes them: float32 values (Keras 2 keeps them in float32 variables) cast to
the variable's dtype (:func:`hyper`); constants kept as Python floats
(``epsilon``, ``alpha``, ``initial_accumulator_value``) are converted straight
to the dtype (:func:`const`).
"""

import re

import numpy as np


def hyper(value, dtype):
    """``value`` as a step sees a hyperparameter: rounded to float32, then to ``dtype``."""
    return float(np.asarray(np.float32(value)).astype(dtype))


def const(value, dtype):
    """``value`` converted straight to ``dtype`` (``tf.constant(value, dtype)``)."""
    return float(np.asarray(value).astype(dtype))


def densify(values, indices, shape):
    dense = np.zeros(shape)
    np.add.at(dense, np.asarray(indices), np.asarray(values, np.float64))
    return dense


def matches(patterns, name):
    return any(re.search(p, name) for p in patterns or ())


def value_at(value, iterations):
    """A hyperparameter at a step: a function of ``iterations`` (a schedule) or a number."""
    return value(iterations) if callable(value) else value


class LAMB:
    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-6, weight_decay=0.0,
                 exclude_from_weight_decay=None, exclude_from_layer_adaptation=None, decayed=None):
        self.lr, self.beta_1, self.beta_2 = learning_rate, beta_1, beta_2
        self.epsilon = epsilon
        self.weight_decay, self.exclude_decay = weight_decay, exclude_from_weight_decay
        self.exclude_adaptation = exclude_from_layer_adaptation or exclude_from_weight_decay  # TFA's fallback
        self.decayed = decayed  # decay_var_list, as names (None: the exclusion list decides)

    def initial_slots(self, param, dtype, name):
        return {"m": np.zeros_like(param), "v": np.zeros_like(param)}

    def step(self, param, grad, rows, slots, iterations, dtype, name):
        # A sparse step is the dense step on the densified gradient: ``rows`` does not matter.
        t = iterations + 1
        lr, b1, b2 = (hyper(value_at(x, iterations), dtype) for x in (self.lr, self.beta_1, self.beta_2))
        m = b1 * slots["m"] + (1 - b1) * grad
        v = b2 * slots["v"] + (1 - b2) * grad * grad
        update = (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + const(self.epsilon, dtype))
        decayed = name in self.decayed if self.decayed is not None else not matches(self.exclude_decay, name)
        if decayed:
            update = update + hyper(value_at(self.weight_decay, iterations), dtype) * param
        ratio = 1.0
        if not matches(self.exclude_adaptation, name):
            w_norm, u_norm = np.linalg.norm(param), np.linalg.norm(update)
            ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
        return param - lr * ratio * update, {"m": m, "v": v}


class NovoGrad:
    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, weight_decay=0.0,
                 grad_averaging=False, amsgrad=False, exclude_from_weight_decay=None):
        self.lr, self.beta_1, self.beta_2, self.epsilon = learning_rate, beta_1, beta_2, epsilon or 1e-7
        self.weight_decay, self.exclude_decay = weight_decay, exclude_from_weight_decay
        self.grad_averaging, self.amsgrad = grad_averaging, amsgrad

    def initial_slots(self, param, dtype, name):
        slots = {"m": np.zeros_like(param), "v": np.zeros(())}
        if self.amsgrad:
            slots["vhat"] = np.zeros_like(param)  # TFA's shape: one number, repeated
        return slots

    def step(self, param, grad, rows, slots, iterations, dtype, name):
        lr, b1, b2 = (hyper(value_at(x, iterations), dtype) for x in (self.lr, self.beta_1, self.beta_2))
        wd = hyper(value_at(self.weight_decay, iterations), dtype)
        g2 = np.sum(grad * grad)  # untouched rows of a sparse step add nothing
        v = g2 if iterations == 0 else b2 * slots["v"] + (1 - b2) * g2
        new = {"v": v}
        norm = np.full(param.shape, v)
        if self.amsgrad:
            new["vhat"] = norm = np.maximum(slots["vhat"], v)
        d = grad / (np.sqrt(norm) + const(self.epsilon, dtype))
        if wd > 0 and not matches(self.exclude_decay, name):
            d = d + wd * param
        if self.grad_averaging and iterations > 0:
            d = d * (1 - b1)
        m = b1 * slots["m"] - lr * d
        if rows is None:
            return param + m, dict(new, m=m)
        param, new["m"] = param.copy(), slots["m"].copy()  # a sparse step: the touched rows only
        param[rows] += m[rows]
        new["m"][rows] = m[rows]
        return param, new


COCOB_SLOTS = ("lr", "grad_norm_sum", "gradients_sum", "tilde_w", "reward")


class COCOB:
    def __init__(self, alpha=100.0):
        self.alpha = alpha

    def initial_slots(self, param, dtype, name):
        slots = {s: np.zeros_like(param) for s in COCOB_SLOTS}
        slots["lr"] = np.full(param.shape, const(1e-8, dtype))
        return slots

    def _rule(self, w, g, s, alpha):
        L = np.maximum(s["lr"], np.abs(g))
        G = s["grad_norm_sum"] + np.abs(g)
        S = s["gradients_sum"] + g
        R = np.maximum(s["reward"] - g * s["tilde_w"], 0.0)
        offset = -S / (L * np.maximum(G + L, alpha * L)) * (R + L)  # theta - theta_1
        return w - s["tilde_w"] + offset, dict(lr=L, grad_norm_sum=G, gradients_sum=S, tilde_w=offset, reward=R)

    def step(self, param, grad, rows, slots, iterations, dtype, name):
        alpha = const(self.alpha, dtype)
        if rows is None:
            return self._rule(param, grad, slots, alpha)
        new_rows, new_slot_rows = self._rule(param[rows], grad[rows], {k: s[rows] for k, s in slots.items()}, alpha)
        param, new = param.copy(), {k: s.copy() for k, s in slots.items()}
        param[rows] = new_rows
        for k, value in new_slot_rows.items():
            new[k][rows] = value
        return param, new


def top_singular_direction(x):
    """u1 v1^T of ``x`` as a matrix: a vector is one row, rank > 2 has its last axis as columns."""
    matrix = x.reshape(1, -1) if x.ndim < 2 else x.reshape(-1, x.shape[-1])
    u, _, vt = np.linalg.svd(matrix, full_matrices=False)
    return np.outer(u[:, 0], vt[0]).reshape(x.shape)


class ConditionalGradient:
    def __init__(self, learning_rate, lambda_=0.01, epsilon=1e-7, ord="fro", decay=0.0):
        self.lr, self.lambda_, self.epsilon, self.ord, self.decay = learning_rate, lambda_, epsilon or 1e-7, ord, decay

    def initial_slots(self, param, dtype, name):
        return {}

    def step(self, param, grad, rows, slots, iterations, dtype, name):
        lr = hyper(value_at(self.lr, iterations), dtype)
        if self.decay:
            lr = lr / (1 + hyper(self.decay, dtype) * iterations)  # Keras 2's legacy inverse-time decay
        lam = hyper(value_at(self.lambda_, iterations), dtype)
        x = grad if rows is None else grad[rows]  # a sparse step: s from the touched rows alone
        if self.ord == "fro":
            s = x / (np.sqrt(np.sum(x * x)) + const(self.epsilon, dtype))
        else:
            s = top_singular_direction(x)
        if rows is None:
            return lr * param - (1 - lr) * lam * s, {}
        param = param.copy()
        param[rows] = lr * param[rows] - (1 - lr) * lam * s
        return param, {}


class ProximalAdagrad:
    def __init__(self, learning_rate=0.001, initial_accumulator_value=0.1, l1_regularization_strength=0.0,
                 l2_regularization_strength=0.0):
        self.lr, self.initial = learning_rate, initial_accumulator_value
        self.l1, self.l2 = l1_regularization_strength, l2_regularization_strength

    def initial_slots(self, param, dtype, name):
        return {"accumulator": np.full(param.shape, const(self.initial, dtype))}

    def step(self, param, grad, rows, slots, iterations, dtype, name):
        lr, l1, l2 = (hyper(value_at(x, iterations), dtype) for x in (self.lr, self.l1, self.l2))
        rows = slice(None) if rows is None else rows  # a sparse step: the touched rows only
        acc = slots["accumulator"].copy()
        acc[rows] += grad[rows] ** 2
        gamma = lr / np.sqrt(acc[rows])
        prox = param[rows] - gamma * grad[rows]
        if l1 > 0:
            prox = np.sign(prox) * np.maximum(np.abs(prox) - gamma * l1, 0.0)
        param = param.copy()
        param[rows] = prox / (1 + gamma * l2)
        return param, {"accumulator": acc}


def run(rule, params, grads_per_step, dtypes):
    """``params``: ``{name: initial array}``; ``grads_per_step``: a list of ``{name: dense array or
    (values, indices)}``; returns ``[{name: param}]`` after each step (float64)."""
    params = {k: np.asarray(v, np.float64) for k, v in params.items()}
    slots = {k: rule.initial_slots(p, dtypes[k], k) for k, p in params.items()}
    out = []
    for iterations, grads in enumerate(grads_per_step):
        for name, grad in grads.items():
            rows = None
            if isinstance(grad, tuple):
                values, indices = grad
                grad, rows = densify(values, indices, params[name].shape), np.unique(indices)
            params[name], slots[name] = rule.step(params[name], np.asarray(grad, np.float64), rows, slots[name],
                                                  iterations, dtypes[name], name)
        out.append({k: p.copy() for k, p in params.items()})
    return out


class Muon:
    """Keras 3's ``Muon``: for a matrix that is not an embedding, the decay ``lr * wd``, the
    momentum ``m = mu m + g``, the quintic Newton-Schulz iteration of ``g + mu m`` (of ``m`` without
    Nesterov) scaled by ``rms_rate * sqrt(max(n, k))``; for every other variable, the decay
    ``lr * adam_weight_decay`` and Adam's step at ``lr * adam_lr_ratio``."""

    def __init__(self, learning_rate=0.001, adam_beta_1=0.9, adam_beta_2=0.999, adam_weight_decay=0.004,
                 epsilon=1e-7, weight_decay=0.004, exclude_embeddings=True, muon_a=3.4445, muon_b=-4.7750,
                 muon_c=2.0315, adam_lr_ratio=1, momentum=0.95, ns_steps=5, nesterov=True, rms_rate=0.2):
        self.__dict__.update({k: v for k, v in locals().items() if k != "self"})

    def _matrix(self, param, name):
        return param.ndim == 2 and not (self.exclude_embeddings and "embedding" in name.lower())

    def initial_slots(self, param, dtype, name):
        slots = {"momentum": np.zeros_like(param)}
        if not self._matrix(param, name):
            slots["velocity"] = np.zeros_like(param)
        return slots

    def orthogonalize(self, x):
        tall = x.shape[0] > x.shape[1]
        x = x.T if tall else x
        x = x / (np.linalg.norm(x) + 1e-7)
        for _ in range(self.ns_steps):
            gram = x @ x.T
            x = self.muon_a * x + (self.muon_b * gram + self.muon_c * gram @ gram) @ x
        return x.T if tall else x

    def step(self, param, grad, rows, slots, iterations, dtype, name):
        lr, t = hyper(self.learning_rate, dtype), iterations + 1
        if not self._matrix(param, name):
            b1, b2 = hyper(self.adam_beta_1, dtype), hyper(self.adam_beta_2, dtype)
            param = param - lr * hyper(self.adam_weight_decay, dtype) * param
            m = slots["momentum"] + (grad - slots["momentum"]) * (1 - b1)
            v = slots["velocity"] + (grad ** 2 - slots["velocity"]) * (1 - b2)
            alpha = lr * hyper(self.adam_lr_ratio, dtype) * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
            return param - m * alpha / (np.sqrt(v) + const(self.epsilon, dtype)), {"momentum": m, "velocity": v}
        mu = hyper(self.momentum, dtype)
        param = param - lr * hyper(self.weight_decay, dtype) * param
        m = mu * slots["momentum"] + grad
        update = self.orthogonalize(grad + mu * m if self.nesterov else m)
        scale = 1.0 if self.rms_rate is None else self.rms_rate * max(param.shape) ** 0.5
        return param - lr * scale * update, {"momentum": m}
