"""Finds and loads the exchange table library that matches the running torch.

In order: a library shipped in the package (one per torch minor and C++ ABI, see _build.TorchTarget), then one
built earlier into the per-user cache (_cache: nothing another user could have written is loaded), then a
build from the sources the package ships, into that cache, under a file lock. Every failure is an ImportError
that names the cause and the fix; a library is never loaded for a torch it was not built for.

A build's outcome is kept: the library, or a record of the failure, so a failing compiler costs one try, not
one per process (`python -m torch_dlpack_bridge build` tries again). Where the cache cannot be used, the
library is built into a private temporary folder for this process, removed once the library is loaded. A
cached library that fails to load or to identify itself is rebuilt once.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Dict, List, Optional, Tuple

from . import _build, _cache

BUILD_ENV = "TORCH_DLPACK_BRIDGE_BUILD"
"""``0`` forbids building the table at import (a torch with no shipped or cached library then raises ImportError)."""
CACHE_ENV = "TORCH_DLPACK_BRIDGE_CACHE"
"""Where libraries built at import go (default: ``$XDG_CACHE_HOME/torch_dlpack_bridge`` or ``~/.cache/...``);
an absolute path."""
TIMEOUT_ENV = "TORCH_DLPACK_BRIDGE_BUILD_TIMEOUT"
"""Seconds one compiler command may take at import before the build is abandoned (default 600)."""
SHIPPED_DIR = os.path.join(_build.PACKAGE_DIR, "_lib")
SYMBOLS = ("tdb_build_info", "tdb_exchange_api", "tdb_exchange_api_capsule", "tdb_autograd_probe_capsule",
           "tdb_version_bump_capsule", "tdb_autograd_layout_capsule")


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


def identify(library: ctypes.PyDLL, path: str, target: _build.TorchTarget) -> Dict[str, str]:
    """What the loaded `library` says it was built against; raises Unusable (unloading it again, so that a
    rebuilt file under the same name is really loaded) unless it is a table library built for `target`."""
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
            return info
        problem = (f"{path} was built for torch {info['torch_version']} (C++11 ABI {built[1]}) and "
                   f"{describe_python_abi(built[2])}, not for the running torch {target.version} (C++11 ABI "
                   f"{target.cxx11_abi}) and {describe_python_abi(target.python_abi)}")
    import _ctypes

    _ctypes.dlclose(library._handle)
    raise Unusable(problem)


def open_shipped(path: str, target: _build.TorchTarget) -> Tuple[ctypes.PyDLL, Dict[str, str]]:
    """The library installed with the package (as trusted as the package's own Python files)."""
    try:
        library = ctypes.PyDLL(path)
    except OSError as error:
        raise Unusable(f"cannot load {path}: {error}") from None
    return library, identify(library, path, target)


def open_cached(folder: int, target: _build.TorchTarget, path: str) -> Tuple[ctypes.PyDLL, Dict[str, str]]:
    """Loads the library `path` from the open, checked cache folder `folder`, exactly the file checked.
    Raises FileNotFoundError (none there), _cache.Untrusted, or Unusable."""
    try:
        fd = _cache.open_file(folder, target.library_name, path)
    except ValueError as why:
        raise Unusable(str(why)) from None
    try:
        library = _cache.load_descriptor(fd, path)
    except OSError as error:
        raise Unusable(f"cannot load {path}: {error}") from None
    finally:
        os.close(fd)
    return library, identify(library, path, target)


def describe_python_abi(python_abi: str) -> str:
    return "a CPython with a GIL" if python_abi == "gil" else f"free-threaded CPython ({python_abi})"


class Deferred(ImportError):
    """Not a failure: torch has a table of its own and no library of this package is ready for it, so the
    table is not built inside `import torch` (it takes 20-60 s, which a process that needs 50 ns less per
    tensor never wins back), nor a recorded failure repeated. `notice` is the line to print, or None where it
    was printed before (see deferral)."""

    def __init__(self, message: str, notice: Optional[str]):
        super().__init__(message)
        self.notice = notice


class NewerTorch(Deferred):
    """Not a failure: torch is newer than the installed wheel covers and has a table of its own, which stays
    (the main job raises it rather than build: see newer_than_shipped); its message is the one line to say."""


def load(package_version: str, defer_build: bool = False, retry_failed: bool = False,
         notice_once: bool = False, keep_newer: bool = False) -> Tuple[ctypes.PyDLL, Dict[str, str]]:
    """Loads the table library for the running torch; returns it and what it was built against (plus
    `library`, its path, and `origin`: "shipped", "cache", "build", or "private": built into a temporary
    folder for this process, removed once loaded). With `defer_build`, raises Deferred instead of building;
    with `keep_newer` (torch has a table of its own), NewerTorch instead of building for a torch newer than the
    wheel covers; a build that failed before is not tried again unless `retry_failed`. Every failure is an
    ImportError; with `notice_once` (the `import torch` hook), one saying that no build can start carries a
    `notice`, None once said for this torch (see first_notice)."""
    target = _build.installed_torch()
    shipped = os.path.join(SHIPPED_DIR, target.library_name)
    if target.is_release and os.path.isfile(shipped):
        try:
            return with_origin(*open_shipped(shipped, target), shipped, "shipped")
        except Unusable as why:
            raise ImportError(f"torch_dlpack_bridge: {why}. Reinstall torch_dlpack_bridge.") from None
    folder = cache_dir(target, package_version)
    newer = newer_than_shipped(target) if keep_newer else None
    try:
        return load_from_cache(target, folder, defer_build, retry_failed, notice_once, newer)
    except OSError as error:  # e.g. a file removed between two steps: still an ImportError, naming the path
        raise ImportError(f"torch_dlpack_bridge: {describe(error, folder)}") from None


def load_from_cache(target: _build.TorchTarget, folder: str, defer_build: bool, retry_failed: bool,
                    notice_once: bool, newer: Optional[str] = None) -> Tuple[ctypes.PyDLL, Dict[str, str]]:
    path = os.path.join(folder, target.library_name)
    problem = stale = None
    fd = -1
    try:
        try:
            fd = _cache.open_folder(cache_root(), os.path.basename(folder), create=False)
        except FileNotFoundError:
            pass  # nothing built yet
        except (_cache.Untrusted, OSError) as why:
            problem = describe(why, folder)
        if fd >= 0:
            try:
                return with_origin(*open_cached(fd, target, path), path, "cache")
            except FileNotFoundError:
                pass
            except _cache.Untrusted as why:
                problem = str(why)
            except Unusable as why:
                stale = str(why)
        if newer is not None:
            raise NewerTorch(newer, newer)
        if defer_build:
            raise deferral(target, folder, fd if problem is None else -1, problem)
        if fd >= 0 and problem is None and not retry_failed:
            raise_if_failed_before(fd, target)
        try:
            require_build_tools(target, stale or problem, "rebuilding it" if stale else "building one")
        except ImportError as error:
            # The hook says it once per torch (per process where the cache cannot be used): nothing changes
            # between imports until a compiler or Python's headers are installed, or the switch is unset.
            if notice_once:
                error.notice = str(error) if problem is not None or first_notice(target, folder, fd)[0] else None
            raise
        if problem is None and fd < 0:
            try:
                fd = _cache.open_folder(cache_root(), os.path.basename(folder), create=True)
            except (_cache.Untrusted, OSError) as why:
                problem = describe(why, folder)
        if problem is not None:
            return build_private(target, problem)
        try:
            built = build_into_cache(target, fd, path, stale, retry_failed)
        except Unusable as why:  # the cache folder turned out unwritable (locking, logging)
            return build_private(target, str(why))
        try:
            return with_origin(*open_cached(fd, target, path), path, "build" if built else "cache")
        except (Unusable, _cache.Untrusted, FileNotFoundError) as why:
            raise ImportError(f"torch_dlpack_bridge: {why}, right after building it (log: "
                              f"{os.path.join(folder, 'build.log')}).") from None
    finally:
        if fd >= 0:
            os.close(fd)


def describe(why: Exception, where: str) -> str:
    """Why the cache folder `where` cannot be used, naming the path an OSError was about and, where permission
    was refused, the owner and mode of that path or of the folder holding it."""
    if not isinstance(why, OSError):
        return str(why)
    path = why.filename if isinstance(why.filename, str) and os.path.isabs(why.filename) else where
    detail = ""
    if isinstance(why, PermissionError):
        import stat

        for candidate in (path, os.path.dirname(path)):
            try:
                info = os.stat(candidate)
            except OSError:
                continue
            detail = (f" ({candidate} belongs to uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):o}; this user "
                      f"is uid {os.geteuid()})")
            break
    return f"cannot use {path}: {why.strerror or why}{detail}"


BUILD_COMMAND = "python -m torch_dlpack_bridge build"
FAILED_RECORD = "build-failed.json"
NOTICE_RECORD = "notice-given.json"


def build_key(target: _build.TorchTarget) -> str:
    """What could change a build's outcome beyond the cache folder's name (torch version and ABI, Python ABI,
    package version and sources): the compiler (its path, size and date) and the whole command line."""
    import hashlib
    import json

    cxx = _build.find_compiler() or ""
    try:
        info = os.stat(cxx)
        identity = [info.st_size, info.st_mtime_ns]
    except OSError:
        identity = []
    command = [cxx, *identity, *_build.compile_flags(target), *_build.link_flags(target)]
    return hashlib.sha256(json.dumps(command).encode()).hexdigest()[:16]


def recorded_failure(folder: int, target: _build.TorchTarget) -> Optional[Dict[str, str]]:
    """The failure recorded in the open cache folder for the same build, if any."""
    record = _cache.read_record(folder, FAILED_RECORD)
    return record if record is not None and record.get("key") == build_key(target) else None


class FailedBefore(ImportError):
    """A build that failed before, repeated at no cost. An explicit import raises it with the whole error; the
    `import torch` hook says nothing (`notice` None, as for Deferred): the process whose build failed said it,
    and `python -m torch_dlpack_bridge` says it again on demand."""

    notice = None


def raise_if_failed_before(folder: int, target: _build.TorchTarget) -> None:
    """FailedBefore repeating a failure recorded in the open cache folder for the same build, at no cost."""
    record = recorded_failure(folder, target)
    if record is None:
        return
    raise FailedBefore(f"torch_dlpack_bridge: building the exchange table for torch {target.version} failed on "
                       f"{record.get('when')} (log: {record.get('log')}); it is not tried again until torch, this "
                       f"package, the compiler or its flags change, or `{BUILD_COMMAND}` retries it. The error "
                       f"was:\n{record.get('error')}")


def first_notice(target: _build.TorchTarget, folder: str, fd: int) -> Tuple[bool, Optional[str]]:
    """Whether the `import torch` hook's one notice for the cache folder `folder` (open as `fd`, or -1) is
    still to be said, recording there that it is now said; and why the folder cannot be used, if it cannot be
    opened: then nothing is recorded and the notice is said once per process (the hook runs once)."""
    opened = -1
    try:
        if fd < 0:
            fd = opened = _cache.open_folder(cache_root(), os.path.basename(folder), create=True)
        if _cache.read_record(fd, NOTICE_RECORD) is not None:
            return False, None
        _cache.write_record(fd, NOTICE_RECORD, {"torch": target.version})
    except (_cache.Untrusted, OSError) as why:
        return True, describe(why, folder) if fd < 0 else None
    finally:
        if opened >= 0:
            os.close(opened)
    return True, None


def deferral(target: _build.TorchTarget, folder: str, fd: int, problem: Optional[str]) -> Deferred:
    """Deferred, where torch has a table of its own and no library of this package is ready, with the one line
    `import torch` prints: what is the case and the one command that changes it. Said once per cache folder
    (one per torch version: recorded there); where the cache cannot be used (`problem`) nothing can be
    recorded, so it is said once per process (the hook runs once), with why and where a build would go."""
    case = f"torch_dlpack_bridge: torch {target.version} keeps its own DLPack exchange table"
    message = f"torch_dlpack_bridge: not built for torch {target.version}; torch's own table stays"
    if problem is None:
        first, problem = first_notice(target, folder, fd)
        if not first:
            return Deferred(message, None)
    if problem is not None:
        return Deferred(message, f"{case}: this package's cache cannot be used ({problem}), so `{BUILD_COMMAND}` "
                                 f"would build ours into a temporary folder for that one process only; set "
                                 f"{CACHE_ENV} to a folder of yours, then `{BUILD_COMMAND}` builds it once for all.")
    failed = recorded_failure(fd, target)
    if failed is not None:
        return Deferred(message, f"{case}: building this package's for it failed on {failed.get('when')} (log: "
                                 f"{failed.get('log')}); `{BUILD_COMMAND}` tries again.")
    covered = newer_than_covered(target)
    if covered is not None:  # the release that covers it is the way out most take: said first
        return Deferred(message, f"{case}: it is newer than this wheel covers (torch {covered[0]} to {covered[1]}); "
                                 f"`{UPGRADE_COMMAND}` gets the release that covers it (one follows each torch "
                                 f"minor), or `{BUILD_COMMAND}` builds ours once into {folder}, then later "
                                 f"processes publish it.")
    return Deferred(message, f"{case}: no library of this package is built for it yet{uncovered_reason(target)}, "
                             f"and building one takes 20-60 s, too long for `import torch`; `{BUILD_COMMAND}` builds it once into "
                             f"{folder}, then later processes publish it.")


left_to_main = False
"""True while `python -m torch_dlpack_bridge` imports the package: its __main__ loads the table once it has read
its arguments (`build` retries a recorded failure), so the package's import leaves it (see run_as_main)."""


def run_as_main(package: str) -> bool:
    """True while Python imports `package` to run its __main__ for ``-m``, however Python was started (``-m``,
    ``-um``, ``-I -m``, ``-X dev -m`` ...): Python sets sys.argv[0] to "-m" until the module is found (as its
    documentation of ``-m`` says), and runpy's _get_module_details is asking for `package`.__main__ (not for a
    module of another package whose import imports this one)."""
    if sys.argv[:1] != ["-m"]:
        return False
    frame = sys._getframe(1)
    while frame is not None:
        if (frame.f_code.co_name == "_get_module_details" and frame.f_globals.get("__name__") == "runpy"
                and frame.f_locals.get("mod_name") == f"{package}.__main__"):
            return True
        frame = frame.f_back
    return False


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


def compile_logged(target: _build.TorchTarget, path: str, folder: int,
                   commands: Optional[_build.Commands] = None) -> None:
    """Compiles the library at `path` (atomically), writing every command and its output to build.log in the
    open folder `folder` (a new file, never through a symbolic link); an ImportError naming the log if the
    build fails. `commands`: those of a caller that watches folders of its own (build_private)."""
    import time

    start = time.monotonic()
    log_path = os.path.join(os.path.dirname(path), "build.log")
    try:
        fd = _cache.create_new(folder, "build.log")
        os.ftruncate(fd, 0)
    except OSError as error:
        raise Unusable(f"cannot write {log_path}: {error.strerror or error}") from None
    with os.fdopen(fd, "w") as log:
        try:
            _build.compile_table(target, path, jobs=os.cpu_count() or 1, log=log, timeout=build_timeout(),
                                 commands=commands)
        except (RuntimeError, OSError) as error:
            limit = f" ({TIMEOUT_ENV} sets the limit)" if isinstance(error, _build.BuildTimeout) else ""
            raise ImportError(f"torch_dlpack_bridge: building the exchange table for torch {target.version} "
                              f"failed{limit} (log: {log_path}):\n{error}") from None
        log.write(f"built in {time.monotonic() - start:.1f} s\n")


def build_into_cache(target: _build.TorchTarget, folder: int, path: str, stale: Optional[str],
                     retry_failed: bool) -> bool:
    """Builds the library at `path` in the open cache folder `folder` once, even when several processes
    import at the same time (False when another process built it meanwhile); `stale` says why an existing
    file there is replaced. A failure is recorded there (see raise_if_failed_before). Raises Unusable when
    the folder cannot be locked or written."""
    import fcntl
    import time

    try:
        lock = _cache.create_new(folder, ".lock")
    except OSError as error:
        raise Unusable(f"cannot lock {os.path.dirname(path)}/.lock: {error.strerror or error}") from None
    try:
        # A second process waits here, then finds the library built (or failed). A POSIX record lock (lockf:
        # fcntl F_SETLKW), not flock or an OFD lock: it is this process's own, so a process forked while it is held
        # (a fork-method multiprocessing worker) does not hold it, and it goes when this process closes the file
        # or ends. flock and OFD locks belong to the open file, which a forked child shares: closing it here would
        # not release them while such a child lives. Its catch, that closing any descriptor of the file releases
        # it, is harmless: only this function opens .lock, in one thread at a time (_table's lock).
        fcntl.lockf(lock, fcntl.LOCK_EX)
        if stale is None and os.path.lexists(path):
            return False
        if not retry_failed:
            raise_if_failed_before(folder, target)
        progress(target, f"again ({stale})" if stale else "once for this torch", f"into {os.path.dirname(path)}")
        try:
            compile_logged(target, path, folder)
        except ImportError as error:
            _cache.write_record(folder, FAILED_RECORD, {
                "key": build_key(target), "when": time.strftime("%Y-%m-%d %H:%M:%S"),
                "log": os.path.join(os.path.dirname(path), "build.log"), "error": str(error).split("\n", 1)[-1][-2000:]})
            raise
        _cache.remove_record(folder, FAILED_RECORD)
        return True
    finally:
        os.close(lock)


def build_private(target: _build.TorchTarget, reason: str) -> Tuple[ctypes.PyDLL, Dict[str, str]]:
    """Builds into a new 0700 temporary folder, loads the library and removes the folder (the loaded library
    stays mapped); on a failure the folder stays, for its build.log. The build's watchdog knows the folder from
    before it is made until it is removed: stopped or interrupted at any moment, the build leaves none."""
    import shutil
    import tempfile

    with _build.Commands() as commands:
        try:
            folder = commands.new_folder(tempfile.gettempdir(), "torch_dlpack_bridge-")
            fd = os.open(folder, _cache.FOLDER_FLAGS)
        except OSError as error:
            raise ImportError(f"torch_dlpack_bridge: the cache cannot be used ({reason}) and no temporary folder "
                              f"can be made ({error}); set {CACHE_ENV} to a folder of your own.") from None
        path = os.path.join(folder, target.library_name)
        progress(target, "for this process only", f"into a private temporary folder {folder}, because the cache "
                                                  f"cannot be used: {reason}")
        try:
            compile_logged(target, path, fd, commands)
            library, info = open_cached(fd, target, path)
        except (Unusable, _cache.Untrusted) as why:
            raise ImportError(f"torch_dlpack_bridge: {why} (log: {folder}/build.log)") from None
        finally:
            os.close(fd)
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


def shipped_versions() -> List[str]:
    """The torch versions the libraries installed with the package were built against (the wheel's record,
    written by setup.py), oldest first; none where it has no record (an sdist install builds at import)."""
    try:
        with open(os.path.join(SHIPPED_DIR, _build.VERSIONS_RECORD)) as f:
            versions = f.read().split()
    except OSError:
        return []
    return sorted(versions, key=_build.version_tuple)


UPGRADE_COMMAND = "pip install -U torch_dlpack_bridge"


def newer_than_covered(target: _build.TorchTarget) -> Optional[Tuple[str, str]]:
    """The oldest and newest torch the wheel covers, where `target` is a minor newer than the newest; else None."""
    covered = shipped_versions()
    if not covered or target.minor <= _build.version_tuple(covered[-1]):
        return None
    return covered[0], covered[-1]


def newer_than_shipped(target: _build.TorchTarget) -> Optional[str]:
    """Where `target` is a minor newer than the newest the wheel covers: the main job's verdict, which says that
    torch's own table is in use, why, and the two ways out; else None."""
    covered = newer_than_covered(target)
    if covered is None:
        return None
    return (f"torch's own DLPack exchange table is in use: torch {target.version} is newer than this wheel covers "
            f"(torch {covered[0]} to {covered[1]}); next: upgrade torch_dlpack_bridge (`{UPGRADE_COMMAND}`: a "
            f"release follows each torch minor) or build its table for this torch once (`{BUILD_COMMAND}`, needs a "
            f"C++ compiler)")


def covered_torch() -> str:
    shipped = sorted(name for name in os.listdir(SHIPPED_DIR)) if os.path.isdir(SHIPPED_DIR) else []
    return ", ".join(name[len("libtdb_"):-len(".so")] for name in shipped) or "none in this install"
