#!/usr/bin/env python
"""Instruction counts per call of a table's functions, under valgrind's callgrind (perf counters are not
available in this VM). Deterministic, so unaffected by the machine's load; slow (about a minute per run).

    python benchmarks/profile_callgrind.py                       # ours: dltensor managed to_python allocate
    python benchmarks/profile_callgrind.py --provider native --which managed

Collection is switched on only inside the probe's timing function (``--toggle-collect=*probe_time*``), which
runs ``iters`` warm-up calls and ``iters`` timed calls; costs are divided by 2 * iters. For ``to_python`` the
owning exports that feed the imports are made inside the same function (outside the clock); their inclusive
cost is subtracted. Output files go to benchmarks/.cache/callgrind/.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

SNIPPET = """
import sys, torch, torch_dlpack_bridge as b
from torch_dlpack_bridge import _probe
which, prov, iters = sys.argv[1], sys.argv[2], int(sys.argv[3])
if prov == "ours":
    api = b.exchange_api()
elif prov == "native":
    api = b._native_capsule()
elif prov == "minimal":  # benchmarks/minimal_export.py (built, or taken from its cache, outside collection)
    sys.path.insert(0, sys.argv[4])
    from minimal_export import build
    api, message = build()
    if api is None:
        sys.exit(message)
elif prov.startswith("lib:"):  # another build of this project's table library (an experiment's)
    import ctypes
    lib = ctypes.CDLL(prov[4:])
    lib.tdb_exchange_api.restype = ctypes.c_void_p
    api = lib.tdb_exchange_api()
else:
    from torch_dlpack_bridge._bench import load_backport
    from pathlib import Path
    api = load_backport(Path(prov))
shape = {"allocate": (4,)}.get(which, (8, 16, 32))
obj = (1, 0) if which == "stream" else torch.empty(shape)
_probe.time(api, which, obj, iters, 1)
"""

# The exporter of each provider (its inclusive cost is subtracted from to_python, where it only feeds imports).
EXPORTER = {"ours": r"tdb::managed_tensor_from_py_object_no_sync\(", "native": r"ManagedTensorFromPyObjectNoSync",
            "backport": r"ManagedTensorFromPyObjectNoSync", "minimal": r"minimal_managed"}
LINE = re.compile(r"^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.*)$")


def annotate(out: Path, inclusive: bool) -> List[Tuple[int, str]]:
    args = ["callgrind_annotate", "--threshold=100", "--auto=no", f"--inclusive={'yes' if inclusive else 'no'}",
            str(out)]
    text = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    rows = []
    body = text.split("file:function", 1)[-1]
    for line in body.splitlines():
        m = LINE.match(line)
        if m:
            rows.append((int(m.group(1).replace(",", "")), m.group(2)))
    return rows


def short(name: str) -> str:
    """'file:function [object]' -> 'function [file]' (the file shows where inlined code came from)."""
    obj = ""
    m = re.search(r"\s\[(.*)\]$", name)
    if m:
        obj = os.path.basename(m.group(1))
        name = name[: m.start()]
    where, _, fn = name.partition(":") if re.match(r"^(\?\?\?|[^ (]*\.(c|cc|cpp|h|hpp)):", name) else ("", "", name)
    where = os.path.basename(where) if where and where != "???" else ""
    return f"{fn} [{where or obj}]" if (where or obj) else fn


def profile(provider: str, which: str, iters: int, outdir: Path) -> Dict[str, object]:
    out = outdir / f"{which}.{Path(provider).name}.callgrind"
    if provider == "minimal":  # built outside valgrind (a compile under it would take very long)
        sys.path.insert(0, str(HERE))
        from minimal_export import build
        address, message = build()
        if address is None:
            raise RuntimeError(message)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    cmd = ["valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=*probe_time*",
           f"--callgrind-out-file={out}", sys.executable, "-c", SNIPPET, which, provider, str(iters), str(HERE)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"valgrind failed for {provider} {which}:\n{r.stderr[-2000:]}")
    calls = 2 * iters
    incl = annotate(out, inclusive=True)
    excl = annotate(out, inclusive=False)
    total = max(c for c, _ in incl)  # PROGRAM TOTALS: everything inside probe_time
    feed = 0
    if which == "to_python":
        key = EXPORTER["ours" if provider.startswith("lib:") else provider if provider in EXPORTER else "backport"]
        feed = max([c for c, n in incl if re.search(key, n)] or [0])
    return {"provider": provider, "which": which, "calls": calls, "total": total, "feed": feed,
            "per_call": (total - feed) / calls, "incl": incl, "excl": excl, "file": out}


def report(p: Dict[str, object], top: int) -> str:
    calls = p["calls"]
    lines = [f"### {p['which']} - {Path(str(p['provider'])).name}: {p['per_call']:.0f} instructions per call "
             f"({calls} calls{'; feeding exports subtracted' if p['feed'] else ''})", "",
             "self (exclusive) instructions per call, top symbols:", ""]
    for c, n in p["excl"][:top]:
        lines.append(f"  {c / calls:8.1f}  {short(n)}")
    lines += ["", "inclusive per call, functions of interest:", ""]
    seen = set()
    for c, n in p["incl"]:
        s = short(n)
        if c / calls < 5 or s in seen or "probe_time" in s or "object.h" in n:
            continue
        if re.search(r"tdb::|THPVariable|TensorImpl|Storage|malloc|free|operator new|operator delete|DLPack|"
                     r"toDLPack|fromDLPack|PyEval|gil|empty_cpu|make_tensor|Wrap|dealloc|Tensor", s):
            seen.add(s)
            lines.append(f"  {c / calls:8.1f}  {s}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--provider", default="ours",
                        help="ours, native, minimal (benchmarks/minimal_export.py: dltensor and managed only), "
                             "lib:PATH (another build of this project's table library), or a backport library path")
    parser.add_argument("--which", nargs="+", default=["dltensor", "managed", "to_python", "allocate"])
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    outdir = HERE / ".cache" / "callgrind"
    outdir.mkdir(parents=True, exist_ok=True)
    for which in args.which:
        p = profile(args.provider, which, args.iters, outdir)
        print(report(p, args.top), flush=True)
        print(flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
