"""The build's command runner (torch_dlpack_bridge/_build.py: Commands), called directly: a stopped build starts
no further command and stops the ones running (tests/test_loader.py covers whole builds at import)."""

import io
import os
import subprocess
import threading
import time

import pytest

import processes
from torch_dlpack_bridge import _build


def compiler_with_a_child(tmp_path, child, check=None):
    """A fake compiler driver that runs as g++ does: it starts a child of its own (as g++ starts cc1plus, as and
    ld), `child` (a shell command), then records its pid (its command's process group: the build starts each
    command as a group's leader) in tmp_path/pids and waits for the child. `check`, if given, is what it runs for
    the declarations check (-fsyntax-only) instead."""
    script = tmp_path / "fake-c++"
    script.write_text(f"""#!/bin/sh
case "$*" in *-fsyntax-only*) {check or ':'};; esac
{child} &
echo $$ >> {tmp_path / 'pids'}
wait
""")
    script.chmod(0o755)
    return str(script)


def started(tmp_path):
    """The process groups of the fake compilers that ran (compiler_with_a_child), each with its child running."""
    path = tmp_path / "pids"
    return [int(pid) for pid in path.read_text().split()] if path.exists() else []


def wait_for(condition, seconds=120):
    """Polls `condition` until it holds or `seconds` passed (generous: a loaded machine is slow to start a
    process); returns whether it held."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_stopped_build_starts_no_further_command(tmp_path):
    with _build.Commands() as commands:
        commands.stop_all()
        marker = tmp_path / "ran"
        with pytest.raises(RuntimeError, match="the build was stopped"):
            commands.run(["touch", str(marker)])
    assert not marker.exists()


def test_stopping_a_build_kills_the_commands_running():
    outcome = []
    with _build.Commands() as commands:

        def run():
            try:
                commands.run(["sleep", "600"])
            except RuntimeError as error:
                outcome.append(str(error))

        thread = threading.Thread(target=run)
        thread.start()
        deadline = time.monotonic() + 120  # generous: a loaded machine is slow to start a process
        while not commands._running and time.monotonic() < deadline:
            time.sleep(0.01)
        commands.stop_all()
        thread.join(120)  # killed at once; the command alone would take 600 s
    assert not thread.is_alive()
    assert outcome and "failed with exit code -9" in outcome[0]


def test_a_command_ends_when_it_exits_even_if_a_process_it_left_holds_its_output():
    """A command's output goes to a file: a process that inherited it (a child the command left running, or a
    process forked meanwhile in this one) cannot keep the build waiting for an end-of-file, as it did on a pipe."""
    import signal

    log = io.StringIO()
    with _build.Commands() as commands:
        start = time.monotonic()
        commands.run(["sh", "-c", "sleep 60 & echo left $!"], log=log)
        seconds = time.monotonic() - start
    os.kill(int(log.getvalue().split()[-1]), signal.SIGKILL)  # the test's own clean-up
    assert seconds < 30, "waited for the process left behind"


def test_the_end_of_a_build_does_not_wait_for_a_process_holding_the_watchdogs_pipe():
    """Leaving Commands tells the watchdog the build is over and waits for it to exit: it exits when told, not at
    the end-of-file that a process holding its stdin (forked or started meanwhile) would hold off for ever."""
    commands = _build.Commands()
    holder = subprocess.Popen(["sleep", "600"], pass_fds=[commands._watchdog.stdin.fileno()])  # outlives the wait
    try:
        ended = threading.Thread(target=commands.__exit__, args=(None, None, None), daemon=True)
        ended.start()
        ended.join(60)  # at once; for ever before
        assert not ended.is_alive(), "the build waited for the watchdog"
    finally:
        holder.kill()
        holder.wait()


def test_ctrl_c_whose_signal_lands_on_another_thread_still_stops_the_build_at_once(tmp_path, monkeypatch):
    """The kernel may deliver SIGINT to any thread; CPython raises the KeyboardInterrupt in the main thread, but
    only once that thread wakes. The build's main thread waits for its compilers in short steps, so the
    interrupt comes at once (it came once the compilers ended: here 60 s; a hung one, the build's time limit)."""
    import signal

    src = tmp_path / "src"
    src.mkdir()
    for name in ("a.cpp", "b.cpp"):
        (src / name).write_text("")
    pids = tmp_path / "pids"
    monkeypatch.setenv("CXX", compiler_with_a_child(tmp_path, "sleep 60"))
    target = _build.TorchTarget(version="2.13.0", cxx11_abi=True, rocm=False, root=str(tmp_path))

    def interrupt_from_this_thread():
        deadline = time.monotonic() + 120
        while not pids.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal, whatever runs pytest
    try:
        threading.Thread(target=interrupt_from_this_thread, daemon=True).start()
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            _build.compile_table(target, str(tmp_path / "out" / "lib.so"), jobs=2, src=str(src))
        assert time.monotonic() - start < 30
    finally:
        signal.signal(signal.SIGINT, previous)
        processes.kill_groups(started(tmp_path))  # the test's own clean-up, where it failed


@pytest.mark.parametrize("how", ["failed-sibling", "timeout", "ctrl-c"])
def test_a_stopped_build_leaves_no_process_of_its_commands_groups(tmp_path, monkeypatch, how):
    """Issue 62: a compiler driver has children of its own in its process group (g++: cc1plus, as, ld). A build
    stopped by a failing sibling (the declarations check), by its time limit or by Ctrl-C kills each command's
    whole group, so that none of those children runs on. Killing the command's pid alone went unseen while every
    fake compiler replaced itself with `sleep`, alone in its group."""
    import signal

    src = tmp_path / "src"
    src.mkdir()
    for name in ("a.cpp", "b.cpp"):
        (src / name).write_text("")
    fail_once_both_run = f"until [ $(cat {tmp_path / 'pids'} 2>/dev/null | wc -l) -ge 2 ]; do sleep 0.05; done; exit 1"
    monkeypatch.setenv("CXX", compiler_with_a_child(tmp_path, "sleep 600",
                                                    check=fail_once_both_run if how == "failed-sibling" else None))
    target = _build.TorchTarget(version="2.13.0", cxx11_abi=True, rocm=False, root=str(tmp_path))
    raised, message = {"failed-sibling": (RuntimeError, "-fsyntax-only.*\nfailed with exit code 1"),
                       "timeout": (_build.BuildTimeout, "timed out after 3 s"), "ctrl-c": (KeyboardInterrupt, "")}[how]

    def interrupt_once_both_run(main):
        wait_for(lambda: len(started(tmp_path)) >= 2)
        signal.pthread_kill(main, signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal, whatever runs pytest
    try:
        if how == "ctrl-c":
            threading.Thread(target=interrupt_once_both_run, args=(threading.get_ident(),), daemon=True).start()
        with pytest.raises(raised, match=message):  # a build that never stops times out after 60 s (600 s left)
            _build.compile_table(target, str(tmp_path / "out" / "lib.so"), jobs=3, src=str(src),
                                 timeout=3 if how == "timeout" else 60)
        groups = started(tmp_path)
        assert len(groups) >= 2, "the compilers did not start"
        assert wait_for(lambda: not processes.in_groups(groups), seconds=60), [
            processes.command_line(pid) for pid in processes.in_groups(groups)]  # at once; 600 s if left
    finally:
        signal.signal(signal.SIGINT, previous)
        processes.kill_groups(started(tmp_path))  # the test's own clean-up, where it failed


def test_a_file_opened_after_a_build_under_the_watchdog_pipes_number_reaches_a_child_forked_later_intact(tmp_path):
    """A child forked during a build gets /dev/null in place of the watchdog's pipe; once the build is over, that
    number is forgotten: a file the program opens later under it reaches a child forked afterwards intact."""
    import warnings

    with _build.Commands() as commands:
        number = commands._watchdog.stdin.fileno()
    (tmp_path / "data").write_text("intact")
    fd = os.open(tmp_path / "data", os.O_RDONLY)
    if fd != number:  # the number is free again: the build closed the pipe
        os.dup2(fd, number, inheritable=False)
        os.close(fd)
    try:
        with warnings.catch_warnings():  # Python 3.12+ warns about forking a process with threads
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:
            try:
                os._exit(0 if os.pread(number, 100, 0) == b"intact" else 1)
            finally:
                os._exit(2)
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(number)
    assert os.waitstatus_to_exitcode(status) == 0, "the child did not read the file opened under that number"


def test_a_compiler_that_fails_only_the_declarations_check_fails_the_build_with_its_message(tmp_path, monkeypatch):
    """The check of the declarations the table relies on (torch_python_check.cc, compiled with -fsyntax-only)
    runs beside the compilers: where only it fails, the build fails with its output and links nothing."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("a.cpp", "b.cpp"):
        (src / name).write_text("")
    compiler = tmp_path / "fake-c++"
    compiler.write_text('#!/bin/sh\ncase "$*" in *-fsyntax-only*) echo "error: tdb_declaration differs" >&2; '
                        'exit 1;; esac\nwhile [ "$1" != "-o" ]; do shift; done\ntouch "$2"\n')
    compiler.chmod(0o755)
    monkeypatch.setenv("CXX", str(compiler))
    target = _build.TorchTarget(version="2.13.0", cxx11_abi=True, rocm=False, root=str(tmp_path))
    output = tmp_path / "out" / "lib.so"
    with pytest.raises(RuntimeError, match="-fsyntax-only") as raised:
        _build.compile_table(target, str(output), jobs=2, src=str(src))
    assert "error: tdb_declaration differs" in str(raised.value)
    assert not output.exists()


def test_a_fork_whose_wait_for_a_program_start_was_interrupted_releases_nothing_in_the_parent():
    """os.fork's before-handler waits while the build starts a program; a Ctrl-C can end that wait (the handler's
    exception is then only printed): the after-handler in the parent releases nothing, neither a lock it does
    not hold nor the building thread's."""
    holding, done = threading.Event(), threading.Event()

    def start_a_program():
        with _build.no_fork_meanwhile():
            holding.set()
            done.wait(60)

    thread = threading.Thread(target=start_a_program)
    thread.start()
    try:
        holding.wait(60)
        _build._after_fork_in_parent()  # no exception, and the lock stays the building thread's
        assert not _build._starting.acquire(blocking=False)
    finally:
        done.set()
        thread.join()
    _build._after_fork_in_parent()  # held by no one


def test_a_builder_killed_as_it_starts_a_command_leaves_that_command_unrun(tmp_path):
    """A builder that dies (SIGKILL) after starting a command but before telling the watchdog its process group:
    the command never runs (it ran, unknown to the watchdog, and outlived the build)."""
    import sys

    from processes import alive

    started, ran = tmp_path / "started", tmp_path / "ran"
    builder = f"""
import importlib.util, os, signal, sys
spec = importlib.util.spec_from_file_location("tdb_build", {_build.__file__!r})  # as setup.py: no torch
build = sys.modules["tdb_build"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build)
def tell(self, line):
    if line.startswith("+"):  # the command's process is there, the watchdog not yet told: the builder dies
        with open({str(started)!r}, "w") as f:
            f.write(line[1:])
        os.kill(os.getpid(), signal.SIGKILL)
build.Commands._tell = tell
with build.Commands() as commands:
    commands.run(["sh", "-c", "echo $$ > {ran}; exec sleep 600"])
"""
    builder_process = subprocess.run([sys.executable, "-c", builder], capture_output=True, text=True, timeout=120)
    assert builder_process.returncode == -9 and started.exists(), builder_process.stderr[-3000:]
    pid = int(started.read_text())
    deadline = time.monotonic() + 120  # generous: a loaded machine is slow to start a process
    while not ran.exists() and alive([pid]) and time.monotonic() < deadline:
        time.sleep(0.05)
    if ran.exists():  # the test's own clean-up: the command it started
        os.kill(int(ran.read_text()), 9)
    assert not ran.exists(), "the command ran, and the watchdog never knew it"
