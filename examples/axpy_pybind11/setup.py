"""Builds axpy_pybind11: pybind11 + torch_dlpack_bridge's headers, no torch include or link.

The headers come from the TDB_INCLUDE environment variable if set, else from the installed
torch_dlpack_bridge package (located without importing it, so torch is not imported either).
Build: pip install --no-build-isolation examples/axpy_pybind11
"""
import importlib.util
import os

import pybind11
from setuptools import Extension, setup


def tdb_include():
    if os.environ.get("TDB_INCLUDE"):
        return os.environ["TDB_INCLUDE"]
    spec = importlib.util.find_spec("torch_dlpack_bridge")
    if spec is None or spec.origin is None:
        raise RuntimeError("torch_dlpack_bridge is not installed (or set TDB_INCLUDE to its include directory)")
    return os.path.join(os.path.dirname(spec.origin), "include")


setup(
    ext_modules=[
        Extension(
            "axpy_pybind11",
            sources=["axpy_pybind11.cpp"],
            include_dirs=[tdb_include(), pybind11.get_include()],
            language="c++",
            extra_compile_args=["-std=c++17", "-O2", "-fvisibility=hidden"],
        )
    ],
)
