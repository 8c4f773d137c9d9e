"""Builds axpy_compile: the package (ops.py registers the custom ops) and its torch-free kernel binary
axpy_compile._kernels (pybind11 + torch_dlpack_bridge's headers, no torch include or link).

The headers come from TDB_INCLUDE if set, else from the installed torch_dlpack_bridge (found without importing
it, so torch is not imported). Build: pip install --no-build-isolation examples/axpy_compile
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
    packages=["axpy_compile"],
    ext_modules=[
        Extension(
            "axpy_compile._kernels",
            sources=["axpy_compile/_kernels.cpp"],
            include_dirs=[tdb_include(), pybind11.get_include()],
            language="c++",
            extra_compile_args=["-std=c++17", "-O2", "-fvisibility=hidden"],
        )
    ],
)
