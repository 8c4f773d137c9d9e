"""The table this package publishes on ``torch.Tensor``: loaded once per process by whichever import gets there
first (the autoload hook's, inside ``import torch``, or the user's ``import torch_dlpack_bridge``, from any
thread), then installed and uninstalled at will. The package's public functions live here so that the hook
can publish while another thread is still running the package's ``__init__``.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from typing import Any, Dict, Optional

import torch

from . import _build, _loader

CAPSULE_ATTR = "__dlpack_c_exchange_api__"
"""DLPack 1.3 name: a PyCapsule named ``"dlpack_exchange_api"`` on the tensor type."""
INT_ATTR = "__c_dlpack_exchange_api__"
"""DLPack 1.2 name: the table's address as an int on the tensor type."""
PROBE_ATTR = "__tdb_autograd_probe__"
"""This project's own (not DLPack): a PyCapsule named ``"torch_dlpack_bridge.autograd_probe"`` holding the C
function with which the consumer headers read ``requires_grad`` of a torch.Tensor in a few ns (autograd.h)."""
BUMP_ATTR = "__tdb_version_bump__"
"""This project's own (not DLPack): a PyCapsule named ``"torch_dlpack_bridge.version_bump"`` holding the C
function with which the consumer headers bump a written torch.Tensor's version counter in a few ns, as
``torch.autograd.graph.increment_version`` does (autograd.h)."""
LAYOUT_ATTR = "__tdb_autograd_layout__"
"""This project's own (not DLPack): a PyCapsule named ``"torch_dlpack_bridge.autograd_layout"`` holding where
requires_grad's common answer and the version counter lie in a torch.Tensor object (dlpack.h's TDBAutogradLayout),
checked by the table library on tensors of its own; absent where that failed (autograd.h)."""
PREFER_ENV = "TORCH_DLPACK_BRIDGE_PREFER"
"""Environment variable read by the import-time :func:`install`: ``bridge`` (default) or ``torch``."""
HOOK_MODULE = "_torch_dlpack_bridge_autoload"

_lock = threading.RLock()
_library: Any = None  # the table library (ctypes.PyDLL) once loaded
_library_info: Dict[str, str] = {}
_ADDRESS: int = 0
_failure: Optional[ImportError] = None  # why loading failed in this process: not tried twice


def publish_at_import(explicit: bool, retry_failed: bool = False, keep_newer: bool = False) -> None:
    """Loads the table library and installs it with the import-time policy, once per process (later calls
    return at once, or raise the first call's ImportError, unless `retry_failed`: then a build that failed,
    in this process or recorded in the cache, is tried again). Not `explicit` (the hook, inside ``import
    torch``): where torch has its own table, a library that is not ready is not built (_loader.Deferred).
    With `keep_newer` (the main job), neither where torch, with a table of its own, is newer than the wheel
    covers (_loader.NewerTorch). Nothing happens while `python -m torch_dlpack_bridge` is being located
    (_loader.left_to_main)."""
    global _library, _library_info, _ADDRESS, _failure
    with _lock:
        if _library is not None or _loader.left_to_main:
            return
        if _failure is not None and not retry_failed:
            raise ImportError(str(_failure))
        defer = not explicit and native_capsule() is not None
        try:
            library, info = _loader.load(_build.PACKAGE_VERSION, defer_build=defer, retry_failed=retry_failed,
                                         notice_once=not explicit,
                                         keep_newer=keep_newer and native_capsule() is not None)
        except _loader.Deferred:
            raise
        except ImportError as error:
            _failure = error
            raise
        library.tdb_exchange_api_capsule.restype = ctypes.py_object
        library.tdb_exchange_api.restype = ctypes.c_void_p
        library.tdb_autograd_probe_capsule.restype = ctypes.py_object
        library.tdb_version_bump_capsule.restype = ctypes.py_object
        library.tdb_autograd_layout_capsule.restype = ctypes.py_object
        _ADDRESS = library.tdb_exchange_api()
        _library, _library_info = library, info
        install()


def imported_by_hook() -> bool:
    """True while the autoload hook imports the package (in this thread, inside ``import torch``)."""
    hook = sys.modules.get(HOOK_MODULE)
    return getattr(hook, "importing_thread", None) == threading.get_ident()


_MISSING = object()
_saved: Optional[Dict[str, Any]] = None  # torch.Tensor's own entries, as they were before install()
_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _loaded() -> Any:
    """The table library, loaded and published as an explicit import does if it is not yet. Where another thread's
    import of the package failed or was deferred (the hook, inside ``import torch``), CPython hands a thread that
    imported the package at the same moment that module object: its first call lands here and raises the
    ImportError of an explicit import (or builds, loads and publishes), never a KeyError."""
    if _library is None:
        publish_at_import(explicit=True)
    if _library is None:  # `python -m torch_dlpack_bridge` before its __main__ loaded the library
        raise ImportError("torch_dlpack_bridge: the table library is not loaded yet")
    return _library


def exchange_api() -> Any:
    """This project's table as a PyCapsule named ``"dlpack_exchange_api"``.

    >>> torch_dlpack_bridge.exchange_api()  # doctest: +ELLIPSIS
    <capsule object "dlpack_exchange_api" at ...>
    """
    return _loaded().tdb_exchange_api_capsule()


def exchange_api_address() -> int:
    """This project's table as an address (what ``__c_dlpack_exchange_api__`` holds when it is active)."""
    _loaded()
    return _ADDRESS


def build_info() -> Dict[str, Any]:
    """What the loaded table library was compiled against (torch version, C++ ABI, compiler, DLPack version),
    where it is and where it came from: ``"shipped"`` (prebuilt in the wheel or built at install), ``"cache"``
    (built at an earlier import), ``"build"`` (built by this import into the cache) or ``"private"`` (built by
    this import into a temporary folder, since removed, because the cache could not be used).

    >>> info = torch_dlpack_bridge.build_info()
    >>> info["torch_version"].split(".")[:2] == torch.__version__.split(".")[:2]
    True
    """
    _loaded()
    info: Dict[str, Any] = dict(_library_info)
    info.update(cxx11_abi=info["cxx11_abi"] == "1",
                dlpack_version=tuple(int(v) for v in info["dlpack_version"].split(".")))
    return info


def _address_of(value: Any) -> Optional[int]:
    if isinstance(value, int):
        return value
    try:
        return _capsule_pointer(value, b"dlpack_exchange_api")
    except (TypeError, ValueError):
        return None


def native_capsule() -> Any:
    """torch's own table (torch >= 2.10), as torch.Tensor had it before install(); None when absent."""
    saved = _saved if _saved is not None else {CAPSULE_ATTR: torch.Tensor.__dict__.get(CAPSULE_ATTR, _MISSING)}
    value = saved[CAPSULE_ATTR]
    return None if value is _MISSING or _address_of(value) is None else value


def install(prefer: Optional[str] = None) -> None:
    """Publish the table on ``torch.Tensor`` (so subclasses and ``nn.Parameter`` inherit it).

    ``prefer="bridge"`` (the default, or ``TORCH_DLPACK_BRIDGE_PREFER=bridge``) puts this project's table
    under both names, on every torch. ``prefer="torch"`` (or ``TORCH_DLPACK_BRIDGE_PREFER=torch``): where
    torch has its own table (torch >= 2.10) its capsule stays, and the legacy int name is added pointing at
    it if missing; where torch has none, this project's table goes under both names. Called at import; call
    again to switch, :func:`uninstall` to undo.

    >>> torch_dlpack_bridge.install()
    >>> torch_dlpack_bridge.active_provider()[torch_dlpack_bridge.CAPSULE_ATTR]
    'torch_dlpack_bridge'
    """
    global _saved
    library = _loaded()
    from_env = not prefer and os.environ.get(PREFER_ENV)
    prefer = prefer or from_env or "bridge"
    if prefer not in ("torch", "bridge"):
        named = f"{PREFER_ENV}={prefer!r}: " if from_env else ""
        raise ValueError(f"{named}prefer must be 'torch' or 'bridge' (the default), not {prefer!r}")
    if _saved is None:
        _saved = {name: torch.Tensor.__dict__.get(name, _MISSING) for name in (CAPSULE_ATTR, INT_ATTR)}
    native = native_capsule()
    if prefer == "bridge" or native is None:
        capsule, address = exchange_api(), _ADDRESS
    else:
        capsule = native
        legacy = _saved[INT_ATTR]
        address = legacy if isinstance(legacy, int) else _address_of(native)
    # Before the table: a consumer caches the probe and the bump with the table it finds, once per type.
    # Whichever table is preferred, they are this library's (they read torch's tensors, not a table).
    setattr(torch.Tensor, PROBE_ATTR, library.tdb_autograd_probe_capsule())
    setattr(torch.Tensor, BUMP_ATTR, library.tdb_version_bump_capsule())
    layout = library.tdb_autograd_layout_capsule()
    if layout is not None:
        setattr(torch.Tensor, LAYOUT_ATTR, layout)
    setattr(torch.Tensor, CAPSULE_ATTR, capsule)
    setattr(torch.Tensor, INT_ATTR, address)


def uninstall() -> None:
    """Put back what ``torch.Tensor`` had under both names before :func:`install`, and remove
    ``__tdb_autograd_probe__``, ``__tdb_version_bump__`` and ``__tdb_autograd_layout__``."""
    global _saved
    if _saved is None:
        return
    for name in (PROBE_ATTR, BUMP_ATTR, LAYOUT_ATTR):
        if name in torch.Tensor.__dict__:
            delattr(torch.Tensor, name)
    for name, value in _saved.items():
        if value is _MISSING:
            if name in torch.Tensor.__dict__:
                delattr(torch.Tensor, name)
        else:
            setattr(torch.Tensor, name, value)
    _saved = None


def active_provider(cls: type = torch.Tensor) -> Dict[str, Optional[str]]:
    """Which table each name resolves to on ``cls``: ``"torch_dlpack_bridge"``, ``"torch"``, ``"other"`` or None.

    >>> sorted(torch_dlpack_bridge.active_provider())
    ['__c_dlpack_exchange_api__', '__dlpack_c_exchange_api__']
    """
    ours = _ADDRESS
    native = native_capsule()
    theirs = _address_of(native) if native is not None else None
    result: Dict[str, Optional[str]] = {}
    for name in (CAPSULE_ATTR, INT_ATTR):
        value = getattr(cls, name, None)
        address = None if value is None else _address_of(value)
        result[name] = (None if address is None else "torch_dlpack_bridge" if address == ours
                        else "torch" if address == theirs else "other")
    return result
