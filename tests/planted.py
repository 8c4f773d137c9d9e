"""Fake producers with one planted defect each, for the conformance checker's tests: torch tensors of a
subclass whose type publishes tests/planted_producer.c's table (which forwards to this project's table, then
does one thing wrong). `planted.py:<defect>` is a checker TARGET (the library's path in TDB_PLANTED_LIB).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import sysconfig

import torch

import torch_dlpack_bridge
from torch_dlpack_bridge.check.targets import Torch

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "planted_producer.c")
LIB_ENV = "TDB_PLANTED_LIB"

# defect -> (its number in planted_producer.c, the case it must fail). The two publishing defects and
# dlpack_refuses_all's __dlpack__ are made here. The controls (no case) are conformant: they pass every case.
DEFECTS = {
    "none": (0, None),
    "null_shape_0d": (18, None),  # NULL shape and strides for 0-d exports and allocations, as DLPack allows
    "capsule_wrong_name": (0, "publish.capsule"),
    "legacy_int_disagrees": (0, "publish.legacy-int"),
    "old_version": (1, "header.version"),
    "prev_api_cycle": (2, "header.prev-api"),
    "null_allocator": (3, "header.functions"),
    "dltensor_off_by_one": (4, "export.dltensor"),
    "managed_read_only": (5, "export.managed"),
    "runtime_error": (6, "export.refuses-undescribable"),
    "deleter_leaks": (7, "ownership.deleter-releases"),
    "deleter_needs_gil": (8, "ownership.other-thread"),
    "export_drops_memory": (9, "ownership.source-gone"),
    "deleter_aborts_at_exit": (10, "ownership.interpreter-exit"),
    "to_python_copies": (11, "import.shares-memory"),
    "to_python_leaks_on_failure": (12, "import.owns-on-failure"),
    "allocator_wrong_dtype": (13, "allocator.prototype"),
    "allocator_leaves_exception": (14, "allocator.impossible"),
    "wrong_type_no_exception": (15, "errors.wrong-type"),
    "stream_fails": (16, "stream.current-work-stream"),
    "shared_shape": (17, "threads.concurrent-exports"),
    "dlpack_refuses_all": (4, "export.dltensor"),  # off by one, where __dlpack__ refuses every tensor
    "deleter_hangs_at_exit": (19, "ownership.interpreter-exit"),
    "to_python_aborts_on_negative_strides": (20, "import.negative-strides"),
    "to_python_drops_zero_strides": (21, "import.zero-strides"),
    "to_python_unused_stride_no_exception": (22, "import.unused-strides"),
    "to_python_null_data_leaks": (23, "import.null-data-empty"),
    "to_python_null_data_imported": (24, "import.null-data-with-elements"),
    "to_python_null_shape_deletes_twice": (25, "import.null-shape-0d"),
    "to_python_ignores_byte_offset": (26, "import.odd-byte-offset"),
    "to_python_reads_null_strides": (27, "import.null-strides"),
    "to_python_negative_shape_empty": (28, "import.negative-shape"),
}
# Defects that take the interpreter down (or hang it): the checker must report them from a separate interpreter.
CRASHING = {"deleter_needs_gil", "deleter_hangs_at_exit", "to_python_aborts_on_negative_strides",
            "to_python_reads_null_strides"}
PIDS_ENV = "TDB_PLANTED_PIDS"  # a file each interpreter that sets a planted target up appends its pid to


def build(out_dir: str) -> str:
    """Compiles planted_producer.c into out_dir; returns the library's path."""
    path = os.path.join(out_dir, "libtdb_planted.so")
    cmd = [os.environ.get("CC", "cc"), "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", path, SOURCE,
           "-I", torch_dlpack_bridge.get_include(), "-I", sysconfig.get_paths()["include"]]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(result.stdout + result.stderr)
    return path


_new_capsule = ctypes.pythonapi.PyCapsule_New
_new_capsule.restype, _new_capsule.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_NAMES = {True: b"dlpack_exchange_api", False: b"dlpack_exchange_table"}  # kept alive: capsules keep the pointer


class Planted(Torch):
    """torch tensors viewed as a subclass whose type publishes the planted table."""

    def __init__(self, defect: str):
        super().__init__("bridge")
        self.defect = defect
        self.name = f"planted:{defect}"
        self.type = type(f"Planted_{defect}", (torch.Tensor,), {})

    def setup(self):  # publishes on its own subclass only: torch.Tensor is left as it is (tests run in-process)
        versions = {"torch": torch.__version__, "torch_dlpack_bridge": torch_dlpack_bridge.__version__}
        lib = ctypes.PyDLL(os.environ[LIB_ENV])
        lib.tdb_planted_table.restype = ctypes.c_void_p
        lib.tdb_planted_table.argtypes = [ctypes.c_void_p, ctypes.c_int]
        address = lib.tdb_planted_table(torch_dlpack_bridge.exchange_api_address(), DEFECTS[self.defect][0])
        name = _NAMES[self.defect != "capsule_wrong_name"]
        setattr(self.type, "__dlpack_c_exchange_api__", _new_capsule(address, name, None))
        setattr(self.type, "__c_dlpack_exchange_api__", address + (8 if self.defect == "legacy_int_disagrees" else 0))
        if self.defect == "dlpack_refuses_all":
            setattr(self.type, "__dlpack__", _refuse)
        if os.environ.get(PIDS_ENV):
            with open(os.environ[PIDS_ENV], "a") as f:
                f.write(f"{os.getpid()}\n")
        return versions

    def corpus(self):
        return [(label, t.as_subclass(self.type)) for label, t in super().corpus()]

    def undescribable(self):  # (torch cannot view a sparse tensor as a subclass)
        return [(label, t.as_subclass(self.type), why) for label, t, why in super().undescribable() if t.is_sparse
                is False]

    def sample(self, value):
        return super().sample(value).as_subclass(self.type)

    def table_type(self):
        return self.type


def _refuse(self, **_):
    raise BufferError("planted: __dlpack__ refuses every tensor")


def make_tensor(dtype, shape):
    """A tensor factory: `planted.py:make_tensor` is a checker target of the factory kind (torch.Tensor's table)."""
    return torch.zeros(shape, dtype=getattr(torch, dtype))


def __getattr__(defect: str):
    """`planted.py:<defect>` as a checker target: the module's attribute is the target's factory."""
    if defect in DEFECTS:
        return lambda: Planted(defect)
    raise AttributeError(defect)


if __name__ == "__main__":
    print(build(sys.argv[1]))
