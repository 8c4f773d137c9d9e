#!/usr/bin/env python
"""Start-up cost of the autoload hook (torch_dlpack_bridge_autoload.pth), as ratios measured in one run.

    python benchmarks/startup.py [--runs 40]     # writes benchmarks/STARTUP.md

Whole-process times of `python -c pass` and `python -c "import torch"`, with the hook on and with
TORCH_DLPACK_BRIDGE_AUTOLOAD=0, alternating on/off so that machine load hits both alike (medians). The .pth
still imports the hook's module when the hook is off, so the hook's whole cost at an interpreter start that
never imports torch is also read directly: its line in `python -X importtime -c pass` (median).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
HOOK_MODULE = "_torch_dlpack_bridge_autoload"


def wall_ms(code: str, autoload: bool) -> float:
    env = dict(os.environ, TORCH_DLPACK_BRIDGE_AUTOLOAD="1" if autoload else "0")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd="/")
    return (time.perf_counter() - start) * 1e3


def hook_import_us() -> float:
    result = subprocess.run([sys.executable, "-X", "importtime", "-c", "pass"], capture_output=True, text=True,
                            check=True, cwd="/")
    for line in result.stderr.splitlines():
        if line.rstrip().endswith(HOOK_MODULE):
            return float(line.split("|")[1])  # cumulative microseconds
    raise RuntimeError(f"{HOOK_MODULE} was not imported at start-up: is the package installed?")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=40)
    runs = parser.parse_args().runs
    rows = []
    for label, code, n in (("python -c pass", "pass", runs), ('python -c "import torch"', "import torch", runs // 4)):
        on, off = [], []
        for _ in range(n):
            on.append(wall_ms(code, True))
            off.append(wall_ms(code, False))
        rows.append((label, statistics.median(on), statistics.median(off)))
    hook_us = statistics.median(hook_import_us() for _ in range(runs))
    import torch

    lines = [
        "# Start-up cost of the autoload hook",
        "",
        f"`python benchmarks/startup.py` on {time.strftime('%Y-%m-%d', time.gmtime())}: torch {torch.__version__}, "
        f"Python {sys.version.split()[0]}; medians of alternating runs (hook on, then "
        "TORCH_DLPACK_BRIDGE_AUTOLOAD=0). With the hook on, `import torch` also publishes the table (loads the "
        "table library and installs it).",
        "",
        "| command | hook on (ms) | hook off (ms) | on / off |",
        "|---|---:|---:|---:|",
    ] + [f"| `{label}` | {on:.1f} | {off:.1f} | {on / off:.3f} |" for label, on, off in rows] + [
        "",
        f"The hook module's own import at start-up (`python -X importtime -c pass`, median of {runs}): "
        f"**{hook_us:.0f} us**, all that an interpreter which never imports torch pays.",
        "",
    ]
    (HERE / "STARTUP.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
