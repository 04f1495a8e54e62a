"""Shared test set-up: two logical CPU devices (for MirroredStrategy) and stack facts."""

import os
import socket

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

_cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(_cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2)

import optimizers  # noqa: E402

# Scripts, not tests: one run by hand in the TF 2.15 + TFA environment, one in .venv-optax by test_optax.py.
collect_ignore = ["fixtures/make_tfa_fixtures.py", "catalogue/optax_steps.py"]

# One place for the stack facts the tests need.
TF_VERSION = optimizers.TF_VERSION
keras = optimizers.keras
try:
    import tensorflow_addons as tfa  # noqa: F401

    HAS_TFA = True
except ImportError:
    HAS_TFA = False

# Comparison tolerances per dtype (relative and absolute).
TOLERANCE = {
    tf.float16: dict(rtol=2e-3, atol=2e-3),
    tf.float32: dict(rtol=1e-6, atol=1e-6),
    tf.float64: dict(rtol=1e-12, atol=1e-12),
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tfa" in item.keywords and not HAS_TFA:
            item.add_marker(pytest.mark.skip(reason="TensorFlow Addons runs in the TF 2.15 env (make test-tf215)"))
    # The parameter-server tests connect their process to a cluster, after which no other strategy
    # runs in it ("unknown device"): run with others (`pytest tests`), they go last. `make test`
    # runs them in a process of their own.
    items.sort(key=lambda item: item.path.name == "test_parameter_server.py")


@pytest.fixture(scope="session")
def mirrored():
    """MirroredStrategy over the two logical CPU devices, one per test process.

    One instance only: a second MirroredStrategy over the same devices restarts
    collective instance keys that the runtime has already seen.
    """
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


@pytest.fixture(autouse=True)
def _seed():
    tf.random.set_seed(0)
    np.random.seed(0)
    yield
    keras.backend.clear_session()


def free_port() -> int:
    """A TCP port on localhost that is free now (for in-process clusters and worker processes)."""
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]
