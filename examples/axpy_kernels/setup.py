"""Builds the axpy_kernels example: a plain CPython extension, no torch include or link.

The torch_dlpack_bridge headers are found, in order, from: the TDB_INCLUDE environment variable
(an explicit override), torch_dlpack_bridge.get_include() when importable, and the repository layout
(../../torch_dlpack_bridge/include).  Build: pip install --no-build-isolation examples/axpy_kernels
"""
import os

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def tdb_include():
    candidates = [os.environ.get("TDB_INCLUDE")]
    try:
        import torch_dlpack_bridge

        candidates.append(torch_dlpack_bridge.get_include())
    except Exception:  # not installed (or not importable yet): fall back to the repository layout
        pass
    candidates.append(os.path.join(HERE, "..", "..", "torch_dlpack_bridge", "include"))
    for inc in filter(None, candidates):
        if os.path.isfile(os.path.join(inc, "torch_dlpack_bridge", "consumer.h")):
            return os.path.abspath(inc)
    raise RuntimeError("torch_dlpack_bridge/consumer.h not found; set TDB_INCLUDE to its include directory")


setup(
    ext_modules=[
        Extension(
            "axpy_kernels",
            sources=["axpy_kernels.cpp"],
            include_dirs=[tdb_include()],
            language="c++",
            extra_compile_args=["/std:c++17"] if os.name == "nt" else ["-std=c++17", "-O2"],
        )
    ],
)
