"""Devices the test machines lack, on stand-ins (tests/mock_devices): MPS's opaque data handles, XPU's global
SYCL device index, and ROCm's current stream before torch 2.11. Each test runs in a fresh interpreter, since
the stand-ins register device guards for the whole process.

What this proves: the table's own logic (what goes in data/byte_offset for a handle, how device ids are
translated, which library and symbol the pre-2.11 stream lookup asks) against torch's interfaces as the real
backends implement them. What it cannot prove: that real MPS, XPU or ROCm builds behave like the stand-ins
(an id<MTLBuffer> DataPtr, torch's XPU hooks' index, libtorch_hip.so exporting the shim) — facts taken from
PyTorch's sources, not run here.
"""

import os
import textwrap

import pytest

from conftest import run_python

TESTS = os.path.dirname(os.path.abspath(__file__))
kDLCUDA, kDLMetal, kDLROCM, kDLOneAPI = 2, 8, 10, 14
HANDLE = 0x7A000  # a made-up id<MTLBuffer>: never dereferenced


def run_with_mocks(body, prelude="", **env):
    """Runs `body` in a fresh interpreter with the stand-ins loaded (after `prelude`)."""
    code = textwrap.dedent("""
        import sys
        sys.path.insert(0, {tests!r})
        import torch, torch_dlpack_bridge, mock_devices
        from torch_dlpack_bridge import _probe
    """).format(tests=TESTS) + textwrap.dedent(prelude) + textwrap.dedent("""
        mock = mock_devices.load()
        api = torch_dlpack_bridge.exchange_api()
        native = torch_dlpack_bridge._native_capsule()
    """) + textwrap.dedent(body)
    result = run_python(code, **env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout


# ---- MPS: the DataPtr is a handle; the view's start travels in byte_offset ----------------------------

def test_mps_export_keeps_the_handle_in_data_and_the_offset_in_byte_offset(mock_build):
    out = run_with_mocks(f"""
        mock.register_guard("mps", 1)
        t = mock.fake_tensor("mps:0", {HANDLE}, 64, [2, 3], [4, 1], 5)  # float32, storage_offset 5
        for info in (_probe.dltensor(api, t), _probe.export(api, t).info()):
            print(info[0] == {HANDLE}, info[1], info[6])
        if native is not None:  # torch fixed its exporters the same way in 2026 (PRs 169272, 182924)
            try:
                n = _probe.dltensor(native, t)
                print("native", n[0] == {HANDLE}, n[6])
            except RuntimeError as e:
                print("native raised", str(e).splitlines()[0])
    """)
    lines = out.splitlines()
    assert lines[0] == lines[1] == f"True ({kDLMetal}, 0) 20", out
    if len(lines) > 2 and not lines[2].startswith("native raised"):
        # torch 2.13's own table still offsets the handle (the fix came later); either way it is not ours
        assert lines[2] in ("native True 20", "native False 0"), out


def test_mps_import_keeps_the_handle_and_starts_the_view_at_byte_offset(mock_build):
    out = run_with_mocks(f"""
        mock.register_guard("mps", 1)
        m = _probe.make({HANDLE}, ({kDLMetal}, 0), (2, 32, 1), [2, 3], [4, 1], byte_offset=20)
        t = m.to_python(api)
        print(t.device, t.storage_offset(), tuple(t.shape), t.stride())
        again = _probe.dltensor(api, t)
        print(again[0] == {HANDLE}, again[6])
    """)
    assert out.splitlines() == ["mps:0 5 (2, 3) (4, 1)", "True 20"], out


def test_mps_import_refuses_offset_inside_an_element(mock_build):
    out = run_with_mocks(f"""
        mock.register_guard("mps", 1)
        try:
            _probe.make({HANDLE}, ({kDLMetal}, 0), (2, 32, 1), [2], [1], byte_offset=6).to_python(api)
        except BufferError as e:
            print("BufferError", e)
    """)
    assert out.startswith("BufferError DLPack byte_offset 6"), out


# ---- XPU: DLPack's device_id is the index in sycl::device::get_devices() ------------------------------

def test_xpu_export_reports_the_global_sycl_index(mock_build):
    """The stand-in's hooks put five other SYCL devices first: local xpu:1 is global device 6."""
    out = run_with_mocks(f"""
        mock.register_guard("xpu", 2)
        t = mock.fake_tensor("xpu:1", 0x1000, 64, [4], [1], 0)
        print(_probe.dltensor(api, t)[1], _probe.export(api, t).info()[1])
        if native is not None:
            print("native", _probe.dltensor(native, t)[1])
    """)
    lines = out.splitlines()
    assert lines[0] == f"({kDLOneAPI}, 6) ({kDLOneAPI}, 6)", out
    if len(lines) > 1:
        assert lines[1] == f"native ({kDLOneAPI}, 6)", out  # torch's exporter agrees


def test_xpu_import_maps_the_global_sycl_index_back_to_torch_index(mock_build):
    out = run_with_mocks(f"""
        mock.register_guard("xpu", 2)
        for global_id in (5, 6, 1, 7, -1):
            m = _probe.make(0x1000, ({kDLOneAPI}, global_id), (2, 32, 1), [4], [1])
            try:
                print(global_id, m.to_python(api).device)
            except ValueError as e:
                print(global_id, "ValueError", e)
    """)
    lines = out.splitlines()
    assert lines[0] == "5 xpu:0" and lines[1] == "6 xpu:1", out
    for line in lines[2:]:
        assert "ValueError no xpu device has SYCL device index" in line, out


def test_xpu_stream_query_takes_the_global_index(mock_build):
    """current_work_stream goes through the same translation: a global index that is no XPU is a ValueError;
    a real one reaches torch (whose stand-in guard has no raw handles: RuntimeError from torch)."""
    out = run_with_mocks(f"""
        mock.register_guard("xpu", 2)
        for global_id in (1, 6):
            try:
                _probe.current_stream(api, {kDLOneAPI}, global_id)
            except Exception as e:
                print(global_id, type(e).__name__, str(e).splitlines()[0][:60])
    """)
    lines = out.splitlines()
    assert lines[0].startswith("1 ValueError no xpu device has SYCL device index 1"), out
    assert lines[1].startswith("6 RuntimeError"), out


# ---- ROCm before torch 2.11: the current stream comes from libtorch_hip.so -----------------------------

def test_rocm_stream_before_2_11_comes_from_libtorch_hip(mock_build, tmp_path):
    # Loaded before the stand-ins, as torch loads libtorch_hip before any extension: the stream shim is a weak
    # reference, bound when the library that holds it loads.
    prelude = f"""
        import ctypes
        ctypes.CDLL(mock_devices.fake_libtorch_hip({str(tmp_path)!r}), mode=ctypes.RTLD_GLOBAL)
    """
    out = run_with_mocks(prelude=prelude, body=f"""
        mock.set_cuda_is_rocm(True)
        mock.register_guard("cuda", 2)
        print(hex(mock.legacy_current_stream({kDLROCM}, 1)))
        try:
            mock.legacy_current_stream({kDLCUDA}, 0)
        except BufferError as e:
            print("BufferError", e)
    """)
    lines = out.splitlines()
    assert lines[0] == "0x5eed0001", out
    assert lines[1] == "BufferError DLPack device type 2 (cuda) has no torch equivalent", out
