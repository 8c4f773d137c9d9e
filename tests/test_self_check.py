"""The self-check of `python -m torch_dlpack_bridge` (torch_dlpack_bridge/_self_check.py): on CPU, on the tdbdev
PrivateUse1 backend (two devices with real streams), on the stand-ins for XPU and MPS (tests/mock_devices), and
against doctored tables, which it must catch. A CUDA machine runs it through scripts/gpu_check.sh's main job."""

import ctypes
import os
import textwrap

import pytest
import torch

from conftest import run_python
from table_ctypes import ExchangeAPI, table
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
    lines, ok = _self_check.report(api)
    assert ok and lines[-1] == "  other devices: none (torch reports no CUDA, ROCm, XPU, MPS or PrivateUse1 device)"


def test_report_checks_at_most_four_devices_and_says_so(api, monkeypatch):
    checked = []
    monkeypatch.setattr(_self_check, "device_types", lambda: [("CUDA", "cuda", 6)])
    monkeypatch.setattr(_self_check, "device_checks",
                        lambda api, device, pinned=False: checked.append((str(device), pinned)) or [("x", OK, "")])
    lines, ok = _self_check.report(api)
    assert "  CUDA: 6 devices, the first 4 checked" in lines and ok
    assert checked == [("cuda:0", True), ("cuda:1", False), ("cuda:2", False), ("cuda:3", False)]


def test_one_failed_check_fails_the_report(api, monkeypatch):
    monkeypatch.setattr(_self_check, "device_types", lambda: [("CUDA", "cuda", 1)])
    monkeypatch.setattr(_self_check, "device_checks",
                        lambda api, device, pinned=False: [("a", NA, "why"), ("b", FAIL, "what differs")])
    lines, ok = _self_check.report(api)
    assert not ok and lines[-2:] == ["  [n/a] cuda:0 a: why", "  [FAIL] cuda:0 b: what differs"]


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
    lines, ok = _self_check.report(api)
    assert ok and "  PrivateUse1 (tdbdev): 2 devices" in lines
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
