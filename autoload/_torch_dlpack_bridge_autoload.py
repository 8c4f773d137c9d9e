"""Publishes torch_dlpack_bridge's exchange table the moment torch finishes importing, in every process of the
environment, whatever imports torch and in which order (a consumer such as tvm-ffi that looks for the table
when it first meets torch then finds it).

Installed at the top of site-packages with two start-up files that call :func:`install` at interpreter
start-up: torch_dlpack_bridge_autoload.pth (an import line, what CPython up to 3.14 runs) and
torch_dlpack_bridge_autoload.start (a PEP 829 entry point: from 3.15 it replaces the .pth file's import line,
which later CPythons ignore). Either way the hook is installed once. It does not import torch: it puts a
finder first on sys.meta_path that answers only for "torch", asks the finders after it for torch's spec, and
hands out that spec with a loader that runs ``import torch_dlpack_bridge`` right after torch's own module has
executed successfully. So an earlier ``importlib.util.find_spec("torch")`` (from any thread) or a failed
import of torch leaves the hook armed for the real import; once torch is imported it leaves sys.meta_path.
Nothing here may break start-up or torch's import, whatever the warning filters: a failure is reported once,
as a RuntimeWarning, or on stderr where a filter would turn that warning into an exception; Ctrl-C during the
work leaves torch imported, and is raised by ``import torch`` once torch is in sys.modules for good. Where torch has a table of
its own and no library of the package is ready, the package's import declines to compile inside
``import torch`` and the hook prints its one-line notice. Where another thread is importing the package
meanwhile, the hook publishes on its behalf, so no thread sees torch without the table that will stay.

``TORCH_DLPACK_BRIDGE_AUTOLOAD=0`` turns it off (then ``import torch_dlpack_bridge`` publishes the table, as
before). ``TORCH_DLPACK_BRIDGE_PREFER`` applies as it does to an explicit import.
"""

import _thread
import os
import sys


class _PublishAfterTorch:
    """A meta path finder for "torch" alone: one string comparison for every other import."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        try:
            spec = _spec_from_other_finders(name, path, target)
            if spec is None or not hasattr(spec.loader, "exec_module"):
                return spec
            spec.loader = _PublishingLoader(spec.loader)  # this spec is new: no one else holds its loader
            return spec
        except Exception as error:  # never in the way of importing torch
            _report(error)
            return None


def _spec_from_other_finders(name, path, target):
    """What the import system would find for `name` without this hook."""
    for finder in list(sys.meta_path):
        find_spec = getattr(finder, "find_spec", None)
        if isinstance(finder, _PublishAfterTorch) or find_spec is None:
            continue
        spec = find_spec(name, path, target)
        if spec is not None:
            return spec
    return None


class _PublishingLoader:
    """Wraps torch's loader: runs it, then publishes the table. Everything else is the wrapped loader's."""

    def __init__(self, loader):
        self._loader = loader

    def __getattr__(self, attr):
        return getattr(self._loader, attr)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)  # torch's own import; a failure propagates and leaves the hook armed
        # torch's module now carries its own loader again, as if no hook had been there.
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self._loader
        if getattr(getattr(module, "__spec__", None), "loader", None) is self:
            module.__spec__.loader = self._loader
        _uninstall()
        interrupt = _publish()
        if interrupt is not None:
            _raise_once_imported(module.__spec__, interrupt)


importing_thread = None
"""The thread in which the hook imports the package (the package's import then knows it was not asked for)."""


def _publish():
    """Publishes the table, or says why not; never raises: returns the BaseException (Ctrl-C) that interrupted
    it, if any, for exec_module to pass on. An ImportError carrying a `notice` is printed as that one line, or
    not at all when it is None: the package's own once-per-torch notices (torch keeps its table and no library
    of the package is ready; no build can start) and the silence after a build that failed before (the process
    whose build failed said so)."""
    global importing_thread
    try:
        importing_thread = _thread.get_ident()
        try:
            import torch_dlpack_bridge  # noqa: F401  (its import publishes the table)
        finally:
            importing_thread = None
        # The user's own import of the package may be under way: in this thread (it imported torch), or in
        # one that importlib's deadlock avoidance keeps waiting for torch while this thread gets the package
        # half-initialised. Do its work now (a no-op where the import above did it), so that no thread sees
        # torch imported without the table that will stay.
        import importlib

        importlib.import_module("torch_dlpack_bridge._table").publish_at_import(explicit=True)
    except ImportError as error:
        if not hasattr(error, "notice"):
            _report(error)
        elif error.notice is not None:
            _say(error.notice)
    except Exception as error:
        _report(error)
    except BaseException as interrupt:  # Ctrl-C, SystemExit: raised here, torch's import would fail with it
        _report(interrupt, "torch is imported and works without it; the interrupt is raised when `import torch` "
                           "returns")
        return interrupt
    return None


def _raise_once_imported(spec, interrupt):
    """Makes `import torch` raise `interrupt` once torch is in sys.modules for good, so the user's code sees the
    Ctrl-C where it imported torch, as any other Ctrl-C, and torch stays imported and working. Raised from
    exec_module, importlib would take torch out of sys.modules (a second import would run torch's module again
    and fail); instead it is raised when importlib marks the import done (``spec._initializing = False``, in the
    `finally` after its bookkeeping, CPython 3.9-3.14). Left uncaught, it ends the process as CPython ends on any
    Ctrl-C: after the atexit handlers and the flushing of files, killed by SIGINT."""
    if not getattr(spec, "_initializing", False):
        raise interrupt  # not importlib's import (a caller running exec_module itself): nothing to wait for
    spec_class = type(spec)

    class _RaiseWhenDone(spec_class):
        def __setattr__(self, name, value):
            spec_class.__setattr__(self, name, value)
            if name == "_initializing" and not value:
                self.__class__ = spec_class
                raise interrupt

    spec.__class__ = _RaiseWhenDone


def _report(error, outcome="TORCH_DLPACK_BRIDGE_AUTOLOAD=0 turns this hook off"):
    """One RuntimeWarning; on stderr instead when a warning filter turns it into an exception (``-W error``,
    pytest's ``filterwarnings = error``), which inside torch's import would leave torch unimportable."""
    message = (f"torch_dlpack_bridge: the exchange table was not published when torch was imported: "
               f"{type(error).__name__}: {error} ({outcome})")
    try:
        import warnings

        warnings.warn(message, RuntimeWarning, stacklevel=2)
    except Exception:
        _say(f"RuntimeWarning: {message}")


def _say(line):
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except Exception:
        pass


def _uninstall():
    sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, _PublishAfterTorch)]


def install():
    """Puts the finder first on sys.meta_path, unless it is there already, torch is imported already, or
    ``TORCH_DLPACK_BRIDGE_AUTOLOAD=0``. Safe to call more than once."""
    if (os.environ.get("TORCH_DLPACK_BRIDGE_AUTOLOAD", "1") == "0" or "torch" in sys.modules
            or any(isinstance(finder, _PublishAfterTorch) for finder in sys.meta_path)):
        return
    sys.meta_path.insert(0, _PublishAfterTorch())
