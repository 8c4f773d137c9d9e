#!/usr/bin/env python
"""The summary that leads the benchmarks: what a user decides on, against what, the result and its range.

    python benchmarks/summary.py     # writes the section into benchmarks/RESULTS.md from the saved results

Reads what the other scripts save (results.json from run.py, consumers/torch<version>.json from consumers.py,
consumers/bindings-torch<version>.json from bindings.py) and measures nothing; run.py, consumers.py and
bindings.py call write() after writing their own sections, so the summary follows every rerun.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import List, Optional

HERE = Path(__file__).resolve().parent
START, END = "<!-- summary:start -->", "<!-- summary:end -->"
HEADING = "## What it costs you"


def _range(values: List[float], what: str) -> str:
    low, high = min(values), max(values)
    return f"{low:.2f}x over {what}" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}-{high:.2f}x over {what}"


def _rounds(a: List[float], b: List[float]) -> List[float]:
    return [x / y for x, y in zip(a, b)]


def table_rows(results: Path) -> List[str]:
    """Each table function called from C, ours over torch's own table: median over tensors and their range."""
    sys.path.insert(0, str(HERE.parent))
    from torch_dlpack_bridge import _bench  # noqa: E402  (imports torch, not the table)

    res, _ = _bench.from_json(json.loads(results.read_text()))
    rows = []
    for which, doing in (("dltensor", "Hand a tensor to C code: a non-owning view (`dltensor_from_py_object_no_sync`)"),
                         ("managed", "Hand a tensor to C code: an owning export and its deleter"),
                         ("to_python", "Make a torch tensor from DLPack and drop it"),
                         ("allocate", "Allocate a new tensor through the table")):
        per = [_bench.ratio(cell[_bench.OURS], cell[_bench.NATIVE])[0] for (w, _), cell in res.ns.items()
               if w == which and _bench.OURS in cell and _bench.NATIVE in cell]
        if per:
            rows.append(f"| {doing} | torch's own table, from C | {statistics.median(per):.2f}x | "
                        f"{_range(per, f'{len(per)} tensors')} |")
    return rows


def binding_rows(saved: Path) -> List[str]:
    """Per tensor argument of a kernel, typed parameters, returning a tensor (benchmarks/bindings.py)."""
    sys.path.insert(0, str(HERE))
    import bindings  # noqa: E402  (benchmarks/bindings.py: its per_tensor and ratio)

    d = json.loads(saved.read_text())
    rows = []
    data, typed, outputs = d.get("data"), d.get("typed"), d.get("outputs")
    if data:
        pb, ext = data["pybind11 caster (tdb::TensorView)"], data["pybind11 torch extension (torch::Tensor)"]
        per = _rounds(bindings.per_tensor(pb, 8), bindings.per_tensor(ext, 8))
        rows.append(f"| Call a pybind11 kernel: per tensor argument | a torch extension taking `torch::Tensor` | "
                    f"{statistics.median(per):.2f}x | {_range(per, f'{len(per)} rounds')} |")
        nb, nd = data["nanobind caster (tdb::TensorView)"], data["nanobind nb::ndarray<>"]
        per = _rounds(nb["1"], nd["1"])
        rows.append(f"| Call a nanobind kernel with one tensor | nanobind's `nb::ndarray` | "
                    f"{statistics.median(per):.2f}x | {_range(per, f'{len(per)} rounds')} |")
    if typed:
        names = [n for n in typed if not n.startswith("_")]
        base = {lib: next(n for n in names if n.startswith(lib + " caster")) for lib in ("pybind11", "nanobind")}
        r = [bindings.ratio(bindings.per_tensor(typed[n], 8), bindings.per_tensor(typed[base[n.split(' ')[0]]], 8))
             for n in names if " caster, typed" in n and "read-only" not in n]
        spread = _range(r, "both bindings, with and without `c_contig`")
        rows.append(f"| Declare what a kernel accepts (a typed parameter, written): per tensor | the same binding's "
                    f"untyped caster | {statistics.median(r):.2f}x | {spread} |")
        if "_explain8" in typed:  # issue 51's measure: per tensor, the untyped caster
            per = [v for n, rounds in bindings.explain8_ratios(typed["_explain8"]).items() if "untyped" in n
                   for v in rounds]
            rows.append(f"| Say why a call was refused (`tdb::explain_refusals`): per tensor of an accepted call | "
                        f"the same module without it | {statistics.median(per):.2f}x | "
                        f"{_range(per, 'rounds of both bindings, the untyped caster')} |")
        elif "_explain" in typed:  # (absent from runs saved before issue 44's rows)
            per = list(bindings.explain_ratios(typed["_explain"]).values())
            rows.append(f"| Say why a call was refused (`tdb::explain_refusals`): a call that is accepted | the same "
                        f"module without it | {statistics.median(per):.2f}x | "
                        f"{_range(per, f'{len(per)} calls, both bindings')} |")
    if outputs:
        names = list(outputs)
        per = _rounds(outputs[names[1]], outputs[names[0]])
        rows.append(f"| Return a new tensor from a pybind11 kernel | a torch extension calling `torch::empty` | "
                    f"{statistics.median(per):.2f}x | {_range(per, f'{len(per)} rounds')} |")
    return rows


def consumer_row(saved: Path) -> Optional[str]:
    """A tvm-ffi call with 8 tensors, both tables in one process (benchmarks/consumers.py's paired ratio)."""
    pr = json.loads(saved.read_text()).get("paired") or {}
    if not pr.get("ratio"):
        return None
    every = pr["by_order"]["ours on Tensor"] + pr["by_order"]["ours on Parameter"]
    other = "torch's own table" if pr["other"] == "torch native" else "the tvm-ffi backport's table"
    return (f"| Call a tvm-ffi function with 8 tensors, end to end | {other} | {pr['ratio']:.2f}x | "
            f"{_range(every, f'{len(every)} processes')} |")


def section(torch_version: str) -> str:
    """The summary section for the torch these results were measured with (e.g. "2.13.0")."""
    rows = []
    if (HERE / "results.json").exists():
        rows += table_rows(HERE / "results.json")
    saved = HERE / "consumers" / f"bindings-torch{torch_version}.json"
    if saved.exists():
        rows += binding_rows(saved)
    consumer = HERE / "consumers" / f"torch{torch_version}.json"
    row = consumer_row(consumer) if consumer.exists() else None
    rows += [row] if row else []
    return "\n".join([START, f"torch {torch_version}, CPU. Each row: this project's time over the other's (below "
                      "1 is faster), the median and its range. The sections below give every measurement.", "",
                      "| what you do | against | ours / it | range |", "|---|---|---:|---|", *rows, END]) + "\n"


def write(results: Path, torch_version: str) -> None:
    """Puts the summary into RESULTS.md, before everything else but its title and introduction."""
    sys.path.insert(0, str(HERE))
    from bindings import write_into  # noqa: E402

    text = results.read_text()
    if START not in text:  # the first time: just before the first section
        at = text.index("\n## ") + 1
        results.write_text(text[:at] + HEADING + "\n\n" + START + "\n" + END + "\n\n" + text[at:])
    write_into(results, section(torch_version), START, END)


def main() -> int:
    import torch

    write(HERE / "RESULTS.md", torch.__version__.split("+")[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
