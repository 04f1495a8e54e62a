"""The package as a user installs it: the wheel and the sdist built from this tree, installed into a
fresh virtual environment outside the clone, training ``AdamW`` through ``fit`` from a folder
outside the clone with the fused kernels built from the installed files; and ``optimizers``
importing and training with another project's top-level ``slots`` package first on the path.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
import textwrap
import zipfile

import pytest
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = [pytest.mark.default_stack_only, pytest.mark.slow, pytest.mark.xdist_group("packaging")]

# What a user's first script does: AdamW through fit; then whether a traced step took the fused kernel.
_FIT = textwrap.dedent("""
    import json, warnings
    import numpy as np, tensorflow as tf
    import optimizers
    from optimizers import keras, kernels
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        keras.utils.set_random_seed(0)
        x = np.random.default_rng(0).normal(size=(64, 8)).astype("float32")
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
        model.compile(optimizers.AdamW(weight_decay=1e-4, learning_rate=0.01), "mse")
        history = model.fit(x, x[:, :4], epochs=2, verbose=0).history["loss"]
        var, opt = tf.Variable(tf.ones([3, 4])), optimizers.AdamW(0.01, learning_rate=0.1)
        step = tf.function(lambda g: opt.apply_gradients([(g, var)]) and None)
        ops = {op.type for op in step.get_concrete_function(tf.ones([3, 4])).graph.get_operations()}
    print(json.dumps({"file": optimizers.__file__, "library": kernels.library_path(), "losses": history,
                      "fused": "DecayedApplyAdam" in ops,
                      "warnings": [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]}))
""")


def _run(command, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, **kwargs)
    assert result.returncode == 0, f"{command}:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
    return result


def _uv() -> str:
    found = shutil.which("uv", path=os.path.dirname(sys.executable)) or shutil.which("uv")
    if found is None:
        pytest.fail("uv (installed into the virtual environment by the Makefile) is needed to build the package")
    return found


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """The sdist and the wheel built from a copy of this tree's files (what git has, as a clean
    clone; a build leaves build/ and *.egg-info where it runs, which must not be the clone)."""
    tree, out = tmp_path_factory.mktemp("tree"), tmp_path_factory.mktemp("dist")
    files = _run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT).stdout
    for name in filter(None, files.split("\0")):
        if os.path.isfile(os.path.join(ROOT, name)):  # not a file deleted from the working tree
            os.makedirs(os.path.dirname(os.path.join(tree, name)), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, name), os.path.join(tree, name))
    _run([_uv(), "build", "--sdist", "--wheel", "--out-dir", str(out), str(tree)])
    (sdist,), (wheel,) = glob.glob(str(out / "*.tar.gz")), glob.glob(str(out / "*.whl"))
    return sdist, wheel


@pytest.fixture(scope="module")
def outside(tmp_path_factory):
    """A fresh virtual environment outside the clone with this TensorFlow and tf-keras, the folder
    a user works in, and an empty kernel cache."""
    home = tmp_path_factory.mktemp("user")
    python = str(home / "venv" / "bin" / "python")
    _run([_uv(), "venv", "-q", "--python", sys.executable, str(home / "venv")])
    import tf_keras  # the default stack's Keras 2

    _run([_uv(), "pip", "install", "-q", "--python", python, f"tensorflow=={tf.__version__}",
          f"tf-keras=={tf_keras.__version__}"])
    (home / "work").mkdir()
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "OPTIMIZERS_NATIVE_KERNELS")}
    return python, str(home / "work"), {**env, "OPTIMIZERS_KERNEL_CACHE": str(home / "cache")}


def _shipped(names) -> set[str]:
    """The kernel sources and headers among an archive's ``names``, as paths inside the package."""
    return {name[name.index("optimizers/kernels/"):] for name in names
            if "optimizers/kernels/" in name and name.endswith((".cc", ".h"))}


def test_every_kernel_file_and_the_license_ship_in_the_wheel_and_the_sdist(dist):
    sdist, wheel = dist
    tracked = _run(["git", "ls-files", "optimizers/kernels"], cwd=ROOT).stdout.split()
    in_tree = {name for name in tracked if name.endswith((".cc", ".h"))}
    assert "optimizers/kernels/fused_step.h" in in_tree
    with zipfile.ZipFile(wheel) as f:
        wheel_names = f.namelist()
    with tarfile.open(sdist) as f:
        sdist_names = f.getnames()
    assert _shipped(wheel_names) == in_tree and _shipped(sdist_names) == in_tree
    assert any(name.endswith(".dist-info/licenses/LICENSE") or name.endswith(".dist-info/LICENSE")
               for name in wheel_names), wheel_names
    assert any(name.count("/") == 1 and name.endswith("/LICENSE") for name in sdist_names), sdist_names
    assert not [name for name in wheel_names + sdist_names if name.endswith((".so", ".pyc"))]


def _fit(outside, install: str) -> dict:
    python, work, env = outside
    _run([_uv(), "pip", "install", "-q", "--python", python, "--reinstall-package", "custom-optimizer-v2",
          "--no-deps", install])
    result = _run([python, "-c", _FIT], cwd=work, env=env)
    return {**json.loads(result.stdout.strip().splitlines()[-1]), "stderr": result.stderr}


def test_the_wheel_then_the_sdist_train_adamw_with_kernels_built_from_the_installed_files(dist, outside):
    sdist, wheel = dist
    python, work, env = outside
    from_wheel = _fit(outside, wheel)
    site = os.path.dirname(os.path.dirname(python))  # the fresh environment, not this clone
    assert from_wheel["file"].startswith(site) and not from_wheel["file"].startswith(ROOT)
    assert "Building this library's fused CPU kernels" in from_wheel["stderr"]  # built from the wheel's files...
    assert from_wheel["library"].startswith(env["OPTIMIZERS_KERNEL_CACHE"]) and os.path.exists(from_wheel["library"])
    assert from_wheel["fused"] and from_wheel["warnings"] == []  # ...and used, not the fallback
    assert from_wheel["losses"][-1] < from_wheel["losses"][0]

    # The sdist's files, installed over the wheel's: the kernel cache's key hashes every source
    # and header the package holds (names and contents), so the same key means the same files.
    from_sdist = _fit(outside, sdist)
    assert from_sdist["file"] == from_wheel["file"] and from_sdist["library"] == from_wheel["library"]
    assert "Building" not in from_sdist["stderr"] and from_sdist["fused"] and from_sdist["warnings"] == []
    assert from_sdist["losses"] == from_wheel["losses"]


_FOREIGN = textwrap.dedent("""
    import numpy as np, tensorflow as tf
    import slots
    assert slots.FOREIGN, "the foreign slots package is not the one imported"
    import optimizers
    var = tf.Variable([1.0, 2.0])
    optimizers.AdamW(0.01, learning_rate=0.1).apply_gradients([(tf.constant([1.0, -1.0]), var)])
    print(var.numpy().tolist())
""")


def test_optimizers_imports_and_trains_beside_a_foreign_slots_package(tmp_path):
    foreign = tmp_path / "foreign" / "slots"
    foreign.mkdir(parents=True)
    (foreign / "__init__.py").write_text("FOREIGN = True  # another project's package of the same name\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(foreign.parent), ROOT])}
    result = _run([sys.executable, "-c", _FOREIGN], cwd=str(tmp_path), env=env)
    var = tf.Variable([1.0, 2.0])
    import optimizers

    optimizers.AdamW(0.01, learning_rate=0.1).apply_gradients([(tf.constant([1.0, -1.0]), var)])
    assert json.loads(result.stdout.strip().splitlines()[-1]) == var.numpy().tolist()
