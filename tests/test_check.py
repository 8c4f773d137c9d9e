"""The conformance checker (torch_dlpack_bridge.check): this project's table passes every case; fake producers
with one planted defect each (tests/planted.py) fail the case that pins it, conformant variants pass every
case; torch's own table shows its known defects; a producer that crashes fails its case without ending the
check; a target that prints, crashes or hangs at import, or leaves helper processes, neither takes the checker
down nor makes it wait past its --timeout."""

import ctypes
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import planted
import torch_dlpack_bridge
from torch_dlpack_bridge.check import NAMES, Interrupted, _abi, cases, interpreter, runner
from torch_dlpack_bridge.check.pytest_entry import conformance_tests

PLANTED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "planted.py")
REPO = os.path.dirname(os.path.dirname(PLANTED))
HAS_NATIVE = torch_dlpack_bridge._native_capsule() is not None


@pytest.fixture(scope="module", autouse=True)
def planted_library(tmp_path_factory):
    """tests/planted_producer.c built once; its path in the environment of this process and its children."""
    path = planted.build(str(tmp_path_factory.mktemp("planted")))
    old = os.environ.get(planted.LIB_ENV)
    os.environ[planted.LIB_ENV] = path
    yield path
    if old is None:
        del os.environ[planted.LIB_ENV]
    else:
        os.environ[planted.LIB_ENV] = old


# This project's table passes every case (through the documented pytest entry).
test_this_projects_table = conformance_tests("torch")


CONTROLS = sorted(defect for defect, (_, case) in planted.DEFECTS.items() if case is None)


def test_every_case_has_a_planted_defect():
    assert {case for _, case in planted.DEFECTS.values() if case} == set(NAMES)


@pytest.mark.parametrize("control", CONTROLS)
def test_planted_table_without_defect_passes(control):
    """The wrapper that carries the defects is itself conformant, also where it gives 0-d tensors NULL shape and
    strides (DLPack allows it): each FAIL below is its defect's doing. Every PASS counts what it compared."""
    report = runner.run(f"{PLANTED}:{control}")
    assert report["error"] is None, report["error"]
    assert {r["status"] for r in report["results"]} == {"PASS"}, [r for r in report["results"] if r["status"] != "PASS"]
    assert [r["case"] for r in report["results"]] == NAMES
    assert all(r["compared"] >= 1 for r in report["results"]), report["results"]


def run_in_process(defect, case):
    target = planted.Planted(defect)
    target.setup()
    ctx = cases.Context(target, exit_probe_command=lambda: interpreter.command("exit-probe", f"{PLANTED}:{defect}",
                                                                                 "60"))
    return cases.run_case(ctx, case)


# In a separate interpreter: crashes, and a use-after-free that only a fresh heap shows reliably. A hang at
# exit has a test of its own (it takes the case's whole time).
SEPARATE = planted.CRASHING | {"export_drops_memory"}


@pytest.mark.parametrize("defect", sorted(set(planted.DEFECTS) - set(CONTROLS) - {"deleter_hangs_at_exit"}))
def test_planted_defect_fails_its_case(defect):
    case = planted.DEFECTS[defect][1]
    if defect in SEPARATE:
        report = runner.run(f"{PLANTED}:{defect}", [case])
        assert report["error"] is None, report["error"]
        result = report["results"][0]
    else:
        result = run_in_process(defect, case)
    assert result["case"] == case
    assert result["status"] == "FAIL", result
    assert "expected" in result["detail"] or "took the interpreter down" in result["detail"], result


def test_a_crash_fails_its_case_and_the_check_goes_on():
    report = runner.run(f"{PLANTED}:deleter_needs_gil",
                        ["header.version", "ownership.other-thread", "header.functions"])
    statuses = {r["case"]: (r["status"], r["detail"]) for r in report["results"]}
    assert statuses["header.version"][0] == "PASS" and statuses["header.functions"][0] == "PASS", statuses
    assert statuses["ownership.other-thread"][0] == "FAIL"
    assert "took the interpreter down (signal SIGABRT)" in statuses["ownership.other-thread"][1]


def ok_table():
    return subprocess.run([sys.executable, "-m", "torch_dlpack_bridge", "check", "--case", "header.version"],
                          capture_output=True, text=True).stdout


def test_command_line_exit_status_and_json():
    ok = subprocess.run([sys.executable, "-m", "torch_dlpack_bridge", "check", "--case", "header.version", "--json"],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    report = json.loads(ok.stdout)
    assert report["results"] == [{"case": "header.version", "status": "PASS", "detail": "1.3", "compared": 1}]
    bad = subprocess.run([sys.executable, "-m", "torch_dlpack_bridge", "check", f"{PLANTED}:old_version",
                          "--case", "header.version"], capture_output=True, text=True)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "\n  FAIL         header.version" in bad.stdout and "1.1 seen" in bad.stdout
    assert "\n  PASS      1  header.version  " in ok_table(), "a PASS shows its count of comparisons"
    unknown = subprocess.run([sys.executable, "-m", "torch_dlpack_bridge", "check", "no-such-framework"],
                             capture_output=True, text=True)
    assert unknown.returncode == 2 and "unknown target" in unknown.stderr


@pytest.mark.skipif(not HAS_NATIVE, reason="this torch has no table of its own (torch < 2.10)")
def test_torch_native_table_shows_its_known_defects():
    """Differential: torch's own table (2.13) exports conj and neg views as if plain, raises RuntimeError where
    __dlpack__ raises BufferError, and imports a major-version-2 tensor or leaks a refused one."""
    report = runner.run("torch-native")
    results = {r["case"]: r for r in report["results"]}
    refusals = results["export.refuses-undescribable"]
    assert refusals["status"] == "FAIL" and "an export seen for conj view, neg view" in refusals["detail"]
    assert results["import.owns-on-failure"]["status"] == "FAIL"
    assert results["export.managed"]["status"] == "FAIL" and "RuntimeError" in results["export.managed"]["detail"]
    for case in ("publish.capsule", "header.version", "header.prev-api", "header.functions", "import.shares-memory",
                 "allocator.prototype", "threads.concurrent-exports"):
        assert results[case]["status"] == "PASS", results[case]
    # It aborts the process on a reversed view's struct (an uncaught C++ exception), and takes NULL data with
    # elements: the checker survives the one and reports the other.
    negative = results["import.negative-strides"]
    assert negative["status"] == "FAIL" and "took the interpreter down (signal SIGABRT)" in negative["detail"]
    assert results["import.null-data-with-elements"]["status"] == "FAIL"


def test_checker_runs_without_torch():
    """A framework's environment need not have torch: the checker, run by path, imports none of it."""
    script = os.path.join(REPO, "torch_dlpack_bridge", "check", "__main__.py")
    block = "import runpy, sys; sys.modules['torch'] = None; sys.argv = ['check', '--help']; " \
            f"runpy.run_path({script!r}, run_name='__main__')"
    result = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "threads.concurrent-exports" in result.stdout


def test_a_tensor_factory_is_a_target():
    """`module:function` may name a factory `function(dtype, shape)`: its dtypes in a few shapes are the corpus."""
    report = runner.run(f"{PLANTED}:make_tensor", ["export.managed", "allocator.prototype"])
    assert report["error"] is None, report["error"]
    assert [r["status"] for r in report["results"]] == ["PASS", "PASS"], report["results"]
    assert report["versions"] == {"torch": torch.__version__}
    assert int(report["results"][0]["detail"].split()[0]) >= 4 * 12  # dtypes x the four shapes


def test_nothing_compared_is_never_a_pass(monkeypatch):
    """A table one element off, on a type whose __dlpack__ refuses every tensor: the exports compare nothing,
    so they FAIL (not "43 tensors agree"); the allocator is checked on float32 at least; a case that made no
    comparison is a SKIP."""
    for case in ("export.dltensor", "export.managed"):
        result = run_in_process("dlpack_refuses_all", case)
        assert result["status"] == "FAIL" and "nothing compared" in result["detail"], result
    allocations = run_in_process("dlpack_refuses_all", "allocator.prototype")
    assert allocations["status"] == "PASS" and allocations["compared"] == 4, allocations
    monkeypatch.setattr(cases, "CASES", [("looks-at-nothing", lambda ctx: (0, "no tensor"), "")])
    assert cases.run_case(None, "looks-at-nothing") == {"case": "looks-at-nothing", "status": "SKIP",
                                                        "detail": "nothing compared (no tensor)"}


def test_what_dlpack_returns_is_read_only_when_it_is_a_dltensor_capsule():
    """__dlpack__() returning a used or foreign capsule, or no capsule, is a refusal that says what came back: the
    checker reads no memory through it (a foreign capsule's pointer took the checker down, blamed on the producer)
    and raises nothing (a ValueError failed export.dltensor as 'unexpected')."""
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    zeros = ctypes.create_string_buffer(256)  # readable: the old code described it as a 0-d tensor

    class Returns:
        def __init__(self, value):
            self.value = value

        def __dlpack__(self, **_):
            return self.value

    for value, seen in [(new(ctypes.addressof(zeros), b"used_dltensor", None), "a capsule named b'used_dltensor'"),
                        (12345, "a int")]:
        ref, refusal, capsule = _abi.reference(Returns(value))
        assert (ref, capsule) == (None, None) and isinstance(refusal, TypeError), (ref, refusal)
        assert f"returned {seen}, not a 'dltensor' capsule" in str(refusal)


def test_a_corpus_that_raised_is_not_cached_as_empty():
    """A target whose corpus raises raises again in the next case: not 'no tensor of the corpus (0)', a SKIP."""
    class Raises:
        def table_type(self):
            return object

        def corpus(self):
            raise RuntimeError("corpus broke")

    ctx = cases.Context(Raises())
    for _ in range(2):
        with pytest.raises(RuntimeError, match="corpus broke"):
            ctx.corpus()


def check_command(*args, env=None):
    return subprocess.run([sys.executable, "-m", "torch_dlpack_bridge", "check", *args, "--json"],
                          capture_output=True, text=True, timeout=300, env=env)


def gone(pid):
    """Whether process `pid` has ended (a zombie nobody reaps counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def wait_gone(pids, seconds=30.0):
    """The pids still running after `seconds` (SIGKILL takes effect asynchronously)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end and not all(gone(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if not gone(p)]


# A target without torch (it starts in a moment): a type publishing a table of which only the header is read;
# its one function pointer is never called. `hangs_in_corpus` first starts helpers that hold the output pipes
# (one in a session of its own, out of the checker's reach) and writes their pids to $HELPER_PIDS.
FAKE = """
import ctypes, os, subprocess, time

_table = (ctypes.c_uint64 * 7)(1 | 3 << 32, 0, 0, 1, 0, 0, 0)  # version 1.3; a non-NULL managed export
_new = ctypes.pythonapi.PyCapsule_New
_new.restype, _new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

class Tensor:
    __dlpack_c_exchange_api__ = _new(ctypes.addressof(_table), b"dlpack_exchange_api", None)

class Fake:
    name, env = "fake", {}
    def setup(self):
        return {}
    def sample(self, value):
        return Tensor()
    def table_type(self):
        return Tensor
    def corpus(self):
        return []

class Hanging(Fake):
    def corpus(self):
        pids = [subprocess.Popen(["sleep", "300"]).pid, subprocess.Popen(["sleep", "300"], start_new_session=True).pid]
        with open(os.environ["HELPER_PIDS"], "w") as f:
            f.write(" ".join(map(str, pids)))
        time.sleep(600)

def _wait():  # a slow framework: says its pid and a helper's (in its group), then takes its time
    helper = subprocess.Popen(["sleep", "300"]).pid
    with open(os.environ["CASE_PIDS"] + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {helper}")
    os.rename(os.environ["CASE_PIDS"] + ".tmp", os.environ["CASE_PIDS"])
    time.sleep(600)

class Waiting(Fake):
    def corpus(self):
        _wait()

class SlowToStart(Fake):
    def setup(self):
        _wait()

fake, hangs_in_corpus, waits_in_corpus, waits_in_setup = Fake, Hanging, Waiting, SlowToStart
"""


@pytest.mark.parametrize("behaviour, code, expected", [
    ("prints", "print('a banner without a newline', end='')\n", None),
    ("segfaults", "import ctypes\nctypes.string_at(0)\n", "could not be set up (signal SIGSEGV)"),
    ("hangs", "import time\ntime.sleep(600)\n", "could not be set up (timed out after 5 s)"),
], ids=["prints", "segfaults", "hangs"])
def test_a_target_misbehaving_at_import(tmp_path, behaviour, code, expected):
    """The target is imported only in the checker's children: the checker's stdout is the report alone, a
    crash or a hang at import is the report's error (exit status 2), at the --timeout."""
    path = tmp_path / "target.py"
    path.write_text(code + FAKE)
    result = check_command(f"{path}:fake", "--case", "header.version", "--timeout", "5")
    report = json.loads(result.stdout)  # nothing else on stdout
    if expected is None:
        assert result.returncode == 0, result.stderr
        assert [(r["status"], r["detail"]) for r in report["results"]] == [("PASS", "1.3")], report
    else:
        assert result.returncode == 2, result.stderr
        assert expected in report["error"], report


def test_a_hang_is_killed_with_its_helpers_at_the_deadline(tmp_path):
    """At --timeout the case's whole process group is killed (its helper too), a helper that left the group
    and holds the pipe is not waited for, and the case says it timed out (not that the producer was killed)."""
    (tmp_path / "hangs.py").write_text(FAKE)
    pids = tmp_path / "pids"
    start = time.monotonic()
    result = check_command(f"{tmp_path / 'hangs.py'}:hangs_in_corpus", "--case", "header.version", "--case",
                           "export.managed", "--timeout", "8", env=dict(os.environ, HELPER_PIDS=str(pids)))
    elapsed = time.monotonic() - start
    in_group, escaped = map(int, pids.read_text().split())
    try:
        report = json.loads(result.stdout)
        assert result.returncode == 1, result.stderr
        statuses = {r["case"]: (r["status"], r["detail"]) for r in report["results"]}
        assert statuses["header.version"][0] == "PASS", statuses
        assert statuses["export.managed"][0] == "FAIL", statuses
        assert statuses["export.managed"][1].startswith("timed out after 8 s"), statuses
        assert "SIGKILL" not in statuses["export.managed"][1]
        assert elapsed < 120, elapsed  # the checker's start, 8 s, then the pipes' grace: not the helper's 300 s
        assert wait_gone([in_group]) == []
    finally:
        if not gone(escaped):
            os.kill(escaped, signal.SIGKILL)  # the helper that left the group is this test's to end


def test_a_hanging_second_interpreter_is_killed(tmp_path, monkeypatch):
    """ownership.interpreter-exit's second interpreter, hanging in a deleter at exit, is killed before the check
    returns; the case says it timed out."""
    pids = tmp_path / "pids"
    monkeypatch.setenv(planted.PIDS_ENV, str(pids))
    report = runner.run(f"{PLANTED}:deleter_hangs_at_exit", ["ownership.interpreter-exit"], timeout=30)
    result = report["results"][0]
    assert result["status"] == "FAIL" and "timed out after" in result["detail"], result
    assert "SIGKILL" not in result["detail"]
    recorded = [int(p) for p in pids.read_text().split()]
    assert 1 <= len(recorded) <= 2  # the case's interpreter and (unless killed before its setup) the second one
    assert wait_gone(recorded, 10) == []


# A framework whose progress thread prints a dot after each partial line written to stdout, in setup and during
# a case: the write waits for the dot, so the dot lands inside whatever the checker's code writes there.
DOTS = FAKE + """
import sys, threading

class Dots(Fake):
    def setup(self):
        real, tick, printed = sys.stdout, threading.Semaphore(0), threading.Semaphore(0)

        def progress():
            while True:
                tick.acquire()
                real.write(".")
                real.flush()
                printed.release()

        class Stdout:
            def write(self, text):
                real.write(text)
                if text and not text.endswith("\\n"):
                    tick.release()
                    printed.acquire()

            def flush(self):
                real.flush()

        threading.Thread(target=progress, daemon=True).start()
        sys.stdout = Stdout()
        print("loading", end="")
        return {}

    def corpus(self):
        print("compiling", end="")
        return []

dots = Dots
"""

# A framework that points sys.stdout (and fd 1) at its own log, in the case interpreter and in the
# interpreter-exit case's second one (this project's table: that case needs a real export).
LOGS = """
import os, sys
from torch_dlpack_bridge.check.targets import Torch

class Logs(Torch):
    def setup(self):
        log = open(os.environ["TARGET_LOG"], "a")
        os.dup2(log.fileno(), 1)
        sys.stdout = log
        print("framework ready", flush=True)
        return super().setup()

def logs():
    return Logs("bridge")
"""
CHECKER = os.path.join(REPO, "torch_dlpack_bridge", "check", "__main__.py")


def check_by_path(*args, env=None):
    """The checker run by its path, as a framework's CI runs it (it imports no torch itself)."""
    return subprocess.run([sys.executable, CHECKER, *args, "--json"], capture_output=True, text=True, timeout=300,
                          env=env)


def test_results_survive_a_target_that_prints_inside_them(tmp_path):
    """Results travel on a channel of their own: a progress dot printed right after any partial line on stdout
    (before the checker's result lines ended, with results on stdout) leaves the report intact."""
    (tmp_path / "dots.py").write_text(DOTS)
    result = check_by_path(f"{tmp_path / 'dots.py'}:dots", "--case", "header.version", "--case", "export.managed")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [(r["case"], r["status"]) for r in report["results"]] == [("header.version", "PASS"),
                                                                     ("export.managed", "SKIP")], report


def test_results_survive_a_target_that_points_stdout_at_its_log(tmp_path):
    """A target that points sys.stdout and fd 1 at its own log, in both of its interpreters, still gets its
    report: results are not written to stdout, and none of them lands in the log."""
    (tmp_path / "logs.py").write_text(LOGS)
    log = tmp_path / "target.log"
    result = check_by_path(f"{tmp_path / 'logs.py'}:logs", "--case", "header.version", "--case",
                           "ownership.interpreter-exit", env=dict(os.environ, TARGET_LOG=str(log)))
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert [r["status"] for r in report["results"]] == ["PASS", "PASS"], report
    assert log.read_text().splitlines() == ["framework ready"] * 2  # the case's interpreter and the second one


def test_a_target_that_closes_the_result_channel_is_told_so(tmp_path):
    """A target that closes every descriptor it did not open gets a clear error, not a write to the wrong file."""
    (tmp_path / "closes.py").write_text(FAKE + "import os\nos.closerange(3, 65536)\n")
    result = check_by_path(f"{tmp_path / 'closes.py'}:fake", "--case", "header.version")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "the target closed or replaced descriptor" in json.loads(result.stdout)["error"]


# A target that looks for the result channel: in its own descriptors and environment, and in a program it runs
# (through a shell, which inherits every descriptor not marked close-on-exec). Its `env` makes the case's
# interpreter start again under that environment first: the channel must survive that.
REACH = FAKE + """
import json, stat

class Reach(Fake):
    env = {"TDB_CHECK_TEST_AGAIN": "1"}

    def setup(self):
        pipes = []
        for name in os.listdir("/proc/self/fd"):
            try:
                if int(name) > 2 and stat.S_ISFIFO(os.fstat(int(name)).st_mode):
                    pipes.append(int(name))
            except OSError:  # the listing's own descriptor, closed by now
                pass
        out = os.environ["REACH"]
        os.system(f"ls /proc/self/fd > {out}.program")
        with open(out, "w") as f:
            json.dump({"channel_env": os.environ.get("TDB_CHECK_CHANNEL"), "pipes": pipes,
                       "again": os.environ.get("TDB_CHECK_TEST_AGAIN")}, f)
        return {}

reach = Reach
"""


def test_the_result_channel_is_out_of_the_targets_reach(tmp_path):
    """The channel is one pipe at a high descriptor number, its number gone from the environment, and a program
    the target runs does not inherit it; also after the child started again under the target's environment."""
    (tmp_path / "reach.py").write_text(REACH)
    seen = tmp_path / "seen"
    result = check_by_path(f"{tmp_path / 'reach.py'}:reach", "--case", "header.version",
                           env=dict(os.environ, REACH=str(seen)))
    assert result.returncode == 0, result.stdout + result.stderr
    found = json.loads(seen.read_text())
    assert found["again"] == "1" and found["channel_env"] is None, found
    assert len(found["pipes"]) == 1 and found["pipes"][0] >= 100, found  # (0-2: the target's own)
    assert all(int(fd) <= 3 for fd in (tmp_path / "seen.program").read_text().split())  # 3: ls's listing


def _case_pids(path, checker):
    """The case interpreter's pid and its helper's, once its corpus wrote them (or the checker ended)."""
    end = time.monotonic() + 240
    while not path.exists():
        assert checker.poll() is None, checker.communicate()
        assert time.monotonic() < end, "the case interpreter never started its case"
        time.sleep(0.05)
    return [int(p) for p in path.read_text().split()]


@pytest.mark.parametrize("to", ["group", "pid"])
def test_ctrl_c_ends_the_check_with_the_report_of_what_finished(tmp_path, to):
    """SIGINT to the checker's process group (as a terminal sends Ctrl-C; the case interpreter leads a session
    of its own and gets none) or to its pid: the checker kills the case interpreter (its helper too), prints
    the report of what finished and exits 130."""
    (tmp_path / "waits.py").write_text(FAKE)
    pids = tmp_path / "pids"
    main = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "  # as in a shell
            f"runpy.run_path({CHECKER!r}, run_name='__main__')")
    checker = subprocess.Popen([sys.executable, "-c", main, f"{tmp_path / 'waits.py'}:waits_in_corpus", "--json",
                                "--case", "header.version", "--case", "export.managed"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                               env=dict(os.environ, CASE_PIDS=str(pids)))
    case_pids = []
    try:
        case_pids = _case_pids(pids, checker)
        (os.killpg if to == "group" else os.kill)(checker.pid, signal.SIGINT)
        out, err = checker.communicate(timeout=60)
        assert checker.returncode == 130, out + err
        report = json.loads(out)
        assert [(r["case"], r["status"], r["detail"]) for r in report["results"]] == [
            ("header.version", "PASS", "1.3"), ("export.managed", "SKIP", "interrupted (Ctrl-C) during this case")]
        assert wait_gone(case_pids, 10) == []
    finally:
        for pid in [checker.pid] + case_pids:
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)
        checker.communicate()


def test_ctrl_c_while_a_child_starts_leaves_no_child(tmp_path, monkeypatch):
    """A Ctrl-C that arrives inside Popen, once the child runs but before its pid is known, is held until the
    checker can kill the child (here one that would wait in its target's setup, where it says nothing: a child
    that finds its channel closed when it speaks would end by itself)."""
    (tmp_path / "waits.py").write_text(FAKE)
    started = []

    def popen_then_ctrl_c(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        started.append(proc.pid)
        os.kill(os.getpid(), signal.SIGINT)
        return proc

    real_popen = subprocess.Popen
    monkeypatch.setenv("CASE_PIDS", str(tmp_path / "pids"))
    monkeypatch.setattr(interpreter.subprocess, "Popen", popen_then_ctrl_c)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(Interrupted) as interrupted:
            runner.run(f"{tmp_path / 'waits.py'}:waits_in_setup", ["export.managed"])
    finally:
        signal.signal(signal.SIGINT, previous)
        monkeypatch.undo()
        try:
            assert wait_gone(started, 10) == []
        finally:
            for pid in started:
                if not gone(pid):
                    os.killpg(pid, signal.SIGKILL)
    assert interrupted.value.report["results"] == [
        {"case": "export.managed", "status": "SKIP", "detail": "not run: the check was interrupted (Ctrl-C)"}]
