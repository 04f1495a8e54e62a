"""Numpy references of the "adamlike" group: LazyAdam, Yogi, AdaBelief, RectifiedAdam, Lion.

Each rule is written from its paper and TensorFlow Addons' (or Keras 3's) documented
behaviour, in float64: ``rule.step(param, grad, rows, slots, t, decayed) -> (param, slots)``
with ``grad`` dense (a sparse gradient densified, repeated rows summed), ``rows`` the
unique rows a sparse step touched (``None`` for a dense step), ``t`` the 1-based step.
Hyperparameters reach a step as Keras 2 keeps them: rounded to float32 (``f32``);
constants kept as Python numbers (Adam-like ``epsilon``, ``initial_accumulator_value``)
are converted straight to the variable's dtype.
"""

import numpy as np

import reference  # tests/reference.py: Keras 2's Adam and the lazy "rows only" rule


def f32(value):
    return float(np.float32(value))


def _only_rows(new, old, rows):
    """``new`` on ``rows``, ``old`` elsewhere (``rows=None``: ``new`` everywhere)."""
    if rows is None:
        return new
    out = old.copy()
    out[rows] = new[rows]
    return out


def warmup_lr(lr, t, total_steps, warmup_proportion, min_lr):
    """TFA's RAdam/AdaBelief schedule: linear rise over ``total * proportion`` steps, linear fall to ``min_lr``."""
    if total_steps <= 0:
        return lr
    warmup = total_steps * warmup_proportion
    decay_steps = max(total_steps - warmup, 1.0)
    if t <= warmup:
        return lr * t / warmup
    return lr + (min_lr - lr) / decay_steps * min(t - warmup, decay_steps)


def sma(beta_2, t):
    """RAdam's length of the approximated SMA: ``(rho_inf, rho_t)``."""
    rho_inf = 2.0 / (1.0 - beta_2) - 1.0
    return rho_inf, rho_inf - 2.0 * t * beta_2**t / (1.0 - beta_2**t)


def rectification(rho_inf, rho_t):
    return np.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))


class LazyAdamRule:
    """Keras 2's Adam on a dense step; a sparse step is Adam on the touched rows only, AMSGrad included."""

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False):
        self.hyper = dict(lr=f32(learning_rate), beta_1=f32(beta_1), beta_2=f32(beta_2), epsilon=epsilon,
                          amsgrad=amsgrad)

    def initial_slots(self, param):
        names = ["m", "v", "vhat"] if self.hyper["amsgrad"] else ["m", "v"]
        return {name: np.zeros_like(param) for name in names}

    def step(self, param, grad, rows, slots, t, decayed=False):
        if rows is None:
            return reference.adam(param, grad, slots, step=t, **self.hyper)
        return reference.on_rows(reference.adam, rows, param, grad, slots, step=t, **self.hyper)


class YogiRule:
    """Zaheer et al. 2018, Algorithm 2 with TFA's bias correction, l1/l2 proximal step and sparse rule."""

    def __init__(self, learning_rate=0.01, beta1=0.9, beta2=0.999, epsilon=1e-3, l1_regularization_strength=0.0,
                 l2_regularization_strength=0.0, initial_accumulator_value=1e-6, activation="sign"):
        self.lr, self.beta1, self.beta2, self.epsilon = f32(learning_rate), f32(beta1), f32(beta2), f32(epsilon)
        self.l1, self.l2 = f32(l1_regularization_strength), f32(l2_regularization_strength)
        self.initial, self.activation = initial_accumulator_value, activation

    def initial_slots(self, param):
        slots = {"v": np.full_like(param, self.initial)}
        if self.beta1 > 0:
            slots["m"] = np.zeros_like(param)
        return slots

    def step(self, param, grad, rows, slots, t, decayed=False):
        m = self.beta1 * slots["m"] + (1 - self.beta1) * grad if "m" in slots else grad
        g2 = grad * grad
        s = np.sign(g2 - slots["v"]) if self.activation == "sign" else np.tanh(10 * (g2 - slots["v"]))
        v = slots["v"] + (1 - self.beta2) * s * g2  # a zero gradient leaves v as it is
        rate = self.lr * np.sqrt(1 - self.beta2**t) / (1 - self.beta1**t) / (np.sqrt(v) + self.epsilon)
        u = param - rate * m
        new = np.sign(u) * np.maximum(np.abs(u) - self.l1 * rate, 0.0) / (1 + self.l2 * rate)
        out = {"v": v}
        if "m" in slots:
            out["m"] = m  # every row's m decays, also in a sparse step
        return _only_rows(new, param, rows), out  # a sparse step moves the touched rows only


class RectifiedRule:
    """RectifiedAdam (Liu et al. 2019) or, with ``belief=True``, AdaBelief (Zhuang et al. 2020), as TFA runs them:
    warm-up schedule, decay ``lr_t * wd * theta`` added to the step, sparse steps that decay every row's moments
    and move the touched rows only."""

    def __init__(self, belief, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=None, weight_decay=0.0,
                 amsgrad=False, rectify=True, sma_threshold=5.0, total_steps=0, warmup_proportion=0.1, min_lr=0.0):
        self.belief, self.amsgrad, self.rectify = belief, amsgrad, rectify
        self.epsilon = epsilon if epsilon is not None else (1e-14 if belief else 1e-7)
        self.lr, self.beta_1, self.beta_2 = f32(learning_rate), f32(beta_1), f32(beta_2)
        self.wd, self.threshold = f32(weight_decay), f32(sma_threshold)
        self.schedule = (total_steps, f32(warmup_proportion), f32(min_lr))

    def initial_slots(self, param):
        names = ["m", "v", "vhat"] if self.amsgrad else ["m", "v"]
        return {name: np.zeros_like(param) for name in names}

    def branch(self, t):
        """Whether step ``t`` takes the rectified (adaptive) step."""
        return self.rectify and sma(self.beta_2, t)[1] >= self.threshold

    def step(self, param, grad, rows, slots, t, decayed=True):
        b1, b2, eps = self.beta_1, self.beta_2, self.epsilon
        m = b1 * slots["m"] + (1 - b1) * grad
        if self.belief:  # s tracks (g - m)^2, plus epsilon on the rows the step touches
            touched = np.ones_like(param) if rows is None else _only_rows(np.ones_like(param), 0 * param, rows)
            v = b2 * slots["v"] + touched * ((1 - b2) * (grad - m) ** 2 + eps)
        else:
            v = b2 * slots["v"] + (1 - b2) * grad**2
        out = {"m": m, "v": v}
        if self.amsgrad:
            out["vhat"] = v = np.maximum(slots["vhat"], v)
        m_hat, v_hat = m / (1 - b1**t), np.sqrt(v / (1 - b2**t))
        if not self.rectify:
            update = m_hat / (v_hat + eps)
        elif self.branch(t):
            update = rectification(*sma(b2, t)) * m_hat / (v_hat + eps)
        else:
            update = m_hat
        if decayed:
            update = update + self.wd * param
        new = param - warmup_lr(self.lr, t, *self.schedule) * update
        return _only_rows(new, param, rows), out


class LionRule:
    """Chen et al. 2023, Algorithm 2 (Keras 3's ``Lion``): decoupled decay ``lr * wd`` (or ``wd``) on every row."""

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.99, weight_decay=None, scale_weight_decay_by_lr=True):
        self.lr, self.beta_1, self.beta_2 = f32(learning_rate), f32(beta_1), f32(beta_2)
        self.wd = 0.0 if weight_decay is None else f32(weight_decay)
        self.scale = scale_weight_decay_by_lr

    def initial_slots(self, param):
        return {"momentum": np.zeros_like(param)}

    def step(self, param, grad, rows, slots, t, decayed=True):
        m = slots["momentum"]
        c = self.beta_1 * m + (1 - self.beta_1) * grad
        if decayed:
            param = param - (self.lr * self.wd if self.scale else self.wd) * param
        return param - self.lr * np.sign(c), {"momentum": self.beta_2 * m + (1 - self.beta_2) * grad}


class AdanRule:
    """Xie et al. 2022, Algorithm 1 in the code's convention (betas near 1), as the authors' implementation:
    the gradient's change weighed by beta_2, the proximal decay (divide by 1 + lr * wd)."""

    def __init__(self, learning_rate=0.001, beta_1=0.98, beta_2=0.92, beta_3=0.99, epsilon=1e-8, weight_decay=None,
                 scale_weight_decay_by_lr=True):
        self.lr, self.betas, self.eps = f32(learning_rate), (f32(beta_1), f32(beta_2), f32(beta_3)), epsilon
        self.wd = 0.0 if weight_decay is None else f32(weight_decay)
        self.scale = scale_weight_decay_by_lr

    def initial_slots(self, param):
        return {name: np.zeros_like(param) for name in ("m", "v", "n", "previous_gradient")}

    def step(self, param, grad, rows, slots, t, decayed=True):
        b1, b2, b3 = self.betas
        diff = grad - slots["previous_gradient"] if t > 1 else np.zeros_like(grad)
        m = b1 * slots["m"] + (1 - b1) * grad
        v = b2 * slots["v"] + (1 - b2) * diff
        n = b3 * slots["n"] + (1 - b3) * (grad + b2 * diff) ** 2
        u = (m / (1 - b1 ** t) + b2 * v / (1 - b2 ** t)) / (np.sqrt(n / (1 - b3 ** t)) + self.eps)
        param = param - self.lr * u
        if decayed and self.wd:
            param = param / (1 + (self.lr * self.wd if self.scale else self.wd))
        return param, {"m": m, "v": v, "n": n, "previous_gradient": grad}


def ademamix_schedules(t, beta_1, beta_3, alpha, alpha_warmup, beta_3_warmup):
    """``(alpha_t, beta_3_t)`` at step ``t`` (1-based): the authors' linear warm-up of alpha and the
    linear warm-up of the slow momentum's half-life, from beta_1's to beta_3's (ml-ademamix)."""
    def half_life(beta):
        return np.log(0.5) / np.log(beta + 1e-8) - 1

    if alpha_warmup is not None and t < alpha_warmup:
        alpha = alpha * t / alpha_warmup
    if beta_3_warmup is not None and t < beta_3_warmup:
        a = t / beta_3_warmup
        beta_3 = 0.5 ** (1 / ((1 - a) * half_life(beta_1) + a * half_life(beta_3) + 1))
    return alpha, beta_3


class AdEMAMixRule:
    """Pagliardini et al. 2024, Algorithm 1: Adam's moments plus a slow momentum (no bias correction),
    decoupled decay lr * wd."""

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, beta_3=0.9999, alpha=5.0, alpha_warmup=None,
                 beta_3_warmup=None, epsilon=1e-8, weight_decay=None, scale_weight_decay_by_lr=True):
        self.lr, self.beta_1, self.beta_2, self.beta_3 = f32(learning_rate), f32(beta_1), f32(beta_2), f32(beta_3)
        self.alpha, self.warmups, self.eps = f32(alpha), (alpha_warmup, beta_3_warmup), epsilon
        self.wd = 0.0 if weight_decay is None else f32(weight_decay)
        self.scale = scale_weight_decay_by_lr

    def initial_slots(self, param):
        return {name: np.zeros_like(param) for name in ("m_1", "m_2", "nu")}

    def step(self, param, grad, rows, slots, t, decayed=True):
        alpha, beta_3 = ademamix_schedules(t, self.beta_1, self.beta_3, self.alpha, *self.warmups)
        m_1 = self.beta_1 * slots["m_1"] + (1 - self.beta_1) * grad
        m_2 = beta_3 * slots["m_2"] + (1 - beta_3) * grad
        nu = self.beta_2 * slots["nu"] + (1 - self.beta_2) * grad ** 2
        u = (m_1 / (1 - self.beta_1 ** t) + alpha * m_2) / (np.sqrt(nu / (1 - self.beta_2 ** t)) + self.eps)
        if decayed:
            param = param - (self.lr * self.wd if self.scale else self.wd) * param
        return param - self.lr * u, {"m_1": m_1, "m_2": m_2, "nu": nu}


class ScheduleFreeRule:
    """Defazio et al. 2024 as optax's schedule_free: z moved by the base step (Adam's without momentum
    when ``adam``, else the gradient) plus lr * wd * y; x the average of the z's weighted by the running
    maximum learning rate to the power p; y = b1 x + (1 - b1) z. The warm-up scales the base step's rate by
    min(t - 1, W) / W and the average's weight by min(t, W) / W (optax's counts)."""

    def __init__(self, adam, learning_rate, warmup_steps=None, beta_1=0.9, beta_2=0.999, epsilon=1e-8,
                 weight_lr_power=2.0, weight_decay=None):
        self.adam, self.lr, self.warmup = adam, f32(learning_rate), warmup_steps
        self.b1, self.b2, self.eps, self.p = f32(beta_1), f32(beta_2), epsilon, f32(weight_lr_power)
        self.wd = 0.0 if weight_decay is None else f32(weight_decay)

    def rate(self, count):
        return self.lr if self.warmup is None else self.lr * min(count, self.warmup) / self.warmup

    def average_rate(self, t):
        """c_t: this step's weight over the sum of the weights so far."""
        weights = np.maximum.accumulate([self.rate(s) for s in range(1, t + 1)]) ** self.p
        return weights[-1] / weights.sum() if weights.sum() else 0.0

    def initial_slots(self, param):
        return {"z": np.array(param, copy=True), **({"nu": np.zeros_like(param)} if self.adam else {})}

    def step(self, param, grad, rows, slots, t, decayed=True):
        out, u = {}, grad
        if self.adam:
            out["nu"] = self.b2 * slots["nu"] + (1 - self.b2) * grad ** 2
            u = grad / (np.sqrt(out["nu"] / (1 - self.b2 ** t)) + self.eps)
        if decayed:
            u = u + self.wd * param
        x = (param - (1 - self.b1) * slots["z"]) / self.b1
        out["z"] = slots["z"] - self.rate(t - 1) * u
        c = self.average_rate(t)
        x = (1 - c) * x + c * out["z"]
        return self.b1 * x + (1 - self.b1) * out["z"], out


def rule_for(cls_name, kwargs):
    """The reference of our class ``cls_name`` built with ``kwargs`` (their constructor arguments)."""
    kwargs = {k: v for k, v in kwargs.items() if k not in ("jit_compile", "exclude_from_weight_decay")}
    if cls_name == "LazyAdam":
        return LazyAdamRule(**kwargs)
    if cls_name == "Yogi":
        return YogiRule(**kwargs)
    if cls_name in ("AdaBelief", "RectifiedAdam"):
        return RectifiedRule(cls_name == "AdaBelief", **kwargs)
    if cls_name in ("Adan", "AdEMAMix"):
        return (AdanRule if cls_name == "Adan" else AdEMAMixRule)(**kwargs)
    return LionRule(**kwargs)
