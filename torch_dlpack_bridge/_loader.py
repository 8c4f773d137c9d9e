"""Finds and loads the exchange table library that matches the running torch.

In order: a library shipped in the package (one per torch minor and C++ ABI, see _build.TorchTarget), then one
built earlier into the per-user cache, then (first import on a torch no shipped library covers) a build from the
sources the package ships, into that cache, under a file lock. Every failure is an ImportError that names the
cause and the fix; a library is never loaded for a torch it was not built for.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Dict, Tuple

import torch

from . import _build

BUILD_ENV = "TORCH_DLPACK_BRIDGE_BUILD"
"""``0`` forbids building the table at import (a torch with no shipped library then raises ImportError)."""
CACHE_ENV = "TORCH_DLPACK_BRIDGE_CACHE"
"""Where libraries built at import go (default: ``$XDG_CACHE_HOME/torch_dlpack_bridge`` or ``~/.cache/...``)."""
SHIPPED_DIR = os.path.join(_build.PACKAGE_DIR, "_lib")


def cache_root() -> str:
    if os.environ.get(CACHE_ENV):
        return os.environ[CACHE_ENV]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "torch_dlpack_bridge")


def cache_dir(target: _build.TorchTarget, package_version: str) -> str:
    """One folder per exact torch version, C++ ABI, flavour, package version and sources (an upgrade, or an
    edited checkout, rebuilds instead of loading a stale library)."""
    flavour = "rocm" if target.rocm else "generic"
    abi = "cxx11" if target.cxx11_abi else "precxx11"
    return os.path.join(cache_root(), f"torch{target.version}-{abi}-{flavour}-tdb{package_version}-"
                                      f"{_build.sources_digest()}")


def locate(target: _build.TorchTarget, package_version: str) -> Tuple[str, str]:
    """(path, origin) of the library to load: "shipped", "cache", or "build" (not there yet)."""
    shipped = os.path.join(SHIPPED_DIR, target.library_name)
    if target.is_release and os.path.isfile(shipped):
        return shipped, "shipped"
    cached = os.path.join(cache_dir(target, package_version), target.library_name)
    return cached, "cache" if os.path.isfile(cached) else "build"


def build_into_cache(target: _build.TorchTarget, path: str) -> bool:
    """Builds the library at `path` once, even when several processes import at the same time; False when
    another process built it meanwhile."""
    import fcntl
    import time

    if os.environ.get(BUILD_ENV, "1") == "0":
        raise ImportError(f"torch_dlpack_bridge ships no table library for torch {target.version}"
                          f"{uncovered_reason(target)}, and {BUILD_ENV}=0 forbids building one. Unset {BUILD_ENV} "
                          f"to build it once (needs a C++ compiler), or use a torch the wheel covers "
                          f"({covered_torch()}).")
    if _build.find_compiler() is None:
        raise ImportError(f"torch_dlpack_bridge ships no table library for torch {target.version}"
                          f"{uncovered_reason(target)}, and building one needs a C++ compiler, which was not found "
                          f"(set CXX, or install g++: e.g. `apt install g++` or `dnf install gcc-c++`). Or use a "
                          f"torch the wheel covers ({covered_torch()}).")
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second process waits here, then finds the library built
        if os.path.isfile(path):
            return False
        jobs = os.cpu_count() or 1
        print(f"torch_dlpack_bridge: building the exchange table for torch {target.version}, first import only, "
              f"about {estimated_build_seconds(jobs)} s (into {folder})", file=sys.stderr, flush=True)
        start = time.monotonic()
        with open(os.path.join(folder, "build.log"), "w") as log:
            try:
                _build.compile_table(target, path, jobs=jobs, log=log)
            except (RuntimeError, OSError) as error:
                raise ImportError(f"torch_dlpack_bridge: building the exchange table for torch {target.version} "
                                  f"failed (log: {log.name}):\n{error}") from None
            log.write(f"built in {time.monotonic() - start:.1f} s\n")
    return True


def estimated_build_seconds(jobs: int) -> int:
    # Measured: about 35 s of compiler time in all (9 sources and a header check), spread over the cores.
    return 5 + 35 // min(jobs, 8)


def uncovered_reason(target: _build.TorchTarget) -> str:
    if not target.is_release:
        return " (a pre-release or source build: no shipped library is trusted for it)"
    if target.rocm:
        return " (a ROCm build)"
    return ""


def covered_torch() -> str:
    shipped = sorted(name for name in os.listdir(SHIPPED_DIR)) if os.path.isdir(SHIPPED_DIR) else []
    return ", ".join(name[len("libtdb_"):-len(".so")] for name in shipped) or "none in this install"


def load(package_version: str) -> Tuple[ctypes.PyDLL, Dict[str, str]]:
    """Loads the table library for the running torch; returns it and what it was built against."""
    target = _build.installed_torch()
    path, origin = locate(target, package_version)
    if origin == "build" and not build_into_cache(target, path):
        origin = "cache"
    try:
        library = ctypes.PyDLL(path)  # PyDLL: calls keep the GIL and check for a Python error
    except OSError as error:
        raise ImportError(f"torch_dlpack_bridge: cannot load {path} for torch {target.version}: {error}. "
                          f"Reinstall torch_dlpack_bridge, or delete the file to rebuild it.") from None
    library.tdb_build_info.restype = ctypes.c_char_p
    info = dict(line.split("=", 1) for line in library.tdb_build_info().decode().splitlines())
    built = _build.version_tuple(info["torch_version"]), info["cxx11_abi"] == "1"
    if built != (target.minor, target.cxx11_abi):
        raise ImportError(f"torch_dlpack_bridge: {path} was built for torch {info['torch_version']} (C++11 ABI "
                          f"{built[1]}), not for the running torch {target.version} (C++11 ABI {target.cxx11_abi}). "
                          "Reinstall torch_dlpack_bridge, or delete the file to rebuild it.")
    info.update(library=path, origin=origin)
    return library, info
