"""The benchmark report's summary (torch_dlpack_bridge._bench.markdown_summary), on planted timings: the page
leads with one row per function and contender, so its ratio and range must be those of the per-tensor rows."""
import json
import sys
from pathlib import Path

from torch_dlpack_bridge import _bench

OURS, NATIVE, BACKPORT = _bench.OURS, _bench.NATIVE, _bench.BACKPORT


def test_summary_row_is_the_median_and_range_of_the_per_tensor_ratios():
    res = _bench.Results([OURS, NATIVE, BACKPORT], ["a", "b", "c"], "a")
    # per tensor, ours / native: 0.20, 0.50, 0.30 (two slices each); the backport timed on two tensors only
    for case, ours, native in (("a", [2, 2], [10, 10]), ("b", [5, 5], [10, 10]), ("c", [3, 3], [10, 10])):
        res.ns[("managed", case)] = {OURS: ours, NATIVE: native}
    res.ns[("managed", "a")][BACKPORT] = [4, 4]
    res.ns[("managed", "b")][BACKPORT] = [4, 4]
    res.ns[("stream", "(kDLCPU, 0)")] = {OURS: [1, 1], NATIVE: [4, 4]}
    rows = _bench.markdown_summary(res).splitlines()
    assert rows[0] == "| function | against | ours / it | range over tensors | tensors |"
    assert rows[2:] == ["| managed export + deleter | torch native | 0.30x | 0.20x-0.50x | 3 |",
                        "| managed export + deleter | tvm-ffi backport | 0.88x | 0.50x-1.25x | 2 |",
                        "| current_work_stream(kDLCPU) | torch native | 0.25x | 0.25x | 1 |"]


def _benchmarks():
    """benchmarks/bindings.py and benchmarks/summary.py (scripts, not a package)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bindings
    import summary

    return bindings, summary


def _typed(explain_pb_dtype2):
    """Planted typed-section timings (ns, two rounds): untyped 8 tensors 80 ns over an empty call of 0, typed
    written 88 (1.10x), typed read-only 96 (a ratio the written summary row must leave out), and the explain pairs;
    pybind11 dtype2's with-timings given."""
    typed = {}
    for lib in ("pybind11", "nanobind"):
        typed[f"{lib} caster, `tdb::TensorView`, no checks"] = {"0": [0, 0], "8": [80, 80]}
        typed[f"{lib} caster, typed `tdb::Tensor<float>`"] = {"0": [0, 0], "8": [88, 88]}
        typed[f"{lib} caster, typed read-only `tdb::Tensor<const float>`"] = {"0": [0, 0], "8": [96, 96]}
    typed["nanobind `nb::ndarray<float>`"] = {"0": [0, 0], "8": [800, 800]}
    typed["pybind11 torch extension, `torch::Tensor` + `TORCH_CHECK`"] = {"0": [0, 0], "8": [160, 160]}
    typed["_explain"] = {
        "pybind11 `f0()`: no tensor": {"without": [50, 50], "with": [50, 51]},  # 1.00x and 1.02x: 1.01x
        "pybind11 `dtype2(x)`: x float64": {"without": [100, 100], "with": explain_pb_dtype2},
        "nanobind `f0()`: no tensor": {"without": [40, 40], "with": [39.6, 40]},  # 0.99x and 1.00x
    }
    return typed


META = {"rounds": 2, "calls": 10, "elapsed": 1.0, "load": 1.5, "cpus": 2, "torch": "2.13.0", "python": "3.11",
        "date": "2026-11-27 03:00 UTC"}


def test_typed_section_reports_explain_refusals_per_call_and_its_goal(tmp_path):
    bindings, summary = _benchmarks()
    text = bindings.typed_report(_typed([106, 108]), META)  # pybind11 dtype2: 1.06x and 1.08x, median 1.07x
    assert "| call | without ns | with `explain_refusals` ns | with / without | range over rounds |" in text
    assert "| pybind11 `f0()`: no tensor | 50.0 | 50.0 | 1.01x | 1.00-1.02x |" in text
    assert "| pybind11 `dtype2(x)`: x float64 | 100.0 | 106.0 | 1.07x | 1.06-1.08x |" in text
    assert "| nanobind `f0()`: no tensor | 40.0 | 39.6 | 0.99x | 0.99-1.00x |" in text
    assert ("- **Goal not met**: a module with `explain_refusals` <= 1.05x one without on accepted calls: pybind11 "
            "1.01-1.07x (highest: `dtype2(x)`); nanobind 0.99x (highest: `f0()`). Why:" in text)
    assert "- Goal met: a module with `explain_refusals` <= 1.05x one without on accepted calls: pybind11 1.01-1.05x" \
        in bindings.typed_report(_typed([105, 105]), META)
    assert ("- Goal met: a written typed parameter per tensor <= 0.70x a `torch::Tensor` argument: pybind11 0.55x "
            "(c_contig); nanobind 0.55x (c_contig).") in text
    # The summary leads with it: median and range of the per-call ratios; the written row leaves read-only out.
    saved = tmp_path / "bindings.json"
    saved.write_text(json.dumps({"typed": _typed([106, 108])}))
    rows = summary.binding_rows(saved)
    assert rows == ["| Declare what a kernel accepts (a typed parameter, written): per tensor | the same binding's "
                    "untyped caster | 1.10x | 1.10x over both bindings, with and without `c_contig` |",
                    "| Say why a call was refused (`tdb::explain_refusals`): a call that is accepted | the same module "
                    "without it | 1.01x | 0.99-1.07x over 3 calls, both bindings |"]
    # A run saved before these rows renders without them.
    typed = _typed([100, 100])
    del typed["_explain"]
    assert "explain_refusals" not in bindings.typed_report(typed, META)
    saved.write_text(json.dumps({"typed": typed}))
    assert len(summary.binding_rows(saved)) == 1


def test_typed_section_judges_explain_refusals_per_tensor_of_the_untyped_caster(tmp_path):
    bindings, summary = _benchmarks()
    typed = _typed([106, 108])

    def pair(with8):  # f0 10 ns in both modules; 8 tensors 170 ns without (20 ns each), `with8` with, two rounds
        return {"0": {"without": [10, 10], "with": [10, 10]}, "8": {"without": [170, 170], "with": with8}}

    typed["_explain8"] = {"pybind11 `tdb::TensorView` (untyped)": pair([174, 178]),  # 1.025x, 1.05x
                          "pybind11 typed, written": pair([194, 194]),  # 1.15x
                          "nanobind `tdb::TensorView` (untyped)": pair([170, 170])}  # 1.00x
    text = bindings.typed_report(typed, META)
    assert ("| parameter | without ns per tensor | with `explain_refusals` ns per tensor | with / without | range over "
            "rounds |") in text
    assert "| pybind11 `tdb::TensorView` (untyped) | 20.0 | 20.5 | 1.04x | 1.02-1.05x |" in text
    assert ("- **Goal not met**: a module with `explain_refusals` <= 1.10x one without, per tensor of an 8-tensor call "
            "(every parameter kind) and per one-tensor call: per tensor pybind11 `tdb::TensorView` (untyped) 1.04x; "
            "pybind11 typed, written 1.15x; nanobind `tdb::TensorView` (untyped) 1.00x; per one-tensor call . Why:") \
        in text
    assert ("- For the reader, per call (the first table): pybind11 1.01-1.07x (highest: `dtype2(x)`); nanobind 0.99x "
            "(highest: `f0()`).") in text
    assert "on accepted calls" not in text  # the per-call goal is not judged where the per-tensor rows were measured
    typed["_explain8"]["pybind11 typed, written"] = pair([186, 186])  # 1.10x
    typed["_explain"]["pybind11 `ro1(x)`: 1 tensor, read-only"] = {"without": [50, 50], "with": [54, 56]}  # 1.10x
    met = bindings.typed_report(typed, META)
    assert ("- Goal met: a module with `explain_refusals` <= 1.10x one without, per tensor of an 8-tensor call (every "
            "parameter kind) and per one-tensor call: per tensor pybind11 `tdb::TensorView` (untyped) 1.04x; "
            "pybind11 typed, written 1.10x; nanobind `tdb::TensorView` (untyped) 1.00x; per one-tensor call "
            "pybind11 `ro1(x)` 1.10x.") in met
    typed["_explain"]["pybind11 `ro1(x)`: 1 tensor, read-only"]["with"] = [56, 56]  # 1.12x: a one-tensor call judged
    assert "- **Goal not met**: a module with `explain_refusals` <= 1.10x" in bindings.typed_report(typed, META)
