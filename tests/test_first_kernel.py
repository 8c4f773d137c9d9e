"""The tutorial "Your first kernel" (docs/guides/first-kernel.md) is examples/first_kernel, run as a reader runs it.

The page includes the folder's files whole (the pybind11 source, CMakeLists.txt, the build commands and the Python
session) and the nanobind source as its diff from the pybind11 one (docs/conf.py writes it); this test copies the folder outside the checkout, runs build.sh there (the page's commands: a compiler
command for pybind11, CMake for nanobind, both finding the headers through the installed package), then runs
session.txt as a doctest against each build: the outputs and error messages the page shows are what they print
(wrapped: NORMALIZE_WHITESPACE; nanobind's messages differ from pybind11's as the page says).
"""
import os
import re
import subprocess
import sys

import pytest

from example_packages import FIRST_KERNEL_FILES as FILES, build_first_kernel_once, first_kernel_env as env

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "examples", "first_kernel")
PAGE = os.path.join(REPO, "docs", "guides", "first-kernel.md")
NANOBIND_IMPORT = ">>> import first_kernel_nb as first_kernel"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_first_kernel_once(tmp_path_factory)


def doctest(session, path):
    res = subprocess.run([sys.executable, "-m", "doctest", str(session)], cwd=session.parent, capture_output=True,
                         text=True, env=dict(env(), PYTHONPATH=str(path)), timeout=300)
    assert res.returncode == 0 and res.stdout == "", res.stdout + res.stderr


def test_page_includes_the_example_whole():
    with open(PAGE) as f:
        page = f.read()
    for name in FILES:
        if name != "first_kernel_nb.cpp":
            assert f"```{{literalinclude}} ../../examples/first_kernel/{name}\n" in page, name
    assert "```{literalinclude} ../_build/generated/first_kernel_nb.diff\n" in page
    with open(os.path.join(REPO, "docs", "conf.py")) as f:
        assert '"first_kernel.cpp", "first_kernel_nb.cpp"' in f.read()  # the diff the page includes


def test_build_needs_no_checkout():
    with open(os.path.join(EXAMPLE, "build.sh")) as f:
        script = f.read()
    assert "TDB_INCLUDE" not in script and "include/torch_dlpack_bridge" not in script
    assert "python -m torch_dlpack_bridge --includes" in script
    with open(os.path.join(EXAMPLE, "CMakeLists.txt")) as f:
        assert '-m torch_dlpack_bridge --cmake-dir' in f.read()  # the recipe asks the installed package


def test_session_runs_against_the_pybind11_build(built):
    doctest(built / "session.txt", built)


def test_session_shows_the_real_messages():
    with open(os.path.join(EXAMPLE, "session.txt")) as f:
        text = f.read()
    assert "ELLIPSIS" not in text  # without it, doctest compares each message whole


def test_session_runs_against_the_nanobind_build(built):
    text = (built / "session.txt").read_text()
    line = re.search(r"^>>> import first_kernel  # .*$", text, re.M)
    assert line and NANOBIND_IMPORT[4:] in line.group(0)  # the page says how to switch
    # What the page says of nanobind's messages: the function's name in the signature, the arguments' types.
    with open(PAGE) as f:
        page = f.read()
    assert "(`1. l2norm(x: ...`)" in page and "(`Invoked with types: torch.Tensor`)" in page
    text = re.sub(r"^Invoked with: .*$", "Invoked with types: torch.Tensor", text.replace("    1. (x:", "    1. l2norm(x:"),
                  flags=re.M)
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


def test_page_shows_the_refusal_that_the_nanobind_build_raises(built):
    """The page's "Read an error" message, but for its wrapped signatures: the reasons that the modules' last
    line, tdb::explain_refusals(m), adds are the real ones."""
    with open(PAGE) as f:
        page = f.read()
    shown = re.search(r"```text\n(scale_\(\): incompatible .*?)\n```", page, re.S).group(1).splitlines()
    call = "first_kernel_nb.scale_(torch.ones(3, dtype=torch.int32), 1.0)"
    assert f"`{call.replace('_nb', '')}`" in page
    code = f"import torch, first_kernel_nb\ntry:\n    {call}\nexcept TypeError as e:\n    print(e)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env=dict(env(), PYTHONPATH=str(built / "build")))
    real = res.stdout.splitlines()
    unwrapped = [line for line in shown if not line.startswith(("    1. ", "    2. ", "        "))]
    assert "    overload 2: argument 'x': expected dtype float64, got int32" in unwrapped
    assert unwrapped == [line for line in real if not line.startswith(("    1. ", "    2. "))], res.stdout + res.stderr
