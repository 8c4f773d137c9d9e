"""Builds axpy_compile: the package (ops.py registers the custom ops) and its torch-free
kernel binary axpy_compile._kernels (pybind11 + torch_dlpack_bridge's headers, no torch
include or link).

get_include() is the installed package's include folder (importing the package imports
torch).
Build: pip install --no-build-isolation examples/axpy_compile
"""
import pybind11
import torch_dlpack_bridge
from setuptools import Extension, setup

setup(
    packages=["axpy_compile"],
    ext_modules=[
        Extension(
            "axpy_compile._kernels",
            sources=["axpy_compile/_kernels.cpp"],
            include_dirs=[torch_dlpack_bridge.get_include(), pybind11.get_include()],
            language="c++",
            extra_compile_args=["-std=c++17", "-O2", "-fvisibility=hidden"],
        )
    ],
)
