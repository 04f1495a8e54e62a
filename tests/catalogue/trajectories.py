"""Helpers shared by the optimizer tests: run a trajectory of steps, turn a gradient into the numpy
references' dense float64 one, take a loss-scaled step."""

import numpy as np
import tensorflow as tf

import reference


def trajectory(optimizer, grads, variables, mode="eager", with_weights=False, **apply_kwargs):
    """Copies of ``variables`` (then of ``optimizer.get_weights()`` if ``with_weights``) after each step's gradients."""

    def step(*step_grads):
        optimizer.apply_gradients(list(zip(step_grads, variables)), **apply_kwargs)

    if mode == "function":
        step = tf.function(step)
    out = []
    for step_grads in grads:
        step(*step_grads)
        weights = tuple(np.array(w) for w in optimizer.get_weights()) if with_weights else ()
        out.append(tuple(v.numpy().copy() for v in variables) + weights)
    return out


def numpy_gradient(grad, shape):
    """``(dense float64 gradient, touched rows)`` of a tensor or ``tf.IndexedSlices``; rows are None for a dense one."""
    if isinstance(grad, tf.IndexedSlices):
        indices = grad.indices.numpy()
        return reference.densify(grad.values.numpy().astype(np.float64), indices, shape), np.unique(indices)
    return grad.numpy().astype(np.float64), None


def scaled_step(opt, var, grad, scale_owner):
    """One step of ``opt`` on ``var`` for the loss ``sum(var * grad)``, scaled and unscaled by ``scale_owner``."""
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(var * grad)
        scaled = scale_owner.get_scaled_loss(loss)
    grads = scale_owner.get_unscaled_gradients(tape.gradient(scaled, [var]))
    opt.apply_gradients(zip(grads, [var]))
