"""The tutorial "Your first kernel" (docs/guides/first-kernel.md) is examples/first_kernel, run as a reader runs it.

The page includes the folder's files whole (the two .cpp files, CMakeLists.txt, the build commands and the Python
session); this test copies the folder outside the checkout, runs build.sh there (the page's commands: a compiler
command for pybind11, CMake for nanobind, both finding the headers through the installed package), then runs
session.txt as a doctest against each build: the outputs and error messages the page shows are what they print.
"""
import os
import re
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "examples", "first_kernel")
PAGE = os.path.join(REPO, "docs", "guides", "first-kernel.md")
FILES = ["first_kernel.cpp", "first_kernel_nb.cpp", "CMakeLists.txt", "build.sh", "session.txt"]
NANOBIND_IMPORT = ">>> import first_kernel_nb as first_kernel"


def env():
    # `python` in build.sh is this interpreter, as it is the reader's after activating their environment.
    return dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
                CMAKE_BUILD_PARALLEL_LEVEL="1")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    missing = [tool for tool in ("c++", "cmake") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{missing} not installed")
    folder = tmp_path_factory.mktemp("first_kernel")
    for name in FILES:
        shutil.copy(os.path.join(EXAMPLE, name), folder / name)
    res = subprocess.run(["bash", "build.sh"], cwd=folder, env=env(), capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return folder


def doctest(session, path):
    res = subprocess.run([sys.executable, "-m", "doctest", str(session)], cwd=session.parent, capture_output=True,
                         text=True, env=dict(env(), PYTHONPATH=str(path)), timeout=300)
    assert res.returncode == 0 and res.stdout == "", res.stdout + res.stderr


def test_page_includes_the_example_whole():
    with open(PAGE) as f:
        page = f.read()
    for name in FILES:
        assert f"```{{literalinclude}} ../../examples/first_kernel/{name}\n" in page, name


def test_build_needs_no_checkout():
    with open(os.path.join(EXAMPLE, "build.sh")) as f:
        script = f.read()
    assert "TDB_INCLUDE" not in script and "include/torch_dlpack_bridge" not in script
    assert "python -m torch_dlpack_bridge --includes" in script and "--cmake-dir" in script


def test_session_runs_against_the_pybind11_build(built):
    doctest(built / "session.txt", built)


def test_session_runs_against_the_nanobind_build(built):
    text = (built / "session.txt").read_text()
    line = re.search(r"^>>> import first_kernel  # .*$", text, re.M)
    assert line and NANOBIND_IMPORT[4:] in line.group(0)  # the page says how to switch
    nanobind = built / "session_nanobind.txt"
    nanobind.write_text(text.replace(line.group(0), NANOBIND_IMPORT))
    doctest(nanobind, built / "build")


def test_sources_differ_only_in_the_binding_lines():
    with open(os.path.join(EXAMPLE, "first_kernel.cpp")) as f:
        pyb = f.read().splitlines()
    with open(os.path.join(EXAMPLE, "first_kernel_nb.cpp")) as f:
        nb = f.read().splitlines()
    differing = [(a, b) for a, b in zip(pyb, nb) if a != b]
    assert len(pyb) == len(nb) and len(differing) <= 8, differing
