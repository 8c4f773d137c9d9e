"""The processes the tests start, read from /proc (Linux): which are still running, which belong to a process group,
and which the test session started and left behind (conftest.py's session-end check).

A test session marks its processes through the environment: conftest.py sets MARKER to this session's token and
the running test's id, and every process started from the tests inherits it (a command the build runs, a fake
compiler's child, a process forked and reparented to init once its parent died), so that the check finds them
wherever they ended up and never takes another user's or another session's process for one of its own. A process
started with an environment of its own making (env={...} without os.environ) loses the mark: the check also takes
this process's descendants, found through their parents."""

from __future__ import annotations

import os
import time
from typing import Dict, Iterable, List, NamedTuple, Optional

MARKER = "TDB_TEST_STARTED_BY"
"""`<session token>:<test id>` in the environment of every process a test starts."""


class Process(NamedTuple):
    pid: int
    ppid: int
    pgid: int
    state: str  # "R", "S", "Z" (a zombie: dead, its exit status not yet collected), ...


def read_stat(pid: int) -> Optional[Process]:
    """/proc/PID/stat's fields that matter here, or None once the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold anything
    except (OSError, IndexError):
        return None
    return Process(pid, int(fields[1]), int(fields[2]), fields[0])


def all_processes() -> List[Process]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            process = read_stat(int(name))
            if process is not None:
                found.append(process)
    return found


def running(process: Optional[Process]) -> bool:
    """A zombie no one has reaped yet is not running: it holds no resource but its entry, and init reaps it."""
    return process is not None and process.state != "Z"


def alive(pids: Iterable[int]) -> List[int]:
    """The processes among `pids` still running."""
    return [pid for pid in pids if running(read_stat(pid))]


def in_groups(pgids: Iterable[int]) -> List[int]:
    """The running processes whose process group is one of `pgids` (a command the build starts leads a group of
    its own: it and every child it started, as g++ starts cc1plus, as and ld)."""
    groups = set(pgids)
    return [p.pid for p in all_processes() if p.pgid in groups and running(p)]


def kill_groups(pgids: Iterable[int]) -> None:
    """A test's own clean-up: SIGKILL to each of `pgids` (a group already gone is skipped)."""
    import signal

    for pgid in set(pgids):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass


def marker_of(pid: int) -> Optional[str]:
    """MARKER's value in the environment `pid` was started with, or None (none, or not ours to read)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read()
    except OSError:
        return None
    prefix = MARKER.encode() + b"="
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix):].decode(errors="replace")
    return None


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def started_and_running(token: str) -> Dict[int, str]:
    """{pid: the test that started it} of the running processes that this session (`token`) started: those whose
    environment carries its mark, and this process's descendants (which may have dropped the mark)."""
    me = os.getpid()
    processes = [p for p in all_processes() if running(p) and p.pid != me]
    children: Dict[int, List[int]] = {}
    for p in processes:
        children.setdefault(p.ppid, []).append(p.pid)
    found: Dict[int, str] = {}
    for p in processes:
        mark = marker_of(p.pid)
        if mark is not None and mark.split(":", 1)[0] == token:
            found[p.pid] = mark.split(":", 1)[1] or "(no test: a session fixture)"
    below, seen = list(children.get(me, [])), set()
    while below:
        pid = below.pop()
        if pid not in seen:
            seen.add(pid)
            found.setdefault(pid, "(unmarked: a child of the pytest process)")
            below += children.get(pid, [])
    return found


def left_behind(token: str, seconds: float = 10.0) -> Dict[int, str]:
    """started_and_running(token), once it is empty or after `seconds` (a process killed at the end of a test may
    take a moment to go: the wait ends as soon as none is left)."""
    deadline = time.monotonic() + seconds
    while True:
        found = started_and_running(token)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)
