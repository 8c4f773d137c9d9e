"""Compiles the exchange table library (csrc/) against one torch: the one place that knows how.

Three callers share it: setup.py (a developer build against the installed torch, or the release build against
unpacked torch wheels, see scripts/build_wheels.sh), and the loader (a torch no prebuilt library covers is built
once into a per-user cache). It imports neither torch nor the package, so setup.py can load it by path.

The library is not a CPython extension module: it is loaded with ctypes and only makes the few C API calls
whose ABI every CPython 3.9+ shares, so one build per torch minor serves every Python version.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import List, Optional, Sequence, Set, Tuple

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
PACKAGE_VERSION = "0.1.0"  # torch_dlpack_bridge.__version__; part of the key of the cache's folders
VERSIONS_RECORD = "torch_versions.txt"
"""Beside the libraries a build ships (_lib/): the torch versions they were built against, one a line."""


@dataclass(frozen=True)
class TorchTarget:
    """The torch a table library is compiled against and must be loaded with."""

    version: str  # torch.__version__, e.g. "2.13.0+cpu"
    cxx11_abi: bool  # torch._C._GLIBCXX_USE_CXX11_ABI
    rocm: bool  # a ROCm (HIP) build of torch
    root: str  # the directory holding torch's include/ and lib/
    python_abi: str = "gil"  # the CPython it runs in: "gil" (any, 3.9+), or one free-threaded one ("cp313t")

    @property
    def minor(self) -> Tuple[int, int]:
        return version_tuple(self.version)

    @property
    def is_release(self) -> bool:
        """A release (2.13.0, 2.13.0+cu130); nightlies and source builds (2.16.0.dev2026..., 2.13.0a0+git...)
        may change torch's ABI within a minor, so no prebuilt library is trusted for them."""
        return re.fullmatch(r"\d+\.\d+\.\d+(\+[\w.]+)?", self.version) is not None

    @property
    def library_name(self) -> str:
        """One library per torch minor, C++ ABI and flavour, and per free-threaded CPython (whose reference
        counting differs from a GIL build's and between its versions): what changes the ABI, nothing else."""
        major, minor = self.minor
        abi = "cxx11" if self.cxx11_abi else "precxx11"
        python = "" if self.python_abi == "gil" else f"_{self.python_abi}"
        return f"libtdb_torch{major}.{minor}_{abi}{'_rocm' if self.rocm else ''}{python}.so"


def version_tuple(version: str) -> Tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        raise ValueError(f"cannot read a torch version from {version!r}")
    return int(match.group(1)), int(match.group(2))


def installed_torch() -> TorchTarget:
    """The torch imported in this process."""
    import torch

    return TorchTarget(version=str(torch.__version__), cxx11_abi=bool(torch._C._GLIBCXX_USE_CXX11_ABI),
                       rocm=torch.version.hip is not None, root=os.path.dirname(os.path.abspath(torch.__file__)),
                       python_abi=running_python_abi())


def running_python_abi() -> str:
    """"gil", or "cp313t" and the like for a free-threaded CPython (built with Py_GIL_DISABLED: "t" in its
    ABI flags, as in its wheel tag; read without sysconfig, which is slow to import)."""
    if "t" not in getattr(sys, "abiflags", ""):
        return "gil"
    return "cp{}{}t".format(*sys.version_info[:2])


def unpacked_torch(site: str) -> TorchTarget:
    """A torch wheel unpacked into `site` (holding torch/), read without importing it."""
    root = os.path.join(site, "torch")
    with open(os.path.join(root, "version.py")) as f:
        text = f.read()
    version = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", text).group(1)
    hip = re.search(r"^hip\s*(?::[^=]*)?=\s*(.+)$", text, re.M)
    return TorchTarget(version=version, cxx11_abi=uses_cxx11_abi(root),
                       rocm=hip is not None and hip.group(1).strip() != "None", root=root,
                       python_abi=running_python_abi())  # the headers compiled against are this Python's


def uses_cxx11_abi(root: str) -> bool:
    """Which C++ ABI an unpacked torch uses: TorchConfig.cmake says so up to torch 2.7; from 2.8 (C++11 ABI
    only) it does not, and libc10's exported c10::Error constructor tells (std::string is mangled as
    std::__cxx11::basic_string under the C++11 ABI, as "Ss" before it)."""
    with open(os.path.join(root, "share", "cmake", "Torch", "TorchConfig.cmake")) as f:
        stated = re.search(r"_GLIBCXX_USE_CXX11_ABI=([01])", f.read())
    if stated is not None:
        return stated.group(1) == "1"
    with open(os.path.join(root, "lib", "libc10.so"), "rb") as f:
        symbols = f.read()
    if b"_ZN3c105ErrorC1ENSt7__cxx11" in symbols:
        return True
    if b"_ZN3c105ErrorC1ESs" in symbols:
        return False
    raise ValueError(f"{root}: cannot tell which C++ ABI this torch uses")


def sources_dir() -> str:
    """csrc/ as shipped in the package (wheel or sdist install), or beside it in a source checkout."""
    for candidate in (os.path.join(PACKAGE_DIR, "_csrc"), os.path.join(os.path.dirname(PACKAGE_DIR), "csrc")):
        if os.path.isfile(os.path.join(candidate, "exchange_api.cpp")):
            return candidate
    raise FileNotFoundError(f"the table's C++ sources are missing (looked in {PACKAGE_DIR}/_csrc and ../csrc)")


def sources_digest(src: Optional[str] = None) -> str:
    """A short digest of the table's sources and the project headers they include."""
    import hashlib

    src = src or sources_dir()
    digest = hashlib.sha256()
    include = os.path.join(PACKAGE_DIR, "include", "torch_dlpack_bridge")
    for path in sorted(os.path.join(src, n) for n in os.listdir(src)) + [os.path.join(include, n) for n in ("dlpack.h", "names.h")]:
        if path.endswith((".cpp", ".cc", ".h")):
            with open(path, "rb") as f:
                digest.update(f.read())
    return digest.hexdigest()[:12]


def table_sources(src: str) -> List[str]:
    return sorted(os.path.join(src, name) for name in os.listdir(src)
                  if name.endswith(".cpp") and name != "probe.cpp")


def find_compiler() -> Optional[str]:
    import shutil

    cxx = os.environ.get("CXX")
    if cxx:
        return shutil.which(cxx)
    return shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")


def sanitized() -> bool:
    """ASan + UBSan build (TDB_SANITIZE=1, scripts/sanitize.sh)."""
    return os.environ.get("TDB_SANITIZE") == "1"


def warning_and_optimisation_flags() -> List[str]:
    if sanitized():
        return ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined", "-Wall"]
    # NDEBUG as torch's own release build: its headers' debug-only checks (TORCH_INTERNAL_ASSERT_DEBUG_ONLY in
    # Device, intrusive_ptr, TensorImpl accessors; the dispatcher's trace hook) stay out of the hot paths.
    return ["-O3", "-DNDEBUG", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]


def python_include_dir() -> str:
    """Where this Python's C headers (Python.h) are, or would be: a distribution's python3.X-dev package."""
    import sysconfig  # here, not at the top: it alone would double the package's import time

    return sysconfig.get_paths()["include"]


def compile_flags(target: TorchTarget) -> List[str]:
    # torch >= 2.10 builds its extensions as C++20 and its headers may rely on it; older headers want C++17.
    std = "c++20" if target.minor >= (2, 10) else "c++17"
    include = os.path.join(target.root, "include")
    # libstdc++'s headers read glibc's __libc_single_threaded (GLIBC_2.32) to skip atomics in single-threaded
    # processes; renamed to a flag of our own that is always 0 (always atomic), the library needs nothing newer
    # than glibc 2.28, as torch's own wheels.
    return [f"-std={std}", "-fPIC", "-fvisibility=hidden", f"-D_GLIBCXX_USE_CXX11_ABI={int(target.cxx11_abi)}",
            "-D__libc_single_threaded=tdb_libc_single_threaded",
            "-isystem", include, "-isystem", os.path.join(include, "torch", "csrc", "api", "include"),
            "-isystem", python_include_dir(), "-I", os.path.join(PACKAGE_DIR, "include"),
            ] + warning_and_optimisation_flags()


def link_flags(target: TorchTarget) -> List[str]:
    # torch is imported before the library is loaded, so its libraries are already in the process and the
    # loader matches them by soname; the rpath only helps tools (ldd) in a standard site-packages layout.
    return ["-shared", "-L", os.path.join(target.root, "lib"), "-lc10", "-ltorch_cpu", "-ltorch_python",
            "-Wl,-rpath,$ORIGIN/../../torch/lib", "-Wl,--as-needed"] + (
        ["-fsanitize=address,undefined"] if sanitized() else [])


def compile_table(target: TorchTarget, output: str, jobs: Optional[int] = None, src: Optional[str] = None,
                  log=None, timeout: Optional[float] = None, commands: Optional["Commands"] = None) -> str:
    """Compiles and links the table library for `target` into `output` (atomically and durably: linked under
    a temporary name in the same folder, fsynced, then renamed, so a crash never leaves a half-written file
    under that name). Raises RuntimeError with the compiler's output if it fails, or if one compiler command
    runs longer than `timeout` seconds. Should the build be interrupted or this process end, whatever ends it
    (a signal, the parent's death), the compilers are stopped and the temporary folder removed (see Commands:
    a caller with folders of its own passes the `commands` that watch them)."""
    from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

    cxx = find_compiler()
    if cxx is None:
        raise FileNotFoundError("no C++ compiler found (set CXX, or install g++ or clang++)")
    src = src or sources_dir()
    sources = table_sources(src)
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    with (contextlib.nullcontext(commands) if commands is not None else Commands()) as commands, \
            removed_at_end(commands.new_folder(os.path.dirname(os.path.abspath(output)), "tdb-build-")) as tmp:
        flags = compile_flags(target)

        def compile_one(source: str) -> str:
            obj = os.path.join(tmp, os.path.basename(source) + ".o")
            commands.run([cxx, *flags, "-c", source, "-o", obj], log, timeout)
            return obj

        def check_declarations() -> None:
            commands.run([cxx, *flags, "-fsyntax-only", os.path.join(src, "torch_python_check.cc")], log, timeout)

        pool = ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1)
        settled = False  # the pool's commands ended, or were stopped: its threads can be waited for
        try:
            futures = [pool.submit(check_declarations)] + [pool.submit(compile_one, source) for source in sources]
            # Short waits, not one without a limit: a Ctrl-C whose signal lands on another thread, or just before
            # this thread blocks, is only raised once this thread wakes (it once waited for the compilers).
            pending = futures
            while pending:
                done, pending = wait(pending, timeout=0.1, return_when=FIRST_EXCEPTION)
                for future in done:
                    future.result()  # raises a command's failure
            objects = [future.result() for future in futures[1:]]
            settled = True
        except BaseException:  # a failure, or Ctrl-C: the compilers still running are stopped, not waited for
            commands.stop_all()
            settled = True
            raise
        finally:
            # After a failure, the sources not started yet are not compiled. A Ctrl-C that cut the stop short
            # leaves the threads, not waited for: leaving `commands` stops what they run (Commands.__exit__).
            pool.shutdown(wait=settled, cancel_futures=True)
        linked = os.path.join(tmp, os.path.basename(output))
        commands.run([cxx, *objects, "-o", linked, *link_flags(target)], log, timeout)
        os.chmod(linked, 0o755)  # whatever the umask: the loader refuses a library others could rewrite
        fsync(linked)
        os.replace(linked, output)
        fsync(os.path.dirname(os.path.abspath(output)))  # the rename itself
    return output


@contextlib.contextmanager
def removed_at_end(folder: str):
    import shutil

    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class BuildTimeout(RuntimeError):
    """A compiler command ran past its time limit and was killed."""


def fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# The watchdog of one build (Commands): a separate process that outlives this one. It reads lines from its
# stdin, "+PID" / "-PID" (a command's process group started / ended), "?PATH" (a folder to remove), "=" (the
# build is over, cleaned up by this process: it exits at once, not at end-of-file, which a process forked
# meanwhile could hold off); when its stdin closes without "=" (this process ended: SIGTERM, SIGHUP, SIGKILL,
# the parent's death, whatever the cause) or on "!" (the build was interrupted: Ctrl-C), it kills the groups
# still running and removes the folders.
WATCHDOG = """
import os, shutil, signal, sys
groups, folders, over = set(), [], False
for line in sys.stdin:
    what, value = line[:1], line[1:].rstrip("\\n")
    if what == "+":
        groups.add(int(value))
    elif what == "-":
        groups.discard(int(value))
    elif what == "?":
        folders.append(value)
    elif what in "=!":
        over = what == "="
        break
if not over:
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            pass
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
"""


# A process forked without exec during a build (a fork-method multiprocessing pool started by another thread)
# inherits every descriptor open at that moment and holds it as long as it lives. None of them may keep the build
# waiting:
# - the pipe through which subprocess learns that a program it starts has started (it reads it until its
#   end-of-file, which a forked process holding the write end holds off for ever): no fork happens while the
#   build starts a program (no_fork_meanwhile). A lock against os.fork rather than os.posix_spawn, which has no
#   such pipe: subprocess uses posix_spawn only without start_new_session, which the commands need (each is
#   killed as a process group), and one mechanism then also covers the watchdog's pipe before it is registered.
#   A fork() made by C code without Python's at-fork handlers is not held off.
# - the watchdog's stdin (the watchdog would not see this process end): /dev/null takes its place in the child.
# - the build lock: the loader's is a POSIX record lock, which a forked child does not hold (build_into_cache).
# The handlers cost a fork an uncontended lock; they are registered once, as the module is imported.

_starting = threading.RLock()
"""Held while the build starts a program and registers it (no_fork_meanwhile); os.fork() from any other thread
waits for it. Reentrant: a fork from the thread that holds it (which the build never does) does not deadlock."""

_watchdog_pipes: Set[int] = set()
"""The descriptors through which the builds under way talk to their watchdogs (see Commands)."""

def _before_fork() -> None:
    _starting.acquire()


def _after_fork_in_parent() -> None:
    try:
        _starting.release()
    except RuntimeError:  # the before-handler did not get it (a Ctrl-C while it waited): nothing to release
        pass


def _after_fork_in_child() -> None:
    """The child runs the forking thread alone: a lock of its own (the parent's is held by that thread, here
    for ever); /dev/null in place of the watchdog's pipe, so that the child's copy of the pipe's file object
    still closes a descriptor of its own."""
    global _starting
    _starting = threading.RLock()
    if not _watchdog_pipes:
        return
    null = os.open(os.devnull, os.O_WRONLY)
    for fd in _watchdog_pipes:
        os.dup2(null, fd)
    os.close(null)
    _watchdog_pipes.clear()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)


@contextlib.contextmanager
def no_fork_meanwhile():
    """No os.fork() in this process (from another thread) while the body runs: it starts a program."""
    with _starting:
        yield


RUN_WHEN_TOLD = 'read -r go && exec "$@"'
"""How a command starts (/bin/sh, the command as its arguments): it runs only once a line comes on its stdin, which
the builder writes after telling the watchdog the command's process group. A builder ending before that (SIGKILL
while it starts the command) closes the pipe, and the command ends without running: no command runs that the
watchdog does not know. The pipe is made and closed while no fork can happen (no_fork_meanwhile)."""


class Commands:
    """The compiler commands of one build, each in a process group of its own, so that a failure or Ctrl-C
    stops them all at once: the driver and the compiler proper it started, and no command starts after that.
    Where this process ends without unwinding (SIGTERM, SIGHUP, SIGKILL, its parent's death), a watchdog process
    stops them and removes the build's folders (see WATCHDOG); its own session keeps it out of the signals sent
    to the caller's process group. A context manager: leaving it tells the watchdog that the build is over.
    Nothing waits for an end-of-file, which a process forked meanwhile could hold off for ever by inheriting a
    pipe: the commands write their output to a file, the watchdog exits when told, and no fork happens while a
    program starts (see no_fork_meanwhile)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._running: Set[subprocess.Popen] = set()
        self._stopped = False
        try:
            with no_fork_meanwhile():
                self._watchdog: Optional[subprocess.Popen] = subprocess.Popen(
                    [sys.executable, "-I", "-S", "-c", WATCHDOG], stdin=subprocess.PIPE, bufsize=0,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
                _watchdog_pipes.add(self._watchdog.stdin.fileno())
        except OSError:  # no interpreter to start (embedded Python): the build runs, unwatched
            self._watchdog = None

    def __enter__(self) -> "Commands":
        return self

    def __exit__(self, kind, *exc) -> None:
        """Stops what still runs (an interrupt may have come before the build stopped it, or cut that short),
        then tells the watchdog: "=" where the build ended by itself, done or failed (a private folder keeps
        its log), "!" where it was interrupted (Ctrl-C, also one that cuts this stop short): the watchdog stops
        what is left and removes the folders, as had this process died then."""
        ended = False  # by itself, and nothing runs: the watchdog may leave the folders
        try:
            self.stop_all()
            ended = kind is None or issubclass(kind, Exception)
        finally:
            if self._watchdog is not None:
                _watchdog_pipes.discard(self._watchdog.stdin.fileno())
                self._tell("=" if ended else "!")
                self._watchdog.stdin.close()
                self._watchdog.wait()

    def _tell(self, line: str) -> None:
        """One line to the watchdog (written at once: its stdin is unbuffered)."""
        try:
            if self._watchdog is not None:
                self._watchdog.stdin.write(f"{line}\n".encode())
        except OSError:
            pass  # the watchdog is gone: the build itself goes on

    def remove_if_abandoned(self, *folders: str) -> None:
        with self._lock:
            for folder in folders:
                self._tell(f"?{os.path.abspath(folder)}")

    def new_folder(self, parent: str, prefix: str) -> str:
        """A new folder (0700) in `parent`, named `prefix` and 16 random hex digits, and told to the watchdog
        before it exists: no moment leaves it behind unknown (mkdtemp's would be, until told)."""
        path = os.path.join(os.path.abspath(parent), prefix + os.urandom(8).hex())
        self.remove_if_abandoned(path)
        os.mkdir(path, 0o700)
        return path

    def run(self, command: Sequence[str], log=None, timeout: Optional[float] = None) -> None:
        import tempfile

        with tempfile.TemporaryFile("w+", errors="replace") as output_file:
            with self._lock, no_fork_meanwhile():  # the watchdog knows the command before any fork
                if self._stopped:
                    raise RuntimeError("the build was stopped")
                go_read, go_write = os.pipe()
                try:
                    process = subprocess.Popen(["/bin/sh", "-c", RUN_WHEN_TOLD, "sh", *command], stdin=go_read,
                                               stdout=output_file, stderr=subprocess.STDOUT, start_new_session=True)
                    self._running.add(process)
                    self._tell(f"+{process.pid}")
                    os.write(go_write, b"\n")
                except BrokenPipeError:
                    pass  # the command was killed before it ran: its status says so
                finally:
                    os.close(go_read)
                    os.close(go_write)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                if log is not None:
                    log.write(" ".join(command) + f"\ntimed out after {timeout:g} s\n")
                raise BuildTimeout(f"{' '.join(command)}\ntimed out after {timeout:g} s (killed)") from None
            finally:
                if process.returncode is None:  # timed out, or this thread interrupted (Ctrl-C): stopped
                    stop(process)
                    process.wait()
                with self._lock:  # forgotten once ended, not before
                    self._running.discard(process)
                    self._tell(f"-{process.pid}")
            output_file.seek(0)
            output = output_file.read()
        if log is not None:
            log.write(" ".join(command) + "\n" + output)
        if process.returncode != 0:
            raise RuntimeError(f"{' '.join(command)}\nfailed with exit code {process.returncode}:\n{output[-4000:]}")

    def stop_all(self) -> None:
        with self._lock:
            self._stopped = True
            for process in self._running:
                stop(process)


def stop(process: subprocess.Popen) -> None:
    """Kills a command's whole process group (see Commands)."""
    import signal

    try:
        os.killpg(process.pid, signal.SIGKILL)
    except OSError:
        pass  # already gone
