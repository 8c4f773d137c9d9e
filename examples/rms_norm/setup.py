"""Builds rms_norm with setuptools: pybind11 + torch_dlpack_bridge's headers, no torch
include or link.

get_include() is the installed package's include folder (importing the package imports
torch).
Build: pip install --no-build-isolation examples/rms_norm
"""
import pybind11
import torch_dlpack_bridge
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "rms_norm",
            sources=["rms_norm.cpp"],
            include_dirs=[torch_dlpack_bridge.get_include(), pybind11.get_include()],
            language="c++",
            extra_compile_args=["-std=c++17", "-O2", "-fvisibility=hidden"],
        )
    ],
)
