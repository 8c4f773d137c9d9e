"""Builds the example packages (examples/axpy_*) the way a user does, with their own `pip install`.

Each example is copied to a temporary directory and installed with
`pip install --no-build-isolation --no-deps --target DIR` (no download, no change to the environment);
the tests import it from DIR.
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


def import_from(directory, name):
    """Imports module `name` from `directory` (only)."""
    sys.path.insert(0, directory)
    try:
        return __import__(name)
    finally:
        sys.path.remove(directory)


def shared_objects(site, name):
    """The compiled extension files of module `name` in an install directory."""
    return [os.path.join(site, f) for f in os.listdir(site) if f.startswith(name + ".") and f.endswith(".so")]
