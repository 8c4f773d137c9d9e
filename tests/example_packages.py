"""Builds the example packages (examples/axpy_*) the way a user does, with their own `pip install`.

Each example is copied to a temporary directory and installed with
`pip install --no-build-isolation --no-deps --target DIR` (no download, no change to the environment);
the tests import it from DIR. examples/first_kernel is built by its build.sh, as the tutorial says.
"""
import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(REPO, "examples")


def pip_install(example, workdir, python=sys.executable, env=None):
    """Installs examples/<example> into workdir/site with `python -m pip`; returns that directory."""
    src = os.path.join(str(workdir), "src")
    site = os.path.join(str(workdir), "site")
    shutil.copytree(os.path.join(EXAMPLES, example), src, ignore=shutil.ignore_patterns("build", "*.egg-info", "*.so"))
    cmd = [python, "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-deps", "--target", site, src]
    run_env = dict(os.environ, MAX_JOBS="1", CMAKE_BUILD_PARALLEL_LEVEL="1", **(env or {}))
    res = subprocess.run(cmd, capture_output=True, text=True, env=run_env, timeout=900)
    assert res.returncode == 0, f"pip install {example} failed:\n{res.stdout}\n{res.stderr}"
    return site


_INSTALLED = {}


def install_once(example, tmp_path_factory):
    """pip_install(example) once per test session (tests/test_bindings.py and tests/test_stubs.py share it);
    returns the install directory."""
    if example not in _INSTALLED:
        _INSTALLED[example] = pip_install(example, tmp_path_factory.mktemp(example))
    return _INSTALLED[example]


def cmake_build_once(example, tmp_path_factory):
    """examples/<example> copied outside the checkout and built with its CMakeLists.txt, as its comment says
    (`cmake -S . -B build && cmake --build build`, with this interpreter as CMake's Python), once per test session;
    returns the build folder, where the module is. Skips where cmake is missing."""
    import pytest

    key = example + " (CMake)"
    if key not in _INSTALLED:
        if shutil.which("cmake") is None:
            pytest.skip("cmake is not installed")
        src = tmp_path_factory.mktemp(example + "_cmake") / "src"
        shutil.copytree(os.path.join(EXAMPLES, example), src, ignore=shutil.ignore_patterns("build", "*.so"))
        env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL="1")
        for cmd in (["cmake", "-S", ".", "-B", "build", f"-DPython_EXECUTABLE={sys.executable}"],
                    ["cmake", "--build", "build"]):
            res = subprocess.run(cmd, cwd=src, env=env, capture_output=True, text=True, timeout=900)
            assert res.returncode == 0, f"{' '.join(cmd)} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
        _INSTALLED[key] = str(src / "build")
    return _INSTALLED[key]


FIRST_KERNEL_FILES = ["first_kernel.cpp", "first_kernel_nb.cpp", "CMakeLists.txt", "build.sh", "session.txt"]


def first_kernel_env():
    # `python` in build.sh is this interpreter, as it is the reader's after activating their environment.
    return dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
                CMAKE_BUILD_PARALLEL_LEVEL="1")


def build_first_kernel_once(tmp_path_factory):
    """examples/first_kernel copied outside the checkout and built by its build.sh, once per test session
    (tests/test_first_kernel.py and tests/test_stubs.py share it); returns the folder: first_kernel (pybind11)
    is in it, first_kernel_nb (nanobind) in its build/. Skips where c++ or cmake is missing."""
    import pytest

    if "first_kernel" not in _INSTALLED:
        missing = [tool for tool in ("c++", "cmake") if shutil.which(tool) is None]
        if missing:
            pytest.skip(f"{missing} not installed")
        folder = tmp_path_factory.mktemp("first_kernel")
        for name in FIRST_KERNEL_FILES:
            shutil.copy(os.path.join(EXAMPLES, "first_kernel", name), folder / name)
        res = subprocess.run(["bash", "build.sh"], cwd=folder, env=first_kernel_env(), capture_output=True,
                             text=True, timeout=900)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        _INSTALLED["first_kernel"] = folder
    return _INSTALLED["first_kernel"]


def import_from(directory, name):
    """Imports module `name` from `directory` (only)."""
    sys.path.insert(0, directory)
    try:
        return __import__(name)
    finally:
        sys.path.remove(directory)


def load_copy(directory, name):
    """Module `name` loaded from its extension file in `directory` as a module of its own, beside a module of that
    name imported from elsewhere (the same example built another way): not put in sys.modules."""
    import importlib.util

    path, = shared_objects(directory, name)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def shared_objects(site, name):
    """The compiled extension files of module `name` in an install directory."""
    return [os.path.join(site, f) for f in os.listdir(site) if f.startswith(name + ".") and f.endswith(".so")]
