"""DLPack's C exchange table (DLPackExchangeAPI 1.3) for torch tensors.

Importing this package publishes the table on ``torch.Tensor`` (see :func:`install` for the policy), so
kernel libraries that look up ``type(t).__dlpack_c_exchange_api__`` (capsule) or the legacy
``__c_dlpack_exchange_api__`` (int) take torch tensors in tens of nanoseconds, on any torch version. The
autoload hook installed with the package (``_torch_dlpack_bridge_autoload``) imports it as soon as torch is
imported; ``TORCH_DLPACK_BRIDGE_AUTOLOAD=0`` turns that off.

>>> import torch, torch_dlpack_bridge
>>> torch_dlpack_bridge.active_provider()["__c_dlpack_exchange_api__"]
'torch_dlpack_bridge'
"""

from __future__ import annotations

import os

from . import _loader

# `python -m torch_dlpack_bridge ...`: its __main__ loads the table once it has read its arguments, so that
# `build` can retry a failed build that this import would otherwise raise (set before torch's import, inside
# which the autoload hook publishes too).
_loader.left_to_main = _loader.run_as_main(__name__)

import torch  # noqa: E402,F401  (before _table: where this import runs the autoload hook, the hook imports _table whole)

from . import _build, _table  # noqa: E402
from ._table import (CAPSULE_ATTR, INT_ATTR, PREFER_ENV, active_provider, build_info, exchange_api,
                     exchange_api_address, install, uninstall)
from ._table import native_capsule as _native_capsule

__all__ = [
    "CAPSULE_ATTR",
    "INT_ATTR",
    "active_provider",
    "build_info",
    "exchange_api",
    "exchange_api_address",
    "get_cmake_dir",
    "get_include",
    "install",
    "uninstall",
]

__version__ = _build.PACKAGE_VERSION


def get_include() -> str:
    """Directory to add to the include path for ``torch_dlpack_bridge/dlpack.h`` and the consumer header."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")


def get_cmake_dir() -> str:
    """Directory holding ``torch_dlpack_bridgeConfig.cmake``, for ``-Dtorch_dlpack_bridge_DIR=...`` or
    ``CMAKE_PREFIX_PATH`` (then ``find_package(torch_dlpack_bridge CONFIG)``)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "cmake")


# The table library for the running torch (shipped, cached, or built once), published: an ImportError names
# the cause. The hook (inside `import torch`) may have done it already, from another thread too.
_table.publish_at_import(explicit=not _table.imported_by_hook())  # a no-op where __main__ loads it
