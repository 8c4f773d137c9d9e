"""Runs one child interpreter of the checker (a case interpreter, or the interpreter-exit case's second one) and
carries its results back; used by runner (the cases) and cases (the exit probe). It imports neither of them.

Results travel on a pipe of their own, the channel, never on the child's stdout: the target shares stdout with
the checker's code in that interpreter, and a framework may print on it from any thread (a progress dot inside a
result line) or point it elsewhere (`sys.stdout` at a log file, fd 1 `dup2`-ed). The write end is handed to the
child with `pass_fds`, its number in CHANNEL_ENV. The child's first act, before the target is imported
(open_channel), moves it to a high descriptor number, close-on-exec, closes the number it came under and takes
CHANNEL_ENV out of the environment: it is no stream the target is given (neither `sys.stdout` nor fd 0-2),
programs the target runs do not inherit it, and a descriptor the target opens or `dup2`s onto a low number does
not land on it. Only a target that writes to or closes descriptors it does not own reaches it: say() then finds
the descriptor is no longer the channel's pipe (its fstat identity) and raises instead of writing elsewhere.

A child leads a process group of its own (`own_group`), killed whole at the deadline, once the child is done
(helpers a framework started go with it), and when the checker leaves early (Ctrl-C): a KeyboardInterrupt in the
checker kills and reaps the child before it propagates, so no interpreter is left behind; no helper that holds a
pipe is waited for longer than PIPE_GRACE.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import resource
import selectors
import signal
import subprocess
import sys
import threading
import time
from typing import Callable, Dict, Iterator, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
CHANNEL_ENV = "TDB_CHECK_CHANNEL"  # the number under which a child finds the channel's write end, at its start
# After a child exits, how long its pipes may stay open (a helper outside its process group holds them).
PIPE_GRACE = 2.0

BOOT = ("import importlib.util, sys; "
        f"s = importlib.util.spec_from_file_location('tdb_check', {os.path.join(HERE, '__init__.py')!r}, "
        f"submodule_search_locations=[{HERE!r}]); "
        "m = importlib.util.module_from_spec(s); sys.modules['tdb_check'] = m; s.loader.exec_module(m); "
        "from tdb_check import runner; runner.child(sys.argv[1:])")


def command(*args: str) -> List[str]:
    """The command line of a child interpreter (this Python) running `runner.child(args)`; it loads this package
    by its path, so it needs neither torch nor an installed torch_dlpack_bridge."""
    return [sys.executable, "-c", BOOT, *args]


# --------------------------------------------------------------------------------------------- in the child

_channel: Optional[Tuple[int, Tuple[int, int]]] = None  # (descriptor, (st_dev, st_ino) of its pipe)


def open_channel() -> None:
    """In a child, before the target is imported: takes the channel handed over under CHANNEL_ENV to a high,
    close-on-exec descriptor that only say() writes to."""
    global _channel
    handed = int(os.environ.pop(CHANNEL_ENV))
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    floor = 1000 if soft == resource.RLIM_INFINITY or soft > 1024 else max(3, soft - 24)
    fd = fcntl.fcntl(handed, fcntl.F_DUPFD_CLOEXEC, floor)
    os.close(handed)
    st = os.fstat(fd)
    _channel = (fd, (st.st_dev, st.st_ino))


def say(message: Dict) -> None:
    """Sends `message` (JSON, one line) to the checker on the channel; RuntimeError if the target closed or
    replaced the channel's descriptor (nothing is written to whatever now holds its number)."""
    fd, identity = _channel
    try:
        st = os.fstat(fd)
        intact = (st.st_dev, st.st_ino) == identity
    except OSError:
        intact = False
    if not intact:
        raise RuntimeError(f"the target closed or replaced descriptor {fd}, the checker's result channel")
    data = (json.dumps(message) + "\n").encode()
    while data:
        data = data[os.write(fd, data):]


def reexec(cmd: List[str], env: Dict[str, str]) -> None:
    """Replaces this child by `cmd` under `env`, the channel handed over as it came (the new child opens it)."""
    fd = _channel[0]
    os.set_inheritable(fd, True)
    os.execve(sys.executable, cmd, dict(env, **{CHANNEL_ENV: str(fd)}))


# --------------------------------------------------------------------------------------------- in the checker


class Finished:
    """What a child did: the messages it said, its stdout and stderr (the target's output), its exit code, and
    whether it ran into its deadline."""

    def __init__(self, messages: List[Dict], stdout: str, stderr: str, code: int, timed_out: bool):
        self.messages, self.stdout, self.stderr, self.code, self.timed_out = messages, stdout, stderr, code, timed_out


def run_child(cmd: List[str], deadline: float, env: Optional[Dict[str, str]] = None, own_group: bool = True,
              on_message: Optional[Callable[[Dict], None]] = None) -> Finished:
    """Runs `cmd` until it exits or `deadline` (time.monotonic()) passes, then kills it: its whole process group
    when `own_group` (it leads a new session), else the process alone. Each message it says is passed to
    `on_message` as it arrives. Waits for its pipes at most PIPE_GRACE after it exits. Any exception here (a
    KeyboardInterrupt) kills and reaps the child before it propagates."""
    read_end, write_end = os.pipe()
    env = dict(os.environ if env is None else env, **{CHANNEL_ENV: str(write_end)})
    proc: Optional[subprocess.Popen] = None
    selector = selectors.DefaultSelector()
    chunks: Dict[int, List[bytes]] = {}  # the target's stdout and stderr
    messages: List[Dict] = []
    pending = b""  # the channel's incomplete last line
    timed_out, gone_at = False, None
    try:
        with _interrupts_held():  # a Ctrl-C inside Popen would lose the pid of a child already started
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                    start_new_session=own_group, pass_fds=(write_end,))
        os.close(write_end)
        write_end = -1
        outputs = (proc.stdout.fileno(), proc.stderr.fileno())
        chunks.update((fd, []) for fd in outputs)
        for fd in (read_end, *outputs):
            selector.register(fd, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if gone_at is None and _exited(proc):
                gone_at = now
                if own_group:
                    _kill_group(proc)  # what it left running in its group
            elif gone_at is None and now >= deadline:
                timed_out, gone_at = True, now
                _kill(proc, own_group)
            if gone_at is not None and (not selector.get_map() or now - gone_at > PIPE_GRACE):
                break
            wait = 0.2 if gone_at is not None else max(0.0, min(0.2, deadline - now))
            for key, _ in selector.select(timeout=wait):
                data = os.read(key.fd, 65536)
                if not data:
                    selector.unregister(key.fd)
                elif key.fd in outputs:
                    chunks[key.fd].append(data)
                else:
                    *lines, pending = (pending + data).split(b"\n")
                    for line in lines:
                        message = _parsed(line)
                        if message is not None:
                            messages.append(message)
                            if on_message is not None:
                                on_message(message)
    except BaseException:
        if proc is not None:
            _kill(proc, own_group)
        raise
    finally:
        selector.close()
        for fd in (read_end, write_end):
            if fd >= 0:
                os.close(fd)
        if proc is not None:
            proc.stdout.close()
            proc.stderr.close()
            proc.wait()
    out, err = (b"".join(chunks[fd]).decode(errors="replace") for fd in outputs)
    return Finished(messages, out, err, proc.returncode, timed_out)


def _parsed(line: bytes) -> Optional[Dict]:
    """A line of the channel as the message it holds; None for anything else (written there by a target that
    writes to descriptors it does not own)."""
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """SIGINT held back while the body runs, then raised as KeyboardInterrupt (in the main thread, where Python
    raises it, and only while it would raise it)."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return
    caught: List[int] = []
    previous = signal.signal(signal.SIGINT, lambda number, frame: caught.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


def _exited(proc: subprocess.Popen) -> bool:
    """Whether `proc` has exited, leaving it unreaped: its process group's id stays its own until then."""
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _kill(proc: subprocess.Popen, own_group: bool) -> None:
    if own_group:
        _kill_group(proc)
    else:
        proc.kill()


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # nothing left in it
        pass


def describe_exit(finished: Finished, timeout: float) -> str:
    """How a child ended, for a report: timed out, a signal's name, or its exit status."""
    if finished.timed_out:
        return f"timed out after {timeout:.0f} s"
    code = finished.code
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit status {code}"
