"""The one table of optimizers the integration suite runs over (optax's
``_OPTIMIZERS_UNDER_TEST``): adding an optimizer is one entry here.

Each entry builds a fresh optimizer (``make(jit_compile=...)``: the library's
own XLA switch, passed to every rule and wrapper it builds) and says what it
should compute: ``reference()`` builds the numpy model of the same optimizer
(``tests/reference.py``) that ``test_conformance.py`` follows step by step.
``test_conformance.py`` also fails when a public class of ``optimizers`` has no
entry here. Also here: the tiny model and data every test trains (an embedding,
so sparse gradients take part, then a dense layer), and a custom training step,
shared by the tests and the worker scripts.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np
import tensorflow as tf
from catalogue import ref_adamlike as adamlike
from catalogue import ref_layerwise as layerwise
from catalogue.ref_adafactor import AdafactorRule

import optimizers
from optimizers import SGD, Adam, keras

import reference as ref


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    make: Callable[..., Any]  # make(jit_compile=True) -> a fresh optimizer
    reference: Callable[[], ref.Optimizer]  # the same optimizer in numpy (tests/reference.py)
    has_updaters: bool = False
    statistic: bool = False  # the model has an amax statistic (see Amax), which the optimizer overwrites
    # False: a built-in Keras optimizer inside has no XLA kernel for sparse updates (Keras's
    # ResourceSparseApplyKerasMomentum); test_conformance.py checks that it fails alone too.
    sparse_xla: bool = True
    calls_per_step: int = 1  # apply_gradients calls per step taken (GradientAccumulation's N)
    # Routes weights by their full names (MultiOptimizer's pairs), which a SavedModel loaded in a strategy's
    # scope does not keep ("kernel:0"): such a step is refused with a clear error.
    routes_by_full_name: bool = False

    def steps(self, calls: int) -> int:
        """``iterations`` after ``calls`` calls of ``apply_gradients``."""
        return calls // self.calls_per_step


def weight_names(base: str) -> list[str]:
    """The names a variable ``base`` (``"dense/bias"``) has in the tests: in the model, and in the
    conformance problem (``test_conformance.py``: ``"<dtype>_<dense or sparse>/<base>"``), so that
    name-based specs (``MultiOptimizer``'s) route both."""
    prefixes = [""] + [f"{dtype}_{kind}/" for dtype in ("float16", "float32", "float64") for kind in ("dense", "sparse")]
    return [f"{prefix}{base}:0" for prefix in prefixes]


def _exponential_decay():
    # lr = 0.1 * 0.5 ** floor(iterations / 2): changes within the conformance test's steps, and every
    # value is exact in float32 (so the float64 reference matches at 1e-12).
    return keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=2, decay_rate=0.5, staircase=True)


@keras.utils.register_keras_serializable(package="third_party")
class HeavyBall(keras.optimizers.legacy.Optimizer):
    """A third-party optimizer, written as outside code writes one (TF Model Garden's LAMB, for one):
    a plain ``OptimizerV2`` subclass on Keras's own hooks and slot API, nothing of this library.
    Keras 2's SGD with momentum, its sparse step on the touched rows only."""

    def __init__(self, learning_rate=0.01, momentum=0.9, name="HeavyBall", **kwargs):
        super().__init__(name, **kwargs)
        self._set_hyper("learning_rate", learning_rate)
        self._set_hyper("momentum", momentum)

    def _create_slots(self, var_list):
        for var in var_list:
            self.add_slot(var, "momentum")

    def _resource_apply_dense(self, grad, var, apply_state=None):
        lr, momentum = (self._get_hyper(name, var.dtype.base_dtype) for name in ("learning_rate", "momentum"))
        velocity = self.get_slot(var, "momentum")
        velocity.assign(momentum * velocity - lr * grad)
        return var.assign_add(velocity)

    def _resource_apply_sparse(self, grad, var, indices, apply_state=None):
        lr, momentum = (self._get_hyper(name, var.dtype.base_dtype) for name in ("learning_rate", "momentum"))
        velocity = self.get_slot(var, "momentum")
        rows = momentum * tf.gather(velocity, indices) - lr * grad
        velocity.scatter_update(tf.IndexedSlices(rows, indices))
        return var.scatter_add(tf.IndexedSlices(rows, indices))

    def get_config(self):
        return {**super().get_config(), "learning_rate": self._serialize_hyperparameter("learning_rate"),
                "momentum": self._serialize_hyperparameter("momentum")}


OPTIMIZERS = [
    Case("sgd_nesterov", lambda jit_compile=True: SGD(0.05, momentum=0.9, nesterov=True, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.SGDRule(0.05, momentum=0.9, nesterov=True))),
    Case("adam_amsgrad", lambda jit_compile=True: Adam(0.01, amsgrad=True, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.AdamRule(0.01, amsgrad=True))),
    Case("adam+rowwise_adagrad", lambda jit_compile=True: Adam(
        0.01, updaters={"embeddings": optimizers.RowwiseAdagrad(0.1)}, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.AdamRule(0.01), updaters={"embeddings": ref.RowwiseAdagradRule(0.1)}), True),
    Case("sgd+frozen_bias", lambda jit_compile=True: SGD(
        0.05, momentum=0.5, updaters={"bias": optimizers.Frozen()}, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.SGDRule(0.05, momentum=0.5), updaters={"bias": ref.FrozenRule()}), True),
    Case("adamw", lambda jit_compile=True: optimizers.AdamW(
        weight_decay=1e-3, learning_rate=0.01, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.AdamRule(0.01, weight_decay=1e-3))),
    Case("adamw_lazy_scaled", lambda jit_compile=True: optimizers.AdamW(
        weight_decay=0.05, learning_rate=0.01, lazy=True, scale_weight_decay_by_lr=True, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.AdamRule(0.01, lazy=True, weight_decay=0.05, scale_by_lr=True))),
    Case("sgdw", lambda jit_compile=True: optimizers.SGDW(
        weight_decay=1e-3, learning_rate=0.05, momentum=0.9, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.SGDRule(0.05, momentum=0.9, weight_decay=1e-3))),
    Case("moving_average(adam)", lambda jit_compile=True: optimizers.MovingAverage(
        Adam(0.01, jit_compile=jit_compile), average_decay=0.9, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.AdamRule(0.01), wrapper=ref.MovingAverage(average_decay=0.9))),
    Case("moving_average(adamw)", lambda jit_compile=True: optimizers.MovingAverage(
        optimizers.AdamW(weight_decay=1e-3, learning_rate=0.01, jit_compile=jit_compile), average_decay=0.9,
        dynamic_decay=True, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.AdamRule(0.01, weight_decay=1e-3),
                               wrapper=ref.MovingAverage(average_decay=0.9, dynamic_decay=True))),
    Case("moving_average(sgdw+rowwise)", lambda jit_compile=True: optimizers.MovingAverage(optimizers.SGDW(
        weight_decay=1e-3, learning_rate=0.05, momentum=0.9,
        updaters={"embeddings": optimizers.RowwiseAdagrad(0.1)}, jit_compile=jit_compile), jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.SGDRule(0.05, momentum=0.9, weight_decay=1e-3),
                               updaters={"embeddings": ref.RowwiseAdagradRule(0.1)},
                               wrapper=ref.MovingAverage(average_decay=0.99)), True),
    Case("moving_average(keras_adam)", lambda jit_compile=True: optimizers.MovingAverage(
        keras.optimizers.legacy.Adam(0.01), average_decay=0.9, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.AdamRule(0.01), wrapper=ref.MovingAverage(average_decay=0.9))),
    Case("moving_average(third_party)", lambda jit_compile=True: optimizers.MovingAverage(
        HeavyBall(0.05, momentum=0.9), average_decay=0.9, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.SGDRule(0.05, momentum=0.9), wrapper=ref.MovingAverage(average_decay=0.9))),
    # --- every public rule on its own, and each updater and routing once (test_conformance.py checks it)
    Case("adam", lambda jit_compile=True: Adam(0.01, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.AdamRule(0.01))),
    Case("sgd", lambda jit_compile=True: SGD(0.1, jit_compile=jit_compile),  # momentum=0: no slot
         lambda: ref.Optimizer(ref.SGDRule(0.1))),
    Case("adam+overwrite_amax", lambda jit_compile=True: Adam(
        0.01, updaters={"amax": optimizers.OverwriteWithGradient("max")}, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.AdamRule(0.01), updaters={"amax": ref.OverwriteRule()}), True, statistic=True),
    Case("sgd+rowwise_adagrad(schedule)", lambda jit_compile=True: SGD(
        0.05, momentum=0.9, updaters={"embeddings": optimizers.RowwiseAdagrad(_exponential_decay())},
        jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.SGDRule(0.05, momentum=0.9), updaters={"embeddings": ref.RowwiseAdagradRule(
             ref.ExponentialDecay(0.1, decay_steps=2, decay_rate=0.5, staircase=True))}), True),
    Case("sgd+adam_embedding", lambda jit_compile=True: SGD(
        0.05, momentum=0.9, updaters={"embedding": Adam(0.01, jit_compile=jit_compile)}, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.SGDRule(0.05, momentum=0.9), updaters={"embedding": ref.AdamRule(0.01)}), True),
    Case("moving_average(keras_sgd)", lambda jit_compile=True: optimizers.MovingAverage(
        keras.optimizers.legacy.SGD(0.05, momentum=0.9), average_decay=0.9, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.SGDRule(0.05, momentum=0.9), wrapper=ref.MovingAverage(average_decay=0.9)), sparse_xla=False),
    # --- the TensorFlow Addons catalogue (and Keras 3's Lion): hyperparameters that reach their branches in
    # three steps; references from tests/catalogue/ref_*.py
    Case("lazy_adam_amsgrad", lambda jit_compile=True: optimizers.LazyAdam(0.01, amsgrad=True, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.AdamLike(adamlike.LazyAdamRule(0.01, amsgrad=True), "LazyAdam"))),
    Case("yogi_l1_l2", lambda jit_compile=True: optimizers.Yogi(
        0.05, beta1=0.5, beta2=0.75, l1_regularization_strength=0.01, l2_regularization_strength=0.02,
        jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.AdamLike(adamlike.YogiRule(
             0.05, beta1=0.5, beta2=0.75, l1_regularization_strength=0.01, l2_regularization_strength=0.02), "Yogi"))),
    Case("adabelief_decay_warmup", lambda jit_compile=True: optimizers.AdaBelief(
        0.05, beta_1=0.5, beta_2=0.75, epsilon=1e-7, weight_decay=0.01, total_steps=4, warmup_proportion=0.5,
        min_lr=0.02, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.AdamLike(adamlike.RectifiedRule(
             True, 0.05, beta_1=0.5, beta_2=0.75, epsilon=1e-7, weight_decay=0.01, total_steps=4,
             warmup_proportion=0.5, min_lr=0.02), "AdaBelief"))),
    Case("rectified_adam_amsgrad_decay", lambda jit_compile=True: optimizers.RectifiedAdam(
        0.01, beta_1=0.5, beta_2=0.75, weight_decay=0.01, amsgrad=True, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.AdamLike(adamlike.RectifiedRule(
             False, 0.01, beta_1=0.5, beta_2=0.75, weight_decay=0.01, amsgrad=True), "RectifiedAdam"))),
    Case("lion_decay", lambda jit_compile=True: optimizers.Lion(0.01, weight_decay=0.5, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.AdamLike(adamlike.LionRule(0.01, weight_decay=0.5), "Lion"))),
    # Adan's betas are exact in float16: its n (a square of a gradient's sum) is large enough for
    # float16's rounding of 0.99 (0.9897) to show; this case tests the step, not that rounding.
    Case("adan_decay", lambda jit_compile=True: optimizers.Adan(
        0.01, beta_1=0.75, beta_2=0.625, beta_3=0.875, weight_decay=0.1, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.AdamLike(adamlike.AdanRule(
             0.01, beta_1=0.75, beta_2=0.625, beta_3=0.875, weight_decay=0.1), "Adan"))),
    Case("ademamix_warmups", lambda jit_compile=True: optimizers.AdEMAMix(
        0.01, beta_3=0.99, alpha_warmup=2, beta_3_warmup=3, weight_decay=0.1, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.AdamLike(adamlike.AdEMAMixRule(
             0.01, beta_3=0.99, alpha_warmup=2, beta_3_warmup=3, weight_decay=0.1), "AdEMAMix"))),
    Case("schedule_free_adamw_warmup_decay", lambda jit_compile=True: optimizers.ScheduleFreeAdamW(
        0.01, warmup_steps=2, beta_2=0.75, weight_decay=0.1, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.AdamLike(adamlike.ScheduleFreeRule(
             True, 0.01, warmup_steps=2, beta_2=0.75, weight_decay=0.1), "ScheduleFreeAdamW"))),
    Case("schedule_free_sgd", lambda jit_compile=True: optimizers.ScheduleFreeSGD(
        0.05, beta_1=0.75, weight_lr_power=1.0, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.AdamLike(adamlike.ScheduleFreeRule(
             False, 0.05, beta_1=0.75, weight_lr_power=1.0), "ScheduleFreeSGD"))),
    Case("lamb_exclusions", lambda jit_compile=True: optimizers.LAMB(
        0.02, beta_1=0.5, beta_2=0.75, weight_decay=0.05, exclude_from_layer_adaptation=["bias"],
        jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.Layerwise(layerwise.LAMB(
             0.02, beta_1=0.5, beta_2=0.75, weight_decay=0.05, exclude_from_layer_adaptation=["bias"]), "LAMB"))),
    Case("novograd_averaging_amsgrad", lambda jit_compile=True: optimizers.NovoGrad(
        0.01, beta_1=0.5, beta_2=0.75, weight_decay=0.05, grad_averaging=True, amsgrad=True, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.Layerwise(layerwise.NovoGrad(
             0.01, beta_1=0.5, beta_2=0.75, weight_decay=0.05, grad_averaging=True, amsgrad=True), "NovoGrad"))),
    # Muon: the embedding and the bias take AdamW, the dense kernel (a matrix) Muon.
    Case("muon", lambda jit_compile=True: optimizers.Muon(0.01, adam_lr_ratio=0.5, weight_decay=0.1,
                                                          jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.Layerwise(layerwise.Muon(0.01, adam_lr_ratio=0.5, weight_decay=0.1), "Muon"))),
    Case("cocob", lambda jit_compile=True: optimizers.COCOB(alpha=2.5, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.Layerwise(layerwise.COCOB(alpha=2.5), "COCOB"))),
    Case("conditional_gradient", lambda jit_compile=True: optimizers.ConditionalGradient(
        0.9, lambda_=1.0, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.Layerwise(layerwise.ConditionalGradient(0.9, lambda_=1.0), "ConditionalGradient"))),
    Case("proximal_adagrad_l1_l2", lambda jit_compile=True: optimizers.ProximalAdagrad(
        0.1, l1_regularization_strength=0.01, l2_regularization_strength=0.02, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.Layerwise(layerwise.ProximalAdagrad(
             0.1, l1_regularization_strength=0.01, l2_regularization_strength=0.02), "ProximalAdagrad"))),
    Case("adafactor", lambda jit_compile=True: optimizers.Adafactor(0.1, weight_decay=0.01, jit_compile=jit_compile),
         lambda: ref.Optimizer(AdafactorRule(0.1, weight_decay=0.01))),
    Case("sgd+adafactor_embedding", lambda jit_compile=True: SGD(
        0.05, momentum=0.5, updaters={"embedding": optimizers.Adafactor(0.1, jit_compile=jit_compile)},
        jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.SGDRule(0.05, momentum=0.5), updaters={"embedding": AdafactorRule(0.1)}), True),
    Case("decoupled(keras_adam)", lambda jit_compile=True: optimizers.extend_with_decoupled_weight_decay(
        keras.optimizers.legacy.Adam)(weight_decay=1e-3, learning_rate=0.01),  # a Keras built-in: no XLA switch
         lambda: ref.Optimizer(ref.AdamRule(0.01, weight_decay=1e-3))),
    Case("lookahead(adam)", lambda jit_compile=True: optimizers.Lookahead(
        Adam(0.01, jit_compile=jit_compile), sync_period=2, slow_step_size=0.5, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.AdamRule(0.01), wrapper=ref.Lookahead(sync_period=2, slow_step_size=0.5))),
    Case("swa(sgd+frozen_bias)", lambda jit_compile=True: optimizers.SWA(SGD(
        0.05, momentum=0.9, updaters={"bias": optimizers.Frozen()}, jit_compile=jit_compile),
        start_averaging=1, average_period=1, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.SGDRule(0.05, momentum=0.9), updaters={"bias": ref.FrozenRule()},
                               wrapper=ref.SWA(start_averaging=1, average_period=1)), True),
    Case("gradient_accumulation(adam)", lambda jit_compile=True: optimizers.GradientAccumulation(
        Adam(0.01, jit_compile=jit_compile), 2, jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.AdamRule(0.01), wrapper=ref.GradientAccumulation(2)), calls_per_step=2),
    Case("multi_optimizer", lambda jit_compile=True: optimizers.MultiOptimizer(optimizer_specs=[
        {"optimizer": Adam(0.01, jit_compile=jit_compile), "weights": weight_names("embedding/embeddings")},
        {"optimizer": SGD(0.05, momentum=0.9, jit_compile=jit_compile), "weights": weight_names("dense/bias")}],
        jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.FrozenRule(), updaters={"embedding": ref.AdamRule(0.01),
                                                          "bias": ref.SGDRule(0.05, momentum=0.9)}), True,
         routes_by_full_name=True),
    # A pair's own Keras optimizer, third-party (no rule here): it steps the embedding itself, in the host's step.
    Case("multi_optimizer(third_party)", lambda jit_compile=True: optimizers.MultiOptimizer(optimizer_specs=[
        {"optimizer": HeavyBall(0.05, momentum=0.9), "weights": weight_names("embedding/embeddings")},
        {"optimizer": Adam(0.01, jit_compile=jit_compile), "weights": weight_names("dense/bias")}],
        jit_compile=jit_compile),
         lambda: ref.Optimizer(ref.FrozenRule(), updaters={
             "embedding": ref.SGDRule(0.05, momentum=0.9, name="HeavyBall"), "bias": ref.AdamRule(0.01)}), True,
         routes_by_full_name=True),
]
BY_NAME = {case.name: case for case in OPTIMIZERS}
IDS = [case.name for case in OPTIMIZERS]

VOCAB, LENGTH, SAMPLES, BATCH = 8, 2, 32, 8


def data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Integer tokens and a float target that the model can fit."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, VOCAB, size=(SAMPLES, LENGTH)).astype("int32")
    y = (np.sin(x[:, :1]) + 0.1 * x[:, 1:]).astype("float32")
    return x, y


@tf.custom_gradient
def _record_amax(x, amax):
    def grad(dy):
        return dy, tf.reshape(tf.reduce_max(tf.abs(x)), [1])  # the statistic, whatever the loss

    return tf.identity(x), grad


@keras.utils.register_keras_serializable("integration")
class Amax(keras.layers.Layer):
    """Identity on its input, with an fp8-style amax statistic: a trainable variable whose
    gradient is the batch's max |input| (a custom gradient, as Keras 3's fp8 scales do), meant to be
    overwritten with it (``OverwriteWithGradient("max")``: across replicas the max, which equals one
    device's). The loss does not depend on it."""

    def build(self, input_shape):
        self.amax = self.add_weight(name="amax", shape=(1,), initializer="zeros", trainable=True)

    def call(self, x):
        return _record_amax(x, self.amax)


def model(seed: int = 0, dtype: str | None = None, statistic: bool = False) -> Any:
    """Embedding (sparse gradients) -> Flatten [-> Amax statistic] -> Dense, built, same weights for a seed."""
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((LENGTH,), dtype="int32")
    hidden = keras.layers.Embedding(VOCAB, 3, name="embedding", dtype=dtype)(inputs)
    hidden = keras.layers.Flatten(dtype=dtype)(hidden)
    if statistic:
        hidden = Amax(name="amax", dtype=dtype)(hidden)
    outputs = keras.layers.Dense(1, name="dense", dtype=dtype)(hidden)
    return keras.Model(inputs, outputs)


def hyperparameter_to_break(opt: Any) -> tuple[Any, str] | None:
    """Where a test can set a bad hyperparameter value: ``(owner, name)``, the first declared
    hyperparameter of ``opt`` (a wrapper's own first), else of the optimizer it wraps, or of
    ``MultiOptimizer``'s first pair; ``None`` for an optimizer with none at all (``COCOB``)."""
    while True:
        if getattr(opt, "hyperparameter_names", ()):
            return opt, opt.hyperparameter_names[0]
        if isinstance(opt, optimizers.OptimizerWrapper):
            opt = opt.inner_optimizer
        elif isinstance(opt, optimizers.MultiOptimizer):
            opt = opt.optimizer_specs[0]["optimizer"]
        else:
            return None


def case_model(case: Case, seed: int = 0, dtype: str | None = None) -> Any:
    """The model ``case`` trains: :func:`model`, with the statistic its optimizer overwrites."""
    return model(seed, dtype, statistic=case.statistic)


def train_step(net: Any, opt: Any) -> Callable:
    """A custom training step (mean squared error), to wrap in ``tf.function`` or not."""

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(net(x) - y))
        grads = tape.gradient(loss, net.trainable_variables)
        opt.apply_gradients(zip(grads, net.trainable_variables))
        return loss

    return step


def batches(x: np.ndarray, y: np.ndarray, steps: int):
    for i in range(steps):
        j = (i * BATCH) % SAMPLES
        yield tf.constant(x[j:j + BATCH]), tf.constant(y[j:j + BATCH])


def optimizer_state(opt: Any, variables: list) -> dict[str, np.ndarray]:
    """``iterations`` and every slot (the wrapped optimizer's too), keyed by
    optimizer, variable and slot name: independent of creation order and scopes."""
    state = {"iterations": opt.iterations.numpy()}
    for owner in (opt, getattr(opt, "inner_optimizer", None)):
        if owner is None:
            continue
        for slot_name in owner.get_slot_names():
            for var in variables:
                try:
                    state[f"{owner._name}/{var.name}/{slot_name}"] = owner.get_slot(var, slot_name).numpy()
                except KeyError:
                    pass
    return state
