"""A PrivateUse1 test backend ("tdbdev") for the tests of torch_dlpack_bridge.

Two devices backed by host memory, real streams with distinct native handles,
a counting allocator, and enough aten kernels (plus a CPU fallback) for
factories, copies, views, resize_ and set_.

Usage::

    from privateuse1_backend import load
    ext = load()                      # builds once (cached on disk), loads once per process
    t = torch.empty(3, device="tdbdev:1")

The C++ source is compiled on first use with torch.utils.cpp_extension.load
into ``build/<torch version>-<python tag>`` beside this file (override with the
environment variable ``TDB_PU1_BUILD_DIR``); later runs reuse that build.
"""

from __future__ import annotations

import os
import sys
import threading
import types

BACKEND_NAME = "tdbdev"
EXTENSION_NAME = "tdb_privateuse1_backend"

_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCE = os.path.join(_HERE, "tdb_backend.cpp")

# c10::DeviceType::PrivateUse1, the device_type torch.Stream(stream_id=..., device_index=..., device_type=...) takes.
_PRIVATEUSE1_DEVICE_TYPE = 20

_lock = threading.RLock()
_ext = None


def build_directory() -> str:
    """Directory holding the compiled extension for this torch and Python."""
    import torch

    override = os.environ.get("TDB_PU1_BUILD_DIR")
    if override:
        path = override
    else:
        tag = "torch{}-py{}{}".format(
            torch.__version__.replace("+", "_"), sys.version_info[0], sys.version_info[1]
        )
        path = os.path.join(_HERE, "build", tag)
    os.makedirs(path, exist_ok=True)
    return path


def _make_device_module(ext) -> types.ModuleType:
    import torch

    mod = types.ModuleType(f"torch.{BACKEND_NAME}")
    mod.__doc__ = "Runtime module of the tdbdev PrivateUse1 test backend."

    def _index(device=None) -> int:
        if device is None:
            return ext.current_device()
        if isinstance(device, int):
            return device
        device = torch.device(device)
        return ext.current_device() if device.index is None else device.index

    mod.is_available = lambda: True
    mod.is_initialized = lambda: True
    mod._lazy_init = lambda: None
    mod._is_in_bad_fork = lambda: False
    mod.device_count = ext.device_count
    mod.current_device = ext.current_device
    mod.set_device = lambda device: ext.set_device(_index(device))
    mod.manual_seed = lambda seed: None
    mod.manual_seed_all = lambda seed: None
    mod.get_amp_supported_dtype = lambda: [torch.float16, torch.bfloat16]
    if hasattr(getattr(torch, "accelerator", None), "set_stream"):
        mod.current_stream = lambda device=None: torch.accelerator.current_stream(_index(device))
        mod.set_stream = torch.accelerator.set_stream
    else:  # a torch without torch.accelerator streams (2.4): through the backend's own helpers
        def current_stream(device=None):
            i = _index(device)
            return torch.Stream(stream_id=ext.current_stream_id(i), device_index=i,
                                device_type=_PRIVATEUSE1_DEVICE_TYPE)

        def set_stream(stream):
            ext.set_current_stream(stream.device_index, stream.stream_id)

        mod.current_stream = current_stream
        mod.set_stream = set_stream
    mod.synchronize = lambda device=None: None
    return mod


def load():
    """Build (if needed) and load the backend; idempotent, returns the extension module.

    The extension module exposes:
      device_count() -> 2
      current_device() / set_device(i) / exchange_device(i) -> previous index
      new_stream(i) -> id                  new stream on device i (not made current)
      use_new_stream(i) -> (id, handle)    new stream on device i, made current for this thread
      set_current_stream(i, id) -> previous id   (this thread only)
      current_stream_id(i) -> id           (0 is the default stream)
      current_stream_handle(i) -> int      native handle of the current stream of device i
      stream_handle(i, id) -> int          native handle of stream id on device i
      default_stream_handle(i) -> int
      stream_count(i) -> number of streams ever created on device i (default included)
      live_allocations() / total_allocations() / live_bytes()
      device_of_ptr(addr) -> device index of an allocator block containing addr, or -1
    """
    global _ext
    if _ext is not None:
        return _ext
    with _lock:
        if _ext is not None:
            return _ext
        import torch
        import torch.utils.cpp_extension as cpp_extension

        current = torch._C._get_privateuse1_backend_name()
        if current not in ("privateuseone", BACKEND_NAME):
            raise RuntimeError(
                f"PrivateUse1 is already renamed to {current!r}; cannot load the {BACKEND_NAME} test backend"
            )

        ext = cpp_extension.load(
            name=EXTENSION_NAME,
            sources=[_SOURCE],
            build_directory=build_directory(),
            extra_cflags=["-O1"],
            verbose=bool(os.environ.get("TDB_PU1_VERBOSE")),
        )

        if current != BACKEND_NAME:
            torch.utils.rename_privateuse1_backend(BACKEND_NAME)
        if not hasattr(torch, BACKEND_NAME):
            torch._register_device_module(BACKEND_NAME, _make_device_module(ext))
        if not hasattr(torch.Tensor, BACKEND_NAME):
            torch.utils.generate_methods_for_privateuse1_backend(for_storage=False)
        _ext = ext
        return ext
