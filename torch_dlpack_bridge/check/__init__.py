"""A conformance check for any DLPack exchange table (``DLPackExchangeAPI``):
``python -m torch_dlpack_bridge check [TARGET]``.

TARGET is ``torch`` (this project's table, the default), ``torch-native`` (torch's own), ``torch-c-dlpack-ext``,
``paddle``, ``cuda.core``, or ``module:function``: a function returning a
:class:`~torch_dlpack_bridge.check.targets.Target`, or a tensor factory ``function(dtype, shape)``.
Each case (``cases.CASES``) is PASS (with its count of comparisons), FAIL (what was expected, what was seen) or
SKIP (why). The target is imported and the cases run only in child interpreters (``runner``, ``interpreter``):
a producer that crashes or hangs fails its case (or, at import, is the report's error) instead of ending the
check, and what it prints, wherever it points ``sys.stdout``, never mixes with the results. Ctrl-C ends the check
at once (exit status 130), the report showing what finished.

This package imports neither torch nor the rest of torch_dlpack_bridge: a framework's environment runs it from
a checkout with ``python -c "import runpy; runpy.run_path('torch_dlpack_bridge/check/__main__.py')" paddle``
or, from Python, through :func:`run`. For a framework's own pytest suite see ``pytest_entry``.

>>> from torch_dlpack_bridge.check import run
>>> report = run("torch")  # doctest: +SKIP
>>> [r["status"] for r in report["results"]]  # doctest: +SKIP
['PASS', 'PASS', ...]
"""

from __future__ import annotations

import argparse
import json
import textwrap
from typing import Dict, List, Optional

from .cases import CASES, NAMES
from .runner import Interrupted, failed, run

__all__ = ["CASES", "NAMES", "Interrupted", "format_table", "main", "run"]


def format_table(report: Dict, width: int = 110) -> str:
    """The report as a terminal table: status, the comparisons a PASS made, case, then what it saw (what was
    expected and seen, or why skipped)."""
    versions = ", ".join(f"{k} {v}" for k, v in report["versions"].items())
    lines = [f"DLPack exchange table conformance: {report['target']} ({versions + '; ' if versions else ''}"
             f"Python {report['python']})"]
    if report["error"]:
        lines.append(f"  ERROR {report['error']}")
    name_width = max(len(n) for n in NAMES)
    for r in report["results"]:
        head = f"  {r['status']:<4} {r.get('compared', ''):>6}  {r['case']:<{name_width}}  "
        body = textwrap.wrap(r["detail"], max(30, width - len(head))) or [""]
        lines.append(head + body[0])
        lines += [" " * len(head) + more for more in body[1:]]
    counts = {s: sum(r["status"] == s for r in report["results"]) for s in ("PASS", "FAIL", "SKIP")}
    lines.append(f"{counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped")
    return "\n".join(lines)


def cases_help(width: int = 88) -> str:
    """The cases, one per entry with its description wrapped to `width` columns (the help's epilog)."""
    lines = ["cases:"]
    for name, _, what in CASES:
        body = textwrap.wrap(what, width - 33)
        lines.append(f"  {name:<30} {body[0]}")
        lines += [" " * 33 + more for more in body[1:]]
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    """The `check` command; exit status 0 only when no case fails (2: the target could not be set up; 130:
    interrupted by Ctrl-C, the report showing the cases that finished)."""
    parser = argparse.ArgumentParser(
        prog="python -m torch_dlpack_bridge check",
        description="Checks a framework's DLPack exchange table (DLPackExchangeAPI) case by case.",
        epilog=cases_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", nargs="?", default="torch",
                        help="torch (this project's table; default), torch-native (torch's own), torch-c-dlpack-ext, "
                             "paddle, cuda.core, or module:function (returning a Target, or a tensor factory "
                             "function(dtype: str, shape: tuple))")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--case", action="append", choices=NAMES, metavar="CASE", help="run only this case "
                        "(repeatable)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for the whole check; the case then "
                        "running is killed with its process group (default 600)")
    args = parser.parse_args(argv)
    interrupted = False
    try:
        report = run(args.target, args.case, timeout=args.timeout)
    except Interrupted as stop:  # the case interpreter is gone already
        report, interrupted = stop.report, True
    except (ValueError, ImportError, AttributeError, TypeError) as error:  # a TARGET that names nothing usable
        parser.error(str(error))
    print(json.dumps(report, indent=1) if args.json else format_table(report))
    if interrupted:
        return 130
    if report["error"]:
        return 2
    return 1 if failed(report) else 0
