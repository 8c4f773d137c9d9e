"""Builds torch_dlpack_bridge against the torch installed in this environment.

Two extensions: `_C` (the exchange table; links torch) and `_probe` (a torch-free C consumer of any table,
used by the self-check, the quick benchmark and the tests). Build with `--no-build-isolation` so the torch
you run is the torch you compile against; the build records it in torch_dlpack_bridge/_build_info.py.
"""

import glob
import os

import torch
from setuptools import Extension, setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.path.join("torch_dlpack_bridge", "include")
SANITIZE = os.environ.get("TDB_SANITIZE") == "1"  # ASan + UBSan build, see README


def write_build_info():
    with open(os.path.join(HERE, "torch_dlpack_bridge", "_build_info.py"), "w") as f:
        f.write("# Written by setup.py at build time: the torch this package was compiled against.\n")
        f.write(f"TORCH_VERSION = {torch.__version__!r}\n")
        f.write(f"CXX11_ABI = {bool(torch._C._GLIBCXX_USE_CXX11_ABI)!r}\n")
        f.write(f"CUDA_VERSION = {torch.version.cuda!r}\n")
        f.write(f"HIP_VERSION = {torch.version.hip!r}\n")
        f.write(f"SANITIZED = {SANITIZE!r}\n")


def compile_args():
    args = ["-O3", "-fvisibility=hidden", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]
    if SANITIZE:
        args = ["-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined", "-Wall"]
    return args


write_build_info()
sources = sorted(glob.glob("csrc/*.cpp"))
probe = "csrc/probe.cpp"
link_args = ["-fsanitize=address,undefined"] if SANITIZE else []

setup(
    ext_modules=[
        CppExtension(
            "torch_dlpack_bridge._C",
            [s for s in sources if s != probe],
            include_dirs=[os.path.join(HERE, INCLUDE)],
            extra_compile_args=compile_args(),
            extra_link_args=link_args,
        ),
        Extension(
            "torch_dlpack_bridge._probe",
            [probe],
            include_dirs=[os.path.join(HERE, INCLUDE)],
            language="c++",
            extra_compile_args=["-std=c++17"] + compile_args(),
            extra_link_args=link_args,
        ),
    ],
    cmdclass={"build_ext": BuildExtension},
)
