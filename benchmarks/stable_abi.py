"""Per-call cost of a kernel taking 8 tensors: torch's stable ABI against this project's typed caster.

    python benchmarks/stable_abi.py

Builds, in a temporary folder, (1) a STABLE_TORCH_LIBRARY operator (torch::stable::Tensor parameters, built
with TORCH_TARGET_VERSION 2.10 against the installed torch's headers, linked to libtorch) and (2) a pybind11
module over torch_dlpack_bridge/pybind11.h (tdb::Tensor<> parameters, no torch header or link); both return
the sum of the 8 tensors' numel. Then times `torch.ops.tdbstable.take8(*xs)` and `tdb_take8.take8(*xs)` in
one process, interleaved, 9 rounds (order alternating) of the best of 3 x 20,000 calls, float32 (16, 16) CPU
tensors; prints the medians and the median ratio. Needs a C++17 compiler, pybind11 and this package.
"""
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import timeit

import pybind11
import torch

import torch_dlpack_bridge

STABLE = r"""
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>
using torch::stable::Tensor;
int64_t take8(Tensor a, Tensor b, Tensor c, Tensor d, Tensor e, Tensor f, Tensor g, Tensor h) {
  return a.numel() + b.numel() + c.numel() + d.numel() + e.numel() + f.numel() + g.numel() + h.numel();
}
STABLE_TORCH_LIBRARY(tdbstable, m) {
  m.def("take8(Tensor a, Tensor b, Tensor c, Tensor d, Tensor e, Tensor f, Tensor g, Tensor h) -> int");
}
STABLE_TORCH_LIBRARY_IMPL(tdbstable, CPU, m) { m.impl("take8", TORCH_BOX(&take8)); }
"""
OURS = r"""
#include <torch_dlpack_bridge/pybind11.h>
using T = tdb::Tensor<>;
int64_t take8(T a, T b, T c, T d, T e, T f, T g, T h) {
  return a.numel() + b.numel() + c.numel() + d.numel() + e.numel() + f.numel() + g.numel() + h.numel();
}
PYBIND11_MODULE(tdb_take8, m) { m.def("take8", &take8); }
"""


def build(folder):
    torch_dir = os.path.dirname(torch.__file__)
    py_include = sysconfig.get_paths()["include"]
    cxx = os.environ.get("CXX", "c++")
    with open(os.path.join(folder, "stable_op.cpp"), "w") as f:
        f.write(STABLE)
    with open(os.path.join(folder, "tdb_op.cpp"), "w") as f:
        f.write(OURS)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    subprocess.run([cxx, "-O2", "-std=c++17", "-shared", "-fPIC", "-DTORCH_TARGET_VERSION=0x020a000000000000",
                    f"-I{torch_dir}/include", f"-I{py_include}", "stable_op.cpp", "-o", "libstable_op.so",
                    f"-L{torch_dir}/lib", "-ltorch", "-ltorch_cpu", "-lc10"], cwd=folder, check=True)
    subprocess.run([cxx, "-O2", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden", f"-I{py_include}",
                    f"-I{pybind11.get_include()}", f"-I{torch_dlpack_bridge.get_include()}", "tdb_op.cpp",
                    "-o", "tdb_take8" + suffix], cwd=folder, check=True)


def main():
    with tempfile.TemporaryDirectory() as folder:
        build(folder)
        torch.ops.load_library(os.path.join(folder, "libstable_op.so"))
        sys.path.insert(0, folder)
        import tdb_take8
        xs = [torch.ones(16, 16) for _ in range(8)]
        stable, ours = torch.ops.tdbstable.take8, tdb_take8.take8
        assert stable(*xs) == ours(*xs) == 8 * 256
        n, res = 20000, {"stable": [], "ours": [], "ratio": []}
        for r in range(9):
            order = [("stable", stable), ("ours", ours)]
            t = {}
            for name, f in order if r % 2 == 0 else order[::-1]:
                t[name] = min(timeit.repeat(lambda: f(*xs), number=n, repeat=3)) / n * 1e9
                res[name].append(t[name])
            res["ratio"].append(t["ours"] / t["stable"])
    med = {k: statistics.median(v) for k, v in res.items()}
    print(f"torch {torch.__version__}, 8 float32 (16, 16) CPU tensors, ns per call (median of 9 rounds):")
    print(f"  STABLE_TORCH_LIBRARY op through torch.ops: {med['stable']:,.0f}")
    print(f"  pybind11 + tdb::Tensor<> (this project):   {med['ours']:,.0f}")
    print(f"  ours / stable: {med['ratio']:.2f}x (per round {min(res['ratio']):.2f}-{max(res['ratio']):.2f})")


if __name__ == "__main__":
    main()
