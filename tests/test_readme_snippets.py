"""The README's consumer snippets marked `<!-- quoted from PATH -->` are verbatim excerpts of PATH, so they stay
real code (complete where the README says so) as the examples change."""
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUOTE = re.compile(r"<!-- quoted from (\S+) -->\n```\w*\n(.*?)\n```", re.S)


def quotes():
    with open(os.path.join(REPO, "README.md")) as f:
        return QUOTE.findall(f.read())


def test_readme_has_a_quoted_snippet_per_flavour():
    paths = {path for path, _ in quotes()}
    assert {"examples/axpy_kernels/axpy_kernels.cpp", "examples/axpy_pybind11/axpy_pybind11.cpp",
            "examples/axpy_compile/axpy_compile/ops.py",
            "examples/axpy_nanobind/axpy_nanobind.cpp", "examples/axpy_nanobind/CMakeLists.txt"} <= paths


@pytest.mark.parametrize("path,snippet", quotes(), ids=[p for p, _ in quotes()])
def test_quoted_snippet_is_verbatim(path, snippet):
    with open(os.path.join(REPO, path)) as f:
        source = f.read()
    assert snippet in source, f"README snippet is not (or no longer) a verbatim excerpt of {path}"


def test_complete_quotes_are_whole_files():
    # The README says these are the whole file: the pybind11 example source and its setup.py.
    for path, snippet in quotes():
        if path in ("examples/axpy_pybind11/axpy_pybind11.cpp", "examples/axpy_pybind11/setup.py"):
            with open(os.path.join(REPO, path)) as f:
                assert snippet == f.read().rstrip("\n")
