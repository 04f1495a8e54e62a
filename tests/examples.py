"""SGD (momentum, Nesterov) and Adam (AMSGrad) written on the template.

They are the proof that the template is enough: each equals tf_keras's
built-in legacy optimizer step by step (tests/test_template.py).
"""

import tensorflow as tf

import optimizers


class SGD(optimizers.CustomOptimizerV2):
    r"""SGD with momentum: :math:`v \leftarrow \mu v - \eta g`; :math:`\theta \leftarrow \theta + v`
    (Nesterov: :math:`\theta \leftarrow \theta + \mu v - \eta g`)."""

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, name="SGD", **kwargs):
        super().__init__(name, **kwargs)
        self.add_hyperparameter("learning_rate", learning_rate, low=0.0)
        self.add_hyperparameter("momentum", momentum, low=0.0, high=1.0)
        self.nesterov = bool(nesterov)

    def slot_specs(self):
        return ["momentum"]

    def update_dense(self, grad, var, slots, coefficients):
        lr, mu = coefficients["learning_rate"], coefficients["momentum"]
        velocity = slots["momentum"]
        new_velocity = mu * velocity - lr * grad
        velocity.assign(new_velocity)
        step = mu * new_velocity - lr * grad if self.nesterov else new_velocity
        return var.assign_add(step)


class Adam(optimizers.CustomOptimizerV2):
    r"""Adam (Kingma & Ba, arXiv:1412.6980), epsilon outside the square root:

    .. math::
        m \leftarrow m + (1-\beta_1)(g - m),\quad v \leftarrow v + (1-\beta_2)(g^2 - v),\quad
        \theta \leftarrow \theta - \eta \frac{\sqrt{1-\beta_2^t}}{1-\beta_1^t} \frac{m}{\sqrt{v}+\epsilon}

    AMSGrad uses :math:`\hat v = \max(\hat v, v)` in place of :math:`v`.
    """

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, amsgrad=False,
                 name="Adam", **kwargs):
        super().__init__(name, **kwargs)
        self.add_hyperparameter("learning_rate", learning_rate, low=0.0)
        self.add_hyperparameter("beta_1", beta_1, low=0.0, high=1.0, high_inclusive=False)
        self.add_hyperparameter("beta_2", beta_2, low=0.0, high=1.0, high_inclusive=False)
        optimizers.template.check_number("epsilon", epsilon, low=0.0)
        self.epsilon = epsilon  # a Python float, cast per dtype like tf_keras's Adam
        self.amsgrad = bool(amsgrad)

    def slot_specs(self):
        return ["m", "v", "vhat"] if self.amsgrad else ["m", "v"]

    def prepare(self, dtype, coefficients):
        step = coefficients["step"]
        coefficients["alpha"] = coefficients["learning_rate"] * (
            tf.sqrt(1 - tf.pow(coefficients["beta_2"], step)) / (1 - tf.pow(coefficients["beta_1"], step)))
        coefficients["epsilon"] = tf.constant(self.epsilon, dtype)

    def update_dense(self, grad, var, slots, coefficients):
        m, v = slots["m"], slots["v"]
        # Compute every new value first, then assign: one fused pass under XLA.
        new_m = m + (grad - m) * (1 - coefficients["beta_1"])
        new_v = v + (tf.square(grad) - v) * (1 - coefficients["beta_2"])
        denominator = new_v
        if self.amsgrad:
            denominator = tf.maximum(slots["vhat"], new_v)
            slots["vhat"].assign(denominator)
        m.assign(new_m)
        v.assign(new_v)
        return var.assign_sub(coefficients["alpha"] * new_m / (tf.sqrt(denominator) + coefficients["epsilon"]))
