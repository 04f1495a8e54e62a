"""tf.train.Checkpoint / CheckpointManager: N steps, save, restore in a new process, M more steps:
bit-identical to N+M steps without interruption, for every optimizer of the table (updaters included)."""

import fcntl
import os
import subprocess
import sys

import numpy as np
import pytest

from integration.optimizers_under_test import IDS, OPTIMIZERS

WORKER = os.path.join(os.path.dirname(__file__), "resume_worker.py")


@pytest.fixture(scope="session")
def resumed(tmp_path_factory):
    """The two processes' results, computed once per test run: under pytest-xdist the first worker
    to need them runs the two processes (one after the other) while holding a lock in the run's
    shared temporary directory, and every other worker reads its files."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if "PYTEST_XDIST_WORKER" in os.environ else base) / "resume"  # this run's, shared
    root.mkdir(exist_ok=True)
    outs = {mode: root / f"{mode}.npz" for mode in ("first", "second")}
    with open(root / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not outs["second"].exists():
            for mode, out in outs.items():
                subprocess.run([sys.executable, WORKER, mode, str(root / "ckpt"), str(out)], check=True, timeout=300)
    return {mode: dict(np.load(out)) for mode, out in outs.items()}


@pytest.mark.slow
@pytest.mark.xdist_group("resume")  # one worker waits for the two processes, not every worker
@pytest.mark.parametrize("case", OPTIMIZERS, ids=IDS)
def test_restore_in_new_process_is_bit_identical(resumed, case):
    uninterrupted, resumed_ = resumed["first"], resumed["second"]
    keys = sorted(k for k in uninterrupted if k.startswith(case.name + "/"))
    assert any("/optimizer/" in k for k in keys) and any("/model/" in k for k in keys)
    assert keys == sorted(k for k in resumed_ if k.startswith(case.name + "/"))
    for key in keys:
        np.testing.assert_array_equal(resumed_[key], uninterrupted[key], err_msg=key)
