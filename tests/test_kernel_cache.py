"""The fused kernels' cache: damaged, concurrent and interrupted builds, a library built ahead of
time used without a compiler, and the switch's spellings.

The cache's own behaviour is tried on a one-op library (seconds to build) through the same
:class:`~optimizers.kernels.cache.LibraryCache` the kernels use; what a training process does with
the real library (fall back with one warning, or use a prebuilt one) runs the real kernels.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from test_kernels import run_adamw

from optimizers import kernels
from optimizers.kernels.cache import LibraryCache, default_root

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernels build on Linux"),
              pytest.mark.xdist_group("kernel_cache")]

_PROBE = textwrap.dedent("""
    #include "tensorflow/core/framework/op.h"
    #include "tensorflow/core/framework/op_kernel.h"
    #include "probe.h"

    REGISTER_OP("CacheProbe").Output("y: int32");

    class CacheProbe : public tensorflow::OpKernel {
     public:
      explicit CacheProbe(tensorflow::OpKernelConstruction* context) : OpKernel(context) {}
      void Compute(tensorflow::OpKernelContext* context) override {
        tensorflow::Tensor* y = nullptr;
        OP_REQUIRES_OK(context, context->allocate_output(0, {}, &y));
        y->scalar<int>()() = PROBE_VALUE;
      }
    };
    REGISTER_KERNEL_BUILDER(Name("CacheProbe").Device(tensorflow::DEVICE_CPU), CacheProbe);
""")

# Loads the probe library through the cache in a process of its own (an op is registered once
# per process) and prints what its op returns.
_LOAD = textwrap.dedent("""
    import sys
    from optimizers.kernels.cache import LibraryCache
    cache = LibraryCache(sources=(sys.argv[1],), headers=(sys.argv[2],), flags=("-shared", "-fPIC", "-O0", "-w"),
                         root=sys.argv[3])
    print(int(cache.load().cache_probe()))
""")


_FLAGS = ("-shared", "-fPIC", "-O0", "-w")
# The cache's Python is the same on every stack: its probe tests run on the default one; the real
# library's tests (a prebuilt library used, a damaged one skipped) on both.
probe_only = pytest.mark.default_stack_only


def _probe_sources(folder) -> LibraryCache:
    """The one-op library's sources in ``folder`` and a cache for it there."""
    source, header = folder / "probe.cc", folder / "probe.h"
    source.write_text(_PROBE)
    header.write_text("#define PROBE_VALUE 7\n")
    return LibraryCache(sources=(str(source),), headers=(str(header),), flags=_FLAGS, root=str(folder / "cache"))


@pytest.fixture
def fresh(tmp_path):
    """The probe's sources and an empty cache."""
    return _probe_sources(tmp_path)


@pytest.fixture(scope="session")
def first_build(tmp_path_factory):
    """The probe built once through the cache (a compile takes tens of seconds: the tests that do
    not need their own build start from a copy of this one) and what that first load printed."""
    cache = _probe_sources(tmp_path_factory.mktemp("first"))
    return cache, _load(cache), _load(cache)


@pytest.fixture
def probe(first_build, tmp_path):
    """A built probe of its own: the first build's sources and cache copied into ``tmp_path``."""
    built = first_build[0]
    copy = _probe_sources(tmp_path)
    shutil.copytree(built.root, copy.root)
    assert copy.damage() is None
    return copy


def _load(cache: LibraryCache, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _LOAD, *cache.sources, *cache.headers, cache.root], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env={**os.environ, **env})


def _builds(result: subprocess.CompletedProcess) -> int:
    return result.stderr.count("Building this library's fused CPU kernels")


@probe_only
def test_a_library_is_built_once_with_a_record_and_found_again(first_build):
    probe, first, second = first_build
    assert first.returncode == 0 and first.stdout.split()[-1] == "7", first.stderr[-2000:]
    assert _builds(first) == 1 and _builds(second) == 0 and second.stdout.split()[-1] == "7"
    with open(probe.path() + ".json") as f:
        record = json.load(f)
    assert record["size"] == os.path.getsize(probe.path()) and probe.damage() is None


@probe_only
def test_the_key_follows_the_sources_contents_not_their_paths(probe, tmp_path):
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    for name in (*probe.sources, *probe.headers):
        shutil.copy(name, moved)
    same = LibraryCache(sources=(str(moved / "probe.cc"),), headers=(str(moved / "probe.h"),), flags=probe.flags,
                        root=probe.root)
    assert same.path() == probe.path()
    (moved / "probe.h").write_text("#define PROBE_VALUE 8\n")  # a header is part of what is built
    assert same.path() != probe.path()


@probe_only
@pytest.mark.parametrize("damage", ["truncated", "no_record", "same_size_other_bytes"])
def test_a_damaged_library_is_never_loaded_rebuilt_or_refused_with_the_reason(probe, damage):
    path = probe.path()
    if damage == "truncated":  # a full disk, a copy in progress: loading it ended the process with SIGBUS
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
    elif damage == "no_record":
        os.remove(path + ".json")
    else:
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) // 2)
            flipped = bytes(b ^ 0xFF for b in f.read(64))
            f.seek(os.path.getsize(path) // 2)
            f.write(flipped)
    why = probe.damage()
    assert why is not None
    refused = _load(probe, CXX="/nonexistent/c++")  # without a compiler: refused, with the reason
    assert refused.returncode == 1 and "RuntimeError" in refused.stderr and why in refused.stderr
    assert "CXX='/nonexistent/c++' is not an executable" in refused.stderr
    if damage != "truncated":
        return  # the rebuild (the same path for every damage) takes a compile: once is enough
    again = _load(probe)
    assert again.returncode == 0 and again.stdout.split()[-1] == "7", again.stderr[-2000:]
    assert "damaged" in again.stderr and _builds(again) == 1
    assert probe.damage() is None


@probe_only
def test_two_processes_building_at_once_build_once_and_both_load(fresh):
    command = [sys.executable, "-c", _LOAD, *fresh.sources, *fresh.headers, fresh.root]
    runs = [subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    results = [(run.wait(timeout=300), *run.communicate()) for run in runs]
    assert [(code, out.split()[-1]) for code, out, _ in results] == [(0, "7"), (0, "7")], results
    assert sum(err.count("Building this library's fused CPU kernels") for _, _, err in results) == 1


@probe_only
def test_a_build_killed_midway_leaves_a_cache_that_builds(fresh):
    run = subprocess.Popen([sys.executable, "-c", _LOAD, *fresh.sources, *fresh.headers, fresh.root], cwd=ROOT,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    folder = os.path.dirname(fresh.path())
    deadline = time.monotonic() + 120
    while not (os.path.isdir(folder) and any(n.startswith(".build-") for n in os.listdir(folder))):
        assert time.monotonic() < deadline and run.poll() is None, "the build never started"
        time.sleep(0.05)
    os.killpg(run.pid, signal.SIGKILL)  # the compiler too
    run.wait()
    assert not os.path.exists(fresh.path()) and fresh.damage().endswith("is not built")
    again = _load(fresh)
    assert again.returncode == 0 and again.stdout.split()[-1] == "7", again.stderr[-2000:]
    assert not [n for n in os.listdir(folder) if n.startswith(".build-")]  # the killed build's scratch is gone


@probe_only
def test_cxx_is_honoured_and_a_missing_one_is_named(fresh, monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    with pytest.raises(RuntimeError, match=r"CXX='/nonexistent/c\+\+' is not an executable"):
        fresh.build()
    monkeypatch.setenv("CXX", "/bin/false")  # a compiler that fails: its command and failure are reported
    with pytest.raises(RuntimeError, match="with /bin/false failed"):
        fresh.build()


@pytest.mark.parametrize("value, on", [("", True), ("1", True), ("true", True), ("On", True), ("YES", True),
                                       ("0", False), ("false", False), ("OFF", False), ("No", False), (" no ", False)])
def test_the_switch_takes_every_spelling_of_on_and_off(value, on, monkeypatch):
    monkeypatch.setenv(kernels.SWITCH, value)
    assert kernels.enabled() is on


@pytest.mark.parametrize("value", ["disable", "2", "nope"])
def test_the_switch_refuses_any_other_value_naming_it(value, monkeypatch):
    monkeypatch.setenv(kernels.SWITCH, value)
    with pytest.raises(ValueError, match=f"Received: OPTIMIZERS_NATIVE_KERNELS='{value}'"):
        kernels.enabled()


def test_a_misspelt_switch_is_refused_at_import():
    result = subprocess.run([sys.executable, "-c", "import optimizers"], cwd=ROOT, capture_output=True, text=True,
                            timeout=300, env={**os.environ, kernels.SWITCH: "disabled"})
    assert result.returncode == 1 and "OPTIMIZERS_NATIVE_KERNELS='disabled'" in result.stderr


@pytest.fixture(scope="module")
def built():
    """The real kernel library, built (as the suite's other kernel tests use it) and its record."""
    return kernels.build()


def _copy_cache(built, root) -> str:
    """The real library and its record copied into the cache ``root``, where its key puts them."""
    copy = os.path.join(root, os.path.relpath(built, default_root()))
    os.makedirs(os.path.dirname(copy))
    shutil.copy(built, copy)
    shutil.copy(built + ".json", copy + ".json")
    return copy


def test_a_library_built_ahead_of_time_is_used_where_no_compiler_is(built, tmp_path):
    _copy_cache(built, tmp_path / "image")  # a container's runtime stage with the build stage's cache
    ours = run_adamw(OPTIMIZERS_KERNEL_CACHE=str(tmp_path / "image"), CXX="/nonexistent/c++")
    assert ours["fused"] and ours["warnings"] == [] and "Building" not in ours["stderr"]


def test_a_damaged_library_without_a_compiler_falls_back_with_one_warning_and_the_same_numbers(built, tmp_path):
    copy = _copy_cache(built, tmp_path / "cache")
    with open(copy, "r+b") as f:
        f.truncate(os.path.getsize(copy) // 2)
    ours = run_adamw(OPTIMIZERS_KERNEL_CACHE=str(tmp_path / "cache"), CXX="/nonexistent/c++")
    assert not ours["fused"] and len(ours["warnings"]) == 1
    assert "fused kernels are not available" in ours["warnings"][0] and "bytes" in ours["warnings"][0]
    assert ours["var"] == run_adamw()["var"]  # the kernels' numbers, from the real library
