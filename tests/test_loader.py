"""Loading the table library that matches the running torch: shipped per torch minor and C++ ABI, reused across
patch releases, built once into a per-user cache (under a lock, with one progress line) for a torch no shipped
library covers, and a clear ImportError (never an `undefined symbol`) when that cannot be done.

A fresh interpreter per scenario; torch.__version__ is rewritten before the package is imported, which is how
the loader sees a patch upgrade or a nightly without installing one.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_dlpack_bridge
from conftest import python_env, run_python
from torch_dlpack_bridge import _build, _loader

MINOR = "{}.{}".format(*_build.version_tuple(torch.__version__))
NIGHTLY = f"{MINOR}.0.dev20261101+cpu"  # same headers as the installed torch, but no shipped library trusted

IMPORT_AS = textwrap.dedent("""
    import json, sys, torch
    torch.__version__ = sys.argv[1]
    try:
        import torch_dlpack_bridge as b
    except ImportError as error:
        print(json.dumps({"import_error": str(error)}))
        raise SystemExit(0)
    from torch_dlpack_bridge import _probe
    t = torch.arange(6.0).reshape(2, 3).t()
    view = _probe.dltensor(torch.Tensor.__dlpack_c_exchange_api__, t)
    info = b.build_info()
    print(json.dumps({"origin": info["origin"], "library": info["library"],
                      "provider": b.active_provider()[b.CAPSULE_ATTR],
                      "view_ok": view[0] == t.data_ptr() and view[5] == t.stride()}))
""")


def import_as(version, **env):
    """Imports the package in a fresh interpreter that believes torch is `version`; (result dict, stderr)."""
    result = run_python(IMPORT_AS.replace("sys.argv[1]", repr(version)), **env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1]), result.stderr


@pytest.fixture
def cache(tmp_path):
    return {"TORCH_DLPACK_BRIDGE_CACHE": str(tmp_path / "cache")}


# ---- which library a torch gets ---------------------------------------------------------------------

@pytest.mark.parametrize("version, release", [
    ("2.13.0", True), ("2.13.1+cu130", True), ("2.4.1+cpu", True), ("2.16.0.dev20261101+cpu", False),
    ("2.13.0a0+git1234abc", False), ("2.15.0rc1", False),
])
def test_only_release_versions_trust_a_shipped_library(version, release):
    assert _build.TorchTarget(version, True, False, "/").is_release is release


def test_library_name_keys_minor_abi_and_rocm_and_nothing_else():
    names = {_build.TorchTarget(v, abi, rocm, "/").library_name
             for v in ("2.13.0", "2.13.5+cu130") for abi in (True, False) for rocm in (True, False)}
    assert names == {"libtdb_torch2.13_cxx11.so", "libtdb_torch2.13_precxx11.so",
                     "libtdb_torch2.13_cxx11_rocm.so", "libtdb_torch2.13_precxx11_rocm.so"}
    assert _build.TorchTarget("3.0.0", True, False, "/").library_name == "libtdb_torch3.0_cxx11.so"


def test_installed_torch_is_served_by_a_library_installed_with_the_package():
    info = torch_dlpack_bridge.build_info()
    assert info["origin"] == "shipped"
    assert os.path.dirname(info["library"]) == _loader.SHIPPED_DIR
    assert info["torch_version"].split(".")[:2] == torch.__version__.split(".")[:2]
    assert info["cxx11_abi"] == torch._C._GLIBCXX_USE_CXX11_ABI


def test_torch_patch_upgrade_keeps_the_shipped_library_and_compiles_nothing(cache):
    patched = f"{MINOR}.97+cpu"
    state, stderr = import_as(patched, TORCH_DLPACK_BRIDGE_BUILD="0", **cache)
    assert state["origin"] == "shipped" and state["provider"] == "torch_dlpack_bridge" and state["view_ok"]
    assert "building" not in stderr


# ---- a torch no shipped library covers ----------------------------------------------------------------

def test_uncovered_torch_builds_once_under_a_lock_then_reuses_the_cache(cache):
    """Two processes import at once with an empty cache: one builds (printing one progress line), the other
    waits on the lock and loads the result; a third loads from the cache without a word."""
    script = IMPORT_AS.replace("sys.argv[1]", repr(NIGHTLY))
    procs = [subprocess.Popen([sys.executable, "-c", script], env=python_env(**cache), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outputs]
    states = [json.loads(out.splitlines()[-1]) for out, _ in outputs]
    progress = [line for _, err in outputs for line in err.splitlines() if "building the exchange table" in line]
    assert len(progress) == 1, progress
    assert f"for torch {NIGHTLY}, first import only, about " in progress[0]
    assert sorted(s["origin"] for s in states) == ["build", "cache"]
    assert all(s["view_ok"] and s["provider"] == "torch_dlpack_bridge" for s in states)
    assert states[0]["library"].startswith(cache["TORCH_DLPACK_BRIDGE_CACHE"])

    third, stderr = import_as(NIGHTLY, **cache)
    assert third["origin"] == "cache" and third["library"] == states[0]["library"] and third["view_ok"]
    assert "building" not in stderr


def test_uncovered_torch_with_building_turned_off_is_an_import_error_naming_the_switch(cache):
    state, _ = import_as(NIGHTLY, TORCH_DLPACK_BRIDGE_BUILD="0", **cache)
    message = state["import_error"]
    assert f"no table library for torch {NIGHTLY}" in message and "pre-release" in message
    shipped = _build.installed_torch().library_name[len("libtdb_"):-len(".so")]  # e.g. torch2.13_cxx11
    assert "TORCH_DLPACK_BRIDGE_BUILD=0" in message and shipped in message


def test_uncovered_torch_without_a_compiler_is_an_import_error_naming_the_fix(cache):
    state, _ = import_as(NIGHTLY, CXX="/nonexistent/c++", TORCH_DLPACK_BRIDGE_BUILD="1", **cache)
    message = state["import_error"]
    assert "needs a C++ compiler, which was not found" in message and "install g++" in message
    assert not os.path.exists(cache["TORCH_DLPACK_BRIDGE_CACHE"]), "nothing is created when nothing can be built"


def test_library_built_for_another_torch_is_refused_not_loaded_blindly(cache, monkeypatch):
    """A library under another torch's name (a stale or misplaced file) is an ImportError naming both."""
    other = f"2.{int(MINOR.split('.')[1]) - 1}.0.dev1"
    target = _build.TorchTarget(other, bool(torch._C._GLIBCXX_USE_CXX11_ABI), False, "/")
    monkeypatch.setenv("TORCH_DLPACK_BRIDGE_CACHE", cache["TORCH_DLPACK_BRIDGE_CACHE"])
    folder = _loader.cache_dir(target, torch_dlpack_bridge.__version__)
    os.makedirs(folder)
    shutil.copy(torch_dlpack_bridge.build_info()["library"], os.path.join(folder, target.library_name))
    state, _ = import_as(other, TORCH_DLPACK_BRIDGE_BUILD="0", **cache)
    message = state["import_error"]
    assert f"was built for torch {MINOR}." in message and f"not for the running torch {other}" in message
