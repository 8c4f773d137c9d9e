"""Runs the cases for a target in child interpreters, so that nothing the target does takes the checker down:
its module is imported (and its framework built) only there; what it prints goes to the child's pipes, not to
the report; a producer that crashes takes down only that interpreter: the case it was running is reported as
a FAIL (with the signal), and a new interpreter runs the cases after it. Each child leads a process group of
its own, killed whole at the check's deadline and once the child is done (helpers a framework started go with
it), and no helper that holds a pipe is waited for. The child loads this package by its path, so it needs
neither torch nor an installed torch_dlpack_bridge (a Paddle or cuda.core environment runs it as it is).
"""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import subprocess
import sys
import sysconfig
import time
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
MARK = "@@tdb-check "  # starts the child's result lines; whatever else the producer prints is passed over
# After a child exits, how long its pipes may stay open (a helper outside its process group holds them).
PIPE_GRACE = 2.0

BOOT = ("import importlib.util, sys; "
        f"s = importlib.util.spec_from_file_location('tdb_check', {os.path.join(HERE, '__init__.py')!r}, "
        f"submodule_search_locations=[{HERE!r}]); "
        "m = importlib.util.module_from_spec(s); sys.modules['tdb_check'] = m; s.loader.exec_module(m); "
        "from tdb_check import runner; runner.child(sys.argv[1:])")


def command(*args: str) -> List[str]:
    """The command line of a child interpreter (this Python) running `runner.child(args)`."""
    return [sys.executable, "-c", BOOT, *args]


def _say(message: Dict) -> None:
    # On a line of its own: the target may have printed a partial line.
    print("\n" + MARK + json.dumps(message), flush=True)


def child(argv: List[str]) -> None:
    """In the child: `cases TARGET SECONDS NAME...` says one MARK line per case (SECONDS: the time left to the
    check); `exit-probe TARGET SECONDS` is the interpreter-exit case's own interpreter."""
    from . import cases, targets

    mode, spec, seconds, names = argv[0], argv[1], float(argv[2]), argv[3:]
    deadline = time.monotonic() + seconds
    target = targets.resolve(spec)
    if any(os.environ.get(k) != v for k, v in target.env.items()):  # before the framework is imported
        os.execve(sys.executable, command(*argv), dict(os.environ, **target.env))
    versions = target.setup()
    if mode == "exit-probe":
        cases.exit_probe(target)
        return
    _say({"versions": versions})
    ctx = cases.Context(target, exit_probe_command=lambda: command(
        "exit-probe", spec, f"{max(1.0, deadline - time.monotonic()):.1f}"), deadline=deadline)
    for name in names:
        _say({"started": name})
        _say(cases.run_case(ctx, name))


class Finished:
    """What a child did: its stdout and stderr, its exit code, and whether it ran into its deadline."""

    def __init__(self, stdout: str, stderr: str, code: int, timed_out: bool):
        self.stdout, self.stderr, self.code, self.timed_out = stdout, stderr, code, timed_out

    def marked(self) -> List[Dict]:
        return [json.loads(line.split(MARK, 1)[1]) for line in self.stdout.splitlines() if MARK in line]


def run_child(cmd: List[str], deadline: float, env: Optional[Dict[str, str]] = None,
              own_group: bool = True) -> Finished:
    """Runs `cmd` until it exits or `deadline` (time.monotonic()) passes, then kills it: its whole process group
    when `own_group` (it leads a new session), else the process alone. Waits for its pipes at most PIPE_GRACE
    after it exits."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            start_new_session=own_group)
    pipes = [proc.stdout, proc.stderr]
    chunks: Dict[int, List[bytes]] = {pipe.fileno(): [] for pipe in pipes if pipe is not None}
    selector = selectors.DefaultSelector()
    for fd in chunks:
        selector.register(fd, selectors.EVENT_READ)
    timed_out, gone_at = False, None
    try:
        while True:
            now = time.monotonic()
            if gone_at is None and _exited(proc):
                gone_at = now
                if own_group:
                    _kill_group(proc)  # what it left running in its group
            elif gone_at is None and now >= deadline:
                timed_out, gone_at = True, now
                if own_group:
                    _kill_group(proc)
                else:
                    proc.kill()
            if gone_at is not None and (not selector.get_map() or now - gone_at > PIPE_GRACE):
                break
            wait = 0.2 if gone_at is not None else max(0.0, min(0.2, deadline - now))
            for key, _ in selector.select(timeout=wait):
                data = os.read(key.fd, 65536)
                if data:
                    chunks[key.fd].append(data)
                else:
                    selector.unregister(key.fd)
    finally:
        selector.close()
        for pipe in pipes:
            if pipe is not None:
                pipe.close()
        proc.wait()
    out, err = (b"".join(chunks[fd]).decode(errors="replace") for fd in chunks)
    return Finished(out, err, proc.returncode, timed_out)


def _exited(proc: subprocess.Popen) -> bool:
    """Whether `proc` has exited, leaving it unreaped: its process group's id stays its own until then."""
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # nothing left in it
        pass


def describe_exit(finished: Finished, timeout: float) -> str:
    if finished.timed_out:
        return f"timed out after {timeout:.0f} s"
    code = finished.code
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"


def check_spec(spec: str) -> None:
    """Refuses a TARGET that names nothing, without importing anything of it (that happens in the children)."""
    from .targets import BUILT_IN

    if spec not in BUILT_IN and ":" not in spec:
        raise ValueError(f"unknown target {spec!r}: one of {', '.join(BUILT_IN)}, or module:function")


def run(spec: str, names: Optional[List[str]] = None, timeout: float = 600.0) -> Dict:
    """Runs the cases `names` (all by default) for target `spec` within `timeout` seconds; returns the report:
    {"target", "versions", "python", "results": [{"case", "status", "detail", "compared"}], "error"}."""
    from . import cases

    check_spec(spec)
    names = list(names or cases.NAMES)
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    python = sys.version.split()[0] + ("t" if sysconfig.get_config_var("Py_GIL_DISABLED") else "")
    report: Dict = {"target": spec, "versions": {}, "python": python, "results": [], "error": None}
    deadline = time.monotonic() + timeout
    pending = names
    while pending:
        left = deadline - time.monotonic()
        finished = run_child(command("cases", spec, f"{left:.1f}", *pending), deadline, env)
        started, done = None, set()
        for message in finished.marked():
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
        why = describe_exit(finished, timeout)
        if started is None or started in done:  # the child never reached a case: the target itself failed
            report["error"] = f"the target could not be set up ({why}): {_crash_summary(finished.stderr)}"
            break
        if finished.timed_out:
            report["results"].append({"case": started, "status": "FAIL", "detail": f"{why} (the check's "
                                      f"--timeout) during this case: {_crash_summary(finished.stderr)}"})
            report["results"] += [{"case": n, "status": "SKIP", "detail": f"not run: the check {why}"}
                                  for n in pending if n != started]
            break
        report["results"].append({"case": started, "status": "FAIL",
                                  "detail": f"the producer took the interpreter down ({why}) "
                                            f"during this case: {_crash_summary(finished.stderr)}"})
        pending = [n for n in pending if n != started]
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
