#!/usr/bin/env python
"""Per-call cost of taking tensors in a C++ function, by binding flavour (issue 12), in one process.

    python benchmarks/bindings.py            # builds the modules once (CMake + torch.utils.cpp_extension,
                                             # about 2-3 minutes on 2 cores), then measures for ~30 s
    python benchmarks/bindings.py --write    # also puts the section into benchmarks/RESULTS.md
    python benchmarks/bindings.py --typed-only --write   # only the typed-parameter section (issue 26)
    python benchmarks/bindings.py --outputs-only --write # only the section on returning a new tensor
    python benchmarks/bindings.py --render --write       # the sections again from the saved results (no run)

Contenders, each a function f0(), f1(x), f3(x, y, z), f8(a, ..., h) that reads every tensor's data pointer:
raw consumer.h (METH_FASTCALL, tdb::TensorView), the pybind11 caster (torch_dlpack_bridge/pybind11.h),
the nanobind caster (nanobind.h), a pybind11 torch extension taking torch::Tensor, nanobind's nb::ndarray<>
(which goes through __dlpack__), where torch >= 2.14 is installed the pybind11 caster of `torch::stable::Tensor`
that kernel authors write for torch's stable ABI (bench_stable), and tvm-ffi's testing.nop (converts each argument
through the exchange table; reads nothing). The typed-parameter section also times the pybind11 and nanobind
modules against the same modules built with `tdb::explain_refusals(m)` (bench_*_explain), on calls they accept
(issue 44) and per tensor of an 8-tensor call (issue 51).
benchmarks/run.py includes this section in RESULTS.md too.
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
# Each part's heading in RESULTS.md, outside its markers: docs/benchmarks.md includes what is between them under
# headings of its own.
HEADINGS = {START: "## Binding flavours: what a kernel pays per tensor argument",
            TYPED_START: "## Typed parameters: what declared constraints cost",
            OUTPUTS_START: "## Returning a new tensor"}
PARTS = [(START, END, "data", ""), (TYPED_START, TYPED_END, "typed", END), (OUTPUTS_START, OUTPUTS_END, "outputs",
                                                                            TYPED_END)]

import torch  # noqa: E402

import torch_dlpack_bridge  # noqa: E402  (publishes this project's table before tvm-ffi caches one)
from torch_dlpack_bridge import _probe  # noqa: E402


def _cmake_dir(module: str, flag: str) -> str:
    return subprocess.run([sys.executable, "-m", module, flag], capture_output=True, text=True,
                          check=True).stdout.strip()


# The stable-ABI contender's names in the two sections (only where torch >= 2.14 is installed).
STABLE = "pybind11 stable-ABI caster (torch::stable::Tensor)"
STABLE_TYPED = "pybind11 stable-ABI caster, `torch::stable::Tensor`, no checks"


def stable_skipped() -> str:
    """Why bench_stable is not built with the installed torch; "" when it is."""
    if torch.__version__ >= (2, 14):
        return ""
    return (f"stable-ABI caster not measured: torch {torch.__version__} is installed, and "
            "`torch_tensor_from_pyobject` (PyObject -> torch::stable::Tensor) needs torch >= 2.14")


def build(build_dir: Path) -> Dict[str, object]:
    """Builds (or reuses) the CMake modules and the torch extension; returns the imported modules (under
    "stable", bench_stable or None)."""
    skipped = stable_skipped()
    configure = ["cmake", "-S", str(SRC), "-B", str(build_dir), f"-DPython_EXECUTABLE={sys.executable}",
                 f"-Dpybind11_DIR={_cmake_dir('pybind11', '--cmakedir')}",
                 f"-Dnanobind_DIR={_cmake_dir('nanobind', '--cmake_dir')}",
                 f"-Dtorch_dlpack_bridge_DIR={torch_dlpack_bridge.get_cmake_dir()}",
                 f"-DTDB_BENCH_TORCH_DIR={'' if skipped else Path(torch.__file__).parent}"]
    for cmd in (configure, ["cmake", "--build", str(build_dir), "-j", os.environ.get("MAX_JOBS", "1")]):
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{res.stdout}\n{res.stderr}")
    sys.path.insert(0, str(build_dir))
    import bench_nanobind
    import bench_nanobind_explain
    import bench_pybind11
    import bench_pybind11_explain
    import bench_raw
    stable = None
    if skipped:
        print(skipped, file=sys.stderr)
    else:
        import bench_stable as stable

    from torch.utils.cpp_extension import load
    torch_ext = load(name="tdb_bench_torch_ext", sources=[str(SRC / "bench_torch_ext.cpp")], extra_cflags=["-O3"])
    return {"raw": bench_raw, "pybind11": bench_pybind11, "nanobind": bench_nanobind, "torch_ext": torch_ext,
            "pybind11_explain": bench_pybind11_explain, "nanobind_explain": bench_nanobind_explain, "stable": stable}


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
    if mods["stable"]:
        out[STABLE] = (mods["stable"].f0, mods["stable"].f1, mods["stable"].f3, mods["stable"].f8)
    try:
        import tvm_ffi

        nop = tvm_ffi.get_global_func("testing.nop")
        out["tvm-ffi testing.nop (reads nothing)"] = (nop, nop, nop, nop)
    except Exception as e:  # not installed: reported, not fatal
        print(f"tvm-ffi not measured: {e}", file=sys.stderr)
    return out


def typed_contenders(mods) -> Dict[str, Tuple[Callable, Callable]]:
    """Issue 26: name -> (f0, the 8-tensor function). The untyped casters come first (the baselines), the
    `torch::Tensor` extension last."""
    pb, nb, ext = mods["pybind11"], mods["nanobind"], mods["torch_ext"]
    stable = {STABLE_TYPED: (mods["stable"].f0, mods["stable"].f8)} if mods["stable"] else {}
    return {
        "pybind11 caster, `tdb::TensorView`, no checks": (pb.f0, pb.f8),
        "pybind11 caster, `tdb::TensorView` + `check_*` by hand": (pb.f0, pb.checked8),
        "pybind11 caster, typed `tdb::Tensor<float, ndim<1>, c_contig, device::cpu>`": (pb.f0, pb.typed8),
        "pybind11 caster, typed `tdb::Tensor<float, ndim<1>, device::cpu>` (any strides: overlap check)":
            (pb.f0, pb.strided8),
        "pybind11 caster, typed read-only `tdb::Tensor<const float, ndim<1>, c_contig, device::cpu>`": (pb.f0, pb.ro8),
        "nanobind caster, `tdb::TensorView`, no checks": (nb.f0, nb.f8),
        "nanobind caster, `tdb::TensorView` + `check_*` by hand": (nb.f0, nb.checked8),
        "nanobind caster, typed `tdb::Tensor<float, ndim<1>, c_contig, device::cpu>`": (nb.f0, nb.typed8),
        "nanobind caster, typed `tdb::Tensor<float, ndim<1>, device::cpu>` (any strides: overlap check)":
            (nb.f0, nb.strided8),
        "nanobind caster, typed read-only `tdb::Tensor<const float, ndim<1>, c_contig, device::cpu>`": (nb.f0, nb.ro8),
        "nanobind `nb::ndarray<float, ndim<1>, c_contig, device::cpu>`": (nb.f0, nb.ndc8),
        **stable,
        "pybind11 torch extension, `torch::Tensor` + `TORCH_CHECK`": (ext.f0, ext.checked8),
    }


def explain_pairs(mods) -> Dict[str, Tuple[Callable, Callable, tuple]]:
    """Issue 44: name -> (a function of the module without `explain_refusals`, the same function of the module
    with it, arguments that it accepts). dtype2 is called with float64: its float32 overload refuses first."""
    x, y, z, x64 = torch.ones(4), torch.ones(4), torch.ones(4), torch.ones(4, dtype=torch.float64)
    calls = (("`f0()`: no tensor (no tdb parameter: left unwrapped)", "f0", ()),
             ("`ro1(x)`: 1 tensor, read-only", "ro1", (x,)),
             ("`ro3(x, y, z)`: 3 tensors, read-only", "ro3", (x, y, z)),
             ("`typed1(x)`: 1 tensor, written", "typed1", (x,)),
             ("`dtype2(x)`: x float64, the float32 overload refused first", "dtype2", (x64,)))
    return {f"{lib} {label}": (getattr(mods[lib], fn), getattr(mods[lib + "_explain"], fn), args)
            for lib in ("pybind11", "nanobind") for label, fn, args in calls}


def explain_kinds(mods) -> Dict[str, Tuple[Callable, Callable, Callable, Callable]]:
    """Issue 51's measure, per tensor: name -> (f0, an 8-tensor function) of the module without `explain_refusals`,
    then the same two of the module with it. f0 has no tdb parameter, so it is left unwrapped in both."""
    kinds = (("`tdb::TensorView` (untyped)", "f8"), ("typed, written", "typed8"), ("typed, read-only", "ro8"))
    return {f"{lib} {label}": (mods[lib].f0, getattr(mods[lib], fn), mods[lib + "_explain"].f0,
                               getattr(mods[lib + "_explain"], fn))
            for lib in ("pybind11", "nanobind") for label, fn in kinds}


ALTERNATIONS = 5  # per round, each module of an explain pair is timed this many times in turn; the best of each


def time_pair(into: Dict[str, List[float]], without: Callable, with_: Callable, args: tuple, calls: int,
              with_first: bool) -> None:
    """Appends ns per call of `without` and `with_` to into["without"] and into["with"]: ALTERNATIONS turns of
    calls // ALTERNATIONS each (which goes first alternates with the round), the best of each."""
    number = max(1, calls // ALTERNATIONS)
    best = {"without": float("inf"), "with": float("inf")}
    order = (("with", with_), ("without", without)) if with_first else (("without", without), ("with", with_))
    for _ in range(ALTERNATIONS):
        for key, f in order:
            t = timeit.timeit("f(*args)", number=number, globals={"f": f, "args": args}) / number * 1e9
            best[key] = min(best[key], t)
    for key, t in best.items():
        into[key].append(t)


def measure_typed(mods, rounds: int, calls: int) -> Dict[str, Dict]:
    """ns per call of f0 and of the 8-tensor function, per contender, one entry per round; rotating order. Under
    "_explain", in the same rounds and rotation: each explain_pairs() call without and with `explain_refusals`."""
    eight = [torch.ones(4) for _ in range(8)]
    table = typed_contenders(mods)
    names = list(table)
    data: Dict[str, Dict] = {n: {"0": [], "8": []} for n in names}
    pairs, kinds = explain_pairs(mods), explain_kinds(mods)
    data["_explain"] = {n: {"without": [], "with": []} for n in pairs}
    data["_explain8"] = {n: {"0": {"without": [], "with": []}, "8": {"without": [], "with": []}} for n in kinds}
    items = names + list(pairs) + list(kinds)
    g = dict(zip("abcdeghi", eight))
    for r in range(rounds):
        for name in items[r % len(items):] + items[:r % len(items)]:
            if name in pairs:
                time_pair(data["_explain"][name], *pairs[name], calls, with_first=r % 2 == 1)
                continue
            if name in kinds:
                without0, without8, with0, with8 = kinds[name]
                time_pair(data["_explain8"][name]["0"], without0, with0, (), calls, with_first=r % 2 == 1)
                time_pair(data["_explain8"][name]["8"], without8, with8, tuple(eight), calls, with_first=r % 2 == 1)
                continue
            f0, f8 = table[name]
            number = max(1, calls // 20) if "nb::ndarray" in name else calls  # microseconds per tensor
            data[name]["0"].append(timeit.timeit("f()", number=calls, globals={"f": f0}) / calls * 1e9)
            t = timeit.timeit("f(a, b, c, d, e, g, h, i)", number=number, globals={"f": f8, **g})
            data[name]["8"].append(t / number * 1e9)
    return data


def typed_report(typed: Dict[str, Dict], meta: Dict[str, object]) -> str:
    """The typed-parameter section: per-tensor cost of declared constraints against the untyped casters, and what
    `explain_refusals` adds to an accepted call."""
    names = [n for n in typed if not n.startswith("_")]
    ext = names[-1]
    stable = STABLE_TYPED in names  # measured only with torch >= 2.14: per tensor / its per tensor
    vs_stable = {n: ratio(per_tensor(typed[n], 8), per_tensor(typed[STABLE_TYPED], 8)) for n in names} if stable else {}
    untyped = {lib: next(n for n in names if n.startswith(lib + " caster")) for lib in ("pybind11", "nanobind")}
    baseline = {n: untyped[n.split(" ")[0]] for n in names if " caster" in n}
    typed_names = [n for n in names if " caster, typed" in n]
    r = {n: ratio(per_tensor(typed[n], 8), per_tensor(typed[baseline[n]], 8)) for n in typed_names}
    read_only = [n for n in typed_names if "read-only" in n]  # (absent from runs saved before issue 44)
    typed_names = [n for n in typed_names if n not in read_only]
    lines = [TYPED_START, f"A typed parameter costs **{min(r.values()):.2f}-{max(r.values()):.2f}x** the same "
             "library's untyped caster per tensor (pybind11 and nanobind, with and without `c_contig`). Kernels of 8 "
             "tensors, each float32, 1-D, CPU and written (`tdb::Tensor<float, ...>`; the read-only rows: `const "
             "float`); per tensor "
             "= (8-tensor call - empty call) / 8, the binding library's argument handling included.", "",
             "| contender | 8 tensors ns | per tensor ns | per tensor / untyped caster | 8 tensors / `torch::Tensor` "
             "+ `TORCH_CHECK` |" + (" per tensor / stable-ABI caster |" if stable else ""),
             "|---|---:|---:|---:|---:|" + ("---:|" if stable else "")]
    for n in names:
        d = typed[n]
        base = "-" if n not in baseline else f"{ratio(per_tensor(d, 8), per_tensor(typed[baseline[n]], 8)):.2f}x"
        lines.append(f"| {n} | {min(d['8']):,.0f} | {min(per_tensor(d, 8)):,.1f} | {base} | "
                     f"{ratio(d['8'], typed[ext]['8']):.2f}x |" + (f" {vs_stable[n]:.2f}x |" if stable else ""))
    nd = next(n for n in names if "nb::ndarray" in n)
    nb_typed = next(n for n in names if n.startswith("nanobind caster, typed"))
    lines += ["", f"`nb::ndarray` per tensor / nanobind typed `tdb::Tensor` per tensor: "
                  f"{ratio(per_tensor(typed[nd], 8), per_tensor(typed[nb_typed], 8)):.1f}x "
                  "(`nb::ndarray` takes torch tensors through `__dlpack__`).", ""]
    explain = typed.get("_explain")  # (absent from runs saved before issue 44's rows)
    lines += explain_table(explain) if explain else []
    explain8 = typed.get("_explain8")  # (absent from runs saved before issue 51's per-tensor rows)
    lines += explain8_table(explain8) if explain8 else []
    why = ("a written parameter checks that the tensor does not require grad in grad mode (torch refuses in-place "
           "writes to such tensors) and bumps its version counter once the overload is chosen, which the untyped "
           "caster does not (benchmarks/NOTES.md)")

    def results_of(ratios: Dict[str, float]) -> str:
        return "; ".join(f"{n.split(' ')[0]} {ratios[n]:.2f}x ({'any strides' if 'any strides' in n else 'c_contig'})"
                         for n in typed_names)

    lines.append(goal("a written typed parameter per tensor <= 1.15x the same library's untyped caster",
                      results_of(r), all(r[n] <= 1.15 for n in typed_names), why))
    vs_ext = {n: ratio(per_tensor(typed[n], 8), per_tensor(typed[ext], 8)) for n in typed_names}
    lines.append(goal("a written typed parameter per tensor <= 0.70x a `torch::Tensor` argument", results_of(vs_ext),
                      all(v <= 0.70 for v in vs_ext.values()), "-"))
    if read_only:
        lines.append(goal("a read-only typed parameter per tensor <= 1.05x the same library's untyped caster",
                          "; ".join(f"{n.split(' ')[0]} {r[n]:.2f}x" for n in read_only),
                          all(r[n] <= 1.05 for n in read_only), "its dtype, rank, device and order checks"))
    if explain:
        lines += explain_goals(explain, explain8)
    if stable:
        lines.append(goal("a written typed parameter per tensor <= 0.35x the stable-ABI caster", results_of(vs_stable),
                          all(vs_stable[n] <= 0.35 for n in typed_names), "-"))
        lines.append("- A read-only typed parameter per tensor against the stable-ABI caster: "
                     + "; ".join(f"{n.split(' ')[0]} {vs_stable[n]:.2f}x" for n in read_only) + ".")
    else:
        lines.append(f"- The stable-ABI caster (`torch::stable::Tensor`) needs torch >= 2.14: not measured with torch "
                     f"{meta['torch']}.")
    lines += ["", measured(meta), TYPED_END]
    return "\n".join(lines) + "\n"


def explain_ratios(explain: Dict[str, Dict[str, List[float]]]) -> Dict[str, float]:
    """Per call: with `explain_refusals` / without, the median of the per-round ratios."""
    return {n: ratio(d["with"], d["without"]) for n, d in explain.items()}


def explain_table(explain: Dict[str, Dict[str, List[float]]]) -> List[str]:
    """The rows of issue 44's measure: per call, the module with `explain_refusals` against the same without."""
    lines = ["A module that calls `tdb::explain_refusals(m)` at its end against the same module without it (one "
             f"source built twice), on calls that each accepts: per round, each module timed {ALTERNATIONS} times in "
             "turn (the best of each), in the same rounds and rotation as the rows above.", "",
             "| call | without ns | with `explain_refusals` ns | with / without | range over rounds |",
             "|---|---:|---:|---:|---:|"]
    for n, d in explain.items():
        rounds = [w / o for w, o in zip(d["with"], d["without"])]
        lines.append(f"| {n} | {min(d['without']):,.1f} | {min(d['with']):,.1f} | "
                     f"{ratio(d['with'], d['without']):.2f}x | {min(rounds):.2f}-{max(rounds):.2f}x |")
    return lines + [""]


def explain8_ratios(explain8: Dict[str, Dict[str, Dict[str, List[float]]]]) -> Dict[str, List[float]]:
    """Per tensor, per round: (8-tensor call - f0()) with `explain_refusals` / the same without."""
    return {n: [w / o for w, o in zip(explain8_per_tensor(d, "with"), explain8_per_tensor(d, "without"))]
            for n, d in explain8.items()}


def explain8_per_tensor(d: Dict[str, Dict[str, List[float]]], side: str) -> List[float]:
    """One side ("with" or "without") of an explain8 pair, per tensor per round (per_tensor())."""
    return per_tensor({"0": d["0"][side], "8": d["8"][side]}, 8)


def explain8_table(explain8: Dict[str, Dict[str, Dict[str, List[float]]]]) -> List[str]:
    """Issue 51's measure: per tensor, the module with `explain_refusals` against the same without."""
    lines = ["Per tensor, the same two modules: (8-tensor call - `f0()`) / 8, each function timed as the calls above "
             "(`f0` has no tdb parameter, so it is left unwrapped; the wrapper's cost is in the 8-tensor call).", "",
             "| parameter | without ns per tensor | with `explain_refusals` ns per tensor | with / without | range over "
             "rounds |", "|---|---:|---:|---:|---:|"]
    ratios = explain8_ratios(explain8)
    for n, d in explain8.items():
        per = {side: min(explain8_per_tensor(d, side)) for side in ("without", "with")}
        lines.append(f"| {n} | {per['without']:,.1f} | {per['with']:,.1f} | {statistics.median(ratios[n]):.2f}x | "
                     f"{min(ratios[n]):.2f}-{max(ratios[n]):.2f}x |")
    return lines + [""]


def explain_goals(explain: Dict[str, Dict[str, List[float]]], explain8) -> List[str]:
    """The goal line of `explain_refusals` (issue 51: per tensor, the untyped caster), then the per-call ratios (issue
    44's measure) and the typed parameters' per tensor, as information."""
    why = ("the wrapper is one more call between CPython and the library's dispatcher, which reads the thread state "
           "(a call into libpython) for the running frame and lists the call's record with it in the module's list, "
           "then takes it off, once per call; no caster looks the record up on an accepted call through tables "
           "(call.h); a bare pass-through wrapper alone measured 1.02x (pybind11) and 1.04x (nanobind), and code "
           "placement alone moves these ratios by 5% or more between two builds of one source, benchmarks/NOTES.md")
    r = explain_ratios(explain)
    per_call = []
    for lib in ("pybind11", "nanobind"):
        mine = {n: v for n, v in r.items() if n.startswith(lib + " ")}
        if mine:
            worst = max(mine, key=mine.get)
            low, high = f"{min(mine.values()):.2f}", f"{mine[worst]:.2f}"
            per_call.append(f"{lib} {high if low == high else low + '-' + high}x (highest: "
                            f"{worst[len(lib) + 1:].split(':')[0]})")
    if not explain8:  # a run saved before issue 51's rows: the per-call goal it was judged by
        return [goal("a module with `explain_refusals` <= 1.05x one without on accepted calls", "; ".join(per_call),
                     all(v <= 1.05 for v in r.values()), why)]
    r8 = {n: statistics.median(v) for n, v in explain8_ratios(explain8).items()}
    one = {n: v for n, v in r.items() if ": 1 tensor" in n}  # issue 59: a one-tensor call pays the whole wrapper
    judged = list(r8.values()) + list(one.values())
    measured = ("per tensor " + "; ".join(f"{n} {r8[n]:.2f}x" for n in r8) + "; per one-tensor call "
                + "; ".join(f"{n.split(':')[0]} {v:.2f}x" for n, v in one.items()))
    return [goal("a module with `explain_refusals` <= 1.10x one without, per tensor of an 8-tensor call (every "
                 "parameter kind) and per one-tensor call", measured, all(v <= 1.10 for v in judged), why),
            "- For the reader, per call (the first table): " + "; ".join(per_call) + "."]


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


def outputs_report(data: Dict[str, List[float]], meta: Dict[str, object]) -> str:
    """The section on returning a new tensor: per call, against the torch extension calling torch::empty."""
    names = list(data)
    ext = names[0]
    pb, floor = names[1], names[-1]
    r, r_alloc = ratio(data[pb], data[ext]), ratio(data[ALLOC_FLOOR], data[ext])
    per_round = [p / e for p, e in zip(data[pb], data[ext])]
    above = ratio([p - f for p, f in zip(data[pb], data[floor])], [e - f for e, f in zip(data[ext], data[floor])])
    lines = [OUTPUTS_START, f"A pybind11 kernel returning a new tensor through this project costs **{r:.2f}x** "
             f"(per round {min(per_round):.2f}-{max(per_round):.2f}x) what a torch extension calling `torch::empty` "
             "does. x is a float32 CPU tensor (4,); each function allocates one new tensor like it and returns it "
             "(not written).", "",
             "| contender | ns per call | / `torch::empty` extension |", "|---|---:|---:|"]
    for n in names:
        lines.append(f"| {n} | {min(data[n]):,.0f} | {ratio(data[n], data[ext]):.2f}x |")
    lines += ["", "Every contender makes a new `torch.Tensor` (TensorImpl, Python object, garbage-collector tracking, "
              "and freeing it all): the floor row. Above that floor, the pybind11 caster costs "
              f"**{above:.2f}x** what the `torch::empty` extension does (per-round medians of (contender - floor) / "
              "(extension - floor)).", "",
              goal("a pybind11 kernel returning a `tdb::OwnedTensor` <= 1.10x the allocating floor row, per call",
                   ratio(data[pb], data[ALLOC_FLOOR]), ratio(data[pb], data[ALLOC_FLOOR]) <= 1.10,
                   "the two calls through the table (allocator and import), the DLManagedTensorVersioned's malloc "
                   "and free, and the checks on both sides (benchmarks/NOTES.md)"),
              goal("a pybind11 kernel returning a `tdb::OwnedTensor` <= 0.6x the `torch::empty` extension, per call",
                   r, r <= 0.6, "a pybind11 function that allocates through torch's CPU allocator and makes a new "
                   f"torch.Tensor, with no table and no dispatcher between, already costs {r_alloc:.2f}x (the "
                   "allocating floor row): the goal is under what any such function reaches on CPU"
                   if r_alloc > 0.6 else "the allocating floor row is under the goal: the cost is ours"),
              "", measured(meta), OUTPUTS_END]
    return "\n".join(lines) + "\n"


def outputs_section(mods, rounds: int = 7, calls: int = 200000) -> str:
    """Measures returning a new tensor and returns its markdown section."""
    start = time.monotonic()
    data = measure_outputs(mods, rounds, calls)
    meta = run_meta(rounds, calls, time.monotonic() - start)
    save(outputs=data, outputs_meta=meta)
    return outputs_report(data, meta)


def run_meta(rounds: int, calls: int, elapsed: float) -> Dict[str, object]:
    """How a part was measured, saved beside its data so that its section can be written again from the file."""
    return {"rounds": rounds, "calls": calls, "elapsed": round(elapsed, 1), "load": round(os.getloadavg()[0], 1),
            "cpus": os.cpu_count(), "torch": torch.__version__, "python": sys.version.split()[0],
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}


def measured(meta: Dict[str, object]) -> str:
    """The closing line of a section: the run's conditions (the machine is described once, on the page)."""
    return (f"Measured with torch {meta['torch']}, Python {meta['python']}, this project's table published: best of "
            f"{meta['rounds']} rounds x {meta['calls']:,} calls (`nb::ndarray`: {max(1, int(meta['calls']) // 20):,}), "
            f"contenders in rotating order, ratios the medians of per-round ratios; {meta['elapsed']:.0f} s, "
            f"{meta['date']}, load average {meta['load']} on {meta['cpus']} CPUs.")


def goal(text: str, value, ok: bool, why: str) -> str:
    """A goal and its result (a ratio, or the ratios as text) as a reader needs it: met or not, and when not,
    why."""
    result = f"{value:.2f}x" if isinstance(value, float) else value
    if ok:
        return f"- Goal met: {text}: {result}."
    return f"- **Goal not met**: {text}: {result}. Why: {why}."


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


def report(data, meta: Dict[str, object]) -> str:
    names = [n for n in data if not n.startswith("_")]
    raw, pb, nb = names[0], names[1], names[2]
    ext, nd = names[3], names[4]
    r8 = ratio(per_tensor(data[pb], 8), per_tensor(data[ext], 8))
    rounds8 = [a / b for a, b in zip(per_tensor(data[pb], 8), per_tensor(data[ext], 8))]
    lines = [START, f"Per tensor argument, the pybind11 caster costs **{r8:.2f}x** (per round "
             f"{min(rounds8):.2f}-{max(rounds8):.2f}x) what a pybind11 torch extension taking `torch::Tensor` does, "
             "pybind11's own argument handling included. Every tensor float32 CPU (4,); each function reads every "
             "data pointer; per tensor = (8-tensor call - empty call) / 8.", "",
             "| contender | empty call ns | 1 tensor ns | 8 tensors ns | per tensor ns "
             "| 8 tensors / `torch::Tensor`'s |",
             "|---|---:|---:|---:|---:|---:|"]
    for n in names:
        d = data[n]
        lines.append(f"| {n} | {min(d['0']):.0f} | {min(d['1']):,.0f} | {min(d['8']):,.0f} | "
                     f"{min(per_tensor(d, 8)):,.1f} | {ratio(d['8'], data[ext]['8']):.2f}x |")
    view, dlt = data["_view_loop"]["1"], data["_dltensor"]["1"]
    lines += ["", f"Timed in C: one `tdb::TensorView` {min(view):.1f} ns; this project's "
                  f"`dltensor_from_py_object_no_sync` alone {min(dlt):.1f} ns.", ""]
    r = ratio(per_tensor(data[pb]), per_tensor(data[ext]))
    lines.append(goal("the pybind11 caster per tensor (3 tensors) <= 0.5x `torch::Tensor`'s", r, r <= 0.5, "-"))
    lines.append(goal("the pybind11 caster per tensor (8 tensors) <= 0.6x `torch::Tensor`'s", r8, r8 <= 0.6, "-"))
    for arity in ("1", "3"):
        r = ratio(data[nb][arity], data[nd][arity])
        lines.append(goal(f"the nanobind caster faster than `nb::ndarray` ({arity} tensor{'s' if arity == '3' else ''}"
                          ", per call)", r, r < 1.0, "-"))
    r = ratio(view, dlt)
    lines.append(goal("a `tdb::TensorView` in a C loop <= 1.5x `dltensor_from_py_object_no_sync` alone", r, r <= 1.5,
                      f"the view's own work (it zero-fills the DLTensor, checks rank, shape, strides and data, and "
                      f"looks the table up in its cache) is about {min(view) - min(dlt):.0f} ns, which the export "
                      "alone no longer hides since it got faster (benchmarks/NOTES.md)"))
    r2 = ratio(per_tensor(data[raw]), dlt)
    lines.append(goal("the same from Python (raw flavour, (3 tensors - empty) / 3)", r2, r2 <= 1.5,
                      "this also counts CPython's cost of passing one more argument, which no binding avoids"))
    lines += ["", measured(meta), END]
    return "\n".join(lines) + "\n"


def section(build_dir: Path, rounds: int = 7, calls: int = 200000) -> str:
    """Builds, measures and returns the markdown section (used by benchmarks/run.py too)."""
    torch_dlpack_bridge.install(prefer="bridge")  # the table this section is about, whatever ran before
    mods = build(build_dir)
    start = time.monotonic()
    data = measure(mods, rounds, calls)
    meta = run_meta(rounds, calls, time.monotonic() - start)
    text = report(data, meta)
    save(data=data, data_meta=meta)
    parts = [text, typed_section(mods, rounds, calls), outputs_section(mods, rounds, calls)]
    return "\n".join(HEADINGS[start] + "\n\n" + part for (start, _, _, _), part in zip(PARTS, parts))


def typed_section(mods, rounds: int = 7, calls: int = 200000) -> str:
    """Measures the typed contenders (issue 26) and returns their markdown section."""
    start = time.monotonic()
    typed = measure_typed(mods, rounds, calls)
    meta = run_meta(rounds, calls, time.monotonic() - start)
    save(typed=typed, typed_meta=meta)
    return typed_report(typed, meta)


def save(**parts) -> None:
    """Updates benchmarks/consumers/bindings-torch<version>.json with `parts` (data=..., typed=...)."""
    out = HERE / "consumers" / f"bindings-torch{torch.__version__.split('+')[0]}.json"
    out.parent.mkdir(exist_ok=True)
    old = json.loads(out.read_text()) if out.exists() else {}
    old.update({"torch": torch.__version__, **parts})
    out.write_text(json.dumps(old, indent=1) + "\n")


def write_into(results: Path, text: str, start: str = START, end: str = END, after: str = "",
               heading: str = "") -> None:
    """Replaces the section of RESULTS.md between the `start` and `end` markers (the bindings section by
    default; benchmarks/consumers.py writes its own), or inserts it, under `heading`, just after the marker `after`
    when that is in the file, or appends it."""
    old = results.read_text() if results.exists() else ""
    text = text[text.index(start):text.index(end) + len(end)] if start in text and end in text else text
    if start in old and end in old:
        new = old[:old.index(start)] + text.rstrip("\n") + old[old.index(end) + len(end):]
        results.write_text(new)
        return
    text = (heading + "\n\n" if heading else "") + text
    if after and after in old:
        at = old.index(after) + len(after)
        new = old[:at] + "\n\n" + text.rstrip("\n") + old[at:]
    else:
        new = old.rstrip("\n") + "\n\n" + text
    results.write_text(new)


def render(path: Path) -> str:
    """The sections again from a saved file (benchmarks/consumers/bindings-torch*.json), nothing measured: how a
    change of format reaches RESULTS.md without a rerun. Parts saved without their run details are left out."""
    saved = json.loads(path.read_text())
    reports = {"data": report, "typed": typed_report, "outputs": outputs_report}
    parts = [reports[key](saved[key], saved[key + "_meta"]) for _, _, key, _ in PARTS
             if key in saved and key + "_meta" in saved]
    return "\n".join(parts)


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
    parser.add_argument("--render", action="store_true",
                        help="measure nothing: write the sections again from the saved results of this torch")
    args = parser.parse_args()
    if args.render:
        text = render(HERE / "consumers" / f"bindings-torch{torch.__version__.split('+')[0]}.json")
    elif args.typed_only:
        torch_dlpack_bridge.install(prefer="bridge")
        text = typed_section(build(args.build_dir), args.rounds, args.calls)
    elif args.outputs_only:
        torch_dlpack_bridge.install(prefer="bridge")
        text = outputs_section(build(args.build_dir), args.rounds, args.calls)
    else:
        text = section(args.build_dir, args.rounds, args.calls)
    print(text)
    if args.write:
        for start, end, _, after in PARTS:
            if start in text:
                write_into(HERE / "RESULTS.md", text, start, end, after, HEADINGS[start])
        import summary  # noqa: E402  (benchmarks/summary.py: the section that leads follows this rerun)

        summary.write(HERE / "RESULTS.md", torch.__version__.split("+")[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
