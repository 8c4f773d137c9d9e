"""The autoload hook (torch_dlpack_bridge_autoload.pth + _torch_dlpack_bridge_autoload): installing the package
is enough; the table is published the moment torch finishes importing, whatever imports it first. Each
scenario runs in a fresh interpreter, as a user's process starts: through site-packages, not this checkout.
"""

import json
import os
import subprocess
import sys
import sysconfig
import textwrap

import pytest

import torch_dlpack_bridge

HOOK_PTH, HOOK_MODULE = "torch_dlpack_bridge_autoload.pth", "_torch_dlpack_bridge_autoload"

STATE = textwrap.dedent("""
    import ctypes, json, sys
    def state():
        import torch
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        capsule = torch.Tensor.__dict__.get("__dlpack_c_exchange_api__")
        bridge = sys.modules.get("torch_dlpack_bridge")
        native = bridge and bridge._native_capsule()
        return {"bridge_imported": bridge is not None,
                "capsule": capsule and get(capsule, b"dlpack_exchange_api"),
                "int": torch.Tensor.__dict__.get("__c_dlpack_exchange_api__"),
                "ours": bridge and bridge.exchange_api_address(),
                "native": native and get(native, b"dlpack_exchange_api")}
""")


def published_ours(state):
    return state["bridge_imported"] and state["capsule"] == state["int"] == state["ours"] is not None


def fresh(code, **env):
    """Runs `code` in a new interpreter started as a user's would be (site-packages processed, no PYTHONPATH
    pointing at this checkout); returns the completed process."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_DLPACK_BRIDGE_", "PYTHONPATH"))}
    full_env.update(env)
    return subprocess.run([sys.executable, "-c", STATE + textwrap.dedent(code)], capture_output=True, text=True,
                          env=full_env, cwd=os.path.dirname(sys.executable), timeout=300)


def fresh_json(code, **env):
    result = fresh(code, **env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1]), result.stderr


def test_hook_files_are_installed_at_the_top_of_site_packages():
    site = os.path.dirname(os.path.dirname(os.path.abspath(torch_dlpack_bridge.__file__)))
    if not os.path.isfile(os.path.join(site, HOOK_PTH)):  # an editable install maps the package elsewhere
        site = sysconfig.get_paths()["purelib"]
    assert os.path.isfile(os.path.join(site, HOOK_PTH)) and os.path.isfile(os.path.join(site, HOOK_MODULE + ".py"))
    with open(os.path.join(site, HOOK_PTH)) as f:
        assert f.read().strip() == f"import {HOOK_MODULE}"


def test_importing_torch_alone_publishes_the_table():
    state, _ = fresh_json("import torch; print(json.dumps(state()))")
    assert published_ours(state), state


def test_interpreter_start_imports_neither_torch_nor_the_package():
    state, _ = fresh_json("print(json.dumps(sorted(m for m in sys.modules if 'torch' in m)))")
    assert [m for m in state if not m.startswith("__editable__")] == [HOOK_MODULE]  # (an editable install's finder)


def test_autoload_off_leaves_torch_alone_until_the_package_is_imported():
    state, _ = fresh_json("""
        before = state()
        import torch_dlpack_bridge
        print(json.dumps([before, state()]))
    """, TORCH_DLPACK_BRIDGE_AUTOLOAD="0")
    before, after = state
    assert before["bridge_imported"] is False and before["int"] is None
    assert before["capsule"] == after["native"], "torch's own table (or none) until the package is imported"
    assert published_ours(after), after


def test_prefer_torch_applies_to_the_hook():
    if torch_dlpack_bridge._native_capsule() is None:
        pytest.skip("this torch has no table of its own to prefer")
    state, _ = fresh_json("import torch; print(json.dumps(state()))", TORCH_DLPACK_BRIDGE_PREFER="torch")
    assert state["bridge_imported"] and state["capsule"] == state["int"] == state["native"] != state["ours"]


def test_importing_the_package_first_still_publishes():
    state, _ = fresh_json("import torch_dlpack_bridge; print(json.dumps(state()))")
    assert published_ours(state), state


def test_a_failure_is_one_warning_and_torch_still_imports():
    result = fresh("import torch; print(json.dumps(state())); print(torch.ones(2).sum().item())",
                   TORCH_DLPACK_BRIDGE_PREFER="nonsense")  # makes the package's import raise ValueError
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-1] == "2.0"
    warnings = [line for line in result.stderr.splitlines() if "was not published when torch was imported" in line]
    assert len(warnings) == 1 and "RuntimeWarning" in warnings[0] and "prefer must be" in warnings[0]


def test_tvm_ffi_imported_first_uses_this_projects_table_and_compiles_nothing(tmp_path):
    """tvm-ffi looks for a table when it first meets torch (at its own import) and compiles its own backport
    where it finds none (torch <= 2.9): importing it first must still find ours, with nothing built."""
    pytest.importorskip("tvm_ffi")
    cache = tmp_path / "tvm_ffi_cache"
    cache.mkdir()
    state, _ = fresh_json("""
        import tvm_ffi  # first: it imports torch itself
        import torch
        get_allocator = tvm_ffi.LIB.TVMFFIEnvGetDLPackManagedTensorAllocator
        get_allocator.restype, get_allocator.argtypes = ctypes.c_void_p, []
        seen = []
        tvm_ffi.convert(lambda *a: seen.append(get_allocator()))(torch.zeros(2))
        import torch_dlpack_bridge  # already imported by the hook: this only names it
        ours = torch_dlpack_bridge.exchange_api_address()
        print(json.dumps(dict(state(), allocator=seen[0], our_allocator=ctypes.c_void_p.from_address(ours + 16).value)))
    """, TVM_FFI_CACHE_DIR=str(cache))
    assert published_ours(state), state
    assert state["allocator"] == state["our_allocator"], "tvm-ffi must take torch tensors through our table"
    assert list(cache.iterdir()) == [], "tvm-ffi compiled something"
