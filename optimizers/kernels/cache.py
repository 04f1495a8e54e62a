"""Building, caching and loading a TensorFlow custom-op library from C++ sources.

A :class:`LibraryCache` compiles its sources once per key (TensorFlow's version and compile
flags, the build flags, the sources' contents) into a folder of the cache, and keeps a record
beside the library (its size and SHA-256, the compiler that built it). The guarantees:

* **A reader never sees half a library.** A build writes into a scratch folder inside the cache
  and renames the library, then its record, into place; a library whose record is missing or
  does not match it (a truncated copy, a full disk, a build killed midway) is never loaded: it is
  rebuilt, or, without a compiler, skipped with one warning.
* **One process builds, the others wait.** The build holds a lock file; a process that waited
  finds the library built and loads it. Scratch folders of a killed build are removed by the next.
* **No compiler needed to use a library built ahead of time.** The key does not name the
  compiler, so a library built in one environment (a container's build stage) is found and used
  in another with the same TensorFlow and sources (its runtime stage, without a compiler).
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from typing import Any

import tensorflow as tf

logger = logging.getLogger("optimizers.kernels")

_LIBRARY = "optimizers_kernels.so"


def default_root() -> str:
    """``$OPTIMIZERS_KERNEL_CACHE``, or ``custom-optimizer-v2`` under ``$XDG_CACHE_HOME`` (default ``~/.cache``)."""
    return os.environ.get("OPTIMIZERS_KERNEL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "custom-optimizer-v2")


def compiler() -> str:
    """The C++ compiler: ``$CXX`` where it is set (and nothing else then), else ``c++`` or ``g++``
    on ``PATH``. Raises ``RuntimeError`` naming what was looked for where there is none."""
    requested = os.environ.get("CXX")
    found = shutil.which(requested) if requested else shutil.which("c++") or shutil.which("g++")
    if found is None:
        raise RuntimeError(f"CXX={requested!r} is not an executable compiler" if requested else
                           "no C++ compiler (c++ or g++) is on PATH; install g++ or set CXX")
    return found


def _tensorflow_flags() -> list[str]:
    """TensorFlow's compile and link flags."""
    return [*tf.sysconfig.get_compile_flags(), *tf.sysconfig.get_link_flags()]


def _without_paths(flags: list[str]) -> list[str]:
    """The flags that change what is built: the include and library folders name where this
    TensorFlow is installed (another virtual environment with the same TensorFlow builds the same
    library), not what it is."""
    return [flag for flag in flags if not flag.startswith(("-I", "-L"))]


@dataclasses.dataclass(frozen=True)
class LibraryCache:
    """One library built from ``sources`` (compiled) and ``headers`` (hashed into the key) with
    ``flags``, cached under ``root`` (default :func:`default_root`)."""

    sources: tuple[str, ...]
    headers: tuple[str, ...]
    flags: tuple[str, ...]
    root: str | None = None

    def path(self) -> str:
        """Where the library of this TensorFlow and these sources is, or will be, cached."""
        digest = hashlib.sha256()
        for name in (*self.sources, *self.headers):  # the contents, not the paths: every install of
            with open(name, "rb") as f:              # the same sources shares one build
                digest.update(os.path.basename(name).encode() + b"\0" + f.read())
        digest.update(" ".join([platform.machine(), tf.version.GIT_VERSION, *self.flags,
                                *_without_paths(_tensorflow_flags())]).encode())
        return os.path.join(self.root or default_root(), f"tf{tf.__version__}-{digest.hexdigest()[:16]}", _LIBRARY)

    def damage(self) -> str | None:
        """Why the cached library cannot be loaded (not built, no record, size or hash not the
        recorded ones); ``None`` where it is whole."""
        path = self.path()
        if not os.path.exists(path):
            return f"{path} is not built"
        try:
            with open(path + ".json") as f:
                record = json.load(f)
            size, sha256 = int(record["size"]), str(record["sha256"])
        except (OSError, ValueError, KeyError, TypeError):
            return f"{path} has no readable record of its size and hash ({path}.json)"
        if os.path.getsize(path) != size:
            return f"{path} is {os.path.getsize(path)} bytes, {size} when it was built"
        if _sha256(path) != sha256:
            return f"{path} does not have the hash it had when it was built"
        return None

    def build(self) -> str:
        """Compile the library unless a whole one is cached, and return its path. Raises
        ``RuntimeError`` (with the compiler's message) where it cannot be built."""
        path = self.path()
        if self.damage() is None:
            return path
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            why = self.damage()  # another process may have built it while this one waited
            if why is None:
                return path
            damaged = os.path.exists(path)
            cxx = compiler()
            for stale in os.listdir(os.path.dirname(path)):  # what a killed build left (the lock is ours)
                if stale.startswith(".build-"):
                    shutil.rmtree(os.path.join(os.path.dirname(path), stale), ignore_errors=True)
            logger.warning("Building this library's fused CPU kernels for TensorFlow %s into %s%s: about a minute, "
                           "once per TensorFlow version (OPTIMIZERS_NATIVE_KERNELS=0 skips them; "
                           "`python -m optimizers.kernels` builds them ahead of time).", tf.__version__,
                           os.path.dirname(path), f" (the cached one is damaged: {why})" if damaged else "")
            scratch = tempfile.mkdtemp(prefix=".build-", dir=os.path.dirname(path))
            try:
                output = os.path.join(scratch, _LIBRARY)
                command = [cxx, *self.flags, *self.sources, "-o", output, *_tensorflow_flags()]
                result = subprocess.run(command, capture_output=True, text=True, check=False)
                if result.returncode != 0:
                    raise RuntimeError(f"Building {' '.join(self.sources)} with {cxx} failed:\n{result.stderr[-4000:]}")
                version = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False).stdout
                record = {"size": os.path.getsize(output), "sha256": _sha256(output), "compiler": cxx,
                          "compiler_version": version.splitlines()[0] if version else "", "tensorflow": tf.__version__,
                          "python": sys.version.split()[0]}
                with open(output + ".json", "w") as f:
                    json.dump(record, f)
                os.replace(output, path)  # atomic; a reader checks the library against the record
                os.replace(output + ".json", path + ".json")
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        return path

    def load(self) -> Any:
        """The loaded library: the cached one where it is whole, else built first. Raises
        ``RuntimeError`` where it is damaged or missing and cannot be built."""
        why = self.damage()
        if why is not None:
            try:
                compiler()
            except RuntimeError as error:
                raise RuntimeError(f"{why}, and it cannot be rebuilt: {error}") from None
        return tf.load_op_library(self.build())


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
