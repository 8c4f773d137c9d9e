#!/usr/bin/env python
"""Per-call cost of taking tensors in a C++ function, by binding flavour (issue 12), in one process.

    python benchmarks/bindings.py            # builds the modules once (CMake + torch.utils.cpp_extension,
                                             # about 2-3 minutes on 2 cores), then measures for ~30 s
    python benchmarks/bindings.py --write    # also puts the section into benchmarks/RESULTS.md
    python benchmarks/bindings.py --typed-only --write   # only the typed-parameter section (issue 26)
    python benchmarks/bindings.py --outputs-only --write # only the section on returning a new tensor

Contenders, each a function f0(), f1(x), f3(x, y, z), f8(a, ..., h) that reads every tensor's data pointer:
raw consumer.h (METH_FASTCALL, tdb::TensorView), the pybind11 caster (torch_dlpack_bridge/pybind11.h),
the nanobind caster (nanobind.h), a pybind11 torch extension taking torch::Tensor, nanobind's nb::ndarray<>
(which goes through __dlpack__), and tvm-ffi's testing.nop (converts each argument through the exchange
table; reads nothing). benchmarks/run.py includes this section in RESULTS.md too.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import timeit
from pathlib import Path
from typing import Callable, Dict, List, Tuple

HERE = Path(__file__).resolve().parent
SRC = HERE / "bindings"
START, END = "<!-- bindings:start -->", "<!-- bindings:end -->"
TYPED_START, TYPED_END = "<!-- bindings-typed:start -->", "<!-- bindings-typed:end -->"  # issue 26, just after
OUTPUTS_START, OUTPUTS_END = "<!-- bindings-outputs:start -->", "<!-- bindings-outputs:end -->"  # after typed

import torch  # noqa: E402

import torch_dlpack_bridge  # noqa: E402  (publishes this project's table before tvm-ffi caches one)
from torch_dlpack_bridge import _probe  # noqa: E402


def _cmake_dir(module: str, flag: str) -> str:
    return subprocess.run([sys.executable, "-m", module, flag], capture_output=True, text=True,
                          check=True).stdout.strip()


def build(build_dir: Path) -> Dict[str, object]:
    """Builds (or reuses) the CMake modules and the torch extension; returns the imported modules."""
    configure = ["cmake", "-S", str(SRC), "-B", str(build_dir), f"-DPython_EXECUTABLE={sys.executable}",
                 f"-Dpybind11_DIR={_cmake_dir('pybind11', '--cmakedir')}",
                 f"-Dnanobind_DIR={_cmake_dir('nanobind', '--cmake_dir')}",
                 f"-Dtorch_dlpack_bridge_DIR={torch_dlpack_bridge.get_cmake_dir()}"]
    for cmd in (configure, ["cmake", "--build", str(build_dir), "-j", os.environ.get("MAX_JOBS", "1")]):
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{res.stdout}\n{res.stderr}")
    sys.path.insert(0, str(build_dir))
    import bench_nanobind
    import bench_pybind11
    import bench_raw

    from torch.utils.cpp_extension import load
    torch_ext = load(name="tdb_bench_torch_ext", sources=[str(SRC / "bench_torch_ext.cpp")], extra_cflags=["-O3"])
    return {"raw": bench_raw, "pybind11": bench_pybind11, "nanobind": bench_nanobind, "torch_ext": torch_ext}


def contenders(mods) -> Dict[str, Tuple[Callable, Callable, Callable]]:
    """name -> (f0, f1, f3, f8)."""
    out = {
        "raw consumer.h (METH_FASTCALL)": (mods["raw"].f0, mods["raw"].f1, mods["raw"].f3, mods["raw"].f8),
        "pybind11 caster (tdb::TensorView)": (mods["pybind11"].f0, mods["pybind11"].f1, mods["pybind11"].f3,
                                              mods["pybind11"].f8),
        "nanobind caster (tdb::TensorView)": (mods["nanobind"].f0, mods["nanobind"].f1, mods["nanobind"].f3,
                                              mods["nanobind"].f8),
        "pybind11 torch extension (torch::Tensor)": (mods["torch_ext"].f0, mods["torch_ext"].f1, mods["torch_ext"].f3,
                                                     mods["torch_ext"].f8),
        "nanobind nb::ndarray<>": (mods["nanobind"].f0, mods["nanobind"].nd1, mods["nanobind"].nd3,
                                   mods["nanobind"].nd8),
    }
    try:
        import tvm_ffi

        nop = tvm_ffi.get_global_func("testing.nop")
        out["tvm-ffi testing.nop (reads nothing)"] = (nop, nop, nop, nop)
    except Exception as e:  # not installed: reported, not fatal
        print(f"tvm-ffi not measured: {e}", file=sys.stderr)
    return out


def typed_contenders(mods) -> Dict[str, Tuple[Callable, Callable]]:
    """Issue 26: name -> (f0, the 8-tensor function). The untyped casters come first (the baselines)."""
    pb, nb, ext = mods["pybind11"], mods["nanobind"], mods["torch_ext"]
    return {
        "pybind11 caster, `tdb::TensorView`, no checks": (pb.f0, pb.f8),
        "pybind11 caster, `tdb::TensorView` + `check_*` by hand": (pb.f0, pb.checked8),
        "pybind11 caster, typed `tdb::Tensor<float, ndim<1>, c_contig, device::cpu>`": (pb.f0, pb.typed8),
        "pybind11 caster, typed `tdb::Tensor<float, ndim<1>, device::cpu>` (any strides: overlap check)":
            (pb.f0, pb.strided8),
        "nanobind caster, `tdb::TensorView`, no checks": (nb.f0, nb.f8),
        "nanobind caster, `tdb::TensorView` + `check_*` by hand": (nb.f0, nb.checked8),
        "nanobind caster, typed `tdb::Tensor<float, ndim<1>, c_contig, device::cpu>`": (nb.f0, nb.typed8),
        "nanobind caster, typed `tdb::Tensor<float, ndim<1>, device::cpu>` (any strides: overlap check)":
            (nb.f0, nb.strided8),
        "nanobind `nb::ndarray<float, ndim<1>, c_contig, device::cpu>`": (nb.f0, nb.ndc8),
        "pybind11 torch extension, `torch::Tensor` + `TORCH_CHECK`": (ext.f0, ext.checked8),
    }


def measure_typed(mods, rounds: int, calls: int) -> Dict[str, Dict[str, List[float]]]:
    """ns per call of f0 and of the 8-tensor function, per contender, one entry per round; rotating order."""
    eight = [torch.ones(4) for _ in range(8)]
    table = typed_contenders(mods)
    names = list(table)
    data: Dict[str, Dict[str, List[float]]] = {n: {"0": [], "8": []} for n in names}
    g = dict(zip("abcdeghi", eight))
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            f0, f8 = table[name]
            number = max(1, calls // 20) if "nb::ndarray" in name else calls  # microseconds per tensor
            data[name]["0"].append(timeit.timeit("f()", number=calls, globals={"f": f0}) / calls * 1e9)
            t = timeit.timeit("f(a, b, c, d, e, g, h, i)", number=number, globals={"f": f8, **g})
            data[name]["8"].append(t / number * 1e9)
    return data


def typed_report(typed: Dict[str, Dict[str, List[float]]], rounds: int, calls: int, elapsed: float) -> str:
    """The issue 26 section: per-tensor cost of declared constraints against the untyped casters."""
    names = list(typed)
    ext = names[-1]
    untyped = {lib: next(n for n in names if n.startswith(lib + " caster")) for lib in ("pybind11", "nanobind")}
    baseline = {n: untyped[n.split(" ")[0]] for n in names if " caster" in n}
    lines = [TYPED_START, "## Typed parameters: 8 tensors, each float32, 1-D, c_contig, cpu, writable "
             "(benchmarks/bindings.py)", "",
             f"torch {torch.__version__}, Python {sys.version.split()[0]}, this project's table published; every tensor "
             f"float32 CPU (4,); each function reads every data pointer. Best of {rounds} rounds x {calls} calls "
             f"(`nb::ndarray`: {max(1, calls // 20)}), contenders in rotating order, measured in {elapsed:.0f} s; load "
             f"average at the end {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs. Per tensor = (8-tensor call - "
             "empty call) / 8, the binding library's argument handling included; ratios are medians of per-round "
             "ratios, every contender measured in the same rounds.", "",
             "| contender | empty call ns | 8 tensors ns | per tensor ns | per tensor / same library's untyped caster "
             "| 8 tensors / `torch::Tensor` + `TORCH_CHECK` |", "|---|---:|---:|---:|---:|---:|"]
    for n in names:
        d = typed[n]
        base = "-" if n.startswith("pybind11 torch") or "nb::ndarray" in n else \
            f"{ratio(per_tensor(d, 8), per_tensor(typed[baseline[n]], 8)):.2f}x"
        lines.append(f"| {n} | {min(d['0']):.0f} | {min(d['8']):,.0f} | {min(per_tensor(d, 8)):.1f} | {base} | "
                     f"{ratio(d['8'], typed[ext]['8']):.2f}x |")
    nd = next(n for n in names if "nb::ndarray" in n)
    nb_typed = next(n for n in names if n.startswith("nanobind caster, typed"))
    lines += ["", f"`nb::ndarray` per tensor / nanobind typed `tdb::Tensor` per tensor: "
                  f"{ratio(per_tensor(typed[nd], 8), per_tensor(typed[nb_typed], 8)):.1f}x "
                  "(`nb::ndarray` takes torch tensors through `__dlpack__`).", "",
              "| target (issues 26, 29) | measured | met |", "|---|---:|---|"]
    for typed_name in (n for n in names if " caster, typed" in n):
        r = ratio(per_tensor(typed[typed_name], 8), per_tensor(typed[baseline[typed_name]], 8))
        kind = "any strides" if "any strides" in typed_name else "c_contig"
        lines.append(f"| {typed_name.split(',')[0]}: typed ({kind}) per tensor <= 1.1 x untyped caster per tensor | "
                     f"{r:.2f}x | {'yes' if r <= 1.1 else '**no**'} |")
    lines.append(TYPED_END)
    return "\n".join(lines) + "\n"


def outputs_contenders(mods) -> Dict[str, Callable]:
    """Returning one new tensor like x (float32, 1-D): name -> new1(x). The torch extension comes first (the
    baseline of the ratios)."""
    pb, nb, raw, ext = mods["pybind11"], mods["nanobind"], mods["raw"], mods["torch_ext"]
    return {
        "pybind11 torch extension, `torch::empty(x.sizes(), x.options())`": ext.new1,
        "pybind11 caster, `tdb::OwnedTensor<float, ndim<1>>::empty_like(x)`": pb.new1,
        "nanobind caster, `tdb::OwnedTensor<float, ndim<1>>::empty_like(x)`": nb.new1,
        "raw consumer.h, `OwnedTensor::empty_like(x).to_python()`": raw.new1,
        "nanobind `nb::ndarray<nb::pytorch, float, ndim<1>>` (x as `nb::ndarray`)": nb.nd_new1,
        "nanobind `nb::ndarray<nb::pytorch, float, ndim<1>>`, the return alone (x not taken as a tensor)":
            nb.nd_return4,
        "Python `torch.empty_like(x)` (no extension)": torch.empty_like,
        ALLOC_FLOOR: ext.alloc1,
        "floor: a new torch.Tensor over x's storage, no allocation (torch extension)": ext.floor1,
    }


# A torch extension that allocates with torch's CPU allocator and builds the tensor itself: what any table's
# allocator must do at the least, less the table (no dispatcher, no DLPack structs).
ALLOC_FLOOR = "allocating floor: torch's CPU allocator, a new torch.Tensor, no dispatcher (torch extension)"


def measure_outputs(mods, rounds: int, calls: int) -> Dict[str, List[float]]:
    """ns per call of new1(x) per contender, one entry per round; rotating order."""
    x = torch.ones(4)
    table = outputs_contenders(mods)
    names = list(table)
    data: Dict[str, List[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            number = max(1, calls // 20) if "x as `nb::ndarray`" in name else calls  # microseconds per tensor
            data[name].append(timeit.timeit("f(x)", number=number, globals={"f": table[name], "x": x}) / number * 1e9)
    return data


def outputs_report(data: Dict[str, List[float]], rounds: int, calls: int, elapsed: float) -> str:
    """The section on returning a new tensor: per call, against the torch extension calling torch::empty."""
    names = list(data)
    ext = names[0]
    lines = [OUTPUTS_START, "## Returning a new tensor: one float32 (4,) output like the input (benchmarks/bindings.py)",
             "", f"torch {torch.__version__}, Python {sys.version.split()[0]}, this project's table published; x is "
             "a float32 CPU tensor (4,), each function allocates and returns one new tensor like it (not written). "
             f"Best of {rounds} rounds x {calls} calls (`nb::ndarray`: {max(1, calls // 20)}), contenders in "
             f"rotating order, measured in {elapsed:.0f} s; load average at the end {os.getloadavg()[0]:.1f} on "
             f"{os.cpu_count()} CPUs. Ratios are medians of per-round ratios.", "",
             "| contender | ns per call | / `torch::empty` extension |", "|---|---:|---:|"]
    for n in names:
        lines.append(f"| {n} | {min(data[n]):,.0f} | {ratio(data[n], data[ext]):.2f}x |")
    pb, floor = names[1], names[-1]
    r, r_alloc = ratio(data[pb], data[ext]), ratio(data[ALLOC_FLOOR], data[ext])
    above = ratio([p - f for p, f in zip(data[pb], data[floor])], [e - f for e, f in zip(data[ext], data[floor])])
    lines += ["", "Every contender makes a new `torch.Tensor` (TensorImpl, Python object, garbage-collector tracking, "
              "and freeing it all): the floor row. Above that floor, the pybind11 caster costs "
              f"**{above:.2f}x** what the `torch::empty` extension does (per-round medians of (contender - floor) / "
              "(extension - floor)).", "",
              "A pybind11 function returning a tensor from torch's CPU allocator costs at least the allocating "
              f"floor row, **{r_alloc:.2f}x** the extension in this run: the allocator, a new torch.Tensor and "
              "pybind11's call, with no table between. The target below, for a pybind11 function, is "
              + ("under that floor: nothing allocating through torch's allocator from pybind11 reaches it on CPU."
                 if r_alloc > 0.6 else "above that floor."),
              "", "| target | measured | met |", "|---|---:|---|",
              f"| pybind11 caster returning a `tdb::OwnedTensor` <= 0.6 x the `torch::empty` extension, per call | "
              f"{r:.2f}x | {'yes' if r <= 0.6 else '**no**'} |", OUTPUTS_END]
    return "\n".join(lines) + "\n"


def outputs_section(mods, rounds: int = 7, calls: int = 200000) -> str:
    """Measures returning a new tensor and returns its markdown section."""
    start = time.monotonic()
    data = measure_outputs(mods, rounds, calls)
    save(outputs=data)
    return outputs_report(data, rounds, calls, time.monotonic() - start)


def measure(mods, rounds: int, calls: int) -> Dict[str, Dict[str, List[float]]]:
    """ns per call for each contender and arity, one list entry per round; rounds rotate the order."""
    x, y, z = torch.ones(4), torch.ones(4), torch.ones(4)
    eight = [torch.ones(4) for _ in range(8)]
    table = contenders(mods)
    names = list(table)
    data: Dict[str, Dict[str, List[float]]] = {n: {"0": [], "1": [], "3": [], "8": []} for n in names}
    data["_view_loop"], data["_dltensor"] = {"1": []}, {"1": []}
    api = torch_dlpack_bridge.exchange_api()
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            f0, f1, f3, f8 = table[name]
            for arity, stmt, f in (("0", "f()", f0), ("1", "f(x)", f1), ("3", "f(x, y, z)", f3),
                                   ("8", "f(a, b, c, d, e, g, h, i)", f8)):
                # nb::ndarray takes microseconds per tensor: fewer calls
                number = max(1, calls // 20) if name == "nanobind nb::ndarray<>" and arity != "0" else calls
                g = {"f": f, "x": x, "y": y, "z": z, **dict(zip("abcdeghi", eight))}
                t = timeit.timeit(stmt, number=number, globals=g)
                data[name][arity].append(t / number * 1e9)
        # The per-tensor costs timed in C: a tdb::TensorView, and the table function it calls.
        data["_view_loop"]["1"].append(mods["raw"].view_loop(x, calls))
        data["_dltensor"]["1"].append(_probe.time(api, "dltensor", x, calls, 1))
    return data


def per_tensor(d: Dict[str, List[float]], n: int = 3) -> List[float]:
    """Per-round cost of one tensor argument: (n-argument call - empty call) / n; the binding library's own
    per-argument handling is included."""
    return [(tn - t0) / n for t0, tn in zip(d["0"], d[str(n)])]


def ratio(a: List[float], b: List[float]) -> float:
    return statistics.median(x / y for x, y in zip(a, b))


def report(data, rounds: int, calls: int, elapsed: float) -> str:
    names = [n for n in data if not n.startswith("_")]
    raw, pb, nb = names[0], names[1], names[2]
    ext, nd = names[3], names[4]
    lines = [START, "## Binding flavours: per-call cost of taking tensors (benchmarks/bindings.py)", "",
             f"torch {torch.__version__}, Python {sys.version.split()[0]}, this project's table published; "
             f"every tensor float32 CPU (4,); each function reads every data pointer. Best of {rounds} rounds x "
             f"{calls} calls (timeit, same process, contenders in rotating order); ratios are medians of per-round "
             f"ratios. Measured in {elapsed:.0f} s; load average at the end {os.getloadavg()[0]:.1f} on "
             f"{os.cpu_count()} CPUs (a shared machine: ratios, not absolute numbers, are what to compare).", "",
             "| contender | empty call ns | 1 tensor ns | 3 tensors ns | 8 tensors ns | per tensor ns ((3 - empty) / 3) "
             "| per tensor ns ((8 - empty) / 8) | 8 tensors / torch::Tensor's |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for n in names:
        d = data[n]
        lines.append(f"| {n} | {min(d['0']):.0f} | {min(d['1']):.0f} | {min(d['3']):.0f} | {min(d['8']):,.0f} | "
                     f"{min(per_tensor(d)):.1f} | {min(per_tensor(d, 8)):.1f} | {ratio(d['8'], data[ext]['8']):.2f}x |")
    view, dlt = data["_view_loop"]["1"], data["_dltensor"]["1"]
    lines += ["", f"Timed in C: one `tdb::TensorView` {min(view):.1f} ns; this project's "
                  f"`dltensor_from_py_object_no_sync` alone {min(dlt):.1f} ns.", "", "### Targets", "",
              "| target | measured | met |", "|---|---:|---|"]

    def row(text, value, ok):
        lines.append(f"| {text} | {value} | {'yes' if ok else '**no**'} |")

    r = ratio(per_tensor(data[pb]), per_tensor(data[ext]))
    row("pybind11 caster per tensor <= 0.5 x torch::Tensor per tensor", f"{r:.2f}x", r <= 0.5)
    for arity in ("1", "3"):
        r = ratio(data[nb][arity], data[nd][arity])
        row(f"nanobind caster beats nb::ndarray ({arity} tensor{'s' if arity == '3' else ''}, per call)",
            f"{r:.2f}x", r < 1.0)
    r8 = ratio(per_tensor(data[pb], 8), per_tensor(data[ext], 8))
    lines.insert(lines.index("### Targets"), "")
    lines.insert(lines.index("### Targets"),
                 f"Issue 18's caster target, per tensor argument with pybind11's own argument handling included "
                 f"((f8 - f0) / 8, per-round ratio): pybind11 caster / torch::Tensor = **{r8:.2f}x** (target <= 0.6x: "
                 f"{'met' if r8 <= 0.6 else 'not met'}).")
    lines.insert(lines.index("### Targets"), "")
    r = ratio(view, dlt)
    row("raw consumer.h per tensor (tdb::TensorView, C loop) <= 1.5 x dltensor_from_py_object_no_sync", f"{r:.2f}x",
        r <= 1.5)
    r2 = ratio(per_tensor(data[raw]), dlt)
    row("(same, from Python: raw (3 - empty) / 3 against dltensor_from_py_object_no_sync; includes CPython's "
        "per-argument call cost)", f"{r2:.2f}x", r2 <= 1.5)
    lines.append(END)
    return "\n".join(lines) + "\n"


def section(build_dir: Path, rounds: int = 7, calls: int = 200000) -> str:
    """Builds, measures and returns the markdown section (used by benchmarks/run.py too)."""
    torch_dlpack_bridge.install(prefer="bridge")  # the table this section is about, whatever ran before
    mods = build(build_dir)
    start = time.monotonic()
    data = measure(mods, rounds, calls)
    elapsed = time.monotonic() - start
    text = report(data, rounds, calls, elapsed)
    save(data=data)
    return text + "\n" + typed_section(mods, rounds, calls) + "\n" + outputs_section(mods, rounds, calls)


def typed_section(mods, rounds: int = 7, calls: int = 200000) -> str:
    """Measures the typed contenders (issue 26) and returns their markdown section."""
    start = time.monotonic()
    typed = measure_typed(mods, rounds, calls)
    save(typed=typed)
    return typed_report(typed, rounds, calls, time.monotonic() - start)


def save(**parts) -> None:
    """Updates benchmarks/consumers/bindings-torch<version>.json with `parts` (data=..., typed=...)."""
    out = HERE / "consumers" / f"bindings-torch{torch.__version__.split('+')[0]}.json"
    out.parent.mkdir(exist_ok=True)
    old = json.loads(out.read_text()) if out.exists() else {}
    old.update({"torch": torch.__version__, **parts})
    out.write_text(json.dumps(old, indent=1) + "\n")


def write_into(results: Path, text: str, start: str = START, end: str = END, after: str = "") -> None:
    """Replaces the section of RESULTS.md between the `start` and `end` markers (the bindings section by
    default; benchmarks/consumers.py writes its own), or inserts it just after the marker `after` when that is
    in the file, or appends it."""
    old = results.read_text() if results.exists() else ""
    if start in old and end in old:
        new = old[:old.index(start)] + text.rstrip("\n") + old[old.index(end) + len(end):]
    elif after and after in old:
        at = old.index(after) + len(after)
        new = old[:at] + "\n\n" + text.rstrip("\n") + old[at:]
    else:
        new = old.rstrip("\n") + "\n\n" + text
    results.write_text(new)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=200000, help="calls per timeit run")
    parser.add_argument("--build-dir", type=Path, default=SRC / "build")
    parser.add_argument("--write", action="store_true", help="put the section into benchmarks/RESULTS.md")
    parser.add_argument("--typed-only", action="store_true",
                        help="measure only the typed-parameter contenders (issue 26) and write only their section")
    parser.add_argument("--outputs-only", action="store_true",
                        help="measure only returning a new tensor and write only its section")
    args = parser.parse_args()
    if args.typed_only:
        torch_dlpack_bridge.install(prefer="bridge")
        text = typed_section(build(args.build_dir), args.rounds, args.calls)
    elif args.outputs_only:
        torch_dlpack_bridge.install(prefer="bridge")
        text = outputs_section(build(args.build_dir), args.rounds, args.calls)
    else:
        text = section(args.build_dir, args.rounds, args.calls)
    print(text)
    if args.write:
        results = HERE / "RESULTS.md"
        if not (args.typed_only or args.outputs_only):
            write_into(results, text[:text.index(END) + len(END)])
        if TYPED_START in text:
            write_into(results, text[text.index(TYPED_START):text.index(TYPED_END) + len(TYPED_END)], TYPED_START,
                       TYPED_END, after=END)
        if OUTPUTS_START in text:
            write_into(results, text[text.index(OUTPUTS_START):], OUTPUTS_START, OUTPUTS_END, after=TYPED_END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
