"""Runs the cases for a target in child interpreters (started and heard through `interpreter`), so that nothing
the target does takes the checker down: its module is imported (and its framework built) only there; what it
prints goes to the child's pipes, not to the report (results come on a channel of their own); a producer that
crashes takes down only that interpreter: the case it was running is reported as a FAIL (with the signal), and
a new interpreter runs the cases after it. Ctrl-C ends the check at once: the child is killed, and run() raises
Interrupted, which carries the report of what finished.
"""

from __future__ import annotations

import os
import re
import sys
import sysconfig
import time
from typing import Dict, List, Optional

from . import cases
from .interpreter import command, describe_exit, open_channel, reexec, run_child, say


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) ended the check; `report` holds the cases that finished, the others SKIP as not run."""

    def __init__(self, report: Dict):
        super().__init__("the check was interrupted")
        self.report = report


def child(argv: List[str]) -> None:
    """In the child: `cases TARGET SECONDS NAME...` says the target's versions, then for each case that it
    started and its result (SECONDS: the time left to the check); `exit-probe TARGET SECONDS` is the
    interpreter-exit case's own interpreter."""
    from . import targets

    open_channel()  # before the target is imported: see interpreter
    mode, spec, seconds, names = argv[0], argv[1], float(argv[2]), argv[3:]
    deadline = time.monotonic() + seconds
    target = targets.resolve(spec)
    if any(os.environ.get(k) != v for k, v in target.env.items()):  # before the framework is imported
        reexec(command(*argv), dict(os.environ, **target.env))
    versions = target.setup()
    if mode == "exit-probe":
        cases.exit_probe(target)
        return
    say({"versions": versions})
    ctx = cases.Context(target, exit_probe_command=lambda: command(
        "exit-probe", spec, f"{max(1.0, deadline - time.monotonic()):.1f}"), deadline=deadline)
    for name in names:
        say({"started": name})
        say(cases.run_case(ctx, name))


def check_spec(spec: str) -> None:
    """Refuses a TARGET that names nothing, without importing anything of it (that happens in the children)."""
    from .targets import BUILT_IN

    if spec not in BUILT_IN and ":" not in spec:
        raise ValueError(f"unknown target {spec!r}: one of {', '.join(BUILT_IN)}, or module:function")


def run(spec: str, names: Optional[List[str]] = None, timeout: float = 600.0) -> Dict:
    """Runs the cases `names` (all by default) for target `spec` within `timeout` seconds; returns the report:
    {"target", "versions", "python", "results": [{"case", "status", "detail", "compared"}], "error"}.
    Ctrl-C (KeyboardInterrupt) raises Interrupted with the report so far, once the child is gone."""
    check_spec(spec)
    names = list(names or cases.NAMES)
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    python = sys.version.split()[0] + ("t" if sysconfig.get_config_var("Py_GIL_DISABLED") else "")
    report: Dict = {"target": spec, "versions": {}, "python": python, "results": [], "error": None}
    started: List[Optional[str]] = [None]  # the case the running child said it started

    def take(message: Dict) -> None:  # as the child says it
        if "versions" in message:
            report["versions"] = message["versions"]
        elif "started" in message:
            started[0] = message["started"]
        else:
            report["results"].append(message)

    def pending() -> List[str]:
        done = {r["case"] for r in report["results"]}
        return [n for n in names if n not in done]

    deadline = time.monotonic() + timeout
    try:
        while pending():
            started[0] = None
            left = deadline - time.monotonic()
            finished = run_child(command("cases", spec, f"{left:.1f}", *pending()), deadline, env, on_message=take)
            if not pending():
                break
            why = describe_exit(finished, timeout)
            if started[0] not in pending():  # the child never reached a case: the target itself failed
                report["error"] = f"the target could not be set up ({why}): {_crash_summary(finished.stderr)}"
                break
            if finished.timed_out:
                report["results"].append({"case": started[0], "status": "FAIL", "detail": f"{why} (the check's "
                                          f"--timeout) during this case: {_crash_summary(finished.stderr)}"})
                report["results"] += [{"case": n, "status": "SKIP", "detail": f"not run: the check {why}"}
                                      for n in pending()]
                break
            report["results"].append({"case": started[0], "status": "FAIL",
                                      "detail": f"the producer took the interpreter down ({why}) "
                                                f"during this case: {_crash_summary(finished.stderr)}"})
    except KeyboardInterrupt:
        report["results"] += [{"case": n, "status": "SKIP", "detail": "interrupted (Ctrl-C) during this case"
                               if n == started[0] else "not run: the check was interrupted (Ctrl-C)"}
                              for n in pending()]
        raise Interrupted(_ordered(report, names)) from None
    return _ordered(report, names)


def _ordered(report: Dict, names: List[str]) -> Dict:
    order = {n: i for i, n in enumerate(names)}
    report["results"].sort(key=lambda r: order.get(r["case"], len(order)))
    return report


def _crash_summary(stderr: str) -> str:
    """faulthandler's first line and innermost frames (PYTHONFAULTHANDLER is set), or the last lines."""
    lines = [line.strip() for line in stderr.strip().splitlines()]
    fatal = [i for i, line in enumerate(lines) if line.startswith("Fatal Python error")]
    if not fatal:
        return " | ".join(lines[-3:]) or "(nothing on stderr)"
    frames = [re.sub(r'"[^"]*[/\\]', '"', line) for line in lines[fatal[0]:] if line.startswith("File ")][:2]
    return " | ".join([lines[fatal[0]]] + frames)  # (file names without their folders)


def failed(report: Dict) -> bool:
    return report["error"] is not None or any(r["status"] == "FAIL" for r in report["results"])
