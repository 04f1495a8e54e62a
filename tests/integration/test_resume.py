"""tf.train.Checkpoint / CheckpointManager: N steps, save, restore in a new process, M more steps:
bit-identical to N+M steps without interruption, for every optimizer of the table (updaters included)."""

import os
import subprocess
import sys

import numpy as np
import pytest

from integration.optimizers_under_test import IDS, OPTIMIZERS

WORKER = os.path.join(os.path.dirname(__file__), "resume_worker.py")
pytestmark = pytest.mark.xdist_group("resume")  # one pair of worker processes for the whole table (make test: --dist loadgroup)


# Session scope: under --dist loadgroup the group's tests need not run back to back on their worker,
# and a module-scoped fixture would then be torn down and the two processes run again.
@pytest.fixture(scope="session")
def resumed(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    results = {}
    for mode in ("first", "second"):  # two processes, one after the other
        out = str(root / f"{mode}.npz")
        subprocess.run([sys.executable, WORKER, mode, str(root / "ckpt"), out], check=True, timeout=300)
        results[mode] = dict(np.load(out))
    return results


@pytest.mark.slow
@pytest.mark.parametrize("case", OPTIMIZERS, ids=IDS)
def test_restore_in_new_process_is_bit_identical(resumed, case):
    uninterrupted, resumed_ = resumed["first"], resumed["second"]
    keys = sorted(k for k in uninterrupted if k.startswith(case.name + "/"))
    assert any("/optimizer/" in k for k in keys) and any("/model/" in k for k in keys)
    assert keys == sorted(k for k in resumed_ if k.startswith(case.name + "/"))
    for key in keys:
        np.testing.assert_array_equal(resumed_[key], uninterrupted[key], err_msg=key)
