"""Run optax on fixed gradients, in the optax environment (``.venv-optax``: jax and optax, no
TensorFlow), for tests/catalogue/test_optax.py.

Reads one JSON request on stdin, ``{"optimizer": name, "kwargs": {...}, "dtype": "float32" or
"float64", "params": [...], "grads": [[...], ...]}``, and writes the parameters after each step as
JSON (and, for schedule-free, the evaluation point after each step). ``optimizer`` names a
function below, which builds the optax transformation.

A request with ``"problem": {"x": [...], "y": [...]}`` and ``"steps"`` instead of ``"grads"`` (SAM,
whose gradients depend on where they are taken) has its gradients computed here, of the least-squares
loss ``mean((x @ w + b - y) ** 2)`` at the parameters ``[w, b]``, at each call of the transformation.
"""

import json
import math
import sys

import jax

jax.config.update("jax_enable_x64", True)  # float64 requests stay float64; float32 ones are cast below

import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402


def adan(learning_rate, beta_1, beta_2, beta_3, epsilon):
    return optax.adan(learning_rate, b1=beta_1, b2=beta_2, b3=beta_3, eps=epsilon, eps_root=0.0)


def ademamix(learning_rate, beta_1, beta_2, beta_3, alpha, alpha_warmup, beta_3_warmup, epsilon, weight_decay,
             dtype):
    """optax's AdEMAMix with the authors' warm-ups (ml-ademamix's schedulers), evaluated at the 1-based
    step; optax calls them with the 0-based count."""
    def half_life(beta):
        return math.log(0.5) / jnp.log(jnp.asarray(beta, dtype) + 1e-8) - 1

    def alpha_at(count):
        t = (count + 1).astype(dtype)
        return jnp.where(t < alpha_warmup, alpha * t / alpha_warmup, alpha)

    def beta_3_at(count):
        a = (count + 1).astype(dtype) / beta_3_warmup
        warm = jnp.power(jnp.asarray(0.5, dtype), 1 / ((1 - a) * half_life(beta_1) + a * half_life(beta_3) + 1))
        return jnp.where(count + 1 < beta_3_warmup, warm, beta_3)

    return optax.contrib.ademamix(learning_rate, b1=beta_1, b2=beta_2, b3=beta_3_at, alpha=alpha_at, eps=epsilon,
                                  eps_root=0.0, weight_decay=weight_decay)


def schedule_free_adamw(learning_rate, warmup_steps, beta_1, beta_2, epsilon, weight_decay, weight_lr_power,
                        dtype):
    return optax.contrib.schedule_free_adamw(learning_rate, warmup_steps=warmup_steps, b1=beta_1, b2=beta_2,
                                             eps=epsilon, weight_decay=weight_decay,
                                             weight_lr_power=weight_lr_power, state_dtype=dtype)


def schedule_free_sgd(learning_rate, warmup_steps, beta_1, weight_decay, weight_lr_power, dtype):
    return optax.contrib.schedule_free_sgd(learning_rate, warmup_steps=warmup_steps, b1=beta_1,
                                           weight_decay=weight_decay, weight_lr_power=weight_lr_power,
                                           state_dtype=dtype)


def sam(learning_rate, momentum, rho, sync_period, opaque_mode):
    """optax.contrib.sam around SGD with momentum; its adversarial step a normalized SGD step of size rho."""
    adversarial = optax.chain(optax.contrib.normalize(), optax.sgd(rho))
    return optax.contrib.sam(optax.sgd(learning_rate, momentum=momentum), adversarial, sync_period=sync_period,
                             opaque_mode=opaque_mode)


def sam_trajectory(request, dtype):
    """The parameters after each call of ``sam``'s update, the gradient taken at the current parameters."""
    x, y = (jnp.asarray(request["problem"][k], dtype) for k in ("x", "y"))

    def loss(params, _batch=None):
        w, b = params
        return jnp.mean((x @ w + b - y) ** 2)

    grad_fn = jax.grad(loss)
    transform = sam(**request["kwargs"])
    params = [jnp.asarray(p, dtype) for p in request["params"]]
    state = transform.init(params)
    out = []
    for _ in range(request["steps"]):
        updates, state = transform.update(grad_fn(params), state, params, grad_fn=grad_fn)
        params = optax.apply_updates(params, updates)
        out.append([p.tolist() for p in params])
    return out


def main():
    request = json.load(sys.stdin)
    if "problem" in request:
        trajectory = sam_trajectory(request, jnp.dtype(request["dtype"]))
        json.dump({"trajectory": trajectory, "optax": optax.__version__, "jax": jax.__version__}, sys.stdout)
        return
    dtype = jnp.dtype(request["dtype"])
    kwargs = dict(request["kwargs"])
    schedule_free = request["optimizer"].startswith("schedule_free")
    if request["optimizer"] == "ademamix" or schedule_free:
        kwargs["dtype"] = dtype
    transform = globals()[request["optimizer"]](**kwargs)
    params = jnp.asarray(request["params"], dtype)
    state = transform.init(params)
    step = jax.jit(transform.update)
    out, evaluation = [], []
    for grad in request["grads"]:
        updates, state = step(jnp.asarray(grad, dtype), state, params)
        params = optax.apply_updates(params, updates)
        out.append(params.tolist())
        if schedule_free:  # the point schedule-free evaluates at
            evaluation.append(optax.contrib.schedule_free_eval_params(state, params).tolist())
    json.dump({"trajectory": out, "evaluation": evaluation, "optax": optax.__version__, "jax": jax.__version__},
              sys.stdout)


if __name__ == "__main__":
    main()
