"""Bar chart of a benchmark run (matplotlib, a benchmark-only dependency).

The four panels are stacked, each the page's width, with labels readable there; `python benchmarks/plot.py`
redraws benchmarks/results.png from benchmarks/results.json without measuring again.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any, Dict, Optional

from torch_dlpack_bridge import _bench

COLORS = {_bench.OURS: "#2a7ab9", _bench.NATIVE: "#e08a2c", _bench.BACKPORT: "#6aa84f",
          "no table (tvm-ffi Python fallback)": "#999999"}


SHORT = {"t.__dlpack__()": "Python\nt.__dlpack__()", "to_dlpack(t)": "Python\nto_dlpack(t)",
         "torch.from_dlpack(capsule)": "Python\nfrom_dlpack"}


def plot(res: "_bench.Results", machine: Dict[str, Any], path: Path) -> Optional[str]:
    """Writes the chart; returns None, or why it could not."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib): no PNG"
    med = statistics.median
    plt.rcParams.update({"font.size": 12})
    fig, column = plt.subplots(4, 1, figsize=(11, 25), layout="constrained")
    axes = [[column[0], column[1]], [column[2], column[3]]]  # read in this order, top to bottom
    provs = res.providers
    width = 0.8 / len(provs)

    # (1) every table function on the reference tensor, plus the Python paths, log scale
    ax = axes[0][0]
    rows = [("dltensor", res.reference, "dltensor"), ("managed", res.reference, "managed\nexport+del"),
            ("to_python", res.reference, "import\n+drop")]
    rows += [("allocate", label, "alloc " + label.split("float32 ")[1]) for (w, label) in res.ns if w == "allocate"]
    rows += [("stream", "(kDLCPU, 0)", "stream\nCPU")]
    for i, p in enumerate(provs):
        xs, ys = [], []
        for j, (w, c, _) in enumerate(rows):
            if p in res.ns.get((w, c), {}):
                xs.append(j + (i - (len(provs) - 1) / 2) * width)
                ys.append(med(res.ns[(w, c)][p]))
        bars = ax.bar(xs, ys, width, label=p, color=COLORS.get(p))
        ax.bar_label(bars, labels=[f"{y:.0f}" if y >= 10 else f"{y:.1f}" for y in ys], fontsize=8)
    k = len(rows)
    py = [(name, res.python.get((name, res.reference))) for name in _bench.PYTHON_PATHS]
    py = [(n, med(v)) for n, v in py if v]
    bars = ax.bar([k + j for j in range(len(py))], [v for _, v in py], 0.5, color="#888888", label="Python path")
    ax.bar_label(bars, labels=[f"{v:.0f}" for _, v in py], fontsize=10)
    floor = med(res.ns[("floor", res.reference)][_bench.OURS])
    ax.axhline(floor, color="red", linestyle="--", linewidth=1, label=f"floor (48-byte copy) {floor:.2f} ns")
    ax.set_xticks(range(k + len(py)))
    ax.set_xticklabels([r[2] for r in rows] + [SHORT.get(n, n) for n, _ in py], fontsize=10)
    ax.set_yscale("log")
    ax.set_ylim(top=ax.get_ylim()[1] * 30)
    ax.set_ylabel("ns per call (log scale)")
    ax.set_title(f"Table functions from C, reference tensor {res.reference} (log scale)", fontsize=13)
    ax.legend(fontsize=10, ncol=3, loc="upper left")

    # (2), (3) dltensor and managed export per tensor shape
    for ax, which, title in ((axes[0][1], "dltensor", "dltensor_from_py_object_no_sync"),
                             (axes[1][0], "managed", "managed export + deleter")):
        for i, p in enumerate(provs):
            ys = [med(res.ns[(which, c)][p]) for c in res.cases]
            ax.bar([j + (i - (len(provs) - 1) / 2) * width for j in range(len(res.cases))], ys, width, label=p,
                   color=COLORS.get(p))
        ax.set_xticks(range(len(res.cases)))
        ax.set_xticklabels([c.replace(" contiguous", "").replace(" strided ", " / ") for c in res.cases],
                           rotation=60, ha="right", fontsize=10)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.25)
        ax.set_ylabel("ns per call")
        ax.set_title(f"{title}, by tensor (0-d to 8-d, contiguous and strided views)", fontsize=13)
        ax.legend(fontsize=10, ncol=len(provs), loc="upper center")

    # (4) end to end through tvm-ffi: separate processes (median, min-max over rounds) and the paired runs
    ax = axes[1][1]
    if res.e2e:
        names = [n for n in _bench.E2E_PROVIDERS if n in res.e2e]
        ys = [med(res.e2e[n]["call"]) for n in names]
        lo = [y - min(res.e2e[n]["call"]) for n, y in zip(names, ys)]
        hi = [max(res.e2e[n]["call"]) - y for n, y in zip(names, ys)]
        bars = ax.bar(range(len(names)), ys, 0.6, color=[COLORS.get(n) for n in names], yerr=[lo, hi], capsize=4)
        ax.bar_label(bars, labels=[f"{y:.0f}" for y in ys], fontsize=10, padding=2)
        labels = [n.replace(" (", "\n(") + "\n(own process)" for n in names]
        pairs = {_bench.OURS: [], _bench.NATIVE: []}
        for run in res.e2e_pairs:
            a, b = med(run["a"]), med(run["b"])
            pairs[run["pair"][0]].append(a)
            pairs[run["pair"][1]].append(b)
        x = len(names) + 0.5
        for k, n in enumerate((_bench.OURS, _bench.NATIVE)):
            if pairs[n]:
                y = med(pairs[n])
                b = ax.bar([x + k], [y], 0.6, color=COLORS.get(n), hatch="//", edgecolor="white",
                           yerr=[[y - min(pairs[n])], [max(pairs[n]) - y]], capsize=4)
                ax.bar_label(b, labels=[f"{y:.0f}"], fontsize=10, padding=2)
                labels.append(n.replace("torch_dlpack_bridge", "bridge") + "\npaired in\none process")
        ticks = list(range(len(names))) + [x + k for k in range(len(labels) - len(names))]
        empty = med([med(res.e2e[n]["empty"]) for n in names])
        ax.axhline(empty, color="black", linestyle=":", linewidth=1, label=f"nop() with no argument {empty:.0f} ns")
        ax.set_xticks(ticks)
        ax.set_xticklabels(labels, fontsize=10)
        ax.set_ylabel("ns per call (median; whiskers: min-max)")
        paired = _bench.paired_summary(res)
        if paired:
            ax.text(0.02, 0.97, f"paired in one process: ours / native = {paired[0]:.2f}x "
                    f"(per process {paired[1]:.2f}-{paired[2]:.2f})", transform=ax.transAxes, va="top", fontsize=10)
        ax.set_ylim(0, ax.get_ylim()[1] * 1.1)
        ax.legend(fontsize=10, loc="upper right")
    else:
        ax.text(0.5, 0.5, "end to end not run", ha="center", va="center")
    ax.set_title("tvm-ffi testing.nop(a, b, c) from Python, three torch tensors", fontsize=13)

    fig.suptitle(f"torch_dlpack_bridge vs torch {machine['torch']} native table vs tvm-ffi backport\n"
                 f"{machine['cpu']}, {machine['cores']} cores, {machine['date']}, medians over rounds", fontsize=14)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    saved = json.loads((here / "results.json").read_text())
    why = plot(*_bench.from_json(saved), here / "results.png")
    print(why or f"wrote {here / 'results.png'}", file=sys.stderr if why else sys.stdout)
    sys.exit(1 if why else 0)
