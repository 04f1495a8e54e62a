"""Properties (hypothesis) over the optimizers of tests/integration/optimizers_under_test.py:
a sparse gradient that holds every row equals the dense one; repeated indices equal pre-summed
ones; random in-range hyperparameters keep weights and slots finite."""

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from integration.optimizers_under_test import IDS, OPTIMIZERS, optimizer_state

import optimizers
from optimizers import Adam

SETTINGS = settings(max_examples=8, deadline=None, derandomize=True, database=None)
ROWS, COLS = 4, 3
values = hnp.arrays(np.float32, (ROWS, COLS), elements=st.floats(-5, 5, width=32))


def _variables():
    # The model's names, which the table's updater patterns ("embeddings", "bias") and MultiOptimizer's
    # pairs (optimizers_under_test.weight_names) match.
    return [tf.Variable(np.linspace(-1, 1, ROWS * COLS, dtype=np.float32).reshape(ROWS, COLS),
                        name="embedding/embeddings"),
            tf.Variable(np.ones((ROWS, COLS), np.float32), name="dense/kernel"),
            tf.Variable(np.zeros((ROWS, COLS), np.float32), name="dense/bias")]


def _run(case, grads_per_step):
    variables = _variables()
    opt = case.make()
    for grads in grads_per_step:
        opt.apply_gradients(zip(grads, variables))
    return [v.numpy() for v in variables], optimizer_state(opt, variables)


def _assert_close(a, b, **tol):
    for x, y in zip(a[0], b[0]):
        np.testing.assert_allclose(x, y, **tol)
    assert sorted(a[1]) == sorted(b[1])
    for key in a[1]:
        np.testing.assert_allclose(a[1][key], b[1][key], err_msg=key, **tol)


@pytest.mark.slow
@pytest.mark.parametrize("case", OPTIMIZERS, ids=IDS)
@SETTINGS
@given(g1=values, g2=values, order=st.permutations(range(ROWS)))
def test_sparse_with_every_row_equals_dense(case, g1, g2, order):
    """Two steps; the sparse rows come in a random order. Tolerance rtol=1e-5, atol=1e-6 (the sparse
    paths compute the same formulas in another order)."""
    order = np.array(order)

    def sparse(g):
        return tf.IndexedSlices(tf.constant(g[order]), tf.constant(order), tf.constant([ROWS, COLS]))

    dense = _run(case, [[tf.constant(g)] * 3 for g in (g1, g2)])
    by_rows = _run(case, [[sparse(g)] * 3 for g in (g1, g2)])
    _assert_close(dense, by_rows, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("case", OPTIMIZERS, ids=IDS)
@SETTINGS
@given(rows=hnp.arrays(np.float32, (5, COLS), elements=st.floats(-5, 5, width=32)),
       indices=st.lists(st.integers(0, ROWS - 1), min_size=5, max_size=5))
def test_repeated_indices_equal_pre_summed(case, rows, indices):
    indices = np.array(indices, np.int32)
    unique = np.unique(indices)
    summed = np.stack([rows[indices == i].sum(axis=0) for i in unique])

    def grads(values_, idx):
        return [tf.IndexedSlices(tf.constant(values_), tf.constant(idx), tf.constant([ROWS, COLS]))] * 3

    repeated = _run(case, [grads(rows, indices)] * 2)
    presummed = _run(case, [grads(summed, unique)] * 2)
    _assert_close(repeated, presummed, rtol=1e-5, atol=1e-6)


unit = st.floats(0.0, 0.999)
HYPERPARAMETERS = {
    "adamw": st.builds(lambda wd, lr, b1, b2, eps, ams, lazy, scaled: optimizers.AdamW(
        wd, learning_rate=lr, beta_1=b1, beta_2=b2, epsilon=eps, amsgrad=ams, lazy=lazy,
        scale_weight_decay_by_lr=scaled),
        st.floats(0, 1), st.floats(0, 10), unit, unit, st.floats(1e-7, 1), st.booleans(), st.booleans(),
        st.booleans()),
    "sgdw": st.builds(lambda wd, lr, mu, nesterov: optimizers.SGDW(wd, learning_rate=lr, momentum=mu,
                                                                   nesterov=nesterov),
                      st.floats(0, 1), st.floats(0, 1), st.floats(0, 1), st.booleans()),
    "adam_amsgrad": st.builds(lambda lr, b1, b2, eps: Adam(lr, beta_1=b1, beta_2=b2, epsilon=eps, amsgrad=True),
                              st.floats(0, 10), unit, unit, st.floats(1e-7, 1)),
    "moving_average(sgdw)": st.builds(lambda decay, dynamic, start: optimizers.MovingAverage(
        optimizers.SGDW(1e-3, learning_rate=0.1, momentum=0.9), average_decay=decay, dynamic_decay=dynamic,
        start_step=start), st.floats(0, 1), st.booleans(), st.integers(0, 3)),
    "rowwise_adagrad": st.builds(lambda lr, init, eps: optimizers.SGDW(0.0, updaters={
        "embeddings": optimizers.RowwiseAdagrad(lr, init, eps)}), st.floats(0, 10), st.floats(1e-3, 1),
        st.floats(1e-7, 1)),
}


@pytest.mark.parametrize("name", sorted(HYPERPARAMETERS))
@SETTINGS
@given(data=st.data(), grads=st.lists(values, min_size=3, max_size=3))
def test_random_in_range_hyperparameters_keep_everything_finite(name, data, grads):
    opt = data.draw(HYPERPARAMETERS[name])
    variables = _variables()
    for g in grads:
        dense = tf.constant(g)
        sparse = tf.IndexedSlices(tf.constant(g[:2]), tf.constant([0, 2]), tf.constant([ROWS, COLS]))
        opt.apply_gradients([(sparse, variables[0]), (dense, variables[1]), (dense, variables[2])])
    state = optimizer_state(opt, variables)
    assert int(state["iterations"]) == 3
    for value in [v.numpy() for v in variables] + list(state.values()):
        assert np.all(np.isfinite(value)), (opt.get_config(), state)
