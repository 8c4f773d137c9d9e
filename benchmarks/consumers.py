#!/usr/bin/env python
"""What consumers pay per call, end to end: tvm-ffi calls with 0, 1, 4 and 8 torch tensors, by table provider,
and `current_work_stream` on the stand-in device (issue 18).

    python benchmarks/consumers.py                 # measure this torch (about 2-4 minutes), then write the
                                                   # section of benchmarks/RESULTS.md from every torch measured
    python benchmarks/consumers.py --no-write      # measure only (benchmarks/consumers/torch<version>.json)
    cd benchmarks && ~/.cache/tdb-bench/venv-torch2.9.1/bin/python consumers.py   # the torch 2.9.1 rows (run
                                                   # outside the source tree: its package is not built there)

Providers (whatever this torch has): this project's table, torch's own (torch >= 2.10), tvm-ffi's backport
(the library `python -m tvm_ffi.utils._build_optional_torch_c_dlpack` makes for this torch; built once into
benchmarks/.cache, outside any timing) and no table at all (tvm-ffi falls back to `__dlpack__`). tvm-ffi caches
the table of a type at first use, so every provider runs in a process of its own: the worker publishes the
table on torch.Tensor, then imports tvm-ffi (with TVM_FFI_DISABLE_TORCH_C_DLPACK=1, so it builds nothing
itself) and times `testing.nop` (a packed function that converts its arguments and ignores them) with timeit.
A round starts one worker per provider, in an order that rotates from round to round; ratios are taken
within a round, then the median over rounds is reported. The statements inside a worker are interleaved.

The stand-in device is the tdbdev PrivateUse1 backend of the tests (tests/privateuse1_backend: host memory,
real per-device current streams with their own native handles). tvm-ffi asks the table for the current stream
once per call, for the first tensor that is not on the CPU; the section reports (a) `current_work_stream` on
it timed from C by the probe, ours against torch's own, and (b) tvm-ffi calls with tdbdev tensors, whose
difference to the same call with CPU tensors is what the stream query and the device add per call.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
import timeit
from pathlib import Path
from typing import Any, Dict, List, Optional

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT_DIR = HERE / "consumers"
START, END = "<!-- consumers:start -->", "<!-- consumers:end -->"
HEADING = "## Consumer calls: tvm-ffi by table provider"  # in RESULTS.md, outside the markers
import torch  # noqa: E402

try:
    import torch_dlpack_bridge as bridge  # noqa: E402
except ImportError:  # run from a source tree built in place
    sys.path.insert(0, str(ROOT))
    import torch_dlpack_bridge as bridge  # noqa: E402
from torch_dlpack_bridge import _bench  # noqa: E402

OURS, NATIVE, BACKPORT, NONE = _bench.OURS, _bench.NATIVE, _bench.BACKPORT, "no table (__dlpack__ path)"
PROVIDER_ORDER = [OURS, NATIVE, BACKPORT, NONE]
COUNTS = (0, 1, 4, 8)
KDLEXTDEV = 12


def _args(kind: str, n: int, device: str = "cpu") -> List[torch.Tensor]:
    """n distinct float32 tensors: contiguous (16, 16), or strided (16, 32)[:, ::2] views (strides (32, 2))."""
    if kind == "contiguous":
        return [torch.empty(16, 16, device=device) for _ in range(n)]
    return [torch.empty(16, 32, device=device)[:, ::2] for _ in range(n)]


def _statements() -> List[str]:
    out = ["nop()"]
    for kind in ("contiguous", "strided"):
        out += [f"nop(*{kind}[:{n}])" for n in COUNTS if n]
    return out


# ---------------------------------------------------------------------------------------------- the worker

def worker(spec: Dict[str, Any]) -> Dict[str, Any]:
    """In a fresh process: publish one table, import tvm-ffi, time testing.nop. Returns {statement: ns}."""
    provider = _bench.NO_TABLE if spec["provider"] == NONE else spec["provider"]
    try:
        address = _bench._publish(torch.Tensor, provider, spec.get("backport"))
    except (RuntimeError, OSError, AttributeError) as e:
        return {"error": str(e)}
    device_ok = False
    if spec.get("device"):
        sys.path.insert(0, str(ROOT / "tests"))
        from privateuse1_backend import load  # noqa: PLC0415

        load()
        device_ok = True
    import tvm_ffi  # noqa: PLC0415  (after publishing, on purpose)

    published = torch.Tensor.__dict__.get(bridge.CAPSULE_ATTR)
    got = None if published is None else bridge._table._address_of(published)
    if got != address:
        return {"error": f"tvm-ffi's import changed the table on torch.Tensor ({got} != {address})"}
    nop = tvm_ffi.get_global_func("testing.nop")
    g: Dict[str, Any] = {"nop": nop, "contiguous": _args("contiguous", 8), "strided": _args("strided", 8)}
    stmts = _statements()
    if device_ok:
        g["device"] = _args("contiguous", 8, "tdbdev:0")
        stmts += ["nop(*device[:1])", "nop(*device[:8])"]
    device_error = None
    for s in list(stmts):
        try:
            eval(s, g)  # first use: tvm-ffi caches the argument setter (so the table) for the type
        except Exception as e:  # noqa: BLE001  (a table may refuse the stand-in's stream: reported, not fatal)
            if "device" not in s:
                raise
            device_error = f"{type(e).__name__}: {e}"
            stmts.remove(s)
    timers = {s: timeit.Timer(s, globals=g) for s in stmts}
    times: Dict[str, List[float]] = {s: [] for s in stmts}
    number = spec["number"]
    for r in range(spec["repeats"]):  # interleaved, the order alternating
        for s in (stmts if r % 2 == 0 else list(reversed(stmts))):
            times[s].append(timers[s].timeit(number) / number * 1e9)
    out: Dict[str, Any] = {"ns": {s: statistics.median(v) for s, v in times.items()}}
    if device_error:
        out["device_error"] = device_error
    return out


# ---------------------------------------------------------------------------------------------- the parent

def stream_times(backport: Optional[Path], rounds: int, iters: int) -> Dict[str, Any]:
    """current_work_stream(kDLExtDev, 0) from C, ours against torch's own (and the backport), rotating slices;
    in a subprocess, since the stand-in registers its device guard for the whole process."""
    code = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import torch, torch_dlpack_bridge as b
from torch_dlpack_bridge import _probe, _bench
from privateuse1_backend import load
load()
tables = [("%s", b.exchange_api())]
native = b._native_capsule()
if native is not None:
    tables.append(("%s", native))
if sys.argv[2]:
    tables.append(("%s", _bench.load_backport(sys.argv[2])))
out, errors = {n: [] for n, _ in tables}, {}
for n, api in list(tables):
    try:
        _probe.current_stream(api, 12, 0)
    except Exception as e:
        errors[n] = f"{type(e).__name__}: {e}"
        tables.remove((n, api))
        del out[n]
for k in range(int(sys.argv[3])):
    order = tables[k %% len(tables):] + tables[:k %% len(tables)]
    for n, api in order:
        out[n].append(_probe.time(api, "stream", (12, 0), int(sys.argv[4]), 1))
print(json.dumps({"ns": out, "errors": errors}))
""" % (OURS, NATIVE, BACKPORT)
    p = subprocess.run([sys.executable, "-c", code, str(ROOT / "tests"), str(backport or ""), str(rounds),
                        str(iters)], capture_output=True, text=True, timeout=900, cwd=str(HERE))
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"error": f"exit {p.returncode}: {p.stderr.strip()[-800:]}"}


def device_backend_ready() -> Optional[str]:
    """Builds the stand-in backend once, here, so that no worker compiles; None if it cannot be built."""
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        from privateuse1_backend import build_directory  # noqa: PLC0415
        code = "import sys; sys.path.insert(0, sys.argv[1]); from privateuse1_backend import load; load()"
        p = subprocess.run([sys.executable, "-c", code, str(ROOT / "tests")], capture_output=True, text=True,
                           timeout=900, cwd=str(HERE))
        if p.returncode != 0:
            return None
        return build_directory()
    except Exception:  # noqa: BLE001  (the device rows are optional)
        return None


def measure(rounds: int, number: int, repeats: int, cache_dir: Path, build: bool, device: bool) -> Dict[str, Any]:
    notes: List[str] = []
    backport = _bench.find_backport([cache_dir] + _bench.default_cache_dirs())
    if backport is None and build:
        print("building the tvm-ffi backport for this torch (once, outside the timing) ...", file=sys.stderr)
        backport, message = _bench.build_backport(cache_dir)
        if backport is None:
            notes.append(message.replace("\n", " / "))
    providers = [OURS]
    if bridge._native_capsule() is not None:
        providers.append(NATIVE)
    if backport is not None:
        providers.append(BACKPORT)
    providers.append(NONE)
    device = device and device_backend_ready() is not None
    if not device:
        notes.append("the stand-in device (tests/privateuse1_backend) could not be built: no device rows")
    env = dict(os.environ, TVM_FFI_DISABLE_TORCH_C_DLPACK="1",
               PYTHONPATH=os.pathsep.join([str(Path(bridge.__file__).resolve().parent.parent)] +
                                          [p for p in [os.environ.get("PYTHONPATH")] if p]))
    env.pop("TORCH_DLPACK_BRIDGE_PREFER", None)
    code = ("import json, sys; sys.path.insert(0, sys.argv[2]); from consumers import worker; "
            "print(json.dumps(worker(json.loads(sys.argv[1]))))")
    per_round: List[Dict[str, Dict[str, float]]] = []
    start = time.monotonic()
    for r in range(rounds):
        order = providers[r % len(providers):] + providers[:r % len(providers)]
        row: Dict[str, Dict[str, float]] = {}
        for name in order:
            spec = {"provider": name, "backport": str(backport) if backport else None, "number": number,
                    "repeats": repeats, "device": device}
            # cwd: not the source tree, whose unbuilt package would shadow the installed one
            p = subprocess.run([sys.executable, "-c", code, json.dumps(spec), str(HERE)], capture_output=True,
                               text=True, env=env, timeout=900, cwd=str(HERE))
            try:
                out = json.loads(p.stdout.strip().splitlines()[-1])
            except (IndexError, ValueError):
                out = {"error": f"worker exit {p.returncode}: {p.stderr.strip()[-800:]}"}
            if "error" in out:
                note = f"{name}: {out['error']}"
                if note not in notes:
                    notes.append(note)
                continue
            row[name] = out["ns"]
            if out.get("device_error"):
                note = f"{name}, tvm-ffi call with tdbdev tensors: {out['device_error']}"
                if note not in notes:
                    notes.append(note)
        per_round.append(row)
        print(f"  round {r + 1}/{rounds} of the tvm-ffi calls done", file=sys.stderr, flush=True)
    stream = stream_times(backport, rounds=max(15, rounds * 3), iters=20000) if device else None
    other = NATIVE if NATIVE in providers else BACKPORT if BACKPORT in providers else None
    pairs = paired(other, backport, env, processes=max(4, rounds)) if other else None
    return {"machine": _bench.machine(), "providers": providers, "rounds": per_round, "stream": stream,
            "paired": pairs, "number": number, "repeats": repeats, "notes": notes,
            "seconds": round(time.monotonic() - start)}


def paired(other: str, backport: Optional[Path], env: Dict[str, str], processes: int) -> Dict[str, Any]:
    """The steadier number: 8 tensors, ours and `other` in ONE process (ours on torch.Tensor and the other on
    torch.nn.Parameter, then swapped; both are exact types to every exporter's fast check, and tvm-ffi caches
    them separately), calls interleaved (torch_dlpack_bridge._bench._e2e_worker). Returns the per-process
    medians of ours / other and their geometric mean over the two orders."""
    code = ("import json, sys; from torch_dlpack_bridge._bench import _e2e_worker; "
            "print(json.dumps(_e2e_worker(json.loads(sys.argv[1]))))")
    by_order: Dict[str, List[float]] = {"ours on Tensor": [], "ours on Parameter": []}
    for k in range(processes):
        pair = [OURS, other] if k % 2 == 0 else [other, OURS]
        spec = {"pair": pair, "count": 8, "number": 1000, "repeats": 21, "backport": str(backport) if backport else None}
        p = subprocess.run([sys.executable, "-c", code, json.dumps(spec)], capture_output=True, text=True, env=env,
                           timeout=900, cwd=str(HERE))
        try:
            out = json.loads(p.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            continue
        if "a" not in out:
            continue
        per = [(a / b if k % 2 == 0 else b / a) for a, b in zip(out["a"], out["b"])]
        by_order["ours on Tensor" if k % 2 == 0 else "ours on Parameter"].append(_med(per))
    t, q = by_order["ours on Tensor"], by_order["ours on Parameter"]
    g = (_med(t) * _med(q)) ** 0.5 if t and q else None
    return {"other": other, "by_order": by_order, "ratio": g}


# ---------------------------------------------------------------------------------------------- the report

def _med(values):
    return statistics.median(values) if values else float("nan")


def _ratio(rounds, a: str, b: str, stmt: str) -> Optional[float]:
    vals = [r[a][stmt] / r[b][stmt] for r in rounds if a in r and b in r and stmt in r[a] and stmt in r[b]]
    return _med(vals) if vals else None


def _cell(rounds, provider: str, stmt: str) -> Optional[float]:
    vals = [r[provider][stmt] for r in rounds if provider in r and stmt in r[provider]]
    return _med(vals) if vals else None


def _shown(provider: str) -> str:
    """A provider's name as markdown: `__dlpack__` as code (bare, it reads as bold)."""
    return provider.replace("__dlpack__", "`__dlpack__`")


def _fmt(v: Optional[float], digits: int = 0) -> str:
    if v is None or v != v:
        return "-"
    return f"{v:,.{digits}f}"


def summary(data: Dict[str, Any]) -> Dict[str, Any]:
    """Per provider: ns per call for each statement, ns per tensor ((n - 0) / n), ratios to ours and native."""
    rounds = data["rounds"]
    out: Dict[str, Any] = {}
    for p in data["providers"]:
        row: Dict[str, Any] = {}
        empty = _cell(rounds, p, "nop()")
        for stmt in _statements() + ["nop(*device[:1])", "nop(*device[:8])"]:
            ns = _cell(rounds, p, stmt)
            if ns is None:
                continue
            n = 0 if stmt == "nop()" else int(stmt.split(":")[1].rstrip("])"))
            row[stmt] = {"ns": ns, "per_tensor": (ns - empty) / n if n and empty else None,
                         "vs_ours": _ratio(rounds, p, OURS, stmt), "vs_native": _ratio(rounds, p, NATIVE, stmt)}
        out[p] = row
    return out


def markdown_torch(data: Dict[str, Any]) -> str:
    m = data["machine"]
    s = summary(data)
    provs = [p for p in PROVIDER_ORDER if p in data["providers"]]
    have_native = NATIVE in provs
    # ours over one contender: torch's table where this torch has one, else the backport's
    other = NATIVE if have_native else BACKPORT
    lines = [f"### torch {m['torch']}", "",
             "ns per call (median over rounds); ratios are medians of per-round ratios (same round, separate "
             "processes).", "",
             "| call | " + " | ".join(f"{_shown(p)} ns" for p in provs) + f" | ours / {SHORT[other]} |",
             "|---|" + "---:|" * (len(provs) + 1)]
    for stmt in _statements():
        cells = [_fmt(s[p].get(stmt, {}).get("ns")) for p in provs]
        r = s[OURS].get(stmt, {}).get("vs_native") if have_native else s.get(other, {}).get(stmt, {}).get("vs_ours")
        r = r if have_native or not r else 1 / r
        lines.append(f"| `{stmt.replace('*', '')}` | " + " | ".join(cells) + f" | {f'{r:.2f}x' if r else '-'} |")
    lines += ["", "ns per tensor, 8 tensors ((nop(8) - nop()) / 8):", "",
              "| tensors | " + " | ".join(_shown(p) for p in provs) + " |", "|---|" + "---:|" * len(provs)]
    for kind in ("contiguous", "strided"):
        stmt = f"nop(*{kind}[:8])"
        lines.append(f"| {kind} | " + " | ".join(_fmt(s[p].get(stmt, {}).get("per_tensor"), 1) for p in provs) + " |")
    dev1, dev8 = "nop(*device[:1])", "nop(*device[:8])"
    if any(dev1 in s[p] for p in provs):
        lines += ["", "Stand-in device (tdbdev, PrivateUse1): tvm-ffi asks for the current stream once per call. "
                      "Extra = the call with tdbdev tensors minus the same call with CPU tensors (the stream query "
                      "and the device's export path).", "",
                  "| provider | nop(1 tdbdev) ns | extra vs CPU ns | nop(8 tdbdev) ns | extra vs CPU ns |",
                  "|---|---:|---:|---:|---:|"]
        for p in provs:
            if dev1 not in s[p]:
                continue
            d1, d8 = s[p][dev1]["ns"], s[p][dev8]["ns"]
            c1, c8 = s[p]["nop(*contiguous[:1])"]["ns"], s[p]["nop(*contiguous[:8])"]["ns"]
            lines.append(f"| {_shown(p)} | {_fmt(d1)} | {_fmt(d1 - c1)} | {_fmt(d8)} | {_fmt(d8 - c8)} |")
    pr = data.get("paired")
    if pr and pr.get("ratio"):
        every = pr["by_order"]["ours on Tensor"] + pr["by_order"]["ours on Parameter"]
        lines += ["", f"Paired in one process, 8 contiguous tensors (ours on torch.Tensor and {pr['other']} on "
                      f"nn.Parameter, then swapped; calls interleaved; the steadier number): ours / {pr['other']} = "
                      f"**{pr['ratio']:.2f}x** (per process {min(every):.2f}-{max(every):.2f}, {len(every)} processes)."]
    st = data.get("stream")
    said = set()  # the reasons given already: a provider's failure is said once, in words
    if st and "ns" in st:
        ns = {p: v for p, v in st["ns"].items() if v}  # a provider that failed has no slices: not a row
        errors = {p: _reason(e) for p, e in st.get("errors", {}).items()}
        if ns:
            slices = max(len(v) for v in ns.values())
            lines += ["", "`current_work_stream(kDLExtDev, 0)` from C (the probe, GIL held, rotating slices, "
                          f"{slices} slices of 20,000 calls):", "",
                      "| provider | ns per call | / torch's |", "|---|---:|---:|"]
            for p, v in ns.items():
                r = (_med([a / b for a, b in zip(v, ns[NATIVE])]) if NATIVE in ns else None)
                lines.append(f"| {p} | {_med(v):.1f} | {f'{r:.2f}x' if r else '-'} |")
        for p, e in errors.items():
            lines += ["", f"{p} is not in this table nor in the tdbdev calls above: {e}."]
            said.add(e)
    notes = [n for n in (data.get("notes") or []) if _reason(n.split(": ", 1)[-1]) not in said]
    if notes:
        lines += [""] + [f"- {n.split(': ', 1)[0]}: {_reason(n.split(': ', 1)[-1])}" for n in notes]
    lines += ["", f"Measured with tvm-ffi {m['tvm_ffi']}: {len(data['rounds'])} rounds, {m['date']}, load average at "
                  f"start {m['loadavg'][0]}."]
    return "\n".join(lines)


def _reason(error: str) -> str:
    """A worker's error as a reader reads it: the message without the exception's name (`RuntimeError: this torch
    (< 2.11) offers no raw stream handle ...` is `this torch (< 2.11) offers ...`)."""
    return re.sub(r"^[A-Z]\w*(?:Error|Exception): ", "", error.strip())


def _version(text: str):
    return tuple(int(x) for x in text.split("+")[0].split(".")[:3])


def load_all() -> List[Dict[str, Any]]:
    """Every torch measured so far (benchmarks/consumers/torch*.json), newest torch first."""
    found = [json.loads(f.read_text()) for f in OUT_DIR.glob("torch*.json")]
    return sorted(found, key=lambda d: _version(d["machine"]["torch"]), reverse=True)


# Short names of the providers, for the ratios' column heads.
SHORT = {OURS: "ours", NATIVE: "torch's", BACKPORT: "backport", NONE: "no table"}


def headline(all_data: List[Dict[str, Any]]) -> str:
    """One row per torch: tvm-ffi with 8 contiguous tensors, per provider, and the paired ratio."""
    lines = ["| torch | " + " | ".join(f"{SHORT[p]} ns" for p in PROVIDER_ORDER) + " | paired in one process |",
             "|---|" + "---:|" * (len(PROVIDER_ORDER) + 1)]
    stmt = "nop(*contiguous[:8])"
    for d in all_data:
        s = summary(d)
        cells = [_fmt(s[p][stmt]["ns"]) if p in s and stmt in s[p] else "-" for p in PROVIDER_ORDER]
        pr = d.get("paired") or {}
        paired = f"ours / {SHORT[pr['other']]} {pr['ratio']:.2f}x" if pr.get("ratio") else "-"
        lines.append(f"| {d['machine']['torch'].split('+')[0]} | " + " | ".join(cells) + f" | {paired} |")
    return "\n".join(lines)


def lead(all_data: List[Dict[str, Any]]) -> str:
    """The section's first sentence: the paired ratio of the newest torch and its range over processes."""
    for d in all_data:
        pr = d.get("paired") or {}
        if pr.get("ratio"):
            every = pr["by_order"]["ours on Tensor"] + pr["by_order"]["ours on Parameter"]
            none = summary(d).get(NONE, {}).get("nop(*contiguous[:8])", {}).get("vs_ours")
            return (f"A tvm-ffi call with 8 tensors costs **{pr['ratio']:.2f}x** (per process {min(every):.2f}-"
                    f"{max(every):.2f}x) with this project's table as with {SHORT[pr['other']]} table, torch "
                    f"{d['machine']['torch'].split('+')[0]}, both tables in one process (the steadier measure)"
                    + (f", and **{1 / none:.2f}x** what it costs with no table (separate processes). " if none else
                       ". "))
    return ""


def section(all_data: List[Dict[str, Any]]) -> str:
    parts = [START, lead(all_data) + "tvm-ffi's `testing.nop` called from Python with float32 CPU tensors, one "
             "process per provider and round (tvm-ffi caches the table per type), providers rotating; contiguous = "
             "(16, 16), strided = (16, 32)[:, ::2]. The kernels that take 8 tensors the way kernel authors write "
             "them are in the binding flavours section.", "", "ns per call with 8 contiguous tensors, by torch:", "",
             headline(all_data), ""]
    for d in all_data:
        parts += [markdown_torch(d), ""]
    parts.append(END)
    return "\n".join(parts) + "\n"


def kernel_times() -> Optional[Dict[str, float]]:
    """ns per call of the 8-tensor kernels from the latest benchmarks/bindings.py run for this torch (best round)."""
    f = OUT_DIR / f"bindings-torch{torch.__version__.split('+')[0]}.json"
    if not f.exists():
        return None
    data = json.loads(f.read_text())["data"]
    return {name: min(d["8"]) for name, d in data.items()
            if not name.startswith("_") and not name.startswith("tvm-ffi") and d.get("8")}


def plot(all_data: List[Dict[str, Any]], kernels: Optional[Dict[str, float]], path: Path) -> Optional[str]:
    """Bars: ns per call with 8 contiguous tensors, per provider and torch; and the 8-tensor kernels."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no chart"
    stmt = "nop(*contiguous[:8])"
    labels, values, colors = [], [], []
    palette = {OURS: "#2a7", NATIVE: "#36c", BACKPORT: "#c83", NONE: "#999"}
    for d in all_data:
        s = summary(d)
        for p in PROVIDER_ORDER:
            if p in s and stmt in s[p]:
                labels.append(f"tvm-ffi, torch {d['machine']['torch'].split('+')[0]}\n{p}")
                values.append(s[p][stmt]["ns"])
                colors.append(palette[p])
    if kernels:
        for name, ns in kernels.items():
            labels.append(f"kernel: {name}")
            values.append(ns)
            colors.append("#2a7" if "caster" in name or "raw" in name else "#36c")
    fig, ax = plt.subplots(figsize=(9, 0.42 * len(values) + 1.2))
    y = list(range(len(values)))[::-1]
    ax.barh(y, values, color=colors)
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("ns per call with 8 tensors (log scale; green: this project)")
    for yy, v in zip(y, values):
        ax.text(v, yy, f" {v:,.0f}", va="center", fontsize=7)
    ax.set_title("What a call with 8 torch tensors costs (benchmarks/consumers.py, bindings.py)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--number", type=int, default=5000, help="calls per timeit run")
    parser.add_argument("--repeats", type=int, default=7, help="timeit runs per statement and worker (median)")
    parser.add_argument("--cache-dir", type=Path, default=HERE / ".cache")
    parser.add_argument("--no-build", action="store_true", help="use a cached backport only")
    parser.add_argument("--no-device", action="store_true", help="skip the stand-in device rows")
    parser.add_argument("--no-measure", action="store_true", help="only write the section from saved results")
    parser.add_argument("--no-write", action="store_true", help="do not touch RESULTS.md")
    parser.add_argument("--paired-only", action="store_true",
                        help="only (re)measure the paired in-process ratio, into this torch's saved results")
    args = parser.parse_args()
    if args.paired_only:
        out = OUT_DIR / f"torch{torch.__version__.split('+')[0]}.json"
        data = json.loads(out.read_text())
        other = NATIVE if NATIVE in data["providers"] else BACKPORT if BACKPORT in data["providers"] else None
        backport = _bench.find_backport([args.cache_dir] + _bench.default_cache_dirs())
        env = dict(os.environ, TVM_FFI_DISABLE_TORCH_C_DLPACK="1",
                   PYTHONPATH=os.pathsep.join([str(Path(bridge.__file__).resolve().parent.parent)] +
                                              [p for p in [os.environ.get("PYTHONPATH")] if p]))
        env.pop("TORCH_DLPACK_BRIDGE_PREFER", None)
        data["paired"] = paired(other, backport, env, processes=max(4, args.rounds)) if other else None
        out.write_text(json.dumps(data, indent=1) + "\n")
        print(data["paired"])
        args.no_measure = True
    if not args.no_measure:
        data = measure(args.rounds, args.number, args.repeats, args.cache_dir, not args.no_build, not args.no_device)
        OUT_DIR.mkdir(exist_ok=True)
        out = OUT_DIR / f"torch{torch.__version__.split('+')[0]}.json"
        out.write_text(json.dumps(data, indent=1) + "\n")
        print(markdown_torch(data))
        print(f"wrote {out}", file=sys.stderr)
    if not args.no_write:
        text = section(load_all())
        from bindings import write_into  # noqa: E402  (benchmarks/bindings.py, beside this file)

        write_into(HERE / "RESULTS.md", text, START, END, heading=HEADING)
        import summary  # noqa: E402  (benchmarks/summary.py)

        summary.write(HERE / "RESULTS.md", torch.__version__.split("+")[0])
        why = plot(load_all(), kernel_times(), HERE / "consumers.png")
        print(f"wrote the section into {HERE / 'RESULTS.md'}" + (f"; {why}" if why else f" and {HERE / 'consumers.png'}"),
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
