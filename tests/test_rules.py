"""The rule protocol shared by optimizers and updaters: slots per variable,
updater hyperparameters and schedules, routing to template optimizers, and
weight-decay placement."""

import numpy as np
import pytest
import tensorflow as tf

import optimizers
import slots
from optimizers import SGD, Adam

import reference
from conftest import TOLERANCE, keras


def _steps(opt, pairs_per_step):
    for pairs in pairs_per_step:
        opt.apply_gradients(pairs)


def test_slot_specs_see_the_variable():
    """Adafactor-like: a matrix gets row and column slots, a vector one full slot."""

    class Factored(optimizers.CustomOptimizerV2):
        def __init__(self, learning_rate=0.1, name="Factored", **kwargs):
            super().__init__(name, **kwargs)
            self.add_hyperparameter("learning_rate", learning_rate, low=0.0)

        def slot_specs(self, var):
            if var.shape.rank >= 2:
                return [slots.SlotSpec("row", shape=lambda s: s[:-1]), slots.SlotSpec("col", shape=lambda s: s[:-2] + s[-1:])]
            return [slots.SlotSpec("full", initializer=lambda shape, dtype: tf.identity(var))]

        def update_dense(self, grad, var, slots, coefficients):
            for name, slot in slots.items():
                if name == "row":
                    slot.assign_add(tf.reduce_sum(tf.square(grad), -1))
                elif name == "col":
                    slot.assign_add(tf.reduce_sum(tf.square(grad), -2))
                else:
                    slot.assign_add(tf.square(grad))
            return var.assign_sub(coefficients["learning_rate"] * grad)

    matrix, vector = tf.Variable(tf.ones([3, 2])), tf.Variable([1.0, 2.0])
    opt = Factored()
    g_matrix, g_vector = np.arange(6, dtype=np.float32).reshape(3, 2), np.array([0.5, -1.0], np.float32)
    opt.apply_gradients([(tf.constant(g_matrix), matrix), (tf.constant(g_vector), vector)])
    np.testing.assert_allclose(opt.get_slot(matrix, "row").numpy(), (g_matrix**2).sum(-1))
    np.testing.assert_allclose(opt.get_slot(matrix, "col").numpy(), (g_matrix**2).sum(-2))
    np.testing.assert_allclose(opt.get_slot(vector, "full").numpy(), np.array([1.0, 2.0]) + g_vector**2)
    assert slots.slot_memory(opt) == {"col": 8, "full": 8, "row": 12}


def test_old_style_slot_specs_is_refused_at_class_definition():
    with pytest.raises(TypeError, match=r"slot_specs must take the variable: def slot_specs\(self, var\)"):
        class Old(optimizers.CustomOptimizerV2):  # noqa: F841
            def slot_specs(self):
                return ["m"]


def test_updater_may_return_string_slot_specs():
    class Momentum(optimizers.VariableUpdater):
        def __init__(self, learning_rate=0.1):
            self.add_hyperparameter("learning_rate", learning_rate, low=0.0)

        def slot_specs(self, var):
            return ["velocity"]

        def update_dense(self, grad, var, slots, coefficients):
            slots["velocity"].assign(0.5 * slots["velocity"] + grad)
            return var.assign_sub(coefficients["learning_rate"] * slots["velocity"])

    var = tf.Variable([1.0, 2.0], name="w")
    opt = SGD(0.0, updaters={"w": Momentum(0.1)})
    _steps(opt, [[(tf.constant([1.0, 1.0]), var)]] * 2)
    velocity = 0.5 * 1.0 + 1.0
    np.testing.assert_allclose(var.numpy(), np.array([1.0, 2.0]) - 0.1 * 1.0 - 0.1 * velocity, rtol=1e-6)
    assert opt.get_slot(var, "Momentum/velocity").numpy().tolist() == [velocity, velocity]
    assert Momentum.from_config(Momentum(0.3).get_config()) == Momentum(0.3)


def test_rowwise_adagrad_learning_rate_schedule_is_evaluated_at_the_optimizers_step():
    schedule = keras.optimizers.schedules.ExponentialDecay(0.5, decay_steps=1, decay_rate=0.5)
    table = tf.Variable(np.ones((3, 2), np.float32), name="table")
    opt = SGD(0.0, updaters={"table": optimizers.RowwiseAdagrad(schedule, initial_accumulator_value=0.1)})
    grads = [np.array([[1.0, 2.0], [0.0, 1.0], [3.0, 0.0]], np.float32)] * 3
    expected, acc = np.ones((3, 2), np.float64), np.full((3, 1), 0.1)
    for step, grad in enumerate(grads):
        opt.apply_gradients([(tf.constant(grad), table)])
        acc = acc + (grad.astype(np.float64) ** 2).mean(1, keepdims=True)
        expected = expected - 0.5 * 0.5**step * grad / (np.sqrt(acc) + 1e-7)
    np.testing.assert_allclose(table.numpy(), expected, rtol=1e-5)
    again = optimizers.RowwiseAdagrad.from_config(opt.updater_for(table).get_config())
    assert isinstance(again.learning_rate, keras.optimizers.schedules.ExponentialDecay)


def test_rowwise_adagrad_on_a_scalar_says_why():
    var = tf.Variable(1.0, name="scalar")
    with pytest.raises(ValueError, match=r"RowwiseAdagrad updates rows.*rank >= 1. Received: var="):
        SGD(updaters={"scalar": optimizers.RowwiseAdagrad()}).apply_gradients([(tf.constant(1.0), var)])


@pytest.mark.parametrize("sparse", [False, True])
def test_template_optimizer_as_updater_equals_it_alone(sparse):
    """Routing (TFA's MultiOptimizer) is the updaters mapping: each variable
    moves exactly as its own optimizer alone would move it."""
    init = np.arange(8, dtype=np.float32).reshape(4, 2) / 8

    def grads(step):
        values = np.full((3, 2), step + 1.0, np.float32)
        if sparse:
            return tf.IndexedSlices(tf.constant(values), tf.constant([0, 2, 0]), tf.constant([4, 2]))
        return tf.constant(np.concatenate([values, values[:1]]))

    emb, dense = tf.Variable(init, name="emb"), tf.Variable(init, name="dense")
    routed = SGD(0.1, momentum=0.9, updaters={"emb": Adam(0.01, amsgrad=True, weight_decay=0.01, name="inner")})
    emb_alone, dense_alone = tf.Variable(init), tf.Variable(init)
    adam_alone, sgd_alone = Adam(0.01, amsgrad=True, weight_decay=0.01), SGD(0.1, momentum=0.9)
    for step in range(3):
        routed.apply_gradients([(grads(step), emb), (grads(step), dense)])
        adam_alone.apply_gradients([(grads(step), emb_alone)])
        sgd_alone.apply_gradients([(grads(step), dense_alone)])
    np.testing.assert_array_equal(emb.numpy(), emb_alone.numpy())
    np.testing.assert_array_equal(dense.numpy(), dense_alone.numpy())
    assert sorted(routed.get_slot_names()) == ["inner/m", "inner/v", "inner/vhat", "momentum"]
    with pytest.raises(KeyError):
        routed.get_slot(emb, "momentum")


def test_two_patterns_matching_one_variable_are_refused():
    var = tf.Variable([1.0], name="dense/bias")
    opt = SGD(updaters={"dense": optimizers.Frozen(), "bias": optimizers.OverwriteWithGradient()})
    with pytest.raises(ValueError, match=r"'dense/bias:0' matches several `updaters` patterns.*\['dense', 'bias'\]"):
        opt.apply_gradients([(tf.constant([1.0]), var)])
    assert var.numpy().tolist() == [1.0] and int(opt.iterations) == 0


class _DecayInside(optimizers.CustomOptimizerV2):
    """SGD whose update includes the decay term: theta -= lr * (g + wd * theta) (masked)."""

    weight_decay_placement = "inside"

    def __init__(self, learning_rate=0.1, name="DecayInside", **kwargs):
        super().__init__(name, **kwargs)
        self.add_hyperparameter("learning_rate", learning_rate, low=0.0)

    def update_dense(self, grad, var, slots, coefficients):
        update = grad
        if coefficients.get("decayed"):
            update = update + coefficients["weight_decay_factor"] * var
        return var.assign_sub(coefficients["learning_rate"] * update)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_weight_decay_inside_the_rule_reads_factor_and_mask(jit_compile):
    kernel, bias = tf.Variable([1.0, -2.0], name="kernel"), tf.Variable([1.0, -2.0], name="bias")
    opt = _DecayInside(0.1, weight_decay=0.5, exclude_from_weight_decay=["bias"], jit_compile=jit_compile)
    grad = np.array([0.5, 0.25], np.float32)
    for _ in range(2):  # one compiled function per shape: the mask must still tell the two apart
        opt.apply_gradients([(tf.constant(grad), kernel), (tf.constant(grad), bias)])
    k, b = np.array([1.0, -2.0]), np.array([1.0, -2.0])
    for _ in range(2):
        k = k - 0.1 * (grad + 0.5 * k)
        b = b - 0.1 * grad
    np.testing.assert_allclose(kernel.numpy(), k, rtol=1e-6)
    np.testing.assert_allclose(bias.numpy(), b, rtol=1e-6)


def test_weight_decay_placement_none_refuses_weight_decay():
    class NoDecay(_DecayInside):
        weight_decay_placement = "none"

    with pytest.raises(TypeError, match=r"NoDecay takes no weight decay. Received: weight_decay=0.1"):
        NoDecay(weight_decay=0.1)


def test_variable_options_reach_the_compiled_step():
    """Two variables of one shape share a compiled function; their options still differ."""

    class Scaled(optimizers.CustomOptimizerV2):
        def __init__(self, name="Scaled", **kwargs):
            super().__init__(name, **kwargs)
            self.mask = optimizers.VariableMask(["double"])

        def variable_options(self, var):
            return {"double": self.mask.matches(var)}

        def update_dense(self, grad, var, slots, coefficients):
            return var.assign_sub(grad * (2.0 if coefficients["double"] else 1.0))

    a, b = tf.Variable([1.0], name="single"), tf.Variable([1.0], name="double")
    Scaled().apply_gradients([(tf.constant([1.0]), a), (tf.constant([1.0]), b)])
    assert (a.numpy().tolist(), b.numpy().tolist()) == ([0.0], [-1.0])


def test_adamw_with_zero_decay_equals_adam():
    init = np.linspace(-1, 1, 6).astype(np.float32)
    a, b = tf.Variable(init), tf.Variable(init)
    opt_a, opt_b = optimizers.AdamW(weight_decay=0.0, learning_rate=0.01), Adam(0.01)
    for step in range(3):
        grad = tf.constant(np.cos(init * (step + 1)))
        opt_a.apply_gradients([(grad, a)])
        opt_b.apply_gradients([(grad, b)])
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_shipped_adam_and_sgd_equal_numpy_reference():
    # float32 throughout: hyperparameters are float32 variables, as in Keras 2.
    init = np.linspace(-1, 1, 4).astype(np.float32)
    var_adam, var_sgd = tf.Variable(init), tf.Variable(init)
    adam, sgd = Adam(0.01, amsgrad=True), SGD(0.1, momentum=0.9, nesterov=True)
    p_adam, s_adam, p_sgd, s_sgd = init, {}, init, {}
    for step in range(1, 4):
        grad = np.sin(init * step).astype(np.float32)
        adam.apply_gradients([(tf.constant(grad), var_adam)])
        sgd.apply_gradients([(tf.constant(grad), var_sgd)])
        p_adam, s_adam = reference.adam(p_adam, grad, s_adam, 0.01, amsgrad=True, step=step)
        p_sgd, s_sgd = reference.sgd(p_sgd, grad, s_sgd, 0.1, momentum=0.9, nesterov=True)
    np.testing.assert_allclose(var_adam.numpy(), p_adam, **TOLERANCE[tf.float32])
    np.testing.assert_allclose(var_sgd.numpy(), p_sgd, **TOLERANCE[tf.float32])


@pytest.mark.parametrize("mode", ["eager", "tf_function"])
@pytest.mark.parametrize("wrapped", [False, True])
def test_skip_non_finite_leaves_everything_unchanged_and_counts(mode, wrapped):
    table = tf.Variable(np.ones((3, 2), np.float32))
    inner = optimizers.AdamW(weight_decay=0.1, learning_rate=0.1, skip_non_finite=True)
    opt = optimizers.MovingAverage(inner, average_decay=0.5) if wrapped else inner

    def step(grad):
        opt.apply_gradients([(grad, table)])

    step = tf.function(step) if mode == "tf_function" else step
    good = tf.IndexedSlices(tf.ones((2, 2)), tf.constant([0, 2]), tf.constant([3, 2]))
    bad = tf.IndexedSlices(tf.constant([[1.0, np.inf], [1.0, 1.0]]), tf.constant([0, 2]), tf.constant([3, 2]))
    step(good)
    before = [v.numpy().copy() for v in [table] + opt.variables()]
    step(bad)
    after = [v.numpy() for v in [table] + opt.variables()]
    assert all(np.array_equal(a, b) for a, b in zip(before, after))
    assert int(inner.skipped_steps) == 1 and int(opt.iterations) == 1
    step(good)
    assert int(opt.iterations) == 2 and int(inner.skipped_steps) == 1
    assert optimizers.AdamW.from_config(inner.get_config()).skip_non_finite


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_skip_non_finite_under_mirrored_strategy(mirrored, sparse):
    """Each replica's gradients are tested (they are per-replica values in the step's cross-replica
    part): a NaN sent by the second replica alone skips the step on both."""
    with mirrored.scope():
        table = tf.Variable(np.ones((3, 2), np.float32))
        opt = optimizers.AdamW(weight_decay=0.1, learning_rate=0.1, skip_non_finite=True)

    @tf.function
    def step(bad):
        def replica_step():
            replica = tf.distribute.get_replica_context().replica_id_in_sync_group
            value = tf.where(tf.logical_and(bad, replica == 1), np.nan, 1.0)
            values = tf.fill((2, 2), value)
            grad = (tf.IndexedSlices(values, tf.constant([0, 2]), tf.constant([3, 2])) if sparse
                    else tf.concat([values, tf.ones((1, 2))], 0))
            opt.apply_gradients([(grad, table)])
        mirrored.run(replica_step)

    step(tf.constant(False))
    before = [v.numpy().copy() for v in [table] + opt.variables()]
    step(tf.constant(True))
    after = [v.numpy() for v in [table] + opt.variables()]
    assert all(np.array_equal(a, b) for a, b in zip(before, after))
    assert int(opt.skipped_steps.numpy()) == 1 and int(opt.iterations.numpy()) == 1
    step(tf.constant(False))
    assert int(opt.iterations.numpy()) == 2 and int(opt.skipped_steps.numpy()) == 1
    assert np.isfinite(table.numpy()).all()


def test_routed_optimizer_hyperparameters_set_later_take_effect_in_tf_function():
    b = tf.Variable([0.0], name="b")
    rule = SGD(1.0)
    host = SGD(0.0, updaters={"b": rule})

    @tf.function
    def step():
        host.apply_gradients([(tf.constant([1.0]), b)])

    step()
    rule.learning_rate = 0.5
    step()
    assert b.numpy().tolist() == [-1.5]


def test_routed_optimizer_follows_the_hosts_decay_var_list():
    routed, kernel = tf.Variable([1.0], name="routed"), tf.Variable([1.0], name="kernel")
    host = SGD(0.0, weight_decay=0.5, updaters={"routed": optimizers.AdamW(weight_decay=0.5, learning_rate=0.0)})
    host.apply_gradients([(tf.constant([1.0]), routed), (tf.constant([1.0]), kernel)], decay_var_list=[kernel])
    assert (routed.numpy().tolist(), kernel.numpy().tolist()) == ([1.0], [0.5])


def _decayed(builtin, weight_decay):
    """tf_keras's built-in with TensorFlow Addons' decoupled decay: an op of its own, then the built-in's step."""

    class Decayed(builtin):
        def _resource_apply_dense(self, grad, var, apply_state=None):
            with tf.control_dependencies([var.assign_sub(tf.cast(weight_decay, var.dtype) * var)]):
                return super()._resource_apply_dense(grad, var, apply_state)

    return Decayed


def _kernel_pairs():
    """(ours, tf_keras's built-in) pairs whose dense steps are the same fused kernel."""
    legacy = keras.optimizers.legacy
    return [
        # A small decayed variable: the decay, then the kernel (TFA's AdamW and SGDW).
        (optimizers.AdamW(0.125, 0.01), _decayed(legacy.Adam, 0.125)(0.01)),
        (optimizers.SGDW(0.125, 0.1, momentum=0.5), _decayed(legacy.SGD, 0.125)(0.1, momentum=0.5)),
        (Adam(0.01), legacy.Adam(0.01)),
        (Adam(0.01, jit_compile=False), legacy.Adam(0.01)),
        (optimizers.LazyAdam(0.01, beta_1=0.5), legacy.Adam(0.01, beta_1=0.5)),
        # A variable excluded from AdamW's decay takes Adam's step.
        (optimizers.AdamW(0.1, 0.01, exclude_from_weight_decay=["w"]), legacy.Adam(0.01)),
        (SGD(0.1), legacy.SGD(0.1)),
        (SGD(0.1, momentum=0.9, nesterov=True), legacy.SGD(0.1, momentum=0.9, nesterov=True)),
        (optimizers.SGDW(0.1, 0.1, momentum=0.5, exclude_from_weight_decay=["w"]), legacy.SGD(0.1, momentum=0.5)),
    ]


@pytest.mark.parametrize("mode", ["eager", "tf_function"])
@pytest.mark.parametrize("dtype", [tf.float16, tf.float32, tf.float64])
def test_adam_and_sgd_steps_of_small_variables_equal_keras_builtins_bit_for_bit(mode, dtype):
    """Without a fused wrapper, a dense Adam or SGD step of a small variable is TensorFlow's fused
    kernel, the one tf_keras's built-ins run (after the decay, if any): the same bits, in every dtype."""
    rng = np.random.RandomState(0)
    init = rng.randn(4, 3).astype(dtype.as_numpy_dtype)
    grads = [tf.constant(rng.randn(4, 3), dtype) for _ in range(4)]
    for ours, peer in _kernel_pairs():
        mine, theirs = tf.Variable(init, name="w"), tf.Variable(init, name="w")

        def run(opt, var):
            def step(grad):
                opt.apply_gradients([(grad, var)])

            step = tf.function(step) if mode == "tf_function" else step
            for grad in grads:
                step(grad)

        run(ours, mine)
        run(peer, theirs)
        assert np.array_equal(mine.numpy(), theirs.numpy()), ours.get_config()
        for name in peer.get_slot_names():
            np.testing.assert_array_equal(ours.get_slot(mine, name).numpy(), peer.get_slot(theirs, name).numpy())


def test_a_subclass_changing_the_rule_does_not_take_the_parents_kernel():
    class DoubleStepAdam(Adam):
        def update_dense(self, grad, var, slots, coefficients):
            return super().update_dense(grad, var, slots, {**coefficients, "alpha": 2 * coefficients["alpha"]})

    class Accelerated(SGD):
        def _velocity_step(self, velocity, grad, coefficients):
            return super()._velocity_step(velocity, 2 * grad, coefficients)

    var = tf.Variable([1.0])
    assert Adam().dense_kernel(var, {}) is not None and SGD(momentum=0.5).dense_kernel(var, {}) is not None
    assert DoubleStepAdam().dense_kernel(var, {}) is None
    assert Accelerated(momentum=0.5).dense_kernel(var, {}) is None
    assert Adam().dense_kernel(tf.Variable([1], dtype=tf.int32), {}) is None
    assert Adam(amsgrad=True).dense_kernel(var, {}) is None  # XLA has no AMSGrad kernel: the rule compiles

    class SteeperNovoGrad(optimizers.NovoGrad):
        def _direction(self, grad, *args, **kwargs):
            return super()._direction(2 * grad, *args, **kwargs)

    assert optimizers.NovoGrad().dense_kernel(var, {}) is not None and SteeperNovoGrad().dense_kernel(var, {}) is None

    class WiderConditionalGradient(optimizers.ConditionalGradient):
        def _target(self, grad, coefficients, compiled=None):
            return 2 * super()._target(grad, coefficients, compiled)

    assert optimizers.ConditionalGradient(0.5).dense_kernel(var, {}) is not None
    assert WiderConditionalGradient(0.5).dense_kernel(var, {}) is None
    # And the subclass's rule is what runs: Adam at twice the learning rate, SGD on twice the gradient.
    double, plain = tf.Variable([1.0, -1.0]), tf.Variable([1.0, -1.0])
    grad = np.array([0.5, -2.0], np.float32)
    DoubleStepAdam(0.1).apply_gradients([(tf.constant(grad), double)])
    expected, _ = reference.adam(np.array([1.0, -1.0], np.float32), grad, {}, 0.2)
    np.testing.assert_allclose(double.numpy(), expected, **TOLERANCE[tf.float32])
    Accelerated(0.1, momentum=0.5).apply_gradients([(tf.constant(grad), plain)])
    expected, _ = reference.sgd(np.array([1.0, -1.0], np.float32), 2 * grad, {}, 0.1, momentum=0.5)
    np.testing.assert_allclose(plain.numpy(), expected, **TOLERANCE[tf.float32])


@pytest.mark.parametrize("fused", [True, False], ids=["fused_kernel", "without_it"])
def test_a_large_decayed_variable_takes_the_fused_kernel_or_else_its_compiled_step(fused):
    """A variable compiled alone takes AdamW's fused decay-and-Adam kernel (``optimizers.kernels``):
    nothing compiled, the bits of the decay then the fused kernel. Where that kernel is not (a
    rule without one, here turned off), the decay stays fused into its compiled pass, with those
    numbers to rounding."""
    from optimizers.compiled import BATCH_MAX_ELEMENTS, compiled_function_count

    class WithoutFusedKernel(optimizers.AdamW):
        def fused_dense_kernel(self, var, options, decay, average):
            return None

    rng = np.random.RandomState(0)
    init = rng.randn(BATCH_MAX_ELEMENTS + 1).astype(np.float32)
    ours = (optimizers.AdamW if fused else WithoutFusedKernel)(0.125, 0.01)
    peer = _decayed(keras.optimizers.legacy.Adam, 0.125)(0.01)
    small, mine, theirs = tf.Variable([1.0, 2.0]), tf.Variable(init), tf.Variable(init)
    for _ in range(3):
        grad = tf.constant(rng.randn(init.size).astype(np.float32))
        ours.apply_gradients([(grad, mine), (tf.constant([0.5, 0.5]), small)])
        peer.apply_gradients([(grad, theirs)])
    if fused:
        assert compiled_function_count(ours) == 0
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
    else:
        assert compiled_function_count(ours) == 1  # the large variable's; the small one took the kernel
        np.testing.assert_allclose(mine.numpy(), theirs.numpy(), **TOLERANCE[tf.float32])
