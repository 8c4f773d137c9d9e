"""Finds and loads the exchange table library that matches the running torch.

In order: a library shipped in the package (one per torch minor and C++ ABI, see _build.TorchTarget), then one
built earlier into the per-user cache, then (first import on a torch no shipped library covers) a build from the
sources the package ships, into that cache, under a file lock. Every failure is an ImportError that names the
cause and the fix; a library is never loaded for a torch it was not built for.

The cache is trusted only while no one else can write to it: its folders are created 0700, and a folder or
library that is not the current user's, is writable by group or others, or is a symbolic link is never loaded.
Where the cache cannot be used (unwritable, untrusted), the library is built into a private temporary folder
for this process and that folder is removed once the library is loaded. A cached library that fails to load
or to identify itself is rebuilt once.
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys
from typing import Dict, Optional, Tuple

import torch

from . import _build

BUILD_ENV = "TORCH_DLPACK_BRIDGE_BUILD"
"""``0`` forbids building the table at import (a torch with no shipped or cached library then raises ImportError)."""
CACHE_ENV = "TORCH_DLPACK_BRIDGE_CACHE"
"""Where libraries built at import go (default: ``$XDG_CACHE_HOME/torch_dlpack_bridge`` or ``~/.cache/...``);
an absolute path."""
TIMEOUT_ENV = "TORCH_DLPACK_BRIDGE_BUILD_TIMEOUT"
"""Seconds one compiler command may take at import before the build is abandoned (default 600)."""
SHIPPED_DIR = os.path.join(_build.PACKAGE_DIR, "_lib")
SYMBOLS = ("tdb_build_info", "tdb_exchange_api", "tdb_exchange_api_capsule")


class Unusable(Exception):
    """A library file that must not (or cannot) serve this torch; the message says why."""


def cache_root() -> str:
    configured = os.environ.get(CACHE_ENV)
    if configured:
        if not os.path.isabs(configured):  # else the library loaded would depend on the working directory
            raise ImportError(f"torch_dlpack_bridge: {CACHE_ENV}={configured!r} is a relative path; set it to an "
                              f"absolute path, or unset it to use the default cache.")
        return configured
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = xdg if xdg and os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".cache")  # as XDG says
    return os.path.join(base, "torch_dlpack_bridge")


def cache_dir(target: _build.TorchTarget, package_version: str) -> str:
    """One folder per exact torch version, C++ ABI, flavour, package version and sources (an upgrade, or an
    edited checkout, rebuilds instead of loading a stale library)."""
    flavour = "rocm" if target.rocm else "generic"
    abi = "cxx11" if target.cxx11_abi else "precxx11"
    return os.path.join(cache_root(), f"torch{target.version}-{abi}-{flavour}-{target.python_abi}-"
                                      f"tdb{package_version}-{_build.sources_digest()}")


def untrusted(path: str, follow_links: bool = False) -> Optional[str]:
    """Why another local user could have written `path` (so nothing in or at it may run), or None."""
    info = os.stat(path) if follow_links else os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symbolic link"
    if info.st_uid != os.geteuid():
        return f"{path} belongs to uid {info.st_uid}, not to this user (uid {os.geteuid()})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is writable by group or others (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def check_cache(folder: str, create: bool) -> Optional[str]:
    """Why the cache root and `folder` cannot hold a library this process loads, or None; with `create`,
    makes them first (0700). The root may be a symbolic link of the user's own; `folder` may not."""
    for path, follow_links in ((os.path.dirname(folder), True), (folder, False)):
        try:
            if create and not os.path.lexists(path):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                try:
                    os.mkdir(path, 0o700)
                except FileExistsError:
                    pass  # another process made it meanwhile
            problem = untrusted(path, follow_links)
        except OSError as error:
            return f"cannot use {path}: {error.strerror or error}"
        if problem is not None:
            return problem
    return None


def open_library(path: str, target: _build.TorchTarget) -> Tuple[ctypes.PyDLL, Dict[str, str]]:
    """Loads `path` and checks that it is a table library built for `target`; raises Unusable (unloading it
    again, so that a rebuilt file under the same name is really loaded)."""
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        raise Unusable(f"{path} is empty or not a file")
    try:
        library = ctypes.PyDLL(path)  # PyDLL: calls keep the GIL and check for a Python error
    except OSError as error:
        raise Unusable(f"cannot load {path}: {error}") from None
    try:
        for name in SYMBOLS:
            getattr(library, name)
        library.tdb_build_info.restype = ctypes.c_char_p
        info = dict(line.split("=", 1) for line in library.tdb_build_info().decode().splitlines())
        built = _build.version_tuple(info["torch_version"]), info["cxx11_abi"] == "1", info["python_abi"]
    except (AttributeError, KeyError, ValueError) as error:
        problem = f"{path} is not a table library of this package ({type(error).__name__}: {error})"
    else:
        if built == (target.minor, target.cxx11_abi, target.python_abi):
            return library, info
        problem = (f"{path} was built for torch {info['torch_version']} (C++11 ABI {built[1]}) and "
                   f"{describe_python_abi(built[2])}, not for the running torch {target.version} (C++11 ABI "
                   f"{target.cxx11_abi}) and {describe_python_abi(target.python_abi)}")
    import _ctypes

    _ctypes.dlclose(library._handle)
    raise Unusable(problem)


def describe_python_abi(python_abi: str) -> str:
    return "a CPython with a GIL" if python_abi == "gil" else f"free-threaded CPython ({python_abi})"


def load(package_version: str) -> Tuple[ctypes.PyDLL, Dict[str, str]]:
    """Loads the table library for the running torch; returns it and what it was built against (plus
    `library`, its path, and `origin`: "shipped", "cache", "build", or "private": built into a temporary
    folder for this process, removed once loaded)."""
    target = _build.installed_torch()
    shipped = os.path.join(SHIPPED_DIR, target.library_name)
    if target.is_release and os.path.isfile(shipped):
        try:
            return with_origin(*open_library(shipped, target), shipped, "shipped")
        except Unusable as why:
            raise ImportError(f"torch_dlpack_bridge: {why}. Reinstall torch_dlpack_bridge.") from None

    folder = cache_dir(target, package_version)
    path = os.path.join(folder, target.library_name)
    problem = stale = None
    if os.path.lexists(path):
        problem = check_cache(folder, create=False) or untrusted(path)
        if problem is None:
            try:
                return with_origin(*open_library(path, target), path, "cache")
            except Unusable as why:
                stale = str(why)
    require_build_tools(target, stale or problem, "rebuilding it" if stale else "building one")
    problem = problem or check_cache(folder, create=True)
    if problem is not None:
        return build_private(target, problem)
    try:
        built = build_into_cache(target, path, stale)
    except Unusable as why:  # the cache folder turned out unwritable (locking, logging)
        return build_private(target, str(why))
    try:
        return with_origin(*open_library(path, target), path, "build" if built else "cache")
    except Unusable as why:
        raise ImportError(f"torch_dlpack_bridge: {why}, right after building it (log: "
                          f"{os.path.join(folder, 'build.log')}).") from None


def with_origin(library: ctypes.PyDLL, info: Dict[str, str], path: str, origin: str):
    info.update(library=path, origin=origin)
    return library, info


def require_build_tools(target: _build.TorchTarget, problem: Optional[str], building: str) -> None:
    """ImportError naming the cause and the fix unless a build at import can run here."""
    start = (f"torch_dlpack_bridge: {problem}" if problem else
             f"torch_dlpack_bridge ships no table library for torch {target.version}{uncovered_reason(target)}")
    covered = f"use a torch the wheel covers ({covered_torch()})"
    if os.environ.get(BUILD_ENV, "1") == "0":
        raise ImportError(f"{start}, and {BUILD_ENV}=0 forbids {building}. Unset {BUILD_ENV} to build it once "
                          f"(needs a C++ compiler), or {covered}.")
    if _build.find_compiler() is None:
        raise ImportError(f"{start}, and {building} needs a C++ compiler, which was not found (set CXX, or install "
                          f"g++: e.g. `apt install g++` or `dnf install gcc-c++`). Or {covered}.")
    headers = _build.python_include_dir()
    if not os.path.isfile(os.path.join(headers, "Python.h")):
        version = "{}.{}".format(*sys.version_info[:2])
        raise ImportError(f"{start}, and {building} needs Python's C headers, which are missing ({headers}/Python.h): "
                          f"install them (e.g. `apt install python{version}-dev` or `dnf install "
                          f"python{version}-devel`), or {covered}.")


def build_timeout() -> float:
    value = os.environ.get(TIMEOUT_ENV, "600")
    try:
        return float(value)
    except ValueError:
        raise ImportError(f"torch_dlpack_bridge: {TIMEOUT_ENV}={value!r} is not a number of seconds") from None


def progress(target: _build.TorchTarget, when: str, where: str) -> None:
    low = estimated_build_seconds(os.cpu_count() or 1)
    print(f"torch_dlpack_bridge: building the exchange table for torch {target.version}, {when}, about "
          f"{low}-{2 * low} s ({where})", file=sys.stderr, flush=True)


def compile_logged(target: _build.TorchTarget, path: str, log_path: str) -> None:
    """Compiles the library at `path` (atomically), writing every command and its output to `log_path` (a
    new file, never through a symbolic link); an ImportError naming the log if the build fails."""
    import time

    start = time.monotonic()
    try:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as error:
        raise Unusable(f"cannot write {log_path}: {error.strerror or error}") from None
    with os.fdopen(fd, "w") as log:
        try:
            _build.compile_table(target, path, jobs=os.cpu_count() or 1, log=log, timeout=build_timeout())
        except (RuntimeError, OSError) as error:
            limit = f" ({TIMEOUT_ENV} sets the limit)" if isinstance(error, _build.BuildTimeout) else ""
            raise ImportError(f"torch_dlpack_bridge: building the exchange table for torch {target.version} "
                              f"failed{limit} (log: {log_path}):\n{error}") from None
        log.write(f"built in {time.monotonic() - start:.1f} s\n")


def build_into_cache(target: _build.TorchTarget, path: str, stale: Optional[str]) -> bool:
    """Builds the library at `path` once, even when several processes import at the same time (False when
    another process built it meanwhile); `stale` says why an existing file there is replaced. Raises Unusable
    when the folder cannot be locked or written."""
    import fcntl

    folder = os.path.dirname(path)
    try:
        lock = os.open(os.path.join(folder, ".lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second process waits here, then finds the library built
    except OSError as error:
        raise Unusable(f"cannot lock {folder}/.lock: {error.strerror or error}") from None
    try:
        if stale is None and os.path.isfile(path):
            return False
        progress(target, f"again ({stale})" if stale else "first import only", f"into {folder}")
        compile_logged(target, path, os.path.join(folder, "build.log"))
        return True
    finally:
        os.close(lock)


def build_private(target: _build.TorchTarget, reason: str) -> Tuple[ctypes.PyDLL, Dict[str, str]]:
    """Builds into a new 0700 temporary folder, loads the library and removes the folder (the loaded library
    stays mapped); on a failure the folder stays, for its build.log."""
    import shutil
    import tempfile

    try:
        folder = tempfile.mkdtemp(prefix="torch_dlpack_bridge-")
    except OSError as error:
        raise ImportError(f"torch_dlpack_bridge: the cache cannot be used ({reason}) and no temporary folder can "
                          f"be made ({error}); set {CACHE_ENV} to a folder of your own.") from None
    path = os.path.join(folder, target.library_name)
    progress(target, "for this process only", f"into a private temporary folder {folder}, because the cache "
                                              f"cannot be used: {reason}")
    try:
        compile_logged(target, path, os.path.join(folder, "build.log"))
    except Unusable as why:
        raise ImportError(f"torch_dlpack_bridge: {why}") from None
    try:
        library, info = open_library(path, target)
    except Unusable as why:
        raise ImportError(f"torch_dlpack_bridge: {why}, right after building it (log: {folder}/build.log).") from None
    shutil.rmtree(folder, ignore_errors=True)
    return with_origin(library, info, path, "private")


def estimated_build_seconds(jobs: int) -> int:
    # Measured: about 35 s of compiler time in all (9 sources and a header check), spread over the cores; a
    # busy machine takes up to twice as long (the progress line gives that range).
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
