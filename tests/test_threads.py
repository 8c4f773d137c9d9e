"""Concurrency and lifetime: threads exporting and importing at once, deleters on native threads without
the GIL, and owned exports deleted after the interpreter has been finalized."""

import subprocess
import sys
import threading

import torch

import torch_dlpack_bridge
from torch_dlpack_bridge import _probe


def test_threads_export_import_and_delete_concurrently(api):
    sources = [torch.arange(64, dtype=torch.float32).reshape(8, 8) + i for i in range(4)]
    errors = []

    def worker(source):
        try:
            for _ in range(500):
                view = _probe.dltensor(api, source)
                assert view[0] == source.data_ptr()
                back = _probe.export(api, source.t()).to_python(api)
                assert back.data_ptr() == source.data_ptr() and torch.equal(back, source.t())
                _probe.export(api, source).delete()
        except Exception as e:  # reported to the main thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in sources]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_owned_export_deleter_runs_on_native_thread_without_gil(api):
    source = torch.ones(1000)
    storage = source.untyped_storage()
    managed = _probe.export(api, source)
    del source
    managed.delete_on_native_thread()
    # the Python side's reference keeps the storage, with its data intact
    assert torch.equal(torch.tensor([], dtype=torch.float32).set_(storage), torch.ones(1000))


def test_last_reference_dropped_on_native_thread_frees_the_memory(api):
    # The export is the storage's only owner, so the native thread's deleter frees torch's memory.
    managed = _probe.export(api, torch.empty(1 << 20))
    managed.delete_on_native_thread()


def test_imported_tensor_released_on_another_python_thread(api):
    managed = _probe.make(0, (1, 0), (2, 32, 1), (0,), (1,))
    managed.count_deletes()
    before = _probe.deleter_calls()
    tensor = managed.to_python(api)
    box = [tensor]
    del tensor
    t = threading.Thread(target=box.clear)
    t.start()
    t.join()
    assert _probe.deleter_calls() - before == 2  # the counting trampoline and the probe's own deleter


def test_owned_exports_alive_at_exit_are_deleted_after_finalization():
    script = """
import torch, torch_dlpack_bridge
from torch_dlpack_bridge import _probe
api = torch_dlpack_bridge.exchange_api()
t = torch.arange(10.0)
_probe.export(api, t).keep_until_exit()
_probe.export(api, t[2:]).keep_until_exit()
p = torch.nn.Parameter(torch.ones(3))
_probe.export(api, p).keep_until_exit()
del t, p
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "probe: deleted 3 tensors after finalization" in done.stderr
