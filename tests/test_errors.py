"""Bad input: each error names the argument, repeats the value received, and
leaves the optimizer and the variables unchanged."""

import math

import numpy as np
import pytest
import tensorflow as tf

import optimizers
import slots
from optimizers import SGD, Adam

import reference
from conftest import TF_VERSION

CONSTRUCTOR_CASES = [
    # (constructor kwargs, exception, regex that must appear in the message)
    (dict(foo=1), TypeError, r"unexpected keyword argument `foo`. Received: foo=1"),
    (dict(learning_rate=-1.0), ValueError, r"`learning_rate` must be in \[0.0, inf\]. Received: learning_rate=-1.0"),
    (dict(beta_1=1.5), ValueError, r"`beta_1` must be in \[0.0, 1.0\). Received: beta_1=1.5"),
    (dict(beta_1=1.0), ValueError, r"`beta_1` must be in \[0.0, 1.0\). Received: beta_1=1.0"),
    (dict(beta_2=math.nan), ValueError, r"`beta_2` must be a finite number. Received: beta_2=nan"),
    (dict(learning_rate="fast"), TypeError, r"`learning_rate` must be a float.*Received: learning_rate='fast'"),
    (dict(learning_rate=True), TypeError, r"Received: learning_rate=True"),
    (dict(learning_rate=None), TypeError, r"Received: learning_rate=None"),
    (dict(learning_rate=tf.constant([0.1, 0.2])), TypeError, r"`learning_rate` must be a scalar float tensor"),
    (dict(beta_1=tf.constant(2.0)), ValueError, r"`beta_1` must be in \[0.0, 1.0\).*Received: beta_1=<tf.Tensor"),
    # Checked as a step uses them too, rounded to float32 (Keras keeps hyperparameters in float32):
    (dict(beta_1=0.999999999), ValueError, r"`beta_1` must be in \[0.0, 1.0\) \(as a float32, the precision it is "
     rf"used in: {float(np.float32(0.999999999))}\). Received: beta_1=0.999999999"),
    (dict(learning_rate=1e39), ValueError, r"`learning_rate` must be a finite number \(as a float32, the precision "
     rf"it is used in: {float(np.float32(np.float64(1e39)))}\). Received: learning_rate=1e\+39"),
    (dict(epsilon=-1e-7), ValueError, r"`epsilon` must be in \(0.0, inf\]. Received: epsilon=-1e-07"),
    (dict(clipnorm=-1.0), ValueError, r"`clipnorm` must be in \[0.0, inf\]. Received: clipnorm=-1.0"),
    (dict(clipvalue="big"), TypeError, r"Received: clipvalue='big'"),
    (dict(global_clipnorm=math.nan), ValueError, r"`global_clipnorm` must be a finite number"),
    (dict(decay=-0.5), ValueError, r"`decay` must be in \[0.0, inf\]. Received: decay=-0.5"),
    (dict(clipnorm=1.0, global_clipnorm=1.0), ValueError, r"`clipnorm`=1.0, `global_clipnorm`=1.0"),
    (dict(name=""), ValueError, r"`name` must be a non-empty string. Received: name=''"),
    (dict(jit_compile="yes"), TypeError, r"`jit_compile` must be a bool. Received: jit_compile='yes'"),
    (dict(weight_decay=-0.1), ValueError, r"`weight_decay` must be in \[0.0, inf\]. Received: weight_decay=-0.1"),
    (dict(weight_decay="l2"), TypeError, r"Received: weight_decay='l2'"),
    (dict(exclude_from_weight_decay=["bias"]), ValueError,
     r"needs a `weight_decay`. Received: weight_decay=None, exclude_from_weight_decay=\['bias'\]"),
    (dict(weight_decay=0.1, exclude_from_weight_decay="bias"), TypeError,
     r"must be a list of regex strings. Received: exclude_from_weight_decay='bias'"),
    (dict(weight_decay=0.1, exclude_from_weight_decay=["("]), ValueError, r"invalid regex '\('"),
    (dict(weight_decay=0.1, scale_weight_decay_by_lr="yes"), TypeError,
     r"Received: scale_weight_decay_by_lr='yes'"),
    (dict(updaters="all"), TypeError, r"`updaters` must be a mapping.*Received: updaters='all'"),
    (dict(updaters={"(": optimizers.Frozen()}), ValueError, r"invalid regex"),
    (dict(updaters={"w": "overwrite"}), TypeError, r"`updater` must be a VariableUpdater.*Received: updater='overwrite'"),
]


@pytest.mark.parametrize("kwargs, error, message", CONSTRUCTOR_CASES, ids=lambda c: str(c)[:40])
def test_constructor_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        Adam(**kwargs)


def _state(opt, var):
    return int(opt.iterations.numpy()), var.numpy().copy(), dict(slots.slot_memory(opt))


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_wrong_gradient_shape_leaves_everything_unchanged(mode):
    var = tf.Variable(np.ones((2, 2), np.float32))
    opt = Adam(0.1)
    opt.apply_gradients([(tf.ones((2, 2)), var)])
    before = _state(opt, var)
    apply = opt.apply_gradients if mode == "eager" else tf.function(lambda pairs: opt.apply_gradients(pairs) and None)
    with pytest.raises(ValueError, match=r"gradient of variable .* \(shape \(2, 2\)\) has an incompatible shape. "
                                         r"Received: grad=<tf.Tensor"):
        apply([(tf.ones((3,)), var)])
    after = _state(opt, var)
    assert before[0] == after[0] and before[2] == after[2]
    np.testing.assert_array_equal(before[1], after[1])


def test_sparse_gradient_with_wrong_row_shape():
    var = tf.Variable(np.ones((4, 2), np.float32))
    grad = tf.IndexedSlices(tf.ones((1, 3)), tf.constant([0]), tf.constant([4, 3]))
    with pytest.raises(ValueError, match="incompatible shape"):
        SGD().apply_gradients([(grad, var)])
    np.testing.assert_array_equal(var.numpy(), np.ones((4, 2)))


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("values, indices, dense_shape, error, message", [
    ([[1.0, 1.0]] * 3, [0, 1], [4, 2], (ValueError, tf.errors.InvalidArgumentError), r"(has 3 rows of values for 2 indices|one index per row of values). Received: "),
    ([[1.0, 1.0]] * 2, [[0], [1]], [4, 2], ValueError, r"must have indices of rank 1.*Received: grad.indices="),
    ([[1.0, 1.0]] * 2, [0.0, 1.0], [4, 2], TypeError, r"must have int32 or int64 indices. Received: grad.indices="),
    ([[1.0, 1.0]] * 2, [0, 1], [99, 7], (ValueError, tf.errors.InvalidArgumentError),
     r"dense_shape other than the variable shape. Received: grad.dense_shape="),
], ids=["rows_not_indices", "indices_rank_2", "float_indices", "dense_shape"])
def test_a_malformed_sparse_gradient_is_refused_by_name_before_any_write(values, indices, dense_shape, error, message,
                                                                       mode):
    var = tf.Variable(np.ones((4, 2), np.float32), name="table")
    opt = Adam(0.1)
    opt.apply_gradients([(tf.IndexedSlices(tf.ones((1, 2)), tf.constant([3]), tf.constant([4, 2])), var)])
    before = _state(opt, var)
    parts = [tf.constant(values), tf.constant(indices), tf.constant(dense_shape)]

    def step(*parts):
        opt.apply_gradients([(tf.IndexedSlices(*parts), var)])

    if mode == "function":  # shapes unknown until the step runs: refused by the step's assertions
        step = tf.function(step, input_signature=[tf.TensorSpec([None] * len(p.shape), p.dtype) for p in parts])
    with pytest.raises(error, match=r"sparse gradient of variable \\?'table:0\\?' \(shape \(4, 2\)\)[\s\S]*" + message):
        step(*parts)
    after = _state(opt, var)
    assert before[0] == after[0] and before[2] == after[2]
    np.testing.assert_array_equal(before[1], after[1])


def test_integer_variable_is_refused():
    var = tf.Variable([1, 2])
    opt = SGD()
    with pytest.raises(ValueError, match=r"has dtype int32; optimizers update floating point variables only"):
        opt.apply_gradients([(tf.constant([1, 1]), var)])
    assert slots.slot_memory(opt) == {}


def test_malformed_pairs():
    with pytest.raises(TypeError, match=r"must hold \(gradient, variable\) pairs. Received: "):
        SGD().apply_gradients([tf.constant(1.0)])
    with pytest.raises(TypeError, match=r"Only tf.Variable objects can be updated. Received: var="):
        SGD().apply_gradients([(tf.constant(1.0), tf.constant(2.0))])


def test_bad_attribute_assignment_keeps_old_value():
    opt = Adam(beta_1=0.8)
    with pytest.raises(ValueError, match=r"`beta_1` must be in \[0.0, 1.0\). Received: beta_1=-0.1"):
        opt.beta_1 = -0.1
    assert float(opt.beta_1) == pytest.approx(0.8)
    with pytest.raises(ValueError, match=r"\(as a float32, the precision it is used in: 1.0\)"):
        opt.beta_1 = 1 - 1e-9  # 1.0 in float32, outside [0, 1)
    assert float(opt.beta_1) == pytest.approx(0.8)


def test_weight_decay_assigned_to_an_optimizer_built_without_one_is_refused():
    opt = Adam(learning_rate=0.0)
    with pytest.raises(ValueError, match=r"`weight_decay` cannot be set on Adam, built without weight decay .*"
                                         r"give `weight_decay` to the constructor instead. Received: weight_decay=0.5"):
        opt.weight_decay = 0.5
    assert "weight_decay" not in opt.get_config() and "weight_decay" not in vars(opt)
    with pytest.raises(ValueError, match=r"cannot be set on COCOB.*it takes none. Received: weight_decay=0.1"):
        optimizers.COCOB().weight_decay = 0.1
    # Built with one, it is a hyperparameter: the assignment takes effect at the next step.
    opt = Adam(learning_rate=0.0, weight_decay=0.5)
    opt.weight_decay = 0.25
    var = tf.Variable([2.0])
    opt.apply_gradients([(tf.constant([0.0]), var)])
    np.testing.assert_allclose(var.numpy(), reference.decay(np.array([2.0]), 0.25), rtol=1e-6)


@pytest.mark.parametrize("make, name, again", [
    (lambda: Adam(0.1, epsilon=1e-7), "epsilon", lambda: float("1e-7")),
    (lambda: optimizers.Lookahead(SGD(0.1), sync_period=1000), "sync_period", lambda: int("1000")),
    (lambda: optimizers.GradientAccumulation(SGD(0.1), 300), "accumulation_steps", lambda: int("300")),
], ids=["Adam.epsilon", "Lookahead.sync_period", "GradientAccumulation.accumulation_steps"])
def test_an_option_set_to_its_value_after_the_first_step_is_taken_and_a_new_value_refused(make, name, again):
    opt = make()
    opt.apply_gradients([(tf.constant([1.0]), tf.Variable([1.0]))])
    current = getattr(opt, name)
    same = again()  # an equal value, another object
    assert same == current and same is not current
    setattr(opt, name, same)
    assert getattr(opt, name) == current
    other = current * 2
    with pytest.raises(ValueError, match=rf"`{name}` cannot change once {type(opt).__name__} has taken a step.*"
                                         rf"Received: {name}={other!r}"):
        setattr(opt, name, other)
    assert getattr(opt, name) == current
    with pytest.raises(ValueError, match=rf"`{name}` cannot change"):
        setattr(opt, name, np.array([current]))  # compared safely: an array is not the option's value


EPSILON_RULES = {"Adam": dict(), "AdamW": dict(weight_decay=0.01), "LazyAdam": dict(), "LAMB": dict(),
                 "RectifiedAdam": dict(), "AdaBelief": dict(), "NovoGrad": dict(),
                 "ConditionalGradient": dict(learning_rate=0.1)}


@pytest.mark.parametrize("name", sorted(EPSILON_RULES))
def test_a_zero_epsilon_is_keras_epsilon_and_assigning_zero_is_refused(name):
    """Keras 2's and TFA's constructors read ``epsilon=0`` as ``keras.backend.epsilon()``: with a
    zero epsilon a gradient element that is zero, with its moments, would step by 0 / 0."""
    cls, kwargs = getattr(optimizers, name), EPSILON_RULES[name]
    zero, default = cls(epsilon=0.0, **kwargs), cls(epsilon=optimizers.keras.backend.epsilon(), **kwargs)
    assert zero.get_config() == default.get_config()
    grad = tf.constant([[0.0, 0.5], [0.0, -0.25]])  # a column of zeros
    weights = []
    for opt in (zero, default):
        var = tf.Variable([[1.0, 2.0], [3.0, 4.0]])
        for _ in range(2):
            opt.apply_gradients([(grad, var)])
        weights.append(var.numpy())
    assert np.isfinite(weights[0]).all()
    np.testing.assert_array_equal(weights[0], weights[1])
    with pytest.raises(ValueError, match=r"`epsilon` must be in \(0.0, inf\]. Received: epsilon=0"):
        cls(**kwargs).epsilon = 0


def test_adam_with_a_zero_epsilon_steps_as_keras_2s():
    grad = tf.constant([[0.0, 0.5], [0.0, -0.25]])
    weights = []
    for opt in (Adam(0.1, epsilon=0), optimizers.keras.optimizers.legacy.Adam(0.1, epsilon=0)):
        var = tf.Variable([[1.0, 2.0], [3.0, 4.0]])
        for _ in range(3):
            opt.apply_gradients([(grad, var)])
        weights.append(var.numpy())
    np.testing.assert_array_equal(weights[0], weights[1])


@pytest.mark.default_stack_only
@pytest.mark.skipif(TF_VERSION < (2, 16), reason="Keras 3 exists only beside TF >= 2.16")
def test_keras3_variable_gets_a_hint_to_use_tf_keras():
    import keras as keras3

    var = keras3.Variable([1.0, 2.0])
    with pytest.raises(TypeError, match=r"Keras 3 variable.*import tf_keras as keras"):
        SGD().apply_gradients([(tf.constant([1.0, 1.0]), var)])
    model = keras3.Sequential([keras3.layers.Input((2,)), keras3.layers.Dense(1)])
    with pytest.raises(TypeError, match=r"Keras 3 object.*tf-keras"):
        optimizers.check_keras2_model(model)
    # Keras 3's own compile error repeats our repr, which says what we are.
    with pytest.raises(ValueError, match=r"a Keras 2 \(OptimizerV2\) optimizer"):
        model.compile(optimizer=SGD(), loss="mse")


@pytest.mark.parametrize("make, error, message", [
    (lambda: slots.SlotSpec(""), ValueError, r"`name` must be a non-empty string. Received: name=''"),
    (lambda: slots.as_slot_specs(["m", "m"]), ValueError, r"Slot names must be unique. Received: \['m', 'm'\]"),
    (lambda: slots.as_slot_specs([3]), TypeError, r"SlotSpec or str values. Received: 3"),
    (lambda: slots.as_slot_specs("velocity"), TypeError, r"not one value: `return \['velocity'\]`"),
    (lambda: slots.SlotSpec("m", initializer=0.0), TypeError, r"`initializer` must be .*Received: initializer=0.0"),
    (lambda: slots.SlotSpec("m", shape=[3]), TypeError, r"`shape` must be a function .*Received: shape=\[3\]"),
    (lambda: optimizers.RowwiseAdagrad(learning_rate=-1), ValueError,
     r"`learning_rate` must be in \[0.0, inf\]. Received: learning_rate=-1"),
    (lambda: optimizers.set_updater(tf.constant(1.0), optimizers.Frozen()), TypeError,
     r"`var` must be a tf.Variable. Received: var="),
    (lambda: optimizers.OverwriteWithGradient("min"), ValueError, r"Received: reduction='min'"),
])
def test_other_errors(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_missing_update_dense_says_what_to_implement():
    class Empty(optimizers.CustomOptimizerV2):
        def __init__(self, name="Empty", **kwargs):
            super().__init__(name, **kwargs)

    with pytest.raises(NotImplementedError, match=r"must implement update_dense\(grad, var, slots, coefficients\)"):
        Empty().apply_gradients([(tf.constant([1.0]), tf.Variable([1.0]))])


def test_a_slot_spec_returned_alone_is_refused_at_the_first_step():
    class OneSlot(SGD):
        def slot_specs(self, var):
            return "velocity"  # one string, not a list: it would make a slot per character

    var = tf.Variable([1.0])
    with pytest.raises(TypeError, match=r"`slot_specs` must return a list .*Received: 'velocity'"):
        OneSlot().apply_gradients([(tf.constant([1.0]), var)])
    assert var.numpy().tolist() == [1.0]


def test_a_hyperparameter_declared_twice_is_refused():
    class Twice(SGD):
        def __init__(self, name="Twice", **kwargs):
            super().__init__(0.1, name=name, **kwargs)
            self.add_hyperparameter("learning_rate", 0.2, low=0.0)

    with pytest.raises(ValueError, match=r"Hyperparameter 'learning_rate' is already declared.*learning_rate=0.2"):
        Twice()


def test_a_hyperparameter_declared_before_super_init_says_to_call_it():
    class Early(optimizers.CustomOptimizerV2):
        def __init__(self, learning_rate=0.1, name="Early", **kwargs):
            self.add_hyperparameter("learning_rate", learning_rate, low=0.0)
            super().__init__(name, **kwargs)

    with pytest.raises(TypeError, match=r"Early.__init__ must call `super\(\).__init__\(name, \*\*kwargs\)`"):
        Early()


def test_unstored_constructor_argument_is_reported_by_get_config():
    class Forgetful(SGD):
        def __init__(self, learning_rate=0.01, flavour="x", name="Forgetful", **kwargs):
            super().__init__(learning_rate=learning_rate, name=name, **kwargs)

    with pytest.raises(NotImplementedError, match=r"cannot find constructor argument `flavour`"):
        Forgetful().get_config()


@pytest.mark.default_stack_only
@pytest.mark.skipif(TF_VERSION < (2, 16), reason="tf-keras is needed only beside TF >= 2.16")
def test_missing_tf_keras_says_what_to_install():
    import subprocess
    import sys

    # A fresh interpreter in which `import tf_keras` fails, as where tf-keras is not installed.
    code = "import sys; sys.modules['tf_keras'] = None; import optimizers"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    version = f"{TF_VERSION[0]}.{TF_VERSION[1]}"
    assert f"pip install 'tf-keras=={version}.*'" in result.stderr


def _rule_with(name, base=optimizers.CustomOptimizerV2):
    class Rule(base):
        def __init__(self, value=0.5, name="Rule", **kwargs):
            super().__init__(name, **kwargs)
            self.add_hyperparameter(name_, value, low=0.0)

        def update_dense(self, grad, var, slots, coefficients):
            return var.assign_sub(coefficients[name_] * grad)

    name_ = name
    return Rule


@pytest.mark.parametrize("name, meaning", [
    ("step", r'coefficients\["step"\] is the 1-based step number'),
    ("decay", r"OptimizerV2 keeps its own `decay`"),
    ("lr", r"OptimizerV2 reads `lr` as `learning_rate`"),
    ("iterations", r"OptimizerV2's step counter"),
    ("weight_decay_factor", r'coefficients\["weight_decay_factor"\]'),
])
def test_a_hyperparameter_may_not_take_a_name_the_base_class_gives_a_meaning(name, meaning):
    """Such a hyperparameter was silently replaced in the coefficients (``step``) or in the
    config (``decay``, ``lr``)."""
    with pytest.raises(ValueError, match=rf"Hyperparameter name '{name}' is taken: {meaning}.*Received: {name}=0.5"):
        _rule_with(name)()


def test_a_variable_updater_hyperparameter_may_not_be_named_step():
    class Updater(optimizers.VariableUpdater):
        def __init__(self, step=0.1):
            self.add_hyperparameter("step", step)

    with pytest.raises(ValueError, match=r"Hyperparameter name 'step' is taken.*Received: step=0.1"):
        Updater()


@pytest.mark.parametrize("argument", ["lr", "decay"])
def test_a_constructor_argument_named_lr_or_decay_is_refused_when_the_class_is_defined(argument):
    with pytest.raises(TypeError, match=rf"must not take an argument named `{argument}`.*Received: __init__\(self, "
                                        rf"{argument}=0.1, name='Bad', \*\*kwargs\)"):
        exec(f"class Bad(optimizers.SGD):\n    def __init__(self, {argument}=0.1, name='Bad', **kwargs):\n"
             f"        super().__init__(0.1, name=name, **kwargs)", {"optimizers": optimizers})


@pytest.mark.parametrize("name", ["learning_rate", "beta_1"])
def test_a_wrapper_hyperparameter_may_not_hide_one_of_the_inner_optimizer(name):
    """The wrapper's ``learning_rate`` (and any attribute the inner optimizer declares) reads and
    sets the inner optimizer's, as Keras callbacks need: a hyperparameter of the same name would
    be a second value that get_config saves and the step never uses, or the other way round."""
    class Wrapper(optimizers.OptimizerWrapper):
        def __init__(self, optimizer, value=0.7, name="Wrapper", **kwargs):
            super().__init__(optimizer, name, **kwargs)
            self.add_hyperparameter(name_, value, low=0.0)

    name_ = name
    with pytest.raises(ValueError, match=rf"Hyperparameter name '{name}' is taken: .*Received: {name}=0.7"):
        Wrapper(Adam(0.1))


def test_a_variable_option_may_not_replace_a_coefficient():
    class Options(_rule_with("alpha")):
        def variable_options(self, var):
            return {"alpha": 3.0}

    var = tf.Variable([1.0])
    opt = Options()
    with pytest.raises(ValueError, match=r"Options.variable_options\(\) must not return a coefficient's name.*"
                                         r"Received: \['alpha'\] for variable 'Variable:0'"):
        opt.apply_gradients([(tf.constant([1.0]), var)])
    assert var.numpy().tolist() == [1.0] and int(opt.iterations) == 0


@pytest.mark.parametrize("jit_compile", [True, False])
@pytest.mark.parametrize("key, listed", [("velocity", r"slot \(this variable's: \['m'\]"),
                                         ("learning_rat", r"coefficient \(\['learning_rate', 'step'\]")])
def test_reading_an_undeclared_slot_or_coefficient_says_which_there_are(key, listed, jit_compile):
    class Typo(optimizers.CustomOptimizerV2):
        def __init__(self, learning_rate=0.1, name="Typo", **kwargs):
            super().__init__(name, **kwargs)
            self.add_hyperparameter("learning_rate", learning_rate, low=0.0)

        def slot_specs(self, var):
            return ["m"]

        def update_dense(self, grad, var, slots, coefficients):
            return var.assign_sub({**slots, **coefficients}[key] * grad)

    var = tf.Variable([1.0])
    with pytest.raises(KeyError, match=rf"Typo.update_dense read '{key}', which is neither a .*{listed}"):
        Typo(jit_compile=jit_compile).apply_gradients([(tf.constant([1.0]), var)])
    assert var.numpy().tolist() == [1.0]


@pytest.mark.parametrize("jit_compile", [True, False])
def test_an_update_that_returns_nothing_is_applied_in_tf_function_too(jit_compile):
    """Its assignments run (eagerly, and in order by tf.function's automatic control
    dependencies); Keras 2 refused the None in a graph with an error about `inputs`."""
    class Forgetful(SGD):
        def update_dense(self, grad, var, slots, coefficients):
            var.assign_sub(coefficients["learning_rate"] * grad)

        def update_sparse(self, grad, var, indices, slots, coefficients):
            var.scatter_sub(tf.IndexedSlices(coefficients["learning_rate"] * grad, indices))

    var = tf.Variable([1.0, 2.0])
    opt = Forgetful(0.5, jit_compile=jit_compile)
    tf.function(lambda: opt.apply_gradients([(tf.constant([1.0, 2.0]), var)]) and None)()
    tf.function(lambda: opt.apply_gradients([(tf.IndexedSlices(tf.constant([4.0]), tf.constant([1])), var)])
                and None)()
    assert var.numpy().tolist() == [0.5, -1.0] and int(opt.iterations) == 2


def test_a_slot_initializer_of_another_dtype_is_refused_by_name():
    class Wide(SGD):
        def slot_specs(self, var):
            return [slots.SlotSpec("m", initializer=lambda shape, dtype: tf.zeros(shape, tf.float64))]

    var = tf.Variable([1.0])
    with pytest.raises(TypeError, match=r"initializer of slot 'm' of variable 'Variable:0' must return a float32 "
                                        r"value.*Received: a float64 tensor"):
        Wide().apply_gradients([(tf.constant([1.0]), var)])
    assert var.numpy().tolist() == [1.0]


@pytest.mark.parametrize("name", ["MovingAverage", "GradientAccumulation", "Lookahead", "SWA"])
def test_a_wrapper_looked_up_by_name_alone_says_it_needs_an_optimizer(name):
    with pytest.raises(ValueError, match=rf"{name} wraps an optimizer.* as {name}\(optimizer, \.\.\.\)\)\. "
                                         r"Received: config=\{\}"):
        optimizers.keras.optimizers.get(name)


def test_slot_memory_of_a_wrapper_counts_the_inner_optimizer_slots():
    var = tf.Variable(tf.zeros([3, 2]))
    opt = optimizers.MovingAverage(optimizers.AdamW(weight_decay=0.1))
    opt.apply_gradients([(tf.ones([3, 2]), var)])
    assert slots.slot_memory(opt) == {"average": 24, "m": 24, "v": 24}
    assert slots.slot_memory(opt.inner_optimizer) == {"m": 24, "v": 24}
