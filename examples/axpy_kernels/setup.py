"""Builds the axpy_kernels example: a plain CPython extension, no torch include or link.

get_include() is the installed package's include folder (importing the package imports
torch).
Build: pip install --no-build-isolation examples/axpy_kernels
"""
import os

import torch_dlpack_bridge
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "axpy_kernels",
            sources=["axpy_kernels.cpp"],
            include_dirs=[torch_dlpack_bridge.get_include()],
            language="c++",
            extra_compile_args=(
                ["/std:c++17"] if os.name == "nt" else ["-std=c++17", "-O2"]
            ),
        )
    ],
)
