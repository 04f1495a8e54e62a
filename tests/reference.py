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


# ---------------------------------------------------------------------------------------------
# Whole-optimizer references for the conformance suite (tests/integration/test_conformance.py).
#
# A rule below is one variable's update, ``step(param, grad, rows, slots, iterations, dtype)
# -> (param, slots)`` computed in float64: ``grad`` is dense (a sparse gradient densified,
# repeated rows summed) and ``rows`` holds the unique touched rows of a sparse step (``None``
# for a dense one). Hyperparameters reach the step as the library computes them: a float32
# value (Keras 2 keeps them in float32 variables; Python floats become float32 tensors) cast to
# the variable's dtype, which :func:`as_hyper` reproduces. :class:`Optimizer` composes rules
# the way the library does: a host rule, ``updaters`` routed by regex on the variable's name,
# and an optional moving average around the whole step.


def as_hyper(value, dtype):
    """``value`` as a step sees it: rounded to float32, then to the variable's ``dtype``."""
    return float(np.asarray(np.float32(value)).astype(dtype))


def in_dtype(value, dtype):
    """``value`` converted straight to ``dtype`` (Adam's ``epsilon``: ``tf.constant(eps, dtype)``)."""
    return float(np.asarray(value).astype(dtype))


class ExponentialDecay:
    """Keras's ``ExponentialDecay`` as the library evaluates it: at ``iterations`` (steps taken
    before this one), in float32. Keep ``decay_rate ** exponent`` exact in float32 (for example
    ``decay_rate=0.5`` with ``staircase=True``) for float64 comparisons at 1e-12."""

    def __init__(self, initial_learning_rate, decay_steps, decay_rate, staircase=False):
        self.initial, self.decay_steps, self.rate, self.staircase = (
            initial_learning_rate, decay_steps, decay_rate, staircase)

    def __call__(self, iterations):
        f32 = np.float32
        p = f32(iterations) / f32(self.decay_steps)
        if self.staircase:
            p = np.floor(p)
        return f32(f32(self.initial) * np.power(f32(self.rate), f32(p)))


def _value_at(value, iterations):
    return value(iterations) if callable(value) else value


def decay_factor(weight_decay, lr, scale_by_lr):
    """The decoupled weight decay's factor: ``weight_decay`` or ``lr * weight_decay``."""
    return weight_decay * lr if scale_by_lr else weight_decay


class SGDRule:
    """Keras 2's SGD (momentum, Nesterov), optionally with decoupled weight decay (SGDW). No slot
    with ``momentum=0``; a sparse step touches only its rows, velocity and decay included."""

    def __init__(self, learning_rate, momentum=0.0, nesterov=False, weight_decay=None, scale_by_lr=False,
                 name="SGD"):
        self.lr, self.momentum, self.nesterov = learning_rate, momentum, nesterov
        self.weight_decay, self.scale_by_lr, self.name = weight_decay, scale_by_lr, name

    def initial_slots(self, param, dtype):
        return {"momentum": np.zeros_like(param)} if self.momentum > 0 else {}

    def step(self, param, grad, rows, slots, iterations, dtype):
        lr = as_hyper(_value_at(self.lr, iterations), dtype)
        if self.weight_decay is not None:
            wd = as_hyper(self.weight_decay, dtype)
            param = decay(param, decay_factor(wd, lr, self.scale_by_lr), rows)
        if not self.momentum > 0:
            return param - lr * grad, {}  # untouched rows have a zero gradient: rows only, as promised
        hyper = dict(lr=lr, momentum=as_hyper(self.momentum, dtype), nesterov=self.nesterov)
        if rows is not None:
            return on_rows(sgd, rows, param, grad, slots, **hyper)
        return sgd(param, grad, slots, **hyper)


class AdamRule:
    """Keras 2's Adam (AMSGrad, TFA's lazy sparse rule), optionally with decoupled weight decay (AdamW)."""

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False, lazy=False,
                 weight_decay=None, scale_by_lr=False, name="Adam"):
        self.lr, self.beta_1, self.beta_2, self.epsilon = learning_rate, beta_1, beta_2, epsilon
        self.amsgrad, self.lazy, self.name = amsgrad, lazy, name
        self.weight_decay, self.scale_by_lr = weight_decay, scale_by_lr

    def initial_slots(self, param, dtype):
        names = ["m", "v", "vhat"] if self.amsgrad else ["m", "v"]
        return {name: np.zeros_like(param) for name in names}

    def step(self, param, grad, rows, slots, iterations, dtype):
        lr = as_hyper(_value_at(self.lr, iterations), dtype)
        if self.weight_decay is not None:
            wd = as_hyper(self.weight_decay, dtype)
            param = decay(param, decay_factor(wd, lr, self.scale_by_lr), rows)
        hyper = dict(lr=lr, beta_1=as_hyper(self.beta_1, dtype), beta_2=as_hyper(self.beta_2, dtype),
                     epsilon=in_dtype(self.epsilon, dtype), amsgrad=self.amsgrad, step=iterations + 1)
        if self.lazy and rows is not None:
            return on_rows(adam, rows, param, grad, slots, **hyper)
        return adam(param, grad, slots, **hyper)


def rowwise_adagrad(param, grad, slots, lr, initial_accumulator_value=0.1, epsilon=1e-7):
    """One accumulator per row: ``a_i += mean(g_i ** 2)``, ``w_i -= lr g_i / (sqrt(a_i) + eps)``.
    A row with a zero gradient keeps its accumulator and weights, so a sparse step is this rule
    on the densified gradient."""
    rows = param.shape[0]
    acc = slots.get("accumulator", np.full((rows, 1), initial_accumulator_value))
    g2 = grad.reshape(rows, -1)
    acc = acc + np.mean(g2 * g2, axis=1, keepdims=True)
    return param - (lr * g2 / (np.sqrt(acc) + epsilon)).reshape(param.shape), {"accumulator": acc}


class RowwiseAdagradRule:
    def __init__(self, learning_rate=0.01, initial_accumulator_value=0.1, epsilon=1e-7, name="RowwiseAdagrad"):
        self.lr, self.initial, self.epsilon, self.name = learning_rate, initial_accumulator_value, epsilon, name

    def initial_slots(self, param, dtype):
        return {"accumulator": np.full((param.shape[0], 1), as_hyper(self.initial, dtype))}

    def step(self, param, grad, rows, slots, iterations, dtype):
        return rowwise_adagrad(param, grad, slots, lr=as_hyper(_value_at(self.lr, iterations), dtype),
                               epsilon=as_hyper(self.epsilon, dtype))


def overwrite(param, grad, rows=None):
    """The variable takes its gradient's value; a sparse step only on its (summed) rows."""
    if rows is None:
        return grad.copy()
    param = param.copy()
    rows = np.unique(rows)
    param[rows] = grad[rows]
    return param


class OverwriteRule:
    name = "OverwriteWithGradient"

    def initial_slots(self, param, dtype):
        return {}

    def step(self, param, grad, rows, slots, iterations, dtype):
        return overwrite(param, grad, rows), {}


class FrozenRule:
    name = "Frozen"

    def initial_slots(self, param, dtype):
        return {}

    def step(self, param, grad, rows, slots, iterations, dtype):
        return param, {}


# Wrappers around a whole step, as :class:`Optimizer` runs them: ``initial_slots(param)`` for each
# variable the wrapper wraps (those that follow the host's rule), ``before(first, last, grad, slots)``
# (optional: the gradient the inner step receives, ``None`` for no inner step), ``after(iterations,
# param, slots, dtype) -> (param, slots)`` after each inner step (``iterations``: inner steps before it).


class MovingAverage:
    """``MovingAverage``: an ``average`` of each wrapped variable (:func:`moving_average_decay` rules)."""

    def __init__(self, **decay):
        self.decay = decay

    def initial_slots(self, param):
        return {"average": param.copy()}

    def after(self, iterations, param, slots, dtype):
        d = float(np.float32(moving_average_decay(iterations, **self.decay)).astype(dtype))
        return param, {"average": slots["average"] - (slots["average"] - param) * (1 - d)}


class Lookahead:
    """Zhang et al. 2019: slow weights ``slow``; after every ``sync_period``-th step they move by
    ``slow_step_size`` towards the fast weights, which take their value."""

    def __init__(self, sync_period=6, slow_step_size=0.5):
        self.k, self.alpha = sync_period, slow_step_size

    def initial_slots(self, param):
        return {"slow": param.copy()}

    def after(self, iterations, param, slots, dtype):
        if (iterations + 1) % self.k:
            return param, slots
        slow = slots["slow"] + as_hyper(self.alpha, dtype) * (param - slots["slow"])
        return slow.copy(), {"slow": slow}


class SWA:
    """Izmailov et al. 2018: ``average`` is the mean of the weights after steps ``s, s + c, ...``
    (``s`` = ``start_averaging``, ``c`` = ``average_period``; the initial weights until then)."""

    def __init__(self, start_averaging=0, average_period=10):
        self.start, self.period = start_averaging, average_period

    def initial_slots(self, param):
        return {"average": param.copy()}

    def after(self, iterations, param, slots, dtype):
        since = iterations - self.start
        if since < 0 or since % self.period:
            return param, slots
        n = since // self.period
        return param, {"average": (slots["average"] * n + param) / (n + 1)}


class GradientAccumulation:
    """The inner step every ``steps``-th call, with the mean of the calls' (densified) gradients; the
    accumulator (``gradient_accumulator``) holds the current window's sum."""

    def __init__(self, steps):
        self.steps = steps

    def initial_slots(self, param):
        return {"gradient_accumulator": np.zeros_like(param)}

    def before(self, call, grad, slots):
        total = grad if call % self.steps == 0 else slots["gradient_accumulator"] + grad
        slots = {"gradient_accumulator": total}
        return (total / self.steps if (call + 1) % self.steps == 0 else None), slots

    def after(self, iterations, param, slots, dtype):
        return param, slots


# Rules of tests/catalogue/ in this module's protocol.
class AdamLike:
    """A rule of ``tests/catalogue/ref_adamlike.py`` (``initial_slots(param)``, ``step(..., t, decayed)``
    with the 1-based step ``t``), every variable decayed."""

    def __init__(self, rule, name):
        self.rule, self.name = rule, name

    def initial_slots(self, param, dtype):
        return self.rule.initial_slots(param)

    def step(self, param, grad, rows, slots, iterations, dtype):
        return self.rule.step(param, grad, rows, slots, iterations + 1, True)


class Layerwise:
    """A rule of ``tests/catalogue/ref_layerwise.py``, which also takes the variable's name (its
    exclusion patterns): :class:`Optimizer` binds it per variable with :meth:`for_variable`."""

    def __init__(self, rule, name, variable=None):
        self.rule, self.name, self.variable = rule, name, variable

    def for_variable(self, variable):
        return Layerwise(self.rule, self.name, variable)

    def initial_slots(self, param, dtype):
        return self.rule.initial_slots(param, dtype, self.variable)

    def step(self, param, grad, rows, slots, iterations, dtype):
        return self.rule.step(param, grad, rows, slots, iterations, dtype, self.variable)


class Optimizer:
    """A whole optimizer: the host ``rule``; ``updaters`` ``{regex: rule}`` searched in variable
    names (those variables follow that rule instead, with its slots named ``"<rule.name>/<slot>"``,
    no decay, no wrapper); ``wrapper``: one of the wrappers above around the whole step, or ``None``.

    :meth:`run` gives, after each call, ``{(name,): param, (name, owner, slot): value, "iterations":
    inner steps taken}`` where ``owner`` is ``"optimizer"`` (the host, or the wrapped optimizer) or
    ``"wrapper"``.
    """

    def __init__(self, rule, updaters=None, wrapper=None):
        self.rule, self.updaters, self.wrapper = rule, dict(updaters or {}), wrapper

    def rule_for(self, name):
        import re

        matches = [rule for pattern, rule in self.updaters.items() if re.search(pattern, name)]
        rule, prefix = (matches[0], matches[0].name + "/") if matches else (self.rule, "")
        return (rule.for_variable(name) if hasattr(rule, "for_variable") else rule), prefix

    def run(self, params, grads_per_step):
        """``params``: ``{name: initial value}`` (its dtype is the variable's); ``grads_per_step``:
        a list of ``{name: dense array or (values, indices)}``."""
        dtypes = {name: np.asarray(value).dtype for name, value in params.items()}
        params = {name: np.asarray(value, np.float64) for name, value in params.items()}
        rules = {name: self.rule_for(name) for name in params}
        slots = {name: rules[name][0].initial_slots(p, dtypes[name]) for name, p in params.items()}
        wrapped = {name: self.wrapper.initial_slots(p) for name, p in params.items()
                   if self.wrapper is not None and not rules[name][1]}
        iterations, out = 0, []
        for call, grads in enumerate(grads_per_step):
            inner = {}
            for name, grad in grads.items():
                rows = None
                if isinstance(grad, tuple):
                    values, rows = grad
                    grad = densify(np.asarray(values, np.float64), rows, params[name].shape)
                    rows = np.unique(rows)
                if name in wrapped and hasattr(self.wrapper, "before"):
                    grad, wrapped[name] = self.wrapper.before(call, np.asarray(grad, np.float64), wrapped[name])
                    rows = None  # the inner step receives a dense mean
                if grad is not None:
                    inner[name] = (np.asarray(grad, np.float64), rows)
            for name, (grad, rows) in inner.items():
                params[name], new_slots = rules[name][0].step(params[name], grad, rows, slots[name], iterations,
                                                              dtypes[name])
                slots[name] = {k: new_slots[k] for k in slots[name]}  # the slots the variable has
            if inner:
                for name in wrapped:
                    params[name], wrapped[name] = self.wrapper.after(iterations, params[name], wrapped[name],
                                                                     dtypes[name])
                iterations += 1
            state = {"iterations": iterations}
            for name in params:
                state[(name,)] = params[name].copy()
                for slot, value in slots[name].items():
                    state[(name, "optimizer", rules[name][1] + slot)] = value.copy()
                for slot, value in wrapped.get(name, {}).items():
                    state[(name, "wrapper", slot)] = value.copy()
            out.append(state)
        return out
