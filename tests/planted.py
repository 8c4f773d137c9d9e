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

# defect -> (its number in planted_producer.c, the case it must fail). The two publishing defects are made here.
DEFECTS = {
    "none": (0, None),
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
}
# Defects that take the interpreter down: the checker must report them from a separate interpreter.
CRASHING = {"deleter_needs_gil"}


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
