#!/usr/bin/env python
"""Full benchmark: this project's table, torch's native table and the tvm-ffi backport side by side.

    python benchmarks/run.py            # about 3-5 minutes on 2 cores (plus ~2 minutes the first time,
                                        # to build the tvm-ffi backport for this torch; cached after)

Writes benchmarks/RESULTS.md, benchmarks/results.json and benchmarks/results.png. The measurement code lives
in torch_dlpack_bridge/_bench.py (``python -m torch_dlpack_bridge bench`` runs a short version of it); this
script adds the backport build, every tensor shape, more rounds, the tvm-ffi end-to-end call and the files.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
try:
    import torch_dlpack_bridge  # noqa: F401
except ImportError:  # run from a source tree built in place
    sys.path.insert(0, str(HERE.parent))
    import torch_dlpack_bridge  # noqa: F401

from torch_dlpack_bridge import _bench, _probe  # noqa: E402

sys.path.insert(0, str(HERE))
from minimal_export import build as build_minimal  # noqa: E402
from plot import plot  # noqa: E402

INTRO = """# Benchmark results

Written by the scripts in `benchmarks/` (`python benchmarks/run.py` writes all of it); the documentation's
Benchmarks page shows these sections with what they mean, and `benchmarks/NOTES.md` has the method, the floor and
the profile.

## Table functions, called from C

"""
# What the table functions' section measures, at its start (the page shows it there too).
PROVIDERS = """Providers: **torch_dlpack_bridge** (this project's table), **torch native**
(`torch.Tensor.__dlpack_c_exchange_api__` as torch ships it) and **tvm-ffi backport** (the library `python -m
tvm_ffi.utils._build_optional_torch_c_dlpack` builds for this torch, loaded with ctypes), called by a torch-free C
consumer (`torch_dlpack_bridge._probe.time`, GIL held); every tensor is float32 on CPU. "dltensor" is the
non-owning `dltensor_from_py_object_no_sync`; "managed" is `managed_tensor_from_py_object_no_sync` + the deleter;
"import" is `managed_tensor_to_py_object_no_sync` fed by owning exports of the same table made outside the clock,
then dropping the torch tensor (which runs the deleter); "allocator" is `managed_tensor_allocator` + the deleter.

"""


def build_state() -> str:
    """Which build was measured: the source tree's commit, whether csrc differs from it, the table's build time."""
    import subprocess
    so = Path(_bench.bridge.build_info()["library"])
    built = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(so.stat().st_mtime))
    try:
        head = subprocess.run(["git", "-C", str(HERE.parent), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(HERE.parent), "status", "--porcelain", "--", "csrc"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        head, dirty = "", ""
    where = f"commit {head}{' + local csrc changes' if dirty else ''}, " if head else ""
    return f"{where}table library built {built}"


def practical_floor(res: "_bench.Results", address: int, cases, rounds: int, repeats: int):
    """This project's exports against the minimal ones of benchmarks/minimal_export.py, in the same slices:
    dltensor against the minimal unchecked export (and the probe's 48-byte copy), managed export + deleter
    against the minimal owning export + its deleter; returns (markdown, [Target])."""
    ours = _bench.bridge.exchange_api()
    kinds = ("dltensor", "managed")
    data = {(k, c.label): {"ours": [], "minimal": [], "copy": []} for k in kinds for c in cases}
    for _ in range(rounds):
        for case in cases:
            for kind in kinds:
                for k in range(repeats):
                    pair = [("ours", ours), ("minimal", address)]
                    for name, api in pair[k % 2:] + pair[:k % 2]:
                        ns = _probe.time(api, kind, case.tensor, _bench.ITERS[kind], 1)
                        data[(kind, case.label)][name].append(ns)
                    if kind == "dltensor":
                        data[(kind, case.label)]["copy"].append(
                            _probe.time(address, "floor", case.tensor, _bench.ITERS["floor"], 1))
    med = _bench._med
    rows = {k: [] for k in kinds}
    ratios = {k: [] for k in kinds}
    for case in cases:
        d, m = data[("dltensor", case.label)], data[("managed", case.label)]
        r_d = _bench.ratio(d["ours"], d["minimal"])[0]
        r_m = _bench.ratio(m["ours"], m["minimal"])[0]
        ratios["dltensor"].append((r_d, case.label))
        ratios["managed"].append((r_m, case.label))
        r_copy = _bench.ratio(d["ours"], d["copy"])[0]
        rows["dltensor"].append((case.label, med(d["ours"]), med(d["minimal"]), r_d, r_copy))
        rows["managed"].append((case.label, med(m["ours"]), med(m["minimal"]), r_m))
    lines = [floors_markdown(rows)]
    targets = []
    for kind, limit, title in (("dltensor", 1.5, "non-owning export (dltensor) <= 1.5x the minimal unchecked one"),
                               ("managed", 1.3, "owning export + deleter <= 1.3x the minimal owning floor")):
        values = ratios[kind]
        over = sorted(values, reverse=True)[0]
        median = med([r for r, _ in values])
        # The target is on the typical tensor (median over the shapes); the worst shape is shown beside it.
        targets.append(_bench.Target(title, median <= limit, f"median over tensors {median:.2f}x; worst "
                                                             f"{over[0]:.2f}x ({over[1]}); limit {limit}x"))
    lines.append("")
    lines.append("Medians over the tensors: dltensor / minimal "
                 f"{med([r for r, _ in ratios['dltensor']]):.2f}x, managed / minimal owning "
                 f"{med([r for r, _ in ratios['managed']]):.2f}x.")
    return "\n".join(lines), targets


def floors_markdown(rows) -> str:
    """The minimal-export tables: {"dltensor": [(tensor, ours ns, minimal ns, ours / minimal, ours / copy)],
    "managed": [(tensor, ours ns, minimal ns, ours / minimal)]}, one table each (a page's width holds them)."""
    lines = ["### Against minimal exporters", "",
             "`minimal` is benchmarks/minimal_export.py. Its dltensor is an exact-type check, THPVariable_Unpack "
             "and the TensorImpl reads and stores a DLTensor needs, with no validation at all; its owning export "
             "is the same plus one allocation for struct, shape and strides, the storage's reference taken, and a "
             "deleter that drops the reference and frees. Not usable exporters: yardsticks. `copy` is the probe's "
             "floor (copying an already filled 48-byte DLTensor). Same slices, same process; the ratios are "
             "medians of per-slice ratios.", "", "**Non-owning export (dltensor)**", "",
             "| tensor | ours ns | minimal ns | ours / minimal | ours / copy |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {t} | {o:.1f} | {m:.1f} | {r:.2f}x | {c:.0f}x |" for t, o, m, r, c in rows["dltensor"]]
    lines += ["", "**Owning export + deleter (managed)**", "", "| tensor | ours ns | minimal owning ns | ours / minimal |",
              "|---|---:|---:|---:|"]
    lines += [f"| {t} | {o:.1f} | {m:.1f} | {r:.2f}x |" for t, o, m, r in rows["managed"]]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the table functions")
    parser.add_argument("--scale", type=float, default=1.0, help="iterations, relative to the defaults")
    parser.add_argument("--repeats", type=int, default=7, help="timed runs per measurement (median)")
    parser.add_argument("--e2e-rounds", type=int, default=5, help="subprocess rounds of the tvm-ffi call (0: skip)")
    parser.add_argument("--python-number", type=int, default=2000, help="calls per timeit run of the Python paths")
    parser.add_argument("--cache-dir", type=Path, default=HERE / ".cache", help="where the backport build is cached")
    parser.add_argument("--no-build", action="store_true", help="use a cached backport only")
    parser.add_argument("--out-dir", type=Path, default=HERE)
    parser.add_argument("--no-png", action="store_true")
    parser.add_argument("--no-minimal", action="store_true", help="skip the minimal-export yardstick")
    parser.add_argument("--no-consumers", action="store_true",
                        help="skip the tvm-ffi calls by provider (benchmarks/consumers.py: one process per provider)")
    parser.add_argument("--consumer-rounds", type=int, default=5, help="rounds of benchmarks/consumers.py")
    parser.add_argument("--no-bindings", action="store_true",
                        help="skip the binding flavours (benchmarks/bindings.py: builds pybind11/nanobind/torch modules)")
    args = parser.parse_args()
    start = time.monotonic()

    notes = []
    backport = _bench.find_backport([args.cache_dir] + _bench.default_cache_dirs())
    if backport is None and not args.no_build:
        print("building the tvm-ffi backport for this torch (once; cached in "
              f"{args.cache_dir / _bench.backport_key()}) ...", file=sys.stderr, flush=True)
        backport, message = _bench.build_backport(args.cache_dir)
        print(message, file=sys.stderr)
        if backport is None:
            notes.append(message.replace("\n", " / "))
    elif backport is None:
        notes.append("tvm-ffi backport: no cached build and --no-build given")
    if backport is not None:
        print(f"tvm-ffi backport: {backport}", file=sys.stderr)

    res, machine = _bench.run(full=True, rounds=args.rounds, scale=args.scale, repeats=args.repeats,
                              backport=backport, e2e_rounds=args.e2e_rounds, python_number=args.python_number,
                              notes=notes)
    extra, extra_targets = "", []
    if not args.no_minimal:
        address, message = build_minimal(args.cache_dir)
        print(message, file=sys.stderr)
        if address is None:
            res.notes.append(message.replace("\n", " / "))
        else:
            extra, extra_targets = practical_floor(res, address, _bench.tensor_cases(True), args.rounds, args.repeats)
    machine["build"] = build_state()
    elapsed = time.monotonic() - start
    config = (f"`python benchmarks/run.py` (rounds {args.rounds}, scale {args.scale}, repeats {args.repeats}, "
              f"end-to-end rounds {args.e2e_rounds}); measured in {elapsed:.0f} s; {machine['build']}")
    text = INTRO + _bench.report(res, machine, config, extra, extra_targets).replace(
        _bench.FUNCTIONS_START, _bench.FUNCTIONS_START + "\n" + PROVIDERS.rstrip("\n"), 1)
    if not args.no_consumers:
        import consumers  # noqa: E402  (benchmarks/consumers.py)

        data = consumers.measure(args.consumer_rounds, 5000, 7, args.cache_dir, not args.no_build, True)
        consumers.OUT_DIR.mkdir(exist_ok=True)
        (consumers.OUT_DIR / f"torch{machine['torch'].split('+')[0]}.json").write_text(json.dumps(data, indent=1) + "\n")
        # every torch measured so far (the other rows come from earlier runs in other venvs: see consumers.py)
        text = text.rstrip("\n") + "\n\n" + consumers.HEADING + "\n\n" + consumers.section(consumers.load_all())
    if not args.no_bindings:
        import bindings  # noqa: E402  (benchmarks/bindings.py)

        text = text.rstrip("\n") + "\n\n" + bindings.section(bindings.SRC / "build")
    if not args.no_consumers and not args.no_png:
        import consumers  # noqa: E402

        why = consumers.plot(consumers.load_all(), consumers.kernel_times(), args.out_dir / "consumers.png")
        if why:
            print(why, file=sys.stderr)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "RESULTS.md").write_text(text)
    import summary  # noqa: E402  (benchmarks/summary.py: the section that leads, from the files just written)

    (args.out_dir / "results.json").write_text(json.dumps(_bench.to_json(res, machine, extra_targets), indent=1) + "\n")
    summary.write(args.out_dir / "RESULTS.md", machine["torch"].split("+")[0])
    print(text)
    written = [args.out_dir / "RESULTS.md", args.out_dir / "results.json"]
    if not args.no_png:
        why = plot(res, machine, args.out_dir / "results.png")
        if why:
            print(why, file=sys.stderr)
        else:
            written.append(args.out_dir / "results.png")
    print(f"wrote {', '.join(str(p) for p in written)} in {time.monotonic() - start:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
