"""The autoload hook (torch_dlpack_bridge_autoload.pth + _torch_dlpack_bridge_autoload): installing the package
is enough; the table is published the moment torch finishes importing, whatever imports it first. Each
scenario runs in a fresh interpreter, as a user's process starts: through site-packages, not this checkout.
"""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap

import pytest

import processes
import torch_dlpack_bridge

HOOK_PTH, HOOK_START = "torch_dlpack_bridge_autoload.pth", "torch_dlpack_bridge_autoload.start"
HOOK_MODULE = "_torch_dlpack_bridge_autoload"

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


def user_env(**env):
    """The environment of a user's process (nothing of this test run's own), plus `env`."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_DLPACK_BRIDGE_", "PYTHONPATH"))}
    full_env.update(env)
    return full_env


def fresh(code, **env):
    """Runs `code` in a new interpreter started as a user's would be (site-packages processed, no PYTHONPATH
    pointing at this checkout); returns the completed process."""
    return subprocess.run([sys.executable, "-c", STATE + textwrap.dedent(code)], capture_output=True, text=True,
                          env=user_env(**env), cwd=os.path.dirname(sys.executable), timeout=300)


def fresh_json(code, **env):
    result = fresh(code, **env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1]), result.stderr


def site_packages():
    site = os.path.dirname(os.path.dirname(os.path.abspath(torch_dlpack_bridge.__file__)))
    if not os.path.isfile(os.path.join(site, HOOK_PTH)):  # an editable install maps the package elsewhere
        site = sysconfig.get_paths()["purelib"]
    return site


def test_hook_files_are_installed_at_the_top_of_site_packages():
    site = site_packages()
    for name in (HOOK_PTH, HOOK_START, HOOK_MODULE + ".py"):
        assert os.path.isfile(os.path.join(site, name)), name
    with open(os.path.join(site, HOOK_PTH)) as f:
        assert f.read().strip() == f"import {HOOK_MODULE}; {HOOK_MODULE}.install()"
    with open(os.path.join(site, HOOK_START)) as f:  # PEP 829: one "module:callable" entry point
        assert f.read().strip() == f"{HOOK_MODULE}:install"


def test_start_file_entry_point_and_pth_line_together_install_the_hook_once():
    """CPython >= 3.15 runs the .start entry point (and skips the .pth import line), older ones the .pth line;
    an interpreter that ran both would still have one hook. Run here by hand, in an interpreter started with
    -S (no site processing), in the order a 3.15 site.py would."""
    site = site_packages()
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(torch_dlpack_bridge.__file__)))
    with open(os.path.join(site, HOOK_START)) as f:
        entry = f.read().strip()
    with open(os.path.join(site, HOOK_PTH)) as f:
        pth_line = f.read().strip()
    code = STATE + textwrap.dedent(f"""
        import pkgutil
        sys.path[:0] = [{site!r}, {package_root!r}]  # the package's folder differs under an editable install
        pkgutil.resolve_name({entry!r})()
        exec({pth_line!r})
        hooks = [type(f).__name__ for f in sys.meta_path if type(f).__module__ == {HOOK_MODULE!r}]
        import torch
        print(json.dumps(dict(state(), hooks=hooks)))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_DLPACK_BRIDGE_", "PYTHONPATH"))}
    result = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env,
                            cwd=os.path.dirname(sys.executable), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    state = json.loads(result.stdout.splitlines()[-1])
    assert state["hooks"] == ["_PublishAfterTorch"] and published_ours(state), state


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


def test_a_failure_under_warnings_as_errors_never_breaks_importing_torch():
    """`python -W error`: the report goes to stderr instead of raising inside torch's import (which would leave
    torch unimportable in the process)."""
    code = ("import torch; print(json.dumps(state())); import torch as again; "
            "print(again.ones(2).sum().item())")
    result = fresh(code, TORCH_DLPACK_BRIDGE_PREFER="nonsense", PYTHONWARNINGS="error")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-1] == "2.0"
    reports = [line for line in result.stderr.splitlines() if "was not published when torch was imported" in line]
    assert len(reports) == 1 and reports[0].startswith("RuntimeWarning: ") and "prefer must be" in reports[0]


def test_warnings_as_errors_still_publish_when_nothing_fails():
    state, stderr = fresh_json("import torch; print(json.dumps(state()))", PYTHONWARNINGS="error")
    assert published_ours(state), stderr[-3000:]


@pytest.mark.parametrize("prefer, published", [("bridge", True), ("nonsense", False)])
def test_pytest_suite_with_filterwarnings_error_collects_and_runs(tmp_path, prefer, published):
    """A user's suite with `filterwarnings = error` whose test module imports torch: it collects and passes
    whether or not the table could be published."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nfilterwarnings = error\n")
    (tmp_path / "test_user.py").write_text(textwrap.dedent(f"""
        import torch

        def test_torch_works_and_the_table_is_as_expected():
            assert torch.ones(3).sum().item() == 3.0
            assert hasattr(torch.Tensor, "__c_dlpack_exchange_api__") is {published}
            assert ("torch_dlpack_bridge" in __import__("sys").modules) is {published}
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_DLPACK_BRIDGE_", "PYTHONPATH"))}
    env["TORCH_DLPACK_BRIDGE_PREFER"] = prefer
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                            capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "1 passed" in result.stdout


def test_find_spec_before_the_import_leaves_the_hook_armed():
    """transformers, accelerate and others check `importlib.util.find_spec("torch")` before importing it."""
    state, _ = fresh_json("""
        import importlib.util
        for _ in range(3):
            assert importlib.util.find_spec("torch") is not None
        import torch
        print(json.dumps(state()))
    """)
    assert published_ours(state), state


def test_find_spec_from_other_threads_before_and_during_the_import():
    state, _ = fresh_json("""
        import importlib.util, threading
        stop = threading.Event()
        def look_up():
            while not stop.is_set():
                importlib.util.find_spec("torch")
        threads = [threading.Thread(target=look_up) for _ in range(2)]
        for t in threads:
            t.start()
        import time; time.sleep(0.05)  # lookups before the import too
        import torch
        stop.set()
        for t in threads:
            t.join()
        print(json.dumps(state()))
    """)
    assert published_ours(state), state


def test_a_failed_import_of_torch_leaves_the_hook_armed_for_the_retry():
    """torch's import fails on a missing dependency (typing_extensions, imported before torch._C), the user
    fixes it, and imports torch again."""
    state, _ = fresh_json("""
        sys.modules["typing_extensions"] = None  # makes `import typing_extensions` raise ImportError
        try:
            import torch
        except ImportError:
            pass
        else:
            raise AssertionError("torch imported without typing_extensions")
        assert "torch" not in sys.modules and "torch_dlpack_bridge" not in sys.modules
        del sys.modules["typing_extensions"]
        import torch
        print(json.dumps(state()))
    """)
    assert published_ours(state), state


def test_after_the_import_the_hook_leaves_no_trace_on_sys_meta_path_or_torchs_loader():
    state, _ = fresh_json("""
        import importlib.machinery
        armed = [type(f).__name__ for f in sys.meta_path if type(f).__module__ == "_torch_dlpack_bridge_autoload"]
        import torch
        print(json.dumps(dict(state(), armed=armed,
            left=[type(f).__name__ for f in sys.meta_path if type(f).__module__ == "_torch_dlpack_bridge_autoload"],
            loader=type(torch.__loader__).__name__, spec_loader=type(torch.__spec__.loader).__name__)))
    """)
    assert published_ours(state), state
    assert state["armed"] == ["_PublishAfterTorch"] and state["left"] == []
    assert state["loader"] == state["spec_loader"] == "SourceFileLoader"


def test_a_failed_publish_also_leaves_sys_meta_path():
    result = fresh("""
        import torch
        print([type(f).__name__ for f in sys.meta_path if type(f).__module__ == "_torch_dlpack_bridge_autoload"])
    """, TORCH_DLPACK_BRIDGE_PREFER="nonsense")
    assert result.returncode == 0 and result.stdout.splitlines()[-1] == "[]", result.stderr[-3000:]


def test_a_loader_shared_with_other_modules_is_not_modified():
    """A finder (ahead of the default ones) whose loader object serves several modules: the hook wraps the
    spec's loader instead of patching that object, so only torch's import publishes."""
    state, _ = fresh_json("""
        import importlib.machinery, importlib.util
        class SharedLoader:
            def __init__(self):
                self.executed = []
            def create_module(self, spec):
                return None
            def exec_module(self, module):
                self.executed.append(module.__name__)
                if module.__name__ == "torch":
                    self.real.exec_module(module)
        shared = SharedLoader()
        class Finder:
            def find_spec(self, name, path=None, target=None):
                if name not in ("torch", "shared_loader_other"):
                    return None
                if name == "torch":
                    real = importlib.machinery.PathFinder.find_spec(name, path)
                    shared.real = real.loader
                    return importlib.util.spec_from_file_location(
                        name, real.origin, loader=shared,
                        submodule_search_locations=real.submodule_search_locations)
                return importlib.util.spec_from_loader(name, shared)
        sys.meta_path.insert(1, Finder())  # after the hook, before the default finders
        import torch
        import shared_loader_other
        print(json.dumps(dict(state(), patched="exec_module" in vars(shared), executed=shared.executed)))
    """)
    assert published_ours(state), state
    assert state["patched"] is False and state["executed"] == ["torch", "shared_loader_other"]


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


# ---- never worse than without it: a torch the wheel does not cover -------------------------------------

AS_UNCOVERED = textwrap.dedent('''
    """Started by the test (sitecustomize): makes the torch about to be imported report TDB_TEST_TORCH_VERSION (a
    nightly no shipped library covers) and, with TDB_TEST_NO_NATIVE=1, have no table of its own (as torch <=
    2.9), before the autoload hook sees it: a finder placed right after the hook's wraps torch's loader."""
    import os, sys

    class _AsUncovered:
        def find_spec(self, name, path=None, target=None):
            if name != "torch":
                return None
            for finder in sys.meta_path:
                if finder is self or type(finder).__name__ == "_PublishAfterTorch" or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
            real = spec.loader

            class Loader:
                def create_module(self, spec):
                    return real.create_module(spec)

                def exec_module(self, module):
                    real.exec_module(module)
                    module.__version__ = os.environ["TDB_TEST_TORCH_VERSION"]
                    if os.environ.get("TDB_TEST_NO_NATIVE") == "1" and "__dlpack_c_exchange_api__" in module.Tensor.__dict__:
                        delattr(module.Tensor, "__dlpack_c_exchange_api__")
                    if os.environ.get("TDB_TEST_SIGNAL_AT"):  # a test that stops the build at a forced moment
                        import tdb_signal_at

            spec.loader = Loader()
            return spec

    sys.meta_path.insert(1, _AsUncovered())
''')


@pytest.fixture
def uncovered(tmp_path):
    """Environment for fresh(): torch looks like a nightly the wheel does not cover, with an empty cache."""
    from test_loader import NIGHTLY

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(AS_UNCOVERED)
    return {"PYTHONPATH": str(site), "TDB_TEST_TORCH_VERSION": NIGHTLY,
            "TORCH_DLPACK_BRIDGE_CACHE": str(tmp_path / "cache")}


def counting_compiler(tmp_path, name="fake-c++", then="exit 1"):
    """A compiler that counts its calls in tmp_path/calls, then runs `then`."""
    script = tmp_path / name
    script.write_text(f"#!/bin/sh\necho x >> {tmp_path / 'calls'}\n{then}\n")
    script.chmod(0o755)
    return str(script)


def progress_lines(stderr):
    return [line for line in stderr.splitlines() if "building the exchange table" in line and ", about " in line]


def package_lines(stderr):
    """The lines of stderr that come from this package (its notices, warnings and the compiler output they quote)."""
    lines = stderr.splitlines()
    start = [i for i, line in enumerate(lines) if "torch_dlpack_bridge" in line]
    return lines[start[0]:] if start else []


def calls(tmp_path):
    path = tmp_path / "calls"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_hook_keeps_torchs_own_table_instead_of_compiling_says_so_once_and_publishes_once_built(uncovered, tmp_path):
    """On a torch with a table of its own that no library of ours is ready for, `import torch` compiles nothing
    (a compiler that would take 60 s is never called), keeps torch's table, and says so once per torch with the
    command that builds ours; once a library is in the cache, `import torch` publishes it."""
    import time

    from test_loader import NIGHTLY, nightly_folder

    if torch_dlpack_bridge._native_capsule() is None:
        pytest.skip("this torch has no table of its own")
    env = dict(uncovered, CXX=counting_compiler(tmp_path, then="sleep 60"))
    notices = []
    for _ in range(2):
        start = time.monotonic()
        state, stderr = fresh_json("import torch; print(json.dumps(state()))", **env)
        assert time.monotonic() - start < 30 and calls(tmp_path) == 0
        assert not state["bridge_imported"] and state["capsule"] is not None and state["int"] is None, state  # torch's
        assert progress_lines(stderr) == [] and "RuntimeWarning" not in stderr, stderr
        notices.append(package_lines(stderr))
    assert len(notices[0]) == 1 and notices[1] == [], notices
    assert f"torch {NIGHTLY} keeps its own DLPack exchange table" in notices[0][0]
    assert "`python -m torch_dlpack_bridge build` builds it once into" in notices[0][0]
    # What `python -m torch_dlpack_bridge build` leaves behind (a real build: test_build_command_...).
    folder, name = nightly_folder({"TORCH_DLPACK_BRIDGE_CACHE": uncovered["TORCH_DLPACK_BRIDGE_CACHE"]})
    shutil.copy(torch_dlpack_bridge.build_info()["library"], os.path.join(folder, name))
    state, stderr = fresh_json("import torch, torch_dlpack_bridge as b; print(json.dumps(dict(state(), "
                               "origin=b.build_info()['origin'])))", **env)
    assert published_ours(state) and state["origin"] == "cache" and calls(tmp_path) == 0, stderr


def test_explicit_import_and_the_build_command_still_build(uncovered, tmp_path):
    """The user asked: `python -m torch_dlpack_bridge build` builds into the cache (a real build) and says so;
    then `import torch` alone publishes the library from the cache."""
    result = subprocess.run([sys.executable, "-m", "torch_dlpack_bridge", "build"], capture_output=True, text=True,
                            env=dict({k: v for k, v in os.environ.items() if not k.startswith(("TORCH_DLPACK_BRIDGE_",
                                                                                           "PYTHONPATH"))},
                                     **uncovered),
                            cwd=os.path.dirname(sys.executable), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(progress_lines(result.stderr)) == 1 and ": built, " in result.stdout, result
    state, stderr = fresh_json("import torch; print(json.dumps(state()))", **uncovered)
    assert published_ours(state) and progress_lines(stderr) == [], stderr


def test_failed_build_is_remembered_until_the_compiler_changes_or_the_build_command_retries(uncovered, tmp_path):
    """Where the hook builds (torch has no table of its own), a failing compiler is tried once, and the process
    whose build failed says so: later processes neither build nor repeat it (an explicit import raises the
    recorded failure, naming build.log and the retry command); another compiler, or
    `python -m torch_dlpack_bridge build`, tries again."""
    env = dict(uncovered, TDB_TEST_NO_NATIVE="1", CXX=counting_compiler(tmp_path))
    code = "import torch; print(json.dumps(state()))"
    state, stderr = fresh_json(code, **env)
    first = calls(tmp_path)
    assert first > 0 and state["capsule"] is None and "failed" in stderr and "first import only" not in stderr
    for _ in range(2):
        state, stderr = fresh_json(code, **env)
        assert calls(tmp_path) == first and state["capsule"] is None, "rebuilt although it failed before"
        assert package_lines(stderr) == [], stderr
    explicit = fresh("import torch_dlpack_bridge", **dict(env, TORCH_DLPACK_BRIDGE_AUTOLOAD="0"))
    assert "is not tried again" in explicit.stderr and calls(tmp_path) == first
    assert "`python -m torch_dlpack_bridge build` retries" in explicit.stderr and "build.log" in explicit.stderr
    other = counting_compiler(tmp_path, name="other-c++")
    fresh_json(code, **dict(env, CXX=other))
    second = calls(tmp_path)
    assert second > first, "another compiler is tried"
    fresh_json(code, **dict(env, CXX=other))
    assert calls(tmp_path) == second, "and its failure is remembered too"
    retry = subprocess.run([sys.executable, "-m", "torch_dlpack_bridge", "build"], capture_output=True, text=True,
                           env=dict({k: v for k, v in os.environ.items() if not k.startswith(("TORCH_DLPACK_BRIDGE_",
                                                                                          "PYTHONPATH"))}, **env),
                           cwd=os.path.dirname(sys.executable), timeout=300)
    assert calls(tmp_path) > second and retry.returncode != 0 and "failed" in retry.stderr, retry.stderr[-2000:]


@pytest.mark.parametrize("why", ["switch", "compiler"])
def test_a_build_that_cannot_start_is_said_once_per_torch_at_import_torch(uncovered, tmp_path, why):
    """Where torch has no table and no build can start (TORCH_DLPACK_BRIDGE_BUILD=0, or no C++ compiler),
    `import torch` says why in one line, once per torch (recorded in the cache), not in every process; an
    explicit import still raises it."""
    env = dict(uncovered, TDB_TEST_NO_NATIVE="1")
    if why == "switch":
        env["TORCH_DLPACK_BRIDGE_BUILD"] = "0"
        text = "forbids building one"
    else:
        env["CXX"] = str(tmp_path / "no-such-c++")
        text = "needs a C++ compiler, which was not found"
    lines = []
    for _ in range(3):
        state, stderr = fresh_json("import torch; print(json.dumps(state()))", **env)
        assert state["capsule"] is None, state
        lines.append(package_lines(stderr))
    assert len(lines[0]) == 1 and text in lines[0][0] and lines[1:] == [[], []], lines
    explicit = fresh("import torch_dlpack_bridge", **dict(env, TORCH_DLPACK_BRIDGE_AUTOLOAD="0"))
    assert explicit.returncode != 0 and text in explicit.stderr, explicit.stderr[-2000:]


def test_after_a_failed_build_command_import_torch_says_one_line_once_and_keeps_torchs_table(uncovered, tmp_path):
    """Where torch keeps its own table, a failure recorded by `python -m torch_dlpack_bridge build` is not
    re-warned at every `import torch` with the compiler's command: over three imports, one line in all, saying
    that the build failed, where its log is, and the command that tries again; torch's table stays published."""
    if torch_dlpack_bridge._native_capsule() is None:
        pytest.skip("this torch has no table of its own")
    env = dict(uncovered, CXX=counting_compiler(tmp_path))
    built = subprocess.run([sys.executable, "-m", "torch_dlpack_bridge", "build"], capture_output=True, text=True,
                           env=user_env(**env), cwd=os.path.dirname(sys.executable), timeout=300)
    assert built.returncode == 1 and "failed" in built.stderr and calls(tmp_path) > 0, built.stderr[-2000:]
    tried = calls(tmp_path)
    lines = []
    for _ in range(3):
        state, stderr = fresh_json("import torch; print(json.dumps(state()))", **env)
        assert not state["bridge_imported"] and state["capsule"] is not None and state["int"] is None, state
        lines += package_lines(stderr)
    assert len(lines) == 1 and calls(tmp_path) == tried, lines
    assert "failed on" in lines[0] and "build.log" in lines[0], lines
    assert lines[0].endswith("`python -m torch_dlpack_bridge build` tries again."), lines


def notices_of_import_torch(uncovered, tmp_path, cache, imports):
    """The package's lines of each of `imports` fresh `import torch` with the cache `cache`, each of which kept
    torch's own table and called no compiler."""
    env = dict(uncovered, TORCH_DLPACK_BRIDGE_CACHE=str(cache), CXX=counting_compiler(tmp_path))
    per_import = []
    for _ in range(imports):
        state, stderr = fresh_json("import torch; print(json.dumps(state()))", **env)
        assert not state["bridge_imported"] and state["capsule"] is not None and calls(tmp_path) == 0, state
        per_import.append(package_lines(stderr))
    return per_import


def test_an_unusable_cache_is_named_with_its_mode_once_per_process_and_never_claimed_said_once(uncovered, tmp_path):
    """A cache folder others may write cannot be used: each `import torch` (nothing can be recorded there) says
    so in one line, naming the folder and its mode, where the build would go instead and what to set; no line
    claims to be said once."""
    if torch_dlpack_bridge._native_capsule() is None:
        pytest.skip("this torch has no table of its own")
    cache = tmp_path / "shared-cache"
    cache.mkdir()
    cache.chmod(0o777)
    per_import = notices_of_import_torch(uncovered, tmp_path, cache, imports=3)
    assert [len(lines) for lines in per_import] == [1, 1, 1], per_import
    line = per_import[0][0]
    assert f"{cache} is writable by group or others (mode 777)" in line, line
    assert "temporary folder for that one process only" in line and "TORCH_DLPACK_BRIDGE_CACHE" in line, line
    assert "once for this torch" not in line and "said once" not in line, line


def test_a_cache_root_in_which_no_folder_can_be_made_is_named_by_import_torch_in_each_process(uncovered, tmp_path):
    """A cache root in which the cache's folder cannot be made (TORCH_DLPACK_BRIDGE_CACHE=/sys, or a folder this
    user may not write): each `import torch` says so in one line, naming the folder and what to set (nothing can
    be recorded there, so no process is silent)."""
    if torch_dlpack_bridge._native_capsule() is None:
        pytest.skip("this torch has no table of its own")
    if os.geteuid() == 0:  # root may write any folder, but makes none in /sys
        if not os.path.ismount("/sys"):
            pytest.skip("no /sys mounted, and root may make a folder anywhere else")
        root = "/sys"
    else:
        root = tmp_path / "read-only"
        root.mkdir()
        root.chmod(0o500)
    per_import = notices_of_import_torch(uncovered, tmp_path, root, imports=2)
    assert [len(lines) for lines in per_import] == [1, 1], per_import
    line = per_import[1][0]
    assert f"this package's cache cannot be used (cannot use {root}/torch" in line, line
    assert "temporary folder for that one process only" in line and "TORCH_DLPACK_BRIDGE_CACHE" in line, line


def default_signals():
    """preexec_fn: SIGINT, SIGHUP and SIGTERM with their default disposition in the child, as in a job a terminal
    starts. A harness run in the background (`cmd &`) passes SIGINT on ignored, and CPython then installs no
    KeyboardInterrupt handler; one run under `nohup` passes SIGHUP on ignored, and a build then rightly ignores a
    closed terminal (under `nohup`, the build-SIGHUP case below waited 120 s for a build that went on)."""
    import signal

    for number in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(number, signal.SIG_DFL)


def wait_for(condition, what, seconds=120):
    """Polls `condition` until it holds; fails naming `what` after `seconds` (generous: a loaded machine is slow)."""
    import time

    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not after {seconds} s"
        time.sleep(0.05)


def interrupted_during_the_build(uncovered, tmp_path, code):
    """Runs `code` where the hook builds (torch without a table of its own, a compiler that would take 60 s) and
    sends SIGINT once a compiler has started; returns (exit status, stdout, stderr, seconds)."""
    import signal
    import time

    env = dict(uncovered, TDB_TEST_NO_NATIVE="1", CXX=counting_compiler(tmp_path, then="sleep 60"))
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_DLPACK_BRIDGE_", "PYTHONPATH"))}
    full_env.update(env)
    start = time.monotonic()
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=full_env, cwd=os.path.dirname(sys.executable),
                               preexec_fn=default_signals)
    seen = []
    try:
        for line in process.stderr:
            seen.append(line)
            if "building the exchange table" in line:
                break
        wait_for(lambda: calls(tmp_path) > 0, "a compiler started")
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:  # a failure above leaves neither the process nor its pipes behind
        if process.poll() is None:
            process.kill()
            process.communicate()
    return process.returncode, out, "".join(seen) + err, time.monotonic() - start


def test_ctrl_c_during_the_build_at_import_leaves_torch_working_and_is_raised_after_the_import(uncovered, tmp_path):
    """SIGINT while the hook builds: the compilers are stopped, torch stays imported and works (a second
    `import torch` too, and a clean exit), the user is told, and the KeyboardInterrupt is raised by
    `import torch`, once torch is in sys.modules."""
    code = textwrap.dedent("""
        import sys, time
        try:
            import torch
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                time.sleep(0.05)
            print("not interrupted")
        except KeyboardInterrupt:
            print("interrupted", "torch" in sys.modules)
        import torch
        print("again", torch.ones(2).sum().item(), torch.Tensor.__dict__.get("__dlpack_c_exchange_api__"))
    """)
    status, out, err, seconds = interrupted_during_the_build(uncovered, tmp_path, code)
    assert status == 0, err[-3000:]
    assert out.splitlines() == ["interrupted True", "again 2.0 None"], (out, err[-3000:])
    assert "KeyboardInterrupt" in err and "the interrupt is raised when `import torch` returns" in err
    assert "Only a single TORCH_LIBRARY" not in err and seconds < 60


def test_ctrl_c_during_the_build_ends_a_process_with_nothing_after_the_import_as_any_ctrl_c_does(uncovered, tmp_path):
    """A script whose last line is `import torch`, interrupted while the hook builds, ends as CPython ends on any
    uncaught Ctrl-C: the KeyboardInterrupt's traceback, the atexit handlers registered before (they were all
    skipped: the hook re-sent SIGINT from an atexit handler of its own), the file written before flushed (it
    was empty), and killed by SIGINT (as it was; status 0 before that)."""
    import signal

    written = tmp_path / "written"
    code = textwrap.dedent(f"""
        import atexit
        atexit.register(print, "atexit handler ran")
        log = open({str(written)!r}, "w")
        log.write("written before import torch\\n")  # buffered, never closed: flushed at exit
        print("printed before import torch")
        import torch
    """)
    status, out, err, seconds = interrupted_during_the_build(uncovered, tmp_path, code)
    assert status == -signal.SIGINT, (status, err[-3000:])
    assert out.splitlines() == ["printed before import torch", "atexit handler ran"], (out, err[-3000:])
    assert written.read_text() == "written before import torch\n"
    assert err.rstrip().endswith("KeyboardInterrupt") and 'line 7, in <module>' in err, err[-3000:]
    assert "the interrupt is raised when `import torch` returns" in err and seconds < 60


@pytest.mark.parametrize("first", ["torch", "package"])
def test_import_torch_returns_with_the_table_published_in_every_thread(first):
    """One thread imports torch while another imports the package (either first, repeated): whichever import of
    torch returns, in either thread, the table that stays is already there (importlib's deadlock avoidance
    once handed the hook a half-imported package, which published nothing)."""
    code = """
        import threading, time
        seen, errors = {}, []
        def run(what, delay):
            try:
                time.sleep(delay)
                if what == "package":
                    import torch_dlpack_bridge
                import torch
                get = ctypes.pythonapi.PyCapsule_GetPointer
                get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
                seen[what] = get(torch.Tensor.__dict__["__dlpack_c_exchange_api__"], b"dlpack_exchange_api")
            except BaseException as error:
                errors.append(repr(error))
        threads = [threading.Thread(target=run, args=("torch", DELAY_TORCH)),
                   threading.Thread(target=run, args=("package", DELAY_PACKAGE))]
        for t in threads: t.start()
        for t in threads: t.join()
        print(json.dumps(dict(state(), seen=seen, errors=errors)))
    """.replace("DELAY_TORCH", "0" if first == "torch" else "0.3").replace(
        "DELAY_PACKAGE", "0.3" if first == "torch" else "0")
    for _ in range(4):
        state, stderr = fresh_json(code)
        assert state["errors"] == [] and published_ours(state), stderr[-3000:]
        assert state["seen"] == {"torch": state["ours"], "package": state["ours"]}, state


def test_threads_importing_torch_and_the_package_at_once_all_get_the_failed_builds_import_error(uncovered, tmp_path):
    """Two threads each import torch, then the package, and ask build_info(), where the build fails. The hook defers
    inside one thread's `import torch` (torch has its own table), and CPython hands the other thread, importing the
    package at that moment, the module object of that deferred import. Its first call builds as an explicit import
    does and raises the build's ImportError. Before, it raised KeyError('cxx11_abi') (3 of 3 runs)."""
    code = """
        import threading
        outcomes, go = {}, threading.Event()
        def run(name):
            go.wait()
            try:
                import torch
                import torch_dlpack_bridge
                torch_dlpack_bridge.build_info()
                outcomes[name] = "returned"
            except BaseException as error:
                failed = isinstance(error, ImportError) and "building the exchange table" in str(error)
                outcomes[name] = "the build's ImportError" if failed else repr(error)
        threads = [threading.Thread(target=run, args=(name,)) for name in "ab"]
        for t in threads: t.start()
        go.set()
        for t in threads: t.join()
        print(json.dumps(outcomes))
    """
    env = dict(uncovered, CXX=counting_compiler(tmp_path))
    for _ in range(3):
        outcomes, stderr = fresh_json(code, **env)
        assert outcomes == {"a": "the build's ImportError", "b": "the build's ImportError"}, (outcomes, stderr[-3000:])


# ---- `python -m torch_dlpack_bridge build`, however Python is started ----------------------------------

def test_the_build_command_retries_a_recorded_failure_however_python_is_started(uncovered, tmp_path):
    """The retry is decided by the command's own arguments, not by reading how the interpreter was started: with
    a failure recorded, each way of running the module calls the compiler again and prints its new failure (not
    the recorded one), exit status 1; `--help` after `build` builds nothing."""
    env = user_env(**uncovered, TDB_TEST_NO_NATIVE="1", CXX=counting_compiler(tmp_path))
    fresh_json("import torch; print(json.dumps(state()))", **uncovered, TDB_TEST_NO_NATIVE="1", CXX=env["CXX"])
    tried = calls(tmp_path)
    assert tried > 0
    for start in (["-m"], ["-um"], ["-Bm"], ["-X", "dev", "-m"], ["-Wd", "-m"]):
        run = subprocess.run([sys.executable, *start, "torch_dlpack_bridge", "build"], capture_output=True,
                             text=True, env=env, cwd=os.path.dirname(sys.executable), timeout=300)
        assert run.returncode == 1 and calls(tmp_path) > tried, (start, run.stderr[-2000:])
        assert len(progress_lines(run.stderr)) == 1 and "is not tried again" not in run.stderr, (start, run.stderr)
        tried = calls(tmp_path)
    helped = subprocess.run([sys.executable, "-um", "torch_dlpack_bridge", "build", "--help"], capture_output=True,
                            text=True, env=env, cwd=os.path.dirname(sys.executable), timeout=300)
    assert helped.returncode == 0 and "usage:" in helped.stdout and calls(tmp_path) == tried, helped.stderr[-2000:]


def test_a_package_run_with_dash_m_that_imports_this_one_gets_the_table_at_import(tmp_path):
    """Only this package's own __main__ loads the table after reading its arguments: another package run with
    `python -m` whose import imports this one finds the table published by that import."""
    package = tmp_path / "other_tool"
    package.mkdir()
    (package / "__init__.py").write_text("import torch_dlpack_bridge\nPUBLISHED = torch_dlpack_bridge.active_provider()\n")
    (package / "__main__.py").write_text("import json, other_tool\nprint(json.dumps(other_tool.PUBLISHED))\n")
    run = subprocess.run([sys.executable, "-m", "other_tool"], capture_output=True, text=True,
                         env=user_env(PYTHONPATH=str(tmp_path)), cwd=tmp_path, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert set(json.loads(run.stdout.splitlines()[-1]).values()) == {"torch_dlpack_bridge"}, run.stdout


# ---- a build that is stopped, however, leaves no compiler running and no folder behind -------------------

def slow_compiler(tmp_path):
    """A compiler that takes 600 s as g++ would: a driver that starts a child of its own (g++ starts cc1plus, as
    and ld, in its process group), records its pid (the group's: the build starts each command as a group's
    leader) in tmp_path/pids, and waits for the child."""
    script = tmp_path / "slow-c++"
    script.write_text(f"#!/bin/sh\nsleep 600 &\necho $$ >> {tmp_path / 'pids'}\nwait\n")
    script.chmod(0o755)
    return str(script)


def started(tmp_path):
    """The process groups of the fake compilers that ran (each recorded its pid, its group's id)."""
    path = tmp_path / "pids"
    return [int(pid) for pid in path.read_text().split()] if path.exists() else []


def left_running(tmp_path):
    """The processes of the fake compilers' groups still running: a driver, or a child it started."""
    return processes.in_groups(started(tmp_path))


def build_then_stop(tmp_path, env, command, how):
    """Runs `command` in a session of its own (as a terminal or a job runner starts a job), waits until two
    compilers run, stops it `how` ("SIGTERM" or "SIGHUP" or "SIGINT" to its process group, "SIGKILL" to the
    Python process alone: its parent's death; "SIGALRM" to `timeout` alone: its time is up; "none": it stops by
    itself), and returns its exit status and the processes of the compilers' groups still running 60 s after it
    ended (at once when none is: they would run 600 s)."""
    import signal
    import time

    with open(tmp_path / "stderr", "w") as stderr:
        process = subprocess.Popen(command, env=user_env(**env), stdout=subprocess.DEVNULL, stderr=stderr,
                                   cwd=os.path.dirname(sys.executable), start_new_session=True,
                                   preexec_fn=default_signals)
    try:
        wait_for(lambda: len(started(tmp_path)) >= 2 or process.poll() is not None, "two compilers started")
        # Both are known to the watchdog: a command runs only once the builder has told it (RUN_WHEN_TOLD).
        assert len(started(tmp_path)) >= 2, (tmp_path / "stderr").read_text()[-3000:]
        if how in ("SIGKILL", "SIGALRM"):
            process.send_signal(getattr(signal, how))
        elif how != "none":
            os.killpg(process.pid, getattr(signal, how))
        status = process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    deadline = time.monotonic() + 60
    while left_running(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = left_running(tmp_path)
    processes.kill_groups(started(tmp_path))  # the test's own clean-up: the fake compilers it started
    return status, left


def leftovers(*folders):
    """Build folders (tdb-build-*) and private build folders (torch_dlpack_bridge-*) left in `folders`."""
    found = []
    for folder in folders:
        for root, dirs, _ in os.walk(folder):
            found += [os.path.join(root, d) for d in dirs if d.startswith(("tdb-build-", "torch_dlpack_bridge-"))]
    return found


def assert_no_leftovers_soon(*folders, seconds=30):
    """No build folder left in `folders` once the watchdog is done: it removes them after killing the compilers,
    so the folders may outlive the compilers by a moment (waited for up to `seconds`)."""
    import time

    deadline = time.monotonic() + seconds
    while leftovers(*folders) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leftovers(*folders) == []


BUILD_COMMAND = [sys.executable, "-m", "torch_dlpack_bridge", "build"]
IMPORT_ONLY = [sys.executable, "-c", "import torch_dlpack_bridge"]


@pytest.mark.parametrize("command, how, status", [
    (BUILD_COMMAND, "SIGTERM", -15),  # `timeout`, `kill`, a job runner
    (BUILD_COMMAND, "SIGHUP", -1),  # a closed terminal
    (BUILD_COMMAND, "SIGINT", -2),  # Ctrl-C
    (BUILD_COMMAND, "SIGKILL", -9),  # the builder's own death, whatever its cause
    # The build at import, on a torch without a table, under `timeout`: its time is up once the compilers run
    # (GNU timeout takes SIGALRM as its timer; a fixed 4 s was not always enough to start them on a busy machine).
    (["timeout", "600"] + IMPORT_ONLY, "SIGALRM", 124),
    (IMPORT_ONLY, "SIGTERM", -15),
], ids=["build-SIGTERM", "build-SIGHUP", "build-SIGINT", "build-SIGKILL-python-only", "import-timeout",
        "import-SIGTERM"])
def test_a_stopped_build_leaves_no_compiler_running_and_no_folder(uncovered, tmp_path, command, how, status):
    """However a build is stopped, from the command or at import, its compilers (600 s each) are gone soon after
    (waited for up to 60 s) and its temporary folder is removed; the exit status is the signal's."""
    env = dict(uncovered, TDB_TEST_NO_NATIVE="1", CXX=slow_compiler(tmp_path), TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    code, left = build_then_stop(tmp_path, env, command, how)
    assert (code, left) == (status, []), (tmp_path / "stderr").read_text()[-3000:]
    assert_no_leftovers_soon(uncovered["TORCH_DLPACK_BRIDGE_CACHE"], tmp_path / "tmp")


# Imported by the test's sitecustomize once torch is (before any build): sends TDB_TEST_SIGNAL_AT's signal
# ("MOMENT:SIGNAL") to this process's group the first time the build reaches MOMENT, as a terminal or a job runner
# would send it then ("stopping-twice": the first two times). "compiler" moments: the fake compiler sends it once
# it runs (fake_compiler).
SIGNAL_AT = textwrap.dedent("""
    import os, signal, subprocess, sys

    moment, name = os.environ["TDB_TEST_SIGNAL_AT"].split(":")
    build, loader = sys.modules["torch_dlpack_bridge._build"], sys.modules["torch_dlpack_bridge._loader"]
    sent = []

    def send(*args, when):
        if len(sent) < (2 if moment == "stopping-twice" else 1) and when(*args):
            sent.append(name)  # first: a KeyboardInterrupt may come as soon as the signal is sent
            os.killpg(0, getattr(signal, name))

    def at(holder, attr, before=False, when=lambda *args: True):
        real = getattr(holder, attr)
        def forced(*args, **kwargs):
            if before:
                send(*args, when=when)
            result = real(*args, **kwargs)
            if not before:
                send(*args, when=when)
            return result
        setattr(holder, attr, forced)

    linking = lambda process, *rest: "-shared" in process.args
    if moment in ("lock", "private-folder"):  # the build lock held or the private folder made, nothing started
        at(loader, "progress")
    elif moment == "folder":  # the watchdog started, the build folder being made
        at(build.Commands, "remove_if_abandoned", before=True)
    elif moment == "link":  # the link command told to run, the builder about to wait for it (in its main thread)
        at(subprocess.Popen, "__enter__", before=True, when=linking)
        at(subprocess.Popen, "wait", before=True, when=linking)
    elif moment == "installed":  # the library renamed into the cache, the build folder not yet removed
        at(build, "fsync", when=os.path.isdir)
    elif moment.startswith("stopping"):  # a compiler failed: the build is stopping the others
        at(build, "stop", before=True)
    elif moment == "private-loaded":  # the private library built and loaded, its folder not yet removed
        at(loader, "open_cached")
""")


def fake_compiler(tmp_path, how, signal_name):
    """A compiler that records its pid (its process group's) in tmp_path/pids and does `how` (check, compile,
    link: the header check, a source, the link): "ok" (the link copies this process's library), "slow" (starts
    a child of its own that takes 600 s, as g++ starts cc1plus, and waits for it), "signal" (the same child, then
    sends `signal_name` to the builder's process group, the first one to run, and waits), "fail" (exits 1 once a
    slow one runs)."""
    steps = {"ok": 'case $kind in link) cp {library} "$out";; compile) : > "$out";; esac; exit 0',
             "slow": "sleep 600 & touch {tmp}/slow; wait",
             "signal": "sleep 600 & mkdir {tmp}/signalled 2>/dev/null && kill -s {signal} -- -$PPID; wait",
             "fail": "while [ ! -e {tmp}/slow ]; do sleep 0.05; done; exit 1"}
    check, compile, link = (steps[step].format(library=torch_dlpack_bridge.build_info()["library"], tmp=tmp_path,
                                               signal=signal_name[3:]) for step in how)
    script = tmp_path / "fake-c++"
    script.write_text(f"""#!/bin/sh
echo $$ >> {tmp_path / 'pids'}
for arg; do [ "$previous" = -o ] && out=$arg; previous=$arg; done
case " $* " in *" -shared "*) kind=link;; *" -fsyntax-only "*) kind=check;; *) kind=compile;; esac
case $kind in check) {check};; compile) {compile};; link) {link};; esac
""")
    script.chmod(0o755)
    return str(script)


SLOW, FAST = ("slow",) * 3, ("ok",) * 3
MOMENTS = {"lock": SLOW, "folder": SLOW, "compiler": ("signal", "signal", "slow"), "link": ("ok", "ok", "slow"),
           "installed": FAST, "stopping": ("fail", "slow", "slow"), "stopping-twice": ("fail", "slow", "slow"),
           "private-folder": SLOW, "private-compiler": ("signal", "signal", "slow"), "private-loaded": FAST}
SIGNALLED = [(moment, how) for moment in MOMENTS for how in ("SIGHUP", "SIGTERM", "SIGINT")
             if moment != "stopping-twice" or how == "SIGINT"]  # a second SIGHUP or SIGTERM finds no process


@pytest.mark.parametrize("moment, how", SIGNALLED, ids=["-".join(case) for case in SIGNALLED])
def test_a_build_ends_on_a_stopping_signal_at_each_moment_leaving_no_compiler_and_no_folder(uncovered, tmp_path,
                                                                                           moment, how):
    """`python -m torch_dlpack_bridge build`, or a build into a private folder at import (the cache unusable),
    gets SIGHUP, SIGTERM or SIGINT (to its process group) at one forced moment (a second Ctrl-C as the first
    is being handled: stopping-twice): the build ends, killed by that signal, no compiler runs on (600 s ones;
    waited for up to 60 s) and no build or private folder is left."""
    import signal

    if moment.startswith("stopping") and (os.cpu_count() or 1) < 2:  # the build runs os.cpu_count() jobs
        pytest.skip("a failing and a running compiler at once need two jobs")
    private = moment.startswith("private")
    cache = tmp_path / ("shared-cache" if private else "cache")
    cache.mkdir()
    if private:
        cache.chmod(0o777)
    (tmp_path / "site" / "tdb_signal_at.py").write_text(SIGNAL_AT)
    env = dict(uncovered, TDB_TEST_NO_NATIVE="1", CXX=fake_compiler(tmp_path, MOMENTS[moment], how),
               TMPDIR=str(tmp_path / "tmp"), TORCH_DLPACK_BRIDGE_CACHE=str(cache), TDB_TEST_SIGNAL_AT=f"{moment}:{how}")
    (tmp_path / "tmp").mkdir()
    with open(tmp_path / "stderr", "w") as stderr:
        process = subprocess.Popen(IMPORT_ONLY if private else BUILD_COMMAND, env=user_env(**env),
                                   stdout=subprocess.DEVNULL, stderr=stderr, cwd=os.path.dirname(sys.executable),
                                   start_new_session=True, preexec_fn=default_signals)
    try:
        status = process.wait(timeout=120)  # at once; a build that goes on would take 600 s
        assert status == -getattr(signal, how), (tmp_path / "stderr").read_text()[-3000:]
        wait_for(lambda: not left_running(tmp_path), "the compilers and their children stopped", seconds=60)
        assert_no_leftovers_soon(cache, tmp_path / "tmp")
    finally:  # the test's own clean-up: the builder, and the fake compilers it started
        if process.poll() is None:
            kill_group(process)
        processes.kill_groups(started(tmp_path))


# A process that builds the table at `import torch_dlpack_bridge` while another of its threads forks (as a
# fork-method multiprocessing pool would) at one forced moment of the build, argv[1]: "lock" (the build lock
# held, nothing being started: as the progress line is printed), "watchdog" or "compiler" (as the build starts
# its watchdog or its first compiler: inside subprocess's start of that program, with the pipe through which it
# learns that the program started open), or "none". The forked child forks again, and both live on (600 s) with
# all they inherited but stdin, stdout and stderr. The forking thread writes the child's pid to argv[2]; the
# build thread goes on once the fork is done, or once the package holds it off until the moment has passed
# (its at-fork handler is then at the top of the forking thread's stack). The import's ImportError is printed.
FORK_AT = """
import multiprocessing, os, subprocess, sys, threading, time
import _posixsubprocess
moment, report = sys.argv[1], sys.argv[2]
asked, forked, building = threading.Event(), threading.Event(), threading.Event()

def live_on():
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the test reads this process's output to its end
        os.dup2(null, fd)
    os.fork()
    time.sleep(600)

def forker():
    asked.wait()
    child = multiprocessing.get_context("fork").Process(target=live_on, daemon=True)
    child.start()
    with open(report, "w") as f:
        f.write(str(child.pid))
    forked.set()

fork_thread = threading.Thread(target=forker, daemon=True)
fork_thread.start()

def fork_now():
    asked.set()
    while not forked.wait(0.01):
        frame = sys._current_frames().get(fork_thread.ident)
        if frame is not None and frame.f_globals.get("__name__", "").startswith("torch_dlpack_bridge"):
            return

class Stderr:
    def __init__(self, stream):
        self.stream = stream
    def write(self, text):
        if "building the exchange table" in text and not building.is_set():
            building.set()
            if moment == "lock":
                fork_now()
        return self.stream.write(text)
    def __getattr__(self, name):
        return getattr(self.stream, name)

sys.stderr = Stderr(sys.stderr)
holder, name = (subprocess, "_fork_exec") if hasattr(subprocess, "_fork_exec") else (_posixsubprocess, "fork_exec")
real_fork_exec = getattr(holder, name)
program = {"watchdog": sys.executable, "compiler": os.environ.get("CXX")}.get(moment)

def fork_exec(args, *rest):
    if building.is_set() and not asked.is_set() and program in map(os.fsdecode, args):
        fork_now()
    return real_fork_exec(args, *rest)

setattr(holder, name, fork_exec)
start = time.monotonic()
try:
    import torch_dlpack_bridge
except ImportError as error:
    print("ImportError after", round(time.monotonic() - start), "s:", str(error).splitlines()[0], flush=True)
"""


def fork_during_the_build(uncovered, tmp_path, moment, compiler, **options):
    """Starts FORK_AT (in a session of its own: the test kills it and what it forked as one process group)."""
    env = dict(uncovered, TDB_TEST_NO_NATIVE="1", CXX=compiler, TORCH_DLPACK_BRIDGE_AUTOLOAD="0",
               TMPDIR=str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return subprocess.Popen([sys.executable, "-c", "import torch\n" + FORK_AT, moment, str(tmp_path / "child")],
                            env=user_env(**env), text=True, cwd=os.path.dirname(sys.executable),
                            start_new_session=True, **options)


def outcome(process, seconds=240):
    """What `process` printed (stdout, stderr); "no outcome after N s" on stderr where it hangs."""
    try:
        return process.communicate(timeout=seconds)  # about 5 s; a forked process would keep it for ever
    except subprocess.TimeoutExpired:
        return "", f"no outcome after {seconds} s"


def kill_group(process):
    """The test's own clean-up: `process` and what it forked (its process group)."""
    import signal

    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


@pytest.mark.parametrize("moment", ["watchdog", "compiler"])
def test_a_failed_build_raises_its_import_error_while_a_process_forked_during_it_lives(uncovered, tmp_path, moment):
    """A thread forks a process that lives on (a fork-method multiprocessing worker) exactly while the build
    starts its watchdog or a compiler; the compiler fails. The ImportError comes (it never did: the forked
    process held the pipe through which subprocess learns that the program started, so the build waited for
    its end-of-file for ever, holding the build lock)."""
    compiler = counting_compiler(tmp_path, then="echo 'error: fake compiler' >&2; exit 1")
    process = fork_during_the_build(uncovered, tmp_path, moment, compiler, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)
    try:
        out, err = outcome(process)
    finally:
        kill_group(process)
    assert (tmp_path / "child").exists(), err[-3000:]  # the fork happened during the build
    assert "ImportError after" in out and "building the exchange table" in out, (out, err[-3000:])


def lock_free(cache):
    """Whether the cache folder's build lock in `cache` is free of both kinds a process may hold: a POSIX record lock
    (lockf) and an flock (independent of each other on Linux)."""
    import fcntl
    import glob

    (path,) = glob.glob(os.path.join(cache, "*", ".lock"))
    fd = os.open(path, os.O_RDWR)
    try:
        for lock in (fcntl.lockf, fcntl.flock):
            try:
                lock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return False
        return True
    finally:
        os.close(fd)


def waiting_for_the_lock(cache):
    """Whether a process waits for the build lock in `cache` (/proc/locks lists each waiter as "-> ...")."""
    import glob

    inode = os.stat(glob.glob(os.path.join(cache, "*", ".lock"))[0]).st_ino
    with open("/proc/locks") as f:
        return any("->" in line and f":{inode} " in line for line in f)


def test_an_import_waiting_for_a_failed_build_gets_its_error_at_once_while_a_process_forked_during_it_lives(
        uncovered, tmp_path):
    """Process A forks a process that lives on while it holds the build lock; B imports during A's build and waits
    for the lock; A's compiler then fails. B raises the recorded failure at once and the lock is free (B waited
    as long as A's forked process lived: A's lock was an flock, which belongs to the open file that the forked
    process shared, so A's closing it did not release it)."""
    compiler = counting_compiler(tmp_path, then=f"while [ ! -e {tmp_path / 'go'} ]; do sleep 0.05; done\n"
                                                "echo 'error: fake compiler' >&2; exit 1")
    first = fork_during_the_build(uncovered, tmp_path, "lock", compiler, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
    second = None
    try:
        wait_for(lambda: calls(tmp_path) > 0 or first.poll() is not None, "A's compiler started")
        second = fork_during_the_build(uncovered, tmp_path, "none", compiler, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE)
        cache = uncovered["TORCH_DLPACK_BRIDGE_CACHE"]
        wait_for(lambda: waiting_for_the_lock(cache) or second.poll() is not None, "B waiting for the lock")
        (tmp_path / "go").touch()
        first_out, first_err = outcome(first)
        tried = calls(tmp_path)
        out, err = outcome(second)
    finally:
        (tmp_path / "go").touch()
        kill_group(first)
        if second is not None:
            kill_group(second)
    assert (tmp_path / "child").exists() and "ImportError after" in first_out, (first_out, first_err[-3000:])
    assert "ImportError after" in out and "is not tried again" in out, (out, err[-3000:])
    assert calls(tmp_path) == tried > 0
    assert lock_free(cache), "A's forked process still holds the build lock"


def test_a_builder_killed_while_a_process_forked_during_its_build_lives_leaves_no_compiler_running(uncovered,
                                                                                                     tmp_path):
    """A process forked exactly while the build starts a compiler, then the builder's death (SIGKILL): the
    watchdog still stops the compilers and removes the build's folder, as it does without the fork (the forked
    process holds neither the watchdog's stdin open nor the builder's start of that compiler)."""
    with open(tmp_path / "stderr", "w") as stderr:
        process = fork_during_the_build(uncovered, tmp_path, "compiler", slow_compiler(tmp_path),
                                        stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        wait_for(lambda: ((tmp_path / "child").exists() and started(tmp_path)) or process.poll() is not None,
                 "a fork while a compiler starts")
        assert (tmp_path / "child").exists(), (tmp_path / "stderr").read_text()[-3000:]
        process.kill()
        process.wait()
        wait_for(lambda: not left_running(tmp_path), "the compilers stopped by the watchdog", seconds=50)
        assert_no_leftovers_soon(uncovered["TORCH_DLPACK_BRIDGE_CACHE"], tmp_path / "tmp")
    finally:
        kill_group(process)
        processes.kill_groups(started(tmp_path))  # the test's own clean-up: the fake compilers it started


def test_a_private_build_stopped_by_sigterm_leaves_nothing(uncovered, tmp_path):
    """Where the cache cannot be used the build goes into a private temporary folder: a SIGTERM to the job
    removes that folder too."""
    cache = tmp_path / "shared-cache"
    cache.mkdir()
    cache.chmod(0o777)
    env = dict(uncovered, TDB_TEST_NO_NATIVE="1", CXX=slow_compiler(tmp_path), TMPDIR=str(tmp_path / "tmp"),
               TORCH_DLPACK_BRIDGE_CACHE=str(cache))
    (tmp_path / "tmp").mkdir()
    code, left = build_then_stop(tmp_path, env, IMPORT_ONLY, "SIGTERM")
    assert (code, left) == (-15, []), (tmp_path / "stderr").read_text()[-3000:]
    assert "private temporary folder" in (tmp_path / "stderr").read_text()
    assert_no_leftovers_soon(cache, tmp_path / "tmp")


def test_a_build_past_its_time_limit_leaves_no_compiler_running_and_no_folder(uncovered, tmp_path):
    env = dict(uncovered, TDB_TEST_NO_NATIVE="1", CXX=slow_compiler(tmp_path), TMPDIR=str(tmp_path / "tmp"),
               TORCH_DLPACK_BRIDGE_BUILD_TIMEOUT="2")
    (tmp_path / "tmp").mkdir()
    code, left = build_then_stop(tmp_path, env, BUILD_COMMAND, "none")
    stderr = (tmp_path / "stderr").read_text()
    assert (code, left) == (1, []) and "timed out after 2 s" in stderr, stderr[-3000:]
    assert_no_leftovers_soon(uncovered["TORCH_DLPACK_BRIDGE_CACHE"], tmp_path / "tmp")
