"""Runs the cases for a target in a separate interpreter, so that a producer that crashes takes down only
that interpreter: the case it was running is reported as a FAIL (with the signal), and a new interpreter runs
the cases after it. The child loads this package by its path, so it needs neither torch nor an installed
torch_dlpack_bridge (a Paddle or cuda.core environment runs it as it is).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
MARK = "@@tdb-check "  # prefixes the child's result lines; whatever else the producer prints is passed over

BOOT = ("import importlib.util, sys; "
        f"s = importlib.util.spec_from_file_location('tdb_check', {os.path.join(HERE, '__init__.py')!r}, "
        f"submodule_search_locations=[{HERE!r}]); "
        "m = importlib.util.module_from_spec(s); sys.modules['tdb_check'] = m; s.loader.exec_module(m); "
        "from tdb_check import runner; runner.child(sys.argv[1:])")


def command(*args: str) -> List[str]:
    """The command line of a child interpreter (this Python) running `runner.child(args)`."""
    return [sys.executable, "-c", BOOT, *args]


def child(argv: List[str]) -> None:
    """In the child: `cases TARGET NAME...` prints one MARK line per case; `exit-probe TARGET` is the
    interpreter-exit case's own interpreter."""
    from . import cases, targets

    mode, spec, names = argv[0], argv[1], argv[2:]
    target = targets.resolve(spec)
    versions = target.setup()
    if mode == "exit-probe":
        cases.exit_probe(target)
        return
    print(MARK + json.dumps({"versions": versions}), flush=True)
    ctx = cases.Context(target, exit_probe_command=command("exit-probe", spec))
    for name in names:
        print(MARK + json.dumps({"started": name}), flush=True)
        print(MARK + json.dumps(cases.run_case(ctx, name)), flush=True)


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"


def run(spec: str, names: Optional[List[str]] = None, timeout: float = 600.0) -> Dict:
    """Runs the cases `names` (all by default) for target `spec`; returns the report:
    {"target", "versions", "python", "results": [{"case", "status", "detail"}], "error"}."""
    from . import cases, targets

    names = list(names or cases.NAMES)
    env = dict(os.environ, **targets.resolve(spec).env, PYTHONFAULTHANDLER="1")
    report: Dict = {"target": spec, "versions": {}, "python": sys.version.split()[0], "results": [], "error": None}
    deadline = time.monotonic() + timeout
    pending = names
    while pending:
        lines, code, stderr = _child_run(command("cases", spec, *pending), env, deadline)
        started, done = None, set()
        for line in lines:
            message = json.loads(line)
            if "versions" in message:
                report["versions"] = message["versions"]
            elif "started" in message:
                started = message["started"]
            else:
                report["results"].append(message)
                done.add(message["case"])
        pending = [n for n in pending if n not in done]
        if not pending:
            break
        tail = _crash_summary(stderr)
        if started is None or started in done:  # the child never reached a case: the target itself failed
            report["error"] = f"the target could not be set up ({_describe_exit(code)}): {tail}"
            break
        report["results"].append({"case": started, "status": "FAIL",
                                  "detail": f"the producer took the interpreter down ({_describe_exit(code)}) "
                                            f"during this case: {tail}"})
        pending = [n for n in pending if n != started]
    order = {n: i for i, n in enumerate(names)}
    report["results"].sort(key=lambda r: order.get(r["case"], len(order)))
    return report


def _child_run(cmd: List[str], env: Dict[str, str], deadline: float):
    """(MARK lines, exit code, stderr) of one child; killed at the deadline (exit code then -SIGKILL)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        err += "\n(timed out)"
    lines = [line[len(MARK):] for line in out.splitlines() if line.startswith(MARK)]
    return lines, proc.returncode, err


def _crash_summary(stderr: str) -> str:
    """faulthandler's first line and innermost frames (PYTHONFAULTHANDLER is set), or the last lines."""
    lines = [line.strip() for line in stderr.strip().splitlines()]
    fatal = [i for i, line in enumerate(lines) if line.startswith("Fatal Python error")]
    if not fatal:
        return " | ".join(lines[-3:])
    frames = [line for line in lines[fatal[0]:] if line.startswith("File ")][:2]
    return " | ".join([lines[fatal[0]]] + frames)


def failed(report: Dict) -> bool:
    return report["error"] is not None or any(r["status"] == "FAIL" for r in report["results"])
