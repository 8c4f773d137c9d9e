"""Loading the table library that matches the running torch: shipped per torch minor and C++ ABI, reused across
patch releases, built once into a per-user cache (under a lock, with one progress line) for a torch no shipped
library covers, and a clear ImportError (never an `undefined symbol`) when that cannot be done.

A fresh interpreter per scenario; torch.__version__ is rewritten before the package is imported, which is how
the loader sees a patch upgrade or a nightly without installing one.
"""

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_dlpack_bridge
from conftest import python_env, run_python
from torch_dlpack_bridge import _build, _cache, _loader

MINOR = "{}.{}".format(*_build.version_tuple(torch.__version__))
NIGHTLY = f"{MINOR}.0.dev20261101+cpu"  # same headers as the installed torch, but no shipped library trusted
PYTHON_ABI = _build.running_python_abi()  # "gil", or "cp313t" on a free-threaded CPython

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


def test_library_name_keys_minor_abi_rocm_and_free_threaded_python_and_nothing_else():
    names = {_build.TorchTarget(v, abi, rocm, "/").library_name
             for v in ("2.13.0", "2.13.5+cu130") for abi in (True, False) for rocm in (True, False)}
    assert names == {"libtdb_torch2.13_cxx11.so", "libtdb_torch2.13_precxx11.so",
                     "libtdb_torch2.13_cxx11_rocm.so", "libtdb_torch2.13_precxx11_rocm.so"}
    assert _build.TorchTarget("3.0.0", True, False, "/").library_name == "libtdb_torch3.0_cxx11.so"
    assert _build.TorchTarget("2.12.0", True, False, "/", "cp313t").library_name == "libtdb_torch2.12_cxx11_cp313t.so"


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
                              stderr=subprocess.PIPE, text=True, preexec_fn=lambda: os.umask(0))
             for _ in range(2)]  # umask 000: what is created must still be private
    outputs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outputs]
    states = [json.loads(out.splitlines()[-1]) for out, _ in outputs]
    progress = [line for _, err in outputs for line in err.splitlines() if "building the exchange table" in line]
    assert len(progress) == 1, progress
    assert f"for torch {NIGHTLY}, once for this torch, about " in progress[0]
    folder = os.path.dirname(states[0]["library"])
    for path in (cache["TORCH_DLPACK_BRIDGE_CACHE"], folder):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700, path
    for name in (os.path.basename(states[0]["library"]), "build.log", ".lock"):
        assert not os.stat(os.path.join(folder, name)).st_mode & 0o022, name
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
    target = _build.TorchTarget(other, bool(torch._C._GLIBCXX_USE_CXX11_ABI), False, "/", PYTHON_ABI)
    monkeypatch.setenv("TORCH_DLPACK_BRIDGE_CACHE", cache["TORCH_DLPACK_BRIDGE_CACHE"])
    folder = _loader.cache_dir(target, torch_dlpack_bridge.__version__)
    os.makedirs(folder)
    shutil.copy(torch_dlpack_bridge.build_info()["library"], os.path.join(folder, target.library_name))
    state, _ = import_as(other, TORCH_DLPACK_BRIDGE_BUILD="0", **cache)
    message = state["import_error"]
    assert f"was built for torch {MINOR}." in message and f"not for the running torch {other}" in message


# ---- the cache: nobody else's, never followed through links, rebuilt when broken --------------------------

def plant(folder, name, marker=None, mode=0o755):
    """Compiles a shared library (no table symbols) at folder/name; loading it writes `marker` if given."""
    os.makedirs(folder, exist_ok=True)
    source = os.path.join(folder, "planted.c")
    with open(source, "w") as f:
        f.write("#include <stdio.h>\n__attribute__((constructor)) static void run(void) {\n")
        if marker:
            f.write(f'  FILE* f = fopen("{marker}", "w"); if (f) fclose(f);\n')
        f.write("}\nint not_a_table = 1;\n")
    path = os.path.join(folder, name)
    subprocess.run(["cc", "-shared", "-fPIC", source, "-o", path], check=True)
    os.remove(source)
    os.chmod(path, mode)
    return path


def nightly_folder(cache):
    target = _build.TorchTarget(NIGHTLY, bool(torch._C._GLIBCXX_USE_CXX11_ABI), False, "/", PYTHON_ABI)
    root = cache["TORCH_DLPACK_BRIDGE_CACHE"]
    folder = _loader.cache_dir(target, torch_dlpack_bridge.__version__).replace(_loader.cache_root(), root, 1)
    return folder, target.library_name


def test_relative_cache_paths_are_refused_or_ignored(monkeypatch, tmp_path):
    """A relative TORCH_DLPACK_BRIDGE_CACHE is an ImportError (the library loaded would depend on the working
    directory); a relative XDG_CACHE_HOME is ignored, as the XDG spec says."""
    state, _ = import_as(NIGHTLY, TORCH_DLPACK_BRIDGE_CACHE="relative/cache")
    assert "TORCH_DLPACK_BRIDGE_CACHE='relative/cache' is a relative path" in state["import_error"]
    monkeypatch.delenv("TORCH_DLPACK_BRIDGE_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")
    assert _loader.cache_root() == str(tmp_path / ".cache" / "torch_dlpack_bridge")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _loader.cache_root() == str(tmp_path / "xdg" / "torch_dlpack_bridge")


@pytest.mark.parametrize("plant_how", ["group-writable root", "world-writable folder", "other owner", "symlink"])
def test_planted_library_in_an_untrusted_cache_never_runs(cache, tmp_path, plant_how):
    """Another local user who can write to the cache (umask 000 before, a shared cache root) plants a library
    there: it is never loaded; the ImportError (building is off) says why."""
    folder, name = nightly_folder(cache)
    marker = tmp_path / "planted-library-ran"
    if plant_how == "symlink":  # the library is a link to a file elsewhere
        elsewhere = plant(str(tmp_path / "elsewhere"), name, str(marker))
        os.makedirs(folder, mode=0o700)
        os.chmod(cache["TORCH_DLPACK_BRIDGE_CACHE"], 0o700)
        os.symlink(elsewhere, os.path.join(folder, name))
        why = "is a symbolic link"
    else:
        plant(folder, name, str(marker))
        for path in (cache["TORCH_DLPACK_BRIDGE_CACHE"], folder):
            os.chmod(path, 0o700)
        if plant_how == "group-writable root":
            os.chmod(cache["TORCH_DLPACK_BRIDGE_CACHE"], 0o770)
            why = "is writable by group or others (mode 770)"
        elif plant_how == "world-writable folder":
            os.chmod(folder, 0o777)
            why = "is writable by group or others (mode 777)"
        else:
            if os.geteuid() != 0:
                pytest.skip("giving a file to another user needs root")
            os.chown(folder, 65534, 65534)
            why = f"belongs to uid 65534, not to this user (uid {os.geteuid()})"
    state, _ = import_as(NIGHTLY, TORCH_DLPACK_BRIDGE_BUILD="0", **cache)
    assert why in state["import_error"] and "forbids building one" in state["import_error"], state
    assert not marker.exists(), "the planted library was loaded"


def test_unusable_cache_root_builds_into_a_private_temporary_folder(tmp_path):
    """A cache root that cannot be created (here: under a file; a read-only HOME alike) is no failure: the
    table is built for this process alone, in a private folder removed once the library is loaded."""
    (tmp_path / "a_file").write_text("")
    root = str(tmp_path / "a_file" / "cache")
    state, stderr = import_as(NIGHTLY, TORCH_DLPACK_BRIDGE_CACHE=root)
    assert state["origin"] == "private" and state["provider"] == "torch_dlpack_bridge" and state["view_ok"], state
    progress = [line for line in stderr.splitlines() if "building the exchange table" in line]
    assert len(progress) == 1 and "for this process only" in progress[0], stderr
    assert "into a private temporary folder" in progress[0] and f"{tmp_path / 'a_file'} is not a folder" in progress[0]
    assert not os.path.exists(os.path.dirname(state["library"])), "the private folder is removed after loading"


def test_broken_cached_library_is_rebuilt_once(cache):
    """A cached library that loads but is not a table library (a truncated or foreign file) is rebuilt, once,
    and the rebuilt library is the one loaded (not the broken one still mapped under the same name)."""
    folder, name = nightly_folder(cache)
    plant(folder, name)
    for path in (cache["TORCH_DLPACK_BRIDGE_CACHE"], folder):
        os.chmod(path, 0o700)
    state, stderr = import_as(NIGHTLY, **cache)
    assert state["origin"] == "build" and state["view_ok"] and state["provider"] == "torch_dlpack_bridge", state
    progress = [line for line in stderr.splitlines() if "building the exchange table" in line]
    assert len(progress) == 1 and "again (" in progress[0] and "is not a table library" in progress[0], stderr
    again, stderr = import_as(NIGHTLY, **cache)
    assert again["origin"] == "cache" and "building" not in stderr


def test_empty_cached_library_with_building_off_is_an_import_error(cache):
    folder, name = nightly_folder(cache)
    os.makedirs(folder, mode=0o700)
    os.chmod(cache["TORCH_DLPACK_BRIDGE_CACHE"], 0o700)
    open(os.path.join(folder, name), "w").close()
    state, _ = import_as(NIGHTLY, TORCH_DLPACK_BRIDGE_BUILD="0", **cache)
    assert "is empty or not a file" in state["import_error"] and "forbids rebuilding it" in state["import_error"]


def fake_compiler(tmp_path, body):
    script = tmp_path / "fake-c++"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    return str(script)


@pytest.mark.parametrize("link", ["build.log", ".lock"])
def test_cache_files_are_never_opened_through_a_symbolic_link(cache, tmp_path, link):
    """A link planted at build.log or .lock (pointing at a file of the user's) is not written through: the
    build moves to a private folder instead."""
    folder, _ = nightly_folder(cache)
    os.makedirs(folder, mode=0o700)
    os.chmod(cache["TORCH_DLPACK_BRIDGE_CACHE"], 0o700)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    os.symlink(victim, os.path.join(folder, link))
    state, stderr = import_as(NIGHTLY, CXX=fake_compiler(tmp_path, "exit 1\n"), **cache)
    assert victim.read_text() == "precious"
    assert f"{folder}/{link}" in stderr and "private temporary folder" in stderr, stderr
    assert "building the exchange table for torch" in state["import_error"] and "failed" in state["import_error"]


def test_hung_compiler_is_an_import_error_naming_the_log_and_leaves_no_process_of_its_group(cache, tmp_path):
    """A compiler that hangs (here a driver waiting for a child of its own, as g++ waits for cc1plus) past the
    build's time limit: the import fails saying so, and no process of the compiler's group runs on (killing the
    driver's pid alone left its children: two `sleep 600` after the suite)."""
    import time

    import processes

    start = time.monotonic()
    pids = tmp_path / "pids"

    def groups():
        return [int(pid) for pid in pids.read_text().split()] if pids.exists() else []

    try:
        state, _ = import_as(NIGHTLY, CXX=fake_compiler(tmp_path, f"sleep 600 &\necho $$ >> {pids}\nwait\n"),
                             TORCH_DLPACK_BRIDGE_BUILD_TIMEOUT="1", **cache)
        message = state["import_error"]
        assert "timed out after 1 s" in message and "TORCH_DLPACK_BRIDGE_BUILD_TIMEOUT sets the limit" in message
        folder, _ = nightly_folder(cache)
        assert f"(log: {folder}/build.log)" in message
        assert time.monotonic() - start < 300  # about 5 s; generous for a loaded machine, far below 600 s
        assert groups(), "no compiler started its child within the time limit"
        deadline = time.monotonic() + 60
        while processes.in_groups(groups()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes.in_groups(groups()) == [], "processes of a timed-out compiler's group still run"
    finally:  # the test's own clean-up, where it failed
        processes.kill_groups(groups())


def test_missing_python_headers_are_an_import_error_naming_the_package(cache):
    """A Python without its development headers cannot build at import: say which package has them."""
    code = ("import sysconfig; real = sysconfig.get_paths\n"
            "sysconfig.get_paths = lambda *a, **k: dict(real(*a, **k), include='/nonexistent/include')\n")
    result = run_python(code + IMPORT_AS.replace("sys.argv[1]", repr(NIGHTLY)), **cache)
    message = json.loads(result.stdout.splitlines()[-1])["import_error"]
    version = "{}.{}".format(*sys.version_info[:2])
    assert "needs Python's C headers, which are missing (/nonexistent/include/Python.h)" in message
    assert f"python{version}-dev" in message and f"python{version}-devel" in message


def test_library_for_the_other_cxx11_abi_is_refused(cache):
    """torch reports the other C++ ABI (as a pre-C++11-ABI wheel of the same torch would): the library built
    for this one, found under the other's name in the cache, is an ImportError naming both ABIs."""
    abi = bool(torch._C._GLIBCXX_USE_CXX11_ABI)
    target = _build.TorchTarget(NIGHTLY, not abi, False, "/", PYTHON_ABI)
    folder = _loader.cache_dir(target, torch_dlpack_bridge.__version__).replace(
        _loader.cache_root(), cache["TORCH_DLPACK_BRIDGE_CACHE"], 1)
    os.makedirs(folder, mode=0o700)
    os.chmod(cache["TORCH_DLPACK_BRIDGE_CACHE"], 0o700)
    shutil.copy(torch_dlpack_bridge.build_info()["library"], os.path.join(folder, target.library_name))
    code = f"import torch; torch._C._GLIBCXX_USE_CXX11_ABI = {not abi}\n"
    result = run_python(code + IMPORT_AS.replace("sys.argv[1]", repr(NIGHTLY)), TORCH_DLPACK_BRIDGE_BUILD="0",
                        **cache)
    message = json.loads(result.stdout.splitlines()[-1])["import_error"]
    python = _loader.describe_python_abi(PYTHON_ABI)
    assert (f"(C++11 ABI {abi}) and {python}, not for the running torch {NIGHTLY} (C++11 ABI {not abi}) and "
            f"{python}") in message


def test_library_for_the_other_kind_of_cpython_is_refused(cache):
    """A free-threaded CPython counts references differently from a GIL build: a library found in the cache
    under the other kind's name (a cache shared between python3.13 and python3.13t) is refused, naming
    both. This interpreter's own library is planted where the other kind looks, and the interpreter is made
    to report itself as the other kind (sys.abiflags): run on a GIL interpreter it shows a free-threaded one
    refusing a GIL library; on a free-threaded one (scripts/freethreaded_check.sh), the reverse."""
    other_flags, other_abi = ("t", "cp{}{}t".format(*sys.version_info[:2])) if PYTHON_ABI == "gil" else ("", "gil")
    target = _build.TorchTarget(NIGHTLY, bool(torch._C._GLIBCXX_USE_CXX11_ABI), False, "/", other_abi)
    folder = _loader.cache_dir(target, torch_dlpack_bridge.__version__).replace(
        _loader.cache_root(), cache["TORCH_DLPACK_BRIDGE_CACHE"], 1)
    own = _build.TorchTarget(NIGHTLY, target.cxx11_abi, False, "/", PYTHON_ABI)
    assert folder != _loader.cache_dir(own, torch_dlpack_bridge.__version__).replace(
        _loader.cache_root(), cache["TORCH_DLPACK_BRIDGE_CACHE"], 1), "the cache keys the Python ABI"
    assert target.library_name != own.library_name
    os.makedirs(folder, mode=0o700)
    os.chmod(cache["TORCH_DLPACK_BRIDGE_CACHE"], 0o700)
    shutil.copy(torch_dlpack_bridge.build_info()["library"], os.path.join(folder, target.library_name))
    code = f"import sys; sys.abiflags = {other_flags!r}\n" + IMPORT_AS.replace("sys.argv[1]", repr(NIGHTLY))
    result = run_python(code, TORCH_DLPACK_BRIDGE_BUILD="0", **cache)
    message = json.loads(result.stdout.splitlines()[-1])["import_error"]
    assert (f"and {_loader.describe_python_abi(PYTHON_ABI)}, not for the running torch {NIGHTLY} (C++11 ABI "
            f"{target.cxx11_abi}) and {_loader.describe_python_abi(other_abi)}") in message, message


def test_compile_table_links_under_a_temporary_name_fsyncs_then_renames(tmp_path, monkeypatch):
    compiler = fake_compiler(tmp_path, 'while [ $# -gt 0 ]; do [ "$1" = -o ] && printf x > "$2"; shift; done\n')
    monkeypatch.setenv("CXX", compiler)
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))),
                                                 real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (events.append(("replace", a, b)), real_replace(a, b))[1])
    out = tmp_path / "lib" / "libtdb_test.so"
    _build.compile_table(_build.installed_torch(), str(out))
    (fsynced, linked), replaced, synced_dir = events
    assert fsynced == "fsync" and replaced == ("replace", linked, str(out)) and synced_dir == ("fsync", str(out.parent))
    assert os.path.dirname(os.path.dirname(linked)) == str(out.parent), "linked in the output's folder"
    assert out.read_text() == "x" and stat.S_IMODE(out.stat().st_mode) == 0o755


# ---- the folders above the cache, links, and what another user can race -------------------------------

OTHER_UID = 54321  # a second local user (CI runs as root, which can hand files to it and run as it)


def needs_root():
    if os.geteuid() != 0:
        pytest.skip("a second user needs root (CI runs as root)")


def planted_cache(root, marker):
    """A cache root `root` whose folder for NIGHTLY holds a library that writes `marker` when loaded (owned by
    this user, mode 0755: it passes every check made on the file itself)."""
    folder, name = nightly_folder({"TORCH_DLPACK_BRIDGE_CACHE": str(root)})
    plant(folder, name, str(marker))
    for path in (str(root), folder):
        os.chmod(path, 0o700)


@pytest.mark.parametrize("owner", ["this user", "another user"])
def test_cache_root_that_is_a_link_is_followed_only_when_the_link_is_the_users(tmp_path, owner):
    """The root may be a symbolic link, but only one the user owns (lstat): another user's link to the user's
    own folder is refused (that user could point it anywhere at any moment)."""
    if owner == "another user":
        needs_root()
    marker = tmp_path / "planted-library-ran"
    planted_cache(tmp_path / "real", marker)
    link = tmp_path / "cache"
    os.symlink(tmp_path / "real", link)
    if owner == "another user":
        os.lchown(link, OTHER_UID, OTHER_UID)
    state, _ = import_as(NIGHTLY, TORCH_DLPACK_BRIDGE_BUILD="0", TORCH_DLPACK_BRIDGE_CACHE=str(link))
    if owner == "this user":  # followed: the planted library is loaded (and refused as no table library)
        assert marker.exists() and "is not a table library" in state["import_error"], state
    else:
        assert not marker.exists(), "a library behind another user's link was loaded"
        assert f"{link} is a symbolic link, and {link} belongs to uid {OTHER_UID}" in state["import_error"], state


@pytest.mark.parametrize("parent", ["another user's", "world-writable", "sticky root-owned"])
def test_folders_above_the_cache_root_are_checked(tmp_path, parent):
    """A folder above the root that another user owns or can write (but for a sticky folder of root's, as
    /tmp) could have the root swapped under it: the cache is refused, and the library in it never runs."""
    needs_root()
    above = tmp_path / "above"
    marker = tmp_path / "planted-library-ran"
    planted_cache(above / "cache", marker)
    os.chmod(above, {"another user's": 0o755, "world-writable": 0o777, "sticky root-owned": 0o1777}[parent])
    if parent == "another user's":
        os.chown(above, OTHER_UID, OTHER_UID)
    state, _ = import_as(NIGHTLY, TORCH_DLPACK_BRIDGE_BUILD="0", TORCH_DLPACK_BRIDGE_CACHE=str(above / "cache"))
    if parent == "sticky root-owned":  # accepted: others cannot rename or remove the user's entries there
        assert marker.exists() and "is not a table library" in state["import_error"], state
        return
    assert not marker.exists(), "a library under an untrusted folder was loaded"
    why = (f"{above} belongs to uid {OTHER_UID}, not to root or this user" if parent == "another user's"
           else f"{above} is writable by group or others (mode 777)")
    assert why in state["import_error"] and "forbids building one" in state["import_error"], state


LOAD_REPEATEDLY = textwrap.dedent("""
    import json, sys, torch
    import torch_dlpack_bridge
    from torch_dlpack_bridge import _build, _loader
    real = _build.installed_torch()
    _build.installed_torch = lambda: _build.TorchTarget(sys.argv[1], real.cxx11_abi, real.rocm, real.root,
                                                        real.python_abi)
    outcomes = {}
    for _ in range(int(sys.argv[2])):
        try:
            _loader.load(torch_dlpack_bridge.__version__)
            kind = "loaded"
        except Exception as error:
            kind = type(error).__name__
        outcomes[kind] = outcomes.get(kind, 0) + 1
    print(json.dumps(outcomes))
""")


def test_another_user_swapping_the_cache_under_the_loader_never_gets_code_run():
    """A second user (a real other uid) who owns the folder above the cache swaps the cache root between the
    user's real cache, a planted one and a link, as fast as it can, while the loader loads 300 times: the
    planted library never runs, and every attempt ends in an ImportError (never another exception)."""
    import tempfile
    import time

    needs_root()
    above = tempfile.mkdtemp(prefix="tdb-other-user-", dir="/tmp")  # the other user can reach it there
    try:
        marker = os.path.join(above, "planted-library-ran")
        planted_cache(os.path.join(above, "planted"), marker)
        folder, _ = nightly_folder({"TORCH_DLPACK_BRIDGE_CACHE": os.path.join(above, "real")})
        os.makedirs(folder, mode=0o700)
        os.chmod(os.path.join(above, "real"), 0o700)
        os.chown(above, OTHER_UID, OTHER_UID)
        os.chmod(above, 0o755)
        swap = (f"cd {above}; end=$(($(date +%s) + 120)); while [ $(date +%s) -lt $end ]; do "
                "mv planted cache; mv cache planted; ln -s planted cache; rm cache; mv real cache; mv cache real; "
                "done 2>/dev/null")
        attacker = subprocess.Popen(["/bin/sh", "-c", swap], user=OTHER_UID, group=OTHER_UID, extra_groups=[])
        try:
            time.sleep(0.2)
            code = LOAD_REPEATEDLY.replace("sys.argv[1]", repr(NIGHTLY)).replace("sys.argv[2]", "'300'")
            result = run_python(code, TORCH_DLPACK_BRIDGE_BUILD="0",
                                TORCH_DLPACK_BRIDGE_CACHE=os.path.join(above, "cache"))
        finally:
            attacker.kill()
            attacker.wait()
        assert result.returncode == 0, result.stderr[-3000:]
        assert json.loads(result.stdout.splitlines()[-1]) == {"ImportError": 300}
        assert not os.path.exists(marker), "another user's library ran in this user's process"
    finally:
        shutil.rmtree(above, ignore_errors=True)


def test_a_cached_library_vanishing_between_the_loaders_steps_is_an_import_error(cache):
    """The user's own cache, its library removed and put back (as a cleanup or another build would) while the
    loader loads 300 times: every outcome is a load or an ImportError naming the path, never a bare OSError
    such as FileNotFoundError."""
    import threading

    folder, name = nightly_folder(cache)
    planted = plant(folder, name + ".keep")  # no table symbols: loading it is an ImportError (building off)
    for path in (cache["TORCH_DLPACK_BRIDGE_CACHE"], folder):
        os.chmod(path, 0o700)
    target, stop = os.path.join(folder, name), threading.Event()

    def churn():
        while not stop.is_set():
            shutil.copy(planted, target + ".tmp")
            os.replace(target + ".tmp", target)
            os.remove(target)

    thread = threading.Thread(target=churn)
    thread.start()
    try:
        code = LOAD_REPEATEDLY.replace("sys.argv[1]", repr(NIGHTLY)).replace("sys.argv[2]", "'300'")
        result = run_python(code, TORCH_DLPACK_BRIDGE_BUILD="0", **cache)
    finally:
        stop.set()
        thread.join()
    assert result.returncode == 0, result.stderr[-3000:]
    assert set(json.loads(result.stdout.splitlines()[-1])) <= {"ImportError"}, result.stdout


# ---- a torch newer than the wheel covers ------------------------------------------------------------

def wheel_covering(tmp_path, *covered):
    """A copy of the package laid out as a wheel installs it (sources in _csrc), whose record says it covers
    `covered` and which ships no library for the running torch: the site folder to put first on the path."""
    package = tmp_path / "site" / "torch_dlpack_bridge"
    shutil.copytree(os.path.dirname(torch_dlpack_bridge.__file__), package,
                    ignore=shutil.ignore_patterns("__pycache__", "libtdb_*", _build.VERSIONS_RECORD))
    if not (package / "_csrc").is_dir():  # a checkout keeps them beside the package; a wheel ships them in it
        shutil.copytree(_build.sources_dir(), package / "_csrc")
    (package / "_lib").mkdir(exist_ok=True)
    (package / "_lib" / _build.VERSIONS_RECORD).write_text("".join(f"{v}\n" for v in covered))
    return str(tmp_path / "site")


def main_job(site, tmp_path):
    """`python -m torch_dlpack_bridge` with `site` first on the path and a compiler that records each call."""
    compiler = tmp_path / "c++"
    compiler.write_text(f"#!/bin/sh\necho x >> {tmp_path / 'compiled'}\nexit 1\n")
    compiler.chmod(0o755)
    return subprocess.run([sys.executable, "-m", "torch_dlpack_bridge"], capture_output=True, text=True, timeout=300,
                          cwd=str(tmp_path), env=python_env(PYTHONPATH=site, CXX=str(compiler),
                                                            TORCH_DLPACK_BRIDGE_CACHE=str(tmp_path / "cache")))


def test_main_job_on_a_torch_newer_than_the_wheel_says_in_one_line_torchs_table_is_in_use_and_the_ways_out(tmp_path):
    """The wheel covers up to the minor before the running torch: the main job builds nothing, and says in one
    line that torch's own table is in use, why, and the two ways out."""
    if torch_dlpack_bridge._native_capsule() is None:
        pytest.skip("this torch has no table of its own")
    major, minor = _build.version_tuple(torch.__version__)
    result = main_job(wheel_covering(tmp_path, "2.4.1", f"{major}.{minor - 1}.0"), tmp_path)
    lines = result.stdout.splitlines()  # the verdict alone, wrapped at 100 columns
    assert result.returncode == 0 and all(len(line) <= 100 for line in lines), result
    assert lines[0].startswith("verdict: ") and all(line.startswith("  ") for line in lines[1:]), result
    line = " ".join(line.strip() for line in lines)
    assert line.startswith(f"verdict: torch's own DLPack exchange table is in use: torch {torch.__version__} is "
                           f"newer than this wheel covers (torch 2.4.1 to {major}.{minor - 1}.0); next: ")
    assert "upgrade torch_dlpack_bridge (`pip install -U torch_dlpack_bridge`" in line
    assert "`python -m torch_dlpack_bridge build`" in line
    assert not (tmp_path / "compiled").exists() and "building the exchange table" not in result.stderr


def test_main_job_on_a_torch_newer_than_the_wheel_uses_the_table_the_build_command_built(tmp_path, monkeypatch):
    """Once `python -m torch_dlpack_bridge build` has put a library in the cache (copied there here), the main
    job loads it and says where it came from."""
    major, minor = _build.version_tuple(torch.__version__)
    site = wheel_covering(tmp_path, f"{major}.{minor - 1}.0")
    monkeypatch.setenv(_loader.CACHE_ENV, str(tmp_path / "cache"))
    folder = _loader.cache_dir(_build.installed_torch(), torch_dlpack_bridge.__version__)
    os.close(_cache.open_folder(_loader.cache_root(), os.path.basename(folder), create=True))
    shutil.copy(torch_dlpack_bridge.build_info()["library"], folder)
    result = main_job(site, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "table library built at an earlier import" in result.stdout and "is in use" not in result.stdout
    assert not (tmp_path / "compiled").exists()


def test_import_torch_on_a_torch_newer_than_the_wheel_names_the_upgrade_first(tmp_path):
    """The autoload hook's one notice where torch, with a table of its own, is a minor newer than the wheel
    covers: `pip install -U torch_dlpack_bridge` first (a release follows each torch minor), then the build
    command; nothing is compiled."""
    if torch_dlpack_bridge._native_capsule() is None:
        pytest.skip("this torch has no table of its own")
    major, minor = _build.version_tuple(torch.__version__)
    site = wheel_covering(tmp_path, "2.4.1", f"{major}.{minor - 1}.0")
    compiler = tmp_path / "c++"
    compiler.write_text(f"#!/bin/sh\necho x >> {tmp_path / 'compiled'}\nexit 1\n")
    compiler.chmod(0o755)
    result = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True, timeout=300,
                            cwd=str(tmp_path), env=python_env(PYTHONPATH=site, CXX=str(compiler),
                                                              TORCH_DLPACK_BRIDGE_AUTOLOAD="1",
                                                              TORCH_DLPACK_BRIDGE_CACHE=str(tmp_path / "cache")))
    notice = [line for line in result.stderr.splitlines() if line.startswith("torch_dlpack_bridge:")]
    assert result.returncode == 0 and len(notice) == 1, result.stderr[-3000:]
    assert notice[0].startswith(f"torch_dlpack_bridge: torch {torch.__version__} keeps its own DLPack exchange "
                                f"table: it is newer than this wheel covers (torch 2.4.1 to {major}.{minor - 1}.0); "
                                f"`pip install -U torch_dlpack_bridge` gets the release that covers it"), notice
    assert notice[0].index("pip install -U") < notice[0].index("`python -m torch_dlpack_bridge build`")
    assert not (tmp_path / "compiled").exists()


def test_a_torch_the_wheel_covers_or_a_wheel_without_a_record_is_not_newer(monkeypatch, tmp_path):
    target = _build.installed_torch()
    major, minor = target.minor
    monkeypatch.setattr(_loader, "SHIPPED_DIR", str(tmp_path))
    assert _loader.newer_than_shipped(target) is None  # no record: an sdist install, nothing to compare
    (tmp_path / _build.VERSIONS_RECORD).write_text(f"2.4.1\n{major}.{minor}.0\n")
    assert _loader.newer_than_shipped(target) is None
    (tmp_path / _build.VERSIONS_RECORD).write_text(f"{major}.{minor - 1}.0\n2.4.1\n")
    assert f"(torch 2.4.1 to {major}.{minor - 1}.0)" in _loader.newer_than_shipped(target)
