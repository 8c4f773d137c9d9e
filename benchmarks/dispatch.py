#!/usr/bin/env python
"""What calling a consumer.h kernel through torch's dispatcher costs per call (issue 19), in one process.

    python benchmarks/dispatch.py                 # builds examples/axpy_compile once (about 30 s), then measures
    python benchmarks/dispatch.py --site DIR      # uses an axpy_compile already installed in DIR

The kernel is axpy_compile's torch-free axpy_(a, x, y) on 16-element float32 CPU vectors (the loop is a few ns:
what is timed is the call). Routes, all in one process, in rotating order, best of each round:
the kernel called directly; the kernel unless torch.compiler.is_compiling(); the recommended eager
wrapper (axpy_compile.axpy_: the kernel unless compiling, a subclass or autograd, see its ops.direct());
the torch.library.custom_op object (axpy_compile.axpy_op); its OpOverload
(torch.ops.axpy_compile.axpy_.default); and the lower-level torch.library.Library define/impl route (a
Python impl for the CPU key and a fake impl, no autograd registration); then scaled_copy(a, x), which
allocates its result (a functional op with a backward: no mutation to dispatch), directly, through its
wrapper and through its custom_op. Ratios are to the same kernel's direct call, per round, median over
rounds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import timeit
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "examples" / "axpy_compile"

import torch  # noqa: E402

import torch_dlpack_bridge  # noqa: E402, F401  (publishes this project's table)


def build(site: Path) -> None:
    """pip-installs examples/axpy_compile into `site`, from a copy (no build folders left in the checkout)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "*.so"))
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-deps",
               "--target", str(site), str(src)]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{res.stdout}\n{res.stderr}")


BASE, SCALED_BASE = "kernel called directly", "scaled_copy(a, x), a functional op: kernel called directly"


def routes(ac):
    """name -> (callable taking (a, x, y), what it gives up against the custom op)."""
    from axpy_compile import _kernels

    lib = torch.library.Library("tdb_dispatch_bench", "DEF")  # kept alive by the closure below
    lib.define("axpy_(float a, Tensor x, Tensor(a!) y) -> ()")
    lib.impl("axpy_", lambda a, x, y: _kernels.axpy_(a, x, y), "CPU")
    torch.library.register_fake("tdb_dispatch_bench::axpy_", lambda a, x, y: None, lib=lib)  # no eager cost
    library_op = torch.ops.tdb_dispatch_bench.axpy_.default
    overload = torch.ops.axpy_compile.axpy_.default
    def unless_compiling(a, x, y):  # the shortest pattern: no autograd or subclass checks
        if torch.compiler.is_compiling():
            return ac.axpy_op(a, x, y)
        _kernels.axpy_(a, x, y)

    return {
        "kernel called directly": (_kernels.axpy_, "no compile support (Dynamo graph-breaks, or fails with "
                                   "fullgraph=True), no autograd, no dispatch to other devices, modes or subclasses"),
        "kernel unless torch.compiler.is_compiling()": (
            unless_compiling, "in eager, as the direct call: autograd silently (no error, no gradient), "
                              "subclasses and FakeTensorMode outside compile (the kernel's BufferError)"),
        "axpy_compile.axpy_: kernel if direct(x, y), else the op (recommended)": (
            ac.axpy_, "in eager: dispatch modes (TorchDispatchMode, FlopCounterMode) and other devices' "
                      "kernels; autograd, subclasses and compile take the op"),
        "torch.library.custom_op object": (ac.axpy_op, "nothing (fake, autograd, functionalization, opcheck)"),
        "its OpOverload (torch.ops.ns.op.default)": (overload, "nothing; skips the custom_op Python wrapper"),
        "torch.library.Library define + impl (CPU) + register_fake": (
            library_op, "no autograd formula unless registered; schema written by hand; mutation declared in it"),
        "scaled_copy(a, x), a functional op: kernel called directly": (
            lambda a, x, y: _kernels.scaled_copy(a, x), "as above (allocates its result through the table)"),
        "scaled_copy: axpy_compile.scaled_copy (recommended)": (
            lambda a, x, y: ac.scaled_copy(a, x), "as axpy_compile.axpy_"),
        "scaled_copy: torch.library.custom_op object": (
            lambda a, x, y: ac.scaled_copy_op(a, x), "nothing"),
        "_lib": (lib, ""),
    }


def measure(fns, rounds: int, number: int):
    x, y = torch.randn(16), torch.zeros(16)
    names = [n for n in fns if not n.startswith("_")]
    times = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            fn = fns[name][0]
            fn(0.0, x, y)  # warm up (first dispatch builds caches)
            best = min(timeit.repeat(lambda: fn(0.0, x, y), number=number, repeat=3))
            times[name].append(best / number * 1e9)
    return times


def report(fns, times) -> str:
    lines = [f"torch {torch.__version__}, {os.cpu_count()} cores; ns per call (median of rounds, each the best "
             f"of 3 timeit runs); ratio to the same kernel called directly, median of per-round ratios", "",
             "| route | ns per call | ratio to direct | gives up |", "|---|---:|---:|---|"]
    for name, ts in times.items():
        direct = times[BASE if not name.startswith("scaled_copy") else SCALED_BASE]  # the same kernel's direct call
        ratio = statistics.median(t / d for t, d in zip(ts, direct))
        lines.append(f"| {name} | {statistics.median(ts):,.0f} | {ratio:.1f}x | {fns[name][1]} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--site", type=Path, help="a directory where axpy_compile is installed (else built)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--number", type=int, default=20000, help="calls per timeit run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        site = args.site or Path(tmp) / "site"
        if args.site is None:
            build(site)
        sys.path.insert(0, str(site))
        import axpy_compile

        fns = routes(axpy_compile)
        times = measure(fns, args.rounds, args.number)
    print(report(fns, times))
    return 0


if __name__ == "__main__":
    sys.exit(main())
