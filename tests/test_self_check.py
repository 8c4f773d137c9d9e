"""The self-check of `python -m torch_dlpack_bridge` (torch_dlpack_bridge/_self_check.py): on CPU, on the tdbdev
PrivateUse1 backend (two devices with real streams), on the stand-ins for XPU and MPS (tests/mock_devices), and
against doctored tables, which it must catch; then the main job's lines on which table consumers get, and its
verdict and exit status, a failure forced for each kind. A CUDA machine runs it through scripts/gpu_check.sh's
main job."""

import ctypes
import importlib.util
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_dlpack_bridge

from conftest import run_python
from table_ctypes import ExchangeAPI, table
from test_autoload import uncovered  # noqa: F401 (a fixture: torch looks like a nightly no library covers)
from torch_dlpack_bridge import _self_check
from torch_dlpack_bridge._self_check import FAIL, NA, OK

TESTS = os.path.dirname(os.path.abspath(__file__))
DEVICE_CHECKS = ["export of a view", "current_work_stream", "allocation", "import round trip"]


def statuses(results):
    return {name: status for name, status, _ in results}


def details(results):
    return {name: detail for name, _, detail in results}


# ---- CPU ------------------------------------------------------------------------------------------------

def test_every_cpu_check_passes(api):
    results = _self_check.cpu_checks(api)
    assert len(results) == 5 and all(status == OK for _, status, _ in results), results


def test_a_machine_without_devices_says_so(api, monkeypatch):
    monkeypatch.setattr(_self_check, "device_types", lambda: [])
    lines, failed = _self_check.report(api)
    assert failed == [] and lines[-1] == "  other devices: none (torch reports no CUDA, ROCm, XPU, MPS or PrivateUse1 device)"


def test_report_checks_at_most_four_devices_and_says_so(api, monkeypatch):
    checked = []
    monkeypatch.setattr(_self_check, "device_types", lambda: [("CUDA", "cuda", 6)])
    monkeypatch.setattr(_self_check, "device_checks",
                        lambda api, device, pinned=False: checked.append((str(device), pinned)) or [("x", OK, "")])
    lines, failed = _self_check.report(api)
    assert "  CUDA: 6 devices, the first 4 checked" in lines and failed == []
    assert checked == [("cuda:0", True), ("cuda:1", False), ("cuda:2", False), ("cuda:3", False)]


def test_one_failed_check_fails_the_report(api, monkeypatch):
    monkeypatch.setattr(_self_check, "device_types", lambda: [("CUDA", "cuda", 1)])
    monkeypatch.setattr(_self_check, "device_checks",
                        lambda api, device, pinned=False: [("a", NA, "why"), ("b", FAIL, "what differs")])
    lines, failed = _self_check.report(api)
    assert failed == ["cuda:0 b"] and lines[-2:] == ["  [n/a] cuda:0 a: why", "  [FAIL] cuda:0 b: what differs"]


# ---- tdbdev: a PrivateUse1 backend with two devices and real streams -------------------------------------

def test_device_types_lists_the_privateuse1_backend_under_its_name(tdbdev):
    assert ("PrivateUse1 (tdbdev)", "tdbdev", 2) in _self_check.device_types()


@pytest.mark.parametrize("index", [0, 1])
def test_every_check_passes_on_each_tdbdev_device(api, tdbdev, tdbdev_state, index):
    results = _self_check.device_checks(api, torch.device("tdbdev", index))
    assert statuses(results) == dict.fromkeys(DEVICE_CHECKS, OK), results
    said = details(results)
    assert said["export of a view"].startswith(f"(kDLExtDev, {index}),")
    assert said["current_work_stream"].startswith(f"torch's current stream {tdbdev.current_stream_handle(index):#x}")
    assert "imported as tdbdev" in said["allocation"]
    assert tdbdev.current_stream_id(index) == 0  # the stream context was left


def test_the_report_covers_both_tdbdev_devices(api, tdbdev, tdbdev_state):
    lines, failed = _self_check.report(api)
    assert failed == [] and "  PrivateUse1 (tdbdev): 2 devices" in lines
    for index in (0, 1):
        assert sum(line.startswith(f"  [ok] tdbdev:{index} ") for line in lines) == len(DEVICE_CHECKS), lines


# ---- doctored tables: what the checks are for ------------------------------------------------------------

_keep = []  # the doctored tables and their callbacks live as long as the test process


def doctored(**functions):
    """The address of a copy of this project's table with some functions replaced by ctypes callbacks."""
    copy = ExchangeAPI.from_buffer_copy(table())
    for name, function in functions.items():
        setattr(copy, name, ctypes.cast(function, ctypes.c_void_p).value)
    _keep.append((copy, functions))
    return ctypes.addressof(copy)


def test_a_stream_that_ignores_the_stream_context_is_caught(tdbdev, tdbdev_state):
    @ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p))
    def default_stream(device_type, device_id, out):
        out[0] = tdbdev.default_stream_handle(device_id)
        return 0

    results = _self_check.device_checks(doctored(current_work_stream=default_stream), torch.device("tdbdev", 1))
    assert statuses(results)["current_work_stream"] == FAIL
    assert details(results)["current_work_stream"].startswith("in a stream context: ours ")


def test_an_export_with_the_wrong_device_id_is_caught(tdbdev):
    original = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(table().dltensor_from_py_object_no_sync)

    @ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
    def next_device(obj, out):
        status = original(obj, out)
        ctypes.c_int32.from_address(out + 12).value += 1  # DLTensor.device.device_id
        return status

    results = _self_check.device_checks(doctored(dltensor_from_py_object_no_sync=next_device),
                                        torch.device("tdbdev", 0))
    assert statuses(results)["export of a view"] == FAIL
    assert "device: ours (12, 1), torch's (12, 0)" in details(results)["export of a view"]


# ---- stand-ins for XPU and MPS (each in its own interpreter: they register device guards) ---------------

def checks_on_a_stand_in(device, count, handle):
    """The device checks in a fresh interpreter, on stand-in tensors over 24 floats at `handle` (never read)."""
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {TESTS!r})
        import torch, torch_dlpack_bridge, mock_devices
        from torch_dlpack_bridge import _self_check
        mock = mock_devices.load()
        mock.register_guard({device.split(":")[0]!r}, {count})
        view = mock.fake_tensor({device!r}, {handle}, 96, [3, 3], [2, 6], 6)
        tail = mock.fake_tensor({device!r}, {handle}, 96, [18], [1], 6)
        for name, status, detail in _self_check.device_checks(torch_dlpack_bridge.exchange_api(),
                                                              torch.device({device!r}), tensors=(view, tail)):
            print(name, "|", status, "|", detail)
    """)
    result = run_python(code)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return {name: (status, detail) for name, status, detail in
            (line.split(" | ", 2) for line in result.stdout.splitlines())}


def test_on_an_xpu_stand_in_the_export_names_the_global_sycl_index_and_the_rest_says_what_torch_lacks(mock_build):
    """The stand-in's xpu:1 is SYCL device 6. torch has no XPU stream, allocator or copy in a CPU build:
    those checks say n/a (torch cannot either) instead of passing or failing."""
    said = checks_on_a_stand_in("xpu:1", 2, 0x1000)
    assert said["export of a view"] == (OK, "(kDLOneAPI, 6), data 0x1018, shape (3, 3), strides (2, 6), "
                                            "byte_offset 0, as t.__dlpack__()")
    assert said["current_work_stream"][0] == NA and "torch gives no current stream of xpu:1" in \
        said["current_work_stream"][1]
    assert said["allocation"][0] == NA and said["allocation"][1].startswith("torch cannot allocate on xpu:1 either")
    assert said["import round trip"][0] == OK
    assert said["import round trip"][1].startswith("the view imports as itself (values not read: torch cannot copy")


def test_on_an_mps_stand_in_the_export_keeps_the_handle_and_says_how_torch_differs(mock_build):
    """On MPS data is an id<MTLBuffer>: this table keeps it and puts the view's start in byte_offset (24), as
    torch 2.13's __dlpack__ does (an older one that adds the offset to the handle is named in the line)."""
    handle = 0x7A000
    status, detail = checks_on_a_stand_in("mps:0", 1, handle)["export of a view"]
    assert status == OK, detail
    assert detail.startswith(f"(kDLMetal, 0), data {handle:#x}, shape (3, 3), strides (2, 6), byte_offset 24")


# ---- the timings beside it -------------------------------------------------------------------------------

def test_quick_timing_says_whose_machine_and_how_loaded(monkeypatch, capsys):
    """The numbers are this machine's, now: its load average and CPU count are printed beside them, and the
    ratio to torch's table (which load moves far less) with them."""
    import torch_dlpack_bridge.__main__ as main

    calls = []
    monkeypatch.setattr(main._probe, "time", lambda api, which, obj, iters, repeats: calls.append(which) or 10.0)
    monkeypatch.setattr(main.timeit, "repeat", lambda function, number, repeat: [number * 1e-6])
    monkeypatch.setattr(main.os, "getloadavg", lambda: (3.25, 2.5, 1.0))
    main.quick_timing()
    out = capsys.readouterr().out
    assert f"measured on this machine now: {os.cpu_count()} CPUs" in out
    assert "load average 3.25 2.50 1.00 (1, 5, 15 min) at the start" in out
    assert "load average at the end 3.25 2.50 1.00" in out
    if main.bridge._native_capsule() is not None:
        assert "ours / torch (range)" in out and out.count("  1.00 (1.00-1.00)\n") == 5
    assert len(calls) == 5 * 3 * (2 if main.bridge._native_capsule() is not None else 1)


@pytest.mark.skipif(not __import__("torch_dlpack_bridge")._native_capsule(), reason="no torch table to compare with")
def test_quick_timing_shows_the_range_of_the_ratio_and_says_when_it_is_noise(monkeypatch, capsys):
    """Issue 46.8: under load the rounds disagreed (ours faster in one, slower in another) and one ratio, 1.27,
    was printed with nothing saying so."""
    import torch_dlpack_bridge.__main__ as main

    for ours, verdict in (([90.0, 127.0, 150.0], "1.27 (0.90-1.50) noise\n"), ([120.0, 127.0, 130.0], "1.27 (1.20-1.30)\n")):
        calls = []

        def time(api, which, obj, iters, repeats):
            calls.append(which)  # per row: round 1 ours, round 1 torch, round 2 ours, ...
            n = len(calls) - 1
            return 100.0 if n % 2 else ours[(n // 2) % 3]

        monkeypatch.setattr(main._probe, "time", time)
        monkeypatch.setattr(main.timeit, "repeat", lambda function, number, repeat: [number * 1e-6])
        main.quick_timing()
        out = capsys.readouterr().out
        assert out.count("  " + verdict) == 5, out


# ---- the main job's table lines and its verdict ------------------------------------------------------------

OURS = dict.fromkeys(("__dlpack_c_exchange_api__", "__c_dlpack_exchange_api__"), "torch_dlpack_bridge")


def test_the_table_lines_say_which_table_consumers_get_and_why():
    import torch_dlpack_bridge.__main__ as main

    minor = ".".join(torch.__version__.split(".")[:2])
    replaced = main.table_lines(OURS, has_native=True)
    assert replaced[0] == ("consumers get this project's table (torch.Tensor.__dlpack_c_exchange_api__ and "
                           "__c_dlpack_exchange_api__)")
    assert replaced[1].startswith(f"  why: torch {minor} has a table of its own, and this project's replaces it")
    assert replaced[2].startswith("  to keep torch's own: TORCH_DLPACK_BRIDGE_PREFER=torch")
    assert main.table_lines(OURS, has_native=False)[1:] == [f"  why: torch {minor} has no table of its own"]
    kept = main.table_lines(dict.fromkeys(OURS, "torch"), has_native=True)
    assert kept[0].startswith("consumers get torch's own table (") and "PREFER=torch" in kept[1]
    mixed = main.table_lines(dict(OURS, __c_dlpack_exchange_api__="other"), has_native=True)
    assert mixed[0].startswith("consumers get this project's table under __dlpack_c_exchange_api__, another "
                               "library's table under __c_dlpack_exchange_api__")
    assert mixed[-1] == "  to use this project's: TORCH_DLPACK_BRIDGE_PREFER=bridge or torch_dlpack_bridge.install()"


@pytest.fixture
def main_job(monkeypatch, capsys):
    """Runs main([]) in this process, the timing and other devices left out, none of the package's variables
    set: its exit status, stdout, stderr."""
    import torch_dlpack_bridge.__main__ as main

    monkeypatch.setattr(main, "quick_timing", lambda: None)
    monkeypatch.setattr(_self_check, "device_types", lambda: [])
    for name in BAD_VALUES:  # every variable the package reads
        monkeypatch.delenv(name, raising=False)

    def run():
        status = main.main([])
        return (status, *capsys.readouterr())
    return run


def verdict_of(out):
    """The verdict at the end of the main job's output, its wrapped lines joined; each line checked to fit in
    100 columns, the ones after the first indented."""
    lines = out.splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("verdict: "))
    assert all(len(line) <= 100 for line in lines[start:]), lines[start:]
    assert all(line.startswith("  ") for line in lines[start + 1:]), lines[start:]
    return " ".join(line.strip() for line in lines[start:])


DOCS = "https://torch-dlpack-bridge.github.io/torch_dlpack_bridge/"
READ_NEXT = f"next: to write a kernel, {DOCS}guides/first-kernel.html; anything else, {DOCS}"


def test_the_main_job_ends_with_the_verdict_that_it_works_in_every_process(main_job):
    status, out, _ = main_job()
    verdict = verdict_of(out)
    assert status == 0
    assert verdict.startswith("verdict: works: every check of this project's table passed"), verdict
    assert verdict.endswith(f"get this project's table from torch.Tensor in every process of this environment; "
                            f"{READ_NEXT}"), verdict


def test_a_failed_check_gives_the_failing_verdict_and_status_1(main_job, monkeypatch):
    monkeypatch.setattr(_self_check, "cpu_checks", lambda api: [("dltensor_from_py_object_no_sync", OK, ""),
                                                                ("managed_tensor_allocator", FAIL, "what differs")])
    status, out, _ = main_job()
    last = verdict_of(out)
    assert status == 1 and "  [FAIL] managed_tensor_allocator: what differs" in out
    assert last.startswith("verdict: FAILED: 1 check ([FAIL] above: managed_tensor_allocator); next: "), last
    assert last.endswith("report this output at https://github.com/torch-dlpack-bridge/torch_dlpack_bridge/issues")
    if torch_dlpack_bridge._native_capsule() is not None:
        assert "set TORCH_DLPACK_BRIDGE_PREFER=torch to use torch's own table meanwhile" in last


def test_an_unexpected_error_still_ends_with_a_verdict(main_job, monkeypatch):
    import torch_dlpack_bridge.__main__ as main

    def broken():
        raise RuntimeError("a bug\nsecond line")

    monkeypatch.setattr(main, "quick_timing", broken)
    status, out, err = main_job()
    assert status == 1 and "Traceback" in err
    assert verdict_of(out).startswith("verdict: FAILED: RuntimeError: a bug (traceback above); next: report"), out


THEIRS = "torch's own table" if torch_dlpack_bridge._native_capsule() is not None else "no table"


def test_with_autoload_off_the_verdict_says_a_new_import_torch_keeps_torchs_table(main_job, monkeypatch):
    monkeypatch.setenv("TORCH_DLPACK_BRIDGE_AUTOLOAD", "0")
    status, out, _ = main_job()
    verdict = verdict_of(out)
    assert status == 0 and verdict.startswith("verdict: works where imported: "), verdict
    assert ("get this project's table from torch.Tensor in processes that `import torch_dlpack_bridge`, but a new "
            f"`import torch` keeps {THEIRS} (TORCH_DLPACK_BRIDGE_AUTOLOAD=0); {READ_NEXT}") in verdict, verdict
    assert "every process" not in verdict


def test_what_the_verdict_says_of_a_new_process_is_what_a_new_import_torch_gets():
    """The real command and a new `import torch` with the same environment, the hook on and off: the table is
    this project's in the new process exactly where the verdict says every process gets it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_DLPACK_BRIDGE_")}
    fresh = "import torch; print('__tdb_autograd_probe__' in torch.Tensor.__dict__)"
    for autoload, ours in (("1", True), ("0", False)):
        run = dict(env, TORCH_DLPACK_BRIDGE_AUTOLOAD=autoload)
        job = subprocess.run([sys.executable, "-m", "torch_dlpack_bridge"], capture_output=True, text=True, env=run,
                             cwd=os.path.dirname(sys.executable), timeout=300)
        new = subprocess.run([sys.executable, "-c", fresh], capture_output=True, text=True, env=run,
                             cwd=os.path.dirname(sys.executable), timeout=300)
        assert job.returncode == 0 and new.returncode == 0, (job.stderr[-2000:], new.stderr[-2000:])
        assert new.stdout.strip() == str(ours), new
        assert ("get this project's table from torch.Tensor in every process" in verdict_of(job.stdout)) is ours, \
            job.stdout


def test_without_the_hook_installed_the_verdict_says_a_new_import_torch_keeps_torchs_table(main_job, monkeypatch):
    monkeypatch.delitem(sys.modules, torch_dlpack_bridge._table.HOOK_MODULE)
    status, out, _ = main_job()
    verdict = verdict_of(out)
    assert status == 0 and verdict.startswith("verdict: works where imported: "), verdict
    assert f"`import torch` keeps {THEIRS} (the autoload hook is not installed in this environment)" in verdict


@pytest.mark.parametrize("has_native", [True, False])
def test_a_private_build_gives_a_verdict_for_this_process_only_and_the_cache_to_set(main_job, monkeypatch,
                                                                                   has_native):
    """Built into a temporary folder because the cache cannot be used (build_info's origin stands in for it
    here; tests/test_loader.py makes such a build): the hook keeps torch's own table in a new process, or,
    on a torch without one, builds again in each."""
    info = dict(torch_dlpack_bridge.build_info(), origin="private")
    monkeypatch.setattr(torch_dlpack_bridge, "build_info", lambda: info)
    monkeypatch.setattr(torch_dlpack_bridge, "_native_capsule", lambda: object() if has_native else None)
    status, out, _ = main_job()
    line = verdict_of(out)
    assert status == 0 and line.startswith("verdict: works in this process only: "), line
    assert "works: " not in line and "every process" not in line
    new = ("keeps torch's own table" if has_native else "builds the table again, 20-60 s in each process")
    assert f"here, but a new `import torch` {new}: the cache cannot be used" in line, line
    assert line.endswith("next: set TORCH_DLPACK_BRIDGE_CACHE to a folder of yours, then run "
                         "`python -m torch_dlpack_bridge build`"), line


BAD_VALUES = {"TORCH_DLPACK_BRIDGE_PREFER": ("Torch", "torch or bridge (the default)"),
              "TORCH_DLPACK_BRIDGE_AUTOLOAD": ("off", "0 (off) or 1 (the default)"),
              "TORCH_DLPACK_BRIDGE_BUILD": ("no", "0 (no build at import) or 1 (the default)"),
              "TORCH_DLPACK_BRIDGE_CACHE": ("cache", "an absolute path"),
              "TORCH_DLPACK_BRIDGE_BUILD_TIMEOUT": ("ten", "a number of seconds above 0")}


def test_every_variable_the_package_reads_is_checked():
    import torch_dlpack_bridge.__main__ as main

    root = os.path.dirname(torch_dlpack_bridge.__file__)
    read = set()
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(folder, name)) as f:
                    read.update(re.findall(r"\bTORCH_DLPACK_BRIDGE_[A-Z_]+\b", f.read()))
    hook = importlib.util.find_spec(torch_dlpack_bridge._table.HOOK_MODULE)  # installed, or the checkout's
    with open(hook.origin if hook else os.path.join(TESTS, "..", "autoload", "_torch_dlpack_bridge_autoload.py")) as f:
        read.update(re.findall(r"\bTORCH_DLPACK_BRIDGE_[A-Z_]+\b", f.read()))
    assert read == set(main.ENV_VALUES) == set(BAD_VALUES)


@pytest.mark.parametrize("name", sorted(BAD_VALUES))
def test_a_value_the_package_does_not_take_gives_a_verdict_naming_the_variable_and_its_values(main_job, monkeypatch,
                                                                                             name):
    value, takes = BAD_VALUES[name]
    monkeypatch.setenv(name, value)
    status, out, err = main_job()
    assert status == 1 and "Traceback" not in err
    assert verdict_of(out) == (f"verdict: FAILED: {name}={value!r} is not a value this package takes; next: set "
                               f"{name} to {takes}, or unset it, then run `python -m torch_dlpack_bridge` again")
    assert out.count("\n") == 3, out  # the verdict alone: nothing ran with the value


def test_a_bad_prefer_value_in_a_new_process_gives_the_verdict_and_no_traceback():
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_DLPACK_BRIDGE_")}
    result = subprocess.run([sys.executable, "-m", "torch_dlpack_bridge"], capture_output=True, text=True,
                            env=dict(env, TORCH_DLPACK_BRIDGE_PREFER="Torch", TORCH_DLPACK_BRIDGE_BUILD="no"),
                            cwd=os.path.dirname(sys.executable), timeout=300)
    assert result.returncode == 1 and result.stderr == "", result
    assert verdict_of(result.stdout).startswith(
        "verdict: FAILED: TORCH_DLPACK_BRIDGE_PREFER='Torch' and TORCH_DLPACK_BRIDGE_BUILD='no' are not values this "
        "package takes; next: set TORCH_DLPACK_BRIDGE_PREFER to torch or bridge (the default), "
        "TORCH_DLPACK_BRIDGE_BUILD to 0 (no build at import) or 1 (the default), or unset them"), result.stdout


def test_the_main_job_piped_into_a_reader_that_left_prints_no_traceback():
    """`python -m torch_dlpack_bridge | head -1`, with the reader gone before the first write (so that whenever
    the output is flushed, it meets a closed pipe): nothing on stderr, status 1, as Python's documentation of
    SIGPIPE recommends."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run([sys.executable, "-m", "torch_dlpack_bridge"], stdout=write_end,
                                stderr=subprocess.PIPE, text=True, cwd=os.path.dirname(sys.executable), timeout=300,
                                env={k: v for k, v in os.environ.items() if not k.startswith("TORCH_DLPACK_BRIDGE_")})
    finally:
        os.close(write_end)
    assert result.returncode == 1 and result.stderr == "", result.stderr


def test_a_table_that_cannot_load_gives_the_failing_verdict_and_status_1(uncovered):  # noqa: F811
    """The real command in a new process, where the library cannot load: a torch no shipped library covers, an
    empty cache and building forbidden."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_DLPACK_BRIDGE_", "PYTHONPATH"))}
    result = subprocess.run([sys.executable, "-m", "torch_dlpack_bridge"], capture_output=True, text=True,
                            env=dict(env, **uncovered, TORCH_DLPACK_BRIDGE_BUILD="0"),
                            cwd=os.path.dirname(sys.executable), timeout=300)
    assert result.returncode == 1, result
    assert "TORCH_DLPACK_BRIDGE_BUILD=0 forbids" in result.stderr, result.stderr
    assert verdict_of(result.stdout) == (
        "verdict: FAILED: the table library could not be loaded; next: the message above says why and what to do, "
        "then run `python -m torch_dlpack_bridge` again"), result.stdout

